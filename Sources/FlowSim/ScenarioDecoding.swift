import FlowFetch
import FlowJSON

extension Scenario {
    /// Reads a scenario from JSON or JSON5 text. Errors name the file, the JSON path and what was expected.
    public static func decode(_ text: String, file: String? = nil) throws(JSONInputError) -> Scenario {
        do {
            let root = try JSON5.parse(text)
            return try decode(JSONCursor(root), file: file)
        } catch {
            throw file.map { error.inFile($0) } ?? error
        }
    }

    /// A placement id the file names as a key or a cache entry's `placement`: as the engine would
    /// use it. The engine trims the ids of calls, so an id with spaces around it could never match.
    static func placementKey(_ id: String, _ path: String) throws(JSONInputError) -> String {
        guard let normalized = Budget.normalizePlacement(id), normalized == id else {
            throw JSONInputError(path: path, message: "expected a placement id without spaces around it (the engine trims the ids "
                                 + "it is called with, so this one would never match), got \(JSONValue.string(id).briefDescription)")
        }
        return id
    }

    static func decode(_ root: JSONCursor, file: String?) throws(JSONInputError) -> Scenario {
        let o = try root.object()
        try o.rejectUnknownKeys(allowed: ["name", "profile", "backend", "network", "cache", "fallbackFile", "client", "steps", "expect", "description"])
        let name = try o.optional("name")?.string() ?? file ?? "scenario"
        let profile = try o.optional("profile").map { c throws(JSONInputError) in try decodeProfile(c) }
            ?? ScenarioProfile(id: "user-1", attribution: [:])

        var backend: [String: PlacementBackend] = [:]
        if let b = o.optional("backend") {
            let bo = try b.object()
            try bo.rejectUnknownKeys(allowed: ["placements"])
            if let placements = bo.optional("placements") {
                for (id, c) in try placements.object().entries {
                    backend[try placementKey(id, c.path)] = try decodePlacement(c)
                }
            }
        }

        var network = NetworkRules(latency: 0, rules: [])
        if let n = o.optional("network") {
            let no = try n.object()
            try no.rejectUnknownKeys(allowed: ["latency", "rules"])
            if let l = no.optional("latency") { network.latency = try l.seconds() }
            if let rules = no.optional("rules") {
                network.rules = try rules.array().map { c throws(JSONInputError) in try decodeRule(c) }
            }
        }

        var cache: [CacheSeed] = []
        if let c = o.optional("cache") {
            for entry in try c.array() {
                let eo = try entry.object()
                try eo.rejectUnknownKeys(allowed: ["placement", "variation", "audience", "age", "fromDefaultAudience", "corrupt"])
                let placement = try eo.required("placement")
                cache.append(CacheSeed(placement: try placementKey(try placement.nonEmptyString(), placement.path),
                                       variation: try eo.required("variation").nonEmptyString(),
                                       audience: try eo.optional("audience")?.string() ?? defaultAudienceName,
                                       age: try eo.optional("age").map { c throws(JSONInputError) in try c.seconds() } ?? 0,
                                       fromDefaultAudience: try eo.optional("fromDefaultAudience")?.bool() ?? false,
                                       corrupt: try eo.optional("corrupt")?.bool() ?? false))
            }
        }

        var fallback: [String: FallbackSeed] = [:]
        if let f = o.optional("fallbackFile") {
            for (id, c) in try f.object().entries {
                let id = try placementKey(id, c.path)
                let fo = try c.object()
                try fo.rejectUnknownKeys(allowed: ["variation", "layout"])
                fallback[id] = FallbackSeed(variation: try fo.required("variation").nonEmptyString(),
                                            includesLayout: try fo.optional("layout")?.bool() ?? false)
            }
        }

        var requestTimeout = Budget.defaultRequestTimeout
        var cacheMaxBytes: Int?
        if let c = o.optional("client") {
            let co = try c.object()
            try co.rejectUnknownKeys(allowed: ["requestTimeout", "cacheMaxBytes"])
            if let r = co.optional("requestTimeout") { requestTimeout = try r.positiveSeconds() }
            if let m = co.optional("cacheMaxBytes") { cacheMaxBytes = try count(m) }
        }

        let stepCursors = try o.required("steps").array()
        var steps: [Step] = []
        for (index, c) in stepCursors.enumerated() { steps.append(try decodeStep(c, index: index, stepCount: stepCursors.count)) }

        var expect: [Expectation] = []
        if let e = o.optional("expect") {
            for c in try e.array() { expect.append(try decodeExpectation(c, stepCount: steps.count)) }
        }
        var scenario = Scenario(name: name, file: file, profile: profile, backend: backend, network: network, cache: cache,
                                fallbackFile: fallback, requestTimeout: requestTimeout, steps: steps, expect: expect)
        if let cacheMaxBytes { scenario.cacheMaxBytes = cacheMaxBytes }
        return scenario
    }

