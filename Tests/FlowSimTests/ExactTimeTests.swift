import Testing
@testable import FlowFetch
@testable import FlowSim
import FlowJSON

/// Every timing boundary of the engine (maxAge, the stage-A budget, the stage-B budget and its 60 s
/// cap, the getFlowOrDefault timer, the preload phases) played in virtual time at decimal origins
/// (0.1, 0.3, 4.7 ...) and at binary-exact ones (0, 0.25, 10.25 ...): a story shifted in time must
/// end the same way, to the microsecond. Times are drawn in whole milliseconds and written as the
/// seconds a scenario file would hold (the double nearest the decimal).
@Suite("Exact time: boundaries at decimal times behave as at binary-exact times")
struct ExactTimeTests {
    static let binaryOrigins = [0, 250, 500, 10_250, 1_024_000]
    static let decimalOrigins = [100, 300, 4_700, 1_100, 123_456, 86_400_700]

    /// Milliseconds as the seconds a scenario file holds.
    static func s(_ ms: Int) -> Double { Double(ms) / 1000 }

    struct Rng {
        var ids = SeededIDs(seed: 16)
        mutating func int(_ range: ClosedRange<Int>) -> Int {
            range.lowerBound + Int(ids.next() % UInt64(range.count))
        }
        mutating func pick<T>(_ a: [T]) -> T { a[int(0...(a.count - 1))] }
    }

    static let backend: [String: PlacementBackend] = [
        "a": PlacementBackend(audiences: [
            AudienceDefinition(name: "ASA", versionId: "av-asa", requiresAttribution: "appleAds",
                               variations: [Variation(id: "asa-A", weight: 100)]),
            AudienceDefinition(name: "All Users", versionId: "av-all", variations: [Variation(id: "all-A", weight: 100)]),
        ]),
        "b": PlacementBackend(audiences: [
            AudienceDefinition(name: "All Users", versionId: "av-b", variations: [Variation(id: "b-A", weight: 100)]),
        ]),
    ]

    /// What a run did, with every time relative to the origin in whole microseconds.
    struct Shape: Equatable, CustomStringConvertible {
        var steps: [String]
        var requests: [String]
        var description: String { (steps + requests).joined(separator: "\n") }
    }

    static func shape(_ scenario: Scenario, origin: Int) -> Shape {
        let report = ScenarioRunner(scenario).run()
        let o = EngineTime(seconds: s(origin))
        func rel(_ t: Double?) -> String { t.map { "\((EngineTime(seconds: $0) - o).microseconds)" } ?? "never" }
        let steps = report.results.map { r -> String in
            let what: String
            switch r.outcome {
            case .flow(let f)?: what = "\(f.source.rawValue) \(f.variationId)"
            case .failed(let e)?: what = "error \(e.code.rawValue) \(e.preloadErrors?.mapValues(\.code.rawValue).sorted { $0.key < $1.key } ?? [])"
            case .done?: what = "done"
            case .configuration?: what = "configuration"
            case nil: what = "never"
            }
            return "step \(r.step): \(what) at \(rel(r.completedAt)), \(r.requests) requests"
        }
        let requests = report.requests.map { q in
            "\(q.placement ?? "-") \(q.kind) \(rel(q.issuedAt))..\(rel(q.endedAt)) \(q.outcome ?? "-")"
        }
        return Shape(steps: steps, requests: requests)
    }

    /// Plays `make` at every origin and checks that all runs have the shape of the run at origin 0;
    /// returns that shape.
    @discardableResult
    static func sameAtEveryOrigin(_ label: String, _ make: (Int) -> Scenario) -> Shape {
        let reference = shape(make(0), origin: 0)
        for origin in binaryOrigins.dropFirst() + decimalOrigins {
            let got = shape(make(origin), origin: origin)
            #expect(got == reference, "\(label) at origin \(s(origin)):\n\(got)\nat origin 0:\n\(reference)")
        }
        return reference
    }

    static func getFlow(_ placement: String, at: Int, _ policy: FetchPolicy? = nil, loadTimeout: Int? = nil) -> Step {
        Step(at: s(at), call: .getFlow(placement: placement, policy: policy, loadTimeout: loadTimeout.map(s)))
    }

