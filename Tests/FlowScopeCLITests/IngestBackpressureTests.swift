import Dispatch
import FlowEvents
import FlowFetch
import FlowJSON
import Foundation
import Synchronization
import Testing
import TestSupport
@testable import FlowScopeCLI

/// A durable sink that sleeps per batch (a disk or a database that cannot keep up) and records the
/// `id` attribute of everything it consumed.
final class SlowArchiveSink: EventSink {
    let name: String
    let pause: Double
    private let ids = Mutex<[String]>([])
    init(name: String, pause: Double) { self.name = name; self.pause = pause }
    var type: String { "slow" }
    var isDurable: Bool { true }
    func consume(_ batch: [Envelope]) {
        usleep(UInt32(pause * 1e6))
        let seen = batch.compactMap { $0.attrs["id"]?.stringValue }
        ids.withLock { $0.append(contentsOf: seen) }
    }
    var consumedIDs: [String] { ids.withLock { $0 } }

    /// The `slow` sink type (option `pause`: seconds slept per batch); the sinks it made, for the test to read.
    struct Factory: SinkFactory {
        final class Made: Sendable { let sinks = Mutex<[SlowArchiveSink]>([]) }
        let made = Made()
        var type: String { "slow" }
        func options(from context: SinkContext) throws(JSONInputError) -> Double {
            try context.checkKeys(["pause"])
            return try context.number("pause", in: 0...1) ?? 0.1
        }
        func makeSink(_ pause: Double, context: SinkContext) throws -> any EventSink {
            let sink = SlowArchiveSink(name: context.name, pause: pause)
            made.sinks.withLock { $0.append(sink) }
            return sink
        }
    }
}

/// What the concurrent senders saw.
struct SendTally: Sendable {
    var acknowledged: [String] = []
    var refusedBatches = 0
    var refusedWithoutRetryAfter = 0
    var otherAnswers: [Int] = []
}

/// `senders` threads posting batches of `batch` events (unique `id` attrs) to `/api/ingest` over
/// TLS (one kept-alive connection each) for `seconds`; a refused batch is sent again after `pause`
/// seconds (its ids count once, when acknowledged). Returns what they saw.
func sendConcurrently(port: Int, token: String, senders: Int, batch: Int, seconds: Double, pause: Double = 0.02) -> SendTally {
    let tally = Mutex(SendTally())
    let deadline = Date().addingTimeInterval(seconds)
    DispatchQueue.concurrentPerform(iterations: senders) { sender in
        var n = 0
        var pending: (ids: [String], body: [UInt8])?
        var connection: TestConnection?
        while Date() < deadline {
            if pending == nil {
                var ids: [String] = [], lines = ""
                for _ in 0..<batch {
                    let id = "s\(sender)-\(n)"
                    n += 1
                    ids.append(id)
                    lines += #"{"ts":"2026-12-02T10:11:12.345678Z","t":1,"run":"load","trace":"\#(Events.trace)","span":"\#(Events.span)","#
                        + #""name":"fetch.start","placement":"main_paywall","attrs":{"id":"\#(id)"}}"# + "\n"
                }
                pending = (ids, Array(lines.utf8))
            }
            guard let (ids, body) = pending else { break }
            if connection == nil { connection = try? TestConnection(port: port) }
            guard let reply = try? connection?.request(
                "POST", "/api/ingest", headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/x-ndjson")], body: body)
            else { connection = nil; continue }
            if reply.header("connection")?.lowercased() == "close" { connection = nil }
            switch reply.status {
            case 202:
                tally.withLock { $0.acknowledged += ids }
                pending = nil
            case 503, 429:
                tally.withLock {
                    $0.refusedBatches += 1
                    if Int(reply.header("retry-after") ?? "").map({ $0 < 1 }) ?? true { $0.refusedWithoutRetryAfter += 1 }
                    // A 503 of the backpressure also says so in its JSON error body, with the wait.
                    if reply.status == 503 {
                        let error = (try? JSON5.parse(reply.text))?["error"]
                        if (error?["retryAfter"]?.numberValue ?? 0) < 1
                            || error?["message"]?.stringValue?.contains("nothing of this batch was stored") != true {
                            $0.refusedWithoutRetryAfter += 1
                        }
                    }
                }
                usleep(UInt32(pause * 1e6))
            default:
                tally.withLock { $0.otherAnswers.append(reply.status) }
                pending = nil
            }
        }
    }
    return tally.withLock { $0 }
}

/// Every `id` attribute of the rows of run `load` in a sqlite file, through the sqlite3 program.
func storedIDs(sqlite path: String) throws -> [String] {
    let result = try runProgram("/usr/bin/env", ["sqlite3", path, "SELECT json_extract(attrs, '$.id') FROM events WHERE run = 'load'"])
    #expect(result.status == 0, "\(result.output)")
    return result.output.split(separator: "\n").map(String.init)
}

/// Every `id` attribute of run `load` in a jsonl sink's files (`path` and its rotated `path.N`).
func storedIDs(jsonl path: String) throws -> [String] {
    var ids: [String] = []
    for file in [path] + (1...3).map({ "\(path).\($0)" }) where FileManager.default.fileExists(atPath: file) {
        for line in try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n") {
            let value = try JSON5.parse(String(line))
            if value["run"] == "load", let id = value["attrs"]?["id"]?.stringValue { ids.append(id) }
        }
    }
    return ids
}

