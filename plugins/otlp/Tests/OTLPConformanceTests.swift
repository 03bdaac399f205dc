import FlowScopeTesting
import Foundation
import OTLPSink
import Testing

@Test("the otlp sink passes the sink conformance check")
func otlpSinkConforms() throws {
    let dir = temporaryDirectory()
    defer { try? FileManager.default.removeItem(atPath: dir) }
    var made = 0
    let failures = SinkConformance.check(name: "otlp", make: {
        made += 1
        return try OTLPSink(options: .init(destination: .file("\(dir)/spans-\(made).jsonl")))
    })
    #expect(failures.isEmpty, "\(failures)")
}
