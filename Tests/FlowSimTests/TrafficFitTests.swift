import FlowEvents
import FlowFetch
import FlowJSON
import Foundation
import Testing
@testable import FlowSim

/// A synthetic recording whose true distribution is known: latency log-normal(median, sigma), every
/// request given `budget` seconds (a longer latency is recorded as a timeout at the budget), and a
/// share of transport failures after the latency.
struct SyntheticTrace {
    var placement: String
    var median: Double
    var sigma: Double
    var budget: Double
    var transport: Double = 0
    var requests: Int
    var seed: UInt64 = 7

    /// P(latency > budget).
    var trueTimeoutShare: Double { NormalDistribution.survival((log(budget) - log(median)) / sigma) }
    func trueQuantile(_ q: Double) -> Double { median * exp(sigma * NormalDistribution.inverseCDF(q)) }

    /// request.start and request.end envelopes, as the engine writes them.
    func envelopes(startingAt seq: UInt64 = 1) -> [Envelope] {
        var rng = SimulationRandom(seed: seed)
        var out: [Envelope] = []
        var t = 0.0
        for i in 0..<requests {
            let latency = median * exp(sigma * rng.normal())
            let failed = rng.chance(transport)
            let trace = TraceID(high: seed | 1, low: UInt64(i + 1))
            let span = SpanID(trace: trace, index: 1)
            out.append(Envelope(seq: seq + UInt64(out.count), ts: 1_800_000_000 + t, t: t, run: "live", trace: trace, span: span,
                                name: .requestStart, placement: placement, attrs: ["kind": "targeted", "timeout": .number(budget)]))
            let timedOut = latency > budget
            let duration = ((timedOut ? budget : latency) * 1e6).rounded() / 1e6
            let outcome: JSONValue = timedOut ? "timeout" : failed ? "reset" : "ok"
            out.append(Envelope(seq: seq + UInt64(out.count), ts: 1_800_000_000 + t + duration, t: t + duration, run: "live",
                                trace: trace, span: span, name: .requestEnd, placement: placement,
                                attrs: ["kind": "targeted", "outcome": outcome, "duration": .number(duration), "bytes": 0]))
            t += 0.01
        }
        return out
    }
}

@Suite struct TrafficFitTests {
    @Test func theFitRecoversTheLatencyAndTimeoutShareOfASyntheticTraceWhoseDistributionIsKnown() {
        let truth = SyntheticTrace(placement: "main_paywall", median: 0.8, sigma: 0.6, budget: 1.5, transport: 0.03, requests: 4_000)
        let fit = TrafficFit(envelopes: truth.envelopes())
        let f = try! #require(fit.fits["main_paywall"]?["targeted"])
        #expect(f.requests == 4_000)
        #expect(abs(f.timeoutShare - truth.trueTimeoutShare) < 0.05)
        #expect(abs(f.quantile(0.5)! / truth.trueQuantile(0.5) - 1) < 0.05)
        #expect(abs(f.quantile(0.95)! / truth.trueQuantile(0.95) - 1) < 0.10)
        #expect(abs(f.sigma! - truth.sigma) < 0.05)
        // Transport failures happen only to requests answered in time: their rate among answered ones.
        let profile = try! #require(f.profile)
        #expect(abs(profile.reset - truth.transport) < 0.015)
        #expect(profile.hang == 0)
        #expect(fit.warnings.isEmpty)
    }

    @Test func timeoutsAreCensoredAtTheirBudgetNotDropped() {
        // A budget below the median: over half the requests time out.
        let truth = SyntheticTrace(placement: "p", median: 1.2, sigma: 0.5, budget: 1.0, requests: 3_000, seed: 11)
        let envelopes = truth.envelopes()
        let fit = try! #require(TrafficFit(envelopes: envelopes).fits["p"]?["targeted"])
        #expect(fit.timeoutShare > 0.5)
        #expect(abs(fit.quantile(0.5)! / truth.trueQuantile(0.5) - 1) < 0.08)
        #expect(abs(fit.quantile(0.95)! / truth.trueQuantile(0.95) - 1) < 0.12)
        // The same requests with the timeouts dropped: the fit would be far off (so the checks above
        // fail for an implementation that drops them).
        let answered = envelopes.filter { $0.attrs["outcome"]?.stringValue != "timeout" }
        let dropped = try! #require(TrafficFit(envelopes: answered).fits["p"]?["targeted"])
        #expect(abs(dropped.quantile(0.5)! / truth.trueQuantile(0.5) - 1) > 0.25)
        // Kaplan-Meier cannot see the p95 behind the budget: it says so rather than guessing.
        #expect(fit.kaplanMeierP95 == nil)
        #expect(fit.kaplanMeierP50 == nil)
    }