    private static func decodeProfile(_ c: JSONCursor) throws(JSONInputError) -> ScenarioProfile {
        if case .string = c.value { return ScenarioProfile(id: try c.nonEmptyString(), attribution: [:]) }
        let o = try c.object()
        try o.rejectUnknownKeys(allowed: ["id", "attribution"])
        var attribution: [String: Double] = [:]
        if let a = o.optional("attribution") {
            for (source, s) in try a.object().entries {
                let so = try s.object()
                try so.rejectUnknownKeys(allowed: ["appliesAt"])
                attribution[source] = try so.required("appliesAt").seconds()
            }
        }
        return ScenarioProfile(id: try o.required("id").nonEmptyString(), attribution: attribution)
    }

    private static func decodePlacement(_ c: JSONCursor) throws(JSONInputError) -> PlacementBackend {
        let o = try c.object()
        try o.rejectUnknownKeys(allowed: ["audiences", "layout"])
        var audiences: [AudienceDefinition] = []
        for a in try o.required("audiences").array() {
            let ao = try a.object()
            try ao.rejectUnknownKeys(allowed: ["name", "versionId", "when", "variations"])
            var requires: String?
            if let w = ao.optional("when") {
                let wo = try w.object()
                try wo.rejectUnknownKeys(allowed: ["attribution"])
                requires = try wo.required("attribution").nonEmptyString()
            }
            var variations: [Variation] = []
            for v in try ao.required("variations").array() {
                let vo = try v.object()
                try vo.rejectUnknownKeys(allowed: ["id", "weight", "revision", "productIds", "remoteConfig"])
                let weight = try vo.required("weight").int()
                guard weight >= 0 else { throw try vo.required("weight").expected("a weight >= 0") }
                variations.append(Variation(
                    id: try vo.required("id").nonEmptyString(), weight: weight,
                    revision: try vo.optional("revision")?.int() ?? 1,
                    productIds: try vo.optional("productIds")?.array().map { p throws(JSONInputError) in try p.string() } ?? [],
                    remoteConfig: try vo.optional("remoteConfig")?.object().members ?? [:]))
            }
            audiences.append(AudienceDefinition(name: try ao.required("name").nonEmptyString(),
                                                versionId: try ao.required("versionId").nonEmptyString(),
                                                requiresAttribution: requires, variations: variations))
        }
        var layout: LayoutDefinition?
        if let l = o.optional("layout") {
            let lo = try l.object()
            try lo.rejectUnknownKeys(allowed: ["id", "version", "images", "customMedia", "imageBytes"])
            layout = LayoutDefinition(id: try lo.required("id").nonEmptyString(), version: try lo.required("version").int(),
                                      images: try lo.optional("images").map { c throws(JSONInputError) in
                                          try count(c, atMost: LayoutDefinition.maxImages)
                                      } ?? 0,
                                      customMedia: try lo.optional("customMedia")?.array().map { c throws(JSONInputError) in try c.nonEmptyString() } ?? [],
                                      imageBytes: try lo.optional("imageBytes").map { c throws(JSONInputError) in
                                          try count(c, atMost: LayoutDefinition.maxImageBytes)
                                      } ?? 24_000)
        }
        return PlacementBackend(audiences: audiences, layout: layout)
    }

