import FlowJSON
import Foundation
import TestSupport
import Testing
@testable import FlowScopeCLI

/// config/grafana/flowscope-dashboard.json, its queries and the metric names they use.
enum GrafanaDashboard {
    static let path = packageRoot + "/config/grafana/flowscope-dashboard.json"

    static func load() throws -> JSONValue {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        // Strict JSON (Grafana's importer is not JSON5): Foundation must accept it too.
        _ = try JSONSerialization.jsonObject(with: data)
        return try JSON5.parse(String(decoding: data, as: UTF8.self))
    }

    /// Every `expr` anywhere in the dashboard.
    static func expressions(_ value: JSONValue) -> [String] {
        switch value {
        case .object(let o):
            return o.keys.sorted().flatMap { key -> [String] in
                if key == "expr", let s = o[key]?.stringValue { return [s] }
                return expressions(o[key] ?? .null)
            }
        case .array(let a): return a.flatMap(expressions)
        default: return []
        }
    }

    /// The `flowscope_*` names an expression uses.
    static func metricNames(_ expr: String) -> Set<String> {
        Set(expr.matches(of: /flowscope_[a-z_]+/).map { String($0.0) })
    }

    /// An expression with Grafana's variables replaced, ready for Prometheus.
    static func concrete(_ expr: String) -> String {
        expr.replacingOccurrences(of: "$__rate_interval", with: "10s").replacingOccurrences(of: "$__range", with: "1m")
            .replacingOccurrences(of: "$placement", with: ".*")
    }
}

@Suite("the Grafana dashboard", .ownThread)
struct GrafanaDashboardTests {
    @Test("config/grafana/flowscope-dashboard.json is JSON with a DS_PROMETHEUS input, and every metric it uses is one /metrics exports")
    func dashboardMatchesMetrics() throws {
        let dashboard = try GrafanaDashboard.load()
        let inputs = dashboard["__inputs"]?.arrayValue ?? []
        #expect(inputs.contains { $0["name"] == "DS_PROMETHEUS" && $0["type"] == "datasource" && $0["pluginId"] == "prometheus" })
        #expect(dashboard["title"] == "FlowScope")

        let panels = (dashboard["panels"]?.arrayValue ?? []).filter { $0["type"] != "row" }
        #expect(panels.count >= 10)
        for panel in panels {
            let title = panel["title"]?.stringValue ?? "?"
            let targets = panel["targets"]?.arrayValue ?? []
            #expect(panel["datasource"]?["uid"] == "${DS_PROMETHEUS}", "\(title)")
            #expect(targets.count >= 1, "\(title) has a query")
            for target in targets {
                #expect(target["datasource"]?["uid"] == "${DS_PROMETHEUS}", "\(title)")
            }
        }

        let expressions = GrafanaDashboard.expressions(dashboard)
        let used = expressions.reduce(into: Set<String>()) { $0.formUnion(GrafanaDashboard.metricNames($1)) }

        // What the metrics sink exports, from a live /metrics: families and their sample names.
        let fixture = try StackFixture()
        let text = try fixture.get("/metrics").text
        var exported: Set<String> = []
        for line in text.split(separator: "\n") where line.hasPrefix("# TYPE ") {
            let parts = line.split(separator: " ")
            let family = String(parts[2])
            exported.insert(family)
            if parts[3] == "histogram" { exported.formUnion([family + "_bucket", family + "_sum", family + "_count"]) }
        }
        #expect(!exported.isEmpty)
        for name in used.sorted() {
            #expect(exported.contains(name), "the dashboard uses \(name), which /metrics does not export")
        }
        // The panels the dashboard is for.
        for name in ["flowscope_fetches_total", "flowscope_fetch_duration_seconds_bucket", "flowscope_timeouts_total",
                     "flowscope_fallbacks_total", "flowscope_targeting_lost_total", "flowscope_preload_errors_total",
                     "flowscope_requests_total", "flowscope_events_dropped_total", "flowscope_sink_queue_depth"] {
            #expect(used.contains(name), "no panel shows \(name)")
        }
        #expect(expressions.contains { $0.contains("histogram_quantile(0.5,") && $0.contains("flowscope_fetch_duration_seconds_bucket") })
        #expect(expressions.contains { $0.contains("histogram_quantile(0.95,") && $0.contains("flowscope_fetch_duration_seconds_bucket") })
        #expect(expressions.contains { $0.contains("by (source)") && $0.contains("flowscope_fetches_total") })
        #expect(expressions.contains { $0.contains("reason") && $0.contains("flowscope_fallbacks_total") })

        let readme = try String(contentsOfFile: packageRoot + "/config/grafana/README.md", encoding: .utf8)
        #expect(readme.contains("Import") && readme.contains("flowscope-dashboard.json") && readme.contains("DS_PROMETHEUS"))
    }
}
