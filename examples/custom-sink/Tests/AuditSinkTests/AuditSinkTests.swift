import AuditSink
import FlowScopeTesting
import Foundation
import Synchronization
import Testing

// sample: conformance
@Test func auditSinkConforms() {
    let path = NSTemporaryDirectory() + "audit-\(UUID()).log"
    defer { try? FileManager.default.removeItem(atPath: path) }
    let failures = SinkConformance.check(name: "audit",
                                         make: { try AuditSink(name: "audit", path: path) },
                                         readBack: { try AuditSink.seqs(in: path) })
    #expect(failures.isEmpty, "\(failures)")
}
// end sample: conformance

func envelopes(_ seqs: ClosedRange<UInt64>) -> [Envelope] {
    seqs.map { Envelope(seq: $0, ts: 0, t: 0, run: "live", trace: TraceID(high: 1, low: 1), span: SpanID(raw: 1),
                        name: .fetchStart, placement: "main_paywall", attrs: [:]) }
}

func inode(_ path: String) throws -> UInt64 {
    var info = stat()
    try #require(stat(path, &info) == 0)
    return UInt64(info.st_ino)
}

@Test func linesSurviveAReopen() throws {
    let path = NSTemporaryDirectory() + "audit-\(UUID()).log"
    defer { try? FileManager.default.removeItem(atPath: path) }
    try Data("0 earlier-run -\n".utf8).write(to: URL(fileURLWithPath: path))
    let created = try inode(path)

    let first = try AuditSink(path: path)
    first.consume(envelopes(1...3))
    first.close()
    let second = try AuditSink(path: path)       // a restart: appends, truncates nothing
    second.consume(envelopes(4...5))
    second.close()

    #expect(try AuditSink.seqs(in: path) == [0, 1, 2, 3, 4, 5])
    #expect(try inode(path) == created, "the file is opened, never replaced")
    #expect(try String(contentsOfFile: path, encoding: .utf8).hasPrefix("0 earlier-run -\n1 fetch.start main_paywall\n"))
}

@Test func validateRefusesWhatOpeningWouldRefuse() throws {
    let factory = AuditSinkFactory()
    func validate(_ options: [String: JSONValue]) throws(JSONInputError) {
        let context = SinkContext(name: "audit", options: options, path: "$.sinks[2]", stateDirectory: "/nonexistent-state")
        try factory.validate(try factory.options(from: context), context: context)
    }
    #expect(throws: JSONInputError(path: "$.sinks[2].path", message: "/nonexistent-dir/audit.log: directory /nonexistent-dir does not exist")) {
        try validate(["path": "/nonexistent-dir/audit.log"])
    }
    #expect(throws: JSONInputError(path: "$.sinks[2].path", message: "\(NSTemporaryDirectory()): is a directory")) {
        try validate(["path": .string(NSTemporaryDirectory())])
    }
    try validate(["path": .string(NSTemporaryDirectory() + "audit-\(UUID()).log")])
    try validate([:])   // the default, in the state directory, which serve creates
}

@Test func aRelativePathIsRelativeToTheConfigFile() throws {
    let factory = AuditSinkFactory()
    let fromFile = SinkContext(name: "audit", options: ["path": "logs/audit.log"], configDirectory: "/etc/flowscope")
    #expect(try factory.options(from: fromFile).path == "/etc/flowscope/logs/audit.log")
    let byDefault = SinkContext(name: "audit", stateDirectory: "/var/lib/flowscope", configDirectory: "/etc/flowscope")
    #expect(try factory.options(from: byDefault).path == "/var/lib/flowscope/audit.log")
}

@Test func recentStoreConforms() {
    // The last store made is the one read back: every event once, in seq order.
    let last = Mutex<RecentStore?>(nil)
    let failures = SinkConformance.check(name: "recent",
                                         make: {
                                             let store = RecentStore(name: "recent", capacity: 100_000)
                                             last.withLock { $0 = store }
                                             return store
                                         },
                                         readBack: { last.withLock { $0 }?.events(since: 0, limit: .max, run: nil, placement: nil, name: nil).map(\.seq) ?? [] })
    #expect(failures.isEmpty, "\(failures)")
}

@Test func recentStoreKeepsTheNewestAndCountsEveryEvent() {
    let store = RecentStore(capacity: 3)
    store.consume(envelopes(1...5))
    #expect(store.events(since: nil, limit: 10, run: nil, placement: nil, name: nil).map(\.seq) == [3, 4, 5])
    #expect(store.events(since: 3, limit: 1, run: nil, placement: nil, name: nil).map(\.seq) == [4])
    #expect(store.latestSeq == 5)
    #expect(store.runDetail(id: "live")?.summary.events == 5, "runs count the events no longer held too")
    #expect(store.runDetail(id: "live")?.eventsByName["fetch.start"] == 5)
    #expect(store.runSummaries().map(\.id) == ["live"])
    let seen = Mutex<[UInt64]>([])
    let stop = store.follow { batch in seen.withLock { $0 += batch.map(\.seq) } }
    store.consume(envelopes(6...7))
    stop()
    store.consume(envelopes(8...8))
    #expect(seen.withLock { $0 } == [6, 7])
}

@Test func auditSinkCountsItsLines() throws {
    let path = NSTemporaryDirectory() + "audit-\(UUID()).log"
    defer { try? FileManager.default.removeItem(atPath: path) }
    let sink = try AuditSink(path: path)
    sink.consume(envelopes(1...4))
    sink.close()
    let text = String(decoding: sink.exposition(accept: nil).body, as: UTF8.self)
    #expect(text.contains("audit_lines_total{outcome=\"written\"} 4\n"))
    #expect(sink.metricFamilyNames == ["audit_lines_total"])
}
