import FlowFetch
import Foundation
import Synchronization

/// Live demo traffic: simulated app sessions that really call FlowClient against the sandbox backend,
/// in real time, so a dashboard has something to show on first run. Sessions mix networks (good to
/// lossy), attribution (some users get Apple Ads attribution after a delay), returning users with
/// cached flows, and the calling patterns of the seeds (getFlow, preload then cache, the attribution
/// race, layouts). With a population, sessions are drawn from it instead (``init(population:sessionsPerSecond:events:maxConcurrent:engine:)``).
public final class DemoTraffic: Sendable {
    /// One network a demo session may be on.
    struct Network: Sendable {
        var name: String
        var latency: ClosedRange<Double>
        var hang: Double, reset: Double, serverError: Double
    }
    static let networks: [(weight: Double, network: Network)] = [
        (0.45, Network(name: "wifi", latency: 0.03...0.15, hang: 0, reset: 0, serverError: 0.005)),
        (0.30, Network(name: "lte", latency: 0.08...0.45, hang: 0.01, reset: 0.01, serverError: 0.01)),
        (0.15, Network(name: "3g", latency: 0.4...1.8, hang: 0.03, reset: 0.02, serverError: 0.01)),
        (0.10, Network(name: "lossy", latency: 0.8...3.5, hang: 0.12, reset: 0.08, serverError: 0.05)),
    ]

    private let scenario: Scenario
    /// Where sessions are drawn from; nil: the scenario demo's own mix.
    private let population: Population?
    private let sessionsPerSecond: Double
    private let events: EngineEventSink
    private let maxConcurrent: Int
    private let task = Mutex<Task<Void, Never>?>(nil)
    private let stores: ReturningUsers
    /// The engine settings every session's client gets.
    public let engine: Engine
    /// The fallback file of every session: the engine's when it has one, else the scenario's.
    private let fallback: FallbackFile?

    /// The engine settings of the demo sessions' clients (the config's `engine` section).
    public struct Engine: Sendable {
        /// Each client's `FlowEngine.Configuration.requestTimeout`, in seconds.
        public var requestTimeout: Double
        /// Replaces the scenario's fallback flows when set.
        public var fallback: FallbackFile?
        /// Where the returning users' flow cache (`flows/`) and layout cache (`layouts/`) live on disk;
        /// nil keeps them in memory (lost when the traffic ends).
        public var cacheDirectory: String?
        /// The disk flow cache's size cap (least-recently-used eviction over all returning users).
        public var cacheMaxBytes: Int

        public init(requestTimeout: Double = 10, fallback: FallbackFile? = nil, cacheDirectory: String? = nil,
                    cacheMaxBytes: Int = 20 * 1024 * 1024) {
            self.requestTimeout = requestTimeout
            self.fallback = fallback
            self.cacheDirectory = cacheDirectory
            self.cacheMaxBytes = cacheMaxBytes
        }
    }

    /// Demo traffic over `scenario`'s backend and fallback file, starting `sessionsPerSecond` sessions a
    /// second (at most `maxConcurrent` at once), reporting to `events`. `engine` configures the
    /// sessions' clients; with a cache directory, the returning users' caches are opened there
    /// (created if needed; entries already there are found), which throws when it cannot be.
    public convenience init(scenario: Scenario, sessionsPerSecond: Double, events: EngineEventSink, maxConcurrent: Int = 40,
                            engine: Engine = Engine()) throws(FileStoreError) {
        try self.init(scenario: scenario, population: nil, sessionsPerSecond: sessionsPerSecond, events: events,
                      maxConcurrent: maxConcurrent, engine: engine)
    }

    /// Demo traffic whose sessions are drawn from `population` (as the strategy lab draws them: the
    /// network, attribution, returning share, and the placements each session needs and when) against
    /// the population's backend (``Population/demoScenario``).
    public convenience init(population: Population, sessionsPerSecond: Double, events: EngineEventSink, maxConcurrent: Int = 40,
                            engine: Engine = Engine()) throws(FileStoreError) {
        try self.init(scenario: population.demoScenario, population: population, sessionsPerSecond: sessionsPerSecond,
                      events: events, maxConcurrent: maxConcurrent, engine: engine)
    }

