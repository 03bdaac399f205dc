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
        /// The calls' indices newest first, brought up to date with `touched` once per generation.
        var newest: [Int]?
        /// Traces that received events since `newest` was brought up to date.
        var touched: Set<Int> = []
        var totals: CallQuery.Result?
        var placements: (bounds: CallStatistics.Bounds, answer: CallQuery.Placements)?
        /// The unfiltered placements answer kept call by call, and the traces changed since it was
        /// brought up to date; `liveOff` once a bound made it give way to computing at once.
        var live: LiveStatistics?
        var changed: Set<Int> = []
        var liveOff = false

        /// The unfiltered placements answer from `live`, brought up to date (built at first); nil
        /// when it cannot give it (see ``LiveStatistics``).
        mutating func livePlacements(bounds: CallStatistics.Bounds, run: String?, coverage: Coverage) -> CallQuery.Placements? {
            guard !liveOff else { return nil }
            let traces = fold.traces
            if var kept = live, kept.bounds == bounds {
                live = nil // uniquely referenced while it changes
                let applied = traces.withUnsafeBufferPointer { buffer in changed.allSatisfy { kept.apply(buffer[$0], at: $0) } }
                changed = []
                if applied {
                    live = kept
                    return kept.answer(run: run, coverage: coverage)
                }
            }
            changed = []
            guard let built = LiveStatistics(traces: traces, bounds: bounds) else {
                live = nil
                liveOff = true
                return nil
            }
            live = built
            return built.answer(run: run, coverage: coverage)
        }
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

    /// Runs whose placements answer is kept call by call now (a test hook).
    var liveRuns: Int { state.withLock { $0.entries.values.reduce(0) { $0 + ($1.live != nil ? 1 : 0) } } }

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
                entry.totals = nil
                entry.placements = nil
            }
            entry.used = state.clock
            let newest = Self.newestFirst(entry.fold, after: entry.newest, touched: entry.touched)
            entry.newest = newest
            entry.touched = []
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

    /// `newestFirst(fold)`, from `newest` (that order before the events that touched the traces of
    /// `touched`) when there is one: every touched call has a newer last event than every untouched
    /// one (events are folded in seq order), so the touched calls come first, newest first, and
    /// the untouched keep their order.
    static func newestFirst(_ fold: CallFold, after newest: [Int]?, touched: Set<Int>) -> [Int] {
        guard let newest else { return newestFirst(fold) }
        if touched.isEmpty { return newest }
        let traces = fold.traces
        return traces.withUnsafeBufferPointer { buffer in
            var order = Array(touched.filter { buffer[$0].isCall })
            order.sort { buffer[$0].lastSeq != buffer[$1].lastSeq ? buffer[$0].lastSeq > buffer[$1].lastSeq : $0 < $1 }
            order.reserveCapacity(order.count + newest.count)
            for i in newest where !touched.contains(i) { order.append(i) }
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

    /// The unfiltered placements answer of `snapshot` within `bounds`, once per generation: kept call
    /// by call (``LiveStatistics``), else computed by `compute`.
    func placements(_ snapshot: Snapshot, bounds: CallStatistics.Bounds, _ compute: () -> CallQuery.Placements) -> CallQuery.Placements {
        if let key = snapshot.key, let kept = state.withLock({ state -> CallQuery.Placements? in
            guard var entry = state.entries.removeValue(forKey: key) else { return nil }
            defer { state.entries[key] = entry }
            guard entry.generation == snapshot.generation else { return nil }
            if let kept = entry.placements, kept.bounds == bounds { return kept.answer }
            guard let answer = entry.livePlacements(bounds: bounds, run: key.run, coverage: snapshot.coverage) else { return nil }
            entry.placements = (bounds, answer)
            return answer
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
                let trace = entry.fold.add(e)
                if entry.newest != nil { entry.touched.insert(trace) }
                if entry.live != nil { entry.changed.insert(trace) }
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
