import CSQLite
import FlowEvents
import FlowFetch
import FlowJSON
import Foundation
import Synchronization

/// A run as the store knows it: how many events it has and when the first and last happened.
public struct SQLiteRunSummary: Sendable, Equatable {
    /// The run (`live`, a test name, a simulation id).
    public var run: String
    /// Events stored for it.
    public var count: Int
    /// Wall-clock time of its oldest stored event, seconds since 1970.
    public var firstTs: Double
    /// Wall-clock time of its newest stored event, seconds since 1970.
    public var lastTs: Double

    /// A summary with the given values.
    public init(run: String, count: Int, firstTs: Double, lastTs: Double) {
        self.run = run; self.count = count; self.firstTs = firstTs; self.lastTs = lastTs
    }
}

/// One stored row: its row id (increasing in write order across every process that wrote the file),
/// the epoch of the process that wrote it, and the envelope as written.
public struct StoredEvent: Sendable {
    /// The row id.
    public var id: Int64
    /// The writing process's epoch (`legacy` for rows of schema version 1).
    public var epoch: String
    /// The envelope, with the seq its process gave it.
    public var envelope: Envelope

    /// A stored row with the given values.
    public init(id: Int64, epoch: String, envelope: Envelope) {
        self.id = id; self.epoch = epoch; self.envelope = envelope
    }
}

/// The `sqlite` sink: an event store in one SQLite file, with retention and the dashboard's queries.
///
/// Writes go through one connection in WAL mode with `synchronous=NORMAL`; each consumed batch is
/// one transaction with a prepared, reused INSERT. Queries use a second connection, so they read
/// the last committed state without waiting for a batch being written.
///
/// ```swift
/// let store = try SQLiteSink(options: .init(path: ".flowscope/events.db", retention: 7 * 86_400))
/// store.consume(batch)
/// let recent = try store.events(limit: 50, placement: "main_paywall")
/// ```
public final class SQLiteSink: EventSink {
    /// The sink's options (`sinks[i]` in the config with `"type": "sqlite"`).
    public struct Options: Sendable, Equatable {
        /// The database file; its parent directories are created.
        public var path: String
        /// Events whose `ts` is older than this many seconds are deleted; nil keeps everything.
        public var retention: Double?
        /// Most rows per transaction: larger consumed batches are split.
        public var batchSize: Int
        /// Most events kept: a retention pass deletes the oldest beyond it (events that share the
        /// oldest kept event's `ts` stay too); nil keeps any number.
        public var maxEvents: Int?
        /// Least time between two retention passes, seconds.
        public var retentionInterval: Double
        /// Most seconds a write waits for another process holding the file's write lock; past it
        /// the batch fails (counted in `failedCount`).
        public var busyTimeout: Double

        /// Options with the given values.
        public init(path: String, retention: Double? = nil, maxEvents: Int? = nil, batchSize: Int = 1000, retentionInterval: Double = 60,
                    busyTimeout: Double = 5) {
            self.path = path; self.retention = retention; self.maxEvents = maxEvents; self.batchSize = batchSize
            self.retentionInterval = retentionInterval; self.busyTimeout = busyTimeout
        }

        /// Reads the options from a sink's config object at JSON path `path` (e.g. `$.sinks[1]`):
        /// `path` (string, default `<stateDirectory>/events.sqlite`), `retention` (seconds), `maxEvents`, `batchSize`,
        /// `retentionInterval`, `busyTimeout` (seconds).
        /// `type` and `enabled` belong to the config loader and are ignored; any other key is an
        /// error naming its JSON path.
        public init(json: [String: JSONValue], path: String = "$", stateDirectory: String = ".flowscope") throws(JSONInputError) {
            let object = JSONObjectCursor(path: path, members: json)
            try object.rejectUnknownKeys(allowed: ["type", "enabled", "path", "retention", "maxEvents", "batchSize", "retentionInterval", "busyTimeout"])
            var filePath = stateDirectory + "/events.sqlite"
            if let file = object.optional("path") {
                guard let given = file.value.stringValue, !given.isEmpty else {
                    throw file.expected("the database file path as a non-empty string")
                }
                filePath = given
            }
            self.init(path: filePath)
            if let value = object.optional("retention"), !value.isNull {
                guard let seconds = value.value.numberValue, seconds > 0, seconds.isFinite else {
                    throw value.expected("a positive number of seconds")
                }
                retention = seconds
            }
            if let value = object.optional("maxEvents"), !value.isNull {
                guard let n = value.value.intValue, n > 0 else {
                    throw value.expected("a positive integer (the most events kept)")
                }
                maxEvents = n
            }
            if let value = object.optional("batchSize") {
                guard let n = value.value.intValue, n > 0 else {
                    throw value.expected("a positive integer")
                }
                batchSize = n
            }
            if let value = object.optional("retentionInterval") {
                guard let seconds = value.value.numberValue, seconds >= 0, seconds.isFinite else {
                    throw value.expected("a number of seconds >= 0")
                }
                retentionInterval = seconds
            }
            if let value = object.optional("busyTimeout") {
                guard let seconds = value.value.numberValue, seconds >= 0, seconds <= 3600 else {
                    throw value.expected("a number of seconds from 0 to 3600")
                }
                busyTimeout = seconds
            }
        }
    }

