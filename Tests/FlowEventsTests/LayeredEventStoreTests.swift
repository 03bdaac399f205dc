import FlowEvents
import FlowFetch
import FlowJSON
import Synchronization
import Testing

/// A store over a fixed list of envelopes: runs are the envelopes' runs, each run's detail and
/// placements name the store, and `follow` records who subscribed.
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
    func placementsJSON(run: String?) -> JSONValue { ["run": run.map(JSONValue.string) ?? .null, "from": .string(label)] }
    func runsJSON() -> [JSONValue] {
        var seen: [String] = []
        for e in envelopes where !seen.contains(e.run) { seen.append(e.run) }
        return seen.map { ["id": .string($0), "from": .string(label)] }
    }
    func runJSON(id: String) -> JSONValue? {
        envelopes.contains { $0.run == id } ? ["run": ["id": .string(id)], "from": .string(label)] : nil
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
        #expect(store.runsJSON() == [["id": "live", "from": "memory"], ["id": "test:both", "from": "memory"],
                                     ["id": "test:old", "from": "archive", "stored": true]])
    }

    @Test("a run the primary does not hold is read whole from the archive: events, placements, detail")
    func archivedRun() {
        #expect(store.events(since: nil, limit: 10, run: "test:old", placement: nil, name: nil).map(\.seq) == [2, 4])
        #expect(store.events(since: 2, limit: 10, run: "test:old", placement: nil, name: nil).map(\.seq) == [4])
        #expect(store.placementsJSON(run: "test:old")["from"] == "archive")
        #expect(store.runJSON(id: "test:old") == ["run": ["id": "test:old", "stored": true], "from": "archive"])
        #expect(store.holdsRun("test:old"))
        #expect(store.runJSON(id: "test:none") == nil)
        #expect(store.events(since: nil, limit: 10, run: "test:none", placement: nil, name: nil).isEmpty)
    }

    @Test("a run the primary holds, all runs, latestSeq and the live feed are the primary's")
    func primaryRuns() {
        #expect(store.events(since: nil, limit: 10, run: "test:both", placement: nil, name: nil).map(\.seq) == [2])
        // After the primary's newest seq nothing more: the archive's rows of a live run never leak in.
        #expect(store.events(since: 3, limit: 10, run: "live", placement: nil, name: nil).isEmpty)
        #expect(store.events(since: nil, limit: 10, run: nil, placement: nil, name: nil).map(\.seq) == [1, 2, 3])
        #expect(store.placementsJSON(run: nil)["from"] == "memory")
        #expect(store.placementsJSON(run: "live")["from"] == "memory")
        #expect(store.runJSON(id: "test:both")?["from"] == "memory")
        #expect(store.latestSeq == 3)
        _ = store.follow { _ in }
        #expect(memory.followed.withLock { $0 } == 1)
        #expect(archive.followed.withLock { $0 } == 0)
    }
}
