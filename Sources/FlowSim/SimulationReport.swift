import FlowFetch
import FlowJSON
import Foundation

/// The outcome of a strategy-lab run: one result per strategy, and how fast it ran.
public struct SimulationResult: Sendable {
    /// How fast the lab ran: engine calls simulated per second.
    public struct Throughput: Sendable, Hashable {
        /// Engine calls started (getFlow, preloadFlows, getFlowOrDefault) over every strategy.
        public var calls: Int
        public var wallSeconds: Double
        /// CPU seconds the threads spent simulating, summed.
        public var busySeconds: Double
        public var threads: Int
        /// Calls per wall-clock second.
        public var callsPerSecond: Double { wallSeconds > 0 ? Double(calls) / wallSeconds : 0 }
        /// Calls per CPU second of one thread (one core's rate).
        public var callsPerCoreSecond: Double { busySeconds > 0 ? Double(calls) / busySeconds : 0 }
    }

    public var seed: UInt64
    public var sessions: Int
    public var population: Population
    public var strategies: [StrategyResult]
    public var throughput: Throughput

    /// The JSON of simulate.md, with extra fields: per strategy `kind`, `displays` and `ci` (95%
    /// intervals of every number), and `calls`, `seconds`, `threads`, `callsPerCoreSecond` in
    /// `throughput`.
    public var json: JSONValue {
        [
            "seed": .number(Double(seed)), "sessions": .number(Double(sessions)),
            "strategies": .array(strategies.map(\.json)),
            "throughput": [
                "callsPerSecond": .number(throughput.callsPerSecond.rounded()),
                "callsPerCoreSecond": .number(throughput.callsPerCoreSecond.rounded()),
                "calls": .number(Double(throughput.calls)), "seconds": .number(round6(throughput.wallSeconds)),
                "threads": .number(Double(throughput.threads)),
            ],
        ]
    }

    /// The numbers that depend only on the config and the seed (everything but throughput).
    public var deterministicJSON: JSONValue {
        ["seed": .number(Double(seed)), "sessions": .number(Double(sessions)), "strategies": .array(strategies.map(\.json))]
    }

    /// A summary for the dashboard's runs list (`GET /api/runs/{id}`): `{id, kind: "simulation",
    /// name, seed, sessions, population, strategies: [...as in json, plus the strategy config and the
    /// time-to-flow CDF as [[seconds, share], ...]]}`.
    public func runSummary(id: String) -> JSONValue {
        var strategiesJSON: [JSONValue] = []
        for s in strategies {
            guard case .object(var o) = s.json else { continue }
            o["config"] = s.strategy.json
            o["timeToFlowCDF"] = .array(s.cdf(points: 40).map { [.number(round6($0.seconds)), .number(round6($0.share))] })
            strategiesJSON.append(.object(o))
        }
        return [
            "id": .string(id), "kind": "simulation", "name": .string("simulate seed \(seed), \(sessions) sessions"),
            "seed": .number(Double(seed)), "sessions": .number(Double(sessions)),
            "population": population.json, "strategies": .array(strategiesJSON),
            "throughput": ["callsPerSecond": .number(throughput.callsPerSecond.rounded())],
        ]
    }
}

/// One strategy's numbers, with 95% confidence intervals.
public struct StrategyResult: Sendable {
    public var strategy: Strategy
    public var tally: StrategyTally

    /// A result from its tally.
    public init(strategy: Strategy, tally: StrategyTally) { self.strategy = strategy; self.tally = tally }

    /// Share of displays showing a variation of the audience the user belonged to at display time.
    public var targetingCorrect: Double { share(tally.targetingCorrect) }
    public var targetingCorrectInterval: (low: Double, high: Double) { Confidence.wilson(tally.targetingCorrect, tally.displays) }

    /// Time-to-flow quantile (seconds).
    public func timeToFlow(_ q: Double) -> Double { tally.timeToFlow.quantile(q) }
    public var timeToFlowMax: Double { tally.timeToFlow.count > 0 ? tally.timeToFlow.max : 0 }

