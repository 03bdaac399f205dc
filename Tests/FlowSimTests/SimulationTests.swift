import FlowFetch
import FlowJSON
import Foundation
import Testing
@testable import FlowSim

/// A small population on one network profile, for the sanity tests.
private func population(_ network: NetworkProfile, attributionDelay: Distribution = .fixed(1), attributionShare: Double = 0.5,
                        returning: Double = 0.3, fallbackFile: Bool = true) -> Population {
    Population(networks: [("test", 1)], profiles: ["test": network], attributionShare: attributionShare,
               attributionDelay: attributionDelay, returningShare: returning, cacheAge: .logNormal(median: 3600, p95: 86_400),
               placements: [PlacementNeed(id: "onboarding", at: .fixed(0), sessions: .new),
                            PlacementNeed(id: "main_paywall", at: .logNormal(median: 4, p95: 30), share: 0.8)],
               fallbackFile: fallbackFile)
}

private func decode(_ json: JSONValue) throws(JSONInputError) -> SimulationConfig {
    try SimulationConfig.decode(JSONCursor(json))
}

private func decodeError(_ json: JSONValue) -> JSONInputError? {
    do { _ = try decode(json); return nil } catch { return error }
}

@Suite("Strategy lab")
struct SimulationTests {
    @Test("With every request hanging, every call ends within its budget and only cache, fallback file or nothing is shown")
    func everyRequestHangs() {
        let hangs = NetworkProfile(median: 0.3, p95: 1, hang: 1)
        var strategies = Strategy.standard
        strategies.append(Strategy(name: "preload T=0.5 (clamped to 1)", .preloadThenCache(loadTimeout: 0.5, policy: .returnCacheDataElseLoad)))
        let config = SimulationConfig(population: population(hangs), strategies: strategies)
        let result = Simulation(config: config).run(sessions: 300, seed: 7)
        for s in result.strategies {
            #expect(s.tally.displays > 250, "\(s.strategy.name)")
            let bound = s.strategy.timeToFlowBound(neededAt: 0)
            #expect(s.timeToFlowMax <= bound + 1e-9, "\(s.strategy.name): max \(s.timeToFlowMax) > bound \(bound)")
            // The bound is reached: new users have no cache, so they wait the whole budget.
            #expect(s.timeToFlowMax >= bound * 0.99 - 1e-9 || s.strategy.shape.kind == "waitThenFetch",
                    "\(s.strategy.name): max \(s.timeToFlowMax) far below \(bound)")
            #expect(s.tally.sources[0] == 0 && s.tally.sources[2] == 0, "\(s.strategy.name): \(s.tally.sources)")
            let ships = s.strategy.fallbackFile ?? true
            #expect((s.tally.sources[3] > 0) == ships, "\(s.strategy.name): fallback \(s.tally.sources[3])")
            #expect((s.tally.sources[4] > 0) == !ships, "\(s.strategy.name): none \(s.tally.sources[4])")
            #expect(s.tally.sources[1] > 0, "\(s.strategy.name): returning sessions show their cache")
        }
    }

    @Test("On a perfect network, strategies that wait for attribution always show the right audience")
    func perfectNetworkTargeting() {
        let perfect = NetworkProfile(median: 0.2, p95: 0.2)
        let config = SimulationConfig(population: population(perfect, attributionDelay: .fixed(1)), strategies: [
            Strategy(name: "wait 2 s", .waitThenFetch(delay: 2, policy: .reloadRevalidatingCacheData, loadTimeout: 5, at: .needed)),
            Strategy(name: "orDefault 5 s", .orDefault(timeout: 5)),
            Strategy(name: "naive at launch", .waitThenFetch(delay: 0, policy: .reloadRevalidatingCacheData, loadTimeout: 60, at: .launch)),
        ])
        let result = Simulation(config: config).run(sessions: 400, seed: 3)
        for s in result.strategies.prefix(2) {
            #expect(s.tally.targetingCorrect == s.tally.displays, "\(s.strategy.name): \(s.tally.targetingCorrect)/\(s.tally.displays)")
            #expect(s.tally.sources[4] == 0)
        }
        // The control: fetching before attribution shows All Users to attributed users who reach the paywall later.
        let naive = result.strategies[2]
        #expect(naive.tally.targetingCorrect < naive.tally.displays)
    }

    @Test("The same seed gives the same numbers, on one thread or two")
    func deterministic() {
        let lab = Simulation(config: .standard)
        let one = lab.run(sessions: 700, seed: 11, threads: 1)
        let two = lab.run(sessions: 700, seed: 11, threads: 2)
        let again = lab.run(sessions: 700, seed: 11, threads: 2)
        #expect(one.deterministicJSON == two.deterministicJSON)
        #expect(two.deterministicJSON == again.deterministicJSON)
        #expect(one.strategies.map(\.tally) == two.strategies.map(\.tally))
        let other = lab.run(sessions: 700, seed: 12, threads: 1)
        #expect(other.deterministicJSON != one.deterministicJSON)
    }

    @Test("Sessions play the same with or without a sink listening (machines skip events, nothing else)")
    func eventsChangeNothing() {
        let config = SimulationConfig.standard
        let world = SessionWorld(config: config)
        for index in 0..<100 {
            let plan = SessionPlan(index: index, seed: 5, population: config.population)
            for strategy in config.strategies {
                var quiet = StrategyTally(), heard = StrategyTally()
                world.play(plan, strategy, into: &quiet)
                // A new world (a new engine) that listens, against the one world whose engine is reset
                // for every session.
                let collector = EventCollector(forward: nil)
                SessionWorld(config: config, events: collector).play(plan, strategy, into: &heard)
                #expect(quiet == heard, "session \(index), \(strategy.name)")
                #expect(collector.events.isEmpty == (heard.calls == 0))
            }
        }
    }

    @Test("Each simulated session's events share one session id, derived from its plan: another session has another, a replay the same")
    func oneSessionIDPerSimulatedSession() {
        let config = SimulationConfig.standard
        let collector = EventCollector(forward: nil)
        let world = SessionWorld(config: config, events: collector)
        let strategy = config.strategies[0]
        var perSession: [[SessionID?]] = []
        for index in 0..<20 {
            let plan = SessionPlan(index: index, seed: 5, population: config.population)
            var tally = StrategyTally()
            let before = collector.events.count
            world.play(plan, strategy, into: &tally)
            perSession.append(collector.events[before...].map(\.session))
        }
        let played = perSession.filter { !$0.isEmpty }
        #expect(played.count >= 10)
        for sessions in played { #expect(sessions.allSatisfy { $0 != nil && $0 == sessions.first }) }
        #expect(Set(played.compactMap { $0.first ?? nil }).count == played.count)
        // The same plan again (the one world, its engine reset) gives the same session.
        let again = EventCollector(forward: nil)
        var tally = StrategyTally()
        SessionWorld(config: config, events: again).play(SessionPlan(index: 0, seed: 5, population: config.population), strategy, into: &tally)
        #expect(again.events.first?.session == perSession[0].first ?? nil)
    }

    @Test("Different seeds agree within their confidence intervals")
    func seedsAgree() {
        let lab = Simulation(config: .standard)
        let a = lab.run(sessions: 2_000, seed: 101, threads: 2)
        let b = lab.run(sessions: 2_000, seed: 202, threads: 2)
        func overlap(_ x: (low: Double, high: Double), _ y: (low: Double, high: Double)) -> Bool {
            x.low <= y.high + 1e-9 && y.low <= x.high + 1e-9
        }
        for (x, y) in zip(a.strategies, b.strategies) {
            let name = x.strategy.name
            #expect(overlap(x.targetingCorrectInterval, y.targetingCorrectInterval), "\(name) targeting")
            for i in 0..<5 {
                #expect(overlap(Confidence.wilson(x.tally.sources[i], x.tally.displays), Confidence.wilson(y.tally.sources[i], y.tally.displays)),
                        "\(name) source \(StrategyTally.sourceNames[i])")
            }
            let rx = x.requestsPerSession, ry = y.requestsPerSession
            #expect(overlap((rx.low, rx.high), (ry.low, ry.high)), "\(name) requests")
            #expect(overlap(x.tally.timeToFlow.quantileInterval(0.5), y.tally.timeToFlow.quantileInterval(0.5)), "\(name) p50")
            #expect(overlap(x.tally.timeToFlow.quantileInterval(0.95), y.tally.timeToFlow.quantileInterval(0.95)), "\(name) p95")
        }
    }

    @Test("--json has exactly the fields of simulate.md, plus the documented extras")
    func jsonShape() throws {
        let result = Simulation(config: .standard).run(sessions: 200, seed: 1)
        let parsed = try JSON5.parse(result.json.jsonText)
        guard case .object(let root) = parsed else { Issue.record("not an object"); return }
        #expect(Set(root.keys) == ["seed", "sessions", "strategies", "throughput"])
        #expect(root["seed"] == 1 && root["sessions"] == 200)
        #expect(root["throughput"]?["callsPerSecond"]?.numberValue.map { $0 > 0 } == true)
        let strategies = root["strategies"]?.arrayValue ?? []
        #expect(strategies.count == Strategy.standard.count)
        for s in strategies {
            guard case .object(let o) = s else { Issue.record("strategy not an object"); continue }
            #expect(Set(o.keys) == ["name", "targetingCorrect", "timeToFlow", "sources", "requestsPerSession", "kind", "displays", "ci"])
            #expect(Set(o["timeToFlow"]?.objectValue?.keys ?? [:].keys) == ["p50", "p95", "p99", "max"])
            let sources = o["sources"]?.objectValue ?? [:]
            #expect(Set(sources.keys) == ["network", "cache", "defaultAudience", "fallbackFile", "none"])
            let sum = sources.values.compactMap(\.numberValue).reduce(0, +)
            #expect(abs(sum - 1) < 1e-5)
            let t = o["timeToFlow"]
            let p50 = t?["p50"]?.numberValue ?? -1, p95 = t?["p95"]?.numberValue ?? -1
            let p99 = t?["p99"]?.numberValue ?? -1, max = t?["max"]?.numberValue ?? -1
            #expect(0 <= p50 && p50 <= p95 && p95 <= p99 && p99 <= max)
            let ci = o["ci"]?["targetingCorrect"]?.arrayValue?.compactMap(\.numberValue) ?? []
            let tc = o["targetingCorrect"]?.numberValue ?? -1
            #expect(ci.count == 2 && ci[0] <= tc && tc <= ci[1])
        }
    }

    @Test("An empty section is the built-in config, and config/flowscope.json5 spells out the same defaults")
    func defaults() throws {
        #expect(try decode([:]) == .standard)
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("config/flowscope.json5")
        let text = try String(contentsOf: file, encoding: .utf8)
        let root = try JSON5.parse(text)
        let section = try #require(root["simulate"])
        let config = try SimulationConfig.decode(JSONCursor(section, path: "$.simulate"))
        #expect(config == .standard)
    }

    @Test("Decoding reads every shape and fills the rest with defaults")
    func decodesShapes() throws {
        let config = try decode([
            "sessions": 500, "seed": 9,
            "population": ["networks": ["rural": 2, "wifi": 1],
                           "profiles": ["rural": ["median": 1.2, "p95": 6, "hang": 0.04]],
                           "attribution": ["share": 0.5], "fallbackFile": false],
            "strategies": [
                ["name": "a", "atPaywall": ["fetchPolicy": "maxAge:3600", "loadTimeout": 4]],
                ["name": "b", "waitThenFetch": ["delay": 2, "fetchAt": "launch"], "fallbackFile": true],
                ["name": "c", "orDefault": ["timeout": 3], "requestTimeout": 8],
                ["name": "d", "preloadThenCache": ["loadTimeout": 3,
                                                   "fetchPolicy": ["returnCacheDataIfNotExpiredElseLoad": ["maxAge": 60]]]],
            ],
        ])
        #expect(config.sessions == 500 && config.seed == 9)
        #expect(config.population.networks.map(\.name) == ["rural", "wifi"])
        #expect(config.population.profiles["rural"] == NetworkProfile(median: 1.2, p95: 6, hang: 0.04))
        #expect(config.population.attributionShare == 0.5 && config.population.attributionDelay == Population.standard.attributionDelay)
        #expect(config.population.fallbackFile == false && config.population.placements == Population.standard.placements)
        #expect(config.strategies.map(\.shape) == [
            .atPaywall(policy: .returnCacheDataIfNotExpiredElseLoad(maxAge: 3600), loadTimeout: 4, at: .needed),
            .waitThenFetch(delay: 2, policy: .reloadRevalidatingCacheData, loadTimeout: 5, at: .launch),
            .orDefault(timeout: 3),
            .preloadThenCache(loadTimeout: 3, policy: .returnCacheDataIfNotExpiredElseLoad(maxAge: 60)),
        ])
        #expect(config.strategies[1].fallbackFile == true && config.strategies[2].requestTimeout == 8)
        // A config's strategies read back from their JSON.
        let again = try decode(["strategies": .array(config.strategies.map(\.json))])
        #expect(again.strategies == config.strategies)
    }

    @Test("Bad input is an error naming the JSON path and what was expected", arguments: [
        (["colour": 1] as JSONValue, "$.colour", "unknown key"),
        (["population": ["networks": ["wifi": 1, "5g": 1]]], "$.population.networks[\"5g\"]", "unknown network profile"),
        (["population": ["profiles": ["x": ["median": 2, "p95": 1]]]], "$.population.profiles.x.p95", "p95 >= the median"),
        (["population": ["attribution": ["share": 1.5]]], "$.population.attribution.share", "between 0 and 1"),
        (["population": ["placements": [["id": "p", "at": "soon"]]]], "$.population.placements[0].at", "a number of seconds"),
        (["population": ["placements": [["id": "p", "at": 1, "sessions": "old"]]]], "$.population.placements[0].sessions", "\"new\""),
        (["strategies": [["name": "x"]]], "$.strategies[0]", "expected one of the keys"),
        (["strategies": [["name": "x", "orDefault": ["timeout": 1], "atPaywall": [:]]]], "$.strategies[0]", "exactly one"),
        (["strategies": [["name": "x", "atPaywall": ["fetchPolicy": "always"]]]], "$.strategies[0].atPaywall.fetchPolicy", "maxAge:SECONDS"),
        (["strategies": [["name": "x", "atPaywall": ["loadTimout": 3]]]], "$.strategies[0].atPaywall.loadTimout", "unknown key"),
        (["strategies": [["name": "x", "waitThenFetch": ["delay": -1]]]], "$.strategies[0].waitThenFetch.delay", "seconds from 0 to"),
        (["strategies": [["name": "x", "orDefault": ["timeout": 1]], ["name": "x", "orDefault": ["timeout": 2]]]],
         "$.strategies[1].name", "duplicate"),
        (["sessions": 0], "$.sessions", "positive integer"),
    ] as [(JSONValue, String, String)])
    func decodingErrors(input: JSONValue, path: String, message: String) {
        let error = decodeError(input)
        #expect(error?.path == path, "\(error?.description ?? "no error")")
        #expect(error?.message.contains(message) == true, "\(error?.description ?? "no error")")
    }

    @Test("The report renders a table with the best values marked and a self-contained HTML page")
    func renders() {
        let result = Simulation(config: .standard).run(sessions: 150, seed: 5)
        let table = result.table()
        for s in Strategy.standard { #expect(table.contains(s.name)) }
        #expect(table.contains("*"))
        #expect(table.contains("95% CI"))
        let html = result.html()
        #expect(html.hasPrefix("<!doctype html>"))
        #expect(html.contains("<svg") && html.contains("<style>"))
        #expect(!html.contains("<script") && !html.contains("http://") && !html.contains("https://"))
        let summary = result.runSummary(id: "sim-5")
        #expect(summary["kind"] == "simulation" && summary["strategies"]?.arrayValue?.count == Strategy.standard.count)
    }

    @Test("Histogram quantiles are observed values within 0.5% and merge in any order")
    func histogram() {
        var rng = SimulationRandom(seed: 1)
        var values: [Double] = []
        var a = DurationHistogram(), b = DurationHistogram(), all = DurationHistogram()
        for i in 0..<5_000 {
            let v = i % 10 == 0 ? 0 : exp(rng.normal()) * 0.5
            values.append(v)
            all.add(v)
            if i % 2 == 0 { a.add(v) } else { b.add(v) }
        }
        var ab = a; ab.merge(b)
        var ba = b; ba.merge(a)
        #expect(ab == ba && ab == all)
        // The buckets kept grow at either end: descending and ascending orders, and merges into and
        // from an empty histogram, hold the same contents.
        var descending = DurationHistogram(), ascending = DurationHistogram(), fromEmpty = DurationHistogram()
        for v in values.sorted(by: >) { descending.add(v) }
        for v in values.sorted() { ascending.add(v) }
        fromEmpty.merge(all)
        var withEmpty = all; withEmpty.merge(DurationHistogram())
        #expect(descending == all && ascending == all && fromEmpty == all && withEmpty == all)
        #expect(descending.quantile(0.5) == all.quantile(0.5) && descending.quantile(0.99) == all.quantile(0.99))
        // Far-apart histograms merged either way: the gap between them is filled, nothing is lost.
        var low = DurationHistogram(), high = DurationHistogram()
        for i in 1...50 { low.add(0.001 * Double(i)); high.add(1_000 + Double(i)) }
        var lh = low; lh.merge(high)
        var hl = high; hl.merge(low)
        #expect(lh == hl && lh.count == 100 && lh.quantile(0.5) == low.max && lh.quantile(1) == high.max)
        // Few values far apart keep only their buckets; a cluster keeps its whole range, and a value
        // far from it goes back to the buckets held. The same contents kept either way are equal.
        var spread = DurationHistogram()
        for i in 0..<10 { spread.add(0.001 * pow(10, Double(i) / 2)) }
        #expect(spread.storage == (10, false) && spread.quantile(0.5) == 0.001 * pow(10, 2))
        var cluster = DurationHistogram(), outlierFirst = DurationHistogram()
        let clustered = (0..<40).map { 1 + Double($0) * 0.01 }
        for v in clustered { cluster.add(v) }
        #expect(cluster.storage.dense)
        var near = cluster; near.add(1.6)
        #expect(near.storage.dense)
        var far = cluster; far.add(500)
        outlierFirst.add(500)
        for v in clustered { outlierFirst.add(v) }
        #expect(!far.storage.dense && far.storage.buckets < 50 && !outlierFirst.storage.dense)
        #expect(near != cluster && far == outlierFirst && far.hashValue == outlierFirst.hashValue)
        #expect(far.value(rank: 20) == cluster.value(rank: 20) && far.quantile(1) == 500)
        var sparseIntoDense = cluster; sparseIntoDense.merge(spread)
        var denseIntoSparse = spread; denseIntoSparse.merge(cluster)
        #expect(sparseIntoDense == denseIntoSparse && sparseIntoDense.count == 50)
        #expect(sparseIntoDense.quantile(0.5) == denseIntoSparse.quantile(0.5))
        values.sort()
        for q in [0.05, 0.5, 0.95, 0.99] {
            let exact = values[Int((q * Double(values.count)).rounded(.up)) - 1]
            let approx = all.quantile(q)
            #expect(values.contains(approx))
            #expect(abs(approx - exact) <= exact * 0.006, "q \(q): \(approx) vs \(exact)")
        }
        #expect(all.max == values.last)
    }

    @Test("Wilson intervals contain the share and shrink with more samples")
    func wilson() {
        let small = Confidence.wilson(9, 10), large = Confidence.wilson(900, 1000)
        #expect(small.low < 0.9 && 0.9 < small.high && small.high <= 1)
        #expect(large.high - large.low < small.high - small.low)
        let zero = Confidence.wilson(0, 50)
        #expect(zero.low == 0 && zero.high > 0)
    }
}

