import Foundation
import Synchronization

/// Where requests go: an HTTP backend, or a sandbox. Implementations must return promptly when the
/// calling task is cancelled (the engine cancels requests it no longer needs).
public protocol FlowBackend: Sendable {
    /// Sends one request and returns its answer or failure.
    func send(_ request: RequestSpec) async -> RequestCompletion
}

/// The engine's clock in real time: `now` is wall-clock time (so cache ages survive restarts);
/// deadlines run on a monotonic clock. Both speak ``EngineTime`` (whole microseconds).
public protocol EngineClock: Sendable {
    /// Now on the engine's time line.
    func now() -> EngineTime
    /// Returns at engine time `deadline`, or throws when the task is cancelled.
    func sleep(until deadline: EngineTime) async throws
    /// Calls `action` at engine time `deadline` on a timer thread that does not depend on Swift's
    /// cooperative thread pool (so a busy pool cannot delay a call's deadline); returns a cancel function.
    func schedule(at deadline: EngineTime, _ action: @escaping @Sendable () -> Void) -> @Sendable () -> Void
}

/// The system clock (wall-clock microseconds since 1970); deadlines fire on a dedicated Dispatch
/// queue, after the remaining time measured on the monotonic clock.
public struct SystemClock: EngineClock {
    private static let timers = DispatchQueue(label: "flowscope.engine.timers", qos: .userInitiated)

    public init() {}
    public func now() -> EngineTime {
        EngineTime(microseconds: SystemClocks.wallMicroseconds())
    }
    public func sleep(until deadline: EngineTime) async throws {
        let remaining = (deadline - now()).microseconds
        if remaining > 0 { try await Task.sleep(for: .microseconds(remaining), clock: .continuous) }
    }
    public func schedule(at deadline: EngineTime, _ action: @escaping @Sendable () -> Void) -> @Sendable () -> Void {
        let cancelled = CancelFlag()
        // Dispatch counts nanoseconds in 64 bits: a deadline decades away is as good as never.
        let delay = Swift.min(Swift.max((deadline - now()).microseconds, 0), 1_000_000_000_000_000)
        Self.timers.asyncAfter(deadline: .now() + .microseconds(Int(delay))) {
            if !cancelled.isSet { action() }
        }
        return { cancelled.set() }
    }
}

/// A one-way flag, safe to share between threads.
final class CancelFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    var isSet: Bool { flag.load(ordering: .acquiring) }
    func set() { flag.store(true, ordering: .releasing) }
}

/// The public async API (named like the paywall SDK the seeds describe), driving the engine's state
/// machines with a real clock, a backend, stores and an event sink.
///
/// ```swift
/// let client = FlowClient(profile: Profile(id: "user-42"), backend: myBackend)
/// let flow = try await client.getFlow(placementId: "main_paywall", loadTimeout: 3)
/// ```
/// Every call ends within its budget whatever the network does. Cancelling the calling task ends the
/// call with operationInterrupted (9000); ``identify(profileId:)`` ends calls in flight with
/// profileWasChanged (3006).
public final class FlowClient: Sendable {
    private let core: Core

    /// A client for `profile`. `disk` is the flow cache's disk layer and `layouts` the layout cache (in
    /// memory unless given); `events` receives every engine event, each carrying this client's
    /// ``session`` and the current profile's id hashed (SHA-256, first 16 hex characters), or the
    /// id as it is when `configuration.plainProfileIDs` is set.
    public init(profile: Profile, backend: FlowBackend, configuration: FlowEngine.Configuration = .init(),
                disk: sending FlowDiskStore = InMemoryDiskStore(), layouts: sending LayoutStore = InMemoryLayoutStore(),
                events: EngineEventSink? = nil, clock: EngineClock = SystemClock()) {
        var config = configuration
        if config.activatedAt == .zero { config.activatedAt = clock.now() }
        core = Core(profile: profile, backend: backend, configuration: config, disk: disk, layouts: layouts,
                    events: events, clock: clock)
    }

    /// The current profile.
    public var profile: Profile { core.profile }

    /// This client's session: random, one per instance, carried by every event it emits.
    public var session: SessionID { core.session }

