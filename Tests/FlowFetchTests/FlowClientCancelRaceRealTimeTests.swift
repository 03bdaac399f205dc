import FlowFetch
import Foundation
import Synchronization
import TestSupport
import Testing

/// A backend answering after a short random pause, so that answers and cancellations race.
struct JitteryBackend: FlowBackend {
    func send(_ request: RequestSpec) async -> RequestCompletion {
        try? await Task.sleep(for: .microseconds(Int.random(in: 0...300)))
        return await FixedBackend().send(request)
    }
}

/// How far the rounds of a race have come, and the one waiting for their end or their stall.
final class RaceProgress: Sendable {
    let ended = Atomic<Int>(0)
    private let waiter = Mutex<CheckedContinuation<Int?, Never>?>(nil)

    func wait(_ continuation: CheckedContinuation<Int?, Never>) { waiter.withLock { $0 = continuation } }
    var isWaited: Bool { waiter.withLock { $0 != nil } }
    /// Resumes the waiter (once): nil when the rounds ended, else the rounds ended before the stall.
    func finish(_ stalledAt: Int?) { waiter.withLock { $0.take() }?.resume(returning: stalledAt) }
}

/// Real time and real threads: `.realTime`, so no blocking or CPU-heavy test runs beside it.
@Suite("FlowClient: answers racing cancellations", .realTime)
struct FlowClientCancelRaceRealTimeTests {
    @Test("calls cancelled while their answers arrive all end: a caller is never resumed under the client's lock, where a cancellation handler waiting for that lock deadlocked with it")
    func cancellationRacesAnswers() async throws {
        let rounds = 2_000
        let stallLimit = 60.0
        // The rounds run in a task of their own; this test waits for whichever comes first: their end,
        // or a watchdog (a thread off the cooperative pool, which a deadlock would hold) seeing no
        // round end for `stallLimit` seconds. A stall fails this test and ends it; the process lives.
        let progress = RaceProgress()
        let client = FlowClient(profile: Profile(id: "u"), backend: JitteryBackend())
        let stalledAt: Int? = await withCheckedContinuation { continuation in
            progress.wait(continuation)
            Thread.detachNewThread {
                var last = -1
                var since = Date()
                while progress.isWaited {
                    let now = progress.ended.load(ordering: .relaxed)
                    if now != last { last = now; since = Date() }
                    else if Date().timeIntervalSince(since) > stallLimit { progress.finish(now); return }
                    usleep(50_000)
                }
            }
            Task {
                for round in 0..<rounds {
                    let task = Task { _ = try? await client.getFlow(placementId: "p\(round % 7)", fetchPolicy: .reloadRevalidatingCacheData, loadTimeout: 5) }
                    try? await Task.sleep(for: .microseconds(Int.random(in: 0...300)))
                    task.cancel()
                    await task.value
                    progress.ended.add(1, ordering: .relaxed)
                }
                progress.finish(nil)
            }
        }
        if let stalledAt {
            Issue.record("FlowClient cancellation race: no round ended in \(Int(stallLimit)) s (stuck after \(stalledAt) of \(rounds) rounds): a deadlock")
        }
        #expect(progress.ended.load(ordering: .relaxed) == rounds)
    }
}