@Suite("Ingest under load with backpressure (RealTime)", .realTime)
struct IngestBackpressureRealTimeTests {
    @Test("four senders at full speed into serve with sqlite and jsonl: every acknowledged event is in both after a clean stop, every refused batch got 503 with Retry-After")
    func acknowledgedMeansStored() throws {
        let fixture = try StackFixture(
            server: "limits: { ingestRatePerSecond: 100000, ingestBurst: 100000, ingestQueueLimit: 300 }",
            sinks: """
                { type: "metrics" }, { type: "memory", capacity: 1000 },
                { type: "sqlite", path: "$DIR/events.sqlite" },
                { type: "jsonl", path: "$DIR/events.jsonl", rotateBytes: 1073741824, keep: 3, fsync: "batch" }
                """)
        let tally = sendConcurrently(port: fixture.port, token: fixture.token, senders: 4, batch: 250, seconds: 3)
        fixture.stop()
        #expect(tally.otherAnswers.isEmpty, "only 202, 503 and 429: \(tally.otherAnswers.prefix(5))")
        #expect(fixture.stack.pipeline.dropped(sink: "sqlite") == 0 && fixture.stack.pipeline.dropped(sink: "jsonl") == 0)
        #expect(tally.refusedWithoutRetryAfter == 0)
        #expect(tally.acknowledged.count >= 1000)
        let acknowledged = Set(tally.acknowledged)
        #expect(acknowledged.count == tally.acknowledged.count)
        let rows = try storedIDs(sqlite: fixture.dir + "/events.sqlite")
        #expect(Set(rows) == acknowledged, "sqlite: \(rows.count) rows, \(acknowledged.count) acknowledged")
        #expect(rows.count == acknowledged.count, "nothing stored twice")
        let lines = try storedIDs(jsonl: fixture.dir + "/events.jsonl")
        #expect(Set(lines) == acknowledged, "jsonl: \(lines.count) lines, \(acknowledged.count) acknowledged")
        #expect(lines.count == acknowledged.count)
        print("ingest load: \(acknowledged.count) events acknowledged and stored, \(tally.refusedBatches) batches refused")
    }

