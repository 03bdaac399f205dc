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

/// The placements and counts by name of the last few runs asked for (a stored run does not change
/// while it is viewed, and the dashboard asks for them again every second while events arrive).
struct RunDetailCache: Sendable {
    struct Entry: Sendable {
        var stamp: RunStamp
        var placements: [JSONValue]?
        var byName: [String: JSONValue]?
    }
    var entries: [String: Entry] = [:]
    /// Most runs kept.
    static let limit = 8
}

/// The dashboard API's view of the stored events (`EventStore`), so runs survive a restart.
///
/// In this view an event's `seq` is its row id: unique across every process that wrote the file
/// and increasing in write order, so paging with `since` never mixes two processes' seq numbering
/// (each process's own seq starts at 1 again). The aggregates have the memory sink's shapes:
/// `runsJSON` reads the `runs` table (kept in the transaction of every batch and retention pass);
/// `placementsJSON` and `runJSON` count the run's fetch.end, timeout and preload.end rows in SQL.
/// `follow` delivers nothing: the archive holds the past, live events come from the memory sink.
/// A failed query answers empty and is kept in `lastQueryError`.
extension SQLiteSink: EventStore {
    /// fetch.end durations kept per placement for p50/p95 (the memory sink's default).
    static let durationSamples = 1024

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

    /// `{"run": ..., "placements": [...]}` from the stored rows of `run` (nil: every run merged,
    /// which reads the whole file).
    public func placementsJSON(run: String?) -> JSONValue {
        ["run": run.map(JSONValue.string) ?? .null, "placements": .array(run.map(cachedPlacements) ?? placementSummaries(run: nil))]
    }

    /// Each stored run's summary (`{"id","kind","firstTs","lastTs","events","fetches","errors"}`),
    /// most recently active first.
    public func runsJSON() -> [JSONValue] {
        totals().sorted { $0.value.lastTs != $1.value.lastTs ? $0.value.lastTs > $1.value.lastTs : $0.key < $1.key }
            .map { Self.summaryJSON(id: $0.key, $0.value) }
    }

    /// `{"run": <summary>, "placements": [...], "eventsByName": {...}}`, nil for a run not stored.
    public func runJSON(id: String) -> JSONValue? {
        guard let run = totals(of: id) else { return nil }
        return ["run": Self.summaryJSON(id: id, run), "placements": .array(cachedPlacements(id)),
                "eventsByName": .object(cachedCounts(id))]
    }

    /// Whether the store holds events of run `id`.
    public func holdsRun(_ id: String) -> Bool { totals(of: id) != nil }

    /// Delivers nothing (the archive has no live feed); the returned function does nothing.
    public func follow(_ handler: @escaping @Sendable ([Envelope]) -> Void) -> @Sendable () -> Void { {} }

    /// The last failed query of this view, if any (the query answered empty).
    public var lastQueryError: SQLiteSinkError? { queryError.withLock { $0.last } }

    // MARK: - Internals

    /// The run's placements, counted again only when its totals changed since.
    private func cachedPlacements(_ run: String) -> [JSONValue] {
        cached(run, \.placements) { placementSummaries(run: run) }
    }

