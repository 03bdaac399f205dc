import FlowFetch
import FlowJSON
import Foundation

/// A random quantity of the population: a fixed value, or a log-normal distribution given by its
/// median and 95th percentile (what people can estimate from a dashboard).
///
/// In JSON: a number (`0`) or `{ "median": 20, "p95": 120 }`.
public enum Distribution: Sendable, Hashable {
    case fixed(Double)
    /// Log-normal with the given median and 95th percentile (`p95 >= median > 0`).
    case logNormal(median: Double, p95: Double)

    /// z of the 95th percentile of the standard normal.
    static let z95 = 1.6448536269514722

    /// The largest value it can take, if bounded.
    public var upperBound: Double? {
        switch self {
        case .fixed(let v): v
        case .logNormal(let m, let p): m == p ? m : nil
        }
    }

    /// A draw, at most ``SecondsLimit/maxSeconds``: a log-normal's tail is unbounded (and overflows
    /// to infinity when p95 is many orders of magnitude above the median), so a larger draw counts
    /// as the limit.
    func sample(_ rng: inout SimulationRandom) -> Double {
        switch self {
        case .fixed(let v): return v
        case .logNormal(let m, let p):
            guard p > m else { return m }
            let sigma = (log(p) - log(m)) / Self.z95
            return min(m * exp(sigma * rng.normal()), SecondsLimit.maxSeconds)
        }
    }

    var json: JSONValue {
        switch self {
        case .fixed(let v): .number(v)
        case .logNormal(let m, let p): ["median": .number(m), "p95": .number(p)]
        }
    }
}

/// A network a session runs on: request latency (log-normal) and per-request failure probabilities.
public struct NetworkProfile: Sendable, Hashable {
    /// Median request latency, seconds.
    public var median: Double
    /// 95th-percentile request latency, seconds.
    public var p95: Double
    /// Probability that a request never answers.
    public var hang: Double
    /// Probability that the connection is reset (a transport error) after the latency.
    public var reset: Double
    /// Probability of an HTTP 5xx answer after the latency.
    public var http5xx: Double

    /// A profile; probabilities are per request and must sum to at most 1.
    public init(median: Double, p95: Double, hang: Double = 0, reset: Double = 0, http5xx: Double = 0) {
        self.median = median; self.p95 = p95; self.hang = hang; self.reset = reset; self.http5xx = http5xx
    }

    /// The built-in profiles, named after Apple's Network Link Conditioner presets.
    ///
    /// The presets give one-way delays and bandwidth: WiFi 1 ms / 40 Mbps, LTE 65 ms / 50 Mbps,
    /// 3G 100 ms / 780 kbps, Edge 400 ms down + 440 ms up / 240 kbps, Very Bad Network 500 ms each way
    /// / 1 Mbps with 10% packet loss. A flow request on a fresh connection costs about three round
    /// trips (TCP, TLS 1.3, the request) plus a few-KB body plus server time (~50 ms, and the path
    /// beyond the access link for WiFi); the median is that sum, the p95 about three times it
    /// (retransmissions, radio wake-up). Failure rates are assumptions, growing with the delay; `lossy`
    /// hangs on 10% of requests (the preset's 10% loss, where a lost request is never retried in time).
    public static let builtIn: [String: NetworkProfile] = [
        "wifi": NetworkProfile(median: 0.12, p95: 0.45, hang: 0.001, reset: 0.002, http5xx: 0.001),
        "lte": NetworkProfile(median: 0.45, p95: 1.4, hang: 0.005, reset: 0.01, http5xx: 0.002),
        "3g": NetworkProfile(median: 0.9, p95: 2.8, hang: 0.02, reset: 0.02, http5xx: 0.003),
        "edge": NetworkProfile(median: 2.8, p95: 8, hang: 0.05, reset: 0.04, http5xx: 0.003),
        "lossy": NetworkProfile(median: 3.5, p95: 12, hang: 0.10, reset: 0.05, http5xx: 0.005),
    ]

