import FlowEvents
import FlowFetch
import FlowJSON
import Foundation
import MemorySink
import Synchronization
import Testing


func envelope(_ seq: UInt64, _ name: EventName, run: String = "live", placement: String? = "main_paywall",
              ts: Double? = nil, attrs: EventAttributes = [:]) -> Envelope {
    Envelope(seq: seq, ts: ts ?? 1_700_000_000 + Double(seq), t: Double(seq), run: run,
             trace: TraceID(high: 1, low: seq), span: SpanID(raw: seq + 1), name: name, placement: placement, attrs: attrs)
}

func fetchEnd(_ seq: UInt64, run: String = "live", placement: String = "main_paywall", source: String? = "network",
              duration: Double, targetingLost: Bool = false, errorCode: Int? = nil) -> Envelope {
    var attrs: EventAttributes = ["call": "getFlow", "duration": .number(duration), "targetingLost": .bool(targetingLost)]
    if let source { attrs["source"] = .string(source) }
    if let errorCode { attrs["errorCode"] = .number(Double(errorCode)) }
    return envelope(seq, .fetchEnd, run: run, placement: placement, attrs: attrs)
}

@Suite("MemorySink")
struct MemorySinkTests {
    @Test("the ring keeps the newest events and queries filter, page and return newest last")
    func eventQueries() {
        let sink = MemorySink(capacity: 5)
        sink.consume((1...8).map { envelope($0, $0 % 2 == 0 ? .fetchStart : .cacheHit, run: $0 < 7 ? "live" : "test:a") })
        #expect(sink.count == 5)
        #expect(sink.events(limit: 100).map(\.seq) == [4, 5, 6, 7, 8])
        #expect(sink.events(limit: 2).map(\.seq) == [7, 8])
        #expect(sink.events(since: 4, limit: 2).map(\.seq) == [5, 6])
        #expect(sink.events(since: 8, limit: 10).isEmpty)
        #expect(sink.events(limit: 10, run: "test:a").map(\.seq) == [7, 8])
        #expect(sink.events(limit: 10, name: "fetch.start").map(\.seq) == [4, 6, 8])
        #expect(sink.events(limit: 10, placement: "other").isEmpty)
        #expect(sink.latestSeq == 8)
    }

    @Test("a run keeps its own last events after other runs' newer events filled the shared ring; pages stay in seq order")
    func runKeepsItsEvents() {
        let sink = MemorySink(capacity: 5, runCapacity: 3, keptRuns: 2)
        sink.consume((1...4).map { envelope($0, .fetchStart, run: "test:a") })
        sink.consume((5...12).map { envelope($0, .cacheHit, run: "live") })
        #expect(sink.events(limit: 100).map(\.seq) == [8, 9, 10, 11, 12], "the shared ring holds only the newest 5")
        #expect(sink.events(limit: 100, run: "test:a").map(\.seq) == [2, 3, 4], "the run's own last 3")
        #expect(sink.events(limit: 2, run: "test:a").map(\.seq) == [3, 4])
        #expect(sink.events(since: 2, limit: 100, run: "test:a").map(\.seq) == [3, 4])
        #expect(sink.events(since: 0, limit: 1, run: "test:a").map(\.seq) == [2])
        // Its own ring and the shared ring together, without duplicates.
        #expect(sink.events(limit: 100, run: "live").map(\.seq) == [8, 9, 10, 11, 12])
        sink.consume([envelope(13, .fetchStart, run: "test:a")])
        #expect(sink.events(limit: 100, run: "test:a").map(\.seq) == [3, 4, 13])
        #expect(sink.events(since: 3, limit: 100, run: "test:a").map(\.seq) == [4, 13])
        // keptRuns 2: a third run forgets the quietest run's own events (live was last active at 12, test:a at 13).
        sink.consume((14...15).map { envelope($0, .fetchStart, run: "test:b") })
        #expect(sink.events(limit: 100, run: "live").map(\.seq) == [11, 12], "only what the shared ring holds")
        #expect(sink.events(limit: 100, run: "test:a").map(\.seq) == [3, 4, 13])
        #expect(sink.events(limit: 100, run: "test:b").map(\.seq) == [14, 15])
        // runCapacity 0: only the shared ring.
        let plain = MemorySink(capacity: 5, runCapacity: 0)
        plain.consume((1...4).map { envelope($0, .fetchStart, run: "test:a") })
        plain.consume((5...12).map { envelope($0, .cacheHit, run: "live") })
        #expect(plain.events(limit: 100, run: "test:a").isEmpty)
    }

    @Test("run totals count fetch.end as a fetch and as errors a fetch.end with an errorCode and each placement a preload.end failed")
    func runErrors() {
        let sink = MemorySink()
        sink.consume([
            envelope(1, .preloadEnd, placement: nil, ts: 100, attrs: ["succeeded": 1, "failed": ["a": 2005, "b": 2002]]),
            envelope(2, .preloadEnd, placement: nil, ts: 200, attrs: ["succeeded": 1, "failed": ["a": 2003]]),
            envelope(3, .preloadEnd, placement: nil, ts: 300, attrs: ["succeeded": 2, "failed": [:], "errorCode": 3001]),
            fetchEnd(4, duration: 1, errorCode: 2004),
            fetchEnd(5, duration: 1),
        ])
        #expect(sink.runs().first?.errors == 4)
        #expect(sink.runs().first?.fetches == 2)
    }

