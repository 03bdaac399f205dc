import ExecSink
import FlowJSON
import FlowScopeTesting
import Foundation
import Testing

@Test("the exec sink passes the sink conformance check, its program receiving every event once, in order")
func execSinkConforms() throws {
    let dir = tempDirectory()
    defer { try? FileManager.default.removeItem(atPath: dir) }
    var made = 0
    var path: String { "\(dir)/received-\(made).jsonl" }
    let failures = SinkConformance.check(
        name: "exec",
        make: {
            made += 1
            return ExecSink(command: ["sh", "-c", "cat > '\(path)'"], version: "test", bufferBytes: 64 << 20, flushTimeout: 10)
        },
        readBack: {
            try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").compactMap { line in
                try JSON5.parse(String(line))["seq"]?.intValue.map(UInt64.init)
            }
        })
    #expect(failures.isEmpty, "\(failures)")
}
