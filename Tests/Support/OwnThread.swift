import Foundation
import Synchronization
import Testing

/// A task executor with one thread of its own: every job enqueued on it runs on that thread, in
/// order. A task that prefers it (`withTaskExecutorPreference`) blocks this thread, never one of
/// the cooperative pool's (as many as the machine has cores), when it blocks in a system call,
/// a semaphore or a sleep. `shutDown()` ends the thread once the jobs already enqueued have run; a
/// job enqueued after that runs on the global concurrent executor.
public final class DedicatedThreadExecutor: TaskExecutor {
    private struct State {
        var jobs: [UnownedJob] = []
        var stopped = false
    }
    private let state = Mutex(State())
    /// One signal per job enqueued, and one for the shutdown.
    private let wake = DispatchSemaphore(value: 0)
    /// The thread's identity, for tests that check where code ran.
    private let threadID = Mutex<pthread_t?>(nil)

    public init(name: String) {
        let thread = Thread { [self] in run() }
        thread.name = String(name.prefix(15))
        // 8 MiB, the usual default of a thread on Linux, set so a test's stack does not depend on
        // Foundation's default.
        thread.stackSize = 8 << 20
        thread.start()
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        let accepted = state.withLock { state -> Bool in
            guard !state.stopped else { return false }
            state.jobs.append(unowned)
            return true
        }
        if accepted { wake.signal() } else { globalConcurrentExecutor.enqueue(ExecutorJob(unowned)) }
    }

    /// Whether the calling code runs on this executor's thread.
    public var isCurrent: Bool {
        threadID.withLock { id in id.map { pthread_equal($0, pthread_self()) != 0 } ?? false }
    }

    /// Ends the thread once the jobs already enqueued have run (it does not wait for that).
    public func shutDown() {
        state.withLock { $0.stopped = true }
        wake.signal()
    }

    private func run() {
        threadID.withLock { $0 = pthread_self() }
        while true {
            wake.wait()
            let next = state.withLock { state -> (job: UnownedJob?, stop: Bool) in
                state.jobs.isEmpty ? (nil, state.stopped) : (state.jobs.removeFirst(), false)
            }
            if let job = next.job {
                job.runSynchronously(on: asUnownedTaskExecutor())
            } else if next.stop {
                break
            }
        }
    }
}

/// Who may run at once among the tests that carry ``OwnThreadTrait``: `width` shares, served in the
/// order asked. A test on a thread of its own takes one share; a test that needs the machine to
/// itself (`.realTime`) takes them all, so it runs while no other such test does, and none starts
/// while it runs. Waiting suspends the task; it blocks no thread.
public final class MachineShares: Sendable {
    private struct Waiter {
        let count: Int
        let continuation: CheckedContinuation<Void, Never>
    }
    private struct State {
        var free: Int
        var waiters: [Waiter] = []
    }
    public let width: Int
    private let state: Mutex<State>

    public init(width: Int) {
        self.width = max(1, width)
        state = Mutex(State(free: max(1, width)))
    }

    /// The shares of this test process: FLOWSCOPE_TEST_THREADS, or twice the cores (at least 4).
    public static let process = MachineShares(width: ProcessInfo.processInfo.environment["FLOWSCOPE_TEST_THREADS"].flatMap { Int($0) }
        ?? max(4, 2 * ProcessInfo.processInfo.activeProcessorCount))

    /// Takes `count` shares (at most `width`), waiting behind everyone who asked before.
    public func acquire(_ count: Int) async {
        let count = min(count, width)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted = state.withLock { state -> Bool in
                if state.waiters.isEmpty && state.free >= count {
                    state.free -= count
                    return true
                }
                state.waiters.append(Waiter(count: count, continuation: continuation))
                return false
            }
            if granted { continuation.resume() }
        }
    }

    public func release(_ count: Int) {
        let count = min(count, width)
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.free += count
            var ready: [CheckedContinuation<Void, Never>] = []
            while let first = state.waiters.first, first.count <= state.free {
                state.free -= first.count
                ready.append(state.waiters.removeFirst().continuation)
            }
            return ready
        }
        for continuation in ready { continuation.resume() }
    }
}

