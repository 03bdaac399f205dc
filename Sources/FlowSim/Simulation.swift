import FlowFetch
import FlowJSON
import Foundation
import Synchronization

/// The strategy lab: plays many simulated app sessions through the real engine (``FlowEngine``, the
/// machines FlowClient runs) in virtual time, once per strategy, and tallies what users saw.
///
/// Every session is drawn from its own random stream (the seed and the session's index), and every
/// strategy plays the same sessions with the same network draws (common random numbers): the same
/// seed gives the same numbers whatever the number of threads.
///
/// ```swift
/// let result = Simulation(config: .standard).run(sessions: 20_000, seed: 1, threads: 2)
/// print(result.table())
/// ```
public struct Simulation: Sendable {
    /// Sessions per shard: the unit of work handed to a thread and merged in order.
    public static let shardSize = 250

    public let config: SimulationConfig

    /// How many shards `total` sessions make (the last one may be short). Computed without
    /// `total + shardSize - 1`, which overflowed (a trap) for a total within 249 of Int.max.
    static func shardCount(_ total: Int) -> Int {
        total / shardSize + (total % shardSize == 0 ? 0 : 1)
    }

    /// The session indices of shard `shard` (below ``shardCount(_:)``) of `total` sessions, without
    /// overflow for any total up to Int.max.
    static func sessions(ofShard shard: Int, total: Int) -> Range<Int> {
        let first = shard * shardSize
        return first..<(first + min(shardSize, total - first))
    }

    /// A lab for `config`.
    public init(config: SimulationConfig = .standard) { self.config = config }

    /// Runs `sessions` sessions (default: the config's) with `seed` (default: the config's) on
    /// `threads` threads. `progress` is called with (sessions done, total) after each shard, from
    /// the worker threads.
    public func run(sessions: Int? = nil, seed: UInt64? = nil, threads: Int = 1,
                    progress: (@Sendable (Int, Int) -> Void)? = nil) -> SimulationResult {
        let total = max(sessions ?? config.sessions, 0)
        let seed = seed ?? config.seed
        let shardCount = Self.shardCount(total)
        let workers = max(1, min(threads, max(shardCount, 1)))
        let board = ShardBoard(workers: workers)
        let config = self.config
        let started = ContinuousClock.now
        // Each worker merges the shards it played; the workers' tallies are merged at the end. Every
        // merge is exact (integer counts, maxima, minima), so the order does not change any number.
        let work: @Sendable (Int) -> Void = { worker in
            let world = SessionWorld(config: config)
            var tallies = Array(repeating: StrategyTally(), count: config.strategies.count)
            var busy = 0.0
            while true {
                let shard = board.next.wrappingAdd(1, ordering: .relaxed).oldValue
                guard shard < shardCount else { break }
                let begin = SystemClocks.threadCPUSeconds()
                let sessions = Self.sessions(ofShard: shard, total: total)
                for index in sessions {
                    let plan = SessionPlan(index: index, seed: seed, population: config.population)
                    for k in config.strategies.indices {
                        world.play(plan, config.strategies[k], into: &tallies[k])
                    }
                }
                busy += SystemClocks.threadCPUSeconds() - begin
                let done = board.done.wrappingAdd(sessions.count, ordering: .relaxed).newValue
                progress?(done, total)
            }
            board.results.withLock { $0[worker] = WorkerResult(tallies: tallies, busySeconds: busy) }
        }
        if workers == 1 {
            work(0)
        } else {
            DispatchQueue.concurrentPerform(iterations: workers, execute: work)
        }
        let wall = (ContinuousClock.now - started).seconds
        var merged = Array(repeating: StrategyTally(), count: config.strategies.count)
        var busy = 0.0
        for result in board.results.withLock({ $0 }) {
            guard let result else { continue }
            busy += result.busySeconds
            for k in merged.indices { merged[k].merge(result.tallies[k]) }
        }
        let calls = merged.reduce(0) { $0 + $1.calls }
        let throughput = SimulationResult.Throughput(calls: calls, wallSeconds: wall, busySeconds: busy, threads: workers)
        return SimulationResult(seed: seed, sessions: total, population: config.population,
                                strategies: zip(config.strategies, merged).map { StrategyResult(strategy: $0, tally: $1) },
                                throughput: throughput)
    }