    /// The latency distribution.
    var latency: Distribution { .logNormal(median: median, p95: p95) }

    var json: JSONValue {
        ["median": .number(median), "p95": .number(p95), "hang": .number(hang), "reset": .number(reset),
         "http5xx": .number(http5xx)]
    }
}

/// Which sessions need a placement.
public enum SessionKind: String, Sendable, Hashable, CaseIterable {
    /// Every session.
    case all
    /// First sessions only (no cached flow): onboarding.
    case new
    /// Returning sessions only.
    case returning
}

/// A placement a session needs, and when.
public struct PlacementNeed: Sendable, Hashable {
    /// The placement id.
    public var id: String
    /// Seconds after launch when the app needs it.
    public var at: Distribution
    /// Share of (eligible) sessions that need it at all.
    public var share: Double
    /// Which sessions may need it.
    public var sessions: SessionKind
    /// A need; `share` 1 and every session by default.
    public init(id: String, at: Distribution, share: Double = 1, sessions: SessionKind = .all) {
        self.id = id; self.at = at; self.share = share; self.sessions = sessions
    }
}

/// The simulated market: networks, attribution, returning users, placements, fallback file.
public struct Population: Sendable, Hashable {
    /// Weighted mix of network profile names (weights need not sum to 1), in name order as decoded.
    public var networks: [(name: String, weight: Double)]
    /// Every profile the mix may name: the built-in ones plus the user's.
    public var profiles: [String: NetworkProfile]
    /// Share of users whose Apple Ads attribution will apply.
    public var attributionShare: Double
    /// Delay of the attribution after launch, for those users (first sessions).
    public var attributionDelay: Distribution
    /// Share of sessions that start with a cached flow for every placement.
    public var returningShare: Double
    /// Age of the cached flows of returning sessions, seconds.
    public var cacheAge: Distribution
    /// The placements sessions need.
    public var placements: [PlacementNeed]
    /// Whether the app ships a fallback file (one default-audience flow per placement).
    public var fallbackFile: Bool
    /// Per placement id and request kind (`targeted`, `default`), the network its requests see,
    /// overriding the session's network: what `simulate --from` fits to recorded traffic. Empty in
    /// configs.
    public var requestNetworks: [String: [String: NetworkProfile]] = [:]

    /// A population.
    public init(networks: [(name: String, weight: Double)], profiles: [String: NetworkProfile] = NetworkProfile.builtIn,
                attributionShare: Double, attributionDelay: Distribution, returningShare: Double, cacheAge: Distribution,
                placements: [PlacementNeed], fallbackFile: Bool) {
        self.networks = networks; self.profiles = profiles; self.attributionShare = attributionShare
        self.attributionDelay = attributionDelay; self.returningShare = returningShare; self.cacheAge = cacheAge
        self.placements = placements; self.fallbackFile = fallbackFile
    }

    /// The built-in population: a mixed mobile market (mostly WiFi and LTE, a weak-network tail),
    /// 30% Apple Ads users whose attribution lands about 1.5 s after launch, 40% returning sessions,
    /// onboarding at launch on first sessions and the main paywall later in 60% of sessions.
    public static let standard = Population(
        networks: [("3g", 0.1), ("edge", 0.05), ("lossy", 0.05), ("lte", 0.35), ("wifi", 0.45)],
        attributionShare: 0.3, attributionDelay: .logNormal(median: 1.5, p95: 6),
        returningShare: 0.4, cacheAge: .logNormal(median: 86_400, p95: 1_209_600),
        placements: [PlacementNeed(id: "onboarding", at: .fixed(0), sessions: .new),
                     PlacementNeed(id: "main_paywall", at: .logNormal(median: 20, p95: 120), share: 0.6)],
        fallbackFile: true)

