import Dispatch
import FlowEvents
import FlowFetch
import Foundation
import Synchronization
import TestSupport
import Testing

/// A recording sink that says it is durable; gated like ``RecordingSink``.
final class DurableRecordingSink: EventSink {
    let name: String
    let inner: RecordingSink
    init(name: String, gated: Bool = false) { self.name = name; inner = RecordingSink(name: name, gated: gated) }
    var isDurable: Bool { true }
    func consume(_ batch: [Envelope]) { inner.consume(batch) }
    var envelopes: [Envelope] { inner.envelopes }
}

/// Envelopes as they come from `POST /api/ingest`, numbered in attrs `i`.
func ingestBatch(_ range: Range<Int>) -> [Envelope] {
    range.map { Envelope(event($0), seq: 0, ts: 1, run: "ingest") }
}

@Suite("EventPipeline ingest admission", .ownThread)
struct IngestAdmissionTests {
    @Test("the built-in contract: a sink is not durable unless it says so")
    func durableDefault() {
        #expect(RecordingSink(name: "r").isDurable == false)
        #expect(DurableRecordingSink(name: "d").isDurable == true)
        let pipeline = EventPipeline(sinks: [RecordingSink(name: "r"), DurableRecordingSink(name: "d")])
        defer { pipeline.shutdown() }
        #expect(pipeline.stats().map(\.durable) == [false, true])
    }

    @Test("a batch is queued whole while a durable sink has room, refused whole when it has not, and nothing refused is ever consumed")
    func allOrNothing() {
        let durable = DurableRecordingSink(name: "archive", gated: true)
        let other = RecordingSink(name: "memory")
        let pipeline = EventPipeline(sinks: [durable, other], queueCapacity: 100)
        #expect(pipeline.ingest(ingestBatch(0..<1), ifRoomWithin: 50) == .accepted)
        durable.inner.entered.wait()  // the durable sink holds envelope 0 inside consume
        #expect(pipeline.ingest(ingestBatch(1..<31), ifRoomWithin: 50) == .accepted)   // 30 queued
        #expect(pipeline.ingest(ingestBatch(31..<51), ifRoomWithin: 50) == .accepted)  // 50 queued: exactly the limit
        #expect(pipeline.ingest(ingestBatch(51..<52), ifRoomWithin: 50) == .refused(sinks: ["archive"]))
        #expect(pipeline.ingest(ingestBatch(52..<60), ifRoomWithin: 50) == .refused(sinks: ["archive"]))
        #expect(pipeline.queueDepth(sink: "archive") == 50)
        let stats = pipeline.stats()
        #expect(stats[0].saturated == true && stats[0].dropped == 0)
        #expect(stats[1].saturated == false, "the memory sink kept up")
        for _ in 0..<100 { durable.inner.gate.signal() }
        pipeline.shutdown()
        #expect(durable.envelopes.map(index) == Array(0..<51))
        #expect(other.envelopes.filter { $0.name != .sinkDropped }.map(index) == Array(0..<51))
        #expect(pipeline.ingest(ingestBatch(60..<61), ifRoomWithin: 50) == .stopped)
    }

    @Test("only durable sinks hold ingest back; with allSinks every queue must have room; the limit never exceeds the queue capacity")
    func whichSinksCount() {
        let slow = RecordingSink(name: "slow", gated: true)
        let pipeline = EventPipeline(sinks: [slow], queueCapacity: 10)
        #expect(pipeline.ingest(ingestBatch(0..<1), ifRoomWithin: 5) == .accepted)
        slow.entered.wait()
        // Not durable: accepted, and its queue drops its oldest as the engine path does.
        #expect(pipeline.ingest(ingestBatch(1..<21), ifRoomWithin: 5) == .accepted)
        #expect(pipeline.dropped(sink: "slow") == 10)
        #expect(pipeline.ingest(ingestBatch(21..<22), ifRoomWithin: 5, in: .allSinks) == .refused(sinks: ["slow"]))
        for _ in 0..<100 { slow.gate.signal() }
        pipeline.shutdown()

        let durable = DurableRecordingSink(name: "d", gated: true)
        let small = EventPipeline(sinks: [durable], queueCapacity: 10)
        #expect(small.ingest(ingestBatch(0..<1), ifRoomWithin: 1_000) == .accepted)
        durable.inner.entered.wait()
        #expect(small.ingest(ingestBatch(1..<12), ifRoomWithin: 1_000) == .refused(sinks: ["d"]), "11 > capacity 10")
        #expect(small.ingest(ingestBatch(1..<11), ifRoomWithin: 1_000) == .accepted)
        #expect(small.dropped(sink: "d") == 0)
        for _ in 0..<100 { durable.inner.gate.signal() }
        small.shutdown()
        #expect(durable.envelopes.map(index) == Array(0..<11))
    }

    @Test("under a stuck durable sink the in-process path never blocks: a full queue drops and counts, and the sink shows saturated")
    func engineStillDrops() {
        let durable = DurableRecordingSink(name: "archive", gated: true)
        let pipeline = EventPipeline(sinks: [durable], queueCapacity: 100)
        #expect(pipeline.stats()[0].saturated == false)
        pipeline.receive(event(0))
        durable.inner.entered.wait()
        let start = DispatchTime.now().uptimeNanoseconds
        for i in 1...10_000 { pipeline.receive(event(i)) }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        #expect(seconds < 5, "10,000 receives behind a stuck sink returned (generous bound)")
        #expect(pipeline.dropped(sink: "archive") == 9_900)
        #expect(pipeline.stats()[0].saturated == true)
        #expect(pipeline.ingest(ingestBatch(0..<1), ifRoomWithin: 100) == .refused(sinks: ["archive"]))
        for _ in 0..<1000 { durable.inner.gate.signal() }
        pipeline.shutdown()
        #expect(durable.envelopes.map(index) == [0] + Array(9_901...10_000))
    }
}