@Suite("Strategy-lab config times and durations")
struct SimulationConfigTimeLimitTests {
    /// The `simulate` section `text` (JSON5), decoded as the config file's.
    func decodeSection(_ text: String) throws(JSONInputError) -> SimulationConfig {
        try SimulationConfig.decode(JSONCursor(JSON5.parse(text), path: "$.simulate"))
    }

    static let from0 = "from 0 to 1000000000", positive = "> 0 and <= 1000000000"

    @Test("every seconds-valued key beyond 10^9 s is an error naming its JSON path and the allowed range", arguments: [
        ("{population: {profiles: {x: {median: 1e308, p95: 1e308}}}}", "$.simulate.population.profiles.x.median", positive),
        ("{population: {profiles: {x: {median: 1, p95: 1000000001}}}}", "$.simulate.population.profiles.x.p95", positive),
        ("{population: {attribution: {delay: 1e308}}}", "$.simulate.population.attribution.delay", from0),
        ("{population: {attribution: {delay: {median: 1e308, p95: 1e308}}}}", "$.simulate.population.attribution.delay.median", positive),
        ("{population: {attribution: {delay: {median: 1, p95: 1e308}}}}", "$.simulate.population.attribution.delay.p95", positive),
        ("{population: {returning: {cacheAge: 1000000001}}}", "$.simulate.population.returning.cacheAge", from0),
        ("{population: {returning: {cacheAge: {median: 86400, p95: 1e308}}}}", "$.simulate.population.returning.cacheAge.p95", positive),
        ("{population: {placements: [{id: \"p\", at: 1e308}]}}", "$.simulate.population.placements[0].at", from0),
        ("{population: {placements: [{id: \"p\", at: {median: 1e308, p95: 1e308}}]}}", "$.simulate.population.placements[0].at.median", positive),
        ("{strategies: [{name: \"s\", atPaywall: {loadTimeout: 1e308}}]}", "$.simulate.strategies[0].atPaywall.loadTimeout", from0),
        ("{strategies: [{name: \"s\", preloadThenCache: {loadTimeout: 1000000001}}]}", "$.simulate.strategies[0].preloadThenCache.loadTimeout", from0),
        ("{strategies: [{name: \"s\", waitThenFetch: {delay: 1e308}}]}", "$.simulate.strategies[0].waitThenFetch.delay", from0),
        ("{strategies: [{name: \"s\", waitThenFetch: {delay: 1, loadTimeout: 1e308}}]}", "$.simulate.strategies[0].waitThenFetch.loadTimeout", from0),
        ("{strategies: [{name: \"s\", orDefault: {timeout: 1e308}}]}", "$.simulate.strategies[0].orDefault.timeout", from0),
        ("{strategies: [{name: \"s\", orDefault: {timeout: 3}, requestTimeout: 1e308}]}", "$.simulate.strategies[0].requestTimeout", positive),
        ("{strategies: [{name: \"s\", atPaywall: {fetchPolicy: {returnCacheDataIfNotExpiredElseLoad: {maxAge: 1e308}}}}]}",
         "$.simulate.strategies[0].atPaywall.fetchPolicy.returnCacheDataIfNotExpiredElseLoad.maxAge", from0),
        ("{strategies: [{name: \"s\", atPaywall: {fetchPolicy: \"maxAge:1e308\"}}]}", "$.simulate.strategies[0].atPaywall.fetchPolicy",
         "\"maxAge:SECONDS\" with a number of seconds \(from0)"),
    ])
    func beyondTheLimit(section: String, path: String, range: String) {
        do {
            _ = try decodeSection(section)
            Issue.record("accepted: \(section)")
        } catch {
            let expected = range.hasPrefix("\"") ? "\(path): expected \(range), got" : "\(path): expected a number of seconds \(range), got"
            #expect(error.description.hasPrefix(expected), "\(section) -> \(error.description)")
        }
    }

