import FlowEvents
import FlowFetch
import FlowJSON
import Synchronization

/// The `metrics` sink: turns events into the Prometheus metrics of events-and-metrics.md and
/// renders them for `/metrics`.
///
///     let sink = try MetricsSink(options: .init(), version: "1.0.0")
///     pipeline.add(sink)                        // consume(_:) updates the counters
///     let (contentType, format) = MetricsSink.negotiate(accept: request.accept)
///     let body = sink.render(format: format)
public final class MetricsSink: EventSink, MetricsExposing, SinkStatsCollecting {
    /// The wire format of a render.
    public typealias Format = Exposition.Format

    /// Options from the config's `sinks` entry `{ "type": "metrics", ... }`.
    public struct Options: Sendable, Equatable {
        /// Distinct placements kept per metric; more fold into `placement="_other"`. At least 1.
        public var placementLimit: Int
        /// Histogram bucket upper bounds in seconds, finite and strictly increasing.
        public var buckets: [Double]

        /// Default limit of distinct placements.
        public static let defaultPlacementLimit = 200

        /// Options with the given values (checked when the sink is created).
        public init(placementLimit: Int = defaultPlacementLimit, buckets: [Double] = HistogramFamily.defaultSecondsBuckets) {
            self.placementLimit = placementLimit
            self.buckets = buckets
        }

        /// Reads options from a sink's config object at JSON path `path` (e.g. `$.sinks[0]`).
        /// `type` and `enabled` belong to the config loader and are ignored; any other unknown key is an error.
        public init(json: [String: JSONValue], path: String = "$") throws(JSONInputError) {
            self.init()
            for key in json.keys.sorted() {
                let value = json[key] ?? .null
                let at = Self.memberPath(path, key)
                switch key {
                case "type", "enabled":
                    continue
                case "placementLimit":
                    guard let n = value.intValue, n >= 1 else {
                        throw JSONInputError(path: at, message: "expected an integer >= 1, got \(value.jsonText)")
                    }
                    placementLimit = n
                case "buckets":
                    guard let items = value.arrayValue, !items.isEmpty else {
                        throw JSONInputError(path: at, message: "expected a non-empty array of increasing numbers (seconds), got \(value.jsonText)")
                    }
                    var bounds: [Double] = []
                    for (i, item) in items.enumerated() {
                        guard let b = item.numberValue, b.isFinite else {
                            throw JSONInputError(path: "\(at)[\(i)]", message: "expected a finite number, got \(item.jsonText)")
                        }
                        if let last = bounds.last, !(b > last) {
                            throw JSONInputError(path: "\(at)[\(i)]",
                                                 message: "expected a number greater than the previous bucket \(JSONValue.number(last).jsonText), got \(item.jsonText)")
                        }
                        bounds.append(b)
                    }
                    buckets = bounds
                default:
                    throw JSONInputError(path: at, message: "unknown key for the metrics sink; expected one of: buckets, placementLimit (and type, enabled)")
                }
            }
        }

        static func memberPath(_ base: String, _ key: String) -> String {
            let plain = !key.isEmpty && key.utf8.allSatisfy { FamilyDescriptor.isNameByte($0) }
                && !(48...57).contains(key.utf8.first ?? 0)
            return plain ? "\(base).\(key)" : "\(base)[\(JSONValue.string(key).jsonText)]"
        }
    }

    /// Distinct values kept per label other than `placement` (call, source, outcome, stage, kind,
    /// code, to, reason, sink): these come from event attributes, which ingest makes untrusted.
    public static let attributeValueLimit = 64

    /// The type name in the config's `sinks` list.
    public static let type = "metrics"
    /// The sink's name (`metrics` unless its config entry names it).
    public let name: String
    /// `metrics`.
    public var type: String { Self.type }
    /// The registry holding exactly the spec's families.
    public let registry: MetricsRegistry
    /// The options in force.
    public let options: Options

    let fetches: CounterFamily
    let fetchDuration: HistogramFamily
    let cacheLookups: CounterFamily
    let timeouts: CounterFamily
    let fallbacks: CounterFamily
    let targetingLost: CounterFamily
    let preloadErrors: CounterFamily
    let requests: CounterFamily
    let requestDuration: HistogramFamily
    let assetsBytes: Counter
    let sinkDropped: CounterFamily
    let sinkQueueDepth: GaugeFamily
    let sinkConsumed: CounterFamily
    let sinkErrors: CounterFamily
    let sinkUp: GaugeFamily
    let sinkSaturated: GaugeFamily
    /// `flowscope_events_total{name}`, one pre-created series per event name.
    let eventCounters: [EventName: Counter]
    /// Series already looked up, by family and raw label values (see `SeriesHandles`).
    private let handles: Mutex<SeriesHandles>

