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
    public init(_ durations: [Double]) {
        let sorted = durations.sorted()
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
        var t = CallTotals()
        var durations: [Double] = []
        calls.withUnsafeBufferPointer { buffer in
            for i in indices { add(buffer[i], to: &t, durations: &durations, placement: placement) }
        }
        t.duration = DurationPercentiles(durations)
        return t
    }

    private static func add(_ c: borrowing Call, to t: inout CallTotals, durations: inout [Double], placement: String?) {
        let concerns = placement.map { c.concerns($0) } ?? true
        if concerns {
            t.calls += 1
            if !c.finished { t.open += 1 }
        }
        t.errors += errors(of: c, placement: placement)
        for timeout in c.timeouts where placement == nil || (timeout.placement ?? c.placement) == placement { t.timeouts += 1 }
        guard concerns, c.kind == .fetch, c.finished else { return }
        t.fetches += 1
        if c.targetingLost { t.targetingLost += 1 }
        if c.errorCode == nil, let s = c.source { t.sources[s, default: 0] += 1 }
        if let d = c.duration { durations.append(d) }
    }

    /// Statistics per placement over `calls`, sorted by placement; with `placement`, that one only.
    /// A preload counts for each placement it names. Past `bounds.placements` placements (in the
    /// order of their first call), calls count under `_other`.
    public static func placements(_ calls: [Call], placement only: String? = nil, bounds: Bounds = Bounds()) -> [PlacementStatistics] {
        placements(calls, Array(calls.indices), placement: only, bounds: bounds)
    }

    /// ``placements(_:placement:bounds:)`` over `calls[i]` for each `i` of `indices` (read in place).
    static func placements(_ calls: [Call], _ indices: [Int], placement only: String?, bounds: Bounds) -> [PlacementStatistics] {
        var rows: [Row] = [], keys: [String] = []
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
                rows.append(Row())
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
                if let own = buffer[i].placement {
                    if only == nil || only == own { rows[key(own)].add(buffer[i], placement: own, bounds: bounds) }
                } else if buffer[i].kind == .fetch && only == nil {
                    rows[key("_none")].add(buffer[i], placement: "_none", bounds: bounds)
                } else {
                    for p in buffer[i].placements where only == nil || only == p {
                        rows[key(p)].add(buffer[i], placement: p, bounds: bounds)
                    }
                }
                for t in buffer[i].timeouts {
                    let p = t.placement ?? buffer[i].placement ?? "_none"
                    if only == nil || only == p { rows[key(p)].timeouts += 1 }
                }
            }
        }
        return keys.indices.sorted { keys[$0] < keys[$1] }.map { rows[$0].statistics(placement: keys[$0]) }
    }

    private struct Row {
        var calls = 0, fetches = 0, open = 0, errors = 0, targetingLost = 0, timeouts = 0
        var sources: [String: Int] = [:]
        var durations: [Double] = []
        var lastPreloadError: PreloadError?

        mutating func add(_ c: borrowing Call, placement: String, bounds: Bounds) {
            calls += 1
            if !c.finished { open += 1 }
            errors += CallStatistics.errors(of: c, placement: c.kind == .fetch ? nil : placement)
            switch c.kind {
            case .fetch:
                guard c.finished else { return }
                fetches += 1
                if c.targetingLost { targetingLost += 1 }
                if c.errorCode == nil, let s = c.source {
                    sources[sources[s] != nil || sources.count < bounds.sources ? s : "_other", default: 0] += 1
                }
                if let d = c.duration { durations.append(d) }
            case .preload:
                if let code = c.failed[placement], let seq = c.endSeq, let ts = c.endTs, seq >= (lastPreloadError?.seq ?? 0) {
                    lastPreloadError = PreloadError(code: code, ts: ts, seq: seq)
                }
            }
        }

        func statistics(placement: String) -> PlacementStatistics {
            PlacementStatistics(placement: placement, calls: calls, fetches: fetches, open: open, sources: sources,
                                errors: errors, targetingLost: targetingLost, timeouts: timeouts,
                                duration: DurationPercentiles(durations), lastPreloadError: lastPreloadError)
        }
    }
}