    private static func decodeRule(_ c: JSONCursor) throws(JSONInputError) -> NetworkRule {
        let o = try c.object()
        try o.rejectUnknownKeys(allowed: ["match", "latency", "fail"])
        var rule = NetworkRule()
        if let m = o.optional("match") {
            let mo = try m.object()
            try mo.rejectUnknownKeys(allowed: ["placement", "kind", "nth"])
            rule.placement = try mo.optional("placement")?.string()
            if let k = mo.optional("kind") {
                guard let kind = RequestKind(rawValue: try k.string()) else {
                    throw k.expected("one of targeted, default, layout, asset, profile")
                }
                rule.kind = kind
            }
            if let n = mo.optional("nth") {
                let nth = try n.int()
                guard nth >= 1 else { throw n.expected("a 1-based index (>= 1)") }
                rule.nth = nth
            }
        }
        if let l = o.optional("latency") { rule.latency = try l.seconds() }
        if let f = o.optional("fail") {
            let s = try f.string()
            switch s {
            case "hang": rule.fail = .hang
            case "reset": rule.fail = .reset
            case "malformed": rule.fail = .malformed
            case "drip": rule.fail = .drip
            default:
                guard s.hasPrefix("http:"), s.utf8.count == 8, let code = Int(s.dropFirst(5)), (100...599).contains(code) else {
                    throw f.expected("\"hang\", \"reset\", \"drip\", \"malformed\" or \"http:NNN\"")
                }
                // A real server cannot end an answer with 1xx: the stub backend's client would wait
                // for the final status until its deadline, while a virtual run saw a server error.
                guard code >= 200 else {
                    throw f.error("\(s) is an interim status that never ends an answer: expected http:200 to http:599")
                }
                rule.fail = .http(code)
            }
        }
        return rule
    }

    private static func decodePolicy(_ c: JSONCursor) throws(JSONInputError) -> FetchPolicy {
        if case .string(let s) = c.value {
            switch s {
            case "reloadRevalidatingCacheData": return .reloadRevalidatingCacheData
            case "returnCacheDataElseLoad": return .returnCacheDataElseLoad
            default: break
            }
        } else if case .object = c.value {
            let o = try c.object()
            try o.rejectUnknownKeys(allowed: ["returnCacheDataIfNotExpiredElseLoad"])
            let inner = try o.required("returnCacheDataIfNotExpiredElseLoad").object()
            try inner.rejectUnknownKeys(allowed: ["maxAge"])
            return .returnCacheDataIfNotExpiredElseLoad(maxAge: try inner.required("maxAge").seconds())
        }
        throw c.expected("\"reloadRevalidatingCacheData\", \"returnCacheDataElseLoad\" or {\"returnCacheDataIfNotExpiredElseLoad\": {\"maxAge\": N}}")
    }

