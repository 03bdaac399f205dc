import FlowJSON
import FlowEvents
import FlowFetch
import Foundation
import MemorySink
import SQLiteSink
import TestSupport
import Testing
@testable import FlowScopeCLI

/// Memory and sqlite sinks, the sqlite file in the fixture's directory (kept across restarts).
private let storedSinks = #"{ type: "metrics" }, { type: "memory", maxRuns: 2 }, { type: "sqlite", path: "$DIR/events.sqlite" }"#

/// The runs of `GET /api/runs` by id.
private func runsByID(_ fixture: StackFixture) throws -> [String: JSONValue] {
    let runs = try fixture.getJSON("/api/runs")["runs"]?.arrayValue ?? []
    return Dictionary(runs.compactMap { run in run["id"]?.stringValue.map { ($0, run) } }, uniquingKeysWith: { a, _ in a })
}

/// `event` with its `ts` set to `2026-12-02T10:11:<second>Z`.
private func at(_ second: Int, _ event: JSONValue) -> JSONValue {
    guard case .object(var object) = event else { return event }
    object["ts"] = .string("2026-12-02T10:11:\(second < 10 ? "0" : "")\(second)Z")
    return .object(object)
}

/// Every event of `run` through `GET /api/events?run=&since=&limit=`, paging forward `limit` at a time.
private func pagedEvents(_ fixture: StackFixture, run: String, limit: Int) throws -> [JSONValue] {
    var out: [JSONValue] = []
    var since = 0
    for _ in 0..<100 {
        let page = try fixture.getJSON("/api/events?run=\(run)&since=\(since)&limit=\(limit)")["events"]?.arrayValue ?? []
        guard let last = page.last?["seq"]?.intValue else { break }
        out += page
        since = last
    }
    return out
}

@Suite("flowscope serve: runs stored by the sqlite sink", .ownThread)
struct StoredRunsTests {
    @Test("after a restart on the same sqlite file, an earlier run is listed with stored: true and its events, placements and detail are served")
    func listedAfterRestart() throws {
        let dir = makeTemporaryDirectory("stored")
        defer { removeDirectory(dir) }
        var firstEpoch: String?
        do {
            let first = try StackFixture(sinks: storedSinks, dir: dir)
            try first.ingest(Events.lines([
                Events.envelope("fetch.start", placement: "main", run: "test:before"),
                Events.fetchEnd("main", source: "network", duration: 0.25, run: "test:before"),
                Events.fetchEnd("main", source: "cache", duration: 0.5, run: "test:before", targetingLost: true),
                Events.envelope("timeout", placement: "onboarding", run: "test:before"),
            ]))
            #expect(try runsByID(first)["test:before"]?["stored"] == nil, "a run in memory is not marked stored")
            firstEpoch = try first.getJSON("/api/events")["epoch"]?.stringValue
            first.stop()
        }
        // The rows carry the epoch the first server reported.
        let rows = try SQLiteSink(path: dir + "/events.sqlite").storedEvents(limit: 10)
        #expect(rows.count == 4)
        #expect(firstEpoch != nil && rows.allSatisfy { $0.epoch == firstEpoch })

        let second = try StackFixture(sinks: storedSinks, dir: dir)
        try second.ingest(Events.lines([Events.envelope("fetch.start", placement: "main", run: "test:after")]))
        let runs = try runsByID(second)
        let before = try #require(runs["test:before"], "runs after the restart: \(runs.keys.sorted())")
        #expect(before["stored"] == true)
        #expect(before["events"] == 4)
        #expect(before["fetches"] == 2)
        #expect(before["kind"] == "test")
        #expect(runs["test:after"]?["stored"] == nil)

        let page = try second.getJSON("/api/events?run=test:before")
        let events = try #require(page["events"]?.arrayValue)
        #expect(events.compactMap { $0["name"]?.stringValue } == ["fetch.start", "fetch.end", "fetch.end", "timeout"])
        #expect(events.allSatisfy { $0["run"] == "test:before" })
        #expect(Set(events.compactMap { $0["seq"]?.intValue }).count == 4)
        #expect(page["epoch"]?.stringValue?.count == 16)
        #expect(page["epoch"]?.stringValue != firstEpoch, "a new start, a new epoch")

        let placements = try second.getJSON("/api/placements?run=test:before")["placements"]?.arrayValue ?? []
        let main = try #require(placements.first { $0["placement"] == "main" })
        #expect(main["fetches"] == 2)
        #expect(main["sources"] == ["network": 1, "cache": 1])
        #expect(main["targetingLost"] == 1)
        #expect(placements.first { $0["placement"] == "onboarding" }?["timeouts"] == 1)

        let detail = try second.getJSON("/api/runs/test:before")
        #expect(detail["run"]?["stored"] == true)
        #expect(detail["eventsByName"] == ["fetch.start": 1, "fetch.end": 2, "timeout": 1])
        #expect(try second.get("/api/runs/test:never").status == 404)
    }

    @Test("a run the memory sink forgot (past maxRuns) stays viewable from the sqlite sink")
    func evictedFromMemory() throws {
        let dir = makeTemporaryDirectory("stored")
        defer { removeDirectory(dir) }
        let fixture = try StackFixture(sinks: storedSinks, dir: dir)
        // Each run later than the one before: memory forgets the least recently active.
        for (i, run) in ["test:one", "test:two", "test:three"].enumerated() {
            try fixture.ingest(Events.lines([at(i * 10, Events.fetchEnd("main", source: "network", duration: 0.1, run: run)),
                                             at(i * 10 + 1, Events.fetchEnd("main", source: "network", duration: 0.2, run: run))]))
        }
        #expect(!fixture.stack.live.holdsRun("test:one"), "maxRuns 2: memory forgot the oldest run")
        let runs = try runsByID(fixture)
        #expect(runs["test:one"]?["stored"] == true)
        #expect(runs["test:three"]?["stored"] == nil)
        let events = try fixture.getJSON("/api/events?run=test:one")["events"]?.arrayValue ?? []
        #expect(events.count == 2)
        #expect(events.allSatisfy { $0["run"] == "test:one" })
        #expect(try fixture.getJSON("/api/runs/test:one")["run"]?["fetches"] == 2)
    }