    /// Plays one session with one strategy and returns the engine's events (for timelines and the
    /// dashboard); the numbers are those of session `index` of a run with `seed`.
    public func events(session index: Int, seed: UInt64? = nil, strategy: Strategy) -> [EngineEvent] {
        let collector = EventCollector(forward: nil)
        let world = SessionWorld(config: config, events: collector)
        let plan = SessionPlan(index: index, seed: seed ?? config.seed, population: config.population)
        var tally = StrategyTally()
        world.play(plan, strategy, into: &tally)
        return collector.events
    }
}

/// What one strategy accumulated over sessions.
public struct StrategyTally: Sendable, Hashable {
    /// The sources in report order; the last is `none` (nothing to show).
    public static let sourceNames = ["network", "cache", "defaultAudience", "fallbackFile", "none"]

    public var sessions = 0
    /// Placements shown (a session showing two placements counts twice).
    public var displays = 0
    /// Displays of a variation of the audience the user belonged to at display time.
    public var targetingCorrect = 0
    /// Displays per source, in ``sourceNames`` order.
    public var sources = [0, 0, 0, 0, 0]
    /// From the moment a placement is needed to its call's end (a flow, or nothing to show).
    public var timeToFlow = DurationHistogram()
    /// Requests sent (targeted and default-audience).
    public var requests = 0
    /// Sum over sessions of the square of their request count (for the interval of the mean).
    public var requestsSquared = 0.0
    /// Engine calls started (getFlow, preloadFlows, getFlowOrDefault).
    public var calls = 0
    /// The same numbers per placement, in the population's placement order (grown as displays come).
    public var placements: [PlacementTally] = []

    /// A tally with nothing in it.
    public init() {}

    /// Adds another tally.
    public mutating func merge(_ o: StrategyTally) {
        sessions += o.sessions; displays += o.displays; targetingCorrect += o.targetingCorrect
        for i in sources.indices { sources[i] += o.sources[i] }
        timeToFlow.merge(o.timeToFlow)
        requests += o.requests; requestsSquared += o.requestsSquared; calls += o.calls
        while placements.count < o.placements.count { placements.append(PlacementTally()) }
        for i in o.placements.indices { placements[i].merge(o.placements[i]) }
    }
}

/// What one strategy accumulated for one placement: its displays, targeting and time to flow.
public struct PlacementTally: Sendable, Hashable {
    public var displays = 0
    public var targetingCorrect = 0
    /// Displays per source, in ``StrategyTally/sourceNames`` order.
    public var sources = [0, 0, 0, 0, 0]
    public var timeToFlow = DurationHistogram()

    /// A tally with nothing in it.
    public init() {}

    /// Adds another tally.
    public mutating func merge(_ o: PlacementTally) {
        displays += o.displays; targetingCorrect += o.targetingCorrect
        for i in sources.indices { sources[i] += o.sources[i] }
        timeToFlow.merge(o.timeToFlow)
    }
}

// MARK: sessions

/// One simulated session, drawn from its own random stream; the same for every strategy.
struct SessionPlan {
    struct Need { var placement: Int; var at: Double }
    var profileId: String
    var network: NetworkProfile
    var returning: Bool
    var attributed: Bool
    /// When the backend applies appleAds (0 for a returning attributed user; infinity for others).
    var attributionAt: Double
    var cacheAge: Double
    /// Placements needed, by time.
    var needs: [Need]
    /// Placements this kind of session may need (what an app preloads).
    var eligible: [Int]
    /// Seed of the network's per-request draws.
    var networkSeed: UInt64

    init(index: Int, seed: UInt64, population p: Population) {
        var r = SimulationRandom(seed: seed, stream: UInt64(index))
        profileId = "user-\(index)"
        let totalWeight = p.networks.reduce(0) { $0 + $1.weight }
        var pick = r.uniform() * totalWeight
        var chosen = p.networks[p.networks.count - 1].name
        for n in p.networks {
            if pick < n.weight, n.weight > 0 { chosen = n.name; break }
            pick -= n.weight
        }
        network = p.profiles[chosen] ?? NetworkProfile(median: 1, p95: 1)
        returning = r.chance(p.returningShare)
        attributed = r.chance(p.attributionShare)
        let delay = p.attributionDelay.sample(&r)
        attributionAt = attributed ? (returning ? 0 : engineSeconds(delay)) : .infinity
        cacheAge = engineSeconds(p.cacheAge.sample(&r))
        needs = []
        eligible = []
        for (i, placement) in p.placements.enumerated() {
            let wanted = r.chance(placement.share)
            let at = engineSeconds(placement.at.sample(&r))
            let fits = placement.sessions == .all || (placement.sessions == .new) == !returning
            guard fits else { continue }
            eligible.append(i)
            if wanted || placement.share >= 1 { needs.append(Need(placement: i, at: at)) }
        }
        needs.sort { $0.at < $1.at }
        networkSeed = r.next()
    }
}

