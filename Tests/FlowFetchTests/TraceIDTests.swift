import Dispatch
@testable import FlowFetch
import Synchronization
import Testing

@Suite("Production trace ids")
struct TraceIDTests {
    @Test("ids made on several threads at once are all distinct and none is zero")
    func distinctAcrossThreads() {
        let perThread = 50_000
        let made = Mutex<[[TraceID]]>([])
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            let ids = (0..<perThread).map { _ in randomTraceID() }
            made.withLock { $0.append(ids) }
        }
        let all = made.withLock { $0.flatMap { $0 } }
        #expect(all.count == 4 * perThread)
        #expect(Set(all.map { "\($0.high)-\($0.low)" }).count == all.count)
        #expect(all.allSatisfy { $0.high != 0 || $0.low != 0 })
    }

    @Test("consecutive ids share no visible pattern: about half of the bits differ in each half")
    func spread() {
        var differing = 0, pairs = 0
        var previous = randomTraceID()
        for _ in 0..<10_000 {
            let id = randomTraceID()
            differing += (id.high ^ previous.high).nonzeroBitCount + (id.low ^ previous.low).nonzeroBitCount
            pairs += 1
            previous = id
        }
        let mean = Double(differing) / Double(pairs)
        #expect(abs(mean - 64) < 2, "mean differing bits \(mean), expected ~64 of 128")
    }

    @Test("mix64 is the SplitMix64 finaliser: the reference sequence from seed 0")
    func splitMixReference() {
        // SplitMix64 from state 0: the first outputs of the reference implementation.
        var state: UInt64 = 0
        let outputs = (0..<3).map { _ -> UInt64 in state &+= splitMix64Gamma; return mix64(state) }
        #expect(outputs == [0xE220_A839_7B1D_CDAF, 0x6E78_9E6A_A1B9_65F4, 0x06C4_5D18_8009_454F])
    }
}