    @Test("one run written by two server starts: paging its stored events after a third start returns each event once, in write order")
    func twoStartsStayApart() throws {
        let dir = makeTemporaryDirectory("stored")
        defer { removeDirectory(dir) }
        for start in 1...2 {
            let fixture = try StackFixture(sinks: storedSinks, dir: dir)
            // The same seqs (1, 2, 3) in both starts.
            try fixture.ingest(Events.lines((1...3).map { i in
                Events.envelope("fetch.start", placement: "main", run: "test:twice", t: Double(start * 10 + i))
            }))
            fixture.stop()
        }
        let third = try StackFixture(sinks: storedSinks, dir: dir)
        #expect(try runsByID(third)["test:twice"]?["events"] == 6)
        let events = try pagedEvents(third, run: "test:twice", limit: 2)
        #expect(events.compactMap { $0["t"]?.numberValue } == [11, 12, 13, 21, 22, 23])
        let seqs = events.compactMap { $0["seq"]?.intValue }
        #expect(seqs == seqs.sorted() && Set(seqs).count == 6)
    }
}

/// The read model over the sqlite sink against the read model over the memory sink, on the same events.
@Suite("sqlite and memory sinks: the same aggregates", .ownThread)
struct StoredAggregatesTests {
    /// 12,000 seeded events over four runs: fetch.end with 20 sources on one placement (past the 16
    /// listed), about 1,700 durations per placement of `live`, errors (null and non-null codes),
    /// targeting lost, placementless fetches, timeouts and preload.end failures.
    static func events() -> [Envelope] {
        var random = SplitMix64(seed: 18)
        var out: [Envelope] = []
        let runs = ["live", "test:a", "sim:b", "test:c"]
        for i in 0..<12_000 {
            let seq = UInt64(i + 1)
            let run = runs[[0, 0, 0, 0, 0, 0, 1, 1, 2, 3][Int(random.next() % 10)]]
            let roll = random.next() % 100
            var name = EventName.fetchEnd
            var placement: String? = ["main", "onboarding", "many_sources"][Int(random.next() % 3)]
            var attrs: [String: JSONValue] = [:]
            switch roll {
            case 0..<70:
                let sources = placement == "many_sources" ? 20 : 4
                attrs["source"] = .string("source_\(random.next() % UInt64(sources))")
                attrs["duration"] = .number(Double(random.next() % 5000) / 1000)
                attrs["targetingLost"] = .bool(random.next() % 5 == 0)
                if random.next() % 10 == 0 { attrs["errorCode"] = random.next() % 2 == 0 ? .number(2005) : .null }
                if random.next() % 50 == 0 { placement = nil }
            case 70..<80:
                name = .timeout
                attrs["stage"] = "targeted"
            case 80..<84:
                name = .preloadEnd
                placement = nil
                attrs["failed"] = random.next() % 2 == 0 ? ["main": 2005] : ["onboarding": "timeout", "extra": ["code": 504]]
            default:
                name = .requestStart
                attrs["kind"] = "targeted"
            }
            out.append(Envelope(seq: seq, ts: 1_796_000_000 + Double(i) / 10, t: Double(i), run: run,
                                trace: TraceID(high: seq, low: 1), span: SpanID(raw: seq), name: name, placement: placement,
                                attrs: EventAttributes(attrs)))
        }
        return out
    }

    @Test("runs, each run's detail and the read model's placements are equal, value for value, to the memory sink's")
    func sameAggregates() throws {
        let dir = makeTemporaryDirectory("aggregates")
        defer { removeDirectory(dir) }
        let events = Self.events()
        let memory = MemorySink(capacity: 20_000)
        let sqlite = try SQLiteSink(path: dir + "/events.sqlite")
        for start in stride(from: 0, to: events.count, by: 500) {
            let batch = Array(events[start..<min(start + 500, events.count)])
            memory.consume(batch)
            sqlite.consume(batch)
        }
        // A fresh file numbers its rows 1, 2, ... like the seqs: even the preload errors' seq agree.
        #expect(sqlite.runSummaries() == memory.runSummaries())
        let query = CallQuery()
        for run in ["live", "test:a", "sim:b", "test:c"] {
            var filter = CallFilter()
            filter.run = run
            let fromMemory = query.placements(in: memory, filter: filter), fromSQLite = query.placements(in: sqlite, filter: filter)
            #expect(fromSQLite.placements == fromMemory.placements, "run \(run)")
            #expect(fromSQLite.coverage == fromMemory.coverage && fromMemory.coverage.complete, "run \(run)")
            #expect(sqlite.runDetail(id: run) == memory.runDetail(id: run), "run \(run)")
        }
        var live = CallFilter()
        live.run = "live"
        let main = query.placements(in: memory, filter: live).placements.first { $0.placement == "many_sources" }
        #expect(main?.sources["_other"] != nil, "more than 16 sources: some fold into _other")
        #expect(main.map { $0.duration.samples == $0.fetches && $0.fetches > 1024 } == true, "every fetch's duration counts")
        #expect(sqlite.lastQueryError == nil)
    }
}
