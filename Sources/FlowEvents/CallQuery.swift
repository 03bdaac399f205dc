import FlowFetch
import FlowJSON

/// One top-level call (getFlow, getFlowOrDefault, preloadFlows, ...): the events of one trace, folded.
public struct CallSummary: Sendable, Equatable {
    /// The trace id, 32 lowercase hex characters.
    public var trace: String
    /// The run its events belong to.
    public var run: String
    /// `getFlow`, `getFlowOrDefault`, ... or `preloadFlows` (the `call` attribute of its start or end).
    public var call: String?
    /// The placement of a fetch; nil for a preload (see `placements`).
    public var placement: String?
    /// The placements a preload names (`placements`, `succeeded`, `failed`); empty for a fetch.
    public var placements: [String] = []
    /// fetch.end's source (`network`, `cache`, `defaultAudience`, `fallbackFile`); nil for an error or a preload.
    public var source: String?
    /// fetch.end's audience and variation.
    public var audience: String?
    public var variation: String?
    /// fetch.end's targetingLost.
    public var targetingLost = false
    /// fetch.end's (or an aborted preload's) error code, nil when it has none.
    public var errorCode: JSONValue?
    /// A preload's failed placements and their codes.
    public var failed: [String: JSONValue] = [:]
    /// The end event's `duration`, else end minus start on the engine clock; nil while in progress.
    public var duration: Double?
    /// Wall clock of the call's first event (its start when held), seconds since 1970.
    public var start: Double
    /// Engine clock of the start (else the first event held) and of the last event held.
    public var startT: Double
    public var endT: Double
    /// Whether its start event (fetch.start, preload.start) is held.
    public var hasStart = false
    /// Whether its end event (fetch.end, preload.end) is held.
    public var finished = false
    /// timeout, fallback and request.start events, and all its events held.
    public var timeouts = 0
    public var fallbacks = 0
    public var requests = 0
    public var events = 0
    /// Seq of its first and last event held.
    public var firstSeq: UInt64
    public var lastSeq: UInt64

    /// Whether it failed: an error code, or a preload with a failed placement.
    public var isError: Bool { errorCode != nil || !failed.isEmpty }

    /// Every placement it concerns: its own, or the ones a preload names.
    public var allPlacements: [String] { placement.map { [$0] } ?? placements }

    /// The JSON object of `GET /api/calls`.
    public var jsonValue: JSONValue {
        var o: [String: JSONValue] = [
            "trace": .string(trace), "run": .string(run), "call": call.map(JSONValue.string) ?? .null,
            "placement": placement.map(JSONValue.string) ?? .null,
            "source": source.map(JSONValue.string) ?? .null, "audience": audience.map(JSONValue.string) ?? .null,
            "variation": variation.map(JSONValue.string) ?? .null, "targetingLost": .bool(targetingLost),
            "errorCode": errorCode ?? .null, "duration": duration.map(JSONValue.number) ?? .null,
            "start": .string(ISO8601.format(start)), "startT": .number(startT), "endT": .number(endT),
            "finished": .bool(finished), "timeouts": .number(Double(timeouts)), "fallbacks": .number(Double(fallbacks)),
            "requests": .number(Double(requests)), "events": .number(Double(events)),
            "firstSeq": .number(Double(firstSeq)), "lastSeq": .number(Double(lastSeq)),
        ]
        if !placements.isEmpty { o["placements"] = .array(placements.map(JSONValue.string)) }
        if !failed.isEmpty { o["failed"] = .object(failed) }
        return .object(o)
    }

    /// Folds envelopes (any order) into calls by trace, newest call (highest last seq) first. Traces
    /// with neither a start nor an end event (fetch.*, preload.*) are not calls and are left out.
    public static func fold(_ envelopes: [Envelope]) -> [CallSummary] {
        var byTrace: [TraceID: Int] = [:]
        var calls: [CallSummary] = []
        var isCall: [Bool] = []
        for e in envelopes.sorted(by: { $0.seq < $1.seq }) {
            let index: Int
            if let i = byTrace[e.trace] {
                index = i
            } else {
                index = calls.count
                byTrace[e.trace] = index
                calls.append(CallSummary(trace: e.trace.hex, run: e.run, placement: e.placement, start: e.ts, startT: e.t,
                                         endT: e.t, firstSeq: e.seq, lastSeq: e.seq))
                isCall.append(false)
            }
            if calls[index].add(e) { isCall[index] = true }
        }
        return zip(calls, isCall).filter(\.1).map(\.0).sorted { $0.lastSeq > $1.lastSeq }
    }