    @Test("maxAge: an entry read exactly maxAge after it was stored is expired, at any origin")
    func maxAgeBoundary() {
        var r = Rng()
        for _ in 0..<60 {
            let latency = r.int(1...999), maxAge = r.int(1...2_000), gap = maxAge + r.int(-1...1)
            let shape = Self.sameAtEveryOrigin("latency \(latency) maxAge \(maxAge) gap \(gap)") { o in
                Scenario(name: "maxAge", profile: ScenarioProfile(id: "user-1"), backend: Self.backend,
                         network: NetworkRules(latency: Self.s(latency)),
                         steps: [Self.getFlow("b", at: o),
                                 Self.getFlow("b", at: o + latency + gap, .returnCacheDataIfNotExpiredElseLoad(maxAge: Self.s(maxAge)))])
            }
            let expected = gap >= maxAge ? "network b-A at \((latency + gap + latency) * 1000)" : "cache b-A at \((latency + gap) * 1000)"
            #expect(shape.steps[1].hasPrefix("step 1: \(expected),"), "\(shape)")
        }
    }

    @Test("stage A: a targeted answer just inside the budget wins, just outside it loses, at any origin")
    func stageABoundary() {
        var r = Rng()
        for _ in 0..<40 {
            let t = r.int(1_000...10_000), a = max(t - 500, 500), d = r.int(-1...1)
            let shape = Self.sameAtEveryOrigin("T \(t) targeted latency A\(d)") { o in
                Scenario(name: "stage A", profile: ScenarioProfile(id: "user-1"), backend: Self.backend,
                         network: NetworkRules(latency: 0.1, rules: [NetworkRule(kind: .targeted, latency: Self.s(a + d))]),
                         steps: [Self.getFlow("b", at: o, loadTimeout: t)])
            }
            if d < 0 { #expect(shape.steps[0].hasPrefix("step 0: network b-A at \((a + d) * 1000),"), "\(shape)") }
            if d > 0 { #expect(shape.steps[0].hasPrefix("step 0: defaultAudience b-A at \((a + 100) * 1000),"), "\(shape)") }
        }
    }

    @Test("stage B: the default request's budget min(max(T - elapsed, 0.5), 60) is exact, cap included, at any origin")
    func stageBBoundary() {
        var r = Rng()
        var cases: [(t: Int, x: Int)] = [(60_700, 700), (60_600, 500), (60_800, 700), (4_700, 4_199), (1_000, 300)]
        for _ in 0..<40 { let t = r.int(1_000...70_000); cases.append((t, r.int(0...max(t - 500, 500) - 1))) }
        for (t, x) in cases {
            let b = min(max(t - x, 500), 60_000), d = r.pick([-1, 0, 1])
            let shape = Self.sameAtEveryOrigin("T \(t) fails at \(x) default latency B\(d)") { o in
                Scenario(name: "stage B", profile: ScenarioProfile(id: "user-1"), backend: Self.backend,
                         network: NetworkRules(rules: [NetworkRule(kind: .targeted, latency: Self.s(x), fail: .http(503)),
                                                       NetworkRule(kind: .default, latency: Self.s(b + d))]),
                         fallbackFile: ["b": FallbackSeed(variation: "b-fb")],
                         steps: [Self.getFlow("b", at: o, loadTimeout: t)])
            }
            if d < 0 { #expect(shape.steps[0].hasPrefix("step 0: defaultAudience b-A at \((x + b + d) * 1000),"), "\(shape)") }
            if d > 0 { #expect(shape.steps[0].hasPrefix("step 0: fallbackFile b-fb at \((x + b) * 1000),"), "\(shape)") }
        }
    }

    @Test("getFlowOrDefault: the timer against attribution and the targeted fetch is exact, at any origin")
    func orDefaultTimerBoundary() {
        var r = Rng()
        for _ in 0..<40 {
            let timeout = r.int(200...3_000), fetch = r.int(0...100), applies = timeout - fetch + r.int(-1...1)
            let shape = Self.sameAtEveryOrigin("timeout \(timeout) attribution \(applies) fetch \(fetch)") { o in
                Scenario(name: "or default", profile: ScenarioProfile(id: "user-1", attribution: ["appleAds": Self.s(o + applies)]),
                         backend: Self.backend,
                         network: NetworkRules(rules: [NetworkRule(kind: .targeted, latency: Self.s(fetch)),
                                                       NetworkRule(kind: .default, latency: 5)]),
                         steps: [Step(at: Self.s(o), call: .getFlowOrDefault(placement: "a", timeout: Self.s(timeout)))])
            }
            if applies + fetch < timeout { #expect(shape.steps[0].hasPrefix("step 0: network asa-A"), "\(shape)") }
            if applies + fetch > timeout { #expect(shape.steps[0].hasPrefix("step 0: defaultAudience all-A at 5000000,"), "\(shape)") }
        }
    }

    @Test("preload: the shared phase-A deadline and the phase-B budget are exact, at any origin")
    func preloadBoundary() {
        var r = Rng()
        for _ in 0..<40 {
            let t = r.int(1_000...8_000), a = max(t - 500, 500)
            let first = a + r.int(-1...1), second = r.int(1...(a - 1))
            let phaseAEnd = first <= a ? max(first, second) : a
            let b = min(max(t - phaseAEnd, 500), 60_000), d = r.int(-1...1)
            Self.sameAtEveryOrigin("T \(t) a \(first) b fails at \(second) default B\(d)") { o in
                Scenario(name: "preload", profile: ScenarioProfile(id: "user-1"), backend: Self.backend,
                         network: NetworkRules(rules: [NetworkRule(placement: "a", kind: .targeted, latency: Self.s(first)),
                                                       NetworkRule(placement: "b", kind: .targeted, latency: Self.s(second), fail: .reset),
                                                       NetworkRule(kind: .default, latency: Self.s(b + d))]),
                         steps: [Step(at: Self.s(o), call: .preloadFlows(placements: ["a", "b"], loadTimeout: Self.s(t)))])
            }
        }
    }

    @Test("in the simulator, returning users' entries stored 0.1 before launch and needed at 0.7 are expired under maxAge 0.8, fresh under 0.801")
    func simulatorBoundary() {
        let population = Population(networks: [("perfect", 1)], profiles: ["perfect": NetworkProfile(median: 0.2, p95: 0.2)],
                                    attributionShare: 0, attributionDelay: .fixed(1), returningShare: 1, cacheAge: .fixed(0.1),
                                    placements: [PlacementNeed(id: "main_paywall", at: .fixed(0.7))], fallbackFile: false)
        let config = SimulationConfig(population: population, strategies: [
            Strategy(name: "maxAge 0.8", .atPaywall(policy: .returnCacheDataIfNotExpiredElseLoad(maxAge: 0.8), loadTimeout: 5, at: .needed)),
            Strategy(name: "maxAge 0.801", .atPaywall(policy: .returnCacheDataIfNotExpiredElseLoad(maxAge: 0.801), loadTimeout: 5, at: .needed)),
        ])
        let result = Simulation(config: config).run(sessions: 50, seed: 5)
        let expired = result.strategies[0].tally, fresh = result.strategies[1].tally
        #expect(expired.displays == 50 && expired.sources[0] == 50 && expired.sources[1] == 0, "\(expired.sources)")
        #expect(fresh.displays == 50 && fresh.sources[1] == 50, "\(fresh.sources)")
    }

    @Test("scenario 26 reports the decimal maxAge boundary as expired, with age 0.2 and maxAge 0.2")
    func decimalScenarioEvents() throws {
        let (_, scenario) = try #require(try scenarioFiles().first { $0.path.hasSuffix("27-decimal-max-age-boundary.json5") })
        let report = ScenarioRunner(scenario).run()
        #expect(report.failures.isEmpty)
        let expired = report.events.filter { $0.event.name == .cacheExpired && $0.step == 2 }
        #expect(expired.count == 1)
        #expect(expired.first?.event.attrs["age"] == .number(0.2))
        #expect(expired.first?.event.attrs["maxAge"] == .number(0.2))
        let hit = report.events.first { $0.event.name == .cacheHit && $0.step == 1 }
        #expect(hit?.event.attrs["age"] == .number(0.199))
    }
}