    @Test func kaplanMeierSteps() {
        // Times 1, 2+, 3, 4, 5+ (+ = censored): S(1) = 4/5, S(3) = 4/5 * 2/3, S(4) = that * 1/2.
        let km = KaplanMeier([(1, false), (2, true), (3, false), (4, false), (5, true)])
        #expect(km.steps.map(\.time) == [1, 3, 4])
        #expect(abs(km.steps[1].survival - 8.0 / 15) < 1e-12)
        #expect(abs(km.steps[2].survival - 4.0 / 15) < 1e-12)
        #expect(km.quantile(0.2) == 1)
        #expect(km.quantile(0.5) == 4)
        #expect(km.quantile(0.9) == nil)
    }

    @Test func aPlacementWithTooFewRequestsGetsAWarningAndNoRecommendation() {
        let many = SyntheticTrace(placement: "main_paywall", median: 0.5, sigma: 0.5, budget: 3, requests: 200)
        let few = SyntheticTrace(placement: "onboarding", median: 0.5, sigma: 0.5, budget: 3, requests: 12, seed: 3)
        let fit = TrafficFit(envelopes: many.envelopes() + few.envelopes(startingAt: 1_000))
        #expect(fit.hasEnoughData("main_paywall"))
        #expect(!fit.hasEnoughData("onboarding"))
        let warning = try! #require(fit.warnings.first { $0.contains("onboarding") })
        #expect(warning.contains("12 recorded flow requests") && warning.contains("at least \(TrafficFit.minimumRequests)"))
        let lab = StrategyLab.run(config: SimulationConfig(sessions: 400), fit: fit)
        #expect(lab.recommendation(for: "main_paywall") != nil)
        #expect(lab.recommendation(for: "onboarding") == nil)
        #expect(lab.recommendationJSON["onboarding"] == nil)
        #expect(lab.json["warnings"]?.arrayValue?.count == fit.warnings.count)
    }

    @Test func theFittedPopulationPlaysEachPlacementOnItsOwnNetwork() {
        let slow = SyntheticTrace(placement: "main_paywall", median: 2.0, sigma: 0.3, budget: 30, requests: 300)
        let fast = SyntheticTrace(placement: "onboarding", median: 0.1, sigma: 0.3, budget: 30, requests: 300, seed: 5)
        let fit = TrafficFit(envelopes: slow.envelopes() + fast.envelopes(startingAt: 10_000))
        let population = fit.population(from: .standard)
        #expect(population.placements.map(\.id) == ["onboarding", "main_paywall"])
        #expect(abs(population.requestNetworks["main_paywall"]!["targeted"]!.median / 2.0 - 1) < 0.1)
        let atPaywall = Strategy(name: "atPaywall T=10", .atPaywall(policy: .reloadRevalidatingCacheData, loadTimeout: 10, at: .needed))
        var config = SimulationConfig(population: population, strategies: [atPaywall], sessions: 2_000)
        config.population.returningShare = 0
        let tally = Simulation(config: config).run().strategies[0].tally
        let onboardingP50 = tally.placements[0].timeToFlow.quantile(0.5)
        let paywallP50 = tally.placements[1].timeToFlow.quantile(0.5)
        #expect(abs(onboardingP50 / 0.1 - 1) < 0.15)
        #expect(abs(paywallP50 / 2.0 - 1) < 0.15)
    }

    @Test func theAttributionDelayIsFittedFromAttributionAppliedEvents() {
        var rng = SimulationRandom(seed: 9)
        var events = SyntheticTrace(placement: "p", median: 0.5, sigma: 0.5, budget: 3, requests: 100).envelopes()
        for i in 0..<500 {
            let trace = TraceID(high: 99, low: UInt64(i + 1))
            events.append(Envelope(seq: 5_000 + UInt64(i), ts: 1_800_000_000, t: 1, run: "live", trace: trace,
                                   span: SpanID(trace: trace, index: 0), name: .attributionApplied, placement: nil,
                                   attrs: ["source": "appleAds", "after": .number(2.0 * exp(0.4 * rng.normal()))]))
        }
        let fit = TrafficFit(envelopes: events)
        guard case .logNormal(let median, let p95)? = fit.attributionDelay else {
            Issue.record("no attribution delay fitted")
            return
        }
        #expect(abs(median / 2.0 - 1) < 0.05)
        #expect(abs(p95 / (2.0 * exp(0.4 * 1.6448536)) - 1) < 0.08)
        #expect(fit.population(from: .standard).attributionDelay == fit.attributionDelay!)
    }
}