/// A sampled time as the engine keeps it: whole microseconds (so the tallies' differences of times
/// are exact); infinity stays infinity.
private func engineSeconds(_ s: Double) -> Double { s.isFinite ? EngineTime(seconds: s).seconds : s }

/// Hands out shards and holds the workers' results.
private final class ShardBoard: Sendable {
    let next = Atomic<Int>(0)
    let done = Atomic<Int>(0)
    let results: Mutex<[WorkerResult?]>
    init(workers: Int) { results = Mutex(Array(repeating: nil, count: workers)) }
}

private struct WorkerResult: Sendable {
    var tallies: [StrategyTally]
    var busySeconds: Double
}

/// The flow cache's disk layer in a simulated session: nothing outlives the session, so it keeps
/// nothing (the memory layer in front of it serves every read).
final class NullDiskStore: FlowDiskStore {
    func load(_ key: CacheKey) -> [UInt8]? { nil }
    func save(_ key: CacheKey, _ bytes: [UInt8]) -> [Eviction] { [] }
    func remove(_ key: CacheKey) {}
    func removeAll(exceptProfile profileId: String) {}
    func save(_ key: CacheKey, entry: CachedFlow, encoded: () -> [UInt8]) -> [Eviction] { [] }  // no bytes needed
}

/// The simulated world of one thread: the backend, the network, the clock, and the app's calls. It
/// hosts one engine per session and plays sessions one after another.
final class SessionWorld: EngineHost {
    /// The audience attribution-targeted users get.
    static let targetedAudience = "Apple Ads"
    /// The attribution sources of a returning attributed user (one set, shared).
    private static let appleAds: Set<String> = ["appleAds"]

    private enum Due {
        case response(RequestID, Answer)
        case timer(TimerID)
        case attribution
        case op(Int)
    }
    /// What the backend answers a request (an index into the world's prepared answers, so that the
    /// queue moves no payloads around).
    private enum Answer {
        case targeted(Int), `default`(Int), notFound, reset, server
    }
    private enum Op {
        case getFlow(need: Int, FetchPolicy, loadTimeout: Double)
        case preload([String], loadTimeout: Double)
        case orDefault(need: Int, timeout: Double)
    }

    private let placements: [String]
    private let placementIndex: [String: Int]
    private let targetedAnswers: [RequestCompletion]
    private let defaultAnswers: [RequestCompletion]
    private let targetedPayloads: [AudiencePayload]
    private let defaultPayloads: [AudiencePayload]
    private let fallback: FallbackFile
    private let populationFallback: Bool
    /// Per placement (by index), the networks of its targeted and default-audience requests when the
    /// population gives them (fitted to recorded traffic); nil: the session's network.
    private let requestNetworks: [(targeted: NetworkProfile?, default: NetworkProfile?)]
    private let layouts = InMemoryLayoutStore()
    private let notFound = RequestCompletion(.failure(.http(status: 404)), bytes: 44)
    private let resetFailure = RequestCompletion(.failure(.transport(reason: "reset")))
    private let serverFailure = RequestCompletion(.failure(.http(status: 503)), bytes: 40)

