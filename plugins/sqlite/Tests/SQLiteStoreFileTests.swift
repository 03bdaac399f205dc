import FlowEvents
import FlowJSON
import Foundation
import SQLiteSink
import Testing

/// The names and bytes of every file in `dir`.
private func snapshot(_ dir: String) throws -> [String: Data] {
    var out: [String: Data] = [:]
    for name in try FileManager.default.contentsOfDirectory(atPath: dir) {
        out[name] = try Data(contentsOf: URL(fileURLWithPath: dir + "/" + name))
    }
    return out
}

@Suite("SQLite event store: reading a file read-only")
struct SQLiteStoreFileTests {
    @Test("a closed store's events come back oldest first, and no file in its directory changes or appears")
    func readsAClosedStoreWithoutChangingIt() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/events.db"
        do {
            let sink = try SQLiteSink(options: .init(path: path), epoch: "aaaaaaaaaaaaaaaa")
            sink.consume((1...5).map { envelope($0, run: $0 % 2 == 0 ? "live" : "test:a", attrs: ["n": .number(Double($0))]) })
        }
        let before = try snapshot(dir)
        #expect(before.keys.sorted() == ["events.db"], "the sink removes its WAL when closed")
        let rows = try SQLiteSink.storedEvents(inFile: path)
        #expect(rows.map(\.envelope.seq) == [1, 2, 3, 4, 5])
        #expect(rows.map(\.envelope.run) == ["test:a", "live", "test:a", "live", "test:a"])
        #expect(rows.allSatisfy { $0.epoch == "aaaaaaaaaaaaaaaa" })
        #expect(rows.last?.envelope.attrs["n"] == 5)
        #expect(try snapshot(dir) == before)
    }

    @Test("a store a sink has open is read through its WAL, every committed batch, and neither file changes")
    func readsAnOpenStoreThroughItsWAL() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/events.db"
        let sink = try SQLiteSink(path: path)
        sink.consume((1...3).map { envelope($0) })
        let db = try Data(contentsOf: URL(fileURLWithPath: path))
        let wal = try Data(contentsOf: URL(fileURLWithPath: path + "-wal"))
        #expect(try SQLiteSink.storedEvents(inFile: path).map(\.envelope.seq) == [1, 2, 3])
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == db)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path + "-wal")) == wal)
        sink.consume([envelope(4)])
        #expect(try SQLiteSink.storedEvents(inFile: path).map(\.envelope.seq) == [1, 2, 3, 4])
    }

    @Test("an empty or foreign database is refused, named, and left as it was; nothing is created")
    func refusesADatabaseWithoutTheEventsTable() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let empty = dir + "/empty.db", foreign = dir + "/foreign.db", other = dir + "/other.db"
        try runSQLite(empty, "CREATE TABLE t (x); DROP TABLE t;")
        try runSQLite(foreign, "CREATE TABLE customers (id INTEGER);")
        try runSQLite(other, "CREATE TABLE events (id INTEGER PRIMARY KEY, what TEXT);")
        let before = try snapshot(dir)
        for path in [empty, foreign] {
            #expect {
                _ = try SQLiteSink.storedEvents(inFile: path)
            } throws: { error in
                (error as? SQLiteSinkError)?.description
                    == "\(path): not an event store written by flowscope's sqlite sink (no events table)"
            }
        }
        #expect {
            _ = try SQLiteSink.storedEvents(inFile: other)
        } throws: { error in
            (error as? SQLiteSinkError)?.message.contains("its events table has no seq column") == true
        }
        #expect {
            _ = try SQLiteSink.storedEvents(inFile: dir + "/missing.db")
        } throws: { error in
            (error as? SQLiteSinkError)?.path == dir + "/missing.db"
        }
        #expect(try snapshot(dir) == before)
    }

    @Test("a file of schema version 1 is read with epoch legacy and not migrated; a newer version is refused")
    func readsVersion1AndRefusesNewer() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let old = dir + "/old.db"
        try runSQLite(old, """
            CREATE TABLE events (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL, ts REAL NOT NULL, t REAL NOT NULL, run TEXT NOT NULL,
                trace TEXT NOT NULL, span TEXT NOT NULL, name TEXT NOT NULL, placement TEXT, attrs TEXT NOT NULL);
            INSERT INTO events (seq, ts, t, run, trace, span, name, placement, attrs) VALUES
              (1, 1796000000.5, 0.25, 'test:old', '4bf92f3577b34da6a3ce929d0e0e4736', '00f067aa0ba902b7', 'timeout', 'main', '{}');
            PRAGMA user_version = 1;
            """)
        let rows = try SQLiteSink.storedEvents(inFile: old)
        #expect(rows.map(\.epoch) == [SQLiteSink.legacyEpoch])
        #expect(rows.map(\.envelope.name) == [.timeout])
        #expect(try runSQLite(old, "PRAGMA user_version;") == "1\n")

        let newer = dir + "/newer.db"
        try runSQLite(newer, "PRAGMA user_version = 7;")
        #expect {
            _ = try SQLiteSink.storedEvents(inFile: newer)
        } throws: { error in
            (error as? SQLiteSinkError)?.message.contains("schema version 7 is newer") == true
        }
    }
}
