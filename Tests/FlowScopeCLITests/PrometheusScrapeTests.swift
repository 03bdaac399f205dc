import TestSupport
import FlowJSON
import Foundation
import Testing
@testable import FlowScopeCLI

/// A free TCP port on 127.0.0.1 (bound, read back, released).
func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw ClientError("socket failed") }
    defer { close(fd) }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = 0
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr)
    let bound = withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else { throw ClientError("bind failed: errno \(errno)") }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return Int(UInt16(bigEndian: addr.sin_port))
}

/// `.realTime`: no blocking or CPU-heavy test runs beside it, so a busy machine cannot stall its
/// polling against Prometheus's start-up and scrape interval.
@Suite("a real Prometheus scraping flowscope serve over TLS", .realTime)
struct PrometheusScrapeRealTimeTests {
    @Test("Prometheus scrapes /metrics with the generated certificate as its CA and serves our series from its query API")
    func scrape() async throws {
        let prometheus = "/usr/bin/prometheus", promtool = "/usr/bin/promtool"
        try #require(FileManager.default.isExecutableFile(atPath: prometheus), "prometheus is missing: apt-get install prometheus")
        try #require(FileManager.default.isExecutableFile(atPath: promtool), "promtool is missing: apt-get install prometheus")

        let fixture = try StackFixture()
        try #require(fixture.ingest(Events.lines(ServeMetricsTests.knownEvents)).status == 202)
        let certPath = try #require(fixture.stack.tls?.certPath)

        // The shipped scrape config, pointed at this stack and scraping every second, laid out as in the
        // repository: config/prometheus.yml beside the state directory .flowscope/ holding the certificate
        // (its relative ca_file resolves against the config file's directory).
        let shipped = try String(contentsOfFile: packageRoot + "/config/prometheus.yml", encoding: .utf8)
        let replacements = [("scrape_interval: 15s", "scrape_interval: 1s"), ("scrape_timeout: 10s", "scrape_timeout: 1s"),
                            ("\"localhost:8443\"", "\"127.0.0.1:\(fixture.port)\"")]
        var config = shipped
        for (from, to) in replacements {
            try #require(config.contains(from), "config/prometheus.yml no longer contains \(from)")
            config = config.replacingOccurrences(of: from, with: to)
        }
        let work = makeTemporaryDirectory("prometheus")
        defer { removeDirectory(work) }
        try FileManager.default.createDirectory(atPath: work + "/config", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: work + "/.flowscope/tls", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: certPath, toPath: work + "/.flowscope/tls/cert.pem")
        try write(config, to: work + "/config/prometheus.yml")
        let check = try runProcess(promtool, ["check", "config", work + "/config/prometheus.yml"])
        #expect(check.status == 0, "\(check.out)\(check.err)")

        let port = try freeLoopbackPort()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: prometheus)
        process.arguments = ["--config.file=\(work)/config/prometheus.yml", "--storage.tsdb.path=\(work)/data",
                             "--web.listen-address=127.0.0.1:\(port)", "--log.level=warn"]
        _ = FileManager.default.createFile(atPath: work + "/log", contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: work + "/log"))
        process.standardOutput = log
        process.standardError = log
        try process.run()
        let pid = process.processIdentifier
        // Whatever happens below, Prometheus does not outlive the test (and never runs past 60 s).
        let watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + 60, execute: watchdog)
        defer {
            watchdog.cancel()
            if process.isRunning {
                process.terminate()
                if !eventually(5, { !process.isRunning }) { kill(pid, SIGKILL) }
            }
            process.waitUntilExit()
            try? log.close()
        }

        /// The `data.result` of an instant query, once it is non-empty (polling up to `seconds`).
        func query(_ promQL: String, seconds: Double = 30) async throws -> [JSONValue] {
            let target = "/api/v1/query?query=" + (promQL.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? promQL)
            let deadline = Date().addingTimeInterval(seconds)
            var last = ""
            while Date() < deadline && process.isRunning {
                if let reply = try? TestConnection(port: port, tls: false, timeout: 2).request("GET", target) {
                    last = reply.text
                    let body = reply.json
                    if body["status"] == "success", let result = body["data"]?["result"]?.arrayValue, !result.isEmpty { return result }
                }
                try await Task.sleep(for: .milliseconds(200))
            }
            let logText = (try? String(contentsOfFile: work + "/log", encoding: .utf8)) ?? ""
            let state = process.isRunning ? "running" : "exited with \(process.terminationStatus) (\(process.terminationReason == .uncaughtSignal ? "signal" : "exit"))"
            throw ClientError("no result for \(promQL) within \(seconds) s; prometheus \(state); last answer: \(last); prometheus log: \(logText)")
        }

        let info = try await query("flowscope_build_info")
        #expect(info.count == 1)
        #expect(info.first?["metric"]?["version"] == .string(flowScopeVersion))
        #expect(info.first?["metric"]?["job"] == "flowscope")
        #expect(info.first?["value"]?[1] == "1")

        let up = try await query("up{job=\"flowscope\"}")
        #expect(up.first?["value"]?[1] == "1")
        let fetches = try await query("sum(flowscope_fetches_total{placement=\"p1\",source=\"network\"})")
        #expect(fetches.first?["value"]?[1] == "2")
        let histogram = try await query("sum(flowscope_fetch_duration_seconds_count{placement=\"p1\"})")
        #expect(histogram.first?["value"]?[1] == "3")

        // Every query of the Grafana dashboard is valid PromQL for this Prometheus.
        for expr in GrafanaDashboard.expressions(try GrafanaDashboard.load()) {
            let promQL = GrafanaDashboard.concrete(expr)
            let target = "/api/v1/query?query=" + (promQL.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? promQL)
            let reply = try TestConnection(port: port, tls: false, timeout: 5).request("GET", target)
            #expect(reply.status == 200 && reply.json["status"] == "success", "\(promQL): \(reply.text)")
        }
    }
}

extension JSONValue {
    /// Element `index` of an array value.
    subscript(index: Int) -> JSONValue? {
        guard let a = arrayValue, a.indices.contains(index) else { return nil }
        return a[index]
    }
}
