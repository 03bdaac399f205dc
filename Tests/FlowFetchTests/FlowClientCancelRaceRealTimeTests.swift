import FlowFetch
import Foundation
import Synchronization
import Testing

/// A backend answering after a short random pause, so that answers and cancellations race.
struct JitteryBackend: FlowBackend {
    func send(_ request: RequestSpec) async -> RequestCompletion {
        try? await Task.sleep(for: .microseconds(Int.random(in: 0...300)))
        return await FixedBackend().send(request)
    }
}

/// Real time and real threads: "RealTime" in the name puts the suite in `make test`'s serial pass.
@Suite("FlowClient: answers racing cancellations")
struct FlowClientCancelRaceRealTimeTests {
    @Test("calls cancelled while their answers arrive all end: a caller is never resumed under the client's lock, where a cancellation handler waiting for that lock deadlocked with it")
    func cancellationRacesAnswers() async throws {
        let ended = Atomic<Int>(0)
        let rounds = 2_000
        // A watchdog off the cooperative pool (a deadlock holds pool threads): a deadlocked run would
        // never end, so the watchdog ends the process with a message instead.
        let finished = Atomic<Bool>(false)
        Thread.detachNewThread {
            let deadline = Date().addingTimeInterval(120)
            while !finished.load(ordering: .relaxed) {
                if Date() > deadline {
                    FileHandle.standardError.write(Data("FlowClient cancellation race: deadlocked (no progress in 120 s)\n".utf8))
                    abort()
                }
                usleep(50_000)
            }
        }
        let client = FlowClient(profile: Profile(id: "u"), backend: JitteryBackend())
        for round in 0..<rounds {
            let task = Task { _ = try? await client.getFlow(placementId: "p\(round % 7)", fetchPolicy: .reloadRevalidatingCacheData, loadTimeout: 5) }
            try? await Task.sleep(for: .microseconds(Int.random(in: 0...300)))
            task.cancel()
            await task.value
            ended.add(1, ordering: .relaxed)
        }
        finished.store(true, ordering: .relaxed)
        #expect(ended.load(ordering: .relaxed) == rounds)
    }
}
