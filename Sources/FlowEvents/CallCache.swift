import Synchronization

/// The read model kept between queries: each run's calls, folded once by ``CallFold`` and brought up
/// to date with only the events that arrived since (read from the store in pages, by seq), and the
/// run's statistics without a filter, computed once per change. Every store is read through it the
/// same way (``CallQuery`` holds one), so a query over a run of 100,000 events folds only what is new.
///
/// An answer covers the whole run as the store holds it: every event from the oldest the store still
/// had when the run was first read, up to `maxEvents`. A run that grows past `maxEvents` is folded
/// again from its newest `maxEvents / 2` events; its ``Coverage`` then says `complete: false`, as it
/// does when the store counts more events of the run than it held to read (see ``Coverage``).
public final class CallCache: Sendable {
    /// Bounds of the cache.
    public struct Limits: Sendable, Hashable {
        /// Most events folded per run (and for the query without a run).
        public var maxEvents: Int
        /// Runs kept; the least recently queried is dropped first.
        public var maxRuns: Int
        /// Events read from the store per page.
        public var page: Int
        /// Bounds.
        public init(maxEvents: Int = 500_000, maxRuns: Int = 8, page: Int = 10_000) {
            self.maxEvents = max(2, maxEvents); self.maxRuns = max(1, maxRuns); self.page = max(1, page)
        }
    }

    /// The calls of one run as the cache holds them now.
    public struct Snapshot: Sendable {
        /// The fold's traces, in the order of their first event (calls and engine-level activity).
        public var traces: [Call]
        /// The indices in `traces` of the calls, newest (highest last seq) first.
        public var newest: [Int]
        /// Every call, newest first (copied out of `traces`).
        public var calls: [Call] { newest.map { traces[$0] } }
        /// The events folded.
        public var coverage: Coverage
        /// Changes whenever new events were folded (for results computed from this snapshot).
        var generation: UInt64
        var key: Key?
    }

    struct Key: Hashable, Sendable {
        var store: ObjectIdentifier
        var run: String?
    }

    private struct Entry {
        /// The store read, held so that its address (the key) is not another store's while the entry lives.
        var store: (any EventStore)?
        var fold = CallFold()
        /// The newest seq folded (0: none).
        var lastSeq: UInt64 = 0
        /// The store's `latestSeq` when it was last read: unchanged means nothing new.
        var checked: UInt64?
        var events = 0
        var firstSeq: UInt64?
        var from: Double?, to: Double?
        /// Whether the fold began at the oldest event the store held of the run.
        var fromOldest = true
        var complete = true
        var generation: UInt64 = 0
        var used: UInt64 = 0
        /// The calls' indices newest first, computed once per generation.
        var newest: [Int]?
        var totals: CallQuery.Result?
        var placements: (bounds: CallStatistics.Bounds, answer: CallQuery.Placements)?
    }

    private struct State {
        var entries: [Key: Entry] = [:]
        var clock: UInt64 = 0
        var generations: UInt64 = 0
    }

    /// The cache's bounds.
    public let limits: Limits
    private let state = Mutex(State())

    /// An empty cache.
    public init(limits: Limits = Limits()) { self.limits = limits }

    /// Runs held now.
    public var count: Int { state.withLock { $0.entries.count } }

    /// The calls of `run` (every run when nil) in `store`, brought up to date. A store that is not a
    /// class instance has no identity to keep its calls by: it is folded afresh on every call.
    public func snapshot(of store: any EventStore, run: String?) -> Snapshot {
        let answering = (store as? LayeredEventStore)?.store(for: run) ?? store
        guard type(of: answering) is AnyObject.Type else {
            var entry = Entry()
            update(&entry, store: answering, run: run)
            return Snapshot(traces: entry.fold.traces, newest: Self.newestFirst(entry.fold), coverage: coverage(entry), generation: 0, key: nil)
        }
        let key = Key(store: ObjectIdentifier(answering as AnyObject), run: run)
        return state.withLock { state in
            state.clock += 1
            var entry = state.entries.removeValue(forKey: key) ?? Entry()
            entry.store = answering
            if update(&entry, store: answering, run: run) {
                state.generations += 1
                entry.generation = state.generations
                entry.newest = nil
                entry.totals = nil
                entry.placements = nil
            }
            entry.used = state.clock
            let newest = entry.newest ?? Self.newestFirst(entry.fold)
            entry.newest = newest
            let snapshot = Snapshot(traces: entry.fold.traces, newest: newest, coverage: coverage(entry), generation: entry.generation, key: key)
            state.entries[key] = entry
            if state.entries.count > limits.maxRuns, let oldest = state.entries.min(by: { $0.value.used < $1.value.used })?.key {
                state.entries[oldest] = nil
            }
            return snapshot
        }
    }

