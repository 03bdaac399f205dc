import CSQLite
import FlowJSON
import Foundation

/// An error of the SQLite event store, naming the database file and what went wrong.
public struct SQLiteSinkError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The database file.
    public var path: String
    /// What is wrong and, where it helps, what was expected.
    public var message: String

    /// An error about the database at `path`.
    public init(path: String, message: String) {
        self.path = path; self.message = message
    }

    /// `path: message`, the line users see.
    public var description: String { "\(path): \(message)" }
}

/// SQLite's "copy the bytes now" destructor marker for bound text.
let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// One open SQLite database handle, closed once, in `deinit`.
// Safe to share unchecked: a `Connection` is only ever reached through the `Mutex` that owns it (the
// sink's writer or reader state); SQLite is opened in multi-thread mode (`SQLITE_OPEN_NOMUTEX`),
// which allows a handle on any thread as long as no two threads use it at the same time, and the
// mutex guarantees exactly that.
final class Connection: @unchecked Sendable {
    let db: OpaquePointer
    let path: String

    /// How a connection opens its file.
    enum Mode {
        /// Read and write, creating the file if needed.
        case readWrite
        /// Read only; a WAL-mode file gets its `-wal` and `-shm` files created if they are missing.
        case readOnly
        /// Read only, without locking and without creating any file (SQLite's `immutable=1`): for a
        /// file no process has open for writing.
        case immutable
    }

    /// Opens the database at `path`, creating it if needed when `mode` is `readWrite`.
    init(path: String, mode: Mode = .readWrite, busyTimeout: Double = 5) throws(SQLiteSinkError) {
        var handle: OpaquePointer?
        var name = path
        var flags = SQLITE_OPEN_NOMUTEX
        switch mode {
        case .readWrite: flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
        case .readOnly: flags |= SQLITE_OPEN_READONLY
        case .immutable:
            flags |= SQLITE_OPEN_READONLY | SQLITE_OPEN_URI
            let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
            // A URI's path: `?`, `#` and `%` (which urlPathAllowed leaves out) are escaped.
            let escaped = absolute.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? absolute
            name = "file://" + escaped + "?immutable=1"
        }
        let rc = sqlite3_open_v2(name, &handle, flags, nil)
        guard rc == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
            if let handle { sqlite3_close_v2(handle) }
            throw SQLiteSinkError(path: path, message: "cannot open SQLite database: \(message)")
        }
        db = handle
        self.path = path
        sqlite3_busy_timeout(db, Int32(min(max(0, busyTimeout), 3600) * 1000))
    }

    deinit { sqlite3_close_v2(db) }

    /// The error for the last failed call on this handle, in words a user can act on.
    func error(_ what: String, _ rc: Int32? = nil) -> SQLiteSinkError {
        let code = rc ?? sqlite3_errcode(db)
        if code & 0xFF == SQLITE_NOTADB {
            return SQLiteSinkError(path: path, message: "not an SQLite database (expected a flowscope event store or a new file)")
        }
        return SQLiteSinkError(path: path, message: "\(what): \(String(cString: sqlite3_errmsg(db)))")
    }

    /// Runs one or more statements that return no rows.
    func exec(_ sql: String) throws(SQLiteSinkError) {
        var message: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(db, sql, nil, nil, &message)
        if rc != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(rc))
            sqlite3_free(message)
            if rc & 0xFF == SQLITE_NOTADB { throw error("", rc) }
            throw SQLiteSinkError(path: path, message: "\(sql.prefix(40))...: \(text)")
        }
    }

    /// Prepares a statement that stays valid for the life of the connection.
    func prepare(_ sql: String) throws(SQLiteSinkError) -> Statement {
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v3(db, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        guard rc == SQLITE_OK, let stmt else { throw error("preparing statement", rc) }
        return Statement(stmt)
    }

    /// Reads an integer pragma (`user_version`, ...).
    func intPragma(_ name: String) throws(SQLiteSinkError) -> Int64 {
        let stmt = try prepare("PRAGMA \(name)")
        guard sqlite3_step(stmt.raw) == SQLITE_ROW else { throw error("reading PRAGMA \(name)") }
        return sqlite3_column_int64(stmt.raw, 0)
    }

    /// Reads a text pragma (`journal_mode`, ...).
    func textPragma(_ sql: String) throws(SQLiteSinkError) -> String {
        let stmt = try prepare(sql)
        guard sqlite3_step(stmt.raw) == SQLITE_ROW else { throw error("running \(sql)") }
        return stmt.text(0) ?? ""
    }
}

/// A prepared statement, finalized when released.
// Safe to share unchecked: owned by the same mutex-guarded state as its `Connection`, so no two
// threads use it at once (the reasoning of `Connection`).
final class Statement: @unchecked Sendable {
    let raw: OpaquePointer
    init(_ raw: OpaquePointer) { self.raw = raw }
    deinit { sqlite3_finalize(raw) }

    func reset() {
        sqlite3_reset(raw)
        sqlite3_clear_bindings(raw)
    }

    /// Binds all of `text`'s UTF-8 bytes, given by count: with a length of -1 SQLite would stop at
    /// a NUL, and an ingested run `live\u{0}x` would be stored and looked up as `live`.
    func bind(_ index: Int32, _ text: String) {
        var text = text
        text.withUTF8 { bytes in
            // An empty buffer may have no address, which SQLite would bind as NULL.
            guard let base = bytes.baseAddress, !bytes.isEmpty else { sqlite3_bind_text(raw, index, "", 0, sqliteTransient); return }
            base.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
                _ = sqlite3_bind_text(raw, index, $0, Int32(bytes.count), sqliteTransient)
            }
        }
    }
    func bind(_ index: Int32, _ text: String?) {
        if let text { bind(index, text) } else { sqlite3_bind_null(raw, index) }
    }
    func bind(_ index: Int32, _ value: Double) { sqlite3_bind_double(raw, index, value) }
    func bind(_ index: Int32, _ value: Int64) { sqlite3_bind_int64(raw, index, value) }

    /// The column's text, all of its bytes (a NUL inside included).
    func text(_ column: Int32) -> String? {
        // sqlite3_column_bytes after sqlite3_column_text: the length of the text just converted.
        guard let p = sqlite3_column_text(raw, column) else { return nil }
        let count = Int(sqlite3_column_bytes(raw, column))
        return String(decoding: UnsafeBufferPointer(start: p, count: count), as: UTF8.self)
    }
    func double(_ column: Int32) -> Double { sqlite3_column_double(raw, column) }
    func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(raw, column) }
}

/// Decodes the `attrs` column (JSON written by `JSONWriter`).
func decodeAttrs(_ text: String) -> [String: JSONValue]? {
    (try? JSON5.parse(text))?.objectValue
}