    /// A sink with the spec's families registered in a fresh registry and `flowscope_build_info{version}` set to 1.
    /// Throws when `options` are out of range (a placement limit below 1, buckets not increasing).
    public init(name: String = "metrics", options: Options = Options(), version: String) throws(MetricsError) {
        self.name = name
        guard options.placementLimit >= 1 else {
            throw MetricsError("metrics sink: placementLimit must be >= 1, got \(options.placementLimit)")
        }
        self.options = options
        let r = MetricsRegistry()
        registry = r
        let p = options.placementLimit, a = Self.attributeValueLimit
        fetches = try r.counter("flowscope_fetches_total", help: "Flow fetches (getFlow and friends) that ended, by where the flow came from and outcome.",
                                labels: ["placement", "call", "source", "outcome"],
                                valueLimits: ["placement": p, "call": a, "source": a, "outcome": a])
        fetchDuration = try r.histogram("flowscope_fetch_duration_seconds", help: "Duration of flow fetches, from call to result.",
                                        labels: ["placement", "source"], buckets: options.buckets, unit: "seconds",
                                        valueLimits: ["placement": p, "source": a])
        cacheLookups = try r.counter("flowscope_cache_lookups_total", help: "Flow cache lookups by result (hit, miss, expired).",
                                     labels: ["placement", "result"], valueLimits: ["placement": p])
        timeouts = try r.counter("flowscope_timeouts_total", help: "Stages that ran out of their time budget.",
                                 labels: ["placement", "stage"], valueLimits: ["placement": p, "stage": a])
        fallbacks = try r.counter("flowscope_fallbacks_total", help: "Fallbacks taken, by what was used instead and why.",
                                  labels: ["placement", "to", "reason"], valueLimits: ["placement": p, "to": a, "reason": a])
        targetingLost = try r.counter("flowscope_targeting_lost_total", help: "Fetches that returned a flow without the user's targeted audience.",
                                      labels: ["placement"], valueLimits: ["placement": p])
        preloadErrors = try r.counter("flowscope_preload_errors_total", help: "Placements that failed to preload, by error code.",
                                      labels: ["placement", "code"], valueLimits: ["placement": p, "code": a])
        requests = try r.counter("flowscope_requests_total", help: "Backend requests that ended, by kind and outcome.",
                                 labels: ["kind", "outcome"], valueLimits: ["kind": a, "outcome": a])
        requestDuration = try r.histogram("flowscope_request_duration_seconds", help: "Duration of backend requests.",
                                          labels: ["kind"], buckets: options.buckets, unit: "seconds", valueLimits: ["kind": a])
        assetsBytes = try r.counter("flowscope_assets_prefetched_bytes_total", help: "Bytes of assets prefetched.",
                                    unit: "bytes").labels()
        let events = try r.counter("flowscope_events_total", help: "Events seen by the metrics sink, by name.", labels: ["name"])
        eventCounters = Dictionary(uniqueKeysWithValues: EventName.allCases.map { ($0, events.labels($0.rawValue)) })
        handles = Mutex(SeriesHandles(events: EventName.allCases.map { ($0, events.labels($0.rawValue)) }))
        sinkDropped = try r.counter("flowscope_events_dropped_total",
                                    help: "Events a sink lost: dropped from its full queue, or lost by the sink itself.",
                                    labels: ["sink"], valueLimits: ["sink": a])
        sinkQueueDepth = try r.gauge("flowscope_sink_queue_depth", help: "Events waiting in a sink's queue.",
                                     labels: ["sink"], valueLimits: ["sink": a])
        sinkConsumed = try r.counter("flowscope_sink_consumed_total", help: "Events handed to a sink.",
                                     labels: ["sink"], valueLimits: ["sink": a])
        sinkErrors = try r.counter("flowscope_sink_errors_total", help: "A sink's failed writes, exports and program restarts.",
                                   labels: ["sink"], valueLimits: ["sink": a])
        sinkUp = try r.gauge("flowscope_sink_up", help: "1 while a sink works, 0 while its last write or export failed.",
                             labels: ["sink"], valueLimits: ["sink": a])
        sinkSaturated = try r.gauge("flowscope_sink_saturated",
                                    help: "1 while a sink cannot keep up: its queue overflowed or refused an ingest batch in the last 5 s.",
                                    labels: ["sink"], valueLimits: ["sink": a])
        let buildInfo = try r.gauge("flowscope_build_info", help: "FlowScope build; the value is always 1.", labels: ["version"])
        buildInfo.labels(version).set(1)
    }

