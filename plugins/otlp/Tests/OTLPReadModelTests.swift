import FlowEvents
import FlowJSON
import OTLPSink
import TestSupport
import Testing

@Suite("OTLP spans against the read model")
struct OTLPReadModelTests {
    @Test("on undamaged random streams of interleaved runs and traces, each call of the read model is one root span: its placement, its run, an error status exactly when the call failed, one child span per request",
          arguments: [21, 22, 23] as [UInt64])
    func oneRootPerCall(seed: UInt64) {
        var stream = EventStream(seed: seed)
        let events = stream.generate(calls: 300, damage: false)
        var builder = OTLPTraceBuilder(maxOpenTraces: 10_000, traceTimeout: 1e9)
        var spans: [OTLPSpan] = []
        for e in events { spans += builder.add(e, now: 0) }
        spans += builder.drain()
        let calls = Dictionary(uniqueKeysWithValues: CallFold.calls(events).map { ($0.trace, $0) })
        let roots = spans.filter { $0.parentSpanId == nil }
        #expect(roots.count == calls.count && Set(roots.map(\.traceId)) == Set(calls.keys), "seed \(seed)")
        #expect(builder.incompleteCount == 0 && builder.lateEventCount == 0)
        for root in roots {
            guard let call = calls[root.traceId] else { continue }
            #expect(root.attributes["placement"]?.stringValue == call.placement, "seed \(seed) \(root.traceId)")
            #expect(root.attributes["flowscope.run"]?.stringValue == call.run)
            let failed: Bool
            if case .error = root.status { failed = true } else { failed = false }
            #expect(failed == call.isError, "seed \(seed) \(root.traceId): \(root.status)")
            let children = spans.filter { $0.traceId == root.traceId && $0.parentSpanId != nil }
            #expect(children.count == call.requests.count, "seed \(seed) \(root.traceId)")
        }
    }
}
