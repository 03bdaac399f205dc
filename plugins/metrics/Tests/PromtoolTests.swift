import FlowEvents
import FlowFetch
import FlowJSON
import Foundation
import MetricsSink
import TestSupport
import Testing

/// Runs the real `promtool check metrics` (Debian `prometheus` package) on `input`.
/// Fails the test (never skips) when promtool is missing.
func promtoolCheck(_ input: [UInt8]) throws -> (status: Int32, output: String) {
    let path = "/usr/bin/promtool"
    try #require(FileManager.default.isExecutableFile(atPath: path),
                 "promtool is missing: install the Debian package `prometheus` (scripts/setup.sh test does)")
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = ["check", "metrics"]
    let stdin = Pipe(), stdout = Pipe()
    process.standardInput = stdin
    process.standardOutput = stdout
    process.standardError = stdout
    try process.run()
    // promtool reads all of stdin before it writes anything, so writing first cannot deadlock.
    try stdin.fileHandleForWriting.write(contentsOf: Data(input))
    try stdin.fileHandleForWriting.close()
    let output = stdout.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: output, as: UTF8.self))
}

/// A realistic stream: several placements (one with hostile characters), every event kind, many durations.
func realisticStream() -> EventStream {
    var s = knownStream()
    let placements = ["main_paywall", "onboarding", "settings \"pro\"\nline\\2", "ünïcødé"]
    for i in 0..<200 {
        let p = placements[i % placements.count]
        let d = Double(i % 37) * 0.07
        s.add(.fetchStart, p, ["call": "getFlow", "policy": "returnCacheDataElseLoad", "loadTimeout": 5])
        s.add(i % 3 == 0 ? .cacheHit : .cacheMiss, p)
        s.add(.requestEnd, p, ["kind": i % 2 == 0 ? "targeted" : "layout", "outcome": i % 5 == 0 ? "timeout" : "success",
                               "duration": .number(d), "bytes": 100])
        if i % 5 == 0 {
            s.add(.timeout, p, ["stage": "targeted", "budget": 4.5, "elapsed": 4.5])
            s.add(.fallback, p, ["to": "defaultAudience", "reason": "timeout"])
        }
        s.add(.fetchEnd, p, ["call": "getFlow", "source": i % 3 == 0 ? "cache" : "network", "targetingLost": .bool(i % 5 == 0),
                             "duration": .number(d + 0.001)])
    }
    return s
}

@Suite("promtool", .ownThread)
struct PromtoolTests {
    @Test("promtool check metrics prints nothing and exits 0 on the sink's Prometheus text after a realistic stream")
    func promtoolAcceptsText() throws {
        let sink = try MetricsSink(version: "1.0.0-test")
        sink.consume(realisticStream().envelopes)
        sink.collectSinkStats {
            [SinkStats(sink: "jsonl", queueDepth: 4, capacity: 10, dropped: 1, consumed: 9, batches: 1, up: false, errors: 1,
                       saturated: true, durable: true)]
        }
        let body = sink.render(format: .prometheusText)
        let result = try promtoolCheck(body)
        #expect(result.output == "")
        #expect(result.status == 0)
    }

    @Test("promtool check metrics accepts a fresh sink, whose families mostly have no series yet")
    func promtoolAcceptsEmptyFamilies() throws {
        let sink = try MetricsSink(version: "1")
        let result = try promtoolCheck(sink.render(format: .prometheusText))
        #expect(result.output == "")
        #expect(result.status == 0)
    }

    @Test("promtool really checks: a body it must reject (a counter without HELP) is reported")
    func promtoolRejectsBadInput() throws {
        let result = try promtoolCheck(Array("# TYPE x_total counter\nx_total 1\n".utf8))
        #expect(result.status != 0)
        #expect(result.output.contains("no help text"))
    }

    /// promtool 2.42 `check metrics` parses only text format 0.0.4 (expfmt's TextParser): in an
    /// OpenMetrics body it ignores `# UNIT` and `# EOF` as comments, but sees the `<family>_total`
    /// samples of a counter family typed as `<family>` as a separate family without HELP. So the
    /// exact, complete list of its complaints on OpenMetrics is one "no help text" per counter
    /// family that has samples; anything else (a parse error, a bad `le`, a bad value) would show.
    @Test("promtool parses the OpenMetrics render; its only complaints are the _total sample names it cannot pair with OpenMetrics counter families")
    func promtoolOnOpenMetrics() throws {
        let sink = try MetricsSink(version: "1.0.0-test")
        sink.consume(realisticStream().envelopes)
        let result = try promtoolCheck(sink.render(format: .openMetrics))
        let counters = sink.registry.families.filter { $0.kind == .counter && $0.seriesCount > 0 }.map(\.name)
        let complaints = result.output.split(separator: "\n").map(String.init)
        #expect(complaints.sorted() == counters.map { "\($0) no help text" }.sorted())
        #expect(result.status == 3)
    }
}
