import FlowJSON

/// The last preload failure of a placement.
public struct PreloadError: Sendable, Hashable {
    /// The error code as preload.end reported it (a number or a string).
    public var code: JSONValue
    /// Wall-clock time of the preload.end event.
    public var ts: Double
    /// Seq of the preload.end event.
    public var seq: UInt64

    /// Creates a preload error record.
    public init(code: JSONValue, ts: Double, seq: UInt64) { self.code = code; self.ts = ts; self.seq = seq }
}

/// Median and 95th percentile of durations, exact (nearest rank over every sample), and how many
/// samples they come from.
public struct DurationPercentiles: Sendable, Hashable {
    /// Nearest-rank percentiles, seconds; nil without samples.
    public var p50: Double?
    public var p95: Double?
    /// Durations they are computed from.
    public var samples: Int

    /// The percentiles of `durations` (any order).
    public init(_ durations: [Double]) { self.init(sorted: durations.sorted()) }

    /// The percentiles of `sorted` (ascending).
    init(sorted: [Double]) {
        p50 = Self.nearestRank(sorted, 0.5)
        p95 = Self.nearestRank(sorted, 0.95)
        samples = sorted.count
    }

    /// The percentile method of every FlowScope number (the strategy lab's too): the smallest of
    /// `sorted` with at least `q` of the values at or below it, i.e. the value of rank
    /// `ceil(q * n)`; nil when empty.
    public static func nearestRank(_ sorted: [Double], _ q: Double) -> Double? {
        guard !sorted.isEmpty else { return nil }
        return sorted[min(max(Int((q * Double(sorted.count)).rounded(.up)) - 1, 0), sorted.count - 1)]
    }
}

/// Which events an answer was computed from: the run's events (every run's, without one) from
/// `firstSeq` to `lastSeq`, and whether that is the whole run.
public struct Coverage: Sendable, Hashable {
    /// Events read.
    public var events: Int
    /// Calls folded from them.
    public var calls: Int
    /// Whether the events read are the whole run: every event of it the store counted (its run
    /// summary's `events`) was read. False when the store forgot older events before they were read
    /// (a memory sink past its capacity) or the run is longer than the read model's bound
    /// (``CallCache/Limits/maxEvents``), when only its newest events are counted.
    public var complete: Bool
    /// Seq and wall clock of the oldest and the newest event read; nil when none was read.
    public var firstSeq: UInt64?
    public var lastSeq: UInt64?
    public var from: Double?
    public var to: Double?

    /// The coverage of `events` (oldest first), folded into `calls` calls.
    public init(events: [Envelope], calls: Int, complete: Bool) {
        self.events = events.count
        self.calls = calls
        self.complete = complete
        firstSeq = events.first?.seq
        lastSeq = events.last?.seq
        from = events.first?.ts
        to = events.last?.ts
    }

    /// A coverage of `events` events from `firstSeq` to `lastSeq`, folded into `calls` calls.
    public init(events: Int, calls: Int, complete: Bool, firstSeq: UInt64?, lastSeq: UInt64?, from: Double?, to: Double?) {
        self.events = events; self.calls = calls; self.complete = complete
        self.firstSeq = firstSeq; self.lastSeq = lastSeq; self.from = from; self.to = to
    }
}

/// Statistics of one placement over a set of calls (see ``CallStatistics``).
public struct PlacementStatistics: Sendable, Hashable {
    /// The placement id (`_other` for placements past the bound, `_none` for a fetch without one).
    public var placement: String
    /// Calls that concern it: its fetches and the preloads that name it, open or not.
    public var calls: Int
    /// Fetch calls of it that ended.
    public var fetches: Int
    /// Calls that concern it and have not ended.
    public var open: Int
    /// Fetches that ended with a flow, by source (`network`, `cache`, `defaultAudience`,
    /// `fallbackFile`; sources past the bound fold into `_other`).
    public var sources: [String: Int]
    /// Fetches that ended with an error, plus preloads that failed it.
    public var errors: Int
    /// Fetches that ended with targetingLost.
    public var targetingLost: Int
    /// timeout events of it.
    public var timeouts: Int
    /// Percentiles of the durations of its fetches that ended (preloads are not counted).
    public var duration: DurationPercentiles
    /// The last failure a preload reported for it.
    public var lastPreloadError: PreloadError?
}

/// Totals over a set of calls: what the dashboard's KPIs show (see ``CallStatistics``).
public struct CallTotals: Sendable, Hashable {
    /// Calls (fetches and preloads, open or not).
    public var calls = 0
    /// Fetch calls that ended.
    public var fetches = 0
    /// Calls not ended.
    public var open = 0
    /// Fetches that ended with a flow, by source.
    public var sources: [String: Int] = [:]
    /// Fetches that ended with an error, plus each placement a preload failed.
    public var errors = 0
    /// timeout events.
    public var timeouts = 0
    /// Fetches that ended with targetingLost.
    public var targetingLost = 0
    /// Percentiles of the durations of the fetches that ended.
    public var duration = DurationPercentiles([])
}