    /// Picks the format for a scrape from its `Accept` header (see `Exposition.negotiate`).
    public static func negotiate(accept: String?) -> (contentType: String, format: Format) {
        Exposition.negotiate(accept: accept)
    }

    /// Updates the metrics from a batch of events. Series are found through the sink's handle
    /// cache (one lock per batch; no label arrays built and no family lock taken for a series seen
    /// before), then incremented with one atomic add.
    public func consume(_ batch: [Envelope]) {
        handles.withLock { handles in
            // Each envelope is lent in place (no copy, no reference counting).
            batch.withUnsafeBufferPointer { events in
                for i in events.indices { record(events[i], &handles) }
            }
        }
    }

    /// Updates the metrics from every batch under one lock.
    public func consume(batches: [[Envelope]]) {
        handles.withLock { handles in
            for batch in batches {
                batch.withUnsafeBufferPointer { events in
                    for i in events.indices { record(events[i], &handles) }
                }
            }
        }
    }


    /// Reads every sink's stats at each render (scrape time) into `flowscope_sink_*` and
    /// `flowscope_events_dropped_total`, one series per sink, the metrics sink included.
    ///
    /// ```swift
    /// let pipeline = EventPipeline(sinks: [metrics, jsonl])
    /// metrics.collectSinkStats(from: pipeline)
    /// ```
    public func collectSinkStats(_ stats: @escaping @Sendable () -> [SinkStats]) {
        registry.collectBeforeRender { [sinkDropped, sinkQueueDepth, sinkConsumed, sinkErrors, sinkUp, sinkSaturated] in
            for s in stats() {
                sinkDropped.labels(s.sink).mirror(s.dropped)
                sinkConsumed.labels(s.sink).mirror(s.consumed)
                sinkErrors.labels(s.sink).mirror(s.errors)
                sinkQueueDepth.labels(s.sink).set(Double(s.queueDepth))
                sinkUp.labels(s.sink).set(s.up ? 1 : 0)
                sinkSaturated.labels(s.sink).set(s.saturated ? 1 : 0)
            }
        }
    }

    /// Reads `pipeline`'s sink stats at each render (see ``collectSinkStats(_:)``); the pipeline
    /// is not retained.
    public func collectSinkStats(from pipeline: EventPipeline) {
        collectSinkStats { [weak pipeline] in pipeline?.stats() ?? [] }
    }

    /// The exposition for a scrape's `Accept` header (see ``negotiate(accept:)``).
    public func exposition(accept: String?) -> (contentType: String, body: [UInt8]) {
        let (contentType, format) = Self.negotiate(accept: accept)
        return (contentType, render(format: format))
    }

    /// Every metric in `format`, as bytes.
    public func render(format: Format = .prometheusText) -> [UInt8] { registry.render(format: format) }

    /// Renders into the registry's reused buffer and calls `body` with the bytes (no copy).
    public func withRendered<R: Sendable>(format: Format, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        registry.withRendered(format: format, body)
    }