    /// Share of displays per source, in ``StrategyTally/sourceNames`` order.
    public var sourceShares: [Double] { tally.sources.map(share) }

    public var requestsPerSession: (mean: Double, low: Double, high: Double) {
        Confidence.mean(count: tally.sessions, sum: Double(tally.requests), sumOfSquares: tally.requestsSquared)
    }

    /// The time-to-flow distribution as (seconds, share of displays with at most that) points, on a
    /// log scale from 10 ms to the maximum.
    public func cdf(points: Int) -> [(seconds: Double, share: Double)] {
        let h = tally.timeToFlow
        guard h.count > 0 else { return [] }
        var out: [(Double, Double)] = []
        for i in 0..<points {
            let q = Double(i + 1) / Double(points)
            out.append((h.quantile(q), q))
        }
        out.insert((h.value(rank: 1), 1 / Double(h.count)), at: 0)
        return out
    }

    private func share(_ k: Int) -> Double { tally.displays > 0 ? Double(k) / Double(tally.displays) : 0 }

    /// The strategy's object in the `--json` output.
    public var json: JSONValue {
        let h = tally.timeToFlow
        let quantiles: [(String, Double)] = [("p50", 0.5), ("p95", 0.95), ("p99", 0.99)]
        var ttf: [String: JSONValue] = ["max": .number(round6(timeToFlowMax))]
        var ttfCI: [String: JSONValue] = [:]
        for (name, q) in quantiles {
            ttf[name] = .number(round6(h.quantile(q)))
            let ci = h.quantileInterval(q)
            ttfCI[name] = [.number(round6(ci.low)), .number(round6(ci.high))]
        }
        var sources: [String: JSONValue] = [:], sourcesCI: [String: JSONValue] = [:]
        for (i, name) in StrategyTally.sourceNames.enumerated() {
            sources[name] = .number(round6(sourceShares[i]))
            let ci = Confidence.wilson(tally.sources[i], tally.displays)
            sourcesCI[name] = [.number(round6(ci.low)), .number(round6(ci.high))]
        }
        let t = targetingCorrectInterval, r = requestsPerSession
        return [
            "name": .string(strategy.name), "kind": .string(strategy.shape.kind),
            "targetingCorrect": .number(round6(targetingCorrect)),
            "timeToFlow": .object(ttf), "sources": .object(sources),
            "requestsPerSession": .number(round6(r.mean)),
            "displays": .number(Double(tally.displays)),
            "ci": [
                "level": 0.95,
                "targetingCorrect": [.number(round6(t.low)), .number(round6(t.high))],
                "timeToFlow": .object(ttfCI), "sources": .object(sourcesCI),
                "requestsPerSession": [.number(round6(r.low)), .number(round6(r.high))],
            ],
        ]
    }
}

@inline(__always)
func round6(_ v: Double) -> Double { v.isFinite ? (v * 1_000_000).rounded() / 1_000_000 : 0 }

// MARK: table

extension SimulationResult {
    /// A column of the table: how to read it and which direction is better.
    private struct Column {
        var title: String
        var better: Better
        var value: (StrategyResult) -> Double
        var format: (Double) -> String
        var interval: ((StrategyResult) -> String)?
    }
    private enum Better { case higher, lower, none }

