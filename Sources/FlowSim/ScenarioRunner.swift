import FlowFetch
import FlowJSON
import Synchronization

/// Plays a scenario in virtual time through the real engine: the same machines production uses,
/// driven by a virtual clock and the sandbox backend.
public final class ScenarioRunner: EngineHost {
    private enum Due {
        case step(Int)
        case response(generation: Int, RequestID, RequestCompletion)
        case timer(generation: Int, TimerID)
        case attribution(profileId: String, source: String)
    }

    public let scenario: Scenario
    private var queue = EventQueue<Due>()
    private var backend: SandboxBackend
    private let disk: InMemoryDiskStore
    private let layouts = InMemoryLayoutStore()
    private let fallback: FallbackFile?
    private let collector: EventCollector
    private var ids: SeededIDs
    private var engine: FlowEngine!
    private var generation = 0
    private var cancelledTimers: Set<TimerID> = []

    private var stepCalls: [Int: (generation: Int, call: CallID)] = [:]
    /// The step of each call of the current engine (ids start again with each engine).
    private var stepOfCall: [CallID: Int] = [:]
    private var outcomes: [Int: (outcome: CallOutcome, at: EngineTime)] = [:]
    private var traceSteps: [TraceID: Int] = [:]
    private var lastFlows: [String: Flow] = [:]
    private var currentStep: Int?
    private var pendingFinish: [(CallID, CallOutcome, EngineTime)] = []

    /// A runner for `scenario`; events also go to `forward` when given (a live pipeline).
    public init(_ scenario: Scenario, forward: EngineEventSink? = nil, seed: UInt64 = 1) {
        self.scenario = scenario
        self.collector = EventCollector(forward: forward)
        self.disk = InMemoryDiskStore(maxBytes: scenario.cacheMaxBytes)
        self.ids = SeededIDs(seed: seed)
        var profiles = [scenario.profile]
        for step in scenario.steps { if case .identify(let p) = step.call { profiles.append(p) } }
        self.backend = SandboxBackend(placements: scenario.backend, network: scenario.network, profiles: profiles)
        self.fallback = Self.fallbackFile(scenario)
    }

    /// Runs every step and returns what happened.
    public func run() -> ScenarioReport {
        let initial = Profile(id: scenario.profile.id, appliedAttributionSources: backend.appliedSources(scenario.profile.id, at: .zero))
        seedCache(profileId: initial.id)
        startEngine(profile: initial)
        for (source, at) in scenario.profile.attribution.sorted(by: { $0.key < $1.key }) where at > 0 {
            queue.schedule(.attribution(profileId: initial.id, source: source), at: EngineTime(seconds: at))
        }
        for (i, step) in scenario.steps.enumerated() { queue.schedule(.step(i), at: EngineTime(seconds: step.at)) }
        while let due = queue.next() {
            let now = queue.now
            switch due {
            case .step(let i): perform(step: i, now: now)
            case .response(let gen, let rid, let completion):
                if gen == generation { engine.response(rid, completion, now: now) }
            case .timer(let gen, let tid):
                if gen == generation, cancelledTimers.remove(tid) == nil { engine.timerFired(tid, now: now) }
            case .attribution(let profileId, let source):
                if engine.profile.id == profileId { engine.applyAttribution(source, now: now) }
            }
        }
        return report()
    }

    // MARK: EngineHost

    public func send(_ request: RequestID, _ spec: RequestSpec, origin: CallID) {
        let now = queue.now
        let answer = backend.answer(spec, at: now)
        if let completion = answer.completion, !answer.drip {
            queue.schedule(.response(generation: generation, request, completion), at: now + answer.delay)
        }
    }

    public func cancel(_ request: RequestID) {}

    public func schedule(_ timer: TimerID, at: EngineTime) {
        queue.schedule(.timer(generation: generation, timer), at: at)
    }

    public func unschedule(_ timer: TimerID) { cancelledTimers.insert(timer) }

    public func finished(_ call: CallID, _ outcome: CallOutcome, now: EngineTime) {
        if let step = stepOfCall[call] {
            record(step: step, outcome, now: now)
        } else {
            pendingFinish.append((call, outcome, now))
        }
    }

    // MARK: steps

