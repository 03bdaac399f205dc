import FlowJSON
import Foundation
import SQLiteSink
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

@Suite("flowscope serve: runs stored by the sqlite sink")
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
        #expect(!fixture.stack.memory.holdsRun("test:one"), "maxRuns 2: memory forgot the oldest run")
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