    /// The indices of the calls among `fold`'s traces, newest (highest last seq) first; ties in fold order.
    static func newestFirst(_ fold: CallFold) -> [Int] {
        let traces = fold.traces
        return traces.withUnsafeBufferPointer { buffer in
            var order = buffer.indices.filter { buffer[$0].isCall }
            order.sort { buffer[$0].lastSeq != buffer[$1].lastSeq ? buffer[$0].lastSeq > buffer[$1].lastSeq : $0 < $1 }
            return order
        }
    }

    /// The unfiltered calls answer of `snapshot`, computed by `compute` once per generation.
    func totals(_ snapshot: Snapshot, _ compute: () -> CallQuery.Result) -> CallQuery.Result {
        if let key = snapshot.key, let kept = state.withLock({ state in
            state.entries[key].flatMap { $0.generation == snapshot.generation ? $0.totals : nil }
        }) { return kept }
        let result = compute()
        if let key = snapshot.key {
            state.withLock { state in if state.entries[key]?.generation == snapshot.generation { state.entries[key]?.totals = result } }
        }
        return result
    }

    /// The unfiltered placements answer of `snapshot` within `bounds`, computed by `compute` once per generation.
    func placements(_ snapshot: Snapshot, bounds: CallStatistics.Bounds, _ compute: () -> CallQuery.Placements) -> CallQuery.Placements {
        if let key = snapshot.key, let kept = state.withLock({ state in
            state.entries[key].flatMap { $0.generation == snapshot.generation && $0.placements?.bounds == bounds ? $0.placements?.answer : nil }
        }) { return kept }
        let answer = compute()
        if let key = snapshot.key {
            state.withLock { state in
                if state.entries[key]?.generation == snapshot.generation { state.entries[key]?.placements = (bounds, answer) }
            }
        }
        return answer
    }

    /// Folds the events of `run` newer than the entry's; true when there were any.
    @discardableResult
    private func update(_ entry: inout Entry, store: any EventStore, run: String?) -> Bool {
        let latest = store.latestSeq
        if let checked = entry.checked, checked == latest { return false }
        var added = false
        while true {
            var page = store.events(since: entry.lastSeq, limit: limits.page, run: run, placement: nil, name: nil)
            if page.isEmpty { break }
            if entry.events + page.count > limits.maxEvents {
                // Past the bound: begin again from the run's newest half.
                var fresh = Entry()
                fresh.fromOldest = false
                entry = fresh
                page = store.events(since: nil, limit: limits.maxEvents / 2, run: run, placement: nil, name: nil)
            }
            for e in page where entry.events == 0 || e.seq > entry.lastSeq {
                entry.fold.add(e)
                entry.lastSeq = max(entry.lastSeq, e.seq)
                entry.events += 1
                if entry.firstSeq == nil { entry.firstSeq = e.seq; entry.from = e.ts }
                entry.to = e.ts
            }
            added = true
            if page.count < limits.page || !entry.fromOldest { break }
        }
        entry.checked = latest
        if added || entry.checked == nil {
            // Complete: folded from the oldest event held, and the store counts no event of the run it did not hold.
            let seen: Int
            if let run { seen = store.runDetail(id: run)?.summary.events ?? entry.events }
            else { seen = store.runSummaries().reduce(0) { $0 + $1.events } }
            entry.complete = entry.fromOldest && seen <= entry.events
        }
        return added
    }

    private func coverage(_ entry: Entry) -> Coverage {
        Coverage(events: entry.events, calls: entry.fold.callCount, complete: entry.complete, firstSeq: entry.firstSeq,
                 lastSeq: entry.events > 0 ? entry.lastSeq : nil, from: entry.from, to: entry.to)
    }
}