    private init(scenario: Scenario, population: Population?, sessionsPerSecond: Double, events: EngineEventSink,
                 maxConcurrent: Int, engine: Engine) throws(FileStoreError) {
        self.scenario = scenario
        self.population = population
        self.sessionsPerSecond = max(sessionsPerSecond, 0.1)
        self.events = events
        self.maxConcurrent = maxConcurrent
        self.engine = engine
        self.fallback = engine.fallback ?? ScenarioRunner.fallbackFile(scenario)
        if let directory = engine.cacheDirectory {
            self.stores = try ReturningUsers(directory: directory, maxBytes: engine.cacheMaxBytes,
                                             placements: scenario.backend.keys.sorted())
        } else {
            self.stores = ReturningUsers()
        }
    }

    /// Starts the traffic (idempotent).
    public func start(seed: UInt64 = UInt64(Date().timeIntervalSince1970)) {
        task.withLock { current in
            guard current == nil else { return }
            current = Task.detached { [self] in await self.loop(seed: seed) }
        }
    }

    /// Stops starting sessions and cancels the ones running.
    public func stop() {
        task.withLock { $0?.cancel(); $0 = nil }
    }

    private func loop(seed: UInt64) async {
        var rng = SeededIDs(seed: seed)
        let running = SessionCount()
        await withTaskGroup(of: Void.self) { group in
            var n = 0
            while !Task.isCancelled {
                if running.value.load(ordering: .relaxed) < maxConcurrent {
                    n += 1
                    let sessionSeed = rng.next()
                    let index = n
                    running.value.add(1, ordering: .relaxed)
                    group.addTask { [self] in
                        await self.session(index: index, seed: sessionSeed)
                        running.value.subtract(1, ordering: .relaxed)
                    }
                }
                try? await Task.sleep(for: .seconds(1 / sessionsPerSecond))
            }
            group.cancelAll()
        }
    }

    /// One app session: launch, maybe attribution, the calls of one of the seeds' patterns.
    func session(index: Int, seed: UInt64) async {
        if let population {
            await populationSession(population, index: index, seed: seed)
            return
        }
        var rng = SeededIDs(seed: seed)
        func uniform() -> Double { Double(rng.next() >> 11) / Double(1 << 53) }
        let network = pick(Self.networks, uniform())
        let latency = network.latency.lowerBound + (network.latency.upperBound - network.latency.lowerBound) * uniform()
        var rules: [NetworkRule] = []
        // Each request draws its fate through `nth` rules laid out for the first few requests.
        for nth in 1...12 {
            let u = uniform()
            if u < network.hang { rules.append(NetworkRule(nth: nth, fail: .hang)) }
            else if u < network.hang + network.reset { rules.append(NetworkRule(nth: nth, latency: latency * 0.5, fail: .reset)) }
            else if u < network.hang + network.reset + network.serverError { rules.append(NetworkRule(nth: nth, latency: latency, fail: .http(503))) }
            else { rules.append(NetworkRule(nth: nth, latency: latency * (0.6 + 0.8 * uniform()))) }
        }
        // A pool of returning users keeps cache states realistic: their flows are cached from earlier sessions.
        let returning = uniform() < 0.4
        let userID = returning ? "demo-user-\(Int(uniform() * 40))" : "demo-new-\(index)"
        let attributedAt: Double? = uniform() < 0.3 ? 0.3 + 3.5 * uniform() : nil
        let (client, attribution) = start(user: userID, returning: returning, attributedAt: attributedAt,
                                          network: NetworkRules(latency: latency, rules: rules))
        defer { attribution?.cancel() }
        let placements = scenario.backend.keys.sorted()
        guard !placements.isEmpty else { return }
        let pattern = uniform()
        do {
            if pattern < 0.35 {
                let flow = try await client.getFlow(placementId: placements[Int(uniform() * Double(placements.count))],
                                                    loadTimeout: [3, 4, 5][Int(uniform() * 3)])
                if flow.layout != nil, uniform() < 0.7 {
                    _ = try await client.getFlowConfiguration(forFlow: flow, assetsResolver: { $0 == "logo" ? URL(fileURLWithPath: "/logo.png") : nil })
                }
            } else if pattern < 0.65 {
                try? await client.preloadFlows(placementIds: placements, loadTimeout: 4)
                try await Task.sleep(for: .seconds(0.5 + 2 * uniform()))
                _ = try await client.getFlow(placementId: "main_paywall", fetchPolicy: .returnCacheDataElseLoad, loadTimeout: 3)
            } else if pattern < 0.85 {
                _ = try await client.getFlowOrDefault(placementId: "main_paywall", timeout: 2)
            } else {
                _ = try await client.getFlowForDefaultAudience(placementId: placements[Int(uniform() * Double(placements.count))])
                _ = try await client.getFlow(placementId: "main_paywall",
                                             fetchPolicy: .returnCacheDataIfNotExpiredElseLoad(maxAge: 600), loadTimeout: 5)
            }
        } catch {
            // Errors are what the demo shows; they are already in the events.
        }
    }