    /// Adds one event (in seq order); true when it is a start or end event.
    private mutating func add(_ e: Envelope) -> Bool {
        events += 1
        lastSeq = max(lastSeq, e.seq)
        startT = min(startT, e.t)
        endT = max(endT, e.t)
        let a = e.attrs
        switch e.name {
        case .fetchStart, .preloadStart:
            hasStart = true
            start = e.ts
            startT = e.t
            call = a["call"]?.stringValue ?? (e.name == .preloadStart ? "preloadFlows" : call)
            if let p = e.placement { placement = p }
            addNamed(a["placements"])
            return true
        case .fetchEnd, .preloadEnd:
            finished = true
            if call == nil { call = a["call"]?.stringValue ?? (e.name == .preloadEnd ? "preloadFlows" : nil) }
            if e.name == .fetchEnd {
                if let p = e.placement { placement = p }
                source = a["source"]?.stringValue
                audience = a["audience"]?.stringValue
                variation = a["variation"]?.stringValue
                targetingLost = a["targetingLost"]?.boolValue ?? false
            } else {
                addNamed(a["succeeded"])
                failed = a["failed"]?.objectValue ?? [:]
                addNamed(.array(failed.keys.sorted().map(JSONValue.string)))
            }
            if let code = a["errorCode"], code != .null { errorCode = code }
            if let d = a["duration"]?.numberValue, d.isFinite { duration = d } else { duration = max(0, e.t - startT) }
            return true
        case .requestStart:
            requests += 1
        case .timeout:
            timeouts += 1
        case .fallback:
            fallbacks += 1
        default:
            break
        }
        return false
    }

    private mutating func addNamed(_ value: JSONValue?) {
        for v in value?.arrayValue ?? [] {
            if let p = v.stringValue, !placements.contains(p) { placements.append(p) }
        }
    }

    /// The call's fields, event names and attribute values as lower-cased text, for free-text search.
    func searchText(events: [Envelope]) -> String {
        var parts = [trace, run, call ?? "", source ?? "", audience ?? "", variation ?? "", errorCode?.jsonText ?? ""]
        parts += allPlacements
        if targetingLost { parts.append("targetingLost") }
        for e in events {
            parts.append(e.name.rawValue)
            for (_, value) in e.attrs {
                parts.append(value.stringValue ?? value.jsonText)
            }
        }
        return parts.joined(separator: " ").lowercased()
    }
}

/// Which calls (and events) a dashboard query asks for: the filters of `GET /api/calls` and `GET /api/events`.
///
/// Every filter is optional; a call must pass all that are set. `placement` matches a preload's calls
/// and events when the preload names the placement (its own placement is null).
public struct CallFilter: Sendable, Equatable {
    /// The run.
    public var run: String?
    /// The call's placement, or one its preload names.
    public var placement: String?
    /// The call's name: `getFlow`, `getFlowOrDefault`, `preloadFlows`, ...
    public var call: String?
    /// fetch.end's source, audience, variation and targetingLost, exactly.
    public var source: String?
    public var audience: String?
    public var variation: String?
    public var targetingLost: Bool?
    /// A code, any error, or none.
    public var errorCode: ErrorCodeFilter?
    /// At least `minDuration`, shorter than `maxDuration`, seconds.
    public var minDuration: Double?
    public var maxDuration: Double?
    /// A prefix of the trace id (lower-case hex).
    public var trace: String?
    /// Free text, matched case-insensitively against every attribute of the call.
    public var text: String?
    /// The call's start, seconds since 1970: from inclusive, to inclusive.
    public var from: Double?
    public var to: Double?

    /// What `errorCode=` asks for.
    public enum ErrorCodeFilter: Sendable, Equatable {
        /// Any error (`any`).
        case any
        /// No error (`none`).
        case none
        /// This code, a whole number as decimal text without leading zeros (a preload matches when one
        /// of its placements failed with it).
        case code(String)
    }