    // Unchecked exclusivity: a world belongs to one worker thread, and no access to these outlives
    // the statement that makes it (the runtime's checks were ~5% of a simulated call).
    @exclusivity(unchecked) private var queue = EventQueue<Due>()
    @exclusivity(unchecked) private var network = SimulationRandom(seed: 0)
    @exclusivity(unchecked) private var plan: SessionPlan?
    @exclusivity(unchecked) private var engine: FlowEngine?
    @exclusivity(unchecked) private var ops: [Op] = []
    @exclusivity(unchecked) private var pending: [(call: CallID, need: Int)] = []
    @exclusivity(unchecked) private var starting: Int?
    @exclusivity(unchecked) private var results: [(at: Double, flow: Flow?)?] = []
    @exclusivity(unchecked) private var requests = 0
    @exclusivity(unchecked) private var calls = 0
    @exclusivity(unchecked) private var preloadIds: [String] = []
    @exclusivity(unchecked) private var sessionNetwork = NetworkProfile(median: 1, p95: 1)
    /// When the backend applies appleAds in this session (EngineTime.max: never).
    @exclusivity(unchecked) private var attributionAt = EngineTime.zero
    private let traces = SessionTraces()
    /// Where the engine's events go (nil: nowhere).
    private let events: EngineEventSink?

    init(config: SimulationConfig, events: EngineEventSink? = nil) {
        self.events = events
        placements = config.population.placements.map(\.id)
        placementIndex = Dictionary(placements.enumerated().map { ($1, $0) }, uniquingKeysWith: { a, _ in a })
        var targeted: [AudiencePayload] = [], all: [AudiencePayload] = []
        var fallbackPlacements: [String: AudiencePayload] = [:]
        for id in placements {
            targeted.append(AudiencePayload(placementId: id, audienceName: Self.targetedAudience, audienceVersionId: "\(id)-asa-1",
                                            variations: [Variation(id: "\(id)-asa-a", weight: 50, revision: 1),
                                                         Variation(id: "\(id)-asa-b", weight: 50, revision: 1)]))
            all.append(AudiencePayload(placementId: id, audienceName: defaultAudienceName, audienceVersionId: "\(id)-all-1",
                                       variations: [Variation(id: "\(id)-all-a", weight: 50, revision: 1),
                                                    Variation(id: "\(id)-all-b", weight: 50, revision: 1)]))
            fallbackPlacements[id] = AudiencePayload(placementId: id, audienceName: defaultAudienceName, audienceVersionId: "fallback",
                                                     variations: [Variation(id: "\(id)-fallback", weight: 100)])
        }
        targetedPayloads = targeted
        defaultPayloads = all
        targetedAnswers = targeted.map { RequestCompletion(.success(.audience($0)), bytes: 1_400) }
        defaultAnswers = all.map { RequestCompletion(.success(.audience($0)), bytes: 1_400) }
        fallback = FallbackFile(placements: fallbackPlacements)
        populationFallback = config.population.fallbackFile
        let byPlacement = config.population.requestNetworks
        requestNetworks = placements.map { (byPlacement[$0]?["targeted"], byPlacement[$0]?["default"]) }
    }

