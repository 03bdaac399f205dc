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

/// The per-run totals, nil until first asked for and after retention deleted rows.
struct RunTotalsCache: Sendable {
    var runs: [String: RunTotals]?
}

/// The dashboard API's view of the stored events (`EventStore`), so runs survive a restart.
///
/// In this view an event's `seq` is its row id: unique across every process that wrote the file
/// and increasing in write order, so paging with `since` never mixes two processes' seq numbering
/// (each process's own seq starts at 1 again). The aggregates have the memory sink's shapes and
/// are computed from the stored rows: `runsJSON` from per-run totals counted once (one scan at the
/// first call and after a retention pass deleted rows, then kept up to date as batches are
/// stored); `placementsJSON` and `runJSON` by reading the run's fetch.end, timeout and preload.end
/// rows. `follow` delivers nothing: the archive holds the past, live events come from the memory
/// sink. A failed query answers empty and is kept in `lastQueryError`.
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
            return try reader.withLock { (db: inout Connection) throws(SQLiteSinkError) -> UInt64? in
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
        ["run": run.map(JSONValue.string) ?? .null, "placements": .array(placementSummaries(run: run))]
    }

    /// Each stored run's summary (`{"id","kind","firstTs","lastTs","events","fetches","errors"}`),
    /// most recently active first.
    public func runsJSON() -> [JSONValue] {
        totals().sorted { $0.value.lastTs != $1.value.lastTs ? $0.value.lastTs > $1.value.lastTs : $0.key < $1.key }
            .map { Self.summaryJSON(id: $0.key, $0.value) }
    }

    /// `{"run": <summary>, "placements": [...], "eventsByName": {...}}`, nil for a run not stored.
    public func runJSON(id: String) -> JSONValue? {
        guard let run = totals()[id] else { return nil }
        var byName: [String: JSONValue] = [:]
        do throws(SQLiteSinkError) {
            try reader.withLock { (db: inout Connection) throws(SQLiteSinkError) in
                let stmt = try db.prepare("SELECT name, count(*) FROM events WHERE run = ?1 GROUP BY name")
                stmt.bind(1, id)
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
        return ["run": Self.summaryJSON(id: id, run), "placements": .array(placementSummaries(run: id)),
                "eventsByName": .object(byName)]
    }

    /// Whether the store holds events of run `id`.
    public func holdsRun(_ id: String) -> Bool { totals()[id] != nil }

    /// Delivers nothing (the archive has no live feed); the returned function does nothing.
    public func follow(_ handler: @escaping @Sendable ([Envelope]) -> Void) -> @Sendable () -> Void { {} }

    /// The last failed query of this view, if any (the query answered empty).
    public var lastQueryError: SQLiteSinkError? { queryError.withLock { $0 } }

    // MARK: - Internals

    func noteQueryError(_ error: SQLiteSinkError) { queryError.withLock { $0 = error } }

    /// Called under the writer's lock after `rows` were committed: counts them into the totals.
    func noteStored(_ rows: ArraySlice<Envelope>) {
        runTotals.withLock { cache in
            guard var runs = cache.runs else { return }
            cache.runs = nil
            for e in rows { runs[e.run, default: RunTotals(firstTs: e.ts, lastTs: e.ts)].add(e) }
            cache.runs = runs
        }
    }

    /// Called under the writer's lock after retention deleted rows: the totals are counted again.
    func forgetRunTotals() { runTotals.withLock { $0.runs = nil } }

    /// The per-run totals; counted from the file (holding the writer's lock, so no batch is
    /// committed meanwhile and none is counted twice) when not known.
    func totals() -> [String: RunTotals] {
        if let runs = runTotals.withLock({ $0.runs }) { return runs }
        return writer.withLock { _ in
            if let runs = runTotals.withLock({ $0.runs }) { return runs }
            do throws(SQLiteSinkError) {
                let runs = try countRunTotals()
                runTotals.withLock { $0.runs = runs }
                return runs
            } catch {
                noteQueryError(error)
                return [:]
            }
        }
    }

    private func countRunTotals() throws(SQLiteSinkError) -> [String: RunTotals] {
        try reader.withLock { (db: inout Connection) throws(SQLiteSinkError) -> [String: RunTotals] in
            let stmt = try db.prepare("""
                SELECT run, count(*), min(ts), max(ts), sum(name = 'fetch.end'),
                  sum(CASE WHEN NOT json_valid(attrs) THEN 0
                           WHEN name = 'fetch.end' AND json_extract(attrs, '$.errorCode') IS NOT NULL THEN 1
                           WHEN name = 'preload.end' AND json_type(attrs, '$.failed') = 'object'
                             THEN (SELECT count(*) FROM json_each(attrs, '$.failed'))
                           ELSE 0 END)
                FROM events GROUP BY run
                """)
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
    }

    /// The placement summaries of `run` (nil: all runs), sorted by placement, from its fetch.end,
    /// timeout and preload.end rows in write order.
    private func placementSummaries(run: String?) -> [JSONValue] {
        var placements: [String: PlacementTotals] = [:]
        do throws(SQLiteSinkError) {
            try reader.withLock { (db: inout Connection) throws(SQLiteSinkError) in
                let filter = run == nil ? "" : "run = ?1 AND "
                let stmt = try db.prepare("""
                    SELECT id, ts, name, placement, attrs FROM events
                    WHERE \(filter)name IN ('fetch.end', 'timeout', 'preload.end') ORDER BY id
                    """)
                stmt.bind(1, run)
                while true {
                    let rc = sqlite3_step(stmt.raw)
                    if rc == SQLITE_DONE { break }
                    guard rc == SQLITE_ROW else { throw db.error("reading placements", rc) }
                    guard let attrs = stmt.text(4).flatMap(decodeAttrs) else { continue }
                    let placement = stmt.text(3) ?? "_none"
                    switch stmt.text(2) {
                    case "fetch.end":
                        placements[placement, default: PlacementTotals()].addFetch(attrs)
                    case "timeout":
                        placements[placement, default: PlacementTotals()].timeouts += 1
                    default:
                        guard let failed = attrs["failed"]?.objectValue else { break }
                        let error = (ts: stmt.double(1), seq: UInt64(stmt.int64(0)))
                        for (name, code) in failed {
                            placements[name, default: PlacementTotals()].lastPreloadError = (code, error.ts, error.seq)
                        }
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
    /// The last `durationSamples` durations, as a ring.
    var durations: [Double] = []
    var durationHead = 0
    var lastPreloadError: (code: JSONValue, ts: Double, seq: UInt64)?

    mutating func addFetch(_ attrs: [String: JSONValue]) {
        fetches += 1
        if let code = attrs["errorCode"], code != .null {
            errors += 1
        } else if let source = attrs["source"]?.stringValue {
            let key = sources[source] != nil || sources.count < 16 ? source : "_other"
            sources[key, default: 0] += 1
        }
        if attrs["targetingLost"]?.boolValue == true { targetingLost += 1 }
        if let duration = attrs["duration"]?.numberValue, duration.isFinite {
            if durations.count < SQLiteSink.durationSamples {
                durations.append(duration)
            } else {
                durations[durationHead] = duration
                durationHead = (durationHead + 1) % durations.count
            }
        }
    }

    func jsonValue(placement: String) -> JSONValue {
        let sorted = durations.sorted()
        func rank(_ q: Double) -> JSONValue {
            guard !sorted.isEmpty else { return .null }
            // Nearest rank: the smallest value with at least q of the samples at or below it.
            let index = Int((q * Double(sorted.count)).rounded(.up)) - 1
            return .number(sorted[min(max(index, 0), sorted.count - 1)])
        }
        return ["placement": .string(placement), "fetches": .number(Double(fetches)),
                "sources": .object(sources.mapValues { .number(Double($0)) }), "errors": .number(Double(errors)),
                "targetingLost": .number(Double(targetingLost)), "timeouts": .number(Double(timeouts)),
                "duration": ["p50": rank(0.5), "p95": rank(0.95), "samples": .number(Double(sorted.count))],
                "lastPreloadError": lastPreloadError.map {
                    ["code": $0.code, "ts": .string(ISO8601.format($0.ts)), "seq": .number(Double($0.seq))]
                } ?? .null]
    }
}
