import FlowEvents
import FlowFetch
import FlowJSON
import Foundation
import SQLiteSink
import Synchronization
import TestSupport
import Testing

/// A fresh directory under the system temp dir, removed by the caller.
func temporaryDirectory() -> String {
    let dir = NSTemporaryDirectory() + "flowscope-sqlite-\(UUID().uuidString)"
    try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    return dir
}

/// A clock the tests move by hand.
final class ManualClock: Sendable {
    private let value: Mutex<Double>
    init(_ start: Double) { value = Mutex(start) }
    var now: Double { value.withLock { $0 } }
    func set(_ t: Double) { value.withLock { $0 = t } }
}

let traceA = TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e4736")!
let spanA = SpanID(hex: "00f067aa0ba902b7")!

func envelope(_ seq: UInt64, ts: Double = 1_796_000_000, run: String = "live", name: EventName = .fetchStart,
              placement: String? = "main_paywall", attrs: EventAttributes = [:]) -> Envelope {
    Envelope(seq: seq, ts: ts, t: Double(seq) * 0.25, run: run, trace: TraceID(high: seq + 1, low: seq * 7 + 3),
             span: SpanID(raw: seq * 13 + 5), name: name, placement: placement, attrs: attrs)
}

@Suite("SQLite event store", .ownThread)
struct SQLiteSinkTests {
    @Test("envelopes come back with every field, unicode and nested attributes intact")
    func roundTrip() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sink = try SQLiteSink(path: dir + "/nested/deeper/events.db")
        let nested: [String: JSONValue] = [
            "call": "getFlow", "budget": 4.5, "count": 3, "ok": true, "zero": 0, "one": 1, "nothing": .null,
            "failed": ["main_paywall": "timeout", "onboarding": ["code": 504, "tags": ["a", "ü", "日本"]]],
            "list": [1, 2.5, false, "x\n\"y\"\\", [], [:]],
            "emoji": "paywall 🚀 ✓",
        ]
        let original = [
            Envelope(seq: 1, ts: 1_796_000_000.123456, t: 4.5, run: "test – ünïcödé 🚀", trace: traceA, span: spanA,
                     name: .timeout, placement: "плейсмент", attrs: EventAttributes(nested)),
            Envelope(seq: 2, ts: 1_796_000_001.5, t: 0, run: "live", trace: traceA, span: spanA, name: .cacheMiss,
                     placement: nil, attrs: [:]),
        ]
        sink.consume(original)
        sink.flush()
        let back = try sink.written()
        #expect(back.count == 2)
        for (a, b) in zip(original, back) {
            #expect(a.seq == b.seq)
            #expect(a.ts == b.ts)
            #expect(a.t == b.t)
            #expect(a.run == b.run)
            #expect(a.trace == b.trace)
            #expect(a.span == b.span)
            #expect(a.name == b.name)
            #expect(a.placement == b.placement)
            #expect(a.attrs == b.attrs)
            #expect(a.jsonLine == b.jsonLine)
        }
        #expect(back.first?.attrs["ok"] == .bool(true))
        #expect(back.first?.attrs["one"] == .number(1))
        #expect(sink.storedCount == 2)
        #expect(sink.failedCount == 0)
    }

    @Test("retention deletes events older than the window, at most once per interval")
    func retention() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let clock = ManualClock(10_000)
        let sink = try SQLiteSink(options: .init(path: dir + "/events.db", retention: 100, retentionInterval: 60),
                                  now: { clock.now })
        // Three old events and two recent ones: the first consume runs a retention pass.
        sink.consume([envelope(1, ts: 9_000), envelope(2, ts: 9_899), envelope(3, ts: 9_950), envelope(4, ts: 9_999), envelope(5, ts: 10_000)])
        #expect(try sink.written().map(\.seq) == [3, 4, 5])
        #expect(sink.deletedCount == 2)

        // 55 s later event 3 is out of the window, but the next pass is not due yet.
        clock.set(10_055)
        sink.consume([envelope(6, ts: 10_010)])
        #expect(try sink.written().map(\.seq) == [3, 4, 5, 6])

        // Past the interval: the pass runs and removes everything older than now - 100.
        clock.set(10_105)
        sink.consume([envelope(7, ts: 10_105)])
        #expect(try sink.written().map(\.seq) == [6, 7])
        #expect(sink.deletedCount == 5)

        // An explicit pass ignores the interval.
        clock.set(10_200)
        #expect(try sink.applyRetention() == 1)
        #expect(try sink.written().map(\.seq) == [7])
    }

    @Test("maxEvents keeps the newest events at each retention pass, runs' totals following; with a window, both apply")
    func maxEventsCapsTheStore() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let clock = ManualClock(10_000)
        let sink = try SQLiteSink(options: .init(path: dir + "/events.db", maxEvents: 3, retentionInterval: 60), now: { clock.now })
        sink.consume((1...5).map { envelope(UInt64($0), ts: 9_000 + Double($0)) })
        #expect(try sink.written().map(\.seq) == [3, 4, 5])
        #expect(sink.deletedCount == 2)
        #expect(sink.runSummaries().reduce(0) { $0 + $1.events } == 3, "the runs table follows")
        // Not due yet: the store may hold more until the next pass.
        sink.consume([envelope(6, ts: 9_006)])
        #expect(try sink.written().map(\.seq) == [3, 4, 5, 6])
        clock.set(10_061)
        sink.consume([envelope(7, ts: 9_007)])
        #expect(try sink.written().map(\.seq) == [5, 6, 7])
        // An explicit pass ignores the interval; events sharing the oldest kept event's time stay with it.
        sink.consume([envelope(8, ts: 9_006)])
        #expect(try sink.applyRetention() == 1)
        #expect(try sink.written().map(\.seq) == [6, 7, 8])
        sink.consume([envelope(9, ts: 9_006)])
        #expect(try sink.applyRetention() == 0)
        #expect(try sink.written().map(\.seq) == [6, 7, 8, 9])

        // retention and maxEvents together: the window first, then the cap.
        let both = try SQLiteSink(options: .init(path: dir + "/both.db", retention: 100, maxEvents: 2, retentionInterval: 60), now: { clock.now })
        both.consume([envelope(1, ts: 9_000), envelope(2, ts: 10_000), envelope(3, ts: 10_010), envelope(4, ts: 10_020)])
        #expect(try both.written().map(\.seq) == [3, 4])
        #expect(both.deletedCount == 2)
    }

    @Test("queries filter by run, placement, name and since, newest last")
    func queries() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sink = try SQLiteSink(path: dir + "/events.db")
        var batch: [Envelope] = []
        for seq in UInt64(1)...60 {
            let run = seq % 3 == 0 ? "test-a" : "live"
            let placement: String? = seq % 4 == 0 ? nil : (seq % 2 == 0 ? "onboarding" : "main_paywall")
            let name: EventName = seq % 5 == 0 ? .fetchEnd : .requestStart
            batch.append(envelope(seq, ts: 1000 + Double(seq), run: run, name: name, placement: placement, attrs: ["i": .number(Double(seq))]))
        }
        sink.consume(Array(batch[0..<25]))
        sink.consume(Array(batch[25...]))

        func expected(_ keep: (Envelope) -> Bool) -> [UInt64] { batch.filter(keep).map(\.seq) }

        #expect(try sink.written(limit: 10).map(\.seq) == Array(51...60))
        #expect(try sink.written(after: 20, limit: 5).map(\.seq) == [21, 22, 23, 24, 25])
        #expect(try sink.written(after: 58, limit: 5).map(\.seq) == [59, 60])
        #expect(try sink.written(limit: 1000, run: "test-a").map(\.seq) == expected { $0.run == "test-a" })
        #expect(try sink.written(limit: 1000, placement: "onboarding").map(\.seq) == expected { $0.placement == "onboarding" })
        #expect(try sink.written(limit: 1000, name: "fetch.end").map(\.seq) == expected { $0.name == .fetchEnd })
        #expect(try sink.written(after: 10, limit: 1000, run: "live", placement: "main_paywall", name: "request.start").map(\.seq)
            == expected { $0.seq > 10 && $0.run == "live" && $0.placement == "main_paywall" && $0.name == .requestStart })
        #expect(try sink.written(limit: 3, run: "test-a").map(\.seq) == [54, 57, 60])
        #expect(try sink.written(limit: 10, name: "no.such.event").isEmpty)
        #expect(try sink.written(limit: 0).isEmpty)

        let runs = try sink.runs()
        #expect(runs.map(\.run) == ["live", "test-a"])
        #expect(runs.first == SQLiteRunSummary(run: "live", count: 40, firstTs: 1001, lastTs: 1059))
        #expect(runs.last == SQLiteRunSummary(run: "test-a", count: 20, firstTs: 1003, lastTs: 1060))
        #expect(try sink.count() == 60)
    }

    @Test("a reopened store keeps its events and keeps appending")
    func reopen() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/events.db"
        do {
            let sink = try SQLiteSink(path: path)
            sink.consume((1...5).map { envelope($0, attrs: ["n": .number(Double($0))]) })
            sink.flush()
        }
        let again = try SQLiteSink(path: path)
        #expect(try again.count() == 5)
        again.consume([envelope(6, run: "second")])
        #expect(try again.written().map(\.seq) == [1, 2, 3, 4, 5, 6])
        #expect(try again.written(run: "live").last?.attrs == ["n": 5])
    }

    @Test("a file that is not SQLite is refused with an error naming it")
    func notSQLite() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/events.db"
        try Data(repeating: 0x41, count: 4096).write(to: URL(fileURLWithPath: path))
        #expect {
            _ = try SQLiteSink(path: path)
        } throws: { error in
            guard let e = error as? SQLiteSinkError else { return false }
            return e.path == path && e.description.hasPrefix(path + ": ") && e.message.contains("not an SQLite database")
        }
    }

    @Test("session and profile are stored and read back after reopening; an envelope without them reads back without them")
    func sessionAndProfileRoundTrip() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/events.db"
        var with = envelope(1)
        with.session = SessionID(hex: "0123456789abcdef")
        with.profile = "a1b2c3d4e5f60718"
        var plain = envelope(2)
        plain.profile = "user 42 (plain)"
        do {
            let sink = try SQLiteSink(path: path)
            sink.consume([with, plain, envelope(3)])
            sink.flush()
            sink.close()
        }
        let reopened = try SQLiteSink(path: path)
        let rows = try reopened.storedEvents(limit: 10).map(\.envelope)
        #expect(rows.map(\.session) == [with.session, nil, nil])
        #expect(rows.map(\.profile) == ["a1b2c3d4e5f60718", "user 42 (plain)", nil])
        #expect(rows.map(\.jsonLine) == [with.jsonLine, plain.jsonLine, envelope(3).jsonLine])
        #expect(try SQLiteSink.storedEvents(inFile: path).map(\.envelope.session) == [with.session, nil, nil])
    }

    @Test("a file of schema version 2 (no session or profile columns) is read as it is, then migrated to version 3 when a sink opens it")
    func migratesVersion2() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/v2.db"
        try runSQLite(path, """
            CREATE TABLE events (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL, ts REAL NOT NULL, t REAL NOT NULL, run TEXT NOT NULL,
                trace TEXT NOT NULL, span TEXT NOT NULL, name TEXT NOT NULL, placement TEXT, attrs TEXT NOT NULL,
                epoch TEXT NOT NULL DEFAULT 'legacy');
            CREATE TABLE runs (run TEXT PRIMARY KEY, events INTEGER NOT NULL, fetches INTEGER NOT NULL, errors INTEGER NOT NULL,
                first_ts REAL NOT NULL, last_ts REAL NOT NULL) WITHOUT ROWID;
            INSERT INTO events (seq, ts, t, run, trace, span, name, placement, attrs, epoch) VALUES
              (1, 1796000000.5, 0.25, 'test:old', '4bf92f3577b34da6a3ce929d0e0e4736', '00f067aa0ba902b7', 'timeout', 'main', '{}', 'aaaaaaaaaaaaaaaa');
            INSERT INTO runs VALUES ('test:old', 1, 0, 0, 1796000000.5, 1796000000.5);
            PRAGMA user_version = 2;
            """)
        let read = try SQLiteSink.storedEvents(inFile: path)
        #expect(read.map(\.envelope.name) == [.timeout])
        #expect(read.map(\.envelope.session) == [nil])
        #expect(try runSQLite(path, "PRAGMA user_version;") == "2\n")

        let sink = try SQLiteSink(path: path)
        var new = envelope(2)
        new.session = SessionID(hex: "00000000000000ff")
        sink.consume([new])
        sink.flush()
        let rows = try sink.storedEvents(limit: 10)
        #expect(rows.map(\.epoch).first == "aaaaaaaaaaaaaaaa")
        #expect(rows.map(\.envelope.session) == [nil, SessionID(raw: 255)])
        #expect(try runSQLite(path, "PRAGMA user_version; SELECT count(*) FROM events WHERE session IS NULL;") == "3\n1\n")
    }

    @Test("a store written by a newer schema, or a foreign database, is refused")
    func schemaVersion() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let newer = dir + "/newer.db"
        _ = try SQLiteSink(path: newer)
        try runSQLite(newer, "PRAGMA user_version = 7;")
        #expect {
            _ = try SQLiteSink(path: newer)
        } throws: { error in
            let e = error as? SQLiteSinkError
            return e?.path == newer && e?.message.contains("schema version 7 is newer") == true
        }

        let foreign = dir + "/foreign.db"
        try runSQLite(foreign, "CREATE TABLE customers (id INTEGER);")
        #expect {
            _ = try SQLiteSink(path: foreign)
        } throws: { error in
            let e = error as? SQLiteSinkError
            return e?.path == foreign && e?.message.contains("not a flowscope event store") == true
        }
    }

    @Test("the file is in WAL mode with the schema version set, checked by the sqlite3 tool")
    func fileFormat() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/events.db"
        let sink = try SQLiteSink(path: path)
        sink.consume([envelope(1, attrs: ["k": "v"])])
        sink.flush()
        let out = try runSQLite(path, "PRAGMA journal_mode; PRAGMA user_version; SELECT seq, name, attrs FROM events; PRAGMA integrity_check;")
        #expect(out == "wal\n3\n1|fetch.start|{\"k\":\"v\"}\nok\n")
    }

    @Test("queries run while batches are being written and see only committed batches")
    func concurrentQueries() async throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sink = try SQLiteSink(options: .init(path: dir + "/events.db", batchSize: 50))
        let batches = 40, perBatch = 50
        let writer = Task.detached {
            for b in 0..<batches {
                sink.consume((1...perBatch).map { envelope(UInt64(b * perBatch + $0), attrs: ["b": .number(Double(b))]) })
            }
        }
        let readers = (0..<3).map { _ in
            Task.detached { () throws -> (Int, Bool) in
                var queries = 0
                var consistent = true
                var last = 0
                while last < batches * perBatch {
                    let n = try sink.count()
                    // Whole transactions only, and never going backwards.
                    if n % perBatch != 0 || n < last { consistent = false }
                    last = n
                    let recent = try sink.written(limit: 20)
                    if !recent.isEmpty && recent.map(\.seq) != Array(recent.first!.seq...recent.last!.seq) { consistent = false }
                    _ = try sink.runs()
                    queries += 1
                }
                return (queries, consistent)
            }
        }
        await writer.value
        for reader in readers {
            let (queries, consistent) = try await reader.value
            #expect(queries > 0)
            #expect(consistent)
        }
        #expect(try sink.count() == batches * perBatch)
        #expect(sink.failedCount == 0)
    }

    @Test("a batch that cannot be written (another process holds the write lock) is counted, and later batches go on")
    func writeFailure() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/events.db"
        let sink = try SQLiteSink(options: .init(path: path, busyTimeout: 0.1))
        sink.consume([envelope(1)])

        // The real sqlite3 tool takes the write lock and keeps it until told to commit.
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        holder.arguments = [path]
        let input = Pipe(), output = Pipe()
        holder.standardInput = input
        holder.standardOutput = output
        try holder.run()
        input.fileHandleForWriting.write(Data("BEGIN EXCLUSIVE;\nSELECT 'locked';\n".utf8))
        var seen = ""
        while !seen.contains("locked") {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            seen += String(decoding: chunk, as: UTF8.self)
        }
        #expect(seen.contains("locked"))

        sink.consume([envelope(2), envelope(3)])
        #expect(sink.failedCount == 2)
        #expect(sink.lastError?.path == path)
        #expect(sink.lastError?.message.contains("locked") == true, "\(String(describing: sink.lastError))")
        #expect(try sink.written().map(\.seq) == [1], "reads go on while another process writes")

        input.fileHandleForWriting.write(Data("COMMIT;\n.quit\n".utf8))
        holder.waitUntilExit()
        sink.consume([envelope(4)])
        #expect(try sink.written().map(\.seq) == [1, 4])
        #expect(sink.storedCount == 2)
    }

    @Test("options are read from a config object, and bad ones name their JSON path")
    func options() throws {
        let ok = try SQLiteSink.Options(json: ["type": "sqlite", "enabled": true, "path": "a/b.db", "retention": 3600, "batchSize": 200],
                                        path: "$.sinks[1]")
        #expect(ok == SQLiteSink.Options(path: "a/b.db", retention: 3600, batchSize: 200))
        // Without a path, the database lives in the state directory.
        #expect(try SQLiteSink.Options(json: ["type": "sqlite"], path: "$.sinks[1]", stateDirectory: "/srv/fs").path == "/srv/fs/events.sqlite")
        #expect(throws: JSONInputError(path: "$.sinks[1].path", message: "expected the database file path as a non-empty string, got an empty string")) {
            try SQLiteSink.Options(json: ["path": ""], path: "$.sinks[1]")
        }
        #expect { try SQLiteSink.Options(json: ["path": "x.db", "retention": "7d"], path: "$.sinks[0]") } throws: {
            ($0 as? JSONInputError)?.path == "$.sinks[0].retention" && "\($0)".contains("got a string \"7d\"")
        }
        #expect(try SQLiteSink.Options(json: ["path": "x.db", "maxEvents": 1_000_000], path: "$.sinks[0]").maxEvents == 1_000_000)
        #expect { try SQLiteSink.Options(json: ["path": "x.db", "maxEvents": 0], path: "$.sinks[0]") } throws: {
            ($0 as? JSONInputError)?.path == "$.sinks[0].maxEvents" && "\($0)".contains("a positive integer")
        }
        #expect { try SQLiteSink.Options(json: ["path": "x.db", "retension": 5], path: "$.sinks[0]") } throws: {
            ($0 as? JSONInputError)?.path == "$.sinks[0].retension"
        }
    }

    @Test("the sqlite entry of config/flowscope.json5 is accepted")
    func shippedConfig() throws {
        var root = URL(fileURLWithPath: #filePath)
        for _ in 0..<4 { root.deleteLastPathComponent() }
        let text = try String(contentsOfFile: root.path + "/config/flowscope.json5", encoding: .utf8)
        let sinks = try #require(try JSON5.parse(text)["sinks"]?.arrayValue)
        let index = try #require(sinks.firstIndex { $0["type"] == "sqlite" })
        let options = try SQLiteSink.Options(json: try #require(sinks[index].objectValue), path: "$.sinks[\(index)]", stateDirectory: "/state")
        #expect(options.path == (sinks[index]["path"]?.stringValue ?? "/state/events.sqlite"))
        #expect(options.retention == sinks[index]["retention"]?.numberValue)
        #expect(options.maxEvents == sinks[index]["maxEvents"]?.intValue)
    }

    @Test("the plain-SQLite baseline stores the same rows")
    func baseline() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let rows = (1...100).map { envelope($0, attrs: ["x": .number(Double($0))]) }
        try SQLiteBaseline.insert(rows, path: dir + "/plain.db")
        #expect(try runSQLite(dir + "/plain.db", "SELECT count(*), sum(seq) FROM events;") == "100|5050\n")
    }
}

extension SQLiteSink {
    /// The stored envelopes as written (each with its own seq), newest last; `after` is a row id.
    func written(after: Int64? = nil, limit: Int = 100, run: String? = nil, placement: String? = nil,
                 name: String? = nil) throws -> [Envelope] {
        try storedEvents(after: after, limit: limit, run: run, placement: placement, name: name).map(\.envelope)
    }
}

/// Runs the real `sqlite3` command-line tool on a database and returns its output.
@discardableResult
func runSQLite(_ path: String, _ sql: String) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
    process.arguments = [path, sql]
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self)
}