    func record(_ e: borrowing Envelope, _ h: inout SeriesHandles) {
        h.events(e.name)?.inc()
        switch e.name {
        case .fetchEnd:
            guard !h.endedBefore(e.trace) else { return }
            let placement = e.placement ?? ""
            let failed = e.attrs["errorCode"].map { $0 != .null } ?? false
            let source = Self.text(e.attrs["source"]).flatMap { $0.isEmpty ? nil : $0 } ?? "none"
            let call = Self.label(e.attrs["call"]), outcome = failed ? "error" : "success"
            h.counter(SeriesKey(.fetches, placement, call, source, outcome), fetches).inc()
            if let d = Self.duration(e.attrs["duration"]) {
                h.histogram(SeriesKey(.fetchDuration, placement, source), fetchDuration).observe(d)
            }
            if e.attrs["targetingLost"]?.boolValue == true {
                h.placementCounter(.targetingLost, e.placement, targetingLost).inc()
            }
        case .cacheHit: h.placementCounter(.cacheHit, e.placement, cacheLookups).inc()
        case .cacheMiss: h.placementCounter(.cacheMiss, e.placement, cacheLookups).inc()
        case .cacheExpired: h.placementCounter(.cacheExpired, e.placement, cacheLookups).inc()
        case .timeout:
            h.counter(SeriesKey(.timeouts, e.placement ?? "", Self.label(e.attrs["stage"])), timeouts).inc()
        case .fallback:
            h.counter(SeriesKey(.fallbacks, e.placement ?? "", Self.label(e.attrs["to"]), Self.label(e.attrs["reason"])), fallbacks).inc()
        case .preloadEnd:
            guard !h.endedBefore(e.trace) else { return }
            // Sorted, so that which placements fold into `_other` does not depend on hash order.
            for (failedPlacement, code) in (e.attrs["failed"]?.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) {
                h.counter(SeriesKey(.preloadErrors, failedPlacement, Self.label(code)), preloadErrors).inc()
            }
        case .requestEnd:
            let kind = Self.label(e.attrs["kind"])
            h.counter(SeriesKey(.requests, kind, Self.label(e.attrs["outcome"])), requests).inc()
            if let d = Self.duration(e.attrs["duration"]) {
                h.histogram(SeriesKey(.requestDuration, kind), requestDuration).observe(d)
            }
        case .assetsPrefetchEnd:
            if let bytes = e.attrs["bytes"]?.intValue, bytes > 0 { assetsBytes.add(UInt64(bytes)) }
        default:
            break
        }
    }

    /// A string attribute (numbers and booleans as their JSON text); nil when absent or null.
    static func text(_ value: JSONValue?) -> String? {
        switch value {
        case nil, .null?: nil
        case .string(let s)?: s
        case let v?: v.jsonText
        }
    }

    /// A label value from an attribute, `unknown` when it is missing.
    static func label(_ value: JSONValue?) -> String { text(value) ?? "unknown" }

    /// A duration in seconds when it is a finite, non-negative number.
    static func duration(_ value: JSONValue?) -> Double? {
        guard let d = value?.numberValue, d.isFinite, d >= 0 else { return nil }
        return d
    }
}

/// Which family a cached series belongs to.
enum SeriesFamily: UInt8 {
    case fetches, fetchDuration, cacheLookups, timeouts, fallbacks, targetingLost, preloadErrors, requests,
         requestDuration
}

/// A series as the sink looks it up: its family and its label values, in the family's order, as
/// they came in the event (before any folding into `_other`, which the family decides once and
/// for good).
struct SeriesKey: Hashable {
    var family: SeriesFamily
    var a: String
    var b: String
    var c: String
    var d: String
    var count: Int

    init(_ family: SeriesFamily, _ a: String, _ b: String? = nil, _ c: String? = nil, _ d: String? = nil) {
        self.family = family
        self.a = a; self.b = b ?? ""; self.c = c ?? ""; self.d = d ?? ""
        count = d != nil ? 4 : c != nil ? 3 : b != nil ? 2 : 1
    }

    /// The label values, for the family lookup on a miss.
    var values: [String] { Array([a, b, c, d].prefix(count)) }
}

/// A series of a family whose only label is the placement (or the placement and a fixed value):
/// what `SeriesHandles` keeps per placement.
enum PlacementSeries: Int, CaseIterable {
    /// `flowscope_cache_lookups_total{placement, result="hit"}`, and so on.
    case cacheHit, cacheMiss, cacheExpired
    /// `flowscope_targeting_lost_total{placement}`.
    case targetingLost

    /// The label values after the placement.
    var values: [String] {
        switch self {
        case .cacheHit: ["hit"]
        case .cacheMiss: ["miss"]
        case .cacheExpired: ["expired"]
        case .targetingLost: []
        }
    }
}

/// The metrics sink's series handles, so that an event finds its series without building label
/// arrays or taking a family's lock:
/// - `flowscope_events_total` by event name, in a short list compared by name;
/// - per placement, the series of the families labelled by placement alone (cache lookups,
///   targeting lost), the placement compared with the last one seen before any hashing;
/// - every other series by `SeriesKey`, the last one used kept aside.
/// Bounded: a table is emptied when it reaches `limit` entries (the families themselves stay
/// bounded by their value limits; only the shortcut is lost).
struct SeriesHandles {
    static let limit = 4096
    var counters = HandleCache<Counter>()
    var histograms = HandleCache<Histogram>()
    /// One series per event name.
    let eventSeries: [(name: EventName, series: Counter)]
    /// Row of each placement in `placementRows` (nil placements are "").
    var placementIndex: [String: Int] = [:]
    /// Per placement, the series of `PlacementSeries` (nil until first used).
    var placementRows: [[Counter?]] = []
    /// The placement last looked up, and its row.
    var lastPlacement = ""
    var lastRow = -1
    /// The traces whose end (fetch.end, preload.end) was counted, the newest `endedLimit`: a second
    /// end of one trace is not a second fetch (the read model's rule, docs/events-and-metrics.md).
    var ended: Set<TraceID> = []
    var endedOrder: [TraceID] = []
    var endedHead = 0
    static let endedLimit = 65_536

