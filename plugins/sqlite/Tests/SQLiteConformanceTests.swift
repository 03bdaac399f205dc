import FlowScopeTesting
import Foundation
import SQLiteSink
import Testing

@Test("the sqlite sink passes the sink conformance check, storing every event in order")
func sqliteSinkConforms() throws {
    let dir = temporaryDirectory()
    defer { try? FileManager.default.removeItem(atPath: dir) }
    var made = 0
    var path: String { "\(dir)/events-\(made).db" }
    let failures = SinkConformance.check(
        name: "sqlite",
        make: {
            made += 1
            return try SQLiteSink(options: .init(path: path))
        },
        readBack: { try SQLiteSink(name: "reader", options: .init(path: path)).events(limit: 100_000).map(\.seq) })
    #expect(failures.isEmpty, "\(failures)")
}