    /// No filter: every call.
    public init() {}

    /// The query parameters it reads, besides `since`, `limit` and `name`.
    public static let parameters = ["run", "placement", "call", "source", "audience", "variation", "targetingLost",
                                    "errorCode", "minDuration", "maxDuration", "trace", "q", "from", "to"]

    /// Whether any filter past `run` is set (the events must then be folded into calls).
    public var needsCalls: Bool {
        call != nil || source != nil || audience != nil || variation != nil || targetingLost != nil || errorCode != nil
            || minDuration != nil || maxDuration != nil || trace != nil || text != nil || from != nil || to != nil
    }

    /// Reads the filters from query parameters (`value(name)` gives a parameter, nil or empty when
    /// absent); `now` (seconds since 1970) anchors relative times such as `-5m`. Throws a message
    /// that names the parameter and what it expects.
    public static func parse(_ value: (String) -> String?, now: Double) throws(CallQueryError) -> CallFilter {
        func text(_ name: String) -> String? { value(name).flatMap { $0.isEmpty ? nil : $0 } }
        var f = CallFilter()
        f.run = text("run")
        f.placement = text("placement")
        f.call = text("call")
        f.source = text("source")
        f.audience = text("audience")
        f.variation = text("variation")
        if let t = text("targetingLost") {
            switch t.lowercased() {
            case "true", "1", "yes": f.targetingLost = true
            case "false", "0", "no": f.targetingLost = false
            default: throw CallQueryError("targetingLost", "true or false", t)
            }
        }
        if let e = text("errorCode") {
            switch e.lowercased() {
            case "any": f.errorCode = .any
            case "none": f.errorCode = ErrorCodeFilter.none
            default:
                // Error codes are whole numbers (2005); anything else could never match.
                guard e.utf8.count <= 18, e.utf8.allSatisfy({ (48...57).contains($0) }), let code = Int(e) else {
                    throw CallQueryError("errorCode", "an error code (a whole number such as 2005), any or none", e)
                }
                f.errorCode = .code(String(code))
            }
        }
        if let d = text("minDuration") {
            guard let s = parseDuration(d) else { throw CallQueryError("minDuration", "a duration such as 0.3, 300ms or 2s", d) }
            f.minDuration = s
        }
        if let d = text("maxDuration") {
            guard let s = parseDuration(d) else { throw CallQueryError("maxDuration", "a duration such as 0.3, 300ms or 2s", d) }
            f.maxDuration = s
        }
        if let t = text("trace") {
            let lower = t.lowercased()
            guard lower.utf8.count <= 32, lower.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }) else {
                throw CallQueryError("trace", "up to 32 hex digits (a trace id or its start)", t)
            }
            f.trace = lower
        }
        if let q = text("q") {
            guard q.utf8.count <= 200 else { throw CallQueryError("q", "at most 200 bytes of text", String(q.prefix(40)) + "…") }
            f.text = q.lowercased()
        }
        if let s = text("from") {
            guard let t = parseTime(s, now: now) else { throw CallQueryError("from", "a time: ISO 8601, seconds since 1970, or relative such as -5m", s) }
            f.from = t
        }
        if let s = text("to") {
            guard let t = parseTime(s, now: now) else { throw CallQueryError("to", "a time: ISO 8601, seconds since 1970, or relative such as -5m", s) }
            f.to = t
        }
        return f
    }

    /// `0.3` and `2s` (seconds), `300ms`, `1.5m`; nil for anything else or a negative value.
    public static func parseDuration(_ text: String) -> Double? {
        let s = text.trimmingSpaces.lowercased()
        let (number, scale): (Substring, Double) =
            s.hasSuffix("ms") ? (s.dropLast(2), 0.001) : s.hasSuffix("s") ? (s.dropLast(), 1)
            : s.hasSuffix("m") ? (s.dropLast(), 60) : (Substring(s), 1)
        guard let v = Double(number.trimmingSpaces), v.isFinite, v >= 0 else { return nil }
        return v * scale
    }

    /// ISO 8601 (`2026-12-05T10:00:00Z`, fraction optional), seconds since 1970, or relative to `now`
    /// (`-30s`, `-5m`, `-1h`, `-2d`, `now`); nil for anything else.
    public static func parseTime(_ text: String, now: Double) -> Double? {
        let s = text.trimmingSpaces
        if s == "now" { return now }
        if s.hasPrefix("-") {
            let body = s.dropFirst()
            let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
            guard let unit = body.last, let scale = units[unit], let v = Double(body.dropLast()), v.isFinite, v >= 0 else { return nil }
            return now - v * scale
        }
        if let v = Double(s), v.isFinite, ISO8601.validRange.contains(v) { return v }
        return ISO8601.parse(s)
    }

    /// Whether a call passes every filter; `events` are its envelopes (for the free text only).
    public func matches(_ c: CallSummary, events: [Envelope] = []) -> Bool {
        if let run, c.run != run { return false }
        if let placement, !c.allPlacements.contains(placement) { return false }
        if let call, c.call != call { return false }
        if let source, c.source != source { return false }
        if let audience, c.audience != audience { return false }
        if let variation, c.variation != variation { return false }
        if let targetingLost, c.targetingLost != targetingLost { return false }
        switch errorCode {
        case nil: break
        case .any?: if failures(of: c).isEmpty { return false }
        case .none?: if !failures(of: c).isEmpty { return false }
        case .code(let code)?:
            if !failures(of: c).contains(where: { ($0.stringValue ?? $0.jsonText) == code }) { return false }
        }
        if minDuration != nil || maxDuration != nil {
            guard let d = c.duration else { return false }
            if let minDuration, d < minDuration { return false }
            if let maxDuration, d >= maxDuration { return false }
        }
        if let trace, !c.trace.hasPrefix(trace) { return false }
        if let from, c.start < from { return false }
        if let to, c.start > to { return false }
        if let text, !c.searchText(events: events).contains(text) { return false }
        return true
    }

    /// The call's error codes as this filter sees them: its own error code, and the codes of a
    /// preload's failed placements (with `placement` set, that placement's only).
    public func failures(of c: CallSummary) -> [JSONValue] {
        var codes = c.errorCode.map { [$0] } ?? []
        if let placement { codes += c.failed[placement].map { [$0] } ?? [] } else { codes += c.failed.keys.sorted().compactMap { c.failed[$0] } }
        return codes
    }

    /// Whether an event passes the event-level filters: its placement, or a preload's naming of it.
    public func matchesEvent(_ e: Envelope) -> Bool {
        if let run, e.run != run { return false }
        guard let placement else { return true }
        if let own = e.placement { return own == placement }
        let a = e.attrs
        for key in ["placements", "succeeded"] where a[key]?.arrayValue?.contains(.string(placement)) == true { return true }
        return a["failed"]?.objectValue?[placement] != nil
    }
}