    /// Plays `plan` with `strategy` and adds what happened to `tally`.
    func play(_ plan: SessionPlan, _ strategy: Strategy, into tally: inout StrategyTally) {
        // The strategies of a session play one after another: the plan is copied in once per session.
        if self.plan?.networkSeed != plan.networkSeed || self.plan?.profileId != plan.profileId {
            self.plan = plan
            preloadIds = plan.eligible.map { placements[$0] }
        }
        sessionNetwork = plan.network
        attributionAt = EngineTime(seconds: plan.attributionAt)
        queue.reset()
        network = SimulationRandom(seed: plan.networkSeed)
        ops.clear()
        pending.clear()
        results.clear()
        for _ in plan.needs.indices { results.append(nil) }
        requests = 0
        calls = 0
        starting = nil

        let withFallback = strategy.fallbackFile ?? populationFallback
        traces.start(high: plan.networkSeed | 1)
        let configuration = FlowEngine.Configuration(requestTimeout: strategy.requestTimeout,
                                                     fallback: withFallback ? fallback : nil, activatedAt: 0)
        let profile = Profile(id: plan.profileId, appliedAttributionSources: plan.attributionAt == 0 ? Self.appleAds : [])
        // One engine per world, reset for each session: the same engine a new one would be (the
        // reset's tests check that), without building and freeing its tables every session.
        let engine: FlowEngine
        if let reused = self.engine {
            engine = reused
            engine.reset(profile: profile, configuration: configuration)
        } else {
            engine = FlowEngine(configuration: configuration, profile: profile, flowCache: FlowCache(disk: NullDiskStore()),
                                layouts: layouts, host: self, events: events,
                                traceIDs: { [traces] in traces.next() })
            self.engine = engine
        }
        // One client session per simulated session, derived from its seed (deterministic).
        engine.session = SessionID(seed: plan.networkSeed)

        if plan.returning {
            for (key, entry) in cacheAtStart(of: plan) {
                _ = engine.flowCache.write(key, entry, keepTargeted: false, measure: false)
            }
        }
        if plan.attributed, plan.attributionAt > 0 { queue.schedule(.attribution, at: EngineTime(seconds: plan.attributionAt)) }

        switch strategy.shape {
        case .atPaywall(let policy, let t, let moment):
            for (n, need) in plan.needs.enumerated() {
                schedule(.getFlow(need: n, policy, loadTimeout: t), at: moment == .needed ? need.at : 0)
            }
        case .preloadThenCache(let t, let policy):
            if !plan.eligible.isEmpty { schedule(.preload(preloadIds, loadTimeout: t), at: 0) }
            for (n, need) in plan.needs.enumerated() { schedule(.getFlow(need: n, policy, loadTimeout: t), at: need.at) }
        case .waitThenFetch(let delay, let policy, let t, let moment):
            for (n, need) in plan.needs.enumerated() {
                schedule(.getFlow(need: n, policy, loadTimeout: t), at: moment == .needed ? max(need.at, delay) : delay)
            }
        case .orDefault(let timeout):
            for (n, need) in plan.needs.enumerated() { schedule(.orDefault(need: n, timeout: timeout), at: need.at) }
        }

        while let due = queue.next() {
            let now = queue.now
            switch due {
            case .response(let rid, let answer):
                switch answer {
                case .targeted(let i): engine.response(rid, targetedAnswers[i], now: now)
                case .default(let i): engine.response(rid, defaultAnswers[i], now: now)
                case .notFound: engine.response(rid, notFound, now: now)
                case .reset: engine.response(rid, resetFailure, now: now)
                case .server: engine.response(rid, serverFailure, now: now)
                }
            case .timer(let tid): engine.timerFired(tid, now: now)
            case .attribution: engine.applyAttribution("appleAds", now: now)
            case .op(let k): perform(ops[k], now: now)
            }
        }

        tally.sessions += 1
        tally.requests += requests
        tally.requestsSquared += Double(requests * requests)
        tally.calls += calls
        while tally.placements.count < placements.count { tally.placements.append(PlacementTally()) }
        for (n, need) in plan.needs.enumerated() {
            tally.displays += 1
            tally.placements[need.placement].displays += 1
            // Every call ends (the engine bounds them all); a missing result would be nothing shown.
            let result = results[n] ?? (at: .infinity, flow: nil)
            let shownAt = max(need.at, result.at)
            let wait = max(0, result.at - need.at)
            tally.timeToFlow.add(wait, alsoTo: &tally.placements[need.placement].timeToFlow)
            let source: Int
            if let flow = result.flow {
                switch flow.source {
                case .network: source = 0
                case .cache: source = 1
                case .defaultAudience: source = 2
                case .fallbackFile: source = 3
                }
                let truth = plan.attributionAt <= shownAt ? Self.targetedAudience : defaultAudienceName
                if flow.audienceName == truth {
                    tally.targetingCorrect += 1
                    tally.placements[need.placement].targetingCorrect += 1
                }
            } else {
                source = 4
            }
            tally.sources[source] += 1
            tally.placements[need.placement].sources[source] += 1
        }
    }

    /// What a returning user's cache holds when the session starts: the same for every strategy
    /// of a session, so drawn once per session (the strategies play a session one after another).
    private var startCache: (session: UInt64, entries: [(CacheKey, CachedFlow)])?

    private func cacheAtStart(of plan: SessionPlan) -> [(CacheKey, CachedFlow)] {
        // The plan's network seed is drawn from the session's own stream: it names the session.
        if let startCache, startCache.session == plan.networkSeed { return startCache.entries }
        var entries: [(CacheKey, CachedFlow)] = []
        for (i, id) in placements.enumerated() {
            let payload = plan.attributionAt == 0 ? targetedPayloads[i] : defaultPayloads[i]
            guard let variation = VariationDraw.pick(payload, profileId: plan.profileId) else { continue }
            let flow = Flow(payload: payload, variation: variation, source: .cache, targetingLost: false)
            entries.append((CacheKey(profileId: plan.profileId, placementId: id),
                            CachedFlow(flow: flow, storedAt: .zero - EngineTime(seconds: plan.cacheAge), fromDefaultAudience: false)))
        }
        startCache = (plan.networkSeed, entries)
        return entries
    }

