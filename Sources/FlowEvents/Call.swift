import FlowFetch
import FlowJSON

/// One top-level call (getFlow, getFlowOrDefault, preloadFlows, ...): the events of one trace,
/// folded by ``CallFold``, the one place events become calls (docs/events-and-metrics.md, "Numbers").
///
/// A trace is a call when it holds a start or an end event (fetch.start/fetch.end,
/// preload.start/preload.end). The call's own start is the first start event of the trace; its end
/// is the end event of the same span (an end without a held start is taken as it is).
public struct Call: Sendable, Equatable {
    /// A fetch (getFlow and friends: one placement) or a preload (several placements).
    public enum Kind: String, Sendable, Hashable {
        case fetch, preload
    }

    /// One request of the call, from its request.start and request.end.
    public struct Request: Sendable, Equatable {
        /// The placement it asks for, when it has one.
        public var placement: String?
        /// `targeted`, `default`, `layout`, `asset` or `profile`.
        public var kind: String
        /// request.start's `timeout`: the budget the request was given, seconds.
        public var budget: Double?
        /// Engine clock of request.start (for an end without its start: the end minus its duration).
        public var issuedAt: Double
        /// Engine clock of request.end; nil while open.
        public var endedAt: Double?
        /// request.end's `outcome` (`ok`, `timeout`, `cancelled`, ...); nil while open.
        public var outcome: String?
        /// Whether request.start was held.
        public var hasStart: Bool
        /// request.end's `duration` (seconds from the request's start to its end), when it reported one.
        public var reportedDuration: Double?
        /// Seq of request.end; nil while open.
        public var endSeq: UInt64?

        /// A request with the given values.
        public init(placement: String?, kind: String, budget: Double?, issuedAt: Double, endedAt: Double?, outcome: String?,
                    hasStart: Bool, reportedDuration: Double? = nil, endSeq: UInt64? = nil) {
            self.placement = placement; self.kind = kind; self.budget = budget; self.issuedAt = issuedAt
            self.endedAt = endedAt; self.outcome = outcome; self.hasStart = hasStart
            self.reportedDuration = reportedDuration; self.endSeq = endSeq
        }
    }

    /// A `timeout` event of the call: a stage deadline cut it.
    public struct Timeout: Sendable, Equatable {
        /// The placement the event names (nil: the call's own, see `placement(of:)`).
        public var placement: String?
        /// The stage the deadline cut (`targeted`, `default`, ...), when the event says.
        public var stage: String?
        /// Engine clock.
        public var t: Double
    }

    /// The trace id, 32 lowercase hex characters.
    public var trace: String
    /// The run its events belong to.
    public var run: String
    /// Fetch or preload (from its start or end event).
    public var kind: Kind
    /// `getFlow`, `getFlowOrDefault`, ... or `preloadFlows` (the `call` attribute of its start or end).
    public var name: String?
    /// The placement of a fetch; nil for a preload (see `placements`).
    public var placement: String?
    /// The placements a preload names (preload.start's `placements`, preload.end's `succeeded` and
    /// `failed`), in the order first named; empty for a fetch.
    public var placements: [String] = []
    /// Wall clock of the start event (else of the first event held), seconds since 1970.
    public var start: Double
    /// Wall clock and seq of the end event; nil while open.
    public var endTs: Double?
    public var endSeq: UInt64?
    /// Engine clock of the start (else the earliest event held) and of the latest event held.
    public var startT: Double
    public var endT: Double
    /// The end event's `duration`, when it reported one.
    public var reportedDuration: Double?
    /// Engine clock of the end event; nil while open.
    public var endedAt: Double?
    /// fetch.end's source (`network`, `cache`, `defaultAudience`, `fallbackFile`); nil for an error or a preload.
    public var source: String?
    /// fetch.end's audience and variation.
    public var audience: String?
    public var variation: String?
    /// fetch.end's targetingLost.
    public var targetingLost = false
    /// The end event's error code, nil when it has none.
    public var errorCode: JSONValue?
    /// A preload's failed placements and their codes (preload.end's `failed`).
    public var failed: [String: JSONValue] = [:]
    /// Its requests, in the order issued.
    public var requests: [Request] = []
    /// Its `timeout` events.
    public var timeouts: [Timeout] = []
    /// The `to` of each `fallback` event (`cache`, `defaultAudience`, `fallbackFile`), in order.
    public var fallbacks: [String] = []
    /// Its cache reads in order: `hit`, `miss`, `expired`, `corrupt` (cache.* events).
    public var cacheReads: [String] = []
    /// `applied` (attribution.applied) or `timeout` (attribution.timeout) when the call waited for
    /// attribution; the last one held.
    public var attribution: String?
    /// Whether its start event is held.
    public var hasStart = false
    /// Whether its end event is held.
    public var finished = false
    /// Whether an event arrived after a later one of the call (by engine clock), or its start
    /// after its end.
    public var outOfOrder = false
    /// request.end events without their request.start, and end events past the call's own.
    public var unpaired = 0
    /// Events held.
    public var events = 0
    /// Seq of its first and last event held.
    public var firstSeq: UInt64
    public var lastSeq: UInt64
    /// Whether the trace holds a start or an end event: a call. Otherwise it is engine-level
    /// activity (attribution observed, a profile fetch), which `CallFold.calls` leaves out.
    public internal(set) var isCall = false
    /// The span of its own start (or end) event.
    var span: SpanID?

