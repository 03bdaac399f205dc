import Dispatch
import FlowEvents
import FlowFetch
import FlowJSON
import Foundation
import Synchronization
import TestSupport
import Testing

/// A sink that records everything, optionally gated so a test can hold it inside `consume`.
final class RecordingSink: EventSink {
    let name: String
    private let received = Mutex<[Envelope]>([])
    private let flushes = Atomic<Int>(0)
    private let batchSizes = Mutex<[Int]>([])
    /// When set, `consume` signals `entered` then waits on `gate` (once per batch).
    let gated: Bool
    let entered = DispatchSemaphore(value: 0)
    let gate = DispatchSemaphore(value: 0)

    init(name: String, gated: Bool = false) { self.name = name; self.gated = gated }

    func consume(_ batch: [Envelope]) {
        if gated { entered.signal(); gate.wait() }
        received.withLock { $0.append(contentsOf: batch) }
        batchSizes.withLock { $0.append(batch.count) }
    }

    func flush() { flushes.add(1, ordering: .relaxed) }

    var envelopes: [Envelope] { received.withLock { $0 } }
    var flushCount: Int { flushes.load(ordering: .relaxed) }
}

func event(_ i: Int, _ name: EventName = .fetchStart, placement: String? = "main_paywall") -> EngineEvent {
    EngineEvent(name: name, t: Double(i), placement: placement, trace: TraceID(high: 1, low: UInt64(i + 1)),
                span: SpanID(raw: UInt64(i + 1)), attrs: ["i": .number(Double(i))])
}

func index(_ envelope: Envelope) -> Int { envelope.attrs["i"]?.intValue ?? -1 }

@Suite("EventPipeline", .ownThread)
struct EventPipelineTests {
    @Test("every sink receives every event in emission order with strictly increasing seq")
    func fanOutOrder() {
        let a = RecordingSink(name: "a"), b = RecordingSink(name: "b")
        let pipeline = EventPipeline(run: "live", sinks: [a, b], wallClock: { 1_000 })
        for i in 0..<5000 { pipeline.receive(event(i)) }
        pipeline.shutdown()
        for sink in [a, b] {
            let got = sink.envelopes
            #expect(got.map(index) == Array(0..<5000))
            #expect(zip(got, got.dropFirst()).allSatisfy { $0.seq < $1.seq })
            #expect(got.allSatisfy { $0.run == "live" && $0.ts == 1_000 })
            #expect(sink.flushCount == 1)
        }
        #expect(a.envelopes.map(\.seq) == b.envelopes.map(\.seq))
    }

    @Test("events handed over together keep their order, get consecutive seqs, one wall-clock time and the run")
    func handOverTogether() {
        let a = RecordingSink(name: "a")
        let clock = Atomic<Int>(0)
        let pipeline = EventPipeline(run: "live", sinks: [a], queueCapacity: 100_000,
                                     wallClock: { Double(clock.add(1, ordering: .relaxed).newValue) })
        let runSink = pipeline.sink(run: "test:x")
        // Single events and groups interleaved, groups crossing segment boundaries (1,024 envelopes).
        var next = 0
        for round in 0..<300 {
            let size = round % 7
            let group = (next..<(next + size)).map { event($0) }
            next += size
            if round % 2 == 0 { pipeline.receive(contentsOf: group) } else { runSink.receive(contentsOf: group) }
            pipeline.receive(event(next))
            next += 1
        }
        pipeline.shutdown()
        let got = a.envelopes
        #expect(got.map(index) == Array(0..<next))
        #expect(zip(got, got.dropFirst()).allSatisfy { $1.seq == $0.seq + 1 || $0.run != $1.run || $0.ts != $1.ts })
        // Within one hand-over: one ts, consecutive seqs, one run.
        let groups = Dictionary(grouping: got, by: \.ts).values.filter { $0.count > 1 }
        #expect(!groups.isEmpty)
        for g in groups {
            #expect(Set(g.map(\.run)).count == 1)
            let seqs = g.map(\.seq).sorted()
            #expect(seqs.last! - seqs.first! == UInt64(g.count - 1))
        }
        #expect(got.contains { $0.run == "test:x" } && got.contains { $0.run == "live" })
    }

