import FlowJSON

/// Which layer of the flow cache answered.
public enum CacheLayer: String, Sendable, Hashable { case memory, disk }

/// A flow as the cache keeps it.
public struct CachedFlow: Sendable, Hashable {
    public var flow: Flow
    /// Engine time the entry was stored.
    public var storedAt: EngineTime
    /// True when stored from a default-audience fetch (serving it loses targeting).
    public var fromDefaultAudience: Bool
    public init(flow: Flow, storedAt: EngineTime, fromDefaultAudience: Bool) {
        self.flow = flow; self.storedAt = storedAt; self.fromDefaultAudience = fromDefaultAudience
    }
    /// The audience kind as events write it.
    public var audienceKind: String { fromDefaultAudience ? "default" : "targeted" }
}

/// The answer to a cache read.
public enum CacheRead: Sendable, Hashable {
    case hit(CachedFlow, layer: CacheLayer)
    case miss
    /// The entry could not be read; the store has deleted it. Treated as a miss.
    case corrupt(key: String, reason: String)
}

/// What the machines may read synchronously while handling an input ("reading a cache takes no time").
public protocol CacheView {
    /// The flow cache entry of the current profile for a placement.
    func readFlow(placement: String) -> CacheRead
    /// A cached layout, if the layout cache holds this id and version.
    func readLayout(_ ref: LayoutRef) -> Layout?
    /// The variation of `payload` for `profileId` (``VariationDraw/pick(_:profileId:)``); a view may
    /// remember the buckets it drew, since a bucket never changes. The default draws afresh.
    func drawVariation(_ payload: AudiencePayload, profileId: String) -> Variation?
    /// The flow of `payload`'s variation for `profileId` (the draw of ``drawVariation(_:profileId:)``),
    /// with the given source; nil when the weights are invalid. A view may remember the flows it
    /// built, since a payload and a profile always give the same one. The default builds afresh.
    func drawFlow(_ payload: AudiencePayload, profileId: String, source: FlowSource, targetingLost: Bool) -> Flow?
}

extension CacheView {
    public func drawVariation(_ payload: AudiencePayload, profileId: String) -> Variation? {
        VariationDraw.pick(payload, profileId: profileId)
    }

    public func drawFlow(_ payload: AudiencePayload, profileId: String, source: FlowSource, targetingLost: Bool) -> Flow? {
        drawVariation(payload, profileId: profileId).map {
            Flow(payload: payload, variation: $0, source: source, targetingLost: targetingLost)
        }
    }
}

/// A call a machine starts as part of its own work (getFlowOrDefault's two paths).
public enum ChildCall: Sendable, Hashable {
    /// getFlowForDefaultAudience with the default policy.
    case defaultAudience(placement: String)
    /// getFlow with the default policy and the given loadTimeout (seconds).
    case targeted(placement: String, loadTimeout: Double)
}

/// How a call ended.
public enum CallOutcome: Sendable, Hashable {
    case flow(Flow)
    case configuration(FlowConfiguration)
    /// A call that returns nothing (preload) completed without error.
    case done
    case failed(FlowError)

    /// The error, if the call failed.
    public var error: FlowError? { if case .failed(let e) = self { e } else { nil } }
    /// The flow, if the call returned one.
    public var flow: Flow? {
        switch self {
        case .flow(let f): f
        case .configuration(let c): c.flow
        default: nil
        }
    }
}

/// A finished request as the driver reports it.
public struct RequestCompletion: Sendable, Hashable {
    public var result: RequestResult
    /// Bytes of the response body (0 when unknown or failed).
    public var bytes: Int
    public init(_ result: RequestResult, bytes: Int = 0) { self.result = result; self.bytes = bytes }
}

/// What a machine asks its driver to do. Tags are local to the machine.
public enum MachineAction: Sendable {
    /// Send a request; answer later with the same tag.
    case send(tag: Int, RequestSpec)
    /// Stop a request; no answer is expected any more.
    case cancel(tag: Int)
    /// Fire `timer(tag:)` at engine time `at`.
    case setTimer(tag: Int, at: EngineTime)
    case clearTimer(tag: Int)
    /// Store a flow for the current profile. With `keepTargeted`, an existing targeted entry wins.
    case storeFlow(placement: String, CachedFlow, keepTargeted: Bool)
    case storeLayout(Layout)
    /// Report an event; `span` 0 is the call's root span, n > 0 the span of request tag n - 1.
    case emit(EventName, placement: String?, span: Int, attrs: EventAttributes)
    /// Start a sub-call; its outcome comes back through `child(tag:)`.
    case startChild(tag: Int, ChildCall)
    /// Stop a sub-call; its outcome is not delivered.
    case cancelChild(tag: Int)
    /// Deliver `attributionApplied` when the profile gains `appleAds`.
    case watchAttribution
    /// Download these images in the background (never blocks or fails the call).
    case prefetchAssets(urls: [String])
    /// The backend reports these attribution sources applied to the current profile.
    case applyAttribution([String])
    /// The call is over: deliver this outcome. Exactly once per machine.
    case finish(CallOutcome)
}

/// Inputs every machine accepts. Each returns its actions by appending to `actions`.
public protocol FetchMachine: Sendable {
    /// The call starts at `now`.
    mutating func start(now: EngineTime, cache: some CacheView, actions: inout [MachineAction])
    /// A request this machine sent has finished.
    mutating func response(tag: Int, _ completion: RequestCompletion, now: EngineTime, cache: some CacheView, actions: inout [MachineAction])
    /// A timer this machine set has fired.
    mutating func timer(tag: Int, now: EngineTime, cache: some CacheView, actions: inout [MachineAction])
    /// A sub-call this machine started has ended.
    mutating func child(tag: Int, _ outcome: CallOutcome, now: EngineTime, cache: some CacheView, actions: inout [MachineAction])
    /// The profile gained `appleAds` (only sent after `watchAttribution`).
    mutating func attributionApplied(now: EngineTime, cache: some CacheView, actions: inout [MachineAction])
    /// The call is stopped from outside (cancellation 9000, profile switch 3006, restart).
    mutating func abort(_ error: FlowError, now: EngineTime, actions: inout [MachineAction])
}

extension FetchMachine {
    public mutating func child(tag: Int, _ outcome: CallOutcome, now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {}
    public mutating func attributionApplied(now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {}
}

/// An engine time as attributes report it: seconds, converted once on the way out.
@inline(__always)
func seconds(_ v: EngineTime) -> JSONValue { .number(v.seconds) }

extension MachineAction {
    /// Whether the action needs nothing of a running call (no request, timer, child or watcher), so
    /// a call whose start returns only such actions ends within its start.
    var endsWithinStart: Bool {
        switch self {
        case .emit, .storeFlow, .storeLayout, .finish: true
        default: false
        }
    }
}
