import FlowEvents
import FlowFetch
import FlowJSON

/// Engine events grouped into calls (by trace), each with its requests: what a failing expectation,
/// `flowscope fetch` and `flowscope replay` print. The calls are the read model's (``CallFold``);
/// the timeline adds each trace's events, for printing.
public struct FlowTimeline: Sendable {
    /// One request, from its request.start and request.end events (the read model's).
    public typealias Request = FlowEvents.Call.Request

    /// One top-level call (getFlow, preloadFlows, ...) or engine-level activity (attribution observed,
    /// profile switch): the events of one trace. `isCall` tells them apart.
    public struct Call: Sendable {
        /// The read model's call (for engine-level activity: its trace folded the same way).
        public var call: FlowEvents.Call
        public var trace: TraceID
        /// The trace's events, in emission order.
        public var events: [EngineEvent]

        /// `getFlow`, `preloadFlows`, ... (the `call` of its start), or the first event's name.
        public var name: String { call.name ?? events.first?.name.rawValue ?? "" }
        public var placement: String? { call.placement }
        /// Engine clock of its start (else of its first event) and of its end, nil while open.
        public var startedAt: Double { call.startT }
        public var endedAt: Double? { call.endedAt }
        /// Its requests, in the order issued.
        public var requests: [Request] { call.requests }

        /// `success`, `error`, or `pending` when the call has not ended (and for engine-level activity,
        /// which has no end: see `isCall`).
        public var outcome: String {
            guard call.finished else { return "pending" }
            return call.isError ? "error" : "success"
        }
        /// Where the flow came from, if the call returned one.
        public var source: FlowSource? { call.source.flatMap(FlowSource.init(rawValue:)) }
        public var variation: String? { call.variation }
        public var audience: String? { call.audience }
        public var targetingLost: Bool? { call.finished && call.kind == .fetch && call.errorCode == nil ? call.targetingLost : nil }
        public var errorCode: Int? { call.errorCode?.intValue }
        /// A preload's failed placements and their codes.
        public var failed: [String: JSONValue] { call.failed }
        /// Whether a stage deadline cut this call (a `timeout` event).
        public var timedOut: Bool { !call.timeouts.isEmpty }
        /// The `to` of each `fallback` event, in order.
        public var fallbacks: [String] { call.fallbacks }
        /// Whether this is a top-level call: its trace holds a fetch.start, fetch.end, preload.start or
        /// preload.end (the read model's rule). Otherwise it is engine-level activity (attribution
        /// observed, profile switch, the pipeline's sink.dropped), which has no end event.
        public var isCall: Bool { call.isCall }
    }

    /// Calls in the order their first event came.
    public var calls: [Call]

    /// A timeline of the given calls.
    public init(calls: [Call]) { self.calls = calls }

    /// Groups `events` (in emission order) by trace, folded by the read model.
    public init(events: [EngineEvent]) {
        var fold = CallFold()
        var order: [TraceID] = []
        var byTrace: [TraceID: [EngineEvent]] = [:]
        for (i, e) in events.enumerated() {
            fold.add(e, seq: UInt64(i + 1), ts: e.t, run: "")
            if byTrace[e.trace] == nil { order.append(e.trace) }
            byTrace[e.trace, default: []].append(e)
        }
        let folded = fold.traces
        calls = zip(order, folded).map { trace, call in Call(call: call, trace: trace, events: byTrace[trace] ?? []) }
    }

    /// The last call that ended for `placement` (any call, when nil).
    public func lastCall(placement: String? = nil) -> Call? {
        calls.last { c in c.call.finished && (placement == nil || c.placement == placement) }
    }

    /// A readable timeline; times are seconds since `origin` (the first event's time when nil).
    /// A call is a line `start -> end  name placement  outcome  (N requests)` (`never` and `pending`
    /// while it has not ended), then its requests and, with `events`, its events. Engine-level activity
    /// is a line per event at its time, `t  name placement  attrs`, then its requests (a profile
    /// fetch) and, with `events`, their events.
    public func text(origin: Double? = nil, events showEvents: Bool = true) -> String {
        let t0 = origin ?? calls.first?.startedAt ?? 0
        var out = ""
        for c in calls {
            guard c.isCall else {
                let own = c.events.filter { $0.name != .requestStart && $0.name != .requestEnd }
                for e in own { out += "  \(fmt(e.t - t0))  \(e.name.rawValue)" + (e.placement.map { " \($0)" } ?? "") + attrsText(e, "  ") + "\n" }
                if own.isEmpty { out += "  \(fmt(c.startedAt - t0))  requests of trace \(c.trace.hex), which has no call event\n" }
                out += requestsText(c, t0)
                if showEvents { out += eventsText(c.events.filter { $0.name == .requestStart || $0.name == .requestEnd }, t0) }
                continue
            }
            var line = "  \(fmt(c.startedAt - t0)) -> \(c.endedAt.map { fmt($0 - t0) } ?? "never")  \(c.name)"
            if let p = c.placement { line += " \(p)" }
            switch c.outcome {
            case "error":
                // A preload's end names each failing placement with its code; the call threw networkFailed.
                let code = c.errorCode ?? (c.call.kind == .preload && c.call.finished ? FlowError.Code.networkFailed.rawValue : nil)
                line += code.map { "  error \($0)" + (FlowError.Code(rawValue: $0).map { " \($0.name)" } ?? "") } ?? "  error"
                if !c.failed.isEmpty {
                    let failed = c.failed
                    line += " (" + failed.keys.sorted().map { "\($0) \(failed[$0]?.intValue.map(String.init) ?? "?")" }.joined(separator: ", ") + ")"
                }
            case "success":
                if let s = c.source { line += "  \(s.rawValue) \(c.variation ?? "") (\(c.audience ?? ""))" + (c.targetingLost == true ? " targetingLost" : "") }
                else { line += "  ok" }
            default: line += "  pending"
            }
            out += line + "  (\(c.requests.count) request\(c.requests.count == 1 ? "" : "s"))\n"
            out += requestsText(c, t0)
            if showEvents { out += eventsText(c.events, t0, callPlacement: c.placement) }
        }
        return out.isEmpty ? "  (no events)\n" : out
    }

