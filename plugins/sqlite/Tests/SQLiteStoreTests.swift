import FlowEvents
import FlowFetch
import FlowJSON
import Foundation
import SQLiteSink
import Synchronization
import Testing

/// A fetch.end of `run` at `placement`.
private func fetchEnd(_ seq: UInt64, run: String, placement: String, source: String = "network", duration: Double,
                      errorCode: JSONValue? = nil, targetingLost: Bool = false, ts: Double = 1_796_000_000) -> Envelope {
    var attrs: [String: JSONValue] = ["source": .string(source), "duration": .number(duration), "targetingLost": .bool(targetingLost)]
    if let errorCode { attrs["errorCode"] = errorCode }
    return envelope(seq, ts: ts, run: run, name: .fetchEnd, placement: placement, attrs: EventAttributes(attrs))
}

/// The id of every run.
private func ids(_ runs: [RunSummary]) -> [String] { runs.map(\.id) }

/// The read model's placements of `run` over what `store` holds.
private func placements(_ store: any EventStore, run: String) -> [PlacementStatistics] {
    var filter = CallFilter()
    filter.run = run
    return CallQuery().placements(in: store, filter: filter).placements
}

@Suite("SQLite event store as the dashboard's EventStore")
struct SQLiteStoreTests {
    @Test("events, runs and run detail read back what was written, as the memory sink counts them; the read model's placements come from its events")
    func readsBack() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sink = try SQLiteSink(path: dir + "/events.db")
        let store: any EventStore = sink
        #expect(store.latestSeq == nil)
        #expect(store.runSummaries().isEmpty)
        #expect(store.runDetail(id: "test:a") == nil)
        sink.consume([
            envelope(1, ts: 1_796_000_000, run: "test:a", name: .fetchStart),
            fetchEnd(2, run: "test:a", placement: "main", source: "network", duration: 0.2, ts: 1_796_000_001),
            fetchEnd(3, run: "test:a", placement: "main", source: "cache", duration: 0.4, targetingLost: true, ts: 1_796_000_002),
            fetchEnd(4, run: "test:a", placement: "main", duration: 0.9, errorCode: 2005, ts: 1_796_000_003),
            envelope(5, ts: 1_796_000_004, run: "test:a", name: .timeout, placement: "onboarding"),
            envelope(6, ts: 1_796_000_005, run: "test:a", name: .preloadEnd, placement: nil,
                     attrs: ["failed": ["onboarding": 504, "extra": "timeout"]]),
            envelope(7, ts: 1_796_000_010, run: "live", name: .fetchStart),
            fetchEnd(8, run: "sim:x", placement: "main", duration: 0.1, errorCode: .null, ts: 1_795_999_000),
        ])

        #expect(store.latestSeq == 8)
        #expect(store.events(since: nil, limit: 3, run: nil, placement: nil, name: nil).map(\.seq) == [6, 7, 8])
        #expect(store.events(since: 2, limit: 2, run: "test:a", placement: nil, name: nil).map(\.seq) == [3, 4])
        #expect(store.events(since: nil, limit: 10, run: "test:a", placement: "main", name: "fetch.end").map(\.seq) == [2, 3, 4])
        #expect(store.events(since: .max, limit: 10, run: nil, placement: nil, name: nil).isEmpty)
        let first = try #require(store.events(since: nil, limit: 1, run: "test:a", placement: nil, name: "fetch.end").first)
        #expect(first.attrs["errorCode"] == .number(2005))