    public static func == (a: Population, b: Population) -> Bool {
        a.networks.map(\.name) == b.networks.map(\.name) && a.networks.map(\.weight) == b.networks.map(\.weight)
            && a.profiles == b.profiles && a.attributionShare == b.attributionShare && a.attributionDelay == b.attributionDelay
            && a.returningShare == b.returningShare && a.cacheAge == b.cacheAge && a.placements == b.placements
            && a.fallbackFile == b.fallbackFile && a.requestNetworks == b.requestNetworks
    }

    public func hash(into h: inout Hasher) {
        for n in networks { h.combine(n.name); h.combine(n.weight) }
        h.combine(placements); h.combine(attributionShare); h.combine(returningShare)
    }
}

/// When a strategy calls getFlow.
public enum FetchMoment: String, Sendable, Hashable {
    /// When the placement is needed (not before the strategy's delay).
    case needed
    /// At launch (after the strategy's delay), for every placement the session needs; the result is
    /// kept until the placement is needed.
    case launch
}

/// How an app fetches its flows: one of the shapes of simulate.md.
public struct Strategy: Sendable, Hashable {
    /// The shapes.
    public enum Shape: Sendable, Hashable {
        /// getFlow when the placement is needed.
        case atPaywall(policy: FetchPolicy, loadTimeout: Double, at: FetchMoment)
        /// preloadFlows at launch, then getFlow with a cache-first policy when needed.
        case preloadThenCache(loadTimeout: Double, policy: FetchPolicy)
        /// Wait `delay` seconds after launch, then as atPaywall.
        case waitThenFetch(delay: Double, policy: FetchPolicy, loadTimeout: Double, at: FetchMoment)
        /// getFlowOrDefault with `timeout` (the attribution race).
        case orDefault(timeout: Double)

        /// The shape's key in the config: `atPaywall`, `preloadThenCache`, `waitThenFetch`, `orDefault`.
        public var kind: String {
            switch self {
            case .atPaywall: "atPaywall"
            case .preloadThenCache: "preloadThenCache"
            case .waitThenFetch: "waitThenFetch"
            case .orDefault: "orDefault"
            }
        }
    }

    /// The name rows and JSON use.
    public var name: String
    public var shape: Shape
    /// Overrides the population's fallbackFile (an app that ships none); nil keeps it.
    public var fallbackFile: Bool?
    /// The client's requestTimeout (requests without a loadTimeout: getFlowOrDefault's default fetch).
    public var requestTimeout: Double

    /// A strategy.
    public init(name: String, _ shape: Shape, fallbackFile: Bool? = nil, requestTimeout: Double = Budget.defaultRequestTimeout) {
        self.name = name; self.shape = shape; self.fallbackFile = fallbackFile; self.requestTimeout = requestTimeout
    }

    /// The longest a placement can wait for its flow under this strategy, whatever the network does
    /// (from docs/fetch-rules.md): T for getFlow (plus the wait when the delay is later than the need),
    /// and for getFlowOrDefault the later of its timer and the default fetch's requestTimeout.
    public func timeToFlowBound(neededAt: Double = 0) -> Double {
        func clamped(_ t: Double) -> Double { Budget.clampLoadTimeout(t) ?? t }
        switch shape {
        case .atPaywall(_, let t, _): return clamped(t)
        case .preloadThenCache(let t, _): return clamped(t)
        case .waitThenFetch(let d, _, let t, _): return max(d - neededAt, 0) + clamped(t)
        case .orDefault(let timeout): return max(timeout, requestTimeout)
        }
    }