/// The one place numbers are computed from calls: placement statistics and totals.
/// docs/events-and-metrics.md, "Numbers", defines each of them.
public enum CallStatistics {
    /// Bounds of a placements answer.
    public struct Bounds: Sendable, Hashable {
        /// Placements listed; the calls of later ones (by their first call) count under `_other`.
        public var placements: Int
        /// Sources listed per placement; later ones (by first appearance) count under `_other`.
        public var sources: Int
        /// At most `placements` placements and `sources` sources per placement (each at least 1).
        public init(placements: Int = 200, sources: Int = 16) {
            self.placements = max(1, placements)
            self.sources = max(1, sources)
        }
    }

    /// The errors call `c` counts for `placement` (nil: for itself): a fetch that ended with an
    /// error counts 1; a preload counts each placement its end reports failed.
    public static func errors(of c: borrowing Call, placement: String? = nil) -> Int {
        switch c.kind {
        case .fetch:
            guard c.finished, c.errorCode != nil else { return 0 }
            return placement == nil || c.placement == placement ? 1 : 0
        case .preload:
            guard let placement else { return c.failed.count }
            return c.failed[placement] == nil ? 0 : 1
        }
    }

    /// Totals over `calls`; with `placement`, only what concerns that placement.
    public static func totals(_ calls: [Call], placement: String? = nil) -> CallTotals {
        totals(calls, Array(calls.indices), placement: placement)
    }

    /// Totals over `calls[i]` for each `i` of `indices` (each call read in place, never copied).
    static func totals(_ calls: [Call], _ indices: [Int], placement: String?) -> CallTotals {
        var t = Tally()
        calls.withUnsafeBufferPointer { buffer in
            for i in indices { t.add(totalShare(of: buffer[i], placement: placement), sources: nil) }
        }
        return t.totals()
    }

    /// Statistics per placement over `calls`, sorted by placement; with `placement`, that one only.
    /// A preload counts for each placement it names. Past `bounds.placements` placements (in the
    /// order of their first call), calls count under `_other`.
    public static func placements(_ calls: [Call], placement only: String? = nil, bounds: Bounds = Bounds()) -> [PlacementStatistics] {
        placements(calls, Array(calls.indices), placement: only, bounds: bounds)
    }

    /// ``placements(_:placement:bounds:)`` over `calls[i]` for each `i` of `indices` (read in place).
    static func placements(_ calls: [Call], _ indices: [Int], placement only: String?, bounds: Bounds) -> [PlacementStatistics] {
        var rows: [Tally] = [], keys: [String] = []
        var rowOf: [String: Int] = [:] // row key -> its index in rows
        var names: [String: Int] = [:] // placement -> its row's index
        func key(_ p: String) -> Int {
            if let k = names[p] { return k }
            let k = names.count < bounds.placements ? p : "_other"
            let index: Int
            if let existing = rowOf[k] {
                index = existing
            } else {
                index = rows.count
                rows.append(Tally())
                keys.append(k)
                rowOf[k] = index
            }
            names[p] = index
            return index
        }
        calls.withUnsafeBufferPointer { buffer in
            // In the order of their first event (by index: a call is large, and moving it is not free).
            var order = indices
            if zip(order, order.dropFirst()).contains(where: { buffer[$0].firstSeq > buffer[$1].firstSeq }) {
                order.sort { buffer[$0].firstSeq != buffer[$1].firstSeq ? buffer[$0].firstSeq < buffer[$1].firstSeq : $0 < $1 }
            }
            for i in order {
                forEachShare(of: buffer[i], placement: only) { p, share in rows[key(p)].add(share, sources: bounds.sources) }
            }
        }
        return keys.indices.sorted { keys[$0] < keys[$1] }.map { rows[$0].statistics(placement: keys[$0]) }
    }

    /// What one call adds to one placement's row (or to the totals): the unit both the statistics
    /// computed at once and those kept call by call (``LiveStatistics``) are made of.
    struct Share: Sendable, Equatable {
        /// It counts as a call of the placement (false: only its timeouts name the placement).
        var call = false
        var open = false
        var errors = 0
        var timeouts = 0
        /// A fetch that ended.
        var fetch = false
        var targetingLost = false
        /// The source of a fetch that ended with a flow.
        var source: String?
        var duration: Double?
        var preloadError: PreloadError?
    }

    /// Calls `body` with each placement `c` concerns (with `only`, that one alone) and its share,
    /// in the order the rows of a placements answer meet them: the call's own placement (`_none` for
    /// a fetch without one) or each placement a preload names, then those its timeouts name.
    static func forEachShare(of c: borrowing Call, placement only: String?, _ body: (String, Share) -> Void) {
        if let own = c.placement {
            if only == nil || only == own { body(own, callShare(of: c, placement: own)) }
        } else if c.kind == .fetch && only == nil {
            body("_none", callShare(of: c, placement: "_none"))
        } else {
            for p in c.placements where only == nil || only == p { body(p, callShare(of: c, placement: p)) }
        }
        for t in c.timeouts {
            let p = t.placement ?? c.placement ?? "_none"
            if only == nil || only == p {
                var share = Share()
                share.timeouts = 1
                body(p, share)
            }
        }
    }