    /// Whether `trace` ended before (among the newest `endedLimit` that did); marks it ended.
    mutating func endedBefore(_ trace: TraceID) -> Bool {
        guard ended.insert(trace).inserted else { return true }
        endedOrder.append(trace)
        if endedOrder.count - endedHead > Self.endedLimit {
            ended.remove(endedOrder[endedHead])
            endedHead += 1
            if endedHead >= Self.endedLimit {
                endedOrder.removeFirst(endedHead)
                endedHead = 0
            }
        }
        return false
    }

    init(events: [(EventName, Counter)]) {
        eventSeries = events.map { (name: $0.0, series: $0.1) }
    }

    /// The `flowscope_events_total` series of `name`.
    func events(_ name: EventName) -> Counter? {
        for entry in eventSeries where entry.name == name { return entry.series }
        return nil
    }

    /// The series `which` of `placement` in `family`.
    mutating func placementCounter(_ which: PlacementSeries, _ placement: String?, _ family: CounterFamily) -> Counter {
        let key = placement ?? ""
        let row: Int
        if lastRow >= 0, key == lastPlacement {
            row = lastRow
        } else if let known = placementIndex[key] {
            row = known
        } else {
            if placementRows.count >= Self.limit {
                placementIndex.removeAll(keepingCapacity: true)
                placementRows.removeAll(keepingCapacity: true)
            }
            row = placementRows.count
            placementRows.append(Array(repeating: nil, count: PlacementSeries.allCases.count))
            placementIndex[key] = row
        }
        lastPlacement = key
        lastRow = row
        if let series = placementRows[row][which.rawValue] { return series }
        let series = family.labels([key] + which.values)
        placementRows[row][which.rawValue] = series
        return series
    }

    /// The counter series of `key` in `family`.
    mutating func counter(_ key: SeriesKey, _ family: CounterFamily) -> Counter {
        counters.series(key) { family.labels(key.values) }
    }

    /// The histogram series of `key` in `family`.
    mutating func histogram(_ key: SeriesKey, _ family: HistogramFamily) -> Histogram {
        histograms.series(key) { family.labels(key.values) }
    }
}

/// Series handles of one kind by key, with the last one used kept aside.
struct HandleCache<Series: AnyObject> {
    var byKey: [SeriesKey: Series] = [:]
    var lastKey: SeriesKey?
    var lastSeries: Series?

    /// The series of `key`: the last one, a known one, or `lookUp()`'s (then remembered).
    @inline(__always)
    mutating func series(_ key: SeriesKey, lookUp: () -> Series) -> Series {
        if let lastSeries, lastKey == key { return lastSeries }
        let series: Series
        if let known = byKey[key] {
            series = known
        } else {
            series = lookUp()
            if byKey.count >= SeriesHandles.limit { byKey.removeAll(keepingCapacity: true) }
            byKey[key] = series
        }
        lastKey = key
        lastSeries = series
        return series
    }
}

extension MetricsSink {
    /// The `metrics` sink type; its options are ``Options`` (`placementLimit`, `buckets`).
    public struct Factory: SinkFactory {
        /// `metrics`.
        public let type = MetricsSink.type

        /// The factory.
        public init() {}

        /// Reads ``Options``.
        public func options(from context: SinkContext) throws(JSONInputError) -> Options {
            try Options(json: context.options, path: context.path)
        }

        /// Checks the options as creating the sink would (a placement limit below 1, buckets not increasing).
        public func validate(_ options: Options, context: SinkContext) throws(JSONInputError) {
            do { _ = try MetricsSink(options: options, version: context.version) } catch {
                throw JSONInputError(path: context.path, message: error.message)
            }
        }

        /// A metrics sink with the spec's families.
        public func makeSink(_ options: Options, context: SinkContext) throws -> any EventSink {
            do { return try MetricsSink(name: context.name, options: options, version: context.version) } catch {
                throw JSONInputError(path: context.path, message: error.message)
            }
        }
    }
}