    /// A session drawn from the population: its network (each request's latency log-normal, and its
    /// hang, reset and 5xx shares), whether it is a returning user's, its attribution and delay, and
    /// the placements it needs and when; each needed placement is fetched at its time in one of the
    /// demo's calling patterns.
    func populationSession(_ population: Population, index: Int, seed: UInt64) async {
        let plan = SessionPlan(index: index, seed: seed, population: population)
        var rng = SimulationRandom(seed: plan.networkSeed)
        let network = plan.network
        var rules: [NetworkRule] = []
        for nth in 1...12 {
            let u = rng.uniform()
            let latency = network.latency.sample(&rng)
            if u < network.hang { rules.append(NetworkRule(nth: nth, fail: .hang)) }
            else if u < network.hang + network.reset { rules.append(NetworkRule(nth: nth, latency: latency, fail: .reset)) }
            else if u < network.hang + network.reset + network.http5xx { rules.append(NetworkRule(nth: nth, latency: latency, fail: .http(503))) }
            else { rules.append(NetworkRule(nth: nth, latency: latency)) }
        }
        let userID = plan.returning ? "demo-user-\(Int(rng.uniform() * 40))" : "demo-new-\(index)"
        let attributedAt: Double? = plan.attributionAt.isFinite ? plan.attributionAt : nil
        let (client, attribution) = start(user: userID, returning: plan.returning, attributedAt: attributedAt,
                                          network: NetworkRules(latency: network.median, rules: rules))
        defer { attribution?.cancel() }
        let ids = population.placements.map(\.id)
        let needs = plan.needs.map { (id: ids[$0.placement], at: $0.at) }
        guard !needs.isEmpty else { return }
        let launch = ContinuousClock.now
        let pattern = rng.uniform()
        let loadTimeout = [3.0, 4, 5][Int(rng.uniform() * 3)]
        if pattern >= 0.35, pattern < 0.65 {
            // Preload at launch what this kind of session may need, then read the cache first.
            try? await client.preloadFlows(placementIds: plan.eligible.map { ids[$0] }, loadTimeout: 4)
        }
        await withTaskGroup(of: Void.self) { group in
            for need in needs {
                group.addTask {
                    try? await Task.sleep(until: launch + .seconds(need.at), clock: .continuous)
                    guard !Task.isCancelled else { return }
                    // Errors are what the demo shows; they are already in the events.
                    if pattern < 0.35 {
                        _ = try? await client.getFlow(placementId: need.id, loadTimeout: loadTimeout)
                    } else if pattern < 0.65 {
                        _ = try? await client.getFlow(placementId: need.id, fetchPolicy: .returnCacheDataElseLoad, loadTimeout: 3)
                    } else if pattern < 0.85 {
                        _ = try? await client.getFlowOrDefault(placementId: need.id, timeout: 2)
                    } else {
                        _ = try? await client.getFlow(placementId: need.id, fetchPolicy: .returnCacheDataIfNotExpiredElseLoad(maxAge: 600),
                                                      loadTimeout: 5)
                    }
                }
            }
        }
    }

    /// A session's client against its own sandbox backend (`network`), and the task that applies the
    /// user's Apple Ads attribution `attributedAt` seconds in (cancel it when the session ends).
    /// Returning users' caches outlive the session (on disk with a cache directory); a new user's
    /// session starts from empty caches that end with it.
    private func start(user: String, returning: Bool, attributedAt: Double?,
                       network: NetworkRules) -> (FlowClient, Task<Void, Never>?) {
        let profile = ScenarioProfile(id: user, attribution: attributedAt.map { ["appleAds": $0] } ?? [:])
        let backend = LiveSandboxBackend(SandboxBackend(placements: scenario.backend, network: network, profiles: [profile]))
        let configuration = FlowEngine.Configuration(requestTimeout: engine.requestTimeout, fallback: fallback)
        let client = returning
            ? FlowClient(profile: Profile(id: user), backend: backend, configuration: configuration,
                         disk: stores.disk(for: user), layouts: stores.layouts(), events: events)
            : FlowClient(profile: Profile(id: user), backend: backend, configuration: configuration, events: events)
        let attribution: Task<Void, Never>? = attributedAt.map { at in
            Task {
                try? await Task.sleep(for: .seconds(at))
                if !Task.isCancelled { client.attributionApplied(source: "appleAds") }
            }
        }
        return (client, attribution)
    }

