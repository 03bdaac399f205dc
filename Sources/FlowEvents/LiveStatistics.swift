/// A run's placements answer without a filter, kept up to date call by call: when new events change
/// some calls, only their shares are taken back and added again (``CallStatistics/Share``), so a
/// query after a few new events costs what those calls cost, not the whole run.
///
/// It gives exactly what ``CallStatistics`` computes over all the calls at once, as long as no bound
/// is reached: while the run has at most `bounds.placements` placements and every placement at most
/// `bounds.sources` sources, which of them fold into `_other` cannot arise. `apply` returns false when
/// a change reaches a bound (or takes back a placement's last preload error, which only a new sum can
/// replace); the caller then computes the answer at once instead.
struct LiveStatistics: Sendable {
    let bounds: CallStatistics.Bounds
    private var rows: [String: Row] = [:]
    private var totals = CallStatistics.Tally(sortedDurations: true)
    /// Per trace index: the shares it added to rows, and to the totals (nil: not a call).
    private var rowShares: [[(placement: String, share: CallStatistics.Share)]] = []
    private var totalShares: [CallStatistics.Share?] = []
    /// Calls counted.
    private(set) var calls = 0

    private struct Row: Sendable {
        var tally = CallStatistics.Tally(sortedDurations: true)
        /// Shares added (calls and timeouts): the row exists while any is.
        var shares = 0
    }

    /// The statistics of every call of `traces`; nil when a bound is reached.
    init?(traces: [Call], bounds: CallStatistics.Bounds) {
        self.bounds = bounds
        rowShares = Array(repeating: [], count: traces.count)
        totalShares = Array(repeating: nil, count: traces.count)
        // Summed unsorted, then sorted once (keeping each row sorted while building would be quadratic).
        totals.sortedDurations = false
        let added: Bool = traces.withUnsafeBufferPointer { buffer in
            for i in buffer.indices where buffer[i].isCall {
                guard add(buffer[i], at: i, sorted: false) else { return false }
            }
            return true
        }
        guard added else { return nil }
        totals.durations.sort()
        totals.sortedDurations = true
        for key in rows.keys {
            rows[key]!.tally.durations.sort()
            rows[key]!.tally.sortedDurations = true
        }
    }

    /// Takes back what the trace at `index` added and adds what it adds now (`call` is its current
    /// state); false when that reaches a bound or cannot be taken back (see the type).
    mutating func apply(_ call: borrowing Call, at index: Int) -> Bool {
        if index >= rowShares.count {
            rowShares += Array(repeating: [], count: index + 1 - rowShares.count)
            totalShares += Array(repeating: nil, count: index + 1 - totalShares.count)
        }
        for (placement, share) in rowShares[index] {
            guard rows[placement]!.tally.remove(share) else { return false }
            rows[placement]!.shares -= 1
            if rows[placement]!.shares == 0 { rows[placement] = nil }
        }
        rowShares[index] = []
        if let old = totalShares[index] {
            guard totals.remove(old) else { return false }
            totalShares[index] = nil
            calls -= 1
        }
        return call.isCall ? add(call, at: index, sorted: true) : true
    }

    private mutating func add(_ call: borrowing Call, at index: Int, sorted: Bool) -> Bool {
        var fits = true
        var shares: [(placement: String, share: CallStatistics.Share)] = []
        CallStatistics.forEachShare(of: call, placement: nil) { placement, share in
            guard fits else { return }
            if rows[placement] == nil {
                guard rows.count < bounds.placements else { fits = false; return }
                rows[placement] = Row(tally: CallStatistics.Tally(sortedDurations: sorted))
            }
            rows[placement]!.tally.add(share, sources: nil)
            rows[placement]!.shares += 1
            if rows[placement]!.tally.sources.count > bounds.sources { fits = false }
            shares.append((placement, share))
        }
        rowShares[index] = shares
        let total = CallStatistics.totalShare(of: call, placement: nil)
        totals.add(total, sources: nil)
        totalShares[index] = total
        calls += 1
        return fits
    }

    /// The answer, as ``CallQuery/placements(in:filter:)`` gives it for a filter with only `run`.
    func answer(run: String?, coverage: Coverage) -> CallQuery.Placements {
        CallQuery.Placements(run: run, placements: rows.keys.sorted().map { rows[$0]!.tally.statistics(placement: $0) },
                             matched: calls, totals: totals.totals(), coverage: coverage)
    }
}
