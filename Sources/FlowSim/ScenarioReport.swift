import FlowFetch
import FlowJSON

/// What a scenario run produced: a result per step, every request, every event, and the verdict on
/// each expectation. Writes the JSON of scenario-format.md and a readable timeline.
public struct ScenarioReport: Sendable {
    /// One step's result.
    public struct StepResult: Sendable {
        public var step: Int
        public var call: Step.Call
        public var startedAt: Double
        /// Nil only if the call never ended (which the engine's budgets rule out).
        public var outcome: CallOutcome?
        public var completedAt: Double?
        /// Requests the step issued (background asset prefetches excluded).
        public var requests: Int
    }

    /// One request, from its request.start and request.end events.
    public struct RequestRecord: Sendable {
        public var step: Int?
        public var placement: String?
        public var kind: String
        public var issuedAt: Double
        public var endedAt: Double?
        public var outcome: String?
    }

    /// One event with the step that caused it.
    public struct EventRecord: Sendable {
        public var step: Int?
        public var event: EngineEvent
    }

    /// An expectation that did not hold.
    public struct Failure: Sendable {
        /// The index of the expectation in the scenario's `expect` list.
        public var expectation: Int
        public var step: Int
        public var key: String
        public var expected: JSONValue
        public var actual: JSONValue
        public var path: String
    }

    public let scenario: Scenario
    public let results: [StepResult]
    public let requests: [RequestRecord]
    public let events: [EventRecord]
    public let failures: [Failure]
    public let passed: Int

    init(scenario: Scenario, results: [StepResult], requests: [RequestRecord], events: [EventRecord]) {
        self.scenario = scenario
        self.results = results
        self.requests = requests
        self.events = events
        var failures: [Failure] = []
        var passed = 0
        for (index, e) in scenario.expect.enumerated() {
            let actual = Self.resultJSON(results[e.step])
            var ok = true
            func check(_ key: String, _ expected: JSONValue?, _ got: JSONValue) {
                guard let expected, expected != got else { return }
                ok = false
                failures.append(Failure(expectation: index, step: e.step, key: key, expected: expected, actual: got, path: e.path))
            }
            check("outcome", e.outcome.map(JSONValue.string), actual["outcome"] ?? .null)
            check("source", e.source.map(JSONValue.string), actual["source"] ?? .null)
            check("variation", e.variation.map(JSONValue.string), actual["variation"] ?? .null)
            check("audience", e.audience.map(JSONValue.string), actual["audience"] ?? .null)
            check("targetingLost", e.targetingLost.map(JSONValue.bool), actual["targetingLost"] ?? .null)
            check("completedAt", e.completedAt.map { .number(ms($0)) }, actual["completedAt"] ?? .null)
            check("errorCode", e.errorCode.map { .number(Double($0)) }, actual["error"]?["code"] ?? .null)
            check("requests", e.requests.map { .number(Double($0)) }, actual["requests"] ?? .null)
            if let expected = e.preloadErrors {
                var got: [String: JSONValue] = [:]
                for (k, v) in actual["error"]?["preloadErrors"]?.objectValue ?? [:] { got[k] = v["code"] ?? .null }
                check("preloadErrors", .object(expected.mapValues { .number(Double($0)) }), .object(got))
            }
            if ok { passed += 1 }
        }
        self.failures = failures
        self.passed = passed
    }

    /// Whether every expectation held.
    public var succeeded: Bool { failures.isEmpty }

    // MARK: JSON

    /// The run as scenario-format.md's JSON object.
    public var json: JSONValue {
        .object([
            "name": .string(scenario.name),
            "file": scenario.file.map(JSONValue.string) ?? .null,
            "results": .array(results.map(Self.resultJSON)),
            "requests": .array(requests.map { r in
                [
                    "step": r.step.map { .number(Double($0)) } ?? .null,
                    "placement": r.placement.map(JSONValue.string) ?? .null,
                    "kind": .string(r.kind), "issuedAt": .number(ms(r.issuedAt)),
                    "endedAt": r.endedAt.map { .number(ms($0)) } ?? .null,
                    "outcome": r.outcome.map(JSONValue.string) ?? .null,
                ]
            }),
            "events": .array(events.map { e in
                [
                    "step": e.step.map { .number(Double($0)) } ?? .null, "t": .number(ms(e.event.t)),
                    "name": .string(e.event.name.rawValue),
                    "placement": e.event.placement.map(JSONValue.string) ?? .null, "attrs": e.event.attrs.jsonValue,
                ]
            }),
            "expectations": [
                "passed": .number(Double(passed)), "failed": .number(Double(scenario.expect.count - passed)),
                "failures": .array(failures.map { f in
                    ["step": .number(Double(f.step)), "key": .string(f.key), "expected": f.expected, "actual": f.actual,
                     "path": .string(f.path)]
                }),
            ],
        ])
    }

