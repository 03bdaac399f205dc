import FlowFetch
import Foundation
import Synchronization

/// The sandbox backend in real time: answers after the rule's latency (really sleeping), hangs until
/// cancelled. Serves demo traffic and lets FlowClient run against a scenario's backend.
public final class LiveSandboxBackend: FlowBackend {
    private let backend: Mutex<SandboxBackend>
    private let clock: EngineClock
    private let origin: EngineTime

    /// A live backend over `backend`. Scenario times (attribution `appliesAt`) count from `origin`
    /// on `clock` (default: now).
    public init(_ backend: SandboxBackend, clock: EngineClock = SystemClock(), origin: EngineTime? = nil) {
        self.backend = Mutex(backend)
        self.clock = clock
        self.origin = origin ?? clock.now()
    }

    public func send(_ request: RequestSpec) async -> RequestCompletion {
        let now = clock.now()
        let answer = backend.withLock { $0.answer(request, at: now - origin) }
        do {
            if let completion = answer.completion, !answer.drip {
                try await clock.sleep(until: now + answer.delay)
                return completion
            }
            // A hang (or a drip, whose body never finishes in time): only the engine's deadline ends it.
            while true { try await Task.sleep(for: .seconds(3600)) }
        } catch {
            return RequestCompletion(.failure(.cancelled))
        }
    }
}
