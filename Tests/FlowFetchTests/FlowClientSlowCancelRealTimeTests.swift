import FlowFetch
import Foundation
import TestSupport
import Testing

/// A backend whose requests never answer and whose targeted requests take `cancelSeconds` to cancel,
/// as URLSession's cancel does while its queue is busy with a hostile response.
struct SlowCancelBackend: FlowBackend {
    var cancelSeconds: UInt32
    func send(_ request: RequestSpec) async -> RequestCompletion {
        await withTaskCancellationHandler {
            try? await Task.sleep(for: .seconds(3600))
            return RequestCompletion(.failure(.cancelled))
        } onCancel: {
            if request.kind == .targeted { sleep(cancelSeconds) }
        }
    }
}

/// Real time and real threads: `.realTime`, so no blocking or CPU-heavy test runs beside it.
@Suite("FlowClient: deadlines with a slow backend cancellation", .realTime)
struct FlowClientSlowCancelRealTimeTests {
    @Test("a call ends at its loadTimeout although cancelling a request it gave up blocks for 4 s: cancellations never hold up the timers")
    func deadlineDespiteBlockingCancel() async throws {
        let client = FlowClient(profile: Profile(id: "u"), backend: SlowCancelBackend(cancelSeconds: 4))
        let start = ContinuousClock.now
        var code: FlowError.Code?
        do {
            _ = try await client.getFlow(placementId: "main", fetchPolicy: .reloadRevalidatingCacheData, loadTimeout: 1)
        } catch {
            code = error.code
        }
        let elapsed = ContinuousClock.now - start
        #expect(code == .networkFailed)
        // The budget is 1 s; the targeted request, given up at its stage's cut (0.5 s), takes 4 s to
        // cancel. Run on the timer queue, that cancel made the call end at 4.5 s.
        #expect(elapsed < .seconds(3), "ended after \(elapsed)")
    }
}