    /// The default set: the seeds' advice and the naive approach they warn against.
    public static let standard: [Strategy] = [
        Strategy(name: "naive: getFlow at launch, no budget, no fallback",
                 .waitThenFetch(delay: 0, policy: .reloadRevalidatingCacheData, loadTimeout: 60, at: .launch), fallbackFile: false),
        Strategy(name: "atPaywall T=5", .atPaywall(policy: .reloadRevalidatingCacheData, loadTimeout: 5, at: .needed)),
        Strategy(name: "atPaywall cache-first T=3", .atPaywall(policy: .returnCacheDataElseLoad, loadTimeout: 3, at: .needed)),
        Strategy(name: "preload + cache-first T=5", .preloadThenCache(loadTimeout: 5, policy: .returnCacheDataElseLoad)),
        Strategy(name: "wait 1.5 s, cache-first T=5",
                 .waitThenFetch(delay: 1.5, policy: .returnCacheDataElseLoad, loadTimeout: 5, at: .needed)),
        Strategy(name: "orDefault 3 s", .orDefault(timeout: 3)),
        Strategy(name: "orDefault 3 s, requestTimeout 5", .orDefault(timeout: 3), requestTimeout: 5),
    ]
}

/// The `simulate` config section: the population, the strategies, and run defaults.
public struct SimulationConfig: Sendable, Hashable {
    public var population: Population
    public var strategies: [Strategy]
    /// Sessions to simulate when `--sessions` is not given.
    public var sessions: Int
    /// Seed when `--seed` is not given.
    public var seed: UInt64

    /// A config.
    public init(population: Population = .standard, strategies: [Strategy] = Strategy.standard, sessions: Int = 20_000, seed: UInt64 = 1) {
        self.population = population; self.strategies = strategies; self.sessions = sessions; self.seed = seed
    }

    /// The built-in config, used for an empty or absent `simulate` section.
    public static let standard = SimulationConfig()
}

// MARK: decoding

extension SimulationConfig {
    /// Reads the `simulate` config section. Absent keys take the built-in defaults (an empty section
    /// is ``standard``); unknown keys and wrong types are errors naming their JSON path.
    public static func decode(_ c: JSONCursor) throws(JSONInputError) -> SimulationConfig {
        let o = try c.object()
        try o.rejectUnknownKeys(allowed: ["population", "strategies", "sessions", "seed"])
        var config = SimulationConfig.standard
        if let s = o.optional("sessions") {
            config.sessions = try s.int()
            guard config.sessions >= 1 else { throw s.expected("a positive integer") }
        }
        if let s = o.optional("seed") {
            let v = try s.int()
            guard v >= 0 else { throw s.expected("a non-negative integer") }
            config.seed = UInt64(v)
        }
        if let p = o.optional("population") { config.population = try decodePopulation(p) }
        if let s = o.optional("strategies") {
            let list = try s.array()
            guard !list.isEmpty else { throw s.expected("at least one strategy") }
            var names = Set<String>()
            config.strategies = []
            for item in list {
                let strategy = try decodeStrategy(item)
                guard names.insert(strategy.name).inserted else {
                    throw JSONInputError(path: JSONPath.appending(key: "name", to: item.path),
                                         message: "duplicate strategy name \(JSONValue.string(strategy.name).jsonText)")
                }
                config.strategies.append(strategy)
            }
        }
        return config
    }

