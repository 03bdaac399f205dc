import FlowFetch
import FlowJSON
import Foundation

/// A strategy parameter and the values to play it at: `--sweep loadTimeout=1:10:0.5`.
public struct SweepParameter: Sendable, Hashable {
    /// The parameters a sweep can vary: `loadTimeout` (atPaywall, preloadThenCache, waitThenFetch),
    /// `timeout` (orDefault), `delay` (waitThenFetch), `requestTimeout` (every shape).
    public static let names = ["loadTimeout", "timeout", "delay", "requestTimeout"]
    /// Most values one sweep may have.
    public static let maxValues = 200

    public var name: String
    public var values: [Double]

    public init(name: String, values: [Double]) { self.name = name; self.values = values }

    /// Parses `NAME=FROM:TO:STEP` (FROM, FROM+STEP, ... up to TO included, at most ``maxValues``
    /// values). FROM and TO are seconds from 0 to ``SecondsLimit/maxSeconds`` (for requestTimeout,
    /// > 0). The error says what was expected, without the flag's name.
    public static func parse(_ text: String) -> Result<SweepParameter, SweepParseError> {
        let expected = "NAME=FROM:TO:STEP, e.g. loadTimeout=1:10:0.5"
        let parts = text.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return .failure(SweepParseError("expected \(expected), got \(quoted(text))")) }
        let name = String(parts[0])
        guard names.contains(name) else {
            return .failure(SweepParseError("unknown parameter \(quoted(name)) (expected one of \(names.joined(separator: ", ")))"))
        }
        let range = parts[1].split(separator: ":", omittingEmptySubsequences: false)
        guard range.count == 3, let from = SecondsLimit.decimal(range[0]), let to = SecondsLimit.decimal(range[1]),
              let step = SecondsLimit.decimal(range[2]),
              from.isFinite, to.isFinite, step.isFinite else {
            return .failure(SweepParseError("expected \(expected) (three numbers after \(name)=), got \(quoted(text))"))
        }
        // The values are a strategy's seconds, with the config's ranges: from 0 (requestTimeout: > 0)
        // to SecondsLimit.maxSeconds.
        let positive = name == "requestTimeout"
        let allowed = positive ? "> 0 and <= \(SecondsLimit.maxText)" : "from 0 to \(SecondsLimit.maxText)"
        for (label, v, text) in [("FROM", from, range[0]), ("TO", to, range[1])]
        where (positive ? v <= 0 : v < 0) || v > SecondsLimit.maxSeconds {
            return .failure(SweepParseError("\(name): \(label) must be a number of seconds \(allowed), got \(text)"))
        }
        guard to >= from else { return .failure(SweepParseError("\(name): TO (\(range[1])) must be >= FROM (\(range[0]))")) }
        guard step > 0 else { return .failure(SweepParseError("\(name): STEP must be > 0, got \(range[2])")) }
        // Counted in Double: a tiny STEP gives more values than an Int holds (or infinitely many).
        let span = ((to - from) / step + 1e-9).rounded(.down)
        guard span < Double(maxValues) else {
            let values = span < 1e15 ? "\(Int(span) + 1) values" : "more than 10^15 values"
            return .failure(SweepParseError("\(name)=\(parts[1]) gives \(values); at most \(maxValues) (use a larger STEP)"))
        }
        let count = Int(span) + 1
        let values = (0..<count).map { i in min(((from + Double(i) * step) * 1e9).rounded() / 1e9, to) }
        return .success(SweepParameter(name: name, values: values))
    }

    private static func quoted(_ s: String) -> String { JSONValue.string(s).jsonText }
}

/// Why a sweep's text cannot be used.
public struct SweepParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

extension Strategy {
    /// This strategy with `parameter` set to `value`, or nil when its shape has no such parameter.
    public func with(_ parameter: String, _ value: Double) -> Strategy? {
        var s = self
        switch (parameter, shape) {
        case ("loadTimeout", .atPaywall(let p, _, let at)): s.shape = .atPaywall(policy: p, loadTimeout: value, at: at)
        case ("loadTimeout", .preloadThenCache(_, let p)): s.shape = .preloadThenCache(loadTimeout: value, policy: p)
        case ("loadTimeout", .waitThenFetch(let d, let p, _, let at)): s.shape = .waitThenFetch(delay: d, policy: p, loadTimeout: value, at: at)
        case ("timeout", .orDefault): s.shape = .orDefault(timeout: value)
        case ("delay", .waitThenFetch(_, let p, let t, let at)): s.shape = .waitThenFetch(delay: value, policy: p, loadTimeout: t, at: at)
        case ("requestTimeout", _): s.requestTimeout = value
        default: return nil
        }
        s.name = "\(name) [\(parameter)=\(JSONValue.number(value).jsonText)]"
        return s
    }

