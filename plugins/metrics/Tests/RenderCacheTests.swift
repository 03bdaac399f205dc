import MetricsSink
import Synchronization
import Testing

/// A family from outside the package: it does not implement `snapshot`, so the registry cannot
/// tell whether it changed and renders it on every scrape.
final class OutsideFamily: MetricFamily {
    let value = Atomic<Int>(1)
    let shape: GaugeFamily
    init() throws { shape = try GaugeFamily(name: "outside_value", help: "A family written by hand.") }
    var kind: MetricKind { .gauge }
    var descriptor: FamilyDescriptor { shape.descriptor }
    var seriesCount: Int { 1 }
    func write(to out: inout [UInt8], format: Exposition.Format) {
        out.append(contentsOf: "# HELP outside_value A family written by hand.\n# TYPE outside_value gauge\noutside_value \(value.load(ordering: .relaxed))\n".utf8)
    }
}

/// The registry keeps its last render while no value changed: the cache must never hide a change.
@Suite("Metrics render cache")
struct RenderCacheTests {
    /// The bytes and whether they share storage with `other` (the cached render returned again).
    private func shares(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        a.withUnsafeBufferPointer { x in b.withUnsafeBufferPointer { y in x.baseAddress == y.baseAddress } }
    }

    /// The registry rendered afresh from its families' current values (`withRendered` never reuses
    /// a body), to compare against.
    private func fresh(_ r: MetricsRegistry, _ format: Exposition.Format) -> String {
        r.withRendered(format: format) { String(decoding: $0, as: UTF8.self) }
    }

    private func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    @Test("An unchanged registry returns its last render again, in each format")
    func unchangedIsShared() throws {
        let r = try sampleRegistry()
        for format in [Exposition.Format.prometheusText, .openMetrics] {
            let first = r.render(format: format)
            let second = r.render(format: format)
            #expect(second == first)
            #expect(shares(first, second), "\(format): the second render should be the cached bytes")
            #expect(text(second) == fresh(r, format))
        }
        #expect(r.render(format: .prometheusText) != r.render(format: .openMetrics))
    }

    @Test("Every kind of change shows in the next render", arguments: [
        "counter", "gauge", "gauge set back", "histogram", "new series", "new family", "collector",
    ])
    func changesShow(change: String) throws {
        let r = try sampleRegistry()
        let requests = try r.counter("z_requests_total", help: "Requests.", labels: ["path"])
        requests.labels("/").inc()
        let temperature = try r.gauge("z_temperature", help: "Temperature.")
        let latency = try r.histogram("z_latency_seconds", help: "Latency.", buckets: [1])
        let collected = try r.gauge("z_collected", help: "Set at scrape time.")
        let source = Atomic<Int>(0)
        r.collectBeforeRender { collected.labels().set(Double(source.load(ordering: .relaxed))) }
        let before = r.render()
        #expect(shares(before, r.render()))
        let expectedLine: String
        switch change {
        case "counter": requests.labels("/").inc(); expectedLine = "z_requests_total{path=\"/\"} 2"
        case "gauge": temperature.labels().set(21.5); expectedLine = "z_temperature 21.5"
        case "gauge set back":
            temperature.labels().set(3)
            _ = r.render()
            temperature.labels().set(0)
            expectedLine = "z_temperature 0"
        case "histogram": latency.labels().observe(0.5); expectedLine = "z_latency_seconds_sum 0.5"
        case "new series": requests.labels("/new").inc(); expectedLine = "z_requests_total{path=\"/new\"} 1"
        case "new family":
            try r.counter("y_added_total", help: "Added later.").labels().inc()
            expectedLine = "y_added_total 1"
        default: source.store(7, ordering: .relaxed); expectedLine = "z_collected 7"
        }
        let after = r.render()
        let text = String(decoding: after, as: UTF8.self)
        #expect(text.split(separator: "\n").contains(Substring(expectedLine)), "\(change): \(expectedLine) missing")
        #expect(text == fresh(r, .prometheusText))
        #expect(change == "gauge set back" || after != before)
        // And the changed render is the one kept from now on.
        #expect(shares(after, r.render()))
    }

    @Test("A family that cannot report its values is rendered on every scrape")
    func outsideFamilyRenders() throws {
        let r = try sampleRegistry()
        let outside = try r.register(OutsideFamily())
        let first = String(decoding: r.render(), as: UTF8.self)
        outside.value.store(2, ordering: .relaxed)
        let second = String(decoding: r.render(), as: UTF8.self)
        #expect(first.contains("outside_value 1\n"))
        #expect(second.contains("outside_value 2\n"))
    }
}