/// A bad query parameter: which one, what was expected, what came.
public struct CallQueryError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The parameter's name, e.g. `minDuration`.
    public var parameter: String
    /// `minDuration: expected ..., got "..."`.
    public var message: String
    /// "`parameter`: expected `expected`, got \"`got`\"".
    public init(_ parameter: String, _ expected: String, _ got: String) {
        self.parameter = parameter
        message = "\(parameter): expected \(expected), got \(JSONValue.string(got).jsonText)"
    }
    public var description: String { message }
}

/// Queries over an event store's newest events: calls that pass a filter, with their statistics, and
/// the events of those calls. Reads at most `window` newest events (of the run when one is given).
public struct CallQuery: Sendable {
    /// Most events read per query.
    public var window: Int
    /// A query reading at most `window` events (at least 1).
    public init(window: Int = 20_000) { self.window = max(1, window) }

    /// The answer to a calls query.
    public struct Result: Sendable {
        /// Matching calls, newest first, at most the limit.
        public var calls: [CallSummary]
        /// Calls that matched (before the limit), calls and events read, and whether the window was full
        /// (older events exist that were not read).
        public var matched: Int
        public var scannedCalls: Int
        public var scannedEvents: Int
        public var windowFull: Bool
        /// Over every matched call: duration percentiles (nearest rank), counts by source, errors
        /// (failed fetches plus failed preload placements), timeouts, targeting lost, and each finished
        /// call's duration with its source (`error` when it failed, `preload` for a preload), trace and
        /// placement (a preload's first), newest first: what the dashboard's histogram draws.
        public var p50: Double?
        public var p95: Double?
        public var sources: [String: Int]
        public var errors: Int
        public var timeouts: Int
        public var targetingLost: Int
        public var durations: [(duration: Double, source: String, trace: String, placement: String?)]
    }