    /// The loadTimeout the strategy plays, if its shape has one.
    public var loadTimeout: Double? {
        switch shape {
        case .atPaywall(_, let t, _), .preloadThenCache(let t, _), .waitThenFetch(_, _, let t, _): t
        case .orDefault: nil
        }
    }
}

/// A strategy-lab run with its recommendation: optionally fitted to recorded traffic
/// (``TrafficFit``) and swept over a parameter (``SweepParameter``). Every variant of every strategy
/// plays the same sessions (common random numbers), so the curves compare like with like.
public struct StrategyLab: Sendable {
    /// One played strategy: which configured strategy, at which value of the sweep (nil: as configured,
    /// for strategies the parameter does not apply to, or without a sweep).
    public struct Variant: Sendable, Hashable {
        public var base: Int
        public var value: Double?
    }

    public var config: SimulationConfig
    public var fit: TrafficFit?
    public var sweep: SweepParameter?
    /// The bound on time-to-flow p95 a recommendation must meet, seconds.
    public var maxP95: Double
    public var result: SimulationResult
    /// Per strategy of `result`, what it is.
    public var variants: [Variant]

    /// Plays `config`'s strategies (each at every value of `sweep` it applies to) on `config`'s
    /// population, or on the population fitted to `fit` when given.
    public static func run(config: SimulationConfig, fit: TrafficFit? = nil, sweep: SweepParameter? = nil, maxP95: Double = 3,
                           sessions: Int? = nil, seed: UInt64? = nil, threads: Int = 1,
                           progress: (@Sendable (Int, Int) -> Void)? = nil) -> StrategyLab {
        var played = config
        if let fit { played.population = fit.population(from: config.population) }
        var variants: [Variant] = []
        var strategies: [Strategy] = []
        for (i, strategy) in config.strategies.enumerated() {
            let swept = sweep.map { s in s.values.compactMap { v in strategy.with(s.name, v).map { (v, $0) } } } ?? []
            if swept.isEmpty {
                variants.append(Variant(base: i, value: nil))
                strategies.append(strategy)
            } else {
                for (v, s) in swept { variants.append(Variant(base: i, value: v)); strategies.append(s) }
            }
        }
        played.strategies = strategies
        let result = Simulation(config: played).run(sessions: sessions, seed: seed, threads: threads, progress: progress)
        return StrategyLab(config: played, fit: fit, sweep: sweep, maxP95: maxP95, result: result, variants: variants,
                           baseStrategies: config.strategies)
    }

    /// The strategies as configured (before the sweep).
    public var baseStrategies: [Strategy]

    /// The placements played, in the population's order.
    public var placements: [String] { config.population.placements.map(\.id) }

    /// Whether `placement` gets a recommendation: always without a fit; with one, when it has enough
    /// recorded requests.
    public func recommends(_ placement: String) -> Bool { fit?.hasEnoughData(placement) ?? true }

    /// One point of a curve: a variant's numbers for one placement, with 95% intervals.
    public struct Point: Sendable {
        public var variant: Int
        public var displays: Int
        public var targetingCorrect: Double
        public var targetingCorrectCI: (low: Double, high: Double)
        public var p95: Double
        public var p95CI: (low: Double, high: Double)
    }

    /// Variant `k`'s numbers for the placement at index `p`.
    public func point(variant k: Int, placement p: Int) -> Point {
        let t = p < result.strategies[k].tally.placements.count ? result.strategies[k].tally.placements[p] : PlacementTally()
        return Point(variant: k, displays: t.displays,
                     targetingCorrect: t.displays > 0 ? Double(t.targetingCorrect) / Double(t.displays) : 0,
                     targetingCorrectCI: Confidence.wilson(t.targetingCorrect, t.displays),
                     p95: t.timeToFlow.quantile(0.95), p95CI: t.timeToFlow.quantileInterval(0.95))
    }

    /// The recommendation for a placement: the variant with the highest targetingCorrect among
    /// those whose time-to-flow p95 is at most ``maxP95`` (ties: the lower p95, then the smaller
    /// value); when none meets the bound, the one with the lowest p95, marked as not meeting it.
    /// nil when the placement gets no recommendation or had no displays.
    public func recommendation(for placement: String) -> (point: Point, meetsBound: Bool)? {
        guard recommends(placement), let p = placements.firstIndex(of: placement) else { return nil }
        let points = variants.indices.map { point(variant: $0, placement: p) }.filter { $0.displays > 0 }
        guard !points.isEmpty else { return nil }
        let feasible = points.filter { $0.p95 <= maxP95 + 1e-9 }
        func value(_ pt: Point) -> Double { variants[pt.variant].value ?? 0 }
        if !feasible.isEmpty {
            let best = feasible.min { a, b in
                if a.targetingCorrect != b.targetingCorrect { return a.targetingCorrect > b.targetingCorrect }
                if a.p95 != b.p95 { return a.p95 < b.p95 }
                return value(a) < value(b)
            }!
            return (best, true)
        }
        return (points.min { $0.p95 != $1.p95 ? $0.p95 < $1.p95 : $0.targetingCorrect > $1.targetingCorrect }!, false)
    }

