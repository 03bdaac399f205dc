import FlowEvents
import FlowFetch
import Synchronization
import Testing

/// A store over a fixed list of envelopes: runs are the envelopes' runs, each run's summary names
/// the store in its `events` (1 for memory, 2 for the archive), and `follow` records who subscribed.
private final class ListStore: EventStore {
    let label: String
    let envelopes: [Envelope]
    let followed = Mutex(0)
    init(_ label: String, _ envelopes: [Envelope]) { self.label = label; self.envelopes = envelopes }

    func events(since: UInt64?, limit: Int, run: String?, placement: String?, name: String?) -> [Envelope] {
        let matching = envelopes.filter { (run == nil || $0.run == run) && (since == nil || $0.seq > since!) }
        return since == nil ? Array(matching.suffix(limit)) : Array(matching.prefix(limit))
    }
    var latestSeq: UInt64? { envelopes.last?.seq }
    var mark: Int { label == "memory" ? 1 : 2 }
    func runSummaries() -> [RunSummary] {
        var seen: [String] = []
        for e in envelopes where !seen.contains(e.run) { seen.append(e.run) }
        return seen.map { RunSummary(id: $0, firstTs: 0, lastTs: 0, events: mark, fetches: 0, errors: 0) }
    }
    func runDetail(id: String) -> RunDetail? {
        runSummaries().first { $0.id == id }.map { RunDetail(summary: $0, eventsByName: [label: 1]) }
    }
    func follow(_ handler: @escaping @Sendable ([Envelope]) -> Void) -> @Sendable () -> Void {
        followed.withLock { $0 += 1 }
        return {}
    }
}

private func event(_ seq: UInt64, run: String) -> Envelope {
    Envelope(seq: seq, ts: 1_796_000_000 + Double(seq), t: 0, run: run, trace: TraceID(high: 1, low: seq), span: SpanID(raw: seq),
             name: .fetchStart, placement: "main", attrs: [:])
}

@Suite("Layered event store")
struct LayeredEventStoreTests {
    // Memory holds live and test:both; the archive holds an older live, test:both and test:old,
    // with its own numbering (row ids) that overlaps memory's seqs.
    private let memory = ListStore("memory", [event(1, run: "live"), event(2, run: "test:both"), event(3, run: "live")])
    private let archive = ListStore("archive", [event(1, run: "live"), event(2, run: "test:old"), event(3, run: "test:both"),
                                                event(4, run: "test:old")])
    private var store: LayeredEventStore { LayeredEventStore(primary: memory, archive: archive) }

    @Test("runs are the primary's, then the archive's others marked stored: true")
    func runsUnion() {
        #expect(store.runSummaries().map { "\($0.id) \($0.events) \($0.stored)" }
                == ["live 1 false", "test:both 1 false", "test:old 2 true"])
    }

    @Test("a run the primary does not hold is read whole from the archive: events and detail")
    func archivedRun() {
        #expect(store.events(since: nil, limit: 10, run: "test:old", placement: nil, name: nil).map(\.seq) == [2, 4])
        #expect(store.events(since: 2, limit: 10, run: "test:old", placement: nil, name: nil).map(\.seq) == [4])
        let old = store.runDetail(id: "test:old")
        #expect(old?.summary.stored == true && old?.eventsByName == ["archive": 1])
        #expect(store.holdsRun("test:old"))
        #expect(store.runDetail(id: "test:none") == nil)
        #expect(store.events(since: nil, limit: 10, run: "test:none", placement: nil, name: nil).isEmpty)
    }

    @Test("a run the primary holds, all runs, latestSeq and the live feed are the primary's")
    func primaryRuns() {
        #expect(store.events(since: nil, limit: 10, run: "test:both", placement: nil, name: nil).map(\.seq) == [2])
        // After the primary's newest seq nothing more: the archive's rows of a live run never leak in.
        #expect(store.events(since: 3, limit: 10, run: "live", placement: nil, name: nil).isEmpty)
        #expect(store.events(since: nil, limit: 10, run: nil, placement: nil, name: nil).map(\.seq) == [1, 2, 3])
        #expect(store.runDetail(id: "test:both")?.eventsByName == ["memory": 1])
        #expect(store.runDetail(id: "test:both")?.summary.stored == false)
        #expect(store.latestSeq == 3)
        _ = store.follow { _ in }
        #expect(memory.followed.withLock { $0 } == 1)
        #expect(archive.followed.withLock { $0 } == 0)
    }
}