    /// The matching calls of `store`, newest first, at most `limit`.
    public func calls(in store: any EventStore, filter: CallFilter, limit: Int) -> Result {
        let events = store.events(since: nil, limit: window, run: filter.run, placement: nil, name: nil)
        return Self.calls(in: events, filter: filter, limit: limit, windowFull: events.count >= window)
    }

    /// The matching calls of `events`, newest first, at most `limit`.
    public static func calls(in events: [Envelope], filter: CallFilter, limit: Int, windowFull: Bool = false) -> Result {
        let all = CallSummary.fold(events)
        let byTrace = filter.text == nil ? [:] : Dictionary(grouping: events, by: { $0.trace.hex })
        let matched = all.filter { filter.matches($0, events: byTrace[$0.trace] ?? []) }
        var sources: [String: Int] = [:]
        var errors = 0, timeouts = 0, lost = 0
        var durations: [(duration: Double, source: String, trace: String, placement: String?)] = []
        for c in matched {
            if let s = c.source, c.errorCode == nil { sources[s, default: 0] += 1 }
            // A preload counts each failed placement (of the filter's placement only, when it has one).
            let failures = filter.failures(of: c)
            errors += c.failed.isEmpty ? failures.count : failures.count - (c.errorCode == nil ? 0 : 1)
            timeouts += c.timeouts
            if c.targetingLost { lost += 1 }
            if c.finished, let d = c.duration {
                let kind = !failures.isEmpty ? "error" : c.call?.hasPrefix("preload") == true ? "preload" : (c.source ?? "other")
                durations.append((d, kind, c.trace, c.placement ?? c.placements.first))
            }
        }
        let sorted = durations.map(\.duration).sorted()
        func rank(_ q: Double) -> Double? { PlacementSummary.nearestRank(sorted, q) }
        return Result(calls: Array(matched.prefix(max(0, limit))), matched: matched.count, scannedCalls: all.count,
                      scannedEvents: events.count, windowFull: windowFull, p50: rank(0.5), p95: rank(0.95), sources: sources,
                      errors: errors, timeouts: timeouts, targetingLost: lost, durations: durations)
    }

    /// The placements table over the calls of `store` that pass `filter` (see the static variant).
    public func placements(in store: any EventStore, filter: CallFilter) -> JSONValue {
        let events = store.events(since: nil, limit: window, run: filter.run, placement: nil, name: nil)
        return Self.placements(in: events, filter: filter, windowFull: events.count >= window)
    }

    /// The body of `GET /api/placements` with filters: per placement, over the matching calls that
    /// concern it (a preload counts for each placement it names; with `placement` set, for that one
    /// only): `calls`, `fetches` (the fetch calls among them), `sources` (successful fetches),
    /// `errors` (failed fetches, preloads that failed the placement), `targetingLost`, `timeouts`
    /// (timeout events of the placement), `duration` (p50/p95 nearest rank of the finished calls,
    /// `samples`) and `lastPreloadError`. `{"run", "placements": [...], "counts": {"matched", "windowFull"}}`.
    public static func placements(in events: [Envelope], filter: CallFilter, windowFull: Bool = false) -> JSONValue {
        let byTrace = Dictionary(grouping: events, by: { $0.trace.hex })
        let matched = CallSummary.fold(events).filter { filter.matches($0, events: byTrace[$0.trace] ?? []) }
        var rows: [String: PlacementRow] = [:]
        for c in matched {
            let own = byTrace[c.trace] ?? []
            for p in filter.placement.map({ [$0] }) ?? c.allPlacements {
                rows[p, default: PlacementRow()].add(c, placement: p, events: own)
            }
        }
        let placements = rows.keys.sorted().compactMap { key in rows[key].map { $0.jsonValue(placement: key) } }
        return ["run": filter.run.map(JSONValue.string) ?? .null, "placements": .array(placements),
                "counts": ["matched": .number(Double(matched.count)), "windowFull": .bool(windowFull)]]
    }