    /// The schema version this build writes and reads, kept in `PRAGMA user_version`. Version 1
    /// files (no `epoch` column) and version 2 files (no `session` and `profile` columns) are
    /// migrated when opened; their rows keep no session and no profile.
    public static let schemaVersion: Int64 = 3
    /// The `epoch` of rows written before the column existed (schema version 1).
    public static let legacyEpoch = "legacy"

    /// The type name in the config's `sinks` list.
    public static let type = "sqlite"
    /// The sink's name in metrics and logs (`sqlite` unless its config entry names it).
    public let name: String
    /// `sqlite`.
    public var type: String { Self.type }
    /// Durable: ingest is accepted only while this sink's queue has room (``EventSink/isDurable``).
    public var isDurable: Bool { true }
    /// The options the sink was opened with.
    public let options: Options
    /// The database file.
    public var path: String { options.path }
    /// This open store's process epoch: 16 random hex digits unless given, written with every row,
    /// so rows of different server starts (whose seq each began at 1) stay apart.
    public let epoch: String

    struct Writer {
        let connection: Connection
        let insert: Statement
        let deleteOlder: Statement
        /// Adds a batch's totals of one run to the `runs` table.
        let addToRun: Statement
        /// Takes the totals of deleted rows out of a run, and sets its oldest `ts` left.
        let subtractFromRun: Statement
        var lastRetention: Double = -.infinity
    }

    private struct Counters {
        var stored = 0
        var failed = 0
        var deleted = 0
        var lastError: SQLiteSinkError?
        /// Failed transactions and retention passes.
        var errors = 0
        /// The last write failed.
        var failing = false
    }

    /// The writing connection and its statements; nil once closed.
    let writer: Mutex<Writer?>
    /// The querying connection; nil once closed.
    let reader: Mutex<Connection?>
    private let counters = Mutex(Counters())
    private let now: @Sendable () -> Double
    /// Placements and counts by name of recently asked runs, with the totals they were counted at.
    let runDetails = Mutex(RunDetailCache())
    /// The last failed query of the `EventStore` view (which answers empty then).
    let queryError = Mutex<(last: SQLiteSinkError?, count: Int)>((nil, 0))

