import AuditSink
import FlowScopeTesting
import Foundation
import Testing

@Test func auditSinkConforms() {
    let path = NSTemporaryDirectory() + "audit-\(UUID()).log"
    defer { try? FileManager.default.removeItem(atPath: path) }
    let failures = SinkConformance.check(name: "audit",
                                         make: { try AuditSink(name: "audit", path: path) },
                                         readBack: { try AuditSink.seqs(in: path) })
    #expect(failures.isEmpty, "\(failures)")
}