    @Test("concurrent emitters still give each sink envelopes in seq order")
    func concurrentEmitters() async {
        let a = RecordingSink(name: "a")
        let pipeline = EventPipeline(sinks: [a])
        await withTaskGroup(of: Void.self) { group in
            for worker in 0..<4 {
                group.addTask { for i in 0..<2000 { pipeline.receive(event(worker * 10_000 + i)) } }
            }
        }
        pipeline.shutdown()
        let got = a.envelopes
        #expect(got.count == 8000)
        #expect(zip(got, got.dropFirst()).allSatisfy { $0.seq < $1.seq })
        #expect(Set(got.map(index)).count == 8000)
    }

    @Test("a slow sink loses its oldest events, counts them exactly, and the others hear sink.dropped",
          arguments: [false, true])
    func overflowDropsOldest(inGroups: Bool) {
        let slow = RecordingSink(name: "slow", gated: true)
        let fast = RecordingSink(name: "fast")
        let pipeline = EventPipeline(sinks: [slow, fast], queueCapacity: 10)
        pipeline.receive(event(0))
        slow.entered.wait()  // the slow sink now holds event 0 inside consume
        // Bursts of 5 that the fast sink can absorb within its own bound of 10.
        for burst in 0..<6 {
            // One by one, or as one group (as the engine hands over the events of one input).
            if inGroups {
                pipeline.receive(contentsOf: (1...5).map { event(burst * 5 + $0) })
            } else {
                for i in 1...5 { pipeline.receive(event(burst * 5 + i)) }
            }
            while pipeline.queueDepth(sink: "fast") != 0 { usleep(200) }
        }
        #expect(pipeline.dropped(sink: "slow") == 20)
        #expect(pipeline.queueDepth(sink: "slow") == 10)
        #expect(pipeline.dropped(sink: "fast") == 0)
        // Let the slow sink go: one gate per batch it will consume.
        for _ in 0..<100 { slow.gate.signal() }
        pipeline.shutdown()
        #expect(slow.envelopes.map(index) == [0] + Array(21...30))
        let fastEvents = fast.envelopes.filter { $0.name != .sinkDropped }
        #expect(fastEvents.map(index) == Array(0...30))
        let reports = fast.envelopes.filter { $0.name == .sinkDropped }
        #expect(!reports.isEmpty)
        #expect(reports.allSatisfy { $0.attrs["sink"] == "slow" && $0.placement == nil })
        #expect(reports.compactMap { $0.attrs["count"]?.intValue }.reduce(0, +) == 20)
        // The first drop is reported at once, the rest coalesced.
        #expect(reports.count <= 7)  // at most one per burst of 5, plus the remainder at shutdown
        #expect(!slow.envelopes.contains { $0.name == .sinkDropped })
        let stats = pipeline.stats()
        #expect(stats.map(\.sink) == ["slow", "fast"])
        #expect(stats[0].dropped == 20 && stats[0].consumed == 11 && stats[0].capacity == 10)
        #expect(stats[1].consumed == UInt64(fast.envelopes.count))
    }

    @Test("drop reports are rate limited: a long overflow gives few sink.dropped events with an exact total")
    func dropReportsCoalesced() {
        let slow = RecordingSink(name: "slow", gated: true)
        let fast = RecordingSink(name: "fast")
        let pipeline = EventPipeline(sinks: [slow, fast], queueCapacity: 1000)
        pipeline.receive(event(0))
        slow.entered.wait()
        // Bursts the fast sink can absorb (it must not drop the reports themselves).
        for round in 0..<20 {
            for i in 1...990 { pipeline.receive(event(round * 1000 + i)) }
            while pipeline.queueDepth(sink: "fast") != 0 { usleep(200) }
        }
        for _ in 0..<100 { slow.gate.signal() }
        pipeline.shutdown()
        #expect(pipeline.dropped(sink: "fast") == 0)
        let reports = fast.envelopes.filter { $0.name == .sinkDropped }
        #expect(reports.compactMap { $0.attrs["count"]?.intValue }.reduce(0, +) == 20 * 990 - 1000)
        #expect(pipeline.dropped(sink: "slow") == 20 * 990 - 1000)
        #expect(reports.count < 200)
    }

    @Test("shutdown drains every queue completely, flushes each sink once, then ignores events")
    func shutdownLosesNothing() {
        let sinks = (0..<3).map { RecordingSink(name: "s\($0)") }
        let pipeline = EventPipeline(sinks: sinks, maxBatch: 7)
        let n = 20_000
        for i in 0..<n { pipeline.receive(event(i)) }
        pipeline.shutdown()
        for sink in sinks {
            #expect(sink.envelopes.count == n)
            #expect(sink.flushCount == 1)
        }
        pipeline.receive(event(n))
        pipeline.ingest([Envelope(event(n + 1), seq: 1, ts: 0, run: "x")])
        pipeline.shutdown()  // idempotent
        #expect(sinks.allSatisfy { $0.envelopes.count == n && $0.flushCount == 1 })
        #expect(pipeline.stats().allSatisfy { $0.queueDepth == 0 && $0.dropped == 0 && $0.consumed == UInt64(n) })
    }

