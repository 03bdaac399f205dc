import ConsoleSink
import FlowScopeTesting
import Synchronization
import Testing

@Test("the console sink passes the sink conformance check")
func consoleSinkConforms() {
    let written = Mutex(0)
    let failures = SinkConformance.check(name: "console", make: {
        ConsoleSink(color: .never, isTerminal: false, environment: [:]) { text in written.withLock { $0 += text.utf8.count } }
    })
    #expect(failures.isEmpty, "\(failures)")
    #expect(written.withLock { $0 } > 0)
}
