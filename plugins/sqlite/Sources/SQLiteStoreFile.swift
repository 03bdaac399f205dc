import CSQLite
import FlowEvents
import Foundation

extension SQLiteSink {
    /// Every event stored in the file at `path` by an sqlite sink, oldest first (in row id order),
    /// read without changing anything: nothing is created, no table, no version, no migration.
    ///
    /// The file is opened read-only. A file with a `-wal` file beside it (a server has it open, or
    /// left it) is read through the WAL, which sees every committed batch; any other is opened
    /// immutable, which creates no `-wal` or `-shm` file either. Schema versions 1 (rows get
    /// ``legacyEpoch``), 2 (rows get no session and no profile) and 3 are read; rows that cannot be decoded (edited by hand) are skipped.
    ///
    /// ```swift
    /// let events = try SQLiteSink.storedEvents(inFile: ".flowscope/events.sqlite").map(\.envelope)
    /// ```
    ///
    /// - Throws: `SQLiteSinkError` naming the path when the file cannot be opened, is not SQLite,
    ///   was written by a newer schema version, or has no `events` table with the sink's columns.
    public static func storedEvents(inFile path: String) throws(SQLiteSinkError) -> [StoredEvent] {
        do throws(SQLiteSinkError) {
            return try readStoredEvents(path)
        } catch where error.message.hasPrefix("not an SQLite database") {
            throw SQLiteSinkError(path: path, message: "not an SQLite database (expected an event store written by flowscope's sqlite sink)")
        }
    }

    private static func readStoredEvents(_ path: String) throws(SQLiteSinkError) -> [StoredEvent] {
        let mode: Connection.Mode = FileManager.default.fileExists(atPath: path + "-wal") ? .readOnly : .immutable
        let db = try Connection(path: path, mode: mode)
        let version = try db.intPragma("user_version")
        if version > schemaVersion {
            throw SQLiteSinkError(path: path, message:
                "schema version \(version) is newer than this flowscope supports (\(schemaVersion)); use a newer flowscope")
        }
        let info = try db.prepare("PRAGMA table_info(events)")
        var columns: Set<String> = []
        while true {
            let rc = sqlite3_step(info.raw)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { throw db.error("reading the events table's columns", rc) }
            if let name = info.text(1) { columns.insert(name) }
        }
        guard !columns.isEmpty else {
            throw SQLiteSinkError(path: path, message: "not an event store written by flowscope's sqlite sink (no events table)")
        }
        let required = ["id", "seq", "ts", "t", "run", "trace", "span", "name", "placement", "attrs"]
        if let missing = required.first(where: { !columns.contains($0) }) {
            throw SQLiteSinkError(path: path, message:
                "not an event store written by flowscope's sqlite sink (its events table has no \(missing) column)")
        }
        var selected = storedColumns
        for optional in ["epoch", "session", "profile"] where !columns.contains(optional) {
            selected = selected.replacingOccurrences(of: ", \(optional)", with: ", NULL")
        }
        let stmt = try db.prepare("SELECT \(selected) FROM events ORDER BY id")
        return try decodeRows(stmt, on: db)
    }
}
