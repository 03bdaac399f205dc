import FlowEvents
import FlowFetch
import FlowJSON

/// A span as OTLP exports it, built from envelopes. Ids are the envelope's lowercase hex.
public struct OTLPSpan: Sendable, Equatable {
    /// OTLP `SpanKind` values (the JSON encoding writes the integer).
    public enum Kind: Int, Sendable {
        /// SPAN_KIND_INTERNAL: a call, an asset prefetch.
        case `internal` = 1
        /// SPAN_KIND_CLIENT: a request to the backend.
        case client = 3
    }

    /// OTLP `Status`: unset, or an error with a message.
    public enum Status: Sendable, Equatable {
        /// STATUS_CODE_UNSET: nothing went wrong.
        case unset
        /// STATUS_CODE_ERROR, with a message.
        case error(String)
    }

    /// A span event: an envelope that is not a span boundary.
    public struct Event: Sendable, Equatable {
        /// The event name, e.g. `timeout`.
        public var name: String
        /// The envelope's `ts` in nanoseconds.
        public var timeUnixNano: UInt64
        /// The envelope's attrs, plus `placement`.
        public var attributes: [String: JSONValue]

        /// An event with the given values.
        public init(name: String, timeUnixNano: UInt64, attributes: [String: JSONValue]) {
            self.name = name; self.timeUnixNano = timeUnixNano; self.attributes = attributes
        }
    }

    /// 32 lowercase hex characters.
    public var traceId: String
    /// 16 lowercase hex characters.
    public var spanId: String
    /// The parent's span id; nil for a root span.
    public var parentSpanId: String?
    /// E.g. `getFlow main_paywall`, `request targeted`.
    public var name: String
    /// INTERNAL for calls, CLIENT for requests.
    public var kind: Kind
    /// Start, nanoseconds since 1970.
    public var startTimeUnixNano: UInt64
    /// End, nanoseconds since 1970.
    public var endTimeUnixNano: UInt64
    /// The span's attributes (nulls are left out when encoded).
    public var attributes: [String: JSONValue]
    /// The events that happened on this span.
    public var events: [Event]
    /// ERROR when the call, request or preload failed.
    public var status: Status

    /// A span with the given values.
    public init(traceId: String, spanId: String, parentSpanId: String?, name: String, kind: Kind,
                startTimeUnixNano: UInt64, endTimeUnixNano: UInt64, attributes: [String: JSONValue] = [:],
                events: [Event] = [], status: Status = .unset) {
        self.traceId = traceId; self.spanId = spanId; self.parentSpanId = parentSpanId; self.name = name; self.kind = kind
        self.startTimeUnixNano = startTimeUnixNano; self.endTimeUnixNano = endTimeUnixNano
        self.attributes = attributes; self.events = events; self.status = status
    }
}

/// Envelope `ts` (seconds since 1970) as integer nanoseconds, at the envelope's microsecond precision.
@inlinable
public func unixNanos(_ ts: Double) -> UInt64 {
    guard ts.isFinite, ts > 0 else { return 0 }
    return UInt64((ts * 1_000_000).rounded()) &* 1000
}

/// Turns an event stream into OTLP spans, without I/O or clocks (times are passed in).
///
/// One trace per top-level call (`Envelope.trace`). The call's `fetch.start`/`preload.start` opens
/// the root span and its `fetch.end`/`preload.end` closes it; `request.start`..`request.end` (and
/// `assets.prefetch.start`..`.end`) sharing a span id are child spans; every other event becomes a
/// span event on the span it names, or on the root. A trace is returned when its root ends; one
/// that never ends is returned by `expire(now:)` after `traceTimeout`, marked
/// `flowscope.incomplete`. The open-trace table is bounded: past `maxOpenTraces` the oldest open
/// trace is returned early (counted in `overflowCount`).
public struct OTLPTraceBuilder: Sendable {
    /// Most traces kept open at once.
    public let maxOpenTraces: Int
    /// Seconds after its first event that an unfinished trace is exported as it is.
    public let traceTimeout: Double

    /// Traces exported early because the open-trace table was full.
    public private(set) var overflowCount = 0
    /// Traces exported without their root end (timeout, overflow, drain).
    public private(set) var incompleteCount = 0
    /// Events dropped because their trace had already been exported and they open no new span.
    public private(set) var lateEventCount = 0

