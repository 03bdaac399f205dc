import FlowJSON
import FlowScopeTesting
import Foundation
import JSONLinesSink
import Testing

@Test("the jsonl sink passes the sink conformance check, writing every event once, in order")
func jsonLinesSinkConforms() throws {
    let dir = tempDirectory()
    defer { try? FileManager.default.removeItem(atPath: dir) }
    var made = 0
    var path: String { "\(dir)/events-\(made).jsonl" }
    let failures = SinkConformance.check(
        name: "jsonl",
        make: {
            made += 1
            return try JSONLinesSink(path: path, fsync: .batch)
        },
        readBack: {
            try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map { line in
                UInt64(try JSON5.parse(String(line))["seq"]?.intValue ?? -1)
            }
        })
    #expect(failures.isEmpty, "\(failures)")
}
