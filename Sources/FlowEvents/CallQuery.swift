import FlowFetch
import FlowJSON

extension Call {
    /// The call's fields, event names and attribute values as lower-cased text, for free-text search.
    func searchText(events: [Envelope]) -> String {
        var parts = [trace, run, name ?? "", source ?? "", audience ?? "", variation ?? "", errorCode?.jsonText ?? ""]
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

    /// Whether no filter but `run` is set: the answer is the whole run's (kept by ``CallCache``).
    public var isRunOnly: Bool { placement == nil && !needsCalls }

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
    public func matches(_ c: borrowing Call, events: [Envelope] = []) -> Bool {
        if let run, c.run != run { return false }
        if let placement, !c.concerns(placement) { return false }
        if let call, c.name != call { return false }
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
    public func failures(of c: borrowing Call) -> [JSONValue] {
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

/// Queries over an event store: calls that pass a filter, with their statistics
/// (``CallStatistics``), and the events of those calls. Calls and statistics come from the whole
/// run as the store holds it, folded once and kept up to date by ``CallCache`` (bounded by its
/// `maxEvents`); every answer says which events it covers. `GET /api/events` with call filters reads
/// at most the newest `window` events.
public struct CallQuery: Sendable {
    /// Most events an events query (``events(in:filter:since:limit:name:)``) reads.
    public var window: Int
    /// Bounds of the placements answer.
    public var bounds: CallStatistics.Bounds
    /// The calls of the runs queried so far, shared by copies of this query.
    public let cache: CallCache
    /// A query reading at most `window` events per events query (at least 1), keeping calls in `cache`.
    public init(window: Int = 20_000, bounds: CallStatistics.Bounds = CallStatistics.Bounds(), cache: CallCache = CallCache()) {
        self.window = max(1, window)
        self.bounds = bounds
        self.cache = cache
    }

    /// One finished fetch's duration, as the dashboard's histogram draws it.
    public struct Sample: Sendable, Hashable {
        /// Seconds.
        public var duration: Double
        /// Its source, `error` when it failed (`other` without one).
        public var source: String
        public var trace: String
        public var placement: String?
    }

    /// The answer to a calls query.
    public struct Result: Sendable {
        /// Matching calls, newest first, at most the limit.
        public var calls: [Call]
        /// Calls that matched (before the limit).
        public var matched: Int
        /// The events read.
        public var coverage: Coverage
        /// Totals over every matched call (with the filter's placement: what concerns it).
        public var totals: CallTotals
        /// The duration of each matched fetch that ended, newest first: the samples of `totals.duration`.
        public var durations: [Sample]
    }

    /// The answer to a placements query.
    public struct Placements: Sendable {
        /// The run asked for.
        public var run: String?
        /// Per placement, over the matching calls, sorted by placement.
        public var placements: [PlacementStatistics]
        /// Calls that matched.
        public var matched: Int
        /// Totals over the matched calls (with the filter's placement: what concerns it), as a calls
        /// query of the same filter answers them.
        public var totals: CallTotals
        /// The events read.
        public var coverage: Coverage
    }

    /// The newest `window` events of `run` (every run when nil), oldest first, and whether they are
    /// all the store holds.
    public func read(_ store: any EventStore, run: String?) -> (events: [Envelope], complete: Bool) {
        let events = store.events(since: nil, limit: window, run: run, placement: nil, name: nil)
        return (events, events.count < window)
    }

    /// The matching calls of `store`'s run (every run without one), newest first, at most `limit`.
    public func calls(in store: any EventStore, filter: CallFilter, limit: Int) -> Result {
        let snapshot = cache.snapshot(of: store, run: filter.run)
        let matched = filter.isRunOnly ? snapshot.newest : match(snapshot, in: store, filter: filter)
        var result = filter.isRunOnly
            ? cache.totals(snapshot) { Self.result(snapshot.traces, matched, filter: filter, coverage: snapshot.coverage, limit: 0) }
            : Self.result(snapshot.traces, matched, filter: filter, coverage: snapshot.coverage, limit: 0)
        result.calls = matched.prefix(max(0, limit)).map { snapshot.traces[$0] }
        return result
    }

    /// The matching calls of `events` (oldest first), newest first, at most `limit`.
    public static func calls(in events: [Envelope], filter: CallFilter, limit: Int, complete: Bool = true) -> Result {
        let all = CallFold.calls(events)
        return result(all, matchIndices(all, events: events, filter: filter), filter: filter,
                      coverage: Coverage(events: events, calls: all.count, complete: complete), limit: limit)
    }

    /// The answer over `calls[i]` for each `i` of `matched` (newest first), with the first `limit` listed.
    private static func result(_ calls: [Call], _ matched: [Int], filter: CallFilter, coverage: Coverage, limit: Int) -> Result {
        var samples: [Sample] = []
        calls.withUnsafeBufferPointer { buffer in
            for i in matched where buffer[i].kind == .fetch && buffer[i].finished
                && (filter.placement == nil || buffer[i].placement == filter.placement) {
                guard let d = buffer[i].duration else { continue }
                samples.append(Sample(duration: d, source: buffer[i].errorCode != nil ? "error" : (buffer[i].source ?? "other"),
                                      trace: buffer[i].trace, placement: buffer[i].placement))
            }
        }
        return Result(calls: matched.prefix(max(0, limit)).map { calls[$0] }, matched: matched.count, coverage: coverage,
                      totals: CallStatistics.totals(calls, matched, placement: filter.placement), durations: samples)
    }

    /// The placements table over the calls of `store` that pass `filter` (see the static variant).
    public func placements(in store: any EventStore, filter: CallFilter) -> Placements {
        let snapshot = cache.snapshot(of: store, run: filter.run)
        let bounds = self.bounds
        if filter.isRunOnly {
            return cache.placements(snapshot, bounds: bounds) {
                Self.placements(snapshot.traces, snapshot.newest, filter: filter, coverage: snapshot.coverage, bounds: bounds)
            }
        }
        return Self.placements(snapshot.traces, match(snapshot, in: store, filter: filter), filter: filter, coverage: snapshot.coverage,
                               bounds: bounds)
    }

    /// The answer over `calls[i]` for each `i` of `matched`.
    private static func placements(_ calls: [Call], _ matched: [Int], filter: CallFilter, coverage: Coverage,
                                   bounds: CallStatistics.Bounds) -> Placements {
        Placements(run: filter.run, placements: CallStatistics.placements(calls, matched, placement: filter.placement, bounds: bounds),
                   matched: matched.count, totals: CallStatistics.totals(calls, matched, placement: filter.placement), coverage: coverage)
    }

    /// The calls of `snapshot` that pass `filter`, as indices into its traces, newest first; with free
    /// text, the run's events are read from `store` (in pages, as the cache reads them) for the calls'
    /// attributes.
    private func match(_ snapshot: CallCache.Snapshot, in store: any EventStore, filter: CallFilter) -> [Int] {
        var byTrace: [String: [Envelope]] = [:]
        if filter.text != nil {
            var since: UInt64 = 0
            let page = cache.limits.page
            var read = 0
            while read < cache.limits.maxEvents {
                let events = store.events(since: since, limit: page, run: filter.run, placement: nil, name: nil)
                for e in events { byTrace[e.trace.hex, default: []].append(e) }
                read += events.count
                guard events.count == page, let last = events.last?.seq else { break }
                since = last
            }
        }
        return snapshot.traces.withUnsafeBufferPointer { buffer in
            snapshot.newest.filter { filter.matches(buffer[$0], events: byTrace[buffer[$0].trace] ?? []) }
        }
    }

    /// The placements table over the matching calls of `events` (oldest first) (a preload counts for
    /// each placement it names; with `placement` set, for that one only). No filter and a filter that
    /// excludes nothing give the same answer.
    public static func placements(in events: [Envelope], filter: CallFilter, complete: Bool = true,
                                  bounds: CallStatistics.Bounds = CallStatistics.Bounds()) -> Placements {
        let all = CallFold.calls(events)
        return placements(all, matchIndices(all, events: events, filter: filter), filter: filter,
                          coverage: Coverage(events: events, calls: all.count, complete: complete), bounds: bounds)
    }

    /// The indices of the calls of `all` that pass `filter`; `events` are theirs (for the free text).
    private static func matchIndices(_ all: [Call], events: [Envelope], filter: CallFilter) -> [Int] {
        let byTrace = filter.text == nil ? [:] : Dictionary(grouping: events, by: { $0.trace.hex })
        return all.indices.filter { filter.matches(all[$0], events: byTrace[all[$0].trace] ?? []) }
    }

    /// The calls of `all` that pass `filter`; `events` are theirs (for the free text).
    private static func match(_ all: [Call], events: [Envelope], filter: CallFilter) -> [Call] {
        matchIndices(all, events: events, filter: filter).map { all[$0] }
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
            traces = Set(Self.match(CallFold.calls(events), events: events, filter: calls).map(\.trace))
        }
        let kept = events.filter { e in
            (name == nil || e.name.rawValue == name) && filter.matchesEvent(e) && (traces?.contains(e.trace.hex) ?? true)
        }
        return since == nil ? Array(kept.suffix(max(0, limit))) : Array(kept.prefix(max(0, limit)))
    }
}

extension StringProtocol {
    fileprivate var trimmingSpaces: String {
        String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