    /// Decodes a population (the shape of `simulate.population`); keys left out take the built-in
    /// population's values. Errors name the JSON path of `c`.
    public static func decodePopulation(_ c: JSONCursor) throws(JSONInputError) -> Population {
        let o = try c.object()
        try o.rejectUnknownKeys(allowed: ["networks", "profiles", "attribution", "returning", "placements", "fallbackFile"])
        var p = Population.standard
        if let pc = o.optional("profiles") {
            for (name, profile) in try pc.object().entries { p.profiles[name] = try decodeProfile(profile) }
        }
        if let n = o.optional("networks") {
            let entries = try n.object().entries
            guard !entries.isEmpty else { throw n.expected("at least one network") }
            p.networks = []
            for (name, w) in entries {
                guard p.profiles[name] != nil else {
                    throw w.error("unknown network profile \(JSONValue.string(name).jsonText) (built in: "
                                  + NetworkProfile.builtIn.keys.sorted().joined(separator: ", ") + "; or define it under profiles)")
                }
                let weight = try w.double()
                guard weight >= 0 else { throw w.expected("a weight >= 0") }
                p.networks.append((name, weight))
            }
            guard p.networks.contains(where: { $0.weight > 0 }) else { throw n.error("every weight is 0") }
        }
        if let a = o.optional("attribution") {
            let ao = try a.object()
            try ao.rejectUnknownKeys(allowed: ["share", "delay"])
            if let s = ao.optional("share") { p.attributionShare = try share(s) }
            if let d = ao.optional("delay") { p.attributionDelay = try decodeDistribution(d) }
        }
        if let r = o.optional("returning") {
            let ro = try r.object()
            try ro.rejectUnknownKeys(allowed: ["share", "cacheAge"])
            if let s = ro.optional("share") { p.returningShare = try share(s) }
            if let d = ro.optional("cacheAge") { p.cacheAge = try decodeDistribution(d) }
        }
        if let pl = o.optional("placements") {
            let list = try pl.array()
            guard !list.isEmpty else { throw pl.expected("at least one placement") }
            p.placements = []
            var seen = Set<String>()
            for item in list {
                let io = try item.object()
                try io.rejectUnknownKeys(allowed: ["id", "at", "share", "sessions"])
                let idCursor = try io.required("id")
                guard let id = Budget.normalizePlacement(try idCursor.string()) else { throw idCursor.expected("a non-empty placement id") }
                guard seen.insert(id).inserted else { throw idCursor.error("duplicate placement \(JSONValue.string(id).jsonText)") }
                var need = PlacementNeed(id: id, at: try decodeDistribution(try io.required("at")))
                if let s = io.optional("share") { need.share = try share(s) }
                if let s = io.optional("sessions") {
                    guard let kind = SessionKind(rawValue: try s.string()) else { throw s.expected("\"all\", \"new\" or \"returning\"") }
                    need.sessions = kind
                }
                p.placements.append(need)
            }
        }
        if let f = o.optional("fallbackFile") { p.fallbackFile = try f.bool() }
        return p
    }

    static func decodeProfile(_ c: JSONCursor) throws(JSONInputError) -> NetworkProfile {
        let o = try c.object()
        try o.rejectUnknownKeys(allowed: ["median", "p95", "hang", "reset", "http5xx"])
        let median = try o.required("median").positiveSeconds()
        let p95c = try o.required("p95")
        let p95 = try p95c.positiveSeconds()
        guard p95 >= median else { throw p95c.expected("a p95 >= the median (\(JSONValue.number(median).jsonText))") }
        var profile = NetworkProfile(median: median, p95: p95)
        if let h = o.optional("hang") { profile.hang = try share(h) }
        if let r = o.optional("reset") { profile.reset = try share(r) }
        if let x = o.optional("http5xx") { profile.http5xx = try share(x) }
        guard profile.hang + profile.reset + profile.http5xx <= 1 + 1e-12 else {
            throw c.error("hang + reset + http5xx must be at most 1")
        }
        return profile
    }

    /// A number of seconds from 0 to ``SecondsLimit/maxSeconds`` (fixed) or `{ "median": M, "p95": P }`
    /// (log-normal, `0 < M <= P <= SecondsLimit.maxSeconds`).
    static func decodeDistribution(_ c: JSONCursor) throws(JSONInputError) -> Distribution {
        if case .number = c.value { return .fixed(try c.seconds()) }
        guard case .object = c.value else { throw c.expected("a number of seconds or {\"median\": M, \"p95\": P}") }
        let o = try c.object()
        try o.rejectUnknownKeys(allowed: ["median", "p95"])
        let median = try o.required("median").positiveSeconds()
        let p95c = try o.required("p95")
        let p95 = try p95c.positiveSeconds()
        guard p95 >= median else { throw p95c.expected("a p95 >= the median (\(JSONValue.number(median).jsonText))") }
        return .logNormal(median: median, p95: p95)
    }