    @Test("a sink slow on purpose slows the senders down with 503s instead of losing what it acknowledged, and shows saturated in /api/sinks and /metrics")
    func slowSinkSlowsSenders() throws {
        let factory = SlowArchiveSink.Factory()
        var registry = SinkRegistry.current
        try registry.register(factory)
        let fixture = try SinkRegistry.$current.withValue(registry) {
            try StackFixture(
                server: "limits: { ingestRatePerSecond: 100000, ingestBurst: 100000, ingestQueueLimit: 400 }",
                sinks: #"{ type: "metrics" }, { type: "memory", capacity: 1000 }, { type: "slow", name: "archive", pause: 0.5 }"#)
        }
        let slow = try #require(factory.made.sinks.withLock { $0.first })
        let senders = DispatchGroup()
        let tally = Mutex(SendTally())
        let port = fixture.port, token = fixture.token
        DispatchQueue.global().async(group: senders) {
            let t = sendConcurrently(port: port, token: token, senders: 3, batch: 200, seconds: 3)
            tally.withLock { $0 = t }
        }
        // While the senders push harder than the sink can take, it shows saturated.
        var sawSaturated = false, sawGauge = false
        let watchUntil = Date().addingTimeInterval(2.5)
        while Date() < watchUntil && !(sawSaturated && sawGauge) {
            if let sinks = try? fixture.getJSON("/api/sinks")["sinks"]?.arrayValue,
               let archive = sinks.first(where: { $0["name"] == "archive" }), archive["saturated"] == true, archive["durable"] == true {
                sawSaturated = true
            }
            if let text = try? fixture.get("/metrics").text, text.contains(#"flowscope_sink_saturated{sink="archive"} 1"#) { sawGauge = true }
            usleep(50_000)
        }
        senders.wait()
        fixture.stop()
        let seen = tally.withLock { $0 }
        #expect(sawSaturated, "/api/sinks showed the slow sink saturated")
        #expect(sawGauge, "/metrics showed flowscope_sink_saturated{sink=\"archive\"} 1")
        #expect(seen.refusedBatches > 0, "the senders were slowed down")
        #expect(seen.refusedWithoutRetryAfter == 0)
        #expect(seen.otherAnswers.isEmpty, "\(seen.otherAnswers.prefix(5))")
        #expect(fixture.stack.pipeline.dropped(sink: "archive") == 0)
        let consumed = slow.consumedIDs
        #expect(Set(consumed) == Set(seen.acknowledged), "consumed \(consumed.count), acknowledged \(seen.acknowledged.count)")
        #expect(consumed.count == seen.acknowledged.count)
    }

    @Test("a sink shows saturated for EventPipeline.saturationWindow (5 s) after its queue last refused a batch, then no more")
    func saturationWindow() {
        let sink = SlowArchiveSink(name: "archive", pause: 0)
        let pipeline = EventPipeline(sinks: [sink], queueCapacity: 100)
        defer { pipeline.shutdown() }
        let batch = ReplayLoadTests.trace(1)
        #expect(EventPipeline.saturationWindow == 5)
        #expect(pipeline.stats()[0].saturated == false)
        #expect(pipeline.ingest(batch, ifRoomWithin: 0) == .refused(sinks: ["archive"]))
        let start = Date()
        #expect(pipeline.stats()[0].saturated == true)
        usleep(1_000_000)
        if Date().timeIntervalSince(start) < 4 { #expect(pipeline.stats()[0].saturated == true) }
        usleep(5_000_000)
        #expect(pipeline.stats()[0].saturated == false, "6 s after the last refusal")
        #expect(pipeline.ingest(batch, ifRoomWithin: 100) == .accepted)
        #expect(pipeline.stats()[0].saturated == false, "an accepted batch does not saturate")
    }

    @Test("the in-process pipeline under the same slow sink never blocks the caller: its full queue drops and counts")
    func inProcessStillDrops() {
        let slow = SlowArchiveSink(name: "archive", pause: 0.05)
        let pipeline = EventPipeline(sinks: [slow], queueCapacity: 1000)
        let start = Date()
        for i in 0..<20_000 {
            pipeline.receive(EngineEvent(name: .fetchStart, t: Double(i), placement: "main_paywall",
                                         trace: TraceID(high: 1, low: UInt64(i + 1)), span: SpanID(raw: UInt64(i + 1)),
                                         attrs: ["id": .string("e\(i)")]))
        }
        let elapsed = Date().timeIntervalSince(start)
        let dropped = pipeline.dropped(sink: "archive") ?? 0
        let saturated = pipeline.stats().first?.saturated
        pipeline.shutdown()
        #expect(elapsed < 5, "20,000 receives took \(elapsed) s behind a sink sleeping 50 ms per batch (generous bound)")
        #expect(dropped > 0)
        #expect(saturated == true)
        #expect(UInt64(slow.consumedIDs.count) + dropped == 20_000, "every event consumed or counted as dropped")
    }
}

@Suite("replay --serve loads a trace in batches that fit", .ownThread)
struct ReplayLoadTests {
    static func trace(_ n: Int) -> [Envelope] {
        (0..<n).map { (i: Int) -> Envelope in
            let attrs: EventAttributes = ["id": .string("r\(i)")]
            let event = EngineEvent(name: .fetchStart, t: Double(i), placement: "main_paywall", trace: TraceID(high: 1, low: UInt64(i + 1)),
                                    span: SpanID(raw: UInt64(i + 1)), attrs: attrs)
            return Envelope(event, seq: UInt64(i + 1), ts: 1, run: "replayed")
        }
    }

    @Test("a trace longer than a sink's queue is loaded whole by replay --serve's loader, in order")
    func loadsWhole() async {
        let sink = SlowArchiveSink(name: "memory", pause: 0.002)
        let pipeline = EventPipeline(sinks: [sink], queueCapacity: 2_000)
        let unloaded = await loadTrace(Self.trace(20_000), into: pipeline, queueCapacity: 2_000)
        pipeline.shutdown()
        #expect(unloaded == 0)
        #expect(pipeline.dropped(sink: "memory") == 0)
        #expect(sink.consumedIDs == (0..<20_000).map { "r\($0)" })
    }

    @Test("what a stuck sink leaves no room for is counted as not loaded once the patience is spent")
    func reportsWhatItCouldNotLoad() async {
        /// A sink that holds its first batch until released: its queue fills and stays full.
        final class StuckSink: EventSink {
            let name = "memory"
            let gate = DispatchSemaphore(value: 0)
            let count = Atomic<Int>(0)
            func consume(_ batch: [Envelope]) {
                gate.wait()
                count.add(batch.count, ordering: .relaxed)
            }
        }
        let sink = StuckSink()
        let pipeline = EventPipeline(sinks: [sink], queueCapacity: 1_000)
        let unloaded = await loadTrace(Self.trace(5_000), into: pipeline, queueCapacity: 1_000, patience: 0.3)
        for _ in 0..<100 { sink.gate.signal() }
        pipeline.shutdown()
        #expect(unloaded >= 3_000, "at most the batch being consumed and a full queue were loaded")
        #expect(sink.count.load(ordering: .relaxed) + unloaded == 5_000)
        #expect(pipeline.dropped(sink: "memory") == 0)
    }
}