    /// Opens (creating if needed) the store at `options.path`.
    ///
    /// - Parameters:
    ///   - epoch: written with every row (default: 16 random hex digits, new for every open).
    ///   - now: the wall clock used for retention, seconds since 1970 (tests pass their own).
    /// - Throws: `SQLiteSinkError` naming the path when the file is not SQLite, was written by a
    ///   newer flowscope (unknown schema version), or cannot be created.
    public init(name: String = "sqlite", options: Options, epoch: String? = nil,
                now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }) throws(SQLiteSinkError) {
        self.name = name
        self.options = options
        self.now = now
        if let epoch {
            self.epoch = epoch
        } else {
            let digits = String(UInt64.random(in: 0...UInt64.max), radix: 16)
            self.epoch = String(repeating: "0", count: 16 - digits.count) + digits
        }
        let path = options.path
        let parent = FilePaths.directory(of: path)
        if !parent.isEmpty {
            do {
                try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
            } catch {
                throw SQLiteSinkError(path: path, message: "cannot create the directory \(parent): \(error.localizedDescription)")
            }
        }
        let connection = try Connection(path: path, busyTimeout: options.busyTimeout)
        try Self.migrate(connection)
        let mode = try connection.textPragma("PRAGMA journal_mode=WAL")
        guard mode.lowercased() == "wal" else {
            throw SQLiteSinkError(path: path, message: "cannot switch to WAL journal mode (got \(mode))")
        }
        try connection.exec("PRAGMA synchronous=NORMAL")
        let insert = try connection.prepare(
            "INSERT INTO events (seq, ts, t, run, trace, span, name, placement, attrs, epoch, session, profile) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)")
        let deleteOlder = try connection.prepare("DELETE FROM events WHERE ts < ?1")
        let addToRun = try connection.prepare("""
            INSERT INTO runs (run, events, fetches, errors, first_ts, last_ts) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
            ON CONFLICT (run) DO UPDATE SET events = events + excluded.events, fetches = fetches + excluded.fetches,
              errors = errors + excluded.errors, first_ts = min(first_ts, excluded.first_ts), last_ts = max(last_ts, excluded.last_ts)
            """)
        let subtractFromRun = try connection.prepare("""
            UPDATE runs SET events = events - ?2, fetches = fetches - ?3, errors = errors - ?4,
              first_ts = coalesce((SELECT ts FROM events WHERE ts >= ?5 AND +events.run = ?1 ORDER BY ts LIMIT 1), first_ts)
            WHERE run = ?1
            """)
        writer = Mutex(Writer(connection: connection, insert: insert, deleteOlder: deleteOlder, addToRun: addToRun,
                              subtractFromRun: subtractFromRun))
        reader = Mutex(try Connection(path: path, busyTimeout: options.busyTimeout))
    }

    /// Opens the store at `path` with default options.
    public convenience init(path: String, retention: Double? = nil) throws(SQLiteSinkError) {
        try self.init(options: Options(path: path, retention: retention))
    }

    /// Creates the schema in a new file, migrates a version 1 or 2 file, or checks the version.
    private static func migrate(_ db: Connection) throws(SQLiteSinkError) {
        let version = try db.intPragma("user_version")
        if version > schemaVersion {
            throw SQLiteSinkError(path: db.path, message:
                "schema version \(version) is newer than this flowscope supports (\(schemaVersion)); use a newer flowscope or another path")
        }
        if version == schemaVersion { return }
        if version < 0 {
            throw SQLiteSinkError(path: db.path, message: "unknown schema version \(version) (expected \(schemaVersion))")
        }
        if version == 1 { try migrateFromVersion1(db) }
        if version == 1 || version == 2 { return try migrateFromVersion2(db) }
        // Version 0: a new, empty file. Refuse to add our tables to somebody else's database.
        let stmt = try db.prepare("SELECT count(*) FROM sqlite_master")
        if sqlite3_step(stmt.raw) == SQLITE_ROW, stmt.int64(0) > 0 {
            throw SQLiteSinkError(path: db.path, message:
                "an SQLite database that is not a flowscope event store (no schema version); expected a new file or a store written by flowscope")
        }
        try db.exec("""
            BEGIN;
            CREATE TABLE events (
                id INTEGER PRIMARY KEY,
                seq INTEGER NOT NULL,
                ts REAL NOT NULL,
                t REAL NOT NULL,
                run TEXT NOT NULL,
                trace TEXT NOT NULL,
                span TEXT NOT NULL,
                name TEXT NOT NULL,
                placement TEXT,
                attrs TEXT NOT NULL,
                epoch TEXT NOT NULL DEFAULT '\(legacyEpoch)',
                session TEXT,
                profile TEXT
            );
            \(indexes)
            \(runsTable)
            PRAGMA user_version = \(schemaVersion);
            COMMIT;
            """)
    }

    /// The indexes of schema version 2: the API's filters page by row id (`id`, the rowid, is the
    /// last column of every index), and retention deletes by `ts`.
    static let indexes = """
        CREATE INDEX IF NOT EXISTS events_run ON events (run);
        CREATE INDEX IF NOT EXISTS events_placement ON events (placement);
        CREATE INDEX IF NOT EXISTS events_name ON events (name);
        CREATE INDEX IF NOT EXISTS events_ts ON events (ts);
        """

    /// The totals of every run (`/api/runs` reads them without a scan), kept in the transaction of
    /// each batch and each retention pass.
    static let runsTable = """
        CREATE TABLE runs (
            run TEXT PRIMARY KEY,
            events INTEGER NOT NULL,
            fetches INTEGER NOT NULL,
            errors INTEGER NOT NULL,
            first_ts REAL NOT NULL,
            last_ts REAL NOT NULL
        ) WITHOUT ROWID;
        """

    /// Version 1 to 2: adds `epoch` (existing rows get `legacy`), replaces the seq indexes with the
    /// row-id ones and counts the `runs` table (one scan), in one transaction (another process migrating at the same time waits, then
    /// finds version 2).
    private static func migrateFromVersion1(_ db: Connection) throws(SQLiteSinkError) {
        try db.exec("BEGIN IMMEDIATE")
        do throws(SQLiteSinkError) {
            if try db.intPragma("user_version") == 1 {
                try db.exec("""
                    ALTER TABLE events ADD COLUMN epoch TEXT NOT NULL DEFAULT '\(legacyEpoch)';
                    DROP INDEX IF EXISTS events_seq;
                    DROP INDEX IF EXISTS events_run_seq;
                    DROP INDEX IF EXISTS events_placement_seq;
                    DROP INDEX IF EXISTS events_name_seq;
                    \(indexes)
                    \(runsTable)
                    INSERT INTO runs (run, events, first_ts, last_ts, fetches, errors) \(totalsQuery(""));
                    PRAGMA user_version = 2;
                    """)
            }
            try db.exec("COMMIT")
        } catch {
            try? db.exec("ROLLBACK")
            throw SQLiteSinkError(path: db.path, message: "migrating from schema version 1: \(error.message)")
        }
    }

    /// Version 2 to 3: adds the nullable `session` and `profile` columns (existing rows have
    /// neither), in one transaction (another process migrating at the same time waits, then finds
    /// version 3).
    private static func migrateFromVersion2(_ db: Connection) throws(SQLiteSinkError) {
        try db.exec("BEGIN IMMEDIATE")
        do throws(SQLiteSinkError) {
            if try db.intPragma("user_version") == 2 {
                try db.exec("""
                    ALTER TABLE events ADD COLUMN session TEXT;
                    ALTER TABLE events ADD COLUMN profile TEXT;
                    PRAGMA user_version = \(schemaVersion);
                    """)
            }
            try db.exec("COMMIT")
        } catch {
            try? db.exec("ROLLBACK")
            throw SQLiteSinkError(path: db.path, message: "migrating from schema version 2: \(error.message)")
        }
    }

    // MARK: - Writing

    /// Stores the batch: one transaction per `batchSize` rows, then a retention pass when one is due.
    /// A failed transaction is rolled back; its rows are counted in `failedCount` and the error is
    /// kept in `lastError` (consume never throws into the pipeline).
    public func consume(_ batch: [Envelope]) {
        guard !batch.isEmpty else { return }
        let step = max(1, options.batchSize)
        var stored = 0, failed = 0, deleted = 0, errors = 0
        var lastError: SQLiteSinkError?
        writer.withLock { slot in
            guard var w = slot else {
                failed = batch.count
                errors = 1
                lastError = closedError
                return
            }
            defer { slot = w }
            var start = 0
            while start < batch.count {
                let end = min(batch.count, start + step)
                do throws(SQLiteSinkError) {
                    try Self.insert(batch[start..<end], epoch: epoch, with: w)
                    stored += end - start
                } catch {
                    failed += end - start
                    errors += 1
                    lastError = error
                }
                start = end
            }
            if options.retention != nil || options.maxEvents != nil {
                let current = now()
                if current - w.lastRetention >= options.retentionInterval {
                    w.lastRetention = current
                    do throws(SQLiteSinkError) {
                        deleted += try Self.retentionPass(options, now: current, with: w)
                    } catch {
                        errors += 1
                        lastError = error
                    }
                }
            }
        }
        counters.withLock { c in
            c.stored += stored; c.failed += failed; c.deleted += deleted; c.errors += errors
            if let lastError { c.lastError = lastError }
            c.failing = errors > 0
        }
    }

    private static func insert(_ rows: ArraySlice<Envelope>, epoch: String, with w: Writer) throws(SQLiteSinkError) {
        let db = w.connection
        try db.exec("BEGIN")
        let stmt = w.insert
        var attrs = ""
        for e in rows {
            stmt.reset()
            stmt.bind(1, Int64(bitPattern: e.seq))
            stmt.bind(2, e.ts)
            stmt.bind(3, e.t)
            stmt.bind(4, e.run)
            stmt.bind(5, e.trace.hex)
            stmt.bind(6, e.span.hex)
            stmt.bind(7, e.name.rawValue)
            stmt.bind(8, e.placement)
            attrs.removeAll(keepingCapacity: true)
            e.attrs.appendJSON(to: &attrs)
            stmt.bind(9, attrs)
            stmt.bind(10, epoch)
            stmt.bind(11, e.session?.hex)
            stmt.bind(12, e.profile)
            let rc = sqlite3_step(stmt.raw)
            if rc != SQLITE_DONE {
                let error = db.error("inserting event seq \(e.seq)", rc)
                stmt.reset()
                try? db.exec("ROLLBACK")
                throw error
            }
        }
        stmt.reset()
        // The batch's totals per run into the `runs` table, in the same transaction.
        var totals: [String: RunTotals] = [:]
        for e in rows { totals[e.run, default: RunTotals(firstTs: e.ts, lastTs: e.ts)].add(e) }
        let add = w.addToRun
        for (run, t) in totals {
            add.reset()
            add.bind(1, run)
            add.bind(2, Int64(t.events))
            add.bind(3, Int64(t.fetches))
            add.bind(4, Int64(t.errors))
            add.bind(5, t.firstTs)
            add.bind(6, t.lastTs)
            let rc = sqlite3_step(add.raw)
            add.reset()
            if rc != SQLITE_DONE {
                let error = db.error("adding to the totals of run \(run)", rc)
                try? db.exec("ROLLBACK")
                throw error
            }
        }
        do { try db.exec("COMMIT") } catch {
            try? db.exec("ROLLBACK")
            throw error
        }
    }

    /// Deletes the rows older than `cutoff` and takes them out of the `runs` table, in one
    /// transaction: the deleted rows' totals are read first (through the `ts` index: only those rows),
    /// each run they belong to gets its oldest `ts` left, and a run with no rows left goes.
    private static func deleteOlder(than cutoff: Double, with w: Writer) throws(SQLiteSinkError) -> Int {
        let db = w.connection
        try db.exec("BEGIN")
        do throws(SQLiteSinkError) {
            let leaving = try countTotals(on: db, where: "INDEXED BY events_ts WHERE ts < ?1", cutoff: cutoff)
            guard !leaving.isEmpty else {
                try db.exec("COMMIT")
                return 0
            }
            let stmt = w.deleteOlder
            stmt.reset()
            stmt.bind(1, cutoff)
            let rc = sqlite3_step(stmt.raw)
            stmt.reset()
            guard rc == SQLITE_DONE else { throw db.error("deleting events older than the retention", rc) }
            let deleted = Int(sqlite3_changes(db.db))
            let subtract = w.subtractFromRun
            for (run, gone) in leaving {
                subtract.reset()
                subtract.bind(1, run)
                subtract.bind(2, Int64(gone.events))
                subtract.bind(3, Int64(gone.fetches))
                subtract.bind(4, Int64(gone.errors))
                subtract.bind(5, cutoff)
                let rc = sqlite3_step(subtract.raw)
                subtract.reset()
                guard rc == SQLITE_DONE else { throw db.error("updating the totals of run \(run)", rc) }
            }
            try db.exec("DELETE FROM runs WHERE events <= 0; COMMIT")
            return deleted
        } catch {
            try? db.exec("ROLLBACK")
            throw error
        }
    }

    /// One retention pass: the events older than `retention`, then the oldest beyond `maxEvents`.
    private static func retentionPass(_ options: Options, now: Double, with w: Writer) throws(SQLiteSinkError) -> Int {
        var deleted = 0
        if let retention = options.retention { deleted += try deleteOlder(than: now - retention, with: w) }
        if let cap = options.maxEvents, let cutoff = try oldestKept(keeping: cap, with: w) { deleted += try deleteOlder(than: cutoff, with: w) }
        return deleted
    }

    /// The `ts` of the `cap`-th newest event when the store holds more than `cap` (read from the
    /// `runs` totals, then through the `ts` index), else nil.
    private static func oldestKept(keeping cap: Int, with w: Writer) throws(SQLiteSinkError) -> Double? {
        let db = w.connection
        let total = try db.prepare("SELECT coalesce(sum(events), 0) FROM runs")
        guard sqlite3_step(total.raw) == SQLITE_ROW, total.int64(0) > Int64(cap) else { return nil }
        let nth = try db.prepare("SELECT ts FROM events INDEXED BY events_ts ORDER BY ts DESC LIMIT 1 OFFSET ?1")
        nth.bind(1, Int64(cap - 1))
        guard sqlite3_step(nth.raw) == SQLITE_ROW else { return nil }
        return nth.double(0)
    }

    /// Runs a retention pass now (`retention`, then `maxEvents`), whatever the interval; returns how
    /// many events it deleted. Does nothing (returns 0) without either.
    @discardableResult
    public func applyRetention() throws(SQLiteSinkError) -> Int {
        guard options.retention != nil || options.maxEvents != nil else { return 0 }
        let current = now()
        let options = self.options
        let deleted = try writer.withLock { (slot: inout Writer?) throws(SQLiteSinkError) -> Int in
            guard slot != nil else { throw closedError }
            slot?.lastRetention = current
            return try Self.retentionPass(options, now: current, with: slot!)
        }
        counters.withLock { $0.deleted += deleted }
        return deleted
    }

    /// Every consumed batch is already committed; this also checkpoints the WAL into the main file
    /// (passively: it never waits for readers). Does nothing once closed.
    public func flush() {
        writer.withLock { slot in
            guard let w = slot else { return }
            if sqlite3_get_autocommit(w.connection.db) == 0 { try? w.connection.exec("COMMIT") }
            sqlite3_wal_checkpoint_v2(w.connection.db, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
        }
    }

    /// Checkpoints the whole WAL into the main file and closes both connections, so that SQLite
    /// removes the `-wal` and `-shm` files (unless another process has the file open). Called by the
    /// pipeline at shutdown, after `flush()`; calling it again does nothing. Afterwards `consume`
    /// counts its events as failed, the throwing queries throw "the store is closed", and the
    /// `EventStore` view answers empty (the error kept in `lastQueryError`).
    public func close() {
        reader.withLock { $0 = nil }
        writer.withLock { slot in
            guard let w = slot else { return }
            if sqlite3_get_autocommit(w.connection.db) == 0 { try? w.connection.exec("COMMIT") }
            sqlite3_wal_checkpoint_v2(w.connection.db, nil, SQLITE_CHECKPOINT_TRUNCATE, nil, nil)
            // The statements are finalized and the connection closed with the last reference.
            slot = nil
        }
    }

    /// The error of a write or query after `close()`.
    var closedError: SQLiteSinkError { SQLiteSinkError(path: path, message: "the store is closed") }

    /// Runs `body` with the query connection; throws ``closedError`` once the store is closed.
    func withReader<T: Sendable>(_ body: (Connection) throws(SQLiteSinkError) -> T) throws(SQLiteSinkError) -> T {
        try reader.withLock { (slot: inout Connection?) throws(SQLiteSinkError) -> T in
            guard let db = slot else { throw closedError }
            return try body(db)
        }
    }

    /// Events stored so far by this sink.
    public var storedCount: Int { counters.withLock { $0.stored } }
    /// Events lost because their transaction failed (disk full, file removed, ...).
    public var failedCount: Int { counters.withLock { $0.failed } }
    /// Events deleted by retention.
    public var deletedCount: Int { counters.withLock { $0.deleted } }
    /// The last write error, if any.
    public var lastError: SQLiteSinkError? { counters.withLock { $0.lastError } }
    /// Down while the last batch failed; dropped counts the rows of failed transactions.
    public var health: SinkHealth {
        counters.withLock {
            SinkHealth(up: !$0.failing, errors: UInt64($0.errors), lastError: $0.lastError?.description, dropped: UInt64($0.failed))
        }
    }

    // MARK: - Queries (the dashboard API's shapes)

    /// Stored rows, newest last, filtered like `GET /api/events`, each with its row id and epoch and
    /// the envelope as it was written (its own seq).
    ///
    /// Rows are ordered by row id: the order they were written in, across every process that wrote
    /// the file (each process's seq starts at 1 again, the row id never does). With `after`, the
    /// first `limit` rows whose id is greater (page forward by passing the last id seen); without
    /// it, the newest `limit`. Rows that cannot be decoded (edited by hand) are skipped.
    public func storedEvents(after: Int64? = nil, limit: Int = 100, run: String? = nil, placement: String? = nil,
                             name: String? = nil) throws(SQLiteSinkError) -> [StoredEvent] {
        guard limit > 0 else { return [] }
        var conditions: [String] = []
        if after != nil { conditions.append("id > ?1") }
        if run != nil { conditions.append("run = ?2") }
        // With a run, its index: `+` keeps SQLite from choosing another filter's index instead.
        let unindexed = run != nil ? "+" : ""
        if placement != nil { conditions.append("\(unindexed)placement = ?3") }
        if name != nil { conditions.append("\(unindexed)name = ?4") }
        let whereClause = conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
        let order = after != nil ? "ASC" : "DESC"
        let sql = "SELECT \(Self.storedColumns) FROM events\(whereClause) ORDER BY id \(order) LIMIT ?5"
        return try withReader { (db: Connection) throws(SQLiteSinkError) -> [StoredEvent] in
            let stmt = try db.prepare(sql)
            if let after { stmt.bind(1, after) }
            stmt.bind(2, run)
            stmt.bind(3, placement)
            stmt.bind(4, name)
            stmt.bind(5, Int64(limit))
            var out = try Self.decodeRows(stmt, on: db)
            if after == nil { out.reverse() }
            return out
        }
    }

    /// The columns `decodeRows` reads, in its order.
    static let storedColumns = "id, seq, ts, t, run, trace, span, name, placement, attrs, epoch, session, profile"

    /// Steps `stmt` (selecting ``storedColumns``) to the end; rows that cannot be decoded (edited by
    /// hand) are skipped.
    static func decodeRows(_ stmt: Statement, on db: Connection) throws(SQLiteSinkError) -> [StoredEvent] {
        var out: [StoredEvent] = []
        while true {
            let rc = sqlite3_step(stmt.raw)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { throw db.error("querying events", rc) }
            guard let runText = stmt.text(4), let trace = stmt.text(5).flatMap(TraceID.init(hex:)),
                  let span = stmt.text(6).flatMap(SpanID.init(hex:)), let name = stmt.text(7).flatMap(EventName.init(rawValue:)),
                  let attrs = stmt.text(9).flatMap(decodeAttrs) else { continue }
            let envelope = Envelope(seq: UInt64(bitPattern: stmt.int64(1)), ts: stmt.double(2), t: stmt.double(3), run: runText,
                                    trace: trace, span: span, name: name, placement: stmt.text(8), attrs: EventAttributes(attrs),
                                    session: stmt.text(11).flatMap(SessionID.init(hex:)), profile: stmt.text(12))
            out.append(StoredEvent(id: stmt.int64(0), epoch: stmt.text(10) ?? legacyEpoch, envelope: envelope))
        }
        return out
    }

    /// The runs in the store with their event counts and first/last times, oldest run first.
    public func runs() throws(SQLiteSinkError) -> [SQLiteRunSummary] {
        try withReader { (db: Connection) throws(SQLiteSinkError) -> [SQLiteRunSummary] in
            let stmt = try db.prepare("SELECT run, count(*), min(ts), max(ts) FROM events GROUP BY run ORDER BY min(ts), run")
            var out: [SQLiteRunSummary] = []
            while true {
                let rc = sqlite3_step(stmt.raw)
                if rc == SQLITE_DONE { break }
                guard rc == SQLITE_ROW else { throw db.error("querying runs", rc) }
                out.append(SQLiteRunSummary(run: stmt.text(0) ?? "", count: Int(stmt.int64(1)), firstTs: stmt.double(2), lastTs: stmt.double(3)))
            }
            return out
        }
    }

    /// How many events the store holds.
    public func count() throws(SQLiteSinkError) -> Int {
        try withReader { (db: Connection) throws(SQLiteSinkError) -> Int in
            let stmt = try db.prepare("SELECT count(*) FROM events")
            guard sqlite3_step(stmt.raw) == SQLITE_ROW else { throw db.error("counting events") }
            return Int(stmt.int64(0))
        }
    }
}

