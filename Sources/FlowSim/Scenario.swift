import FlowFetch
import FlowJSON

/// A scenario file (scenario-format.md): a backend, a network, a starting cache, calls at given
/// times, and what must come out.
public struct Scenario: Sendable {
    public init(name: String, file: String? = nil, profile: ScenarioProfile, backend: [String: PlacementBackend],
                network: NetworkRules = NetworkRules(), cache: [CacheSeed] = [], fallbackFile: [String: FallbackSeed] = [:],
                requestTimeout: Double = Budget.defaultRequestTimeout, steps: [Step], expect: [Expectation] = []) {
        self.name = name; self.file = file; self.profile = profile; self.backend = backend; self.network = network
        self.cache = cache; self.fallbackFile = fallbackFile; self.requestTimeout = requestTimeout; self.steps = steps
        self.expect = expect
    }

    public var name: String
    public var file: String?
    public var profile: ScenarioProfile
    public var backend: [String: PlacementBackend]
    public var network: NetworkRules
    public var cache: [CacheSeed]
    public var fallbackFile: [String: FallbackSeed]
    public var requestTimeout: Double
    /// The flow cache's size cap (`client.cacheMaxBytes`; default 20 MiB).
    public var cacheMaxBytes: Int = 20 * 1024 * 1024
    public var steps: [Step]
    public var expect: [Expectation]
}

/// A profile and when each attribution source applies to it (engine seconds; absent: never).
public struct ScenarioProfile: Sendable, Hashable {
    public init(id: String, attribution: [String: Double] = [:]) { self.id = id; self.attribution = attribution }

    public var id: String
    public var attribution: [String: Double]
}

/// An audience of a placement on the scenario backend.
public struct AudienceDefinition: Sendable, Hashable {
    public init(name: String, versionId: String, requiresAttribution: String? = nil, variations: [Variation]) {
        self.name = name; self.versionId = versionId; self.requiresAttribution = requiresAttribution; self.variations = variations
    }

    public var name: String
    public var versionId: String
    /// The attribution source the profile must have for this audience to match; nil: always matches.
    public var requiresAttribution: String?
    public var variations: [Variation]
}

/// A layout on the scenario backend, described by its image count.
public struct LayoutDefinition: Sendable, Hashable {
    public init(id: String, version: Int, images: Int = 0, customMedia: [String] = [], imageBytes: Int = 24_000) {
        self.id = id; self.version = version; self.images = images; self.customMedia = customMedia; self.imageBytes = imageBytes
    }

    public var id: String
    public var version: Int
    public var images: Int
    public var customMedia: [String]
    public var imageBytes: Int

    /// The most images a scenario layout may have: every image is built and prefetched in memory.
    public static let maxImages = 10_000
    /// The largest image a scenario may give, in bytes (100 MB): `flowscope stub-backend` really
    /// sends it, and the prefetch totals stay far inside `Int`.
    public static let maxImageBytes = 100_000_000

    /// The layout the backend serves: `images` images, the first ones carrying the custom media ids.
    public var layout: Layout {
        Layout(id: id, version: version, screens: ["main"],
               images: (0..<images).map { i in
                   LayoutImage(url: "https://assets.invalid/\(id)/\(version)/\(i + 1).png",
                               customMediaId: i < customMedia.count ? customMedia[i] : nil, preview: "iVBORw0KGgo=")
               })
    }
}

/// One placement on the scenario backend.
public struct PlacementBackend: Sendable, Hashable {
    public init(audiences: [AudienceDefinition], layout: LayoutDefinition? = nil) { self.audiences = audiences; self.layout = layout }

    /// First match wins; All Users last.
    public var audiences: [AudienceDefinition]
    public var layout: LayoutDefinition?
}

/// Network behaviour: a default latency and rules (first match wins).
public struct NetworkRules: Sendable, Hashable {
    public init(latency: Double = 0, rules: [NetworkRule] = []) { self.latency = latency; self.rules = rules }

    public var latency: Double
    public var rules: [NetworkRule]
}

/// One network rule: which requests it matches and what happens to them.
public struct NetworkRule: Sendable, Hashable {
    public init(placement: String? = nil, kind: RequestKind? = nil, nth: Int? = nil, latency: Double? = nil, fail: Failure? = nil) {
        self.placement = placement; self.kind = kind; self.nth = nth; self.latency = latency; self.fail = fail
    }

    public var placement: String?
    public var kind: RequestKind?
    public var nth: Int?
    public var latency: Double?
    public var fail: Failure?

    /// What a matched request does instead of succeeding.
    public enum Failure: Sendable, Hashable {
        case hang, reset, http(Int), malformed
        /// A 200 whose body trickles in a byte at a time (`drip`): it never completes within a fetch
        /// budget, so in virtual time it behaves as a hang; the stub backend really drips it.
        case drip
    }
}

/// A cache entry present at t = 0.
public struct CacheSeed: Sendable, Hashable {
    public init(placement: String, variation: String, audience: String = defaultAudienceName, age: Double = 0,
                fromDefaultAudience: Bool = false, corrupt: Bool = false) {
        self.placement = placement; self.variation = variation; self.audience = audience; self.age = age
        self.fromDefaultAudience = fromDefaultAudience; self.corrupt = corrupt
    }

    public var placement: String
    public var variation: String
    public var audience: String
    public var age: Double
    public var fromDefaultAudience: Bool
    /// Stored with a broken checksum (a torn write), to exercise `cache.corrupt`.
    public var corrupt: Bool
}

/// A bundled fallback flow for a placement.
public struct FallbackSeed: Sendable, Hashable {
    public init(variation: String, includesLayout: Bool = false) { self.variation = variation; self.includesLayout = includesLayout }

    public var variation: String
    /// Whether the fallback file also carries the placement's layout.
    public var includesLayout: Bool
}

/// A call at a given time.
public struct Step: Sendable {
    public init(at: Double, call: Call) { self.at = at; self.call = call }

    public var at: Double
    public var call: Call

    /// The calls a scenario can make.
    public enum Call: Sendable {
        case getFlow(placement: String, policy: FetchPolicy?, loadTimeout: Double?)
        case getFlowForDefaultAudience(placement: String, policy: FetchPolicy?)
        case preloadFlows(placements: [String], loadTimeout: Double?)
        case preloadFlowsForDefaultAudience(placements: [String])
        case getFlowOrDefault(placement: String, timeout: Double)
        case getFlowConfiguration(placement: String, loadTimeout: Double?, bundled: [String])
        case identify(ScenarioProfile)
        case restart
        /// Cancels the call made by step `step` (the caller's task is cancelled).
        case cancel(step: Int)

        /// The call's name as results write it.
        public var name: String {
            switch self {
            case .getFlow: "getFlow"
            case .getFlowForDefaultAudience: "getFlowForDefaultAudience"
            case .preloadFlows: "preloadFlows"
            case .preloadFlowsForDefaultAudience: "preloadFlowsForDefaultAudience"
            case .getFlowOrDefault: "getFlowOrDefault"
            case .getFlowConfiguration: "getFlowConfiguration"
            case .identify: "identify"
            case .restart: "restart"
            case .cancel: "cancel"
            }
        }
    }
}

/// What a step must produce.
public struct Expectation: Sendable {
    public init(step: Int) { self.step = step; self.path = "$" }

    public var step: Int
    public var path: String
    public var outcome: String?
    public var source: String?
    public var variation: String?
    public var audience: String?
    public var targetingLost: Bool?
    public var completedAt: Double?
    public var errorCode: Int?
    public var preloadErrors: [String: Int]?
    public var requests: Int?
}