    private func perform(step i: Int, now: EngineTime) {
        currentStep = i
        defer { currentStep = nil }
        let call: CallID?
        do throws(FlowError) {
            switch scenario.steps[i].call {
            case .getFlow(let placement, let policy, let loadTimeout):
                call = try engine.getFlow(placement: placement, policy: policy ?? .reloadRevalidatingCacheData,
                                          loadTimeout: loadTimeout ?? Budget.defaultLoadTimeout, now: now)
            case .getFlowForDefaultAudience(let placement, let policy):
                call = try engine.getFlowForDefaultAudience(placement: placement, policy: policy ?? .reloadRevalidatingCacheData, now: now)
            case .preloadFlows(let placements, let loadTimeout):
                call = try engine.preloadFlows(placements: placements, loadTimeout: loadTimeout ?? Budget.defaultLoadTimeout, now: now)
            case .preloadFlowsForDefaultAudience(let placements):
                call = try engine.preloadFlowsForDefaultAudience(placements: placements, now: now)
            case .getFlowOrDefault(let placement, let timeout):
                call = try engine.getFlowOrDefault(placement: placement, timeout: timeout, now: now)
            case .getFlowConfiguration(let placement, let loadTimeout, let bundled):
                guard let flow = lastFlows[placement.trimmingCharacters()] else {
                    throw FlowError(.wrongParam, "no flow was returned for \(placement) before this step")
                }
                let bundledIds = Set(bundled)
                call = try engine.getFlowConfiguration(flow: flow, isBundled: { bundledIds.contains($0) },
                                                       loadTimeout: loadTimeout ?? Budget.defaultLoadTimeout, now: now)
            case .identify(let profile):
                backend.register(profile)
                if let trace = engine.identify(profile.id, now: now) { traceSteps[trace] = i }
                for (source, seconds) in profile.attribution.sorted(by: { $0.key < $1.key }) {
                    let at = EngineTime(seconds: seconds)
                    if at > now { queue.schedule(.attribution(profileId: profile.id, source: source), at: at) }
                }
                call = nil
                record(step: i, .done, now: now)
            case .restart:
                engine.interruptAll(FlowError(.operationInterrupted, "the app restarted"), now: now)
                let profile = engine.profile
                generation += 1
                startEngine(profile: profile)
                call = nil
                record(step: i, .done, now: now)
            case .cancel(let target):
                if let running = stepCalls[target], running.generation == generation { engine.cancel(running.call, now: now) }
                call = nil
                record(step: i, .done, now: now)
            }
        } catch {
            record(step: i, .failed(error), now: now)
            return
        }
        guard let call else { return }
        stepCalls[i] = (generation, call)
        stepOfCall[call] = i
        if let trace = engine.trace(of: call) ?? engine.lastTrace { traceSteps[trace] = i }
        // A call that finished while it started (a cache hit) reported before its id was known.
        if let k = pendingFinish.firstIndex(where: { $0.0 == call }) {
            let (_, outcome, at) = pendingFinish.remove(at: k)
            record(step: i, outcome, now: at)
        }
    }

    private func record(step: Int, _ outcome: CallOutcome, now: EngineTime) {
        guard outcomes[step] == nil else { return }
        outcomes[step] = (outcome, now)
        if case .flow(let flow) = outcome { lastFlows[flow.placementId] = flow }
    }

    private func startEngine(profile: Profile) {
        cancelledTimers.removeAll()
        pendingFinish.removeAll()
        stepOfCall.removeAll()
        var ids = self.ids
        let traceSource = TraceSource(ids: &ids)
        engine = FlowEngine(configuration: .init(requestTimeout: scenario.requestTimeout, fallback: fallback, activatedAt: 0),
                            profile: profile, flowCache: FlowCache(disk: disk), layouts: layouts, host: self,
                            events: collector, traceIDs: traceSource.next)
        // One session per engine start (a restart is a new app launch), from the run's seeded ids.
        var forSession = self.ids
        engine.session = SessionID(seed: forSession.next())
        self.ids = SeededIDs(seed: ids.next())
    }

