import FlowScopeTesting
import Synchronization
import Testing

/// A sink with one flaw at a time, to show each check of `SinkConformance` can fail.
final class FlawedSink: EventSink {
    enum Flaw { case none, wrongName, losesEvents, reordersEvents, failsWrites }
    let flaw: Flaw
    let kept = Mutex<[UInt64]>([])
    let recorder = SinkHealthRecorder()
    init(_ flaw: Flaw) { self.flaw = flaw }

    var name: String { flaw == .wrongName ? "other" : "flawed" }
    func consume(_ batch: [Envelope]) {
        kept.withLock { kept in
            for e in batch {
                switch flaw {
                case .losesEvents where e.seq % 2 == 0: continue
                case .reordersEvents: kept.insert(e.seq, at: 0)
                default: kept.append(e.seq)
                }
            }
        }
        if flaw == .failsWrites { recorder.failed("write failed") }
    }
    var health: SinkHealth { recorder.current }
}

@Suite("Sink conformance check")
struct SinkConformanceTests {
    static func check(_ flaw: FlawedSink.Flaw) -> [String] {
        var last: FlawedSink?
        return SinkConformance.check(name: "flawed", make: {
            let sink = FlawedSink(flaw)
            last = sink
            return sink
        }, readBack: { last?.kept.withLock { $0 } ?? [] })
    }

    @Test("a sink without flaws passes")
    func passes() { #expect(Self.check(.none) == []) }

    @Test("each flaw is reported", arguments: [
        (FlawedSink.Flaw.wrongName, "name is \"other\""), (.losesEvents, "kept 1000 of 2000 events"),
        (.reordersEvents, "out of seq order"), (.failsWrites, "reports itself failing"),
    ])
    func flawsFail(flaw: FlawedSink.Flaw, expected: String) {
        let failures = Self.check(flaw)
        #expect(failures.contains { $0.contains(expected) }, "\(failures)")
    }
}