    /// Fetches the flow for a placement (docs/fetch-rules.md, getFlow).
    public func getFlow(placementId: String, fetchPolicy: FetchPolicy = .reloadRevalidatingCacheData,
                        loadTimeout: Double = Budget.defaultLoadTimeout) async throws(FlowError) -> Flow {
        try await core.flow { engine, now throws(FlowError) in
            try engine.getFlow(placement: placementId, policy: fetchPolicy, loadTimeout: loadTimeout, now: now)
        }
    }

    /// Fetches the default audience's flow (docs/fetch-rules.md, getFlowForDefaultAudience).
    public func getFlowForDefaultAudience(placementId: String,
                                          fetchPolicy: FetchPolicy = .reloadRevalidatingCacheData) async throws(FlowError) -> Flow {
        try await core.flow { engine, now throws(FlowError) in
            try engine.getFlowForDefaultAudience(placement: placementId, policy: fetchPolicy, now: now)
        }
    }

    /// Warms the cache for several placements under one budget; throws networkFailed with
    /// `preloadErrors` naming each failing placement.
    public func preloadFlows(placementIds: [String], loadTimeout: Double = Budget.defaultLoadTimeout) async throws(FlowError) {
        _ = try await core.outcome { engine, now throws(FlowError) in
            try engine.preloadFlows(placements: placementIds, loadTimeout: loadTimeout, now: now)
        }
    }

    /// Warms the cache with default-audience flows.
    public func preloadFlowsForDefaultAudience(placementIds: [String]) async throws(FlowError) {
        _ = try await core.outcome { engine, now throws(FlowError) in
            try engine.preloadFlowsForDefaultAudience(placements: placementIds, now: now)
        }
    }

    /// The attribution race: the targeted flow if attribution arrives (and its fetch completes) within
    /// `timeout`, else the default audience's flow.
    public func getFlowOrDefault(placementId: String, timeout: Double) async throws(FlowError) -> Flow {
        try await core.flow { engine, now throws(FlowError) in
            try engine.getFlowOrDefault(placement: placementId, timeout: timeout, now: now)
        }
    }

    /// The layout of a flow; images the `assetsResolver` maps to bundled files are never downloaded,
    /// the others are prefetched in the background.
    public func getFlowConfiguration(forFlow flow: Flow, assetsResolver: @escaping @Sendable (String) -> URL? = { _ in nil },
                                     loadTimeout: Double = Budget.defaultLoadTimeout) async throws(FlowError) -> FlowConfiguration {
        let outcome = try await core.outcome { engine, now throws(FlowError) in
            try engine.getFlowConfiguration(flow: flow, isBundled: { assetsResolver($0) != nil }, loadTimeout: loadTimeout, now: now)
        }
        guard case .configuration(let c) = outcome else { throw FlowError(.decodingFailed, "no layout") }
        return c
    }

    /// Switches to another profile at once; calls in flight fail with profileWasChanged (3006).
    public func identify(profileId: String) {
        core.drive { engine, now in _ = engine.identify(profileId, now: now) }
    }

    /// Tells the client the backend applied an attribution source to the current profile.
    public func attributionApplied(source: String) {
        core.drive { engine, now in engine.applyAttribution(source, now: now) }
    }
}

/// The client's engine and the tasks that run its requests and timers, behind one lock.
final class Core: Sendable {
    struct State {
        var engine: FlowEngine
        let driver: Driver
    }
    let state: Mutex<State>
    let backend: FlowBackend
    let clock: EngineClock
    let session = SessionID.random()

    init(profile: Profile, backend: FlowBackend, configuration: FlowEngine.Configuration, disk: sending FlowDiskStore,
         layouts: sending LayoutStore, events: EngineEventSink?, clock: EngineClock) {
        self.backend = backend
        self.clock = clock
        let driver = Driver()
        let engine = FlowEngine(configuration: configuration, profile: profile, flowCache: FlowCache(disk: disk),
                                layouts: layouts, host: driver, events: events, traceIDs: randomTraceID)
        engine.session = session
        state = Mutex(State(engine: engine, driver: driver))
        state.withLock { $0.driver.core = self }
    }

    var profile: Profile { state.withLock { $0.engine.profile } }