    @Test("runs: kinds by prefix, first/last ts, counts, most recently active first")
    func runs() {
        let sink = MemorySink()
        sink.consume([
            fetchEnd(1, run: "live", duration: 0.1),
            envelope(2, .fetchStart, run: "sim:7", ts: 1_800_000_000),
            fetchEnd(3, run: "test:checkout", duration: 0.3, errorCode: 2005),
            fetchEnd(4, run: "live", duration: 0.5),
        ])
        let runs = sink.runs()
        #expect(runs.map(\.id) == ["sim:7", "live", "test:checkout"])
        #expect(runs.map(\.kind) == [.simulation, .live, .test])
        let live = runs[1]
        #expect(live.events == 2 && live.fetches == 2 && live.errors == 0)
        #expect(live.firstTs == 1_700_000_001 && live.lastTs == 1_700_000_004)
        #expect(runs[2].errors == 1)
        #expect(RunKind(runID: "some test name") == .test && RunKind(runID: "simulation:x") == .simulation)
        let detail = sink.run("live")
        #expect(detail?.eventsByName == ["fetch.end": 2])
        #expect(sink.run("nope") == nil)
    }

    @Test("runs are bounded: the least recently active non-live run is forgotten first")
    func bounds() {
        let sink = MemorySink(maxRuns: 3)
        sink.consume([fetchEnd(1, run: "live", duration: 1)] + (2...6).map { fetchEnd(UInt64($0), run: "test:\($0)", duration: 1) })
        #expect(Set(sink.runs().map(\.id)) == ["live", "test:5", "test:6"])
    }

    @Test("the events page JSON has every event and the newest seq")
    func jsonShapes() throws {
        let sink = MemorySink()
        sink.consume([fetchEnd(1, duration: 0.25), envelope(2, .preloadEnd, placement: nil, ts: 0, attrs: ["failed": ["x": 2005]])])
        let events = Envelope.pageJSON(sink.events(), latestSeq: sink.latestSeq)
        let parsed = try JSONSerialization.jsonObject(with: Data(events.utf8)) as? [String: Any]
        #expect((parsed?["events"] as? [Any])?.count == 2)
        #expect(parsed?["latestSeq"] as? Int == 2)
        #expect(sink.run("live")?.eventsByName == ["fetch.end": 1, "preload.end": 1])
    }

    @Test("subscribers get each consumed batch until they unsubscribe")
    func subscriptions() {
        let sink = MemorySink()
        let seen = Mutex<[UInt64]>([])
        let token = sink.subscribe { batch in seen.withLock { $0 += batch.map(\.seq) } }
        sink.consume([envelope(1, .cacheMiss), envelope(2, .cacheMiss)])
        sink.unsubscribe(token)
        sink.consume([envelope(3, .cacheMiss)])
        #expect(seen.withLock { $0 } == [1, 2])
        #expect(sink.subscriberCount == 0)
    }

    @Test("reads from other threads while a pipeline feeds the sink")
    func concurrentReads() async {
        let sink = MemorySink(capacity: 1000)
        let pipeline = EventPipeline(sinks: [sink])
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for i in 0..<20_000 {
                    pipeline.receive(EngineEvent(name: .fetchEnd, t: Double(i), placement: "p\(i % 5)", trace: TraceID(high: 1, low: 1),
                                                 span: SpanID(raw: 1), attrs: ["source": "cache", "duration": 0.1]))
                }
            }
            group.addTask {
                for _ in 0..<200 {
                    let events = sink.events(limit: 50)
                    #expect(zip(events, events.dropFirst()).allSatisfy { $0.seq < $1.seq })
                    _ = sink.run("live"); _ = sink.runs()
                }
            }
        }
        pipeline.shutdown()
        #expect(sink.runs().first { $0.id == "live" }?.fetches == 20_000)
        #expect(sink.count == 1000)
    }

    @Test("config options are read and checked")
    func config() throws {
        var registry = SinkRegistry()
        try registry.register(MemorySink.Factory())
        let sink = try registry.make(type: "memory", context: SinkContext(options: ["capacity": 7], path: "$.sinks[0]"))
        #expect((sink as? MemorySink)?.capacity == 7)
        let kept = try registry.make(type: "memory", context: SinkContext(options: ["runCapacity": 0, "keptRuns": 4], path: "$.sinks[0]"))
        #expect((kept as? MemorySink)?.runCapacity == 0 && (kept as? MemorySink)?.keptRuns == 4)
        #expect(throws: JSONInputError(path: "$.sinks[0].capacity", message: "expected an integer in 1...10000000, got a number 0")) {
            _ = try registry.make(type: "memory", context: SinkContext(options: ["capacity": 0], path: "$.sinks[0]"))
        }
    }
}
