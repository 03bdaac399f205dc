import FlowJSON
import Foundation
import TestSupport
import Testing
@testable import FlowScopeCLI

/// The sample lines of one family in Prometheus text: `name{...} value` or `name value`.
func samples(_ text: String, _ name: String) -> [String] {
    text.split(separator: "\n").map(String.init).filter { $0.hasPrefix(name + "{") || $0.hasPrefix(name + " ") }
}

/// Parses `le="X"} N` bucket lines into (upper bound, cumulative count).
func buckets(_ lines: [String]) -> [(le: Double, count: Int)] {
    lines.compactMap { line in
        guard let start = line.range(of: "le=\""), let end = line[start.upperBound...].firstIndex(of: "\"") else { return nil }
        let leText = String(line[start.upperBound..<end])
        let le = leText == "+Inf" ? Double.infinity : Double(leText)
        guard let le, let count = line.split(separator: " ").last.flatMap({ Int($0) }) else { return nil }
        return (le, count)
    }
}

@Suite("flowscope serve /metrics after a known ingest", .ownThread)
struct ServeMetricsTests {
    /// Events with a known effect on every counter family.
    static let knownEvents: [JSONValue] = [
        Events.envelope("fetch.start", placement: "p1", attrs: ["call": "getFlow", "policy": "reloadRevalidatingCacheData", "loadTimeout": 5]),
        Events.fetchEnd("p1", source: "network", duration: 0.25),
        Events.fetchEnd("p1", source: "network", duration: 0.5),
        Events.fetchEnd("p1", source: "cache", duration: 0.0625, call: "getFlowForDefaultAudience"),
        Events.fetchEnd("p2", source: "fallbackFile", duration: 2, targetingLost: true, errorCode: "timeout"),
        Events.envelope("timeout", placement: "p2", attrs: ["stage": "targeted", "budget": 2, "elapsed": 2]),
        Events.envelope("fallback", placement: "p2", attrs: ["to": "fallbackFile", "reason": "timeout"]),
        Events.envelope("preload.end", attrs: ["succeeded": 1, "failed": ["p3": "http_503"], "duration": 0.5]),
        Events.envelope("request.end", placement: "p1", attrs: ["kind": "targeted", "outcome": "ok", "status": 200, "duration": 0.25, "bytes": 100]),
        Events.envelope("request.end", placement: "p2", attrs: ["kind": "targeted", "outcome": "timeout", "duration": 2, "bytes": 0]),
        Events.envelope("cache.hit", placement: "p1", attrs: ["layer": "memory", "age": 1, "audience": "All Users"]),
        Events.envelope("cache.miss", placement: "p1"),
        Events.envelope("cache.expired", placement: "p1", attrs: ["age": 100, "maxAge": 60]),
        Events.envelope("assets.prefetch.end", placement: "p1", attrs: ["count": 2, "bytes": 4096, "failed": 0, "duration": 0.5]),
        Events.envelope("sink.dropped", attrs: ["sink": "jsonl", "count": 7]),
    ]

