import CSQLite
import FlowEvents
import FlowFetch
import FlowJSON
import Synchronization

/// One run's totals for `/api/runs`, as the memory sink counts them.
struct RunTotals: Sendable {
    var firstTs: Double
    var lastTs: Double
    var events = 0
    var fetches = 0
    var errors = 0

    init(firstTs: Double, lastTs: Double) { self.firstTs = firstTs; self.lastTs = lastTs }

    /// Counts one envelope: fetch.end is a fetch (an error when it carries a non-null errorCode);
    /// every placement in a preload.end `failed` object is an error.
    mutating func add(_ e: Envelope) {
        events += 1
        firstTs = min(firstTs, e.ts)
        lastTs = max(lastTs, e.ts)
        if e.name == .fetchEnd {
            fetches += 1
            if let code = e.attrs["errorCode"], code != .null { errors += 1 }
        } else if e.name == .preloadEnd, let failed = e.attrs["failed"]?.objectValue {
            errors += failed.count
        }
    }
}

/// What a run's totals were when its details were counted: the details are valid while they match.
struct RunStamp: Sendable, Equatable {
    var events: Int
    var firstTs: Double
    var lastTs: Double
    init(_ t: RunTotals) { events = t.events; firstTs = t.firstTs; lastTs = t.lastTs }
}

/// The counts by name of the last few runs asked for (a stored run does not change while it is
/// viewed, and the dashboard asks for them again every second while events arrive).
struct RunDetailCache: Sendable {
    struct Entry: Sendable {
        var stamp: RunStamp
        var byName: [String: Int]?
    }
    var entries: [String: Entry] = [:]
    /// Most runs kept.
    static let limit = 8
}

/// The dashboard API's view of the stored events (`EventStore`), so runs survive a restart.
///
/// In this view an event's `seq` is its row id: unique across every process that wrote the file
/// and increasing in write order, so paging with `since` never mixes two processes' seq numbering
/// (each process's own seq starts at 1 again). `runSummaries` reads the `runs` table (kept in the
/// transaction of every batch and retention pass), counted as the memory sink counts; calls and
/// placement statistics are the read model's (`CallQuery`) over the rows `events` answers.
/// `follow` delivers nothing: the archive holds the past, live events come from the memory sink.
/// A failed query answers empty and is kept in `lastQueryError`.
extension SQLiteSink: EventStore {
    /// The epoch written with every row of this process (see ``epoch``).
    public var seqEpoch: String? { epoch }

    /// Stored events, newest last, with the row id as `seq`: with `since`, the first `limit` rows
    /// whose id is greater; without, the newest `limit`.
    public func events(since: UInt64? = nil, limit: Int = 100, run: String? = nil, placement: String? = nil,
                       name: String? = nil) -> [Envelope] {
        do throws(SQLiteSinkError) {
            let rows = try storedEvents(after: since.map { Int64(clamping: $0) }, limit: limit, run: run, placement: placement, name: name)
            return rows.map { row in
                var e = row.envelope
                e.seq = UInt64(row.id)
                return e
            }
        } catch {
            noteQueryError(error)
            return []
        }
    }

    /// The newest row id, nil when the store is empty.
    public var latestSeq: UInt64? {
        do throws(SQLiteSinkError) {
            return try withReader { (db: Connection) throws(SQLiteSinkError) -> UInt64? in
                let stmt = try db.prepare("SELECT max(id) FROM events")
                guard sqlite3_step(stmt.raw) == SQLITE_ROW else { throw db.error("reading the newest row") }
                return sqlite3_column_type(stmt.raw, 0) == SQLITE_NULL ? nil : UInt64(stmt.int64(0))
            }
        } catch {
            noteQueryError(error)
            return nil
        }
    }

    /// Each stored run's summary, most recently active first.
    public func runSummaries() -> [RunSummary] {
        totals().sorted { $0.value.lastTs != $1.value.lastTs ? $0.value.lastTs > $1.value.lastTs : $0.key < $1.key }
            .map { Self.summary(id: $0.key, $0.value) }
    }

    /// One stored run's summary and events by name, nil for a run not stored.
    public func runDetail(id: String) -> RunDetail? {
        guard let run = totals(of: id) else { return nil }
        return RunDetail(summary: Self.summary(id: id, run), eventsByName: cachedCounts(id))
    }

    /// Whether the store holds events of run `id`.
    public func holdsRun(_ id: String) -> Bool { totals(of: id) != nil }

    /// Delivers nothing (the archive has no live feed); the returned function does nothing.
    public func follow(_ handler: @escaping @Sendable ([Envelope]) -> Void) -> @Sendable () -> Void { {} }

    /// The last failed query of this view, if any (the query answered empty).
    public var lastQueryError: SQLiteSinkError? { queryError.withLock { $0.last } }

    // MARK: - Internals

    /// The run's events by name, counted again only when its totals changed since.
    private func cachedCounts(_ run: String) -> [String: Int] {
        cached(run, \.byName) { countsByName(run: run) }
    }

