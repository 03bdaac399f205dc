import FlowEvents
import FlowJSON
import MemorySink
import MetricsSink
import Testing
@testable import FlowScopeServer

@Suite("GET /metrics (no sockets)")
struct MetricsRouteTests {
    /// Envelopes of several kinds over several placements, so counters and histograms have series.
    static func envelopes() throws -> [Envelope] {
        var lines: [String] = []
        for i in 0..<120 {
            let placement = ["main_paywall", "onboarding", "asa_paywall", "p\"quoted\\"][i % 4]
            let common = #""ts":1796206272.5,"t":\#(Double(i) * 0.1),"run":"live","trace":"4bf92f3577b34da6a3ce929d0e0e4736","span":"00f067aa0ba902b7","placement":"\#(placement.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\""))""#
            lines.append(#"{\#(common),"seq":\#(i * 4 + 1),"name":"fetch.start","attrs":{"call":"getFlow","policy":"reloadRevalidatingCacheData"}}"#)
            lines.append(#"{\#(common),"seq":\#(i * 4 + 2),"name":"request.end","attrs":{"kind":"targeted","status":200,"duration":\#(Double(i % 9) * 0.37)}}"#)
            lines.append(#"{\#(common),"seq":\#(i * 4 + 3),"name":"cache.hit","attrs":{"layer":"memory"}}"#)
            lines.append(#"{\#(common),"seq":\#(i * 4 + 4),"name":"fetch.end","attrs":{"call":"getFlow","result":"flow","source":"network","duration":\#(Double(i % 7) * 0.21)}}"#)
        }
        return try lines.map { line throws in try Envelope(jsonValue: try JSON5.parse(line)) }
    }

    @Test("the body is exactly what the registry renders, in both formats, and follows the live series")
    func sameBytesAsRegistry() throws {
        let metrics = try MetricsSink(version: "test")
        let memory = MemorySink()
        let pipeline = EventPipeline(run: "live", sinks: [metrics, memory])
        defer { pipeline.shutdown() }
        let router = DashboardAPI.router(pipeline: pipeline, metrics: metrics, store: memory, sinks: SinkStatus(stats: pipeline.stats), hub: SSEHub(), web: nil,
                                         ingestLimiter: RateLimiter(ratePerSecond: 10, burst: 10))
        metrics.consume(try Self.envelopes())
        for accept in [nil, "application/openmetrics-text; version=1.0.0"] {
            let request = Request(method: "GET", path: "/metrics", headers: accept.map { ["accept": $0] } ?? [:])
            let response = router.respond(to: request, token: nil, policy: .loopbackReadsOpen)
            let format = MetricsSink.negotiate(accept: accept).format
            #expect(response.status == 200)
            #expect(response.bodyBytes.count > 2_000)
            // The route's render and the registry's (its gauges for queue depths were set by the route).
            #expect(response.bodyBytes == metrics.render(format: format), "accept \(accept ?? "none")")
        }
        // A later scrape sees new events.
        let before = router.respond(to: Request(method: "GET", path: "/metrics"), token: nil, policy: .loopbackReadsOpen).bodyBytes
        metrics.consume(try Self.envelopes())
        let after = router.respond(to: Request(method: "GET", path: "/metrics"), token: nil, policy: .loopbackReadsOpen).bodyBytes
        #expect(before != after)
        #expect(after == metrics.render(format: .prometheusText))
    }
}