    private static func callShare(of c: borrowing Call, placement: String) -> Share {
        var s = Share()
        s.call = true
        s.open = !c.finished
        s.errors = errors(of: c, placement: c.kind == .fetch ? nil : placement)
        switch c.kind {
        case .fetch:
            if c.finished { addEnd(of: c, to: &s) }
        case .preload:
            if let code = c.failed[placement], let seq = c.endSeq, let ts = c.endTs {
                s.preloadError = PreloadError(code: code, ts: ts, seq: seq)
            }
        }
        return s
    }

    /// What `c` adds to the totals (with `placement`, what concerns that placement).
    static func totalShare(of c: borrowing Call, placement: String?) -> Share {
        var s = Share()
        let concerns = placement.map { c.concerns($0) } ?? true
        if concerns {
            s.call = true
            s.open = !c.finished
        }
        s.errors = errors(of: c, placement: placement)
        for timeout in c.timeouts where placement == nil || (timeout.placement ?? c.placement) == placement { s.timeouts += 1 }
        if concerns, c.kind == .fetch, c.finished { addEnd(of: c, to: &s) }
        return s
    }

    /// What an ended fetch adds: a fetch, its targeting lost, its source (when it ended with a flow)
    /// and its duration.
    private static func addEnd(of c: borrowing Call, to s: inout Share) {
        s.fetch = true
        s.targetingLost = c.targetingLost
        if c.errorCode == nil { s.source = c.source }
        s.duration = c.duration
    }

    /// Shares summed: a placement's row or the totals.
    struct Tally: Sendable {
        var calls = 0, fetches = 0, open = 0, errors = 0, targetingLost = 0, timeouts = 0
        var sources: [String: Int] = [:]
        var durations: [Double] = []
        /// Whether `durations` is kept sorted (call by call) rather than sorted once at the end.
        var sortedDurations = false
        var lastPreloadError: PreloadError?

        /// Adds `s`. With `sources` (a bound), sources past it (by first appearance) count as `_other`.
        mutating func add(_ s: Share, sources limit: Int?) {
            if s.call { calls += 1 }
            if s.open { open += 1 }
            errors += s.errors
            timeouts += s.timeouts
            if s.fetch { fetches += 1 }
            if s.targetingLost { targetingLost += 1 }
            if let source = s.source {
                let key = limit.map { sources[source] != nil || sources.count < $0 ? source : "_other" } ?? source
                sources[key, default: 0] += 1
            }
            if let d = s.duration {
                if sortedDurations { durations.insert(d, at: Self.lowerBound(durations, d)) } else { durations.append(d) }
            }
            if let e = s.preloadError, e.seq >= (lastPreloadError?.seq ?? 0) { lastPreloadError = e }
        }

        /// Takes back `s`, added before without a bound on sources and with sorted durations. False
        /// when it cannot (it held the last preload error): the tally must then be summed again.
        mutating func remove(_ s: Share) -> Bool {
            if s.call { calls -= 1 }
            if s.open { open -= 1 }
            errors -= s.errors
            timeouts -= s.timeouts
            if s.fetch { fetches -= 1 }
            if s.targetingLost { targetingLost -= 1 }
            if let source = s.source {
                let left = (sources[source] ?? 0) - 1
                sources[source] = left > 0 ? left : nil
            }
            if let d = s.duration {
                let i = Self.lowerBound(durations, d)
                if i < durations.count && durations[i] == d { durations.remove(at: i) }
            }
            if let e = s.preloadError, e == lastPreloadError { return false }
            return true
        }

        /// The first index of `sorted` whose value is not below `value`.
        static func lowerBound(_ sorted: [Double], _ value: Double) -> Int {
            var lo = 0, hi = sorted.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if sorted[mid] < value { lo = mid + 1 } else { hi = mid }
            }
            return lo
        }

        var percentiles: DurationPercentiles {
            sortedDurations ? DurationPercentiles(sorted: durations) : DurationPercentiles(durations)
        }

        func statistics(placement: String) -> PlacementStatistics {
            PlacementStatistics(placement: placement, calls: calls, fetches: fetches, open: open, sources: sources,
                                errors: errors, targetingLost: targetingLost, timeouts: timeouts,
                                duration: percentiles, lastPreloadError: lastPreloadError)
        }

        func totals() -> CallTotals {
            CallTotals(calls: calls, fetches: fetches, open: open, sources: sources, errors: errors, timeouts: timeouts,
                       targetingLost: targetingLost, duration: percentiles)
        }
    }
}
