import FlowEvents
import FlowJSON
import Foundation
import SQLiteSink
import Testing

@Suite("SQLite event store: close")
struct SQLiteCloseTests {
    @Test("close() checkpoints and closes both connections: no -wal or -shm is left while the sink object lives, and every event is in the file")
    func closeRemovesTheWAL() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/events.sqlite"
        let sink = try SQLiteSink(options: .init(path: path), epoch: "bbbbbbbbbbbbbbbb")
        sink.consume((1...300).map { envelope($0, run: $0 % 3 == 0 ? "test:a" : "live", attrs: ["n": .number(Double($0))]) })
        // Queries open the reader's view of the WAL too.
        #expect(sink.events(since: nil, limit: 5, run: "live", placement: nil, name: nil).count == 5)
        #expect(FileManager.default.fileExists(atPath: path + "-wal"), "an open sink in WAL mode has its -wal file")
        sink.flush()
        sink.close()
        let files = try FileManager.default.contentsOfDirectory(atPath: dir).sorted()
        #expect(files == ["events.sqlite"], "after close: \(files)")

        let rows = try SQLiteSink.storedEvents(inFile: path)
        #expect(rows.map(\.envelope.seq) == Array(1...300))
        #expect(rows.allSatisfy { $0.epoch == "bbbbbbbbbbbbbbbb" })
        #expect(rows.last?.envelope.attrs["n"] == 300)
        let reopened = try SQLiteSink(path: path)
        #expect(try reopened.count() == 300)
        #expect(try reopened.runs().map(\.run).sorted() == ["live", "test:a"])
        #expect(reopened.runSummaries().count == 2, "the runs table was written too")
        sink.close() // a second close does nothing
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).contains("events.sqlite-wal"), "the reopened store's own WAL")
    }

    @Test("after close, queries throw a clear error or answer empty, and consume counts its events as failed; nothing crashes")
    func readsAfterClose() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sink = try SQLiteSink(options: .init(path: dir + "/events.sqlite", retention: 60))
        sink.consume((1...3).map { envelope($0) })
        sink.close()
        #expect {
            _ = try sink.storedEvents(limit: 10)
        } throws: { error in
            (error as? SQLiteSinkError)?.message == "the store is closed"
        }
        #expect(throws: SQLiteSinkError.self) { try sink.count() }
        #expect(throws: SQLiteSinkError.self) { try sink.runs() }
        #expect(throws: SQLiteSinkError.self) { try sink.applyRetention() }
        #expect(sink.events(since: nil, limit: 10, run: nil, placement: nil, name: nil).isEmpty)
        #expect(sink.latestSeq == nil)
        #expect(sink.runSummaries().isEmpty)
        #expect(sink.runDetail(id: "live") == nil)
        #expect(!sink.holdsRun("live"))
        #expect(sink.events(since: nil, limit: 10, run: "live", placement: nil, name: nil).isEmpty)
        #expect(sink.lastQueryError?.message == "the store is closed")
        sink.flush()
        sink.consume([envelope(4)])
        #expect(sink.failedCount == 1 && sink.storedCount == 3)
        #expect(sink.lastError?.message == "the store is closed")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["events.sqlite"])
    }

    @Test("a pipeline's shutdown closes the sink: the files left are the database alone")
    func pipelineShutdownCloses() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/events.sqlite"
        let sink = try SQLiteSink(path: path)
        let pipeline = EventPipeline(sinks: [sink])
        pipeline.ingest((1...50).map { envelope($0) })
        pipeline.shutdown()
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["events.sqlite"])
        #expect(try SQLiteSink.storedEvents(inFile: path).count == 50)
    }
}