    @Test("a sink that takes whole takes gets every event once, in order, in batches of at most maxBatch")
    func wholeTakes() {
        final class TakingSink: EventSink {
            let name = "taking"
            let calls = Mutex<[[Int]]>([])
            let seen = Mutex<[Int]>([])
            func consume(_ batch: [Envelope]) { consume(batches: [batch]) }
            func consume(batches: [[Envelope]]) {
                calls.withLock { $0.append(batches.map(\.count)) }
                seen.withLock { seen in for batch in batches { seen.append(contentsOf: batch.map(index)) } }
                usleep(2000)  // slow enough that the next take finds many events waiting
            }
            func flush() {}
        }
        let sink = TakingSink()
        let pipeline = EventPipeline(sinks: [sink], maxBatch: 100)
        let n = 20_000
        for i in 0..<n { pipeline.receive(event(i)) }
        pipeline.shutdown()
        #expect(sink.seen.withLock { $0 } == Array(0..<n))
        let calls = sink.calls.withLock { $0 }
        #expect(calls.allSatisfy { $0.allSatisfy { $0 >= 1 && $0 <= 100 } })
        // Bursts arrive as several batches per call, so a per-call cost (an fsync) is paid per take.
        #expect(calls.contains { $0.count > 1 })
        #expect(calls.count < n / 100)
        #expect(pipeline.stats()[0].batches == UInt64(calls.map(\.count).reduce(0, +)))
        #expect(pipeline.stats()[0].consumed == UInt64(n))
    }

    @Test("ingested envelopes get fresh local seq and keep ts, t, run, trace and span")
    func ingestRenumbers() {
        let a = RecordingSink(name: "a")
        let pipeline = EventPipeline(sinks: [a], wallClock: { 5 })
        pipeline.receive(event(0))
        let remote = (1...3).map { i in
            Envelope(event(i), seq: 999 - UInt64(i), ts: 1_700_000_000 + Double(i), run: "test:remote")
        }
        pipeline.ingest(remote)
        pipeline.receive(event(4))
        pipeline.shutdown()
        let got = a.envelopes
        #expect(got.count == 5)
        #expect(zip(got, got.dropFirst()).allSatisfy { $0.seq < $1.seq })
        for (i, envelope) in got[1...3].enumerated() {
            let original = remote[i]
            #expect(envelope.seq != original.seq)
            #expect(envelope.ts == original.ts && envelope.t == original.t && envelope.run == "test:remote")
            #expect(envelope.trace == original.trace && envelope.span == original.span)
        }
        #expect(got[0].run == "live" && got[4].ts == 5)
    }

    @Test("a run view stamps its own run on the same sinks")
    func runView() {
        let a = RecordingSink(name: "a")
        let pipeline = EventPipeline(sinks: [a])
        let view = pipeline.sink(run: "sim:42")
        pipeline.receive(event(0))
        view.receive(event(1))
        pipeline.shutdown()
        #expect(a.envelopes.map(\.run) == ["live", "sim:42"])
    }

    @Test("seq is strictly increasing across two pipelines of one process")
    func processWideSeq() {
        let a = RecordingSink(name: "a"), b = RecordingSink(name: "b")
        let p1 = EventPipeline(sinks: [a]), p2 = EventPipeline(sinks: [b])
        p1.receive(event(0)); p2.receive(event(1)); p1.receive(event(2))
        p1.shutdown(); p2.shutdown()
        let seqs = [a.envelopes[0].seq, b.envelopes[0].seq, a.envelopes[1].seq]
        #expect(seqs[0] < seqs[1] && seqs[1] < seqs[2])
    }

    @Test("waitUntilDrained returns once sinks have consumed everything")
    func drainWait() {
        let a = RecordingSink(name: "a")
        let pipeline = EventPipeline(sinks: [a])
        for i in 0..<1000 { pipeline.receive(event(i)) }
        #expect(pipeline.waitUntilDrained(timeout: 5))
        #expect(a.envelopes.count == 1000)
        pipeline.shutdown()
    }