    private func pick(_ options: [(weight: Double, network: Network)], _ u: Double) -> Network {
        var acc = 0.0
        for o in options {
            acc += o.weight
            if u < acc { return o.network }
        }
        return options[options.count - 1].network
    }
}

/// The caches of returning demo users, kept across their sessions: in memory, or in files under a
/// cache directory (`flows/`: one flow store for all of them, capped; `layouts/`: the layouts they
/// loaded), where a later run finds them.
final class ReturningUsers: Sendable {
    private let stores = Mutex<[String: SharedDisk]>([:])
    private let files: (flows: SharedFileFlowStore, layouts: SharedLayoutStore, placements: [String])?

    /// In memory.
    init() { files = nil }

    /// On disk under `directory`; the flow store holds at most `maxBytes`. `placements`: those a
    /// session may cache (what a user's `removeAll(exceptProfile:)` removes).
    init(directory: String, maxBytes: Int, placements: [String]) throws(FileStoreError) {
        files = (SharedFileFlowStore(try FileFlowStore(directory: directory + "/flows", maxBytes: maxBytes)),
                 SharedLayoutStore(try FileLayoutStore(directory: directory + "/layouts")), placements)
    }

    func disk(for user: String) -> FlowDiskStore {
        if let files { return UserFlowStore(user: user, placements: files.placements, shared: files.flows) }
        return stores.withLock { all in
            if all.count > 200 { all.removeAll() }
            if let d = all[user] { return d }
            let d = SharedDisk()
            all[user] = d
            return d
        }
    }

    /// The layout store of a returning user's session: the shared file store, or a fresh one in memory.
    func layouts() -> LayoutStore {
        files?.layouts ?? InMemoryLayoutStore()
    }
}

/// One file flow store that the sessions of every returning demo user use, one call at a time.
final class SharedFileFlowStore: Sendable {
    let store: Mutex<FileFlowStore>
    init(_ store: sending FileFlowStore) { self.store = Mutex(store) }
}

/// A returning user's view of the shared file flow store: the entries are keyed by profile, so every
/// user's stay apart; "every other profile" of `removeAll(exceptProfile:)` is this device's user.
final class UserFlowStore: FlowDiskStore, Sendable {
    let user: String
    let placements: [String]
    let shared: SharedFileFlowStore
    init(user: String, placements: [String], shared: SharedFileFlowStore) {
        self.user = user
        self.placements = placements
        self.shared = shared
    }
    func load(_ key: CacheKey) -> [UInt8]? { shared.store.withLock { $0.load(key) } }
    func touch(_ key: CacheKey) { shared.store.withLock { $0.touch(key) } }
    func save(_ key: CacheKey, _ bytes: [UInt8]) -> [Eviction] { shared.store.withLock { $0.save(key, bytes) } }
    func remove(_ key: CacheKey) { shared.store.withLock { $0.remove(key) } }
    func removeAll(exceptProfile profileId: String) {
        guard profileId != user else { return }
        shared.store.withLock { store in
            for placement in placements { store.remove(CacheKey(profileId: user, placementId: placement)) }
        }
    }
}

/// A file layout store shared by the sessions of the returning demo users.
final class SharedLayoutStore: LayoutStore, Sendable {
    private let store: Mutex<FileLayoutStore>
    init(_ store: sending FileLayoutStore) { self.store = Mutex(store) }
    func read(_ ref: LayoutRef) -> Layout? { store.withLock { $0.read(ref) } }
    func write(_ layout: Layout) { store.withLock { $0.write(layout) } }
}

/// An in-memory disk layer that several sessions of one demo user may open, one after another.
final class SharedDisk: FlowDiskStore, Sendable {
    private let store = Mutex(InMemoryDiskStore())
    func load(_ key: CacheKey) -> [UInt8]? { store.withLock { $0.load(key) } }
    func save(_ key: CacheKey, _ bytes: [UInt8]) -> [Eviction] { store.withLock { $0.save(key, bytes) } }
    func remove(_ key: CacheKey) { store.withLock { $0.remove(key) } }
    func removeAll(exceptProfile profileId: String) { store.withLock { $0.removeAll(exceptProfile: profileId) } }
}

/// Sessions in flight.
final class SessionCount: Sendable {
    let value = Atomic<Int>(0)
}