    private func requestsText(_ c: Call, _ t0: Double) -> String {
        var out = ""
        for r in c.requests {
            out += "        \(fmt(r.issuedAt - t0)) -> \(r.endedAt.map { fmt($0 - t0) } ?? "never")  \(r.kind)"
                + (r.placement.map { " \($0)" } ?? "") + "  \(r.outcome ?? "open")\n"
        }
        return out
    }

    /// Each event at its time; its placement too when it is not the call's (a preload's several placements).
    private func eventsText(_ events: [EngineEvent], _ t0: Double, callPlacement: String? = nil) -> String {
        events.map { e in
            "          \(fmt(e.t - t0)) \(e.name.rawValue)" + (e.placement.flatMap { $0 == callPlacement ? nil : " \($0)" } ?? "")
                + attrsText(e, "  ") + "\n"
        }.joined()
    }

    /// `separator` then `k=v k=v`, keys sorted; empty without attributes.
    private func attrsText(_ e: EngineEvent, _ separator: String) -> String {
        let attrs = e.attrs.keys.sorted().map { "\($0)=\(e.attrs[$0]!.jsonText)" }.joined(separator: " ")
        return attrs.isEmpty ? "" : separator + attrs
    }

    /// The scenario-format.md JSON of these calls (times in seconds since `origin`, to the millisecond):
    /// `{"results": [...], "requests": [...], "events": [...]}`, each entry with its `step` (the call's
    /// index among the calls). Engine-level activity has no result; its requests and events have step null.
    public func json(origin: Double? = nil) -> [String: JSONValue] {
        let t0 = origin ?? calls.first?.startedAt ?? 0
        func ms(_ t: Double) -> JSONValue { .number(((t - t0) * 1000).rounded() / 1000) }
        var results: [JSONValue] = [], requests: [JSONValue] = [], events: [JSONValue] = []
        for c in calls {
            let step: JSONValue = c.isCall ? .number(Double(results.count)) : .null
            if c.isCall {
                var o: [String: JSONValue] = [
                    "step": step, "call": .string(c.name), "placement": c.placement.map(JSONValue.string) ?? .null,
                    "outcome": .string(c.outcome), "startedAt": ms(c.startedAt), "completedAt": c.endedAt.map(ms) ?? .null,
                    "requests": .number(Double(c.requests.filter { $0.kind != "asset" }.count)), "error": .null,
                ]
                if let s = c.source {
                    o["source"] = .string(s.rawValue)
                    o["variation"] = c.variation.map(JSONValue.string) ?? .null
                    o["audience"] = c.audience.map(JSONValue.string) ?? .null
                    o["targetingLost"] = c.targetingLost.map(JSONValue.bool) ?? .null
                }
                if let code = c.errorCode {
                    o["error"] = ["code": .number(Double(code)), "name": .string(FlowError.Code(rawValue: code)?.name ?? "unknown")]
                }
                results.append(.object(o))
            }
            for r in c.requests {
                requests.append(["step": step, "placement": r.placement.map(JSONValue.string) ?? .null,
                                 "kind": .string(r.kind), "issuedAt": ms(r.issuedAt), "endedAt": r.endedAt.map(ms) ?? .null,
                                 "outcome": r.outcome.map(JSONValue.string) ?? .null])
            }
            for e in c.events {
                events.append(["step": step, "t": ms(e.t), "name": .string(e.name.rawValue),
                               "placement": e.placement.map(JSONValue.string) ?? .null, "attrs": e.attrs.jsonValue])
            }
        }
        return ["results": .array(results), "requests": .array(requests), "events": .array(events)]
    }

    private func fmt(_ t: Double) -> String {
        let v = (t * 1000).rounded() / 1000
        // A trace file's times are any finite numbers: a difference too large for Int (or infinite)
        // is printed as the number it is rather than trapping in Int(_:).
        guard v.isFinite, v.magnitude < 1e15 else { return "\(v)s" }
        let whole = Int(v.rounded(.down))
        let frac = Int(((v - Double(whole)) * 1000).rounded())
        let f = String(frac)
        return "\(whole).\(String(repeating: "0", count: max(0, 3 - f.count)))\(f)s"
    }
}

extension FlowTimeline {
    /// Groups envelopes (a trace file) the same way.
    public init(envelopes: [Envelope]) {
        self.init(events: envelopes.map {
            EngineEvent(name: $0.name, t: $0.t, placement: $0.placement, trace: $0.trace, span: $0.span, attrs: $0.attrs)
        })
    }
}