    @Test("stats carry each sink's own health and lost events, read at the moment of the call")
    func statsReadHealth() {
        final class FailingSink: EventSink {
            let name = "failing"
            var type: String { "custom" }
            let recorder = SinkHealthRecorder()
            func consume(_ batch: [Envelope]) {
                recorder.failed("disk full")
                recorder.dropped(batch.count)
            }
            var health: SinkHealth { recorder.current }
        }
        let failing = FailingSink()
        let slow = RecordingSink(name: "slow", gated: true)
        let pipeline = EventPipeline(sinks: [failing, slow], queueCapacity: 100)
        pipeline.receive(event(0))
        slow.entered.wait()
        for i in 1...5 { pipeline.receive(event(i)) }
        #expect(pipeline.waitUntilDrainedExcept(slow: 5))
        let seen = pipeline.stats()
        #expect(seen.map(\.sink) == ["failing", "slow"])
        #expect(seen.map(\.type) == ["custom", "slow"])
        #expect(seen[0].up == false && seen[0].errors >= 1 && seen[0].lastError == "disk full")
        #expect(seen[0].dropped == 6 && seen[0].consumed == 6)
        #expect(seen[1].up && seen[1].errors == 0 && seen[1].queueDepth == 5 && seen[1].dropped == 0)
        for _ in 0..<10 { slow.gate.signal() }
        pipeline.shutdown()
    }
}

extension EventPipeline {
    /// Waits until every sink but a gated one has consumed everything (the gated one holds `slow` events).
    func waitUntilDrainedExcept(slow depth: Int) -> Bool {
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            let s = stats()
            if s.first?.consumed == UInt64(depth + 1) && s.last?.queueDepth == depth { return true }
            usleep(1000)
        }
        return false
    }
}

final class ClosableSink: EventSink {
    let name = "closable"
    let log = Mutex<[String]>([])
    func consume(_ batch: [Envelope]) { log.withLock { $0.append("consume \(batch.count)") } }
    func flush() { log.withLock { $0.append("flush") } }
    func close() { log.withLock { $0.append("close") } }
}

@Suite("EventPipeline lifecycle", .ownThread)
struct EventPipelineLifecycleTests {
    @Test("shutdown calls flush then close on a sink, after its last batch, once")
    func closeOrder() {
        let sink = ClosableSink()
        let pipeline = EventPipeline(sinks: [sink], maxBatch: 1_000_000)
        pipeline.receive(event(0))
        #expect(pipeline.waitUntilDrained())
        pipeline.shutdown()
        #expect(sink.log.withLock { $0 } == ["consume 1", "flush", "close"])
    }

    @Test("a pipeline dropped without shutdown still drains and flushes its sinks")
    func droppedPipeline() {
        let sink = RecordingSink(name: "a")
        do {
            let pipeline = EventPipeline(sinks: [sink])
            for i in 0..<1000 { pipeline.receive(event(i)) }
        }
        let deadline = Date().addingTimeInterval(10)
        while sink.flushCount == 0 && Date() < deadline { usleep(1000) }
        #expect(sink.flushCount == 1)
        #expect(sink.envelopes.count == 1000)
    }

    @Test("a real signal shuts the pipeline down and then runs the continuation")
    func signalShutdown() {
        let sink = RecordingSink(name: "a")
        let pipeline = EventPipeline(sinks: [sink])
        let done = DispatchSemaphore(value: 0)
        pipeline.shutdownOnSignals([SIGUSR2]) { done.signal() }
        for i in 0..<500 { pipeline.receive(event(i)) }
        kill(getpid(), SIGUSR2)
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(sink.envelopes.count == 500 && sink.flushCount == 1)
        pipeline.receive(event(501))
        #expect(sink.envelopes.count == 500)
    }

    @Test("emitting costs the caller little: measured with memory-like, file-like and no-op sinks")
    func emitCost() {
        let sinks = (0..<3).map { RecordingSink(name: "s\($0)") }
        let pipeline = EventPipeline(sinks: sinks)
        let n = 100_000
        let e = event(1)
        let start = DispatchTime.now().uptimeNanoseconds
        for _ in 0..<n { pipeline.receive(e) }
        let perEvent = Double(DispatchTime.now().uptimeNanoseconds - start) / Double(n)
        pipeline.shutdown()
        print("pipeline.emit (debug build, 3 sinks): \(Int(perEvent)) ns/event")
        #expect(sinks.allSatisfy { $0.envelopes.count == n })
        #expect(perEvent < 50_000)
    }
}
