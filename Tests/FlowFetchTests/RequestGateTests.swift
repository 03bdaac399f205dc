@testable import FlowFetch
import Synchronization
import Testing

/// The order in which waiting requests were admitted.
final class AdmissionLog: Sendable {
    private let order = Mutex<[Int]>([])
    func add(_ i: Int) { order.withLock { $0.append(i) } }
    var admitted: [Int] { order.withLock { $0 } }
}

@Suite("RequestGate")
struct RequestGateTests {
    /// Polls until `condition` holds (at most about 5 s).
    func eventually(_ condition: () -> Bool) async -> Bool {
        for _ in 0..<1000 {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return condition()
    }

    @Test("at most `limit` in flight; the others are admitted first come first served as places are given back")
    func limitAndOrder() async {
        let gate = RequestGate(limit: 2)
        #expect(await gate.enter())
        #expect(await gate.enter())
        let log = AdmissionLog()
        var waiters: [Task<Void, Never>] = []
        for i in 0..<3 {
            waiters.append(Task {
                if await gate.enter() { log.add(i) }
            })
            // Queue them in a known order.
            #expect(await eventually { gate.counts.waiting == i + 1 })
        }
        #expect(gate.counts.inFlight == 2 && log.admitted.isEmpty)
        gate.leave()
        #expect(await eventually { log.admitted == [0] })
        gate.leave()
        gate.leave()
        #expect(await eventually { log.admitted == [0, 1, 2] })
        #expect(gate.counts == (2, 0))
        for task in waiters { await task.value }
        gate.leave(); gate.leave()
        #expect(gate.counts == (0, 0))
    }

    @Test("a waiting request that is cancelled leaves the queue at once and holds no place; the next leave skips it")
    func cancellation() async {
        let gate = RequestGate(limit: 1)
        #expect(await gate.enter())
        let first = Task { await gate.enter() }
        #expect(await eventually { gate.counts.waiting == 1 })
        let second = Task { await gate.enter() }
        #expect(await eventually { gate.counts.waiting == 2 })
        first.cancel()
        #expect(await first.value == false)
        #expect(gate.counts == (1, 1))
        gate.leave()  // passes the place to `second`, not to the cancelled `first`
        #expect(await second.value == true)
        #expect(gate.counts == (1, 0))
        gate.leave()
        #expect(gate.counts == (0, 0))
        // A task cancelled before it asks gets no place.
        #expect(await gate.enter())
        let late = Task { () -> Bool in
            withUnsafeCurrentTask { $0?.cancel() }
            return await gate.enter()
        }
        #expect(await late.value == false)
        #expect(gate.counts == (1, 0))
    }
}