    @Test("every counter, histogram and gauge equals what the ingested events imply")
    func exactValues() throws {
        let fixture = try StackFixture()
        try #require(fixture.ingest(Events.lines(Self.knownEvents)).status == 202)
        let text = try fixture.get("/metrics").text

        #expect(Set(samples(text, "flowscope_fetches_total")) == [
            #"flowscope_fetches_total{placement="p1",call="getFlow",source="network",outcome="success"} 2"#,
            #"flowscope_fetches_total{placement="p1",call="getFlowForDefaultAudience",source="cache",outcome="success"} 1"#,
            #"flowscope_fetches_total{placement="p2",call="getFlow",source="fallbackFile",outcome="error"} 1"#,
        ], "\(text)")
        #expect(Set(samples(text, "flowscope_fetch_duration_seconds_count")) == [
            #"flowscope_fetch_duration_seconds_count{placement="p1",source="cache"} 1"#,
            #"flowscope_fetch_duration_seconds_count{placement="p1",source="network"} 2"#,
            #"flowscope_fetch_duration_seconds_count{placement="p2",source="fallbackFile"} 1"#,
        ])
        #expect(samples(text, "flowscope_fetch_duration_seconds_sum").contains(#"flowscope_fetch_duration_seconds_sum{placement="p1",source="network"} 0.75"#))
        // Cumulative buckets: 0.25 and 0.5 observed.
        let network = buckets(samples(text, "flowscope_fetch_duration_seconds_bucket").filter { $0.contains(#"source="network""#) })
        #expect(network.count >= 3)
        #expect(network.last?.le == .infinity)
        for (le, count) in network {
            #expect(count == [0.25, 0.5].filter { $0 <= le }.count, "le=\(le)")
        }
        #expect(samples(text, "flowscope_targeting_lost_total") == [#"flowscope_targeting_lost_total{placement="p2"} 1"#])
        #expect(samples(text, "flowscope_timeouts_total") == [#"flowscope_timeouts_total{placement="p2",stage="targeted"} 1"#])
        #expect(samples(text, "flowscope_fallbacks_total") == [#"flowscope_fallbacks_total{placement="p2",to="fallbackFile",reason="timeout"} 1"#])
        #expect(samples(text, "flowscope_preload_errors_total") == [#"flowscope_preload_errors_total{placement="p3",code="http_503"} 1"#])
        #expect(Set(samples(text, "flowscope_cache_lookups_total")) == [
            #"flowscope_cache_lookups_total{placement="p1",result="hit"} 1"#,
            #"flowscope_cache_lookups_total{placement="p1",result="miss"} 1"#,
            #"flowscope_cache_lookups_total{placement="p1",result="expired"} 1"#,
        ])
        #expect(Set(samples(text, "flowscope_requests_total")) == [
            #"flowscope_requests_total{kind="targeted",outcome="ok"} 1"#,
            #"flowscope_requests_total{kind="targeted",outcome="timeout"} 1"#,
        ])
        #expect(samples(text, "flowscope_request_duration_seconds_count") == [#"flowscope_request_duration_seconds_count{kind="targeted"} 2"#])
        #expect(samples(text, "flowscope_request_duration_seconds_sum") == [#"flowscope_request_duration_seconds_sum{kind="targeted"} 2.25"#])
        #expect(samples(text, "flowscope_assets_prefetched_bytes_total") == ["flowscope_assets_prefetched_bytes_total 4096"])
        // Sink health comes from this process's pipeline, read at scrape time: an ingested
        // sink.dropped event about another process's sink counts as an event, not as a local drop.
        #expect(Set(samples(text, "flowscope_events_dropped_total")) == [
            #"flowscope_events_dropped_total{sink="metrics"} 0"#, #"flowscope_events_dropped_total{sink="memory"} 0"#,
        ])
        #expect(Set(samples(text, "flowscope_sink_up")) == [#"flowscope_sink_up{sink="metrics"} 1"#, #"flowscope_sink_up{sink="memory"} 1"#])
        #expect(Set(samples(text, "flowscope_sink_errors_total")) == [
            #"flowscope_sink_errors_total{sink="metrics"} 0"#, #"flowscope_sink_errors_total{sink="memory"} 0"#,
        ])
        #expect(Set(samples(text, "flowscope_sink_queue_depth")) == [
            #"flowscope_sink_queue_depth{sink="metrics"} 0"#, #"flowscope_sink_queue_depth{sink="memory"} 0"#,
        ])
        #expect(samples(text, "flowscope_build_info") == [#"flowscope_build_info{version="\#(flowScopeVersion)"} 1"#])

        // flowscope_events_total: one series per event name; the ingested ones counted, the others 0.
        var expectedByName: [String: Int] = [:]
        for e in Self.knownEvents { expectedByName[e["name"]?.stringValue ?? "", default: 0] += 1 }
        for line in samples(text, "flowscope_events_total") {
            let name = line.split(separator: "\"")[1]
            #expect(line.hasSuffix(" \(expectedByName[String(name)] ?? 0)"), "\(line)")
        }
        #expect(samples(text, "flowscope_events_total").count >= expectedByName.count)

        // Stable order: a second scrape of unchanged state is byte-identical.
        #expect(try fixture.get("/metrics").text == text)
    }

    @Test("promtool check metrics reports nothing on the live /metrics output")
    func promtoolClean() throws {
        let promtool = "/usr/bin/promtool"
        try #require(FileManager.default.isExecutableFile(atPath: promtool), "promtool is missing: apt-get install prometheus")
        let fixture = try StackFixture()
        // Awkward label values too: quotes, backslashes, newlines must be escaped.
        var events = Self.knownEvents
        events.append(Events.fetchEnd("we\"ird\\place\nment", source: "network", duration: 0.1))
        try #require(fixture.ingest(Events.lines(events)).status == 202)
        let text = try fixture.get("/metrics").text
        #expect(text.contains(#"placement="we\"ird\\place\nment""#))
        let result = try runProcess(promtool, ["check", "metrics"], input: Data(text.utf8))
        #expect(result.status == 0)
        #expect(result.out.isEmpty, "\(result.out)")
        #expect(result.err.isEmpty, "\(result.err)")
    }

    @Test("untrusted ingest cannot blow up the series count: placements past the limit fold into placement=\"_other\"")
    func cardinalityCap() throws {
        let fixture = try StackFixture()
        let events = (0..<260).map { Events.fetchEnd("placement-\($0)", source: "source-\($0 % 300)", duration: 0.1) }
        try #require(fixture.ingest(Events.lines(events)).status == 202)
        let text = try fixture.get("/metrics").text
        let lines = samples(text, "flowscope_fetches_total")
        let placements = Set(lines.compactMap { $0.firstMatch(of: /placement="([^"]*)"/).map { String($0.1) } })
        #expect(placements.count <= 201, "\(placements.count) placement values")
        #expect(placements.contains("_other"))
        let total = lines.compactMap { $0.split(separator: " ").last.flatMap { Int($0) } }.reduce(0, +)
        #expect(total == 260, "every fetch is still counted")
        #expect(try runProcess("/usr/bin/promtool", ["check", "metrics"], input: Data(text.utf8)).status == 0)
    }

    @Test("ServeStack.stop() drains every sink: events ingested just before stop are all in the jsonl file")
    func cleanStopDrains() throws {
        let fixture = try StackFixture(sinks: #"{ type: "metrics" }, { type: "memory" }, { type: "jsonl", path: "$DIR/traces/events.jsonl" }"#)
        // A live stream client and an idle kept-alive connection must not hold the stop up.
        let stream = try fixture.connect()
        try stream.send("GET /api/events/stream HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n")
        #expect(try stream.readHead().status == 200)
        let idle = try fixture.connect()
        #expect(try idle.request("GET", "/healthz").status == 200)
        let perRequest = 500, requests = 4
        for r in 0..<requests {
            let batch = (0..<perRequest).map { i in Events.envelope("cache.miss", placement: "p\(i % 7)", t: Double(r * perRequest + i)) }
            // Straight POSTs, no waiting for the sinks in between.
            let reply = try fixture.request("POST", "/api/ingest", headers: [("Authorization", "Bearer \(fixture.token)")],
                                            body: Array(Events.lines(batch).utf8))
            try #require(reply.status == 202)
        }
        let started = Date()
        fixture.stop()
        #expect(Date().timeIntervalSince(started) < 5, "stop took \(Date().timeIntervalSince(started)) s")
        let readStart = Date()
        let (_, ended) = stream.readStream { _ in false }
        // Ended well before the client's 5 s receive timeout: closed by the server, not timed out.
        #expect(ended && Date().timeIntervalSince(readStart) < 3, "the stream is closed by stop")
        let file = fixture.dir + "/traces/events.jsonl"
        let text = try String(contentsOfFile: file, encoding: .utf8)
        let lines = text.split(separator: "\n")
        #expect(lines.count == perRequest * requests)
        let parsed = lines.compactMap { try? JSON5.parse(String($0)) }
        #expect(parsed.count == lines.count)
        let ts = parsed.compactMap { $0["t"]?.intValue }
        #expect(ts == Array(0..<(perRequest * requests)))
        let seqs = parsed.compactMap { $0["seq"]?.intValue }
        #expect(zip(seqs, seqs.dropFirst()).allSatisfy { $0 < $1 })
    }
}
