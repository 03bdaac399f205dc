import FlowScopeTesting
import MemorySink
import Testing

@Test("the memory sink passes the sink conformance check, keeping every event in order")
func memorySinkConforms() {
    var last: MemorySink?
    let failures = SinkConformance.check(
        name: "memory",
        make: {
            let sink = MemorySink(capacity: 100_000)
            last = sink
            return sink
        },
        readBack: { last?.events(limit: 100_000).map(\.seq) ?? [] })
    #expect(failures.isEmpty, "\(failures)")
}