    /// The end event's `duration`, else its end minus its start on the engine clock; nil while open.
    public var duration: Double? {
        guard let endedAt else { return nil }
        return reportedDuration ?? max(0, endedAt - startT)
    }

    /// Still running: its start is held, its end is not.
    public var isOpen: Bool { !finished }

    /// Events are missing or arrived out of order: no start, an unpaired end, or out of order.
    public var isIncomplete: Bool { !hasStart || outOfOrder || unpaired > 0 }

    /// Whether it failed: an error code, or a preload with a failed placement.
    public var isError: Bool { errorCode != nil || !failed.isEmpty }

    /// Every placement it concerns: its own, or the ones a preload names.
    public var allPlacements: [String] { placement.map { [$0] } ?? placements }

    /// Whether the call concerns `placement`: `allPlacements.contains(placement)`, without building the list.
    public func concerns(_ placement: String) -> Bool {
        if let own = self.placement { return own == placement }
        return placements.contains(placement)
    }

    /// The placement a timeout of this call concerns: the one it names, else the call's own.
    public func placement(of timeout: Timeout) -> String? { timeout.placement ?? placement }
}

/// Folds envelopes into calls: the one fold every reader uses (stores, API, timeline, otlp).
///
/// Events may come in any order and any interleaving of runs and traces; each is added once.
///
/// ```swift
/// var fold = CallFold()
/// for e in envelopes { fold.add(e) }
/// let calls = fold.calls  // in the order their first event arrived
/// ```
public struct CallFold: Sendable {
    private var byTrace: [TraceID: Int] = [:]
    private var folded: [Call] = []
    private var openRequests: [[SpanID: Int]] = []

    /// An empty fold.
    public init() {}

    /// The calls so far, in the order their first event arrived (traces that hold no start or end
    /// event are not calls and are left out).
    public var calls: [Call] {
        var out: [Call] = []
        out.reserveCapacity(folded.count)
        for c in folded where c.isCall { out.append(c) }
        return out
    }

    /// Every trace so far, calls and engine-level activity (see `Call.isCall`), in the order their
    /// first event arrived.
    public var traces: [Call] { folded }

    /// How many of the traces are calls (`calls.count`, without building the list).
    public var callCount: Int { folded.reduce(0) { $1.isCall ? $0 + 1 : $0 } }

    /// Adds one envelope; returns the index of its trace in `traces`.
    @discardableResult
    public mutating func add(_ e: Envelope) -> Int {
        add(e.event, seq: e.seq, ts: e.ts, run: e.run)
    }

    /// Adds one engine event with its envelope's seq, wall clock and run; returns the index of its
    /// trace in `traces`.
    @discardableResult
    public mutating func add(_ e: EngineEvent, seq: UInt64, ts: Double, run: String) -> Int {
        let index: Int
        if let i = byTrace[e.trace] {
            index = i
        } else {
            index = folded.count
            byTrace[e.trace] = index
            folded.append(Call(trace: e.trace.hex, run: run, kind: .fetch, placement: nil, start: ts, startT: e.t,
                               endT: e.t, firstSeq: seq, lastSeq: seq))
            openRequests.append([:])
        }
        if Self.add(e, seq: seq, ts: ts, to: &folded[index], requests: &openRequests[index]) { folded[index].isCall = true }
        return index
    }

    /// Folds `envelopes` (in seq order) into calls, newest call (highest last seq) first.
    public static func calls(_ envelopes: [Envelope]) -> [Call] {
        var fold = CallFold()
        var sorted = true
        for i in envelopes.indices.dropFirst() where envelopes[i - 1].seq > envelopes[i].seq { sorted = false; break }
        for e in sorted ? envelopes : envelopes.sorted(by: { $0.seq < $1.seq }) { fold.add(e) }
        return fold.calls.sorted { $0.lastSeq > $1.lastSeq }
    }