    /// The events of `store` that pass `filter`: with call filters, the events of the matching calls;
    /// the placement filter keeps a preload's events that name the placement. Newest last; with
    /// `since`, the oldest `limit` after it, else the newest `limit`.
    public func events(in store: any EventStore, filter: CallFilter, since: UInt64?, limit: Int, name: String?) -> [Envelope] {
        let events = store.events(since: since, limit: window, run: filter.run, placement: nil, name: nil)
        var traces: Set<String>?
        if filter.needsCalls {
            var calls = filter
            calls.placement = nil // event-level below: a preload's request events carry their own placement
            let byTrace = filter.text == nil ? [:] : Dictionary(grouping: events, by: { $0.trace.hex })
            traces = Set(CallSummary.fold(events).filter { calls.matches($0, events: byTrace[$0.trace] ?? []) }.map(\.trace))
        }
        let kept = events.filter { e in
            (name == nil || e.name.rawValue == name) && filter.matchesEvent(e) && (traces?.contains(e.trace.hex) ?? true)
        }
        return since == nil ? Array(kept.suffix(max(0, limit))) : Array(kept.prefix(max(0, limit)))
    }
}

/// One placement's totals over matching calls, for `CallQuery.placements`.
private struct PlacementRow {
    var calls = 0
    var fetches = 0
    var sources: [String: Int] = [:]
    var errors = 0
    var targetingLost = 0
    var timeouts = 0
    var durations: [Double] = []
    var lastPreloadError: PreloadError?

    /// Counts call `c` for `placement`; `events` are the call's envelopes.
    mutating func add(_ c: CallSummary, placement: String, events: [Envelope]) {
        calls += 1
        if c.placement != nil {
            fetches += 1
            if c.errorCode != nil { errors += 1 } else if let s = c.source { sources[s, default: 0] += 1 }
            if c.targetingLost { targetingLost += 1 }
        } else if c.failed[placement] != nil || (c.failed.isEmpty && c.errorCode != nil) {
            errors += 1
        }
        if c.finished, let d = c.duration { durations.append(d) }
        for e in events where e.name == .timeout && (e.placement ?? c.placement) == placement { timeouts += 1 }
        if let code = c.failed[placement], let end = events.last(where: { $0.name == .preloadEnd }),
           end.seq > (lastPreloadError?.seq ?? 0) {
            lastPreloadError = PreloadError(code: code, ts: end.ts, seq: end.seq)
        }
    }

    /// The row as `GET /api/placements` answers it, with `calls`.
    func jsonValue(placement: String) -> JSONValue {
        PlacementSummary(placement: placement, calls: calls, fetches: fetches, sources: sources, errors: errors,
                         targetingLost: targetingLost, timeouts: timeouts, durations: durations,
                         lastPreloadError: lastPreloadError).jsonValue
    }
}

extension CallQuery.Result {
    /// The body of `GET /api/calls` (without `latestSeq` and `epoch`, which the server adds):
    /// `{"calls": [...], "counts": {"matched", "returned", "scannedCalls", "scannedEvents", "windowFull"},
    /// "stats": {"p50", "p95", "sources", "errors", "timeouts", "targetingLost", "durations": [[duration, source, trace, placement]]}}`.
    public var jsonValue: JSONValue {
        let counts: [String: JSONValue] = [
            "matched": .number(Double(matched)), "returned": .number(Double(calls.count)),
            "scannedCalls": .number(Double(scannedCalls)), "scannedEvents": .number(Double(scannedEvents)),
            "windowFull": .bool(windowFull),
        ]
        let stats: [String: JSONValue] = [
            "p50": p50.map(JSONValue.number) ?? .null, "p95": p95.map(JSONValue.number) ?? .null,
            "sources": .object(sources.mapValues { .number(Double($0)) }), "errors": .number(Double(errors)),
            "timeouts": .number(Double(timeouts)), "targetingLost": .number(Double(targetingLost)),
            "durations": .array(durations.map {
                [.number($0.duration), .string($0.source), .string($0.trace), $0.placement.map(JSONValue.string) ?? .null]
            }),
        ]
        return ["calls": .array(calls.map(\.jsonValue)), "counts": .object(counts), "stats": .object(stats)]
    }
}

extension StringProtocol {
    fileprivate var trimmingSpaces: String {
        String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
