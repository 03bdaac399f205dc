import Foundation
import FlowFetch
import FlowSim

/// Runs an app's own loading code against a scenario's backend and network in virtual time: no
/// waiting, the same engine production uses, the same answer every run.
///
/// Each call runs the engine's event queue until that call ends, advancing the virtual clock as far
/// as the network and deadlines say; so calls are sequential in virtual time (a call made while another
/// runs starts when that one ends). ``advance(by:)`` lets virtual time pass between calls (the app
/// waiting, attribution arriving). The scenario's `steps` and `expect` are not used; its profile,
/// backend, network, cache, fallback file and requestTimeout are.
///
/// ```swift
/// let harness = VirtualHarness(scenario: try Scenario.decode(text))
/// let shown = try await myPaywallLoader(flows: harness)     // the app's code, taking some FlowLoading
/// #expect(await harness.now < 5)
/// ```
public actor VirtualHarness: FlowLoading {
    private let host: VirtualHost
    private let engine: FlowEngine

    /// A harness over `scenario`; events go to `events` (by default the current test's trace, so the
    /// test kit's expectations apply), with virtual times.
    public init(scenario: Scenario, events: EngineEventSink? = FlowTrace.sink) {
        let host = VirtualHost(scenario: scenario)
        let profile = Profile(id: scenario.profile.id,
                              appliedAttributionSources: host.backend.appliedSources(scenario.profile.id, at: .zero))
        let disk = InMemoryDiskStore()
        for seed in scenario.cache { Self.seed(seed, scenario: scenario, profileId: profile.id, disk: disk) }
        // Virtual time is deterministic; trace ids are not: a server folds calls by trace, so two harnesses
        // (two tests, or one test run twice against the same `flowscope serve`) must not share ids.
        var ids = SeededIDs(seed: .random(in: .min ... .max))
        engine = FlowEngine(configuration: .init(requestTimeout: scenario.requestTimeout, fallback: Self.fallback(scenario), activatedAt: 0),
                            profile: profile, flowCache: FlowCache(disk: disk), layouts: InMemoryLayoutStore(), host: host,
                            events: events, traceIDs: { TraceID(high: ids.next() | 1, low: ids.next()) })
        // The test's session when a recorder is current, else one of its own.
        engine.session = FlowTrace.current?.session ?? SessionID.random()
        for (source, at) in scenario.profile.attribution where at > 0 {
            host.queue.schedule(.attribution(source), at: EngineTime(seconds: at))
        }
        self.host = host
    }

    /// Virtual seconds since the start.
    public var now: Double { host.queue.now.seconds }

    /// Lets `seconds` of virtual time pass, running everything due meanwhile (background fetches,
    /// attribution arriving, requests of calls that already ended).
    public func advance(by seconds: Double) {
        host.queue.schedule(.tick, at: host.queue.now + EngineTime(seconds: max(seconds, 0)))
        while let due = host.queue.next() {
            if case .tick = due { return }
            process(due)
        }
    }

    public func getFlow(placementId: String, fetchPolicy: FetchPolicy, loadTimeout: Double) async throws(FlowError) -> Flow {
        try flow(run { e, now throws(FlowError) in try e.getFlow(placement: placementId, policy: fetchPolicy, loadTimeout: loadTimeout, now: now) })
    }

    public func getFlowForDefaultAudience(placementId: String, fetchPolicy: FetchPolicy) async throws(FlowError) -> Flow {
        try flow(run { e, now throws(FlowError) in try e.getFlowForDefaultAudience(placement: placementId, policy: fetchPolicy, now: now) })
    }

    public func preloadFlows(placementIds: [String], loadTimeout: Double) async throws(FlowError) {
        _ = try run { e, now throws(FlowError) in try e.preloadFlows(placements: placementIds, loadTimeout: loadTimeout, now: now) }
    }

    /// preloadFlowsForDefaultAudience in virtual time.
    public func preloadFlowsForDefaultAudience(placementIds: [String]) async throws(FlowError) {
        _ = try run { e, now throws(FlowError) in try e.preloadFlowsForDefaultAudience(placements: placementIds, now: now) }
    }

    public func getFlowOrDefault(placementId: String, timeout: Double) async throws(FlowError) -> Flow {
        try flow(run { e, now throws(FlowError) in try e.getFlowOrDefault(placement: placementId, timeout: timeout, now: now) })
    }

    /// getFlowConfiguration in virtual time; images `assetsResolver` maps to a file are bundled, never downloaded.
    public func getFlowConfiguration(forFlow flow: Flow, assetsResolver: @escaping @Sendable (String) -> URL? = { _ in nil },
                                     loadTimeout: Double = Budget.defaultLoadTimeout) async throws(FlowError) -> FlowConfiguration {
        let outcome = try run { e, now throws(FlowError) in
            try e.getFlowConfiguration(flow: flow, isBundled: { assetsResolver($0) != nil }, loadTimeout: loadTimeout, now: now)
        }
        guard case .configuration(let c) = outcome else { throw FlowError(.decodingFailed, "no layout") }
        return c
    }

    /// Switches profile (identify) at the current virtual time.
    public func identify(profileId: String) { engine.identify(profileId, now: host.queue.now) }

    private func flow(_ outcome: CallOutcome) throws(FlowError) -> Flow {
        guard let f = outcome.flow else { throw FlowError(.decodingFailed, "no flow") }
        return f
    }

    private func run(_ start: (FlowEngine, EngineTime) throws(FlowError) -> CallID) throws(FlowError) -> CallOutcome {
        let id = try start(engine, host.queue.now)
        while host.outcomes[id] == nil, let due = host.queue.next() { process(due) }
        guard let outcome = host.outcomes.removeValue(forKey: id) else {
            throw FlowError(.networkFailed, "the call did not end (nothing left to run)")
        }
        if case .failed(let error) = outcome { throw error }
        return outcome
    }

    private func process(_ due: VirtualHost.Due) {
        let now = host.queue.now
        switch due {
        case .response(let rid, let completion): engine.response(rid, completion, now: now)
        case .timer(let tid): if host.cancelledTimers.remove(tid) == nil { engine.timerFired(tid, now: now) }
        case .attribution(let source): engine.applyAttribution(source, now: now)
        case .tick: break
        }
    }

    static func seed(_ seed: CacheSeed, scenario: Scenario, profileId: String, disk: InMemoryDiskStore) {
        let key = CacheKey(profileId: profileId, placementId: seed.placement)
        let placement = scenario.backend[seed.placement]
        let audience = placement?.audiences.first { $0.name == seed.audience }
        let variation = audience?.variations.first { $0.id == seed.variation } ?? Variation(id: seed.variation, weight: 100)
        let flow = Flow(placementId: seed.placement, variationId: variation.id, audienceName: seed.audience,
                        audienceVersionId: audience?.versionId ?? "cached", revision: variation.revision,
                        productIds: variation.productIds, remoteConfig: variation.remoteConfig,
                        layout: placement?.layout.map { LayoutRef(id: $0.id, version: $0.version) },
                        source: .cache, targetingLost: seed.fromDefaultAudience)
        _ = disk.save(key, CacheEntryCodec.encode(CachedFlow(flow: flow, storedAt: .zero - EngineTime(seconds: seed.age), fromDefaultAudience: seed.fromDefaultAudience), key: key))
        if seed.corrupt { disk.corrupt(key) }
    }

    static func fallback(_ scenario: Scenario) -> FallbackFile? {
        guard !scenario.fallbackFile.isEmpty else { return nil }
        var placements: [String: AudiencePayload] = [:]
        var layouts: [String: Layout] = [:]
        for (id, seed) in scenario.fallbackFile {
            let def = scenario.backend[id]?.layout
            placements[id] = AudiencePayload(placementId: id, audienceName: defaultAudienceName, audienceVersionId: "fallback",
                                             variations: [Variation(id: seed.variation, weight: 100, revision: 1,
                                                                    layout: def.map { LayoutRef(id: $0.id, version: $0.version) })])
            if seed.includesLayout, let def { layouts[def.id] = def.layout }
        }
        return FallbackFile(placements: placements, layouts: layouts)
    }
}

/// The harness's engine host: a virtual clock with its queue, and the sandbox backend.
final class VirtualHost: EngineHost {
    enum Due { case response(RequestID, RequestCompletion), timer(TimerID), attribution(String), tick }
    var queue = EventQueue<Due>()
    var backend: SandboxBackend
    var outcomes: [CallID: CallOutcome] = [:]
    var cancelledTimers: Set<TimerID> = []

    init(scenario: Scenario) {
        backend = SandboxBackend(placements: scenario.backend, network: scenario.network, profiles: [scenario.profile])
    }

    func send(_ request: RequestID, _ spec: RequestSpec, origin: CallID) {
        let answer = backend.answer(spec, at: queue.now)
        if let completion = answer.completion { queue.schedule(.response(request, completion), at: queue.now + answer.delay) }
    }
    func cancel(_ request: RequestID) {}
    func schedule(_ timer: TimerID, at: EngineTime) { queue.schedule(.timer(timer), at: at) }
    func unschedule(_ timer: TimerID) { cancelledTimers.insert(timer) }
    func finished(_ call: CallID, _ outcome: CallOutcome, now: EngineTime) { outcomes[call] = outcome }
}
