import FlowEvents
import FlowJSON
import Foundation
import Testing
import TestSupport
@testable import FlowScopeCLI

/// Sink health as a user of `flowscope serve` sees it: a collector that dies, a disk that is full.
@Suite("Sink health over real sockets (RealTime)", .realTime)
struct SinkHealthRealTimeTests {
    /// Complete traces (fetch.start and fetch.end on one span), so the otlp sink exports at once.
    static func traces(_ n: Int, from first: Int) -> String {
        var events: [JSONValue] = []
        for i in first..<(first + n) {
            let trace = String(format: "%032x", i + 1), span = String(format: "%016x", i + 1)
            for (name, attrs) in [("fetch.start", ["call": JSONValue.string("getFlow")]), ("fetch.end", ["call": "getFlow", "source": "network"])] {
                events.append(["ts": "2026-12-02T10:11:12.345678Z", "t": 1, "run": "live", "trace": .string(trace), "span": .string(span),
                               "name": .string(name), "placement": "main_paywall", "attrs": .object(attrs)])
            }
        }
        return Events.lines(events)
    }

    static func sink(_ name: String, in fixture: StackFixture) throws -> JSONValue? {
        try fixture.getJSON("/api/sinks")["sinks"]?.arrayValue?.first { $0["name"]?.stringValue == name }
    }

    static func metric(_ line: String, in fixture: StackFixture) throws -> Bool {
        try fixture.get("/metrics").text.split(separator: "\n").contains { $0 == line }
    }

    @Test("a collector that stops answering shows at the next scrape in sink_up, sink_errors, /api/sinks and /healthz")
    func collectorDies() async throws {
        let collector = try LoopbackServer { _ in .respond(status: 200, body: Array("{}".utf8)) }
        let fixture = try StackFixture(sinks: """
            { type: "metrics" }, { type: "memory" },
            { type: "otlp", endpoint: "http://127.0.0.1:\(collector.port)/v1/traces", flushInterval: 0.05, batchSize: 1,
              maxRetries: 0, timeout: 2 }
            """)
        defer { fixture.stop() }
        try fixture.ingest(Self.traces(3, from: 0))
        #expect(await poll(10) { collector.requests.count >= 1 })
        #expect(try Self.metric(#"flowscope_sink_up{sink="otlp"} 1"#, in: fixture))
        #expect(try fixture.getJSON("/healthz") == ["status": "ok"])
        #expect(try Self.sink("otlp", in: fixture)?["up"] == true)

        collector.stop()
        try fixture.ingest(Self.traces(3, from: 100))
        #expect(await poll(10) { (try? Self.metric(#"flowscope_sink_up{sink="otlp"} 0"#, in: fixture)) == true })
        let otlp = try #require(try Self.sink("otlp", in: fixture))
        #expect(otlp["up"] == false)
        #expect((otlp["errors"]?.numberValue ?? 0) >= 1)
        #expect(otlp["lastError"]?.stringValue?.isEmpty == false)
        #expect(otlp["type"] == "otlp")
        #expect(try fixture.getJSON("/healthz") == ["status": "degraded", "down": ["otlp"]])
        let metrics = try fixture.get("/metrics").text
        #expect(metrics.contains(#"flowscope_sink_errors_total{sink="otlp"} "#) && !metrics.contains(#"flowscope_sink_errors_total{sink="otlp"} 0"#))
        #expect(metrics.contains(#"flowscope_sink_up{sink="metrics"} 1"#))
        // Every sink has its drop counter, the metrics sink included.
        for sink in ["metrics", "memory", "otlp"] { #expect(metrics.contains(#"flowscope_events_dropped_total{sink="\#(sink)"}"#)) }
    }

    @Test("a jsonl sink on a full disk is down, counts its errors and the lines it lost")
    func diskFull() async throws {
        try #require(FileManager.default.fileExists(atPath: "/dev/full"))
        let fixture = try StackFixture(sinks: #"{ type: "metrics" }, { type: "memory" }, { type: "jsonl", path: "/dev/full", fsync: "never" }"#)
        defer { fixture.stop() }
        try fixture.ingest(Self.traces(2, from: 0))
        // fsync never: lines wait in the buffer; a flush writes them and meets the full disk.
        fixture.stack.pipeline.sinks.first { $0.name == "jsonl" }?.flush()
        let jsonl = try #require(try Self.sink("jsonl", in: fixture))
        #expect(jsonl["up"] == false)
        #expect(jsonl["lastError"]?.stringValue?.contains("No space left") == true)
        #expect(jsonl["dropped"] == 4)
        #expect(try Self.metric(#"flowscope_sink_up{sink="jsonl"} 0"#, in: fixture))
        #expect(try Self.metric(#"flowscope_events_dropped_total{sink="jsonl"} 4"#, in: fixture))
        #expect(try fixture.getJSON("/healthz") == ["status": "degraded", "down": ["jsonl"]])
    }
}

@Suite("The otlp sink at a clean stop", .ownThread)
struct OTLPCleanStopTests {
    @Test("events ingested with unpaired span ids all leave through the otlp sink at stop, marked incomplete")
    func unpairedSpans() throws {
        let fixture = try StackFixture(sinks: #"{ type: "metrics" }, { type: "memory" }, { type: "otlp", file: "$DIR/spans.jsonl" }"#)
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736"
        func event(_ name: String, span: String, attrs: [String: JSONValue] = [:]) -> JSONValue {
            ["ts": "2026-12-02T10:11:12.345678Z", "t": 1, "run": "live", "trace": .string(trace), "span": .string(span),
             "name": .string(name), "placement": "main_paywall", "attrs": .object(attrs)]
        }
        // A start and an end on different spans, a request that never ends, a lone timeout.
        try fixture.ingest(Events.lines([
            event("fetch.start", span: "00000000000000a1", attrs: ["call": "getFlow"]),
            event("request.start", span: "00000000000000b2", attrs: ["kind": "targeted"]),
            event("timeout", span: "00000000000000c3", attrs: ["stage": "targeted"]),
            event("fetch.end", span: "00000000000000d4", attrs: ["call": "getFlow", "source": "cache"]),
        ]))
        let path = fixture.dir + "/spans.jsonl"
        // Nothing ends the trace's root: before the stop, nothing has been exported.
        #expect(((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").isEmpty)
        fixture.stop()
        let text = try String(contentsOfFile: path, encoding: .utf8)
        var spanIds: Set<String> = []
        for line in text.split(separator: "\n") {
            let body = try JSON5.parse(String(line))
            for rs in body["resourceSpans"]?.arrayValue ?? [] {
                for ss in rs["scopeSpans"]?.arrayValue ?? [] {
                    for span in ss["spans"]?.arrayValue ?? [] {
                        spanIds.insert(span["spanId"]?.stringValue ?? "")
                        #expect(span["traceId"]?.stringValue == trace)
                    }
                }
            }
        }
        #expect(spanIds.isSuperset(of: ["00000000000000a1", "00000000000000b2"]), "\(spanIds)")
        #expect(text.contains("\"flowscope.incomplete\",\"value\":{\"boolValue\":true}"))
    }
}