    @Test("10^9 s is accepted for every key, and a run at the limit reports finite numbers")
    func atTheLimit() throws {
        let config = try decodeSection("""
            { sessions: 200,
              population: { profiles: { far: { median: 1000000000, p95: 1000000000 } }, networks: { far: 1, wifi: 1 },
                            attribution: { delay: 1000000000 }, returning: { cacheAge: { median: 1000000000, p95: 1000000000 } },
                            placements: [ { id: "p", at: 1000000000 }, { id: "q", at: { median: 1, p95: 1000000000 } } ] },
              strategies: [ { name: "a", atPaywall: { loadTimeout: 1000000000, fetchPolicy: "maxAge:1000000000" } },
                            { name: "b", waitThenFetch: { delay: 1000000000, loadTimeout: 1000000000 } },
                            { name: "c", orDefault: { timeout: 1000000000 }, requestTimeout: 1000000000 } ] }
            """)
        #expect(config.population.placements[0].at == .fixed(1_000_000_000))
        let lab = StrategyLab.run(config: config)
        let text = lab.json.jsonText
        #expect(!text.contains("null") && !text.contains("inf") && !text.contains("nan"), "\(text.prefix(2000))")
    }

    @Test("a log-normal's draws stay within 10^9 s, however far its p95 is above its median")
    func drawsAreBounded() {
        let wide = Distribution.logNormal(median: 1e-9, p95: 1e9)
        var rng = SimulationRandom(seed: 1)
        let draws = (0..<20_000).map { _ in wide.sample(&rng) }
        #expect(draws.allSatisfy { $0.isFinite && $0 >= 0 && $0 <= 1_000_000_000 })
        #expect(draws.contains(1_000_000_000), "the tail is cut at the limit")
    }
}