    /// Traces currently open.
    public var openTraceCount: Int { open.count }

    private struct SpanState {
        var id: SpanID
        var parent: SpanID?
        var startName: EventName?
        var name: String
        var kind: OTLPSpan.Kind
        var start: Double
        var end: Double?
        var placement: String?
        var attrs: [String: JSONValue]
        var status: OTLPSpan.Status = .unset
    }

    private struct TraceState {
        var trace: TraceID
        var generation: UInt64
        var createdAt: Double
        var run: String
        /// The root span (the first fetch.start / preload.start).
        var root: SpanID?
        /// For a continuation of an exported trace: the exported root, parent of every span here.
        var inheritedRoot: SpanID?
        var spans: [SpanID: SpanState] = [:]
        var spanOrder: [SpanID] = []
        var events: [(SpanID, OTLPSpan.Event)] = []
        var firstTs: Double
        var lastTs: Double
        var firstEvent: (SpanID, EventName, String?)
        var openSpans = 0
        /// The client session and profile of the trace's events (the first that carries them).
        var session: SessionID?
        var profile: String?
    }

    private var open: [TraceID: TraceState] = [:]
    /// Open traces in creation order, for expiry and overflow (stale entries skipped lazily).
    private var fifo: [(TraceID, UInt64, Double)] = []
    private var fifoHead = 0
    private var generation: UInt64 = 0
    /// Recently exported traces and their root span, so late events can be told apart.
    private var exported: [TraceID: SpanID] = [:]
    private var exportedOrder: [TraceID] = []
    private var exportedHead = 0

    /// A builder with the given bounds.
    public init(maxOpenTraces: Int = 10_000, traceTimeout: Double = 120) {
        self.maxOpenTraces = max(1, maxOpenTraces)
        self.traceTimeout = traceTimeout
    }

    private static let startNames: Set<EventName> = [.fetchStart, .preloadStart, .requestStart, .assetsPrefetchStart]
    private static let endOf: [EventName: EventName] = [
        .fetchEnd: .fetchStart, .preloadEnd: .preloadStart, .requestEnd: .requestStart, .assetsPrefetchEnd: .assetsPrefetchStart,
    ]
    private static let errorOutcomes: Set<String> = ["timeout", "transport", "server", "client", "decoding", "cancelled", "error"]

    /// Adds one event; returns the spans of every trace it completed (or pushed out of a full table).
    public mutating func add(_ e: Envelope, now: Double) -> [OTLPSpan] {
        var out: [OTLPSpan] = []
        if open[e.trace] == nil {
            if let exportedRoot = exported[e.trace] {
                // Late: only a new span (a background prefetch, a request) opens a continuation.
                guard Self.startNames.contains(e.name), e.name != .fetchStart, e.name != .preloadStart else {
                    lateEventCount += 1
                    return out
                }
                newTrace(e, now: now, inheritedRoot: exportedRoot, out: &out)
            } else {
                newTrace(e, now: now, inheritedRoot: nil, out: &out)
            }
        }
        guard var t = open.removeValue(forKey: e.trace) else { return out }
        if t.session == nil { t.session = e.session }
        if t.profile == nil { t.profile = e.profile }
        t.lastTs = max(t.lastTs, e.ts)
        t.firstTs = min(t.firstTs, e.ts)
        var completes = false
        if Self.startNames.contains(e.name) {
            if t.spans[e.span] == nil {
                let isStage = e.name == .fetchStart || e.name == .preloadStart
                if isStage, t.root == nil, t.inheritedRoot == nil { t.root = e.span }
                t.spans[e.span] = SpanState(id: e.span, parent: nil, startName: e.name, name: Self.spanName(e, attrs: e.attrs.dictionary),
                                            kind: e.name == .requestStart ? .client : .internal, start: e.ts, end: nil,
                                            placement: e.placement, attrs: e.attrs.dictionary)
                t.spanOrder.append(e.span)
                t.openSpans += 1
            } else {
                t.events.append((e.span, Self.event(e)))
            }
        } else if let startName = Self.endOf[e.name], var s = t.spans[e.span], s.startName == startName, s.end == nil {
            s.end = e.ts
            s.attrs.merge(e.attrs.dictionary) { _, new in new }
            if s.placement == nil { s.placement = e.placement }
            if e.name == .requestEnd, s.name == "request" { s.name = Self.spanName(e, attrs: s.attrs) }
            s.status = Self.status(e)
            t.spans[e.span] = s
            t.openSpans -= 1
            if e.span == t.root || (t.inheritedRoot != nil && t.openSpans == 0) { completes = true }
        } else if let startName = Self.endOf[e.name], t.spans[e.span] == nil {
            // An end without its start (the start was dropped): a span of its own, from its duration.
            let duration = e.attrs["duration"]?.numberValue ?? 0
            var s = SpanState(id: e.span, parent: nil, startName: startName, name: Self.spanName(e, attrs: e.attrs.dictionary),
                              kind: e.name == .requestEnd ? .client : .internal, start: e.ts - max(0, duration), end: e.ts,
                              placement: e.placement, attrs: e.attrs.dictionary)
            s.status = Self.status(e)
            s.attrs["flowscope.incomplete"] = true
            t.spans[e.span] = s
            t.spanOrder.append(e.span)
            if t.inheritedRoot != nil, t.openSpans == 0 { completes = true }
        } else {
            t.events.append((e.span, Self.event(e)))
        }
        if completes {
            out += finish(t, complete: true)
        } else {
            open[e.trace] = t
        }
        return out
    }