/// Runs each test it applies to (directly or through its suite) on a thread of its own
/// (``DedicatedThreadExecutor``), so a test that blocks (socket I/O with `poll`, a headless
/// browser over a pipe, `waitUntilExit`, a semaphore, `usleep`) holds that thread and not one of
/// the cooperative pool's, where the async tests running beside it need them. Child tasks
/// (`async let`, task groups) run there too; an unstructured `Task {}` runs on the pool.
///
/// `.ownThread` takes one of ``MachineShares/process``'s shares, so at most that many blocking
/// tests run at once; `.heavy` takes half of them; `.realTime` takes them all: for a test that
/// checks a wall-clock bound, or loads the machine so that others would miss theirs. Async tests
/// without the trait take no share: they run on the pool beside all of these, so a `.realTime`
/// test also waits (at most a minute) until the pool is quiet (``waitForQuietPool(bound:times:limit:)``).
public struct OwnThreadTrait: TestTrait, SuiteTrait, TestScoping {
    /// How much of the machine a test takes.
    public enum Weight: Sendable {
        /// One share: a test that blocks, waiting on I/O, a child process or a sleep.
        case light
        /// Half the shares: a test that keeps cores busy (a headless browser, fuzzing, property runs).
        case heavy
        /// All the shares: a test that checks a wall-clock bound, or loads the machine so that others
        /// would miss theirs.
        case alone

        var rank: Int {
            switch self {
            case .light: 0
            case .heavy: 1
            case .alone: 2
            }
        }
    }
    public let weight: Weight
    let shares: MachineShares

    public init(_ weight: Weight, shares: MachineShares = .process) {
        self.weight = weight
        self.shares = shares
    }

    public var isRecursive: Bool { true }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        // A test under two of these traits (its suite's and its own) is scoped once, by the heaviest.
        let heaviest = test.traits.compactMap { ($0 as? OwnThreadTrait)?.weight.rank }.max() ?? weight.rank
        guard !test.isSuite, Self.current == nil, weight.rank >= heaviest else { return try await function() }
        let count = switch weight {
        case .light: 1
        case .heavy: max(1, shares.width / 2)
        case .alone: shares.width
        }
        await shares.acquire(count)
        defer { shares.release(count) }
        if weight == .alone { await Self.waitForQuietPool() }
        let executor = DedicatedThreadExecutor(name: "test-thread")
        defer { executor.shutDown() }
        try await Self.$current.withValue(weight) {
            try await withTaskExecutorPreference(executor) { try await function() }
        }
    }

    /// Waits until work enqueued on the cooperative pool starts within `bound`, `times` in a row (at
    /// most `limit` in all): the async tests without a trait that keep the pool busy, CPU-bound ones
    /// above all, have ended or paused, so a wall-clock bound measures the code under test. Returns
    /// whether the pool became quiet.
    @discardableResult
    public static func waitForQuietPool(bound: Duration = .milliseconds(100), times: Int = 3,
                                        limit: Duration = .seconds(60)) async -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + limit
        var quiet = 0
        while clock.now < deadline {
            let asked = clock.now
            let started = await Task.detached { clock.now }.value
            quiet = started - asked < bound ? quiet + 1 : 0
            if quiet >= times { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return false
    }

    /// The weight of the scope the current task runs in, if any.
    @TaskLocal static var current: Weight?
}

extension Trait where Self == OwnThreadTrait {
    /// Runs each test on a thread of its own: for tests that block (see ``OwnThreadTrait``).
    public static var ownThread: Self { OwnThreadTrait(.light) }

    /// Runs each test on a thread of its own, with at most one other heavy test (or two
    /// `.ownThread` ones) beside it: for tests that keep cores busy (see ``OwnThreadTrait``).
    public static var heavy: Self { OwnThreadTrait(.heavy) }

    /// Runs each test on a thread of its own while no other `.ownThread` or `.realTime` test runs:
    /// for tests that check wall-clock bounds, or load the machine (see ``OwnThreadTrait``).
    public static var realTime: Self { OwnThreadTrait(.alone) }
}