    private func ci(_ i: (low: Double, high: Double)) -> JSONValue { [.number(round6(i.low)), .number(round6(i.high))] }

    /// The `recommendation` object of `--json`: per placement `strategy`, `loadTimeout`,
    /// `targetingCorrect`, `timeToFlow: {p95}`, and extra keys `targetingCorrectCI`,
    /// `timeToFlow.p95CI`, `meetsMaxP95`, `maxP95`, the swept parameter's value when it is not
    /// loadTimeout.
    public var recommendationJSON: JSONValue {
        var out: [String: JSONValue] = [:]
        for placement in placements {
            guard let recommended = recommendation(for: placement) else { continue }
            let pt = recommended.point, meets = recommended.meetsBound
            let variant = variants[pt.variant]
            let base = baseStrategies[variant.base]
            let played = result.strategies[pt.variant].strategy
            var o: [String: JSONValue] = [
                "strategy": .string(base.name),
                "loadTimeout": played.loadTimeout.map { JSONValue.number($0) } ?? .null,
                "targetingCorrect": .number(round6(pt.targetingCorrect)), "targetingCorrectCI": ci(pt.targetingCorrectCI),
                "timeToFlow": ["p95": .number(round6(pt.p95)), "p95CI": ci(pt.p95CI)],
                "meetsMaxP95": .bool(meets), "maxP95": .number(maxP95), "displays": .number(Double(pt.displays)),
            ]
            if let sweep, sweep.name != "loadTimeout", let v = variant.value { o[sweep.name] = .number(v) }
            out[placement] = .object(o)
        }
        return .object(out)
    }

    /// The `sweep` object of `--json`: `parameter`, `values`, `maxP95`, and per placement the curve of
    /// each strategy: `{strategy, swept, points: [{value, targetingCorrect, targetingCorrectCI,
    /// timeToFlowP95, timeToFlowP95CI, displays}]}` (a strategy the parameter does not apply to has
    /// one point with value null).
    public var sweepJSON: JSONValue {
        guard let sweep else { return .null }
        var byPlacement: [String: JSONValue] = [:]
        for (p, placement) in placements.enumerated() {
            var curves: [JSONValue] = []
            for (b, base) in baseStrategies.enumerated() {
                let ks = variants.indices.filter { variants[$0].base == b }
                let points: [JSONValue] = ks.map { k in
                    let pt = point(variant: k, placement: p)
                    return ["value": variants[k].value.map { JSONValue.number($0) } ?? .null,
                            "targetingCorrect": .number(round6(pt.targetingCorrect)), "targetingCorrectCI": ci(pt.targetingCorrectCI),
                            "timeToFlowP95": .number(round6(pt.p95)), "timeToFlowP95CI": ci(pt.p95CI),
                            "displays": .number(Double(pt.displays))]
                }
                curves.append(["strategy": .string(base.name), "swept": .bool(ks.contains { variants[$0].value != nil }),
                               "points": .array(points)])
            }
            byPlacement[placement] = .array(curves)
        }
        return ["parameter": .string(sweep.name), "values": .array(sweep.values.map { .number($0) }), "maxP95": .number(maxP95),
                "placements": .object(byPlacement)]
    }

    /// The JSON of simulate.md with, as applicable, `fitted`, `fittedAttribution`, `warnings`,
    /// `recommendation` (with a fit or a sweep) and `sweep`.
    public var json: JSONValue {
        guard case .object(var o) = result.json else { return result.json }
        add(to: &o)
        return .object(o)
    }

    /// A summary for the dashboard's runs list: ``SimulationResult/runSummary(id:)`` plus the
    /// `fitted`, `recommendation` and `sweep` objects.
    public func runSummary(id: String) -> JSONValue {
        guard case .object(var o) = result.runSummary(id: id) else { return result.runSummary(id: id) }
        add(to: &o)
        if fit != nil { o["name"] = .string("simulate --from, seed \(result.seed), \(result.sessions) sessions") }
        return .object(o)
    }

    private func add(to o: inout [String: JSONValue]) {
        if let fit {
            o["fitted"] = fit.json
            o["fittedAttribution"] = fit.attributionJSON
            o["warnings"] = .array(fit.warnings.map { .string($0) })
        }
        if fit != nil || sweep != nil { o["recommendation"] = recommendationJSON }
        if sweep != nil { o["sweep"] = sweepJSON }
    }
}