/// The `sqlite.insert` benchmark's baseline: the same rows written with raw sqlite3 calls.
public enum SQLiteBaseline {
    /// Inserts `rows` into a fresh `events` table at `path` (same columns; the sink's indexes when
    /// `indexed`) in one transaction with one prepared statement and SQLite's default settings
    /// (rollback journal, `synchronous=FULL`). Attributes are encoded with the same JSON writer as
    /// the sink, so the two do the same work apart from what the sink adds.
    public static func insert(_ rows: [Envelope], path: String, indexed: Bool = true) throws(SQLiteSinkError) {
        var handle: OpaquePointer?
        guard sqlite3_open(path, &handle) == SQLITE_OK, let db = handle else {
            sqlite3_close(handle)
            throw SQLiteSinkError(path: path, message: "cannot open SQLite database")
        }
        defer { sqlite3_close(db) }
        func exec(_ sql: String) throws(SQLiteSinkError) {
            guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else {
                throw SQLiteSinkError(path: path, message: String(cString: sqlite3_errmsg(db)))
            }
        }
        try exec("""
            CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL, ts REAL NOT NULL, t REAL NOT NULL,
                run TEXT NOT NULL, trace TEXT NOT NULL, span TEXT NOT NULL, name TEXT NOT NULL, placement TEXT, attrs TEXT NOT NULL,
                epoch TEXT NOT NULL DEFAULT 'legacy', session TEXT, profile TEXT)
            """)
        if indexed { try exec(SQLiteSink.indexes) }
        var stmt: OpaquePointer?
        guard sqlite3_prepare_v2(db, "INSERT INTO events (seq, ts, t, run, trace, span, name, placement, attrs, epoch, session, profile) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                                 -1, &stmt, nil) == SQLITE_OK else {
            throw SQLiteSinkError(path: path, message: String(cString: sqlite3_errmsg(db)))
        }
        defer { sqlite3_finalize(stmt) }
        try exec("BEGIN")
        var attrs = ""
        for e in rows {
            sqlite3_reset(stmt)
            sqlite3_bind_int64(stmt, 1, Int64(bitPattern: e.seq))
            sqlite3_bind_double(stmt, 2, e.ts)
            sqlite3_bind_double(stmt, 3, e.t)
            sqlite3_bind_text(stmt, 4, e.run, -1, sqliteTransient)
            sqlite3_bind_text(stmt, 5, e.trace.hex, -1, sqliteTransient)
            sqlite3_bind_text(stmt, 6, e.span.hex, -1, sqliteTransient)
            sqlite3_bind_text(stmt, 7, e.name.rawValue, -1, sqliteTransient)
            if let p = e.placement { sqlite3_bind_text(stmt, 8, p, -1, sqliteTransient) } else { sqlite3_bind_null(stmt, 8) }
            attrs.removeAll(keepingCapacity: true)
            e.attrs.appendJSON(to: &attrs)
            sqlite3_bind_text(stmt, 9, attrs, -1, sqliteTransient)
            sqlite3_bind_text(stmt, 10, "0000000000000000", -1, sqliteTransient)
            if let s = e.session { sqlite3_bind_text(stmt, 11, s.hex, -1, sqliteTransient) } else { sqlite3_bind_null(stmt, 11) }
            if let p = e.profile { sqlite3_bind_text(stmt, 12, p, -1, sqliteTransient) } else { sqlite3_bind_null(stmt, 12) }
            guard sqlite3_step(stmt) == SQLITE_DONE else {
                let message = String(cString: sqlite3_errmsg(db))
                sqlite3_exec(db, "ROLLBACK", nil, nil, nil)
                throw SQLiteSinkError(path: path, message: message)
            }
        }
        try exec("COMMIT")
    }
}

extension SQLiteSink {
    /// The `sqlite` sink type; its options are ``Options``.
    public struct Factory: SinkFactory {
        /// `sqlite`.
        public let type = SQLiteSink.type

        /// The factory.
        public init() {}

        /// Reads ``Options``; opens nothing.
        public func options(from context: SinkContext) throws(JSONInputError) -> Options {
            try Options(json: context.options, path: context.path, stateDirectory: context.stateDirectory)
        }

        /// The database file, `path`: an existing one must be an SQLite database.
        public func requirements(_ options: Options, context: SinkContext) -> SinkRequirements {
            SinkRequirements(files: [.init(option: "path", path: options.path,
                                           format: .init(description: "an SQLite database", headerOwner: "SQLite",
                                                         header: Array("SQLite format 3\u{0}".utf8)))])
        }

        /// Opens (or creates) the database.
        public func makeSink(_ options: Options, context: SinkContext) throws -> any EventSink {
            do {
                return try SQLiteSink(name: context.name, options: options)
            } catch {
                throw JSONInputError(path: context.path(of: "path"), message: error.description)
            }
        }
    }
}