    /// Returns the spans of every open trace older than `traceTimeout`, marked incomplete.
    public mutating func expire(now: Double) -> [OTLPSpan] {
        var out: [OTLPSpan] = []
        while fifoHead < fifo.count, fifo[fifoHead].2 + traceTimeout <= now {
            let (trace, gen, _) = fifo[fifoHead]
            fifoHead += 1
            if let t = open[trace], t.generation == gen {
                open[trace] = nil
                out += finish(t, complete: false)
            }
        }
        compactFIFO()
        return out
    }

    /// Returns the spans of every open trace, marked incomplete (shutdown).
    public mutating func drain() -> [OTLPSpan] {
        var out: [OTLPSpan] = []
        for (trace, _, _) in fifo[fifoHead...] {
            if let t = open.removeValue(forKey: trace) { out += finish(t, complete: false) }
        }
        fifo.removeAll()
        fifoHead = 0
        return out
    }

    private mutating func newTrace(_ e: Envelope, now: Double, inheritedRoot: SpanID?, out: inout [OTLPSpan]) {
        if open.count >= maxOpenTraces {
            while fifoHead < fifo.count {
                let (trace, gen, _) = fifo[fifoHead]
                fifoHead += 1
                if let t = open[trace], t.generation == gen {
                    open[trace] = nil
                    overflowCount += 1
                    out += finish(t, complete: false)
                    break
                }
            }
            compactFIFO()
        }
        if fifo.count - fifoHead > 2 * maxOpenTraces + 1024 {
            // Mostly completed traces: keep the live entries only, so the FIFO stays bounded.
            let live = open
            fifo = fifo[fifoHead...].filter { live[$0.0]?.generation == $0.1 }
            fifoHead = 0
        }
        generation += 1
        open[e.trace] = TraceState(trace: e.trace, generation: generation, createdAt: now, run: e.run, root: nil,
                                   inheritedRoot: inheritedRoot, firstTs: e.ts, lastTs: e.ts,
                                   firstEvent: (e.span, e.name, e.placement))
        fifo.append((e.trace, generation, now))
    }

    private mutating func compactFIFO() {
        if fifoHead > 1024, fifoHead * 2 > fifo.count {
            fifo.removeFirst(fifoHead)
            fifoHead = 0
        }
    }

    private mutating func remember(_ trace: TraceID, root: SpanID) {
        if exported[trace] == nil { exportedOrder.append(trace) }
        exported[trace] = root
        while exportedOrder.count - exportedHead > maxOpenTraces {
            exported[exportedOrder[exportedHead]] = nil
            exportedHead += 1
        }
        if exportedHead > 1024, exportedHead * 2 > exportedOrder.count {
            exportedOrder.removeFirst(exportedHead)
            exportedHead = 0
        }
    }