    static func decodeStrategy(_ c: JSONCursor) throws(JSONInputError) -> Strategy {
        let o = try c.object()
        let shapes = ["atPaywall", "preloadThenCache", "waitThenFetch", "orDefault"]
        try o.rejectUnknownKeys(allowed: Set(shapes + ["name", "fallbackFile", "requestTimeout"]))
        let name = try o.required("name").nonEmptyString()
        let present = shapes.filter { o.members[$0] != nil }
        guard present.count == 1, let key = present.first, let sc = o.optional(key) else {
            throw c.error(present.isEmpty ? "expected one of the keys " + shapes.joined(separator: ", ")
                          : "expected exactly one of " + shapes.joined(separator: ", ") + ", got " + present.joined(separator: ", "))
        }
        let so = try sc.object()
        func loadTimeout() throws(JSONInputError) -> Double {
            guard let t = so.optional("loadTimeout") else { return Budget.defaultLoadTimeout }
            return try t.seconds()
        }
        func policy(_ fallback: FetchPolicy) throws(JSONInputError) -> FetchPolicy {
            try so.optional("fetchPolicy").map { p throws(JSONInputError) in try decodePolicy(p) } ?? fallback
        }
        func moment() throws(JSONInputError) -> FetchMoment {
            guard let m = so.optional("fetchAt") else { return .needed }
            guard let v = FetchMoment(rawValue: try m.string()) else { throw m.expected("\"needed\" or \"launch\"") }
            return v
        }
        let shape: Strategy.Shape
        switch key {
        case "atPaywall":
            try so.rejectUnknownKeys(allowed: ["fetchPolicy", "loadTimeout", "fetchAt"])
            shape = .atPaywall(policy: try policy(.reloadRevalidatingCacheData), loadTimeout: try loadTimeout(), at: try moment())
        case "preloadThenCache":
            try so.rejectUnknownKeys(allowed: ["loadTimeout", "fetchPolicy"])
            shape = .preloadThenCache(loadTimeout: try loadTimeout(), policy: try policy(.returnCacheDataElseLoad))
        case "waitThenFetch":
            try so.rejectUnknownKeys(allowed: ["delay", "fetchPolicy", "loadTimeout", "fetchAt"])
            let delay = try so.required("delay").seconds()
            shape = .waitThenFetch(delay: delay, policy: try policy(.reloadRevalidatingCacheData), loadTimeout: try loadTimeout(),
                                   at: try moment())
        default:
            try so.rejectUnknownKeys(allowed: ["timeout"])
            shape = .orDefault(timeout: try so.required("timeout").seconds())
        }
        var strategy = Strategy(name: name, shape)
        if let f = o.optional("fallbackFile") { strategy.fallbackFile = try f.bool() }
        if let r = o.optional("requestTimeout") { strategy.requestTimeout = try r.positiveSeconds() }
        return strategy
    }