    /// Adds one event to call `c`; true when it is a start or end event.
    private static func add(_ e: EngineEvent, seq: UInt64, ts: Double, to c: inout Call,
                            requests open: inout [SpanID: Int]) -> Bool {
        c.events += 1
        c.firstSeq = min(c.firstSeq, seq)
        c.lastSeq = max(c.lastSeq, seq)
        if e.t < c.endT { c.outOfOrder = true }
        c.endT = max(c.endT, e.t)
        if !c.hasStart { c.startT = min(c.startT, e.t) }
        let a = e.attrs
        switch e.name {
        case .fetchStart, .preloadStart:
            guard !c.hasStart else { return true } // a stage's own start inside the call
            if c.finished, let span = c.span, span != e.span { return true }
            c.hasStart = true
            if c.finished { c.outOfOrder = true }
            c.span = e.span
            c.start = ts
            c.startT = e.t
            c.kind = e.name == .preloadStart ? .preload : .fetch
            c.name = a["call"]?.stringValue ?? (e.name == .preloadStart ? "preloadFlows" : c.name)
            if e.name == .fetchStart, let p = e.placement { c.placement = p }
            addNamed(a["placements"], to: &c)
            return true
        case .fetchEnd, .preloadEnd:
            if c.finished || (c.span != nil && c.span != e.span) {
                c.unpaired += 1
                return true
            }
            c.finished = true
            c.span = e.span
            c.endTs = ts
            c.endSeq = seq
            c.endedAt = e.t
            if !c.hasStart { c.kind = e.name == .preloadEnd ? .preload : .fetch }
            if c.name == nil { c.name = a["call"]?.stringValue ?? (e.name == .preloadEnd ? "preloadFlows" : nil) }
            if e.name == .fetchEnd {
                if let p = e.placement { c.placement = p }
                c.source = a["source"]?.stringValue
                c.audience = a["audience"]?.stringValue
                c.variation = a["variation"]?.stringValue
                c.targetingLost = a["targetingLost"]?.boolValue ?? false
            } else {
                addNamed(a["succeeded"], to: &c)
                c.failed = a["failed"]?.objectValue ?? [:]
                addNamed(.array(c.failed.keys.sorted().map(JSONValue.string)), to: &c)
            }
            if let code = a["errorCode"], code != .null { c.errorCode = code }
            if let d = a["duration"]?.numberValue, d.isFinite, d >= 0 { c.reportedDuration = d }
            return true
        case .requestStart:
            open[e.span] = c.requests.count
            c.requests.append(Call.Request(placement: e.placement, kind: a["kind"]?.stringValue ?? "",
                                           budget: a["timeout"]?.numberValue, issuedAt: e.t, endedAt: nil,
                                           outcome: nil, hasStart: true))
        case .requestEnd:
            let reported = a["duration"]?.numberValue.flatMap { $0.isFinite && $0 >= 0 ? $0 : nil }
            if let i = open.removeValue(forKey: e.span) {
                c.requests[i].endedAt = e.t
                c.requests[i].outcome = a["outcome"]?.stringValue
                c.requests[i].reportedDuration = reported
                c.requests[i].endSeq = seq
            } else {
                c.unpaired += 1
                c.requests.append(Call.Request(placement: e.placement, kind: a["kind"]?.stringValue ?? "", budget: nil,
                                               issuedAt: e.t - (reported ?? 0), endedAt: e.t, outcome: a["outcome"]?.stringValue,
                                               hasStart: false, reportedDuration: reported, endSeq: seq))
            }
        case .timeout:
            c.timeouts.append(Call.Timeout(placement: e.placement, stage: a["stage"]?.stringValue, t: e.t))
        case .fallback:
            c.fallbacks.append(a["to"]?.stringValue ?? "")
        case .cacheHit: c.cacheReads.append("hit")
        case .cacheMiss: c.cacheReads.append("miss")
        case .cacheExpired: c.cacheReads.append("expired")
        case .cacheCorrupt: c.cacheReads.append("corrupt")
        case .attributionApplied: c.attribution = "applied"
        case .attributionTimeout: c.attribution = "timeout"
        default:
            break
        }
        return false
    }

    private static func addNamed(_ value: JSONValue?, to c: inout Call) {
        for v in value?.arrayValue ?? [] {
            if let p = v.stringValue, !c.placements.contains(p) { c.placements.append(p) }
        }
    }
}