    private func cached<T>(_ run: String, _ field: WritableKeyPath<RunDetailCache.Entry, T?>, count: () -> T) -> T {
        guard let totals = totals(of: run) else { return count() }
        let stamp = RunStamp(totals)
        if let entry = runDetails.withLock({ $0.entries[run] }), entry.stamp == stamp, let value = entry[keyPath: field] {
            return value
        }
        let errorsBefore = queryErrors
        let value = count()
        // A failed query answered empty: not kept.
        guard queryErrors == errorsBefore else { return value }
        runDetails.withLock { cache in
            var entry = cache.entries[run].flatMap { $0.stamp == stamp ? $0 : nil } ?? RunDetailCache.Entry(stamp: stamp)
            entry[keyPath: field] = value
            if cache.entries[run] == nil, cache.entries.count >= RunDetailCache.limit, let any = cache.entries.keys.first {
                cache.entries[any] = nil
            }
            cache.entries[run] = entry
        }
        return value
    }

    /// Events of `run` by name.
    private func countsByName(run: String) -> [String: Int] {
        var byName: [String: Int] = [:]
        do throws(SQLiteSinkError) {
            try withReader { (db: Connection) throws(SQLiteSinkError) in
                let stmt = try db.prepare("SELECT name, count(*) FROM events WHERE run = ?1 GROUP BY name")
                stmt.bind(1, run)
                while true {
                    let rc = sqlite3_step(stmt.raw)
                    if rc == SQLITE_DONE { break }
                    guard rc == SQLITE_ROW else { throw db.error("counting events by name", rc) }
                    byName[stmt.text(0) ?? ""] = Int(stmt.int64(1))
                }
            }
        } catch {
            noteQueryError(error)
        }
        return byName
    }

    func noteQueryError(_ error: SQLiteSinkError) {
        queryError.withLock {
            $0.last = error
            $0.count += 1
        }
    }

    /// Failed queries so far.
    var queryErrors: Int { queryError.withLock { $0.count } }

    /// Every run's totals, from the `runs` table.
    func totals() -> [String: RunTotals] {
        var out: [String: RunTotals] = [:]
        readRuns("SELECT run, events, fetches, errors, first_ts, last_ts FROM runs", run: nil) { out[$0] = $1 }
        return out
    }

    /// One run's totals, nil when it has no rows.
    func totals(of run: String) -> RunTotals? {
        var out: RunTotals?
        readRuns("SELECT run, events, fetches, errors, first_ts, last_ts FROM runs WHERE run = ?1", run: run) { out = $1 }
        return out
    }

    private func readRuns(_ sql: String, run: String?, _ row: (String, RunTotals) -> Void) {
        do throws(SQLiteSinkError) {
            try withReader { (db: Connection) throws(SQLiteSinkError) in
                let stmt = try db.prepare(sql)
                if let run { stmt.bind(1, run) }
                while true {
                    let rc = sqlite3_step(stmt.raw)
                    if rc == SQLITE_DONE { break }
                    guard rc == SQLITE_ROW else { throw db.error("reading runs", rc) }
                    var t = RunTotals(firstTs: stmt.double(4), lastTs: stmt.double(5))
                    t.events = Int(stmt.int64(1))
                    t.fetches = Int(stmt.int64(2))
                    t.errors = Int(stmt.int64(3))
                    row(stmt.text(0) ?? "", t)
                }
            }
        } catch {
            noteQueryError(error)
        }
    }

    /// `SELECT run, count(*), min(ts), max(ts), <fetches>, <errors> FROM events <filter> GROUP BY run`:
    /// the totals of the rows matching `filter` as the memory sink counts them.
    static func totalsQuery(_ filter: String) -> String {
        """
        SELECT run, count(*), min(ts), max(ts), sum(name = 'fetch.end'),
          sum(CASE name
                WHEN 'fetch.end' THEN
                  CASE WHEN json_valid(attrs) THEN json_extract(attrs, '$.errorCode') IS NOT NULL ELSE 0 END
                WHEN 'preload.end' THEN
                  CASE WHEN NOT json_valid(attrs) THEN 0
                       WHEN json_type(attrs, '$.failed') = 'object' THEN (SELECT count(*) FROM json_each(attrs, '$.failed'))
                       ELSE 0 END
                ELSE 0 END)
        FROM events \(filter) GROUP BY run
        """
    }

    /// The totals per run of the rows matching `filter` (`WHERE ...`, with `cutoff` bound to ?1).
    static func countTotals(on db: Connection, where filter: String, cutoff: Double?) throws(SQLiteSinkError) -> [String: RunTotals] {
        let stmt = try db.prepare(totalsQuery(filter))
        if let cutoff { stmt.bind(1, cutoff) }
        var out: [String: RunTotals] = [:]
        while true {
            let rc = sqlite3_step(stmt.raw)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { throw db.error("counting runs", rc) }
            var t = RunTotals(firstTs: stmt.double(2), lastTs: stmt.double(3))
            t.events = Int(stmt.int64(1))
            t.fetches = Int(stmt.int64(4))
            t.errors = Int(stmt.int64(5))
            out[stmt.text(0) ?? ""] = t
        }
        return out
    }

    /// The summary of a stored run (the memory sink's counts).
    static func summary(id: String, _ t: RunTotals) -> RunSummary {
        RunSummary(id: id, firstTs: t.firstTs, lastTs: t.lastTs, events: t.events, fetches: t.fetches, errors: t.errors)
    }
}