    /// Assembles a trace's spans.
    private mutating func finish(_ trace: TraceState, complete: Bool) -> [OTLPSpan] {
        var t = trace
        if !complete { incompleteCount += 1 }
        let traceHex = t.trace.hex
        // The root: the call's stage span, or (no start seen) one made from the first event.
        var rootId = t.root
        if rootId == nil, t.inheritedRoot == nil {
            let (span, name, placement) = t.firstEvent
            rootId = span
            if t.spans[span] == nil {
                var attrs: [String: JSONValue] = ["flowscope.incomplete": true]
                if let placement { attrs["placement"] = .string(placement) }
                t.spans[span] = SpanState(id: span, parent: nil, startName: nil, name: "\(name.rawValue) (incomplete)",
                                          kind: .internal, start: t.firstTs, end: t.lastTs, placement: placement, attrs: attrs)
                t.spanOrder.insert(span, at: 0)
            }
        }
        let rootEnd = rootId.flatMap { t.spans[$0]?.end } ?? t.lastTs
        var events: [SpanID: [OTLPSpan.Event]] = [:]
        for (span, event) in t.events {
            if t.spans[span] != nil {
                events[span, default: []].append(event)
            } else if let rootId {
                events[rootId, default: []].append(event)
            } else {
                lateEventCount += 1
            }
        }
        var out: [OTLPSpan] = []
        out.reserveCapacity(t.spanOrder.count)
        for id in t.spanOrder {
            guard var s = t.spans[id] else { continue }
            let isRoot = id == rootId
            if s.end == nil {
                s.end = max(s.start, isRoot ? t.lastTs : rootEnd)
                s.attrs["flowscope.incomplete"] = true
            }
            var attrs = s.attrs
            if let placement = s.placement { attrs["placement"] = .string(placement) }
            if isRoot { attrs["flowscope.run"] = .string(t.run) }
            if let session = t.session { attrs["session.id"] = .string(session.hex) }
            if let profile = t.profile { attrs["flowscope.profile"] = .string(profile) }
            let parent: SpanID? = isRoot ? nil : (s.parent ?? rootId ?? t.inheritedRoot)
            out.append(OTLPSpan(traceId: traceHex, spanId: id.hex, parentSpanId: parent?.hex, name: s.name, kind: s.kind,
                                startTimeUnixNano: unixNanos(s.start), endTimeUnixNano: unixNanos(s.end ?? s.start),
                                attributes: attrs, events: events[id] ?? [], status: s.status))
        }
        if let root = rootId ?? t.inheritedRoot { remember(t.trace, root: root) }
        return out
    }

    private static func spanName(_ e: Envelope, attrs: [String: JSONValue]) -> String {
        func withPlacement(_ call: String) -> String {
            guard let placement = e.placement, !placement.isEmpty else { return call }
            return "\(call) \(placement)"
        }
        switch e.name {
        case .fetchStart, .fetchEnd: return withPlacement(attrs["call"]?.stringValue ?? "getFlow")
        case .preloadStart, .preloadEnd: return withPlacement(attrs["call"]?.stringValue ?? "preloadFlows")
        case .requestStart, .requestEnd:
            guard let kind = attrs["kind"]?.stringValue else { return "request" }
            return "request \(kind)"
        case .assetsPrefetchStart, .assetsPrefetchEnd: return "assets.prefetch"
        default: return e.name.rawValue
        }
    }

    private static func status(_ e: Envelope) -> OTLPSpan.Status {
        switch e.name {
        case .fetchEnd:
            if let code = e.attrs["errorCode"], code != .null {
                return .error(code.stringValue ?? code.jsonText)
            }
        case .preloadEnd:
            if let failed = e.attrs["failed"]?.objectValue, !failed.isEmpty {
                return .error("failed: " + failed.keys.sorted().map { "\($0)=\(failed[$0]!.stringValue ?? failed[$0]!.jsonText)" }.joined(separator: ", "))
            }
        case .requestEnd:
            if let outcome = e.attrs["outcome"]?.stringValue, errorOutcomes.contains(outcome) { return .error(outcome) }
        case .assetsPrefetchEnd:
            if let failed = e.attrs["failed"]?.intValue, failed > 0 { return .error("\(failed) asset(s) failed") }
        default: break
        }
        return .unset
    }

    private static func event(_ e: Envelope) -> OTLPSpan.Event {
        var attrs = e.attrs.dictionary
        if let placement = e.placement, attrs["placement"] == nil { attrs["placement"] = .string(placement) }
        return OTLPSpan.Event(name: e.name.rawValue, timeUnixNano: unixNanos(e.ts), attributes: attrs)
    }
}