@Suite struct StrategySweepTests {
    @Test func aSweepParsesIntoItsValues() throws {
        let sweep = try SweepParameter.parse("loadTimeout=1:10:0.5").get()
        #expect(sweep.name == "loadTimeout")
        #expect(sweep.values.count == 19)
        #expect(sweep.values.first == 1 && sweep.values.last == 10 && sweep.values[3] == 2.5)
        #expect(try SweepParameter.parse("timeout=2:2:1").get().values == [2])
        // At the limit of 10^9 s, and a tiny STEP where FROM == TO: one value each.
        #expect(try SweepParameter.parse("loadTimeout=999999990:1000000000:5").get().values == [999_999_990, 999_999_995, 1_000_000_000])
        #expect(try SweepParameter.parse("delay=3:3:1e-300").get().values == [3])
        #expect(try SweepParameter.parse("requestTimeout=0.5:1:0.5").get().values == [0.5, 1])
    }

    @Test(arguments: [
        ("loadTimeout", "NAME=FROM:TO:STEP"),
        ("speed=1:2:1", "unknown parameter \"speed\""),
        ("loadTimeout=1:x:1", "three numbers"),
        ("loadTimeout=0x1:0x10:0x1", "three numbers"),
        ("loadTimeout=1:inf:1", "three numbers"),
        ("loadTimeout=5:1:1", "must be >= FROM"),
        ("loadTimeout=1:5:0", "STEP must be > 0"),
        ("loadTimeout=-1:5:1", "loadTimeout: FROM must be a number of seconds from 0 to 1000000000, got -1"),
        ("loadTimeout=0:1000:1", "gives 1001 values; at most 200"),
        ("loadTimeout=1:1e308:1e306", "loadTimeout: TO must be a number of seconds from 0 to 1000000000, got 1e308"),
        ("timeout=1000000001:1000000002:1", "timeout: FROM must be a number of seconds from 0 to 1000000000, got 1000000001"),
        ("delay=0:1000000001:10000000", "delay: TO must be a number of seconds from 0 to 1000000000"),
        ("requestTimeout=0:5:1", "requestTimeout: FROM must be a number of seconds > 0 and <= 1000000000, got 0"),
        ("requestTimeout=1:2e9:1e8", "requestTimeout: TO must be a number of seconds > 0 and <= 1000000000, got 2e9"),
        // A tiny STEP is counted without building the values (it used to trap converting the count to Int).
        ("loadTimeout=1:10:1e-300", "loadTimeout=1:10:1e-300 gives more than 10^15 values; at most 200 (use a larger STEP)"),
        ("loadTimeout=0:1000000000:5e-324", "gives more than 10^15 values; at most 200"),
        ("loadTimeout=0:1:0.000001", "gives 1000001 values; at most 200"),
    ])
    func aBadSweepSaysWhatWasExpected(_ text: String, _ expected: String) {
        guard case .failure(let error) = SweepParameter.parse(text) else {
            Issue.record("\(text) parsed")
            return
        }
        #expect(error.message.contains(expected), "\(error.message)")
    }

    @Test func theRecommendationMaximisesTargetingUnderTheP95Bound() throws {
        let sweep = try SweepParameter.parse("loadTimeout=1:4:1").get()
        let lab = StrategyLab.run(config: SimulationConfig(sessions: 300), sweep: sweep, maxP95: 3)
        // Every strategy with a loadTimeout is played at each value; orDefault once.
        #expect(lab.result.strategies.count == 5 * 4 + 2)
        for (p, placement) in lab.placements.enumerated() {
            let (best, meets) = try #require(lab.recommendation(for: placement))
            #expect(meets)
            #expect(best.p95 <= 3)
            for k in lab.variants.indices {
                let other = lab.point(variant: k, placement: p)
                if other.p95 <= 3 { #expect(other.targetingCorrect <= best.targetingCorrect) }
            }
            let json = try #require(lab.recommendationJSON[placement])
            #expect(json["targetingCorrectCI"]?.arrayValue?.count == 2)
            #expect(json["timeToFlow"]?["p95CI"]?.arrayValue?.count == 2)
        }
        let curves = try #require(lab.sweepJSON["placements"]?["main_paywall"]?.arrayValue)
        #expect(curves.count == Strategy.standard.count)
        #expect(curves[1]["points"]?.arrayValue?.map { $0["value"]?.numberValue } == [1, 2, 3, 4])
        let html = lab.html()
        #expect(html.contains("<h3>main_paywall</h3>") && html.contains("class=\"recommended\""))
    }

    @Test func aTightBoundThatNothingMeetsRecommendsTheLowestP95AndSaysSo() throws {
        let lab = StrategyLab.run(config: SimulationConfig(sessions: 500), sweep: try SweepParameter.parse("loadTimeout=2:3:1").get(),
                                  maxP95: 0.001)
        // Onboarding is needed at launch: every strategy waits for the network there.
        let (best, meets) = try #require(lab.recommendation(for: "onboarding"))
        #expect(!meets)
        let lowest = lab.variants.indices.map { lab.point(variant: $0, placement: 0).p95 }.min()
        #expect(best.p95 == lowest)
        #expect(lab.recommendationJSON["onboarding"]?["meetsMaxP95"] == .bool(false))
    }
}
