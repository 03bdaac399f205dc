/// Two event stores read as one: recent events from `primary` (the memory sink), and the runs it
/// does not hold (forgotten past its limits, or from before a restart) from `archive` (the sqlite
/// sink).
///
/// A run belongs to the primary while `primary.holdsRun(id)`; otherwise its events, placements and
/// detail come from the archive, with the archive's numbering (`seq`) throughout, so paging one
/// run never mixes the two. `runSummaries` lists the primary's runs, then the archive's other runs,
/// each marked `stored`. Queries without a run, `latestSeq` and `follow` are the
/// primary's (the live view).
///
/// ```swift
/// let store = LayeredEventStore(primary: memory, archive: sqlite)
/// let runs = store.runSummaries()   // live runs, then stored ones marked stored
/// ```
public struct LayeredEventStore: EventStore {
    /// The store of recent events and the live feed.
    public let primary: any EventStore
    /// The store read for runs the primary does not hold.
    public let archive: any EventStore

    /// Reads `primary` first and `archive` for the runs the primary does not hold.
    public init(primary: any EventStore, archive: any EventStore) {
        self.primary = primary
        self.archive = archive
    }

    /// The store that answers for `run`: the archive for a run the primary does not hold and the
    /// archive does; the primary otherwise, and without a run.
    public func store(for run: String?) -> any EventStore {
        guard let run, !primary.holdsRun(run), archive.holdsRun(run) else { return primary }
        return archive
    }

    /// The run's events from the store that answers for it; without a run, the primary's.
    public func events(since: UInt64?, limit: Int, run: String?, placement: String?, name: String?) -> [Envelope] {
        store(for: run).events(since: since, limit: limit, run: run, placement: placement, name: name)
    }

    /// The primary's newest seq.
    public var latestSeq: UInt64? { primary.latestSeq }

    /// The primary's runs, then the archive's runs the primary does not hold, marked `stored`.
    public func runSummaries() -> [RunSummary] {
        let recent = primary.runSummaries()
        let ids = Set(recent.map(\.id))
        let stored = archive.runSummaries().filter { !ids.contains($0.id) }.map { run in
            var run = run
            run.stored = true
            return run
        }
        return recent + stored
    }

    /// The primary's detail of `id`, else the archive's, marked `stored`.
    public func runDetail(id: String) -> RunDetail? {
        if let detail = primary.runDetail(id: id) { return detail }
        guard var detail = archive.runDetail(id: id) else { return nil }
        detail.summary.stored = true
        return detail
    }

    /// Held by either store.
    public func holdsRun(_ id: String) -> Bool { primary.holdsRun(id) || archive.holdsRun(id) }

    /// The primary's feed.
    public func follow(_ handler: @escaping @Sendable ([Envelope]) -> Void) -> @Sendable () -> Void {
        primary.follow(handler)
    }
}