    private func schedule(_ op: Op, at: Double) {
        ops.append(op)
        queue.schedule(.op(ops.count - 1), at: EngineTime(seconds: at))
    }

    private func perform(_ op: Op, now: EngineTime) {
        guard let engine else { return }
        calls += 1
        switch op {
        case .getFlow(let need, let policy, let t):
            starting = need
            defer { starting = nil }
            do throws(FlowError) {
                let call = try engine.getFlow(placement: placements[plan?.needs[need].placement ?? 0], policy: policy, loadTimeout: t, now: now)
                if results[need] == nil { pending.append((call, need)) }
            } catch {
                results[need] = (now.seconds, nil)
            }
        case .preload(let ids, let t):
            _ = try? engine.preloadFlows(placements: ids, loadTimeout: t, now: now)
        case .orDefault(let need, let timeout):
            starting = need
            defer { starting = nil }
            do throws(FlowError) {
                let call = try engine.getFlowOrDefault(placement: placements[plan?.needs[need].placement ?? 0], timeout: timeout, now: now)
                if results[need] == nil { pending.append((call, need)) }
            } catch {
                results[need] = (now.seconds, nil)
            }
        }
    }

    // MARK: EngineHost

    func send(_ request: RequestID, _ spec: RequestSpec, origin: CallID) {
        requests += 1
        let now = queue.now
        // One lookup of the placement serves both the network and the answer.
        let index = spec.placement.flatMap(placementIndex(of:))
        var net = sessionNetwork
        if let i = index {
            switch spec.kind {
            case .targeted: if let n = requestNetworks[i].targeted { net = n }
            case .default: if let n = requestNetworks[i].default { net = n }
            default: break
            }
        }
        // Two draws per request whatever happens, so strategies stay on the same random stream.
        let u = network.uniform()
        let latency = net.latency.sample(&network)
        if u < net.hang { return }
        let answer: Answer
        if u < net.hang + net.reset {
            answer = .reset
        } else if u < net.hang + net.reset + net.http5xx {
            answer = .server
        } else if let i = index {
            switch spec.kind {
            case .targeted: answer = attributionAt <= now ? .targeted(i) : .default(i)
            case .default: answer = .default(i)
            default: answer = .notFound
            }
        } else {
            answer = .notFound
        }
        queue.schedule(.response(request, answer), at: now + EngineTime(seconds: latency))
    }

    /// The index of a placement: a scan of the few placements (the engine hands back the ids it was
    /// given, so equal ids are usually the same string and compare at once), then the table.
    private func placementIndex(of id: String) -> Int? {
        if placements.count <= 8 {
            for i in placements.indices where placements[i] == id { return i }
            return nil
        }
        return placementIndex[id]
    }

    func cancel(_ request: RequestID) {}  // the engine ignores answers to requests it no longer owns

    func schedule(_ timer: TimerID, at: EngineTime) { queue.schedule(.timer(timer), at: at) }

    func unschedule(_ timer: TimerID) {}  // the engine ignores timers it no longer owns

    func finished(_ call: CallID, _ outcome: CallOutcome, now: EngineTime) {
        let need: Int
        if let k = pending.firstIndex(where: { $0.call == call }) {
            need = pending.remove(at: k).need
        } else if let s = starting {
            need = s  // finished while starting (a cache hit): its id is not known yet
        } else {
            return  // a preload
        }
        if results[need] == nil { results[need] = (now.seconds, outcome.flow) }
    }
}

/// A session's trace ids: the session's seed and a counter from 1 (held by the engine's trace-id
/// closure, so that the closure needs no reference back to the world).
private final class SessionTraces {
    @exclusivity(unchecked) private var high: UInt64 = 1
    @exclusivity(unchecked) private var counter: UInt64 = 0

    func start(high: UInt64) { self.high = high; counter = 0 }

    func next() -> TraceID {
        counter += 1
        return TraceID(high: high, low: counter)
    }
}

extension Duration {
    var seconds: Double {
        let c = components
        return Double(c.seconds) + Double(c.attoseconds) * 1e-18
    }
}