    /// Step `index` of `stepCount`.
    private static func decodeStep(_ c: JSONCursor, index: Int, stepCount: Int) throws(JSONInputError) -> Step {
        let o = try c.object()
        let at = try o.required("at").seconds()
        let callCursor = try o.required("call")
        let callName = try callCursor.string()
        func placement() throws(JSONInputError) -> String { try o.required("placement").string() }
        func loadTimeout() throws(JSONInputError) -> Double? {
            try o.optional("loadTimeout").map { c throws(JSONInputError) in try c.engineSeconds() }
        }
        func policy() throws(JSONInputError) -> FetchPolicy? {
            try o.optional("fetchPolicy").map { p throws(JSONInputError) in try decodePolicy(p) }
        }
        func placements() throws(JSONInputError) -> [String] {
            try o.required("placements").array().map { p throws(JSONInputError) in try p.string() }
        }
        let call: Step.Call
        var allowed: Set<String> = ["at", "call"]
        switch callName {
        case "getFlow":
            allowed.formUnion(["placement", "fetchPolicy", "loadTimeout"])
            call = .getFlow(placement: try placement(), policy: try policy(), loadTimeout: try loadTimeout())
        case "getFlowForDefaultAudience":
            allowed.formUnion(["placement", "fetchPolicy"])
            call = .getFlowForDefaultAudience(placement: try placement(), policy: try policy())
        case "preloadFlows":
            allowed.formUnion(["placements", "loadTimeout"])
            call = .preloadFlows(placements: try placements(), loadTimeout: try loadTimeout())
        case "preloadFlowsForDefaultAudience":
            allowed.formUnion(["placements"])
            call = .preloadFlowsForDefaultAudience(placements: try placements())
        case "getFlowOrDefault":
            allowed.formUnion(["placement", "timeout"])
            call = .getFlowOrDefault(placement: try placement(), timeout: try o.required("timeout").engineSeconds())
        case "getFlowConfiguration":
            allowed.formUnion(["placement", "loadTimeout", "bundled"])
            call = .getFlowConfiguration(placement: try placement(), loadTimeout: try loadTimeout(),
                                         bundled: try o.optional("bundled")?.array().map { b throws(JSONInputError) in try b.string() } ?? [])
        case "identify":
            allowed.formUnion(["profile"])
            call = .identify(try decodeProfile(try o.required("profile")))
        case "restart":
            call = .restart
        case "cancel":
            allowed.formUnion(["step"])
            let s = try o.required("step")
            let target = try s.int()
            guard target >= 0, target < stepCount, target != index else {
                throw s.expected("the index of another step (0..<\(stepCount), not \(index), this cancel step's own)")
            }
            call = .cancel(step: target)
        default:
            throw callCursor.expected("one of getFlow, getFlowForDefaultAudience, preloadFlows, preloadFlowsForDefaultAudience, getFlowOrDefault, getFlowConfiguration, identify, restart, cancel")
        }
        try o.rejectUnknownKeys(allowed: allowed)
        return Step(at: at, call: call)
    }

    private static func decodeExpectation(_ c: JSONCursor, stepCount: Int) throws(JSONInputError) -> Expectation {
        let o = try c.object()
        try o.rejectUnknownKeys(allowed: ["step", "outcome", "source", "variation", "audience", "targetingLost", "completedAt",
                                          "errorCode", "preloadErrors", "requests"])
        let s = try o.required("step")
        let step = try s.int()
        guard step >= 0, step < stepCount else { throw s.expected("a step index 0..<\(stepCount)") }
        var e = Expectation(step: step)
        e.path = c.path
        if let v = o.optional("outcome") {
            let outcome = try v.string()
            guard outcome == "success" || outcome == "error" else { throw v.expected("\"success\" or \"error\"") }
            e.outcome = outcome
        }
        if let v = o.optional("source") {
            let source = try v.string()
            guard FlowSource(rawValue: source) != nil else { throw v.expected("one of network, cache, defaultAudience, fallbackFile") }
            e.source = source
        }
        e.variation = try o.optional("variation")?.string()
        e.audience = try o.optional("audience")?.string()
        e.targetingLost = try o.optional("targetingLost")?.bool()
        e.completedAt = try o.optional("completedAt").map { c throws(JSONInputError) in try c.seconds() }
        e.errorCode = try o.optional("errorCode")?.int()
        if let p = o.optional("preloadErrors") {
            var map: [String: Int] = [:]
            for (k, v) in try p.object().entries { map[k] = try v.int() }
            e.preloadErrors = map
        }
        e.requests = try o.optional("requests")?.int()
        return e
    }

    private static func count(_ c: JSONCursor) throws(JSONInputError) -> Int {
        let v = try c.int()
        guard v >= 0 else { throw c.expected("an integer >= 0") }
        return v
    }

    /// An integer from 0 to `limit`.
    private static func count(_ c: JSONCursor, atMost limit: Int) throws(JSONInputError) -> Int {
        let v = try c.int()
        guard v >= 0, v <= limit else { throw c.expected("an integer from 0 to \(limit)") }
        return v
    }
}