    /// The result as a table: strategies as rows; the best value of each column that has a better
    /// direction is marked with `*` (bold on a terminal when `color`); a second row per strategy
    /// gives the 95% confidence intervals.
    public func table(color: Bool = false) -> String {
        func pct(_ v: Double) -> String { String(format: "%.1f%%", v * 100) }
        func sec(_ v: Double) -> String { v < 10 ? String(format: "%.2fs", v) : String(format: "%.1fs", v) }
        func pctCI(_ i: (low: Double, high: Double)) -> String { String(format: "±%.1f", (i.high - i.low) * 50) }
        func secCI(_ i: (low: Double, high: Double)) -> String { "\(sec(i.low))-\(sec(i.high))" }
        var columns: [Column] = [
            Column(title: "targeting", better: .higher, value: \.targetingCorrect, format: pct,
                   interval: { pctCI($0.targetingCorrectInterval) }),
        ]
        for (title, q) in [("p50", 0.5), ("p95", 0.95), ("p99", 0.99)] {
            columns.append(Column(title: title, better: .lower, value: { $0.timeToFlow(q) }, format: sec,
                                  interval: { secCI($0.tally.timeToFlow.quantileInterval(q)) }))
        }
        columns.append(Column(title: "max", better: .lower, value: \.timeToFlowMax, format: sec, interval: nil))
        let sourceTitles = ["network", "cache", "default", "fallback", "none"]
        let sourceBetter: [Better] = [.none, .none, .lower, .lower, .lower]
        for i in 0..<5 {
            columns.append(Column(title: sourceTitles[i], better: sourceBetter[i], value: { $0.sourceShares[i] }, format: pct,
                                  interval: { r in pctCI(Confidence.wilson(r.tally.sources[i], r.tally.displays)) }))
        }
        columns.append(Column(title: "req/session", better: .lower, value: { $0.requestsPerSession.mean },
                              format: { String(format: "%.2f", $0) },
                              interval: { r in String(format: "±%.2f", (r.requestsPerSession.high - r.requestsPerSession.low) / 2) }))

        let nameWidth = max(8, strategies.map(\.strategy.name.count).max() ?? 0)
        var cells: [[String]] = []
        var ciCells: [[String]] = []
        var marked: [[Bool]] = []
        for s in strategies {
            cells.append(columns.map { $0.format($0.value(s)) })
            ciCells.append(columns.map { $0.interval?(s) ?? "" })
            marked.append(Array(repeating: false, count: columns.count))
        }
        for (c, column) in columns.enumerated() where column.better != .none && strategies.count > 1 {
            let values = strategies.map(column.value)
            guard let best = column.better == .higher ? values.max() : values.min() else { continue }
            // Ties (as printed) are all marked.
            let bestText = column.format(best)
            for r in strategies.indices where cells[r][c] == bestText { marked[r][c] = true }
        }
        let widths = columns.indices.map { c in
            max(columns[c].title.count, (cells.map { $0[c].count + 1 } + ciCells.map { $0[c].count }).max() ?? 0)
        }
        var out = "strategy".padded(nameWidth)
        for (c, column) in columns.enumerated() { out += "  " + column.title.leftPadded(widths[c]) }
        out += "\n"
        out += String(repeating: "-", count: out.count - 1) + "\n"
        for r in strategies.indices {
            out += strategies[r].strategy.name.padded(nameWidth)
            for c in columns.indices {
                let text = cells[r][c] + (marked[r][c] ? "*" : " ")
                let padded = text.leftPadded(widths[c])
                out += "  " + (marked[r][c] && color ? "\u{1B}[1m" + padded + "\u{1B}[0m" : padded)
            }
            out += "\n"
            out += "  95% CI".padded(nameWidth)
            for c in columns.indices { out += "  " + (ciCells[r][c] + " ").leftPadded(widths[c]) }
            out += "\n"
        }
        out += """

        \(sessions) sessions, seed \(seed); * best of the column. targeting and sources are shares of displays \
        (\(strategies.first?.tally.displays ?? 0) per strategy); p50-max: time to flow, from the moment a placement \
        is needed to the flow (or nothing) being there; none = nothing to show (a blank screen).
        throughput: \(Int(throughput.callsPerSecond.rounded())) engine calls/s (\(throughput.calls) calls, \
        \(throughput.threads) thread\(throughput.threads == 1 ? "" : "s"), \(String(format: "%.2f", throughput.wallSeconds)) s; \
        \(Int(throughput.callsPerCoreSecond.rounded())) per core)

        """
        return out
    }
}

extension String {
    func padded(_ width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
    func leftPadded(_ width: Int) -> String { count >= width ? self : String(repeating: " ", count: width - count) + self }
}