    private func seedCache(profileId: String) {
        for seed in scenario.cache {
            let key = CacheKey(profileId: profileId, placementId: seed.placement)
            let placement = scenario.backend[seed.placement]
            let audience = placement?.audiences.first { $0.name == seed.audience }
            let variation = audience?.variations.first { $0.id == seed.variation }
                ?? placement?.audiences.lazy.flatMap(\.variations).first { $0.id == seed.variation }
                ?? Variation(id: seed.variation, weight: 100)
            let flow = Flow(placementId: seed.placement, variationId: variation.id, audienceName: seed.audience,
                            audienceVersionId: audience?.versionId ?? "cached", revision: variation.revision,
                            productIds: variation.productIds, remoteConfig: variation.remoteConfig,
                            layout: placement?.layout.map { LayoutRef(id: $0.id, version: $0.version) },
                            source: .cache, targetingLost: seed.fromDefaultAudience)
            let entry = CachedFlow(flow: flow, storedAt: .zero - EngineTime(seconds: seed.age), fromDefaultAudience: seed.fromDefaultAudience)
            _ = disk.save(key, CacheEntryCodec.encode(entry, key: key))
            if seed.corrupt { disk.corrupt(key) }
        }
    }

    static func fallbackFile(_ scenario: Scenario) -> FallbackFile? {
        guard !scenario.fallbackFile.isEmpty else { return nil }
        var placements: [String: AudiencePayload] = [:]
        var layouts: [String: Layout] = [:]
        for (id, seed) in scenario.fallbackFile {
            let layoutDef = scenario.backend[id]?.layout
            let variation = Variation(id: seed.variation, weight: 100, revision: 1,
                                      layout: layoutDef.map { LayoutRef(id: $0.id, version: $0.version) })
            placements[id] = AudiencePayload(placementId: id, audienceName: defaultAudienceName,
                                             audienceVersionId: "fallback", variations: [variation])
            if seed.includesLayout, let def = layoutDef { layouts[def.id] = def.layout }
        }
        return FallbackFile(placements: placements, layouts: layouts)
    }

    // MARK: report

    private func report() -> ScenarioReport {
        let events = collector.events
        var requests: [ScenarioReport.RequestRecord] = []
        var open: [SpanID: Int] = [:]
        for e in events {
            let step = traceSteps[e.trace]
            if e.name == .requestStart {
                open[e.span] = requests.count
                requests.append(.init(step: step, placement: e.placement, kind: e.attrs["kind"]?.stringValue ?? "",
                                      issuedAt: e.t, endedAt: nil, outcome: nil))
            } else if e.name == .requestEnd, let k = open.removeValue(forKey: e.span) {
                requests[k].endedAt = e.t
                requests[k].outcome = e.attrs["outcome"]?.stringValue
            }
        }
        // Counted in one pass: a filter per step would be quadratic in a long scenario.
        var counts = Array(repeating: 0, count: scenario.steps.count)
        for r in requests where r.kind != RequestKind.asset.rawValue {
            if let step = r.step, counts.indices.contains(step) { counts[step] += 1 }
        }
        var results: [ScenarioReport.StepResult] = []
        for (i, step) in scenario.steps.enumerated() {
            results.append(.init(step: i, call: step.call, startedAt: step.at, outcome: outcomes[i]?.outcome,
                                 completedAt: outcomes[i]?.at.seconds, requests: counts[i]))
        }
        let eventRecords = events.map { ScenarioReport.EventRecord(step: traceSteps[$0.trace], event: $0) }
        return ScenarioReport(scenario: scenario, results: results, requests: requests, events: eventRecords)
    }
}

/// Collects engine events in order (and forwards them, when asked).
final class EventCollector: EngineEventSink {
    private let storage = Mutex<[EngineEvent]>([])
    private let forward: EngineEventSink?
    init(forward: EngineEventSink?) { self.forward = forward }
    func receive(_ event: EngineEvent) {
        storage.withLock { $0.append(event) }
        forward?.receive(event)
    }
    var events: [EngineEvent] { storage.withLock { $0 } }
}

/// Hands out seeded trace ids to one engine.
final class TraceSource {
    private var ids: SeededIDs
    init(ids: inout SeededIDs) { self.ids = SeededIDs(seed: ids.next()) }
    func next() -> TraceID {
        var hi = ids.next(), lo = ids.next()
        if hi == 0 && lo == 0 { hi = 1; lo = 1 }
        return TraceID(high: hi, low: lo)
    }
}

extension String {
    func trimmingCharacters() -> String {
        let s = unicodeScalars
        guard let a = s.firstIndex(where: { !$0.properties.isWhitespace }),
              let b = s.lastIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        return String(s[a...b])
    }
}