    /// `"reloadRevalidatingCacheData"`, `"returnCacheDataElseLoad"`, `"maxAge:SECONDS"` (as the CLI's
    /// --policy) or `{"returnCacheDataIfNotExpiredElseLoad": {"maxAge": N}}` (as scenarios); the maxAge
    /// from 0 to ``SecondsLimit/maxSeconds``.
    static func decodePolicy(_ c: JSONCursor) throws(JSONInputError) -> FetchPolicy {
        let expectation = "\"reloadRevalidatingCacheData\", \"returnCacheDataElseLoad\", \"maxAge:SECONDS\" or {\"returnCacheDataIfNotExpiredElseLoad\": {\"maxAge\": N}}"
        if case .string(let s) = c.value {
            switch s {
            case "reloadRevalidatingCacheData": return .reloadRevalidatingCacheData
            case "returnCacheDataElseLoad": return .returnCacheDataElseLoad
            default:
                if s.hasPrefix("maxAge:"), let v = SecondsLimit.decimal(s.dropFirst("maxAge:".count)), v >= 0 {
                    guard v <= SecondsLimit.maxSeconds else {
                        throw c.expected("\"maxAge:SECONDS\" with a number of seconds from 0 to \(SecondsLimit.maxText)")
                    }
                    return .returnCacheDataIfNotExpiredElseLoad(maxAge: v)
                }
            }
        } else if case .object = c.value {
            let o = try c.object()
            try o.rejectUnknownKeys(allowed: ["returnCacheDataIfNotExpiredElseLoad"])
            let inner = try o.required("returnCacheDataIfNotExpiredElseLoad").object()
            try inner.rejectUnknownKeys(allowed: ["maxAge"])
            return .returnCacheDataIfNotExpiredElseLoad(maxAge: try inner.required("maxAge").seconds())
        }
        throw c.expected(expectation)
    }

    private static func share(_ c: JSONCursor) throws(JSONInputError) -> Double {
        let v = try c.double()
        guard (0...1).contains(v) else { throw c.expected("a share between 0 and 1") }
        return v
    }
}

// MARK: encoding (reports echo their config)

extension FetchPolicy {
    /// The config form: `reloadRevalidatingCacheData`, `returnCacheDataElseLoad`, `maxAge:SECONDS`.
    var configText: String {
        switch self {
        case .reloadRevalidatingCacheData: "reloadRevalidatingCacheData"
        case .returnCacheDataElseLoad: "returnCacheDataElseLoad"
        case .returnCacheDataIfNotExpiredElseLoad(let m): "maxAge:" + JSONValue.number(m).jsonText
        }
    }
}

extension Strategy {
    /// The strategy as its config entry.
    public var json: JSONValue {
        var shapeJSON: [String: JSONValue]
        switch shape {
        case .atPaywall(let p, let t, let at):
            shapeJSON = ["fetchPolicy": .string(p.configText), "loadTimeout": .number(t), "fetchAt": .string(at.rawValue)]
        case .preloadThenCache(let t, let p):
            shapeJSON = ["loadTimeout": .number(t), "fetchPolicy": .string(p.configText)]
        case .waitThenFetch(let d, let p, let t, let at):
            shapeJSON = ["delay": .number(d), "fetchPolicy": .string(p.configText), "loadTimeout": .number(t),
                         "fetchAt": .string(at.rawValue)]
        case .orDefault(let timeout):
            shapeJSON = ["timeout": .number(timeout)]
        }
        var o: [String: JSONValue] = ["name": .string(name), shape.kind: .object(shapeJSON), "requestTimeout": .number(requestTimeout)]
        if let f = fallbackFile { o["fallbackFile"] = .bool(f) }
        return .object(o)
    }
}

extension Population {
    /// The population as its config entry.
    public var json: JSONValue {
        var nets: [String: JSONValue] = [:]
        for n in networks { nets[n.name] = .number(n.weight) }
        var used: [String: JSONValue] = [:]
        for n in networks { if let p = profiles[n.name] { used[n.name] = p.json } }
        var out: [String: JSONValue] = [
            "networks": .object(nets), "profiles": .object(used),
            "attribution": ["share": .number(attributionShare), "delay": attributionDelay.json],
            "returning": ["share": .number(returningShare), "cacheAge": cacheAge.json],
            "placements": .array(placements.map { p in
                ["id": .string(p.id), "at": p.at.json, "share": .number(p.share), "sessions": .string(p.sessions.rawValue)]
            }),
            "fallbackFile": .bool(fallbackFile),
        ]
        if !requestNetworks.isEmpty {
            out["requestNetworks"] = .object(requestNetworks.mapValues { kinds in .object(kinds.mapValues(\.json)) })
        }
        return .object(out)
    }
}
