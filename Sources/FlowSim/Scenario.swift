import FlowFetch
import FlowJSON

/// A scenario file (scenario-format.md): a backend, a network, a starting cache, calls at given
/// times, and what must come out.
public struct Scenario: Sendable {
    public var name: String
    public var file: String?
    public var profile: ScenarioProfile
    public var backend: [String: PlacementBackend]
    public var network: NetworkRules
    public var cache: [CacheSeed]
    public var fallbackFile: [String: FallbackSeed]
    public var requestTimeout: Double
    public var steps: [Step]
    public var expect: [Expectation]
}

/// A profile and when each attribution source applies to it (engine seconds; absent: never).
public struct ScenarioProfile: Sendable, Hashable {
    public var id: String
    public var attribution: [String: Double]
}

/// An audience of a placement on the scenario backend.
public struct AudienceDefinition: Sendable, Hashable {
    public var name: String
    public var versionId: String
    /// The attribution source the profile must have for this audience to match; nil: always matches.
    public var requiresAttribution: String?
    public var variations: [Variation]
}

/// A layout on the scenario backend, described by its image count.
public struct LayoutDefinition: Sendable, Hashable {
    public var id: String
    public var version: Int
    public var images: Int
    public var customMedia: [String]
    public var imageBytes: Int

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
    /// First match wins; All Users last.
    public var audiences: [AudienceDefinition]
    public var layout: LayoutDefinition?
}

/// Network behaviour: a default latency and rules (first match wins).
public struct NetworkRules: Sendable, Hashable {
    public var latency: Double
    public var rules: [NetworkRule]
}

/// One network rule: which requests it matches and what happens to them.
public struct NetworkRule: Sendable, Hashable {
    public var placement: String?
    public var kind: RequestKind?
    public var nth: Int?
    public var latency: Double?
    public var fail: Failure?

    /// What a matched request does instead of succeeding.
    public enum Failure: Sendable, Hashable {
        case hang, reset, http(Int), malformed
    }
}

/// A cache entry present at t = 0.
public struct CacheSeed: Sendable, Hashable {
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
    public var variation: String
    /// Whether the fallback file also carries the placement's layout.
    public var includesLayout: Bool
}

/// A call at a given time.
public struct Step: Sendable {
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
