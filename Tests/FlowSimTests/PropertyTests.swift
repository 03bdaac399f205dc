import TestSupport
import Testing
@testable import FlowFetch
@testable import FlowSim
import FlowJSON

/// Random fault schedules, seeded and deterministic, built as Scenario values and played by the runner.
@Suite("Timing guarantees under random faults", .heavy)
struct PropertyTests {
    struct Rng {
        var ids: SeededIDs
        init(_ seed: UInt64) { ids = SeededIDs(seed: seed) }
        mutating func int(_ n: Int) -> Int { Int(ids.next() % UInt64(n)) }
        mutating func double(_ lo: Double, _ hi: Double) -> Double {
            lo + (hi - lo) * Double(ids.next() >> 11) / Double(1 << 53)
        }
        mutating func chance(_ p: Double) -> Bool { double(0, 1) < p }
        mutating func pick<T>(_ a: [T]) -> T { a[int(a.count)] }
    }

    static let placements = ["p0", "p1", "p2"]

    static func randomScenario(_ r: inout Rng) -> Scenario {
        var backend: [String: PlacementBackend] = [:]
        for p in placements {
            let a = r.int(101)
            let weights = r.chance(0.1) ? [a, 100 - a + 1 + r.int(5)] : [a, 100 - a]
            var audiences = [AudienceDefinition(name: "All Users", versionId: "av-\(p)", requiresAttribution: nil,
                                                variations: [Variation(id: "\(p)-A", weight: weights[0]),
                                                             Variation(id: "\(p)-B", weight: weights[1])])]
            if r.chance(0.5) {
                audiences.insert(AudienceDefinition(name: "ASA", versionId: "asa-\(p)", requiresAttribution: "appleAds",
                                                    variations: [Variation(id: "\(p)-asa", weight: 100)]), at: 0)
            }
            if r.chance(0.9) { backend[p] = PlacementBackend(audiences: audiences, layout: nil) }
        }
        let fails: [NetworkRule.Failure?] = [nil, .hang, .reset, .http(500), .http(503), .http(429), .http(499),
                                             .http(404), .http(400), .malformed]
        var rules: [NetworkRule] = []
        for _ in 0..<r.int(5) {
            rules.append(NetworkRule(placement: r.chance(0.6) ? r.pick(placements) : nil,
                                     kind: r.chance(0.7) ? r.pick([RequestKind.targeted, .default]) : nil,
                                     nth: r.chance(0.3) ? 1 + r.int(3) : nil,
                                     latency: r.chance(0.8) ? r.double(0, 8) : nil,
                                     fail: r.pick(fails)))
        }
        var cache: [CacheSeed] = []
        for p in placements where r.chance(0.5) {
            cache.append(CacheSeed(placement: p, variation: "\(p)-A", audience: "All Users",
                                   age: r.chance(0.5) ? r.double(0, 60) : r.double(3600, 864_000),
                                   fromDefaultAudience: r.chance(0.5), corrupt: r.chance(0.2)))
        }
        var fallback: [String: FallbackSeed] = [:]
        for p in placements where r.chance(0.4) { fallback[p] = FallbackSeed(variation: "\(p)-fb", includesLayout: false) }
        let policies: [FetchPolicy?] = [nil, .reloadRevalidatingCacheData, .returnCacheDataElseLoad,
                                        .returnCacheDataIfNotExpiredElseLoad(maxAge: r.double(0, 120))]
        var steps: [Step] = []
        var at = 0.0
        for _ in 0..<(1 + r.int(2)) {
            let call: Step.Call
            switch r.int(4) {
            case 0, 1:
                call = .getFlow(placement: r.pick(placements), policy: r.pick(policies),
                                loadTimeout: r.chance(0.1) ? nil : r.double(0, 10))
            case 2:
                call = .preloadFlows(placements: (0..<(1 + r.int(3))).map { _ in r.pick(placements + [" p1", ""]) },
                                     loadTimeout: r.chance(0.1) ? nil : r.double(0, 10))
            default:
                call = .getFlowOrDefault(placement: r.pick(placements), timeout: r.double(0, 5))
            }
            steps.append(Step(at: at, call: call))
            at += r.double(0, 4)
        }
        let attribution: [String: Double] = r.chance(0.5) ? ["appleAds": r.double(0, 6)] : [:]
        return Scenario(name: "random", file: nil, profile: ScenarioProfile(id: "user-\(r.int(1000))", attribution: attribution),
                        backend: backend, network: NetworkRules(latency: r.double(0, 8), rules: rules), cache: cache,
                        fallbackFile: fallback, requestTimeout: r.double(1, 30), steps: steps, expect: [])
    }