    static func resultJSON(_ r: StepResult) -> JSONValue {
        var o: [String: JSONValue] = [
            "step": .number(Double(r.step)), "call": .string(r.call.name),
            "startedAt": .number(ms(r.startedAt)), "completedAt": r.completedAt.map { .number(ms($0)) } ?? .null,
            "requests": .number(Double(r.requests)), "error": .null,
        ]
        switch r.call {
        case .getFlow(let p, _, _), .getFlowForDefaultAudience(let p, _), .getFlowOrDefault(let p, _), .getFlowConfiguration(let p, _, _):
            o["placement"] = .string(p)
        case .preloadFlows(let ps, _), .preloadFlowsForDefaultAudience(let ps):
            o["placements"] = .array(ps.map(JSONValue.string))
        case .identify(let profile):
            o["profile"] = .string(profile.id)
        case .restart, .cancel:
            break
        }
        switch r.outcome {
        case nil:
            o["outcome"] = "pending"
        case .failed(let error)?:
            o["outcome"] = "error"
            o["error"] = errorJSON(error)
        case .flow(let flow)?:
            o["outcome"] = "success"
            o.merge(flowJSON(flow, source: flow.source)) { $1 }
        case .configuration(let c)?:
            o["outcome"] = "success"
            o.merge(flowJSON(c.flow, source: c.source)) { $1 }
            o["layout"] = ["id": .string(c.layout.id), "version": .number(Double(c.layout.version))]
        case .done?:
            o["outcome"] = "success"
        }
        return .object(o)
    }

    static func flowJSON(_ flow: Flow, source: FlowSource) -> [String: JSONValue] {
        ["source": .string(source.rawValue), "variation": .string(flow.variationId), "audience": .string(flow.audienceName),
         "targetingLost": .bool(flow.targetingLost)]
    }

    /// `{"code": 2005, "name": "networkFailed", "message": ..., "preloadErrors": {...}}` (preloadErrors only on preload errors).
    public static func errorJSON(_ e: FlowError) -> JSONValue {
        var o: [String: JSONValue] = ["code": .number(Double(e.code.rawValue)), "name": .string(e.code.name), "message": .string(e.message)]
        if let p = e.preloadErrors { o["preloadErrors"] = .object(p.mapValues(errorJSON)) }
        return .object(o)
    }

    // MARK: text

    /// A readable timeline: each call with its requests, the events with `--events`, then a `PASS`
    /// line per expectation that held and a `FAIL` line per key that did not.
    public func timeline(events showEvents: Bool) -> String {
        var out = "\(scenario.name)" + (scenario.file.map { "  (\($0))" } ?? "") + "\n"
        // Grouped once: a scan per step or expectation would be quadratic in a long scenario.
        let requestsByStep = Dictionary(grouping: requests.filter { $0.step != nil }) { $0.step! }
        let failuresByExpectation = Dictionary(grouping: failures, by: \.expectation)
        for r in results {
            let end = r.completedAt.map { fmt($0) } ?? "never"
            var line = "  [\(r.step)] \(fmt(r.startedAt)) -> \(end)  \(r.call.name)"
            if case .object(let o) = Self.resultJSON(r) {
                if let p = o["placement"]?.stringValue { line += " \(p)" }
                switch r.outcome {
                case .failed(let e)?: line += "  error \(e.code.rawValue) \(e.code.name): \(e.message)"
                case .flow(let f)?: line += "  \(f.source.rawValue) \(f.variationId) (\(f.audienceName))" + (f.targetingLost ? " targetingLost" : "")
                case .configuration(let c)?: line += "  layout \(c.layout.id) v\(c.layout.version) from \(c.source.rawValue)"
                case .done?: line += "  ok"
                case nil: line += "  pending"
                }
            }
            out += line + "  (\(r.requests) request\(r.requests == 1 ? "" : "s"))\n"
            for q in requestsByStep[r.step] ?? [] {
                out += "        \(fmt(q.issuedAt)) -> \(q.endedAt.map { fmt($0) } ?? "never")  \(q.kind)"
                    + (q.placement.map { " \($0)" } ?? "") + "  \(q.outcome ?? "open")\n"
            }
        }
        if showEvents {
            out += "  events:\n"
            for e in events {
                let attrs = e.event.attrs.keys.sorted().map { "\($0)=\(e.event.attrs[$0]!.jsonText)" }.joined(separator: " ")
                out += "    \(fmt(e.event.t)) " + (e.step.map { "[\($0)] " } ?? "    ") + e.event.name.rawValue
                    + (e.event.placement.map { " \($0)" } ?? "") + (attrs.isEmpty ? "" : "  " + attrs) + "\n"
            }
        }
        // A line per expectation that held, a line per key of one that did not, in the file's order.
        for (index, e) in scenario.expect.enumerated() {
            let failed = failuresByExpectation[index] ?? []
            if failed.isEmpty { out += "  PASS step \(e.step)  (\(e.path))\n" }
            for f in failed {
                out += "  FAIL step \(f.step) \(f.key): expected \(f.expected.jsonText), got \(f.actual.jsonText)  (\(f.path))\n"
            }
        }
        if !scenario.expect.isEmpty {
            out += "  \(passed) passed, \(scenario.expect.count - passed) failed\n"
        }
        return out
    }

    private func fmt(_ t: Double) -> String {
        let v = ms(t)
        // Beyond this an Int conversion would trap (a scenario may say `at: 1e300`).
        guard v.isFinite, abs(v) < 1e15 else { return "\(v)s" }
        let whole = Int(v.rounded(.down))
        let frac = Int(((v - Double(whole)) * 1000).rounded())
        let f = String(frac)
        return "\(whole).\(String(repeating: "0", count: 3 - f.count))\(f)s"
    }
}

/// Rounds seconds to the millisecond.
func ms(_ t: Double) -> Double { (t * 1000).rounded() / 1000 }