    /// The run's events by name, counted again only when its totals changed since.
    private func cachedCounts(_ run: String) -> [String: JSONValue] {
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
    private func countsByName(run: String) -> [String: JSONValue] {
        var byName: [String: JSONValue] = [:]
        do throws(SQLiteSinkError) {
            try withReader { (db: Connection) throws(SQLiteSinkError) in
                let stmt = try db.prepare("SELECT name, count(*) FROM events WHERE run = ?1 GROUP BY name")
                stmt.bind(1, run)
                while true {
                    let rc = sqlite3_step(stmt.raw)
                    if rc == SQLITE_DONE { break }
                    guard rc == SQLITE_ROW else { throw db.error("counting events by name", rc) }
                    byName[stmt.text(0) ?? ""] = .number(Double(stmt.int64(1)))
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

    /// The placement summaries of `run` (nil: all runs), sorted by placement, counted in SQL from
    /// its fetch.end and timeout rows (attributes read with SQLite's JSON functions), and from its
    /// preload.end rows in write order.
    private func placementSummaries(run: String?) -> [JSONValue] {
        var placements: [String: PlacementTotals] = [:]
        // With a run, its index (`+` keeps SQLite from choosing the much larger set of one event name).
        let filter = run == nil ? "" : "run = ?1 AND +"
        do throws(SQLiteSinkError) {
            try withReader { (db: Connection) throws(SQLiteSinkError) in
                /// Runs `sql` with the run bound to ?1, calling `row` for each result row.
                func each(_ sql: String, _ row: (Statement) -> Void) throws(SQLiteSinkError) {
                    let stmt = try db.prepare(sql)
                    stmt.bind(1, run)
                    while true {
                        let rc = sqlite3_step(stmt.raw)
                        if rc == SQLITE_DONE { return }
                        guard rc == SQLITE_ROW else { throw db.error("reading placements", rc) }
                        row(stmt)
                    }
                }
                // Fetches, errors (a non-null errorCode) and targeting lost per placement.
                try each("""
                    SELECT coalesce(placement, '_none'), count(*),
                      sum(CASE WHEN json_valid(attrs) THEN json_extract(attrs, '$.errorCode') IS NOT NULL ELSE 0 END),
                      sum(CASE WHEN json_valid(attrs) THEN json_type(attrs, '$.targetingLost') = 'true' ELSE 0 END)
                    FROM events WHERE \(filter)name = 'fetch.end' GROUP BY 1
                    """) { row in
                    var p = PlacementTotals()
                    p.fetches = Int(row.int64(1))
                    p.errors = Int(row.int64(2))
                    p.targetingLost = Int(row.int64(3))
                    placements[row.text(0) ?? "_none"] = p
                }
                // Successful fetches by source; the first 16 sources to appear are kept, later ones
                // fold into `_other`.
                var sources: [String: [(source: String, count: Int, first: Int64)]] = [:]
                try each("""
                    SELECT p, s, count(*), min(id) FROM (
                      SELECT id, coalesce(placement, '_none') AS p,
                        CASE WHEN NOT json_valid(attrs) THEN NULL
                             WHEN json_extract(attrs, '$.errorCode') IS NOT NULL THEN NULL
                             WHEN json_type(attrs, '$.source') = 'text' THEN json_extract(attrs, '$.source')
                             ELSE NULL END AS s
                      FROM events WHERE \(filter)name = 'fetch.end')
                    WHERE s IS NOT NULL GROUP BY p, s
                    """) { row in
                    sources[row.text(0) ?? "_none", default: []].append((row.text(1) ?? "", Int(row.int64(2)), row.int64(3)))
                }
                for (placement, list) in sources {
                    for (i, item) in list.sorted(by: { $0.first < $1.first }).enumerated() {
                        placements[placement, default: PlacementTotals()].sources[i < 16 ? item.source : "_other", default: 0] += item.count
                    }
                }
                // The last `durationSamples` durations of each placement.
                try each("""
                    SELECT p, d FROM (
                      SELECT p, d, row_number() OVER (PARTITION BY p ORDER BY id DESC) AS r FROM (
                        SELECT id, coalesce(placement, '_none') AS p,
                          CASE WHEN NOT json_valid(attrs) THEN NULL
                               WHEN json_type(attrs, '$.duration') IN ('integer', 'real') THEN json_extract(attrs, '$.duration')
                               ELSE NULL END AS d
                        FROM events WHERE \(filter)name = 'fetch.end')
                      WHERE d IS NOT NULL)
                    WHERE r <= \(Self.durationSamples)
                    """) { row in
                    placements[row.text(0) ?? "_none", default: PlacementTotals()].durations.append(row.double(1))
                }
                try each("SELECT coalesce(placement, '_none'), count(*) FROM events WHERE \(filter)name = 'timeout' GROUP BY 1") { row in
                    placements[row.text(0) ?? "_none", default: PlacementTotals()].timeouts = Int(row.int64(1))
                }
                // The last failure of each placement named in a preload.end `failed` object.
                try each("SELECT id, ts, attrs FROM events WHERE \(filter)name = 'preload.end' ORDER BY id") { row in
                    guard let failed = row.text(2).flatMap(decodeAttrs)?["failed"]?.objectValue else { return }
                    for (placement, code) in failed {
                        placements[placement, default: PlacementTotals()].lastPreloadError = PreloadError(code: code, ts: row.double(1), seq: UInt64(row.int64(0)))
                    }
                }
            }
        } catch {
            noteQueryError(error)
            return []
        }
        return placements.keys.sorted().compactMap { key in placements[key]?.jsonValue(placement: key) }
    }

    /// The `/api/runs` object of a stored run (the memory sink's shape).
    static func summaryJSON(id: String, _ t: RunTotals) -> JSONValue {
        ["id": .string(id), "kind": .string(runKind(id)), "firstTs": .string(ISO8601.format(t.firstTs)),
         "lastTs": .string(ISO8601.format(t.lastTs)), "events": .number(Double(t.events)),
         "fetches": .number(Double(t.fetches)), "errors": .number(Double(t.errors))]
    }

    /// `live` for `live` and `live:...`, `simulation` for `sim:...` and `simulation:...`, else `test`.
    static func runKind(_ id: String) -> String {
        if id == "live" || id.hasPrefix("live:") { return "live" }
        if id.hasPrefix("sim:") || id.hasPrefix("simulation:") { return "simulation" }
        return "test"
    }
}

/// One placement's aggregates, counted as the memory sink counts them.
private struct PlacementTotals {
    var fetches = 0
    var sources: [String: Int] = [:]
    var errors = 0
    var targetingLost = 0
    var timeouts = 0
    /// The last `durationSamples` durations.
    var durations: [Double] = []
    var lastPreloadError: PreloadError?

    func jsonValue(placement: String) -> JSONValue {
        PlacementSummary(placement: placement, fetches: fetches, sources: sources, errors: errors, targetingLost: targetingLost,
                         timeouts: timeouts, durations: durations, lastPreloadError: lastPreloadError).jsonValue
    }
}