    @Test("10,000 random fault schedules: every call ends once, within its budget")
    func randomSchedules() {
        var violations: [String] = []
        var checked = 0
        for seed in UInt64(1)...10_000 {
            var r = Rng(seed)
            let scenario = Self.randomScenario(&r)
            let report = ScenarioRunner(scenario).run()
            for (i, step) in scenario.steps.enumerated() {
                let result = report.results[i]
                guard let outcome = result.outcome, let end = result.completedAt else {
                    violations.append("seed \(seed) step \(i): never ended")
                    continue
                }
                // Times convert once to whole microseconds (the engine's clock); compare there, exactly.
                let took = EngineTime(seconds: end) - EngineTime(seconds: step.at)
                let ends = report.events.filter { $0.step == i && ($0.event.name == .fetchEnd || $0.event.name == .preloadEnd) }
                switch step.call {
                case .getFlow(_, _, let t):
                    let bound = Budget.loadTimeout(t ?? Budget.defaultLoadTimeout) ?? .zero
                    if took > bound { violations.append("seed \(seed) step \(i): getFlow took \(took) > \(bound)") }
                    if ends.count != 1 { violations.append("seed \(seed) step \(i): \(ends.count) fetch.end") }
                case .preloadFlows(let ids, let t):
                    let bound = Budget.loadTimeout(t ?? Budget.defaultLoadTimeout) ?? .zero
                    if took > bound { violations.append("seed \(seed) step \(i): preload took \(took) > \(bound)") }
                    let normalized = Budget.normalizePlacements(ids)
                    if ends.count != (normalized.isEmpty ? 0 : 1) { violations.append("seed \(seed) step \(i): \(ends.count) preload.end") }
                    if let e = outcome.error {
                        if e.preloadErrors?.isEmpty ?? true { violations.append("seed \(seed) step \(i): preload error without preloadErrors") }
                        if !Set(e.preloadErrors?.keys.map { $0 } ?? []).isSubset(of: Set(normalized)) {
                            violations.append("seed \(seed) step \(i): preloadErrors for unknown ids")
                        }
                    }
                case .getFlowOrDefault(_, let timeout):
                    if took > EngineTime(seconds: timeout) + EngineTime(seconds: scenario.requestTimeout) {
                        violations.append("seed \(seed) step \(i): getFlowOrDefault took \(took)")
                    }
                    if ends.count != 1 { violations.append("seed \(seed) step \(i): \(ends.count) deliveries") }
                default:
                    break
                }
                if let flow = outcome.flow {
                    switch flow.source {
                    case .network where flow.targetingLost, .defaultAudience where !flow.targetingLost,
                         .fallbackFile where !flow.targetingLost:
                        violations.append("seed \(seed) step \(i): \(flow.source) with targetingLost \(flow.targetingLost)")
                    default: break
                    }
                }
                // Every request a call made (background asset prefetches aside) has ended by the time the call ends.
                for q in report.requests where q.step == i && q.kind != "asset" {
                    guard let qEnd = q.endedAt, qEnd <= end + 1e-9 else {
                        violations.append("seed \(seed) step \(i): \(q.kind) request still open after the call ended")
                        continue
                    }
                }
                checked += 1
            }
        }
        #expect(checked >= 10_000)
        #expect(violations.isEmpty, "\(violations.count) violations, first: \(violations.prefix(5))")
    }
}

@Suite("Interruptions under random faults", .heavy)
struct InterruptionPropertyTests {
    @Test("3,000 random schedules with cancel, identify and restart: every call ends exactly once")
    func interruptions() {
        var violations: [String] = []
        var interrupted = 0
        for seed in UInt64(20_001)...23_000 {
            var r = PropertyTests.Rng(seed)
            var scenario = PropertyTests.randomScenario(&r)
            let target = r.int(scenario.steps.count)
            let at = scenario.steps[target].at + r.double(0, 6)
            switch r.int(3) {
            case 0: scenario.steps.append(Step(at: at, call: .cancel(step: target)))
            case 1: scenario.steps.append(Step(at: at, call: .identify(ScenarioProfile(id: "other", attribution: ["appleAds": r.double(0, 8)]))))
            default: scenario.steps.append(Step(at: at, call: .restart))
            }
            let report = ScenarioRunner(scenario).run()
            for (i, step) in scenario.steps.enumerated() {
                guard let outcome = report.results[i].outcome, let end = report.results[i].completedAt else {
                    violations.append("seed \(seed) step \(i): never ended")
                    continue
                }
                let ends = report.events.filter { $0.step == i && ($0.event.name == .fetchEnd || $0.event.name == .preloadEnd) }
                switch step.call {
                case .getFlow, .getFlowOrDefault:
                    if ends.count != 1 { violations.append("seed \(seed) step \(i): \(ends.count) fetch.end") }
                    if let e = outcome.error, [.operationInterrupted, .profileWasChanged].contains(e.code) { interrupted += 1 }
                    if let e = outcome.error, [.operationInterrupted, .profileWasChanged].contains(e.code),
                       EngineTime(seconds: end) != EngineTime(seconds: at) {
                        violations.append("seed \(seed) step \(i): interrupted at \(end), not at \(at)")
                    }
                default: break
                }
                for q in report.requests where q.step == i && q.kind != "asset" && q.kind != "profile" {
                    if (q.endedAt ?? .infinity) > end + 1e-9 { violations.append("seed \(seed) step \(i): request open after the end") }
                }
            }
        }
        #expect(violations.isEmpty, "\(violations.count) violations, first: \(violations.prefix(5))")
        #expect(interrupted >= 300, "only \(interrupted) calls were interrupted")
    }
}