    /// Runs `body` with the engine under the lock.
    func drive(_ body: @Sendable (FlowEngine, EngineTime) -> Void) {
        let now = clock.now()
        withEngine { body($0.engine, now) }
    }

    /// Runs `body` under the lock, then resumes the callers of the calls that ended meanwhile, then
    /// cancels the request tasks the engine gave up meanwhile. Both happen outside the lock:
    /// - resuming a caller takes its task's status lock, which a cancellation of that task holds while
    ///   its handler waits for this lock (the handler cancels the call): resumed under the lock, the
    ///   two would wait for each other for ever;
    /// - cancelling a request runs its backend's cancellation (URLSession's, for HTTPBackend), which
    ///   can wait on the backend's own queue, so a call whose budget ran out (a preload giving up
    ///   thousands of requests) ends and resumes its caller first. The cancellations run on a queue
    ///   of their own: URLSession's waits for its queue, which a hostile response can hold for
    ///   seconds (100,000 header lines took 12 s), and run here it held up the timer queue, so every
    ///   deadline of every client fired that much late.
    @inline(__always)
    func withEngine<T>(_ body: (inout sending State) -> sending T) -> T {
        let (result, ended, abandoned) = state.withLock { s -> sending (T, [Driver.Ended], [Task<Void, Never>]) in
            let result = body(&s)
            return (result, s.driver.takeEnded(), s.driver.takeAbandoned())
        }
        for end in ended { end.waiter.resume(returning: end.outcome) }
        if !abandoned.isEmpty {
            // Newest first: a backend that queues requests (HTTPBackend's gate) then never admits one
            // of them only to cancel it when an older one leaves.
            Self.cancellations.async { for task in abandoned.reversed() { task.cancel() } }
        }
        return result
    }

    /// Where abandoned requests are cancelled, in the order the engine gave them up.
    private static let cancellations = DispatchQueue(label: "flowscope.engine.cancellations")

    func flow(_ start: (FlowEngine, EngineTime) throws(FlowError) -> CallID) async throws(FlowError) -> Flow {
        let outcome = try await outcome(start)
        guard let flow = outcome.flow else { throw FlowError(.decodingFailed, "no flow") }
        return flow
    }

    /// Starts a call and waits for its outcome; cancellation of the waiting task cancels the call.
    /// A call that ends within its start (a cache hit) returns without suspending: no continuation,
    /// no cancellation handler, no hop back to the caller's executor.
    func outcome(_ start: (FlowEngine, EngineTime) throws(FlowError) -> CallID) async throws(FlowError) -> CallOutcome {
        let now = clock.now()
        let started = withEngine { s -> Result<(CallID, CallOutcome?), FlowError> in
            do throws(FlowError) {
                let id = try start(s.engine, now)
                return .success((id, s.driver.takeFinished(id)))
            } catch {
                return .failure(error)
            }
        }
        let id: CallID
        switch started {
        case .failure(let error): throw error
        case .success((_, let done?)): return try Self.result(done)
        case .success((let pending, nil)): id = pending
        }
        let outcome = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<CallOutcome, Never>) in
                withEngine { s in
                    // It may have ended since it started (or been cancelled by the handler): then it
                    // is resumed once the lock is released, as every ended call is.
                    s.driver.wait(for: id, continuation)
                }
            }
        } onCancel: {
            // Runs at once if the task is cancelled already; a call that has ended ignores it.
            let now = clock.now()
            withEngine { $0.engine.cancel(id, now: now) }
        }
        return try Self.result(outcome)
    }

    private static func result(_ outcome: CallOutcome) throws(FlowError) -> CallOutcome {
        if case .failed(let error) = outcome { throw error }
        return outcome
    }

    func respond(_ request: RequestID, _ completion: RequestCompletion) {
        let now = clock.now()
        withEngine { s in
            s.driver.requests[request] = nil
            s.engine.response(request, completion, now: now)
        }
    }

    func fire(_ timer: TimerID) {
        let now = clock.now()
        withEngine { s in
            guard s.driver.timers.removeValue(forKey: timer) != nil else { return }
            s.engine.timerFired(timer, now: now)
        }
    }
}

