import FlowFetch
import FlowJSON

/// An in-process backend serving a scenario's placements through its network rules, deterministically.
/// A targeted request is resolved against the profile's state at the moment it is issued.
public struct SandboxBackend: Sendable {
    public let placements: [String: PlacementBackend]
    public let network: NetworkRules
    /// Attribution schedules of every profile the scenario knows.
    public private(set) var profiles: [String: ScenarioProfile]
    private var ruleCounters: [Int]

    public init(placements: [String: PlacementBackend], network: NetworkRules, profiles: [ScenarioProfile]) {
        self.placements = placements
        self.network = network
        self.profiles = Dictionary(profiles.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        self.ruleCounters = Array(repeating: 0, count: network.rules.count)
    }

    /// Makes a profile (and its attribution schedule) known.
    public mutating func register(_ profile: ScenarioProfile) { profiles[profile.id] = profile }

    /// When and how a request issued at `t` ends: after `latency` seconds with `completion`, or never
    /// (`completion` nil: the request hangs).
    public struct Answer: Sendable {
        /// Seconds, as the rule gives them.
        public var latency: Double
        /// The latency in engine time.
        public var delay: EngineTime { EngineTime(seconds: latency) }
        public var completion: RequestCompletion?
        /// The body of `completion` trickles in slowly (a `drip` rule): it does not arrive in time.
        public var drip = false
    }

    /// Applies the network rules to a request issued at `t` (seconds) and resolves its answer.
    public mutating func answer(_ spec: RequestSpec, at t: Double) -> Answer { answer(spec, at: EngineTime(seconds: t)) }

    /// Applies the network rules to a request issued at engine time `t` and resolves its answer.
    public mutating func answer(_ spec: RequestSpec, at t: EngineTime) -> Answer {
        var chosen: NetworkRule?
        for (i, rule) in network.rules.enumerated() {
            guard rule.placement.map({ $0 == spec.placement }) ?? true, rule.kind.map({ $0 == spec.kind }) ?? true else { continue }
            ruleCounters[i] += 1
            if chosen == nil, rule.nth.map({ $0 == ruleCounters[i] }) ?? true { chosen = rule }
        }
        let latency = chosen?.latency ?? network.latency
        switch chosen?.fail {
        case .hang: return Answer(latency: latency, completion: nil)
        case .drip: return Answer(latency: latency, completion: resolve(spec, at: t), drip: true)
        case .reset: return Answer(latency: latency, completion: RequestCompletion(.failure(.transport(reason: "reset"))))
        case .http(let status):
            if (200..<300).contains(status) { break }
            return Answer(latency: latency, completion: RequestCompletion(.failure(.http(status: status)), bytes: 40))
        case .malformed: return Answer(latency: latency, completion: RequestCompletion(.failure(.malformed(reason: "body is not a valid response")), bytes: 17))
        case nil: break
        }
        return Answer(latency: latency, completion: resolve(spec, at: t))
    }

    /// The backend's answer to a request at `t`, ignoring the network.
    public func resolve(_ spec: RequestSpec, at t: EngineTime) -> RequestCompletion {
        let notFound = RequestCompletion(.failure(.http(status: 404)), bytes: 44)
        switch spec.kind {
        case .targeted, .default:
            guard let id = spec.placement, let placement = placements[id] else { return notFound }
            let applied = appliedSources(spec.profileId, at: t)
            let audience: AudienceDefinition?
            if spec.kind == .default {
                audience = placement.audiences.first { $0.name == defaultAudienceName } ?? placement.audiences.last
            } else {
                audience = placement.audiences.first { a in a.requiresAttribution.map(applied.contains) ?? true }
            }
            guard let audience else { return notFound }
            let payload = AudiencePayload(placementId: id, audienceName: audience.name, audienceVersionId: audience.versionId,
                                          variations: audience.variations.map { v in
                                              var v = v
                                              v.layout = placement.layout.map { LayoutRef(id: $0.id, version: $0.version) }
                                              return v
                                          })
            return RequestCompletion(.success(.audience(payload)), bytes: RESTCoding.audienceJSON(payload).jsonText.utf8.count)
        case .layout:
            guard let ref = spec.layout,
                  let def = placements.values.lazy.compactMap(\.layout).first(where: { $0.id == ref.id && $0.version == ref.version })
            else { return notFound }
            return RequestCompletion(.success(.layout(def.layout)), bytes: 300 + def.images * 120)
        case .asset:
            guard let url = spec.assetURL,
                  let def = placements.values.lazy.compactMap(\.layout).first(where: { url.hasPrefix("https://assets.invalid/\($0.id)/\($0.version)/") })
            else { return notFound }
            return RequestCompletion(.success(.asset(bytes: def.imageBytes)), bytes: def.imageBytes)
        case .profile:
            let profile = Profile(id: spec.profileId, appliedAttributionSources: appliedSources(spec.profileId, at: t))
            return RequestCompletion(.success(.profile(profile)), bytes: 60)
        }
    }

    /// The attribution sources applied to a profile at engine time `t` (an `appliesAt` in seconds is
    /// converted to engine time before it is compared).
    public func appliedSources(_ profileId: String, at t: EngineTime) -> Set<String> {
        Set((profiles[profileId]?.attribution ?? [:]).filter { EngineTime(seconds: $0.value) <= t }.map(\.key))
    }
}
