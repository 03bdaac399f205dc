import FlowJSON
import Foundation
import SQLiteSink
import TestSupport
import Testing
@testable import FlowScopeCLI

@Suite("flowscope serve: a clean stop", .ownThread)
struct ServeCleanStopTests {
    @Test("after a clean stop the sqlite sink's file stands alone: no -wal or -shm beside it, every event in it")
    func noWALAfterStop() throws {
        let dir = makeTemporaryDirectory("clean-stop")
        defer { removeDirectory(dir) }
        let fixture = try StackFixture(sinks: #"{ type: "memory" }, { type: "sqlite", path: "$DIR/db/events.sqlite" }"#, dir: dir)
        let lines = (0..<50).map { Events.envelope("fetch.start", placement: "p\($0 % 3)", run: "test:stop").jsonText }
        #expect(try fixture.ingest(lines.joined(separator: "\n")).status == 202)
        #expect(try fixture.getJSON("/api/runs")["runs"]?.arrayValue?.isEmpty == false)
        let files = { try FileManager.default.contentsOfDirectory(atPath: dir + "/db").sorted() }
        #expect(try files().contains("events.sqlite-wal"), "while serving, the WAL is there")
        fixture.stop()
        #expect(try files() == ["events.sqlite"])
        let rows = try SQLiteSink.storedEvents(inFile: dir + "/db/events.sqlite")
        #expect(rows.count == 50 && rows.allSatisfy { $0.envelope.run == "test:stop" })
    }
}
