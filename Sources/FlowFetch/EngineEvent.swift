import FlowJSON

/// Every event name the engine (and the pipeline) can emit: the list of events-and-metrics.md.
/// No other name exists, so no path can emit a name the spec does not list.
public enum EventName: String, CaseIterable, Sendable, Hashable {
    case fetchStart = "fetch.start"
    case fetchEnd = "fetch.end"
    case cacheHit = "cache.hit"
    case cacheMiss = "cache.miss"
    case cacheExpired = "cache.expired"
    case cacheStored = "cache.stored"
    case cacheCorrupt = "cache.corrupt"
    case cacheEvicted = "cache.evicted"
    case requestStart = "request.start"
    case requestEnd = "request.end"
    case timeout = "timeout"
    case fallback = "fallback"
    case preloadStart = "preload.start"
    case preloadEnd = "preload.end"
    case layoutCacheHit = "layout.cache.hit"
    case layoutCacheMiss = "layout.cache.miss"
    case layoutStored = "layout.stored"
    case assetsPrefetchStart = "assets.prefetch.start"
    case assetsPrefetchEnd = "assets.prefetch.end"
    case assetBundled = "asset.bundled"
    case attributionApplied = "attribution.applied"
    case attributionTimeout = "attribution.timeout"
    case paramClamped = "param.clamped"
    case profileChanged = "profile.changed"
    /// Emitted by the event pipeline when a sink's queue overflows, never by the engine.
    case sinkDropped = "sink.dropped"
    /// Emitted by the test kit when a traced test starts, never by the engine.
    case testStart = "test.start"
    /// Emitted by the test kit when a traced test ends, with its verdict; never by the engine.
    case testEnd = "test.end"

    /// The names the engine itself emits (all but the pipeline's and the test kit's own).
    public static var engineNames: [EventName] { allCases.filter { ![.sinkDropped, .testStart, .testEnd].contains($0) } }
}

/// A trace id: 128 bits, one per top-level call, written as 32 lowercase hex characters.
public struct TraceID: Hashable, Sendable, CustomStringConvertible {
    public var high: UInt64
    public var low: UInt64
    public init(high: UInt64, low: UInt64) { self.high = high; self.low = low }
    /// Parses 32 hex characters; nil for anything else or for the all-zero id.
    public init?(hex: String) {
        guard hex.utf8.count == 32, let h = UInt64(hex.prefix(16), radix: 16), let l = UInt64(hex.suffix(16), radix: 16),
              h != 0 || l != 0 else { return nil }
        high = h; low = l
    }
    public var hex: String { hex16(high) + hex16(low) }
    public var description: String { hex }
}

/// A span id: 64 bits, one per request or stage, written as 16 lowercase hex characters.
public struct SpanID: Hashable, Sendable, CustomStringConvertible {
    public var raw: UInt64
    public init(raw: UInt64) { self.raw = raw }
    /// Parses 16 hex characters; nil for anything else or for the zero id.
    public init?(hex: String) {
        guard hex.utf8.count == 16, let v = UInt64(hex, radix: 16), v != 0 else { return nil }
        raw = v
    }
    /// The span of stage or request number `index` of a call: derived from the trace so that
    /// virtual-time runs are deterministic and ids within a trace never collide in practice.
    public init(trace: TraceID, index: UInt64) {
        let z = mix64(trace.low ^ (trace.high &* splitMix64Gamma) &+ index &* 0xBF58_476D_1CE4_E5B9)
        raw = z == 0 ? 1 : z
    }
    public var hex: String { hex16(raw) }
    public var description: String { hex }
}

/// A client session: one per `FlowClient` instance, simulated or scenario session, or test
/// (events-and-metrics.md, Envelope). Written as 16 lowercase hex characters, never all zero.
public struct SessionID: Hashable, Sendable, CustomStringConvertible {
    public var raw: UInt64
    public init(raw: UInt64) { self.raw = raw }
    /// Parses 16 hex characters; nil for anything else or for the zero id.
    public init?(hex: String) {
        guard hex.utf8.count == 16, let v = UInt64(hex, radix: 16), v != 0 else { return nil }
        raw = v
    }
    /// A random session id (the system's random generator), never zero.
    public static func random() -> SessionID {
        SessionID(raw: UInt64.random(in: 1...UInt64.max))
    }
    /// A session id derived from a seed (a seeded run's random stream): the same seed always gives
    /// the same id, so virtual-time runs stay deterministic.
    public init(seed: UInt64) {
        let v = mix64(seed ^ 0x5E55_1011_D5EE_D5E5)
        raw = v == 0 ? 1 : v
    }
    public var hex: String { hex16(raw) }
    public var description: String { hex }
}

/// How an event names its profile (events-and-metrics.md, Envelope).
public enum ProfileTag {
    /// The most UTF-8 bytes a plain profile id may have in an envelope; a longer one is written hashed.
    public static let maxPlainBytes = 128

    /// The first 16 lowercase hex characters of the SHA-256 of `id`'s UTF-8 bytes.
    public static func hashed(_ id: String) -> String {
        String(Digest.hex(Digest.sha256(Array(id.utf8))).prefix(16))
    }

    /// What an event carries for profile `id`: the hashed form, or with `plain` the id itself when
    /// it is 1 to ``maxPlainBytes`` bytes (the hashed form otherwise); nil for an empty id.
    public static func tag(for id: String, plain: Bool) -> String? {
        if id.isEmpty { return nil }
        if plain, id.utf8.count <= maxPlainBytes { return id }
        return hashed(id)
    }
}

@inline(__always)
func hex16(_ v: UInt64) -> String {
    let digits: [UInt8] = Array("0123456789abcdef".utf8)
    return String(unsafeUninitializedCapacity: 16) { buf in
        for i in 0..<16 { buf[i] = digits[Int((v >> UInt64(60 - 4 * i)) & 0xF)] }
        return 16
    }
}

/// One thing that happened in the engine, before the pipeline stamps it with seq, wall time and run.
public struct EngineEvent: Sendable {
    /// What happened.
    public var name: EventName
    /// Engine clock, seconds (virtual in simulation).
    public var t: Double
    /// The placement concerned, if any.
    public var placement: String?
    /// The top-level call this belongs to.
    public var trace: TraceID
    /// The request or stage this belongs to (the call's root span for call-level events).
    public var span: SpanID
    /// The event's attributes (events-and-metrics.md lists them per name).
    public var attrs: EventAttributes
    /// The client session that emitted it, if known.
    public var session: SessionID?
    /// The profile it concerns: its id hashed (``ProfileTag``), or plain when the app opted in.
    public var profile: String?

    public init(name: EventName, t: Double, placement: consuming String?, trace: TraceID, span: SpanID,
                attrs: consuming EventAttributes = [:], session: SessionID? = nil, profile: String? = nil) {
        self.name = name; self.t = t; self.placement = placement; self.trace = trace; self.span = span; self.attrs = attrs
        self.session = session; self.profile = profile
    }
}

/// The one seam through which the engine reports events. The engine knows no sink beyond this.
/// A sink is called while the engine handles an input: it must not block and must not call back into
/// that engine.
public protocol EngineEventSink: Sendable {
    /// Receives one event. Must not block.
    func receive(_ event: EngineEvent)
    /// Receives several events, in order (the engine hands over the events of one input at once).
    /// Must not block. The default calls `receive(_:)` for each.
    func receive(contentsOf events: [EngineEvent])
}

extension EngineEventSink {
    public func receive(contentsOf events: [EngineEvent]) {
        for event in events { receive(event) }
    }
}