        // Most recently active first; errors count fetch.end errorCodes and preload.end failures.
        let runs = store.runSummaries()
        #expect(ids(runs) == ["live", "test:a", "sim:x"])
        #expect(runs[1] == RunSummary(id: "test:a", kind: .test, firstTs: 1_796_000_000, lastTs: 1_796_000_005, events: 6,
                                      fetches: 3, errors: 3))
        #expect(runs[0].kind == .live)
        #expect(runs[2].kind == .simulation)
        #expect(runs[2].errors == 0, "a null errorCode is no error")

        let list = placements(store, run: "test:a")
        // The lone fetch.start is a call still open; the preload.end a preload that failed two placements.
        #expect(list.map(\.placement) == ["extra", "main", "main_paywall", "onboarding"])
        #expect(list[2].open == 1 && list[2].fetches == 0)
        #expect(list[1].fetches == 3 && list[1].sources == ["network": 1, "cache": 1] && list[1].errors == 1)
        #expect(list[1].targetingLost == 1 && list[1].duration == DurationPercentiles([0.2, 0.4, 0.9]))
        #expect(list[1].duration.p50 == 0.4 && list[1].duration.p95 == 0.9)
        #expect(list[3].lastPreloadError == PreloadError(code: 504, ts: 1_796_000_005, seq: 6) && list[3].errors == 1)
        #expect(placements(store, run: "nobody").isEmpty)

        let detail = try #require(store.runDetail(id: "test:a"))
        #expect(detail.summary == runs[1])
        #expect(detail.eventsByName == ["fetch.start": 1, "fetch.end": 3, "timeout": 1, "preload.end": 1])
        #expect(store.holdsRun("sim:x"))
        #expect(!store.holdsRun("sim:y"))
        #expect(sink.lastQueryError == nil)

        // Asked again after another batch of the run: counted again, not the details kept before.
        sink.consume([fetchEnd(9, run: "test:a", placement: "main", duration: 0.3, ts: 1_796_000_020)])
        #expect(placements(store, run: "test:a").first { $0.placement == "main" }?.fetches == 4)
        #expect(store.runDetail(id: "test:a")?.eventsByName["fetch.end"] == 4)
    }

    @Test("overlapping seqs of two processes stay apart: each row has its epoch, the view numbers rows by id")
    func twoProcesses() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/events.db"
        do {
            let first = try SQLiteSink(options: .init(path: path), epoch: "aaaaaaaaaaaaaaaa")
            first.consume((1...5).map { envelope($0, run: "test:same", attrs: ["process": 1]) })
        }
        let second = try SQLiteSink(options: .init(path: path), epoch: "bbbbbbbbbbbbbbbb")
        second.consume((1...5).map { envelope($0, run: "test:same", attrs: ["process": 2]) })

        let rows = try second.storedEvents(limit: 100, run: "test:same")
        #expect(rows.map(\.envelope.seq) == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5])
        #expect(rows.map(\.epoch) == Array(repeating: "aaaaaaaaaaaaaaaa", count: 5) + Array(repeating: "bbbbbbbbbbbbbbbb", count: 5))

        // Paging the view forward walks the first process's rows, then the second's, each once.
        var seen: [Envelope] = []
        var since: UInt64 = 0
        while true {
            let page = second.events(since: since, limit: 3, run: "test:same", placement: nil, name: nil)
            guard let last = page.last else { break }
            seen += page
            since = last.seq
        }
        #expect(seen.map(\.seq) == Array(1...10))
        #expect(seen.map { $0.attrs["process"] } == Array(repeating: 1, count: 5) + Array(repeating: 2, count: 5))
        #expect(second.runSummaries().first?.events == 10)
    }

    @Test("a file of schema version 1 (no epoch column, no runs table) is migrated: old rows read with epoch legacy and are counted, new rows append")
    func migratesVersion1() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/old.db"
        // The schema as version 1 wrote it, with two rows.
        try runSQLite(path, """
            PRAGMA journal_mode=WAL;
            CREATE TABLE events (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL, ts REAL NOT NULL, t REAL NOT NULL, run TEXT NOT NULL,
                trace TEXT NOT NULL, span TEXT NOT NULL, name TEXT NOT NULL, placement TEXT, attrs TEXT NOT NULL);
            CREATE INDEX events_seq ON events (seq);
            CREATE INDEX events_run_seq ON events (run, seq);
            CREATE INDEX events_placement_seq ON events (placement, seq);
            CREATE INDEX events_name_seq ON events (name, seq);
            CREATE INDEX events_ts ON events (ts);
            INSERT INTO events (seq, ts, t, run, trace, span, name, placement, attrs) VALUES
              (1, 1796000000.5, 0.25, 'test:old', '4bf92f3577b34da6a3ce929d0e0e4736', '00f067aa0ba902b7', 'fetch.end', 'main',
               '{"duration":0.3,"source":"cache"}'),
              (2, 1796000001.5, 0.5, 'test:old', '4bf92f3577b34da6a3ce929d0e0e4736', '00f067aa0ba902b7', 'timeout', 'main', '{}');
            PRAGMA user_version = 1;
            """)
        let sink = try SQLiteSink(options: .init(path: path), epoch: "cccccccccccccccc")
        sink.consume([envelope(1, run: "test:new")])

        let rows = try sink.storedEvents(limit: 10)
        #expect(rows.map(\.epoch) == ["legacy", "legacy", "cccccccccccccccc"])
        #expect(rows.map(\.envelope.run) == ["test:old", "test:old", "test:new"])
        #expect(rows.first?.envelope.attrs["source"] == "cache")
        #expect(ids(sink.runSummaries()).sorted() == ["test:new", "test:old"])
        #expect(placements(sink, run: "test:old").first?.duration.p50 == 0.3)
        let schema = try runSQLite(path, "PRAGMA user_version; SELECT name FROM sqlite_master WHERE type = 'index' ORDER BY name;")
        #expect(schema == "3\nevents_name\nevents_placement\nevents_run\nevents_ts\n")
        // The runs table was counted from the old rows, then the new batch added.
        #expect(try runSQLite(path, "SELECT run, events, fetches FROM runs ORDER BY run;") == "test:new|1|0\ntest:old|2|1\n")

        // Opened again: already version 3, nothing to migrate.
        let again = try SQLiteSink(path: path)
        #expect(try again.count() == 3)
    }

    @Test("the runs' totals follow every batch and retention pass, equal to counting the rows left")
    func totalsFollowWrites() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let clock = ManualClock(10_000)
        let sink = try SQLiteSink(options: .init(path: dir + "/events.db", retention: 100, retentionInterval: 0), now: { clock.now })
        sink.consume([fetchEnd(1, run: "test:a", placement: "main", duration: 0.1, errorCode: 7, ts: 9_950),
                      envelope(9, ts: 9_951, run: "test:gone")])
        #expect(sink.runSummaries().count == 2)
        sink.consume([fetchEnd(2, run: "test:a", placement: "main", duration: 0.1, errorCode: "E", ts: 9_990),
                      envelope(3, ts: 9_995, run: "test:b")])
        let runs = sink.runSummaries()
        #expect(ids(runs) == ["test:b", "test:a", "test:gone"])
        #expect(runs[1].events == 2)
        #expect(runs[1].errors == 2)
        // The pass deletes the two oldest rows: they leave the totals, and test:gone with them.
        clock.set(10_060)
        sink.consume([envelope(4, ts: 10_060, run: "test:b")])
        #expect(sink.deletedCount == 2)
        let after = sink.runSummaries()
        #expect(ids(after) == ["test:b", "test:a"])
        #expect(after.first { $0.id == "test:a" }?.events == 1)
        #expect(after.first { $0.id == "test:a" }?.errors == 1)
        #expect(after.first { $0.id == "test:a" }?.firstTs == 9_990)
        #expect(after.first { $0.id == "test:b" }?.events == 2)
        // The same as counting the rows left.
        #expect(try runSQLite(dir + "/events.db", "SELECT run, count(*), min(ts), max(ts) FROM events GROUP BY run ORDER BY run;")
            == "test:a|1|9990.0|9990.0\ntest:b|2|9995.0|10060.0\n")
    }

    @Test("rows whose attrs are not JSON (edited by hand) are skipped by the read model; nothing fails")
    func malformedRow() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/events.db"
        let sink = try SQLiteSink(path: path)
        sink.consume([fetchEnd(1, run: "test:a", placement: "main", duration: 0.5)])
        try runSQLite(path, """
            INSERT INTO events (seq, ts, t, run, trace, span, name, placement, attrs) VALUES
              (2, 1796000001, 0, 'test:a', '4bf92f3577b34da6a3ce929d0e0e4736', '00f067aa0ba902b7', 'fetch.end', 'main', 'not json'),
              (3, 1796000002, 0, 'test:a', '4bf92f3577b34da6a3ce929d0e0e4736', '00f067aa0ba902b7', 'preload.end', NULL, '{"failed":');
            """)
        let fresh = try SQLiteSink(path: path)
        // The runs table counts what the sink wrote; rows inserted by hand are not in it.
        #expect(fresh.runSummaries().first?.events == 1)
        let main = placements(fresh, run: "test:a").first
        #expect(main?.fetches == 1)
        #expect(main?.duration.samples == 1)
        #expect(fresh.runDetail(id: "test:a")?.eventsByName == ["fetch.end": 2, "preload.end": 1])
        #expect(fresh.events(since: nil, limit: 10, run: "test:a", placement: nil, name: nil).map(\.seq) == [1], "undecodable rows are skipped")
        #expect(fresh.lastQueryError == nil)
    }

    @Test("a run or placement with a NUL inside (ingest accepts \\u0000) is stored and looked up whole, not cut at the NUL")
    func nulInsideText() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sink = try SQLiteSink(path: dir + "/events.db")
        let store: any EventStore = sink
        sink.consume([
            envelope(1, run: "live", name: .fetchStart),
            fetchEnd(2, run: "live\u{0}evil", placement: "main\u{0}x", duration: 0.2),
            envelope(3, run: "", name: .cacheMiss, placement: ""),
        ])
        // Before: bound with length -1, the rows were written as run "live" and placement "main", so
        // run "live" had 2 events and any id starting "live\0" answered with run "live".
        #expect(Set(ids(store.runSummaries())) == ["live", "live\u{0}evil", ""])
        #expect(store.runDetail(id: "live")?.summary.events == 1)
        #expect(store.runDetail(id: "live\u{0}evil")?.summary.events == 1)
        #expect(store.runDetail(id: "live\u{0}other") == nil)
        #expect(store.events(since: nil, limit: 10, run: "live", placement: nil, name: nil).map(\.seq) == [1])
        let evil = store.events(since: nil, limit: 10, run: "live\u{0}evil", placement: nil, name: nil)
        #expect(evil.map(\.seq) == [2])
        #expect(evil.first?.placement == "main\u{0}x")
        #expect(store.events(since: nil, limit: 10, run: nil, placement: "main", name: nil).isEmpty)
        #expect(placements(store, run: "live\u{0}evil").first?.placement == "main\u{0}x")
        // An empty text is bound as text, not NULL (the placement column allows NULL: it must stay "").
        #expect(store.events(since: nil, limit: 10, run: "", placement: nil, name: nil).first?.placement == "")
    }

    @Test("follow delivers nothing: the archive has no live feed")
    func followIsQuiet() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sink = try SQLiteSink(path: dir + "/events.db")
        let got = Counter()
        let stop = sink.follow { batch in got.add(batch.count) }
        sink.consume([envelope(1)])
        stop()
        #expect(got.value == 0)
        #expect(sink.events(since: nil, limit: 5, run: nil, placement: nil, name: nil).count == 1)
    }
}

private final class Counter: Sendable {
    private let count = Mutex(0)
    func add(_ n: Int) { count.withLock { $0 += n } }
    var value: Int { count.withLock { $0 } }
}