/// The engine's host inside FlowClient. Only touched while the client's lock is held.
final class Driver: EngineHost {
    unowned(unsafe) var core: Core!
    var requests: [RequestID: Task<Void, Never>] = [:]
    var timers: [TimerID: @Sendable () -> Void] = [:]
    var waiters: [CallID: CheckedContinuation<CallOutcome, Never>] = [:]
    /// Calls that finished before anyone waited for them (cache hits end within their start). The
    /// latest is kept in a slot of its own, so a cache hit touches no dictionary.
    private var finishedLast: (call: CallID, outcome: CallOutcome)?
    private var finishedEarlier: [CallID: CallOutcome] = [:]

    /// The outcome of `call` if it has finished and nobody has taken it yet.
    func takeFinished(_ call: CallID) -> CallOutcome? {
        if let last = finishedLast, last.call == call {
            finishedLast = nil
            return last.outcome
        }
        return finishedEarlier.isEmpty ? nil : finishedEarlier.removeValue(forKey: call)
    }

    func send(_ request: RequestID, _ spec: RequestSpec, origin: CallID) {
        let core = self.core!
        requests[request] = Task {
            let completion = await core.backend.send(spec)
            guard !Task.isCancelled else { return }
            core.respond(request, completion)
        }
    }

    /// Request tasks to cancel once the lock is released (``Core/withEngine(_:)``).
    private var abandoned: [Task<Void, Never>] = []

    func cancel(_ request: RequestID) {
        if let task = requests.removeValue(forKey: request) { abandoned.append(task) }
    }

    func takeAbandoned() -> [Task<Void, Never>] {
        guard !abandoned.isEmpty else { return [] }
        defer { abandoned = [] }
        return abandoned
    }

    func schedule(_ timer: TimerID, at: EngineTime) {
        let core = self.core!
        timers[timer] = core.clock.schedule(at: at) { core.fire(timer) }
    }

    func unschedule(_ timer: TimerID) { timers.removeValue(forKey: timer)?() }

    /// A waiting caller and the outcome to resume it with.
    struct Ended {
        let waiter: CheckedContinuation<CallOutcome, Never>
        let outcome: CallOutcome
    }
    /// Callers to resume once the lock is released (``Core/withEngine(_:)``).
    private var ended: [Ended] = []

    func takeEnded() -> [Ended] {
        guard !ended.isEmpty else { return [] }
        defer { ended = [] }
        return ended
    }

    /// `waiter` waits for `call`'s outcome; a call that has ended already is resumed with it as soon
    /// as the lock is released.
    func wait(for call: CallID, _ waiter: CheckedContinuation<CallOutcome, Never>) {
        if let done = takeFinished(call) {
            ended.append(Ended(waiter: waiter, outcome: done))
        } else {
            waiters[call] = waiter
        }
    }

    func finished(_ call: CallID, _ outcome: CallOutcome, now: EngineTime) {
        if !waiters.isEmpty, let waiter = waiters.removeValue(forKey: call) {
            ended.append(Ended(waiter: waiter, outcome: outcome))
        } else {
            if let previous = finishedLast { finishedEarlier[previous.call] = previous.outcome }
            finishedLast = (call, outcome)
        }
    }
}

/// A trace id for each call in production: random-looking and never repeated within the process,
/// without a system call per call (two `getrandom` calls were a third of a cache hit through
/// FlowClient). A counter, advanced atomically, is spread by SplitMix64's increment, offset by a random
/// seed drawn once and mixed by its finaliser: each step is a bijection (the increment is odd), so
/// distinct counts give distinct ids. Not for security.
func randomTraceID() -> TraceID {
    let n = traceIDCount.wrappingAdd(1, ordering: .relaxed).newValue
    let high = mix64(traceIDSeed.high &+ n &* splitMix64Gamma), low = mix64(traceIDSeed.low &+ n &* splitMix64Gamma)
    return TraceID(high: high, low: high == 0 && low == 0 ? 1 : low)  // all zeros is not a valid id
}

private let traceIDSeed: (high: UInt64, low: UInt64) = {
    var g = SystemRandomNumberGenerator()
    return (g.next(), g.next())
}()
private let traceIDCount = Atomic<UInt64>(0)
