import FlowJSON

/// Identifies a call the engine is running.
public struct CallID: Hashable, Sendable, Comparable {
    public let raw: Int
    public static func < (a: CallID, b: CallID) -> Bool { a.raw < b.raw }
}
/// Identifies a request the engine asked its driver to send.
public struct RequestID: Hashable, Sendable { public let raw: Int }
/// Identifies a timer the engine asked its driver to run.
public struct TimerID: Hashable, Sendable { public let raw: Int }

/// What drives the engine: sends requests, runs timers, and receives finished calls. The scenario
/// runner and the simulator drive it in virtual time; FlowClient drives it with a real clock and backend.
public protocol EngineHost: AnyObject {
    /// Sends a request; answer with ``FlowEngine/response(_:_:now:)`` unless it is cancelled first.
    func send(_ request: RequestID, _ spec: RequestSpec, origin: CallID)
    /// Stops a request: its answer, if it comes, is ignored.
    func cancel(_ request: RequestID)
    /// Calls ``FlowEngine/timerFired(_:now:)`` at engine time `at`.
    func schedule(_ timer: TimerID, at: EngineTime)
    func unschedule(_ timer: TimerID)
    /// A call started through the engine's API has ended. Exactly once per call.
    func finished(_ call: CallID, _ outcome: CallOutcome, now: EngineTime)
}

/// The engine: runs the fetch machines, owns the profile and the caches, executes the machines'
/// actions, and reports events. It has no clock and no I/O of its own; it is driven through its
/// methods (inputs) and acts through its host. Not thread-safe: drive it from one thread at a time.
public final class FlowEngine: CacheView {
    /// Client configuration.
    public struct Configuration: Sendable {
        /// Per-request limit for requests that have no loadTimeout, in seconds.
        public var requestTimeout: Double
        /// The bundled fallback flows and layouts.
        public var fallback: FallbackFile?
        /// Engine time of activation (attribution delays are measured from it).
        public var activatedAt: EngineTime
        /// Whether events carry the profile id as it is (up to ``ProfileTag/maxPlainBytes`` bytes)
        /// instead of its hash (the first 16 hex characters of its SHA-256, the default).
        public var plainProfileIDs: Bool
        public init(requestTimeout: Double = Budget.defaultRequestTimeout, fallback: FallbackFile? = nil, activatedAt: EngineTime = .zero,
                    plainProfileIDs: Bool = false) {
            self.requestTimeout = requestTimeout; self.fallback = fallback; self.activatedAt = activatedAt
            self.plainProfileIDs = plainProfileIDs
        }
    }

    // Unchecked exclusivity (this and the rest of the engine's state): the engine is driven from one
    // thread at a time and no access outlives the statement that makes it.
    @exclusivity(unchecked) public private(set) var configuration: Configuration
    /// The configuration's requestTimeout in engine time, converted once.
    @exclusivity(unchecked) private var requestTimeout: EngineTime
    // Unchecked exclusivity: read on every call; the engine is driven from one thread at a time and
    // no access outlives the statement that makes it.
    @exclusivity(unchecked) public private(set) var profile: Profile
    /// The client session every event carries (nil: events carry none).
    @exclusivity(unchecked) public var session: SessionID?
    /// What events carry as `profile`: the current profile's id hashed, or plain when configured.
    @exclusivity(unchecked) private var profileTag: String?
    public let flowCache: FlowCache
    public let layouts: LayoutStore
    private unowned let host: EngineHost
    /// Where events go (a sink that drops them when the engine has none). Not optional, so emitting
    /// calls it in place instead of copying an optional existential per event.
    private let events: any EngineEventSink
    /// Whether a sink listens (checked on hot paths instead of copying the optional sink).
    private let reportsEvents: Bool
    @exclusivity(unchecked) private var newTrace: () -> TraceID

    /// What actions need of their call, without copying its machine and tables.
    private struct CallInfo {
        let trace: TraceID
        let spanBase: UInt64
        /// The top-level call this work belongs to.
        let origin: CallID
    }
    /// A running call. A reference, so that updating one in the table never moves its machine.
    private final class Call {
        @exclusivity(unchecked) var machine: Machine
        @exclusivity(unchecked) var info: CallInfo
        var trace: TraceID { info.trace }
        /// The call that started this one as a sub-call, with its tag; nil for top-level and background calls.
        @exclusivity(unchecked) var parent: (call: CallID, tag: Int)?
        /// Whether the host hears of its end (false for background work and sub-calls).
        @exclusivity(unchecked) var reported: Bool
        /// The requests, timers and sub-calls it owns, by the machine's tags.
        @exclusivity(unchecked) var owned = Owned()

        init(machine: Machine, info: CallInfo, parent: (call: CallID, tag: Int)?, reported: Bool) {
            self.machine = machine; self.info = info; self.parent = parent; self.reported = reported
        }
    }
    // Unchecked exclusivity: the engine is driven from one thread at a time and no method holds an
    // access to these across a call into another; the runtime checks cost ~10% of a cache hit.
    @exclusivity(unchecked) private var calls = IDTable<Call>()
    @exclusivity(unchecked) private var requestOwners = IDTable<(call: CallID, tag: Int)>()
    @exclusivity(unchecked) private var timerOwners = IDTable<(call: CallID, tag: Int)>()
    /// Calls waiting for attribution: a few at most, so a list (no hashing) rather than a set.
    @exclusivity(unchecked) private var attributionWatchers: [CallID] = []
    @exclusivity(unchecked) private var nextID = 1

    /// An engine for `profile` over the given stores. `traceIDs` makes trace ids (random in production,
    /// seeded in virtual time).
    public init(configuration: Configuration = .init(), profile: Profile, flowCache: FlowCache, layouts: LayoutStore,
                host: EngineHost, events: EngineEventSink?, traceIDs: @escaping () -> TraceID) {
        self.configuration = configuration
        self.requestTimeout = EngineTime(seconds: configuration.requestTimeout)
        self.profile = profile
        // Hashed only when a sink listens (the strategy lab plays many sessions without one).
        self.profileTag = events == nil ? nil : ProfileTag.tag(for: profile.id, plain: configuration.plainProfileIDs)
        self.flowCache = flowCache
        self.layouts = layouts
        self.host = host
        self.events = events ?? NoEventSink()
        self.reportsEvents = events != nil
        self.newTrace = traceIDs
    }

    /// Returns the engine to the state `init` leaves it in, for `profile` (and `configuration` when
    /// given), over the same stores, host, sink and trace ids: no call running, ids counted from 1
    /// again, and the flow cache's memory layer emptied as a restart empties it (its disk layer and
    /// the layout store keep their entries). A call still running is dropped without ending: neither
    /// the host nor the sink hears of it, and ids handed out before the reset must not be passed back
    /// (they are handed out again). A driver that plays many short sessions one after another
    /// (the strategy lab) reuses one engine this way instead of building and freeing one per session.
    public func reset(profile: Profile, configuration: Configuration? = nil) {
        if let configuration {
            self.configuration = configuration
            requestTimeout = EngineTime(seconds: configuration.requestTimeout)
        }
        self.profile = profile
        profileTag = reportsEvents ? ProfileTag.tag(for: profile.id, plain: self.configuration.plainProfileIDs) : nil
        flowCache.removeMemory()
        calls.removeAll()
        requestOwners.removeAll()
        timerOwners.removeAll()
        attributionWatchers.removeAll(keepingCapacity: true)
        nextID = 1
        lastTrace = nil
        lastKey = nil
        pendingEvents.removeAll(keepingCapacity: true)
    }

    // MARK: calls (inputs from the app)

    /// Starts getFlow. Throws wrongParam (3001) at once, with no request, for invalid arguments.
    public func getFlow(placement: String, policy: FetchPolicy = .reloadRevalidatingCacheData,
                        loadTimeout: Double = Budget.defaultLoadTimeout, now: EngineTime) throws(FlowError) -> CallID {
        var m = try GetFlowMachine(call: .getFlow(loadTimeout: loadTimeout), placement: placement, policy: policy,
                                   profileId: profile.id, fallback: configuration.fallback)
        m.reportsEvents = reportsEvents
        return begin(.get(consume m), now: now)
    }

    /// Starts getFlowForDefaultAudience.
    public func getFlowForDefaultAudience(placement: String, policy: FetchPolicy = .reloadRevalidatingCacheData,
                                          now: EngineTime) throws(FlowError) -> CallID {
        var m = try GetFlowMachine(call: .defaultAudience(requestTimeout: requestTimeout), placement: placement,
                                   policy: policy, profileId: profile.id, fallback: configuration.fallback)
        m.reportsEvents = reportsEvents
        return begin(.get(consume m), now: now)
    }

    /// Starts preloadFlows.
    public func preloadFlows(placements: [String], loadTimeout: Double = Budget.defaultLoadTimeout, now: EngineTime) throws(FlowError) -> CallID {
        var m = try PreloadMachine(call: .targeted(loadTimeout: loadTimeout), placements: placements, profileId: profile.id)
        m.reportsEvents = reportsEvents
        return begin(.preload(consume m), now: now)
    }

    /// Starts preloadFlowsForDefaultAudience.
    public func preloadFlowsForDefaultAudience(placements: [String], now: EngineTime) throws(FlowError) -> CallID {
        var m = try PreloadMachine(call: .defaultAudience(requestTimeout: requestTimeout),
                                   placements: placements, profileId: profile.id)
        m.reportsEvents = reportsEvents
        return begin(.preload(consume m), now: now)
    }

    /// Starts getFlowOrDefault (the attribution race).
    public func getFlowOrDefault(placement: String, timeout: Double, now: EngineTime) throws(FlowError) -> CallID {
        var m = try OrDefaultMachine(placement: placement, timeout: timeout,
                                     attributed: profile.appliedAttributionSources.contains("appleAds"))
        m.reportsEvents = reportsEvents
        return begin(.orDefault(consume m), now: now)
    }

    /// Starts getFlowConfiguration for a flow; images whose custom media id `isBundled` (the app's
    /// assets resolver) come from the app bundle and are never downloaded.
    public func getFlowConfiguration(flow: Flow, isBundled: @escaping @Sendable (String) -> Bool = { _ in false },
                                     loadTimeout: Double = Budget.defaultLoadTimeout, now: EngineTime) throws(FlowError) -> CallID {
        let m = try LayoutMachine(flow: flow, loadTimeout: loadTimeout, isBundled: isBundled,
                                  fallback: configuration.fallback, profileId: profile.id)
        return begin(.layout(consume m), now: now)
    }

    /// The trace of a call (shared by its sub-calls and background work).
    public func trace(of call: CallID) -> TraceID? { calls[call.raw]?.trace }

    /// Whether a call is still running.
    public func isRunning(_ call: CallID) -> Bool { calls[call.raw] != nil }

    // MARK: inputs from the driver

    /// A request has finished.
    public func response(_ request: RequestID, _ completion: RequestCompletion, now: EngineTime) {
        guard let owner = requestOwners.removeValue(forKey: request.raw) else { return }
        _ = calls[owner.call.raw]?.owned.remove(.request, tag: owner.tag)
        // Handed to the machine in place: wrapped in an input, the completion would be copied out again.
        drive(owner.call, now: now) { machine, actions in
            machine.response(tag: owner.tag, completion, now: now, cache: self, actions: &actions)
        }
    }

    /// A timer has fired.
    public func timerFired(_ timer: TimerID, now: EngineTime) {
        guard let owner = timerOwners.removeValue(forKey: timer.raw) else { return }
        _ = calls[owner.call.raw]?.owned.remove(.timer, tag: owner.tag)
        drive(owner.call, .timer(tag: owner.tag), now: now)
    }

    /// The caller cancelled a call: it ends with operationInterrupted (9000).
    public func cancel(_ call: CallID, now: EngineTime) {
        abort(call, FlowError(.operationInterrupted, "the call was cancelled"), now: now)
    }

    /// Ends every running call with `error` (a restart uses operationInterrupted).
    public func interruptAll(_ error: FlowError = FlowError(.operationInterrupted, "interrupted"), now: EngineTime) {
        for raw in calls.keysInTableOrder.sorted() where calls[raw]?.parent == nil {
            abort(CallID(raw: raw), error, now: now)
        }
    }

    /// Switches to another profile: immediate; calls in flight fail with profileWasChanged (3006), the
    /// other profile's cache entries are dropped, and the profile is fetched in the background.
    /// Returns the trace of the switch (its events and the profile request), or nil when it is the same profile.
    @discardableResult
    public func identify(_ profileId: String, now: EngineTime) -> TraceID? {
        guard profileId != profile.id, !profileId.isEmpty else { return nil }
        let old = profile.id
        interruptAll(FlowError(.profileWasChanged, "profile changed from \(old) to \(profileId)"), now: now)
        profile = Profile(id: profileId)
        profileTag = reportsEvents ? ProfileTag.tag(for: profileId, plain: configuration.plainProfileIDs) : nil
        flowCache.retainOnly(profileId: profileId)
        let plain = configuration.plainProfileIDs
        let call = begin(.profile(ProfileMachine(profileId: profileId, requestTimeout: requestTimeout)),
                         now: now, reported: false, first: { engine, trace in
            guard engine.reportsEvents else { return }
            // The ids as the envelope's `profile` carries them: hashed unless the app opted in.
            engine.record(EngineEvent(name: .profileChanged, t: now.seconds, placement: nil, trace: trace,
                                      span: SpanID(trace: trace, index: 0),
                                      attrs: ["from": .string(ProfileTag.tag(for: old, plain: plain) ?? ""),
                                              "to": .string(ProfileTag.tag(for: profileId, plain: plain) ?? "")]))
        })
        flushEvents()
        return trace(of: call) ?? lastTrace
    }

    /// The backend applied an attribution source to the current profile (observed now).
    public func applyAttribution(_ source: String, now: EngineTime) {
        applyAttribution(source, now: now, trace: nil)
        flushEvents()
    }

    /// Applies attribution; `trace` is the call that observed it (a profile fetch), or nil for a new trace.
    private func applyAttribution(_ source: String, now: EngineTime, trace observed: TraceID?) {
        guard !profile.appliedAttributionSources.contains(source) else { return }
        profile.appliedAttributionSources.insert(source)
        let trace = observed ?? newTrace()
        if observed == nil { lastTrace = trace }
        if reportsEvents {
            record(EngineEvent(name: .attributionApplied, t: now.seconds, placement: nil, trace: trace,
                               span: SpanID(trace: trace, index: 0),
                               attrs: ["source": .string(source), "after": seconds(now - configuration.activatedAt)]))
        }
        guard source == "appleAds" else { return }
        for id in attributionWatchers.sorted() {
            stopWatching(id)
            drive(id, .attributionApplied, now: now)
        }
    }

    /// The trace id of the last engine-level event (attribution observed, profile switch).
    @exclusivity(unchecked) public private(set) var lastTrace: TraceID?

    // MARK: CacheView

    public func readFlow(placement: String) -> CacheRead {
        flowCache.read(cacheKey(placement))
    }

    /// The key used last: an app asks for the same placement again and again, and the key's digest
    /// then need not be computed again (compared by id, so a new profile or placement makes a new key).
    @exclusivity(unchecked) private var lastKey: CacheKey?

    private func cacheKey(_ placement: String) -> CacheKey {
        if let lastKey, lastKey.placementId == placement, lastKey.profileId == profile.id { return lastKey }
        let key = CacheKey(profileId: profile.id, placementId: placement)
        lastKey = key
        return key
    }

    public func readLayout(_ ref: LayoutRef) -> Layout? { layouts.read(ref) }

    /// Buckets drawn lately: a session asks for the same audience versions again and again, and the
    /// bucket of a (version, profile) pair never changes, so its MD5 need not be computed again.
    @exclusivity(unchecked) private var buckets = VariationDraw.BucketMemo()

    public func drawVariation(_ payload: AudiencePayload, profileId: String) -> Variation? {
        VariationDraw.pick(payload, profileId: profileId, memo: &buckets)
    }

    /// Flows built lately: the strategy lab answers from prepared payloads, so the same payload and
    /// profile come back again and again. FlowClient decodes a new payload for each response: there
    /// the memo always misses, at the cost of a few pointer comparisons.
    @exclusivity(unchecked) private var flows = VariationDraw.FlowMemo()

    public func drawFlow(_ payload: AudiencePayload, profileId: String, source: FlowSource, targetingLost: Bool) -> Flow? {
        if var flow = flows.flow(payload, profileId: profileId) {
            flow.source = source
            flow.targetingLost = targetingLost
            return flow
        }
        guard let variation = drawVariation(payload, profileId: profileId) else { return nil }
        let flow = Flow(payload: payload, variation: variation, source: source, targetingLost: targetingLost)
        flows.remember(payload, profileId: profileId, flow)
        return flow
    }

    // MARK: running machines

    private func begin(_ machine: consuming Machine, now: EngineTime, reported: Bool = true, parent: (call: CallID, tag: Int)? = nil,
                       trace inherited: TraceID? = nil, spanBase: UInt64 = 0, origin: CallID? = nil,
                       first: ((FlowEngine, TraceID) -> Void)? = nil) -> CallID {
        let id = CallID(raw: nextID)
        nextID += 1
        let trace = inherited ?? newTrace()
        if inherited == nil { lastTrace = trace }
        let info = CallInfo(trace: trace, spanBase: spanBase, origin: origin ?? id)
        first?(self, trace)
        var actions = takeActionBuffer()
        // The consuming parameter is mutated in place and moved into the call: a `var` copy of it
        // would copy the whole machine.
        machine.handle(.start, now: now, cache: self, actions: &actions)
        if actions.allSatisfy(\.endsWithinStart) {
            // A call that ends during its start (a cache hit) never enters the call table.
            performWithinStart(&actions, id, info, parent: parent, reported: reported, now: now)
        } else {
            calls[id.raw] = makeCall(machine: consume machine, info: info, parent: parent, reported: reported)
            perform(&actions, for: id, now: now)
        }
        giveBack(&actions)
        flushEvents()
        return id
    }

    /// Carries out the actions of a call that ends in its start: events, cache writes, its end.
    /// Actions are moved out of the buffer as they are carried out (none is copied).
    private func performWithinStart(_ actions: inout [MachineAction], _ id: CallID, _ call: CallInfo,
                                    parent: (call: CallID, tag: Int)?, reported: Bool, now: EngineTime) {
        for i in actions.indices {
            let action = take(&actions[i])
            switch consume action {
            case .emit(let name, let placement, let span, let attrs): emitBuilt(name, placement: placement, span: span, attrs, call, now)
            case .storeFlow(let placement, let entry, let keepTargeted): store(placement, entry, keepTargeted: keepTargeted, call, now)
            case .storeLayout(let layout): store(layout, call, now)
            case .finish(let outcome): return conclude(id, parent: parent, reported: reported, outcome, now: now)
            default: assertionFailure("an action that needs a running call, in a call that ends within its start")
            }
        }
    }

    /// Moves an action out of its buffer, leaving a trivial placeholder (nothing is retained or copied).
    private func take(_ slot: inout MachineAction) -> MachineAction {
        var action = MachineAction.cancel(tag: 0)
        swap(&action, &slot)
        return action
    }

    /// Ended calls kept for reuse, with their lists' storage: a session starts and ends calls all the
    /// time, and a new call then allocates nothing.
    @exclusivity(unchecked) private var spareCalls: [Call] = []

    private func makeCall(machine: consuming Machine, info: CallInfo, parent: (call: CallID, tag: Int)?, reported: Bool) -> Call {
        guard let call = spareCalls.popLast() else {
            return Call(machine: machine, info: info, parent: parent, reported: reported)
        }
        call.machine = machine
        call.info = info
        call.parent = parent
        call.reported = reported
        return call
    }

    /// Keeps an ended call for reuse, if nothing else holds it (an input still being handled for it
    /// recycles it when done instead).
    private func recycle(_ call: inout Call) {
        guard spareCalls.count < 16, isKnownUniquelyReferenced(&call) else { return }
        call.owned.removeAll()
        call.parent = nil
        spareCalls.append(call)
    }

    /// Action buffers to reuse: a cache hit then allocates none.
    @exclusivity(unchecked) private var spareActions: [[MachineAction]] = []

    private func takeActionBuffer() -> [MachineAction] {
        if let spare = spareActions.popLast() { return spare }
        var fresh: [MachineAction] = []
        fresh.reserveCapacity(8)
        return fresh
    }

    private func giveBack(_ actions: inout [MachineAction]) {
        actions.clear()
        if spareActions.count < 8 { spareActions.append(actions) }
    }

    private func abort(_ id: CallID, _ error: FlowError, now: EngineTime) {
        drive(id, .abort(error), now: now)
    }

    /// Runs one input through a call's machine (mutated in place in the call table), then carries
    /// out the actions it returned.
    private func drive(_ id: CallID, _ input: MachineInput, now: EngineTime) {
        drive(id, now: now) { machine, actions in machine.handle(input, now: now, cache: self, actions: &actions) }
    }

    /// ``drive(_:_:now:)`` with the machine's handling given as `handle`.
    @inline(__always)
    private func drive(_ id: CallID, now: EngineTime, _ handle: (inout Machine, inout [MachineAction]) -> Void) {
        guard var call = calls[id.raw] else { return }
        var actions = takeActionBuffer()
        handle(&call.machine, &actions)
        perform(&actions, for: id, now: now)
        if calls[id.raw] !== call { recycle(&call) }  // it ended while this input was handled
        giveBack(&actions)
        flushEvents()
    }

    /// Carries out a call's actions in order, moving each out of the buffer (none is copied).
    private func perform(_ actions: inout [MachineAction], for id: CallID, now: EngineTime) {
        for i in actions.indices {
            let action = take(&actions[i])
            // The call may have ended during an earlier action (a finished child, an abort).
            guard let running = calls[id.raw] else { return }
            let call = running.info
            switch consume action {
            case .send(let tag, let spec):
                let rid = RequestID(raw: nextID)
                nextID += 1
                requestOwners[rid.raw] = (id, tag)
                running.owned.add(.request, tag: tag, rid.raw)
                flushEvents()
                host.send(rid, spec, origin: call.origin)
            case .cancel(let tag):
                if let raw = running.owned.remove(.request, tag: tag) {
                    let rid = RequestID(raw: raw)
                    requestOwners[rid.raw] = nil
                    flushEvents()
                    host.cancel(rid)
                }
            case .setTimer(let tag, let at):
                let tid = TimerID(raw: nextID)
                nextID += 1
                timerOwners[tid.raw] = (id, tag)
                running.owned.add(.timer, tag: tag, tid.raw)
                flushEvents()
                host.schedule(tid, at: at)
            case .clearTimer(let tag):
                if let raw = running.owned.remove(.timer, tag: tag) {
                    let tid = TimerID(raw: raw)
                    timerOwners[tid.raw] = nil
                    flushEvents()
                    host.unschedule(tid)
                }
            case .storeFlow(let placement, let entry, let keepTargeted):
                store(placement, entry, keepTargeted: keepTargeted, call, now)
            case .storeLayout(let layout):
                store(layout, call, now)
            case .emit(let name, let placement, let span, let attrs):
                emitBuilt(name, placement: placement, span: span, attrs, call, now)
            case .startChild(let tag, let child):
                let machine: Machine
                do {
                    var m: GetFlowMachine
                    switch child {
                    case .defaultAudience(let placement):
                        m = try GetFlowMachine(call: .defaultAudience(requestTimeout: requestTimeout),
                                               placement: placement, profileId: profile.id,
                                               fallback: configuration.fallback, reportsCall: false)
                    case .targeted(let placement, let loadTimeout):
                        m = try GetFlowMachine(call: .getFlow(loadTimeout: loadTimeout), placement: placement,
                                               profileId: profile.id, fallback: configuration.fallback,
                                               reportsCall: false)
                    }
                    m.reportsEvents = reportsEvents
                    machine = .get(m)
                } catch {
                    deliverChild(id, tag: tag, .failed(error), now: now)
                    continue
                }
                let childID = CallID(raw: nextID)
                running.owned.add(.child, tag: tag, childID.raw)
                _ = begin(machine, now: now, reported: false, parent: (id, tag), trace: call.trace,
                          spanBase: call.spanBase + UInt64(tag + 1) * 1000, origin: call.origin)
            case .cancelChild(let tag):
                if let raw = running.owned.remove(.child, tag: tag) {
                    let childID = CallID(raw: raw)
                    calls[childID.raw]?.parent = nil
                    abort(childID, FlowError(.operationInterrupted, "superseded"), now: now)
                }
            case .watchAttribution:
                if !attributionWatchers.contains(id) { attributionWatchers.append(id) }
            case .prefetchAssets(let urls):
                let placement: String
                if case .layout(let m) = running.machine { placement = m.flow.placementId } else { placement = "" }
                _ = begin(.prefetch(AssetPrefetchMachine(placement: placement, urls: urls,
                                                         requestTimeout: requestTimeout, profileId: profile.id)),
                          now: now, reported: false, trace: call.trace, spanBase: call.spanBase + 100_000, origin: call.origin)
            case .applyAttribution(let sources):
                for source in sources.sorted() { applyAttribution(source, now: now, trace: call.trace) }
            case .finish(let outcome):
                finish(id, outcome, now: now)
                return
            }
        }
    }

    private func store(_ placement: String, _ entry: CachedFlow, keepTargeted: Bool, _ call: CallInfo, _ now: EngineTime) {
        let key = cacheKey(placement)
        let result = flowCache.write(key, entry, keepTargeted: keepTargeted, measure: reportsEvents)
        if let corrupt = result.corrupt {
            emit(.cacheCorrupt, placement: placement, span: 0, ["key": .string(corrupt.key), "reason": .string(corrupt.reason)], call, now)
        }
        if result.stored {
            emit(.cacheStored, placement: placement, span: 0, ["audience": .string(entry.audienceKind),
                                                              "bytes": .number(Double(result.bytes))], call, now)
        }
        for e in result.evicted {
            emit(.cacheEvicted, placement: e.key.placementId, span: 0,
                 ["key": .string(e.key.description), "bytes": .number(Double(e.bytes))], call, now)
        }
    }

    private func store(_ layout: Layout, _ call: CallInfo, _ now: EngineTime) {
        layouts.write(layout)
        emit(.layoutStored, placement: nil, span: 0,
             ["layoutId": .string(layout.id), "version": .number(Double(layout.version))], call, now)
    }

    private func finish(_ id: CallID, _ outcome: CallOutcome, now: EngineTime) {
        guard var call = calls.removeValue(forKey: id.raw) else { return }
        call.owned.forEach { kind, raw in
            switch kind {
            case .request: requestOwners[raw] = nil; flushEvents(); host.cancel(RequestID(raw: raw))
            case .timer: timerOwners[raw] = nil; flushEvents(); host.unschedule(TimerID(raw: raw))
            case .child: break
            }
        }
        if !attributionWatchers.isEmpty { stopWatching(id) }
        let parent = call.parent, reported = call.reported
        recycle(&call)
        conclude(id, parent: parent, reported: reported, outcome, now: now)
    }

    private func stopWatching(_ id: CallID) {
        if let i = attributionWatchers.firstIndex(of: id) { attributionWatchers.remove(at: i) }
    }

    /// Hands an ended call's outcome to its parent, or to the host when the host started it.
    private func conclude(_ id: CallID, parent: (call: CallID, tag: Int)?, reported: Bool, _ outcome: CallOutcome, now: EngineTime) {
        if let parent {
            _ = calls[parent.call.raw]?.owned.remove(.child, tag: parent.tag)
            deliverChild(parent.call, tag: parent.tag, outcome, now: now)
        } else if reported {
            flushEvents()
            host.finished(id, outcome, now: now)
        }
    }

    private func deliverChild(_ parent: CallID, tag: Int, _ outcome: CallOutcome, now: EngineTime) {
        drive(parent, .child(tag: tag, outcome), now: now)
    }

    private func emit(_ name: EventName, placement: String?, span: Int, _ attrs: @autoclosure () -> EventAttributes,
                      _ call: CallInfo, _ now: EngineTime) {
        guard reportsEvents else { return }
        let spanID = SpanID(trace: call.trace, index: call.spanBase + UInt64(span))
        record(EngineEvent(name: name, t: now.seconds, placement: placement, trace: call.trace, span: spanID, attrs: attrs()))
    }

    /// Emits an event whose attributes a machine already built (moved in, not copied).
    private func emitBuilt(_ name: EventName, placement: consuming String?, span: Int, _ attrs: consuming EventAttributes,
                           _ call: CallInfo, _ now: EngineTime) {
        guard reportsEvents else { return }
        let spanID = SpanID(trace: call.trace, index: call.spanBase + UInt64(span))
        record(EngineEvent(name: name, t: now.seconds, placement: placement, trace: call.trace, span: spanID, attrs: attrs))
    }

    /// Events of the input being handled. The sink gets them in one call, in order, before the engine
    /// calls its host and before the input returns: a sink still sees every event before anything
    /// the host does in response, at one hand-over (one lock, one clock read) per input.
    @exclusivity(unchecked) private var pendingEvents: [EngineEvent] = []

    /// Queues an event, stamped with the engine's session and profile.
    private func record(_ event: consuming EngineEvent) {
        var event = event
        event.session = session
        event.profile = profileTag
        pendingEvents.append(event)
    }

    private func flushEvents() {
        guard !pendingEvents.isEmpty else { return }
        events.receive(contentsOf: pendingEvents)
        pendingEvents.clear()
    }
}

/// The sink of an engine without one: never called (the engine checks `reportsEvents` first).
private struct NoEventSink: EngineEventSink {
    func receive(_ event: EngineEvent) {}
}

/// What a running call owns, by the machine's tags. A call owns a few requests, a timer, at most two
/// sub-calls: a short list costs one allocation where three dictionaries cost three.
private struct Owned {
    enum Kind: Hashable { case request, timer, child }
    private struct Key: Hashable { let kind: Kind; let tag: Int }
    /// In the order added. Once `index` exists, a removed entry stays as a tombstone (raw -1).
    private var entries: [(kind: Kind, tag: Int, raw: Int)] = []
    /// Where each live entry is, built once a call owns many ids (a preload of thousands of
    /// placements), where searching the list for every add and remove would be quadratic.
    private var index: [Key: Int]?
    private var tombstones = 0
    private static let indexFrom = 32

    /// Records the id of `kind` with `tag`, replacing an earlier one with the same tag.
    mutating func add(_ kind: Kind, tag: Int, _ raw: Int) {
        if index != nil {
            let key = Key(kind: kind, tag: tag)
            if let i = index?[key] { entries[i].raw = raw } else { index?[key] = entries.count; entries.append((kind, tag, raw)) }
            return
        }
        if let i = entries.firstIndex(where: { $0.kind == kind && $0.tag == tag }) {
            entries[i].raw = raw
        } else {
            if entries.isEmpty { entries.reserveCapacity(4) }
            entries.append((kind, tag, raw))
            if entries.count >= Self.indexFrom { buildIndex() }
        }
    }

    /// Removes every entry, keeping the storage.
    mutating func removeAll() {
        entries.clear()
        index = nil
        tombstones = 0
    }

    /// Removes the entry of `kind` with `tag`; returns its id.
    mutating func remove(_ kind: Kind, tag: Int) -> Int? {
        guard index != nil else {
            guard let i = entries.firstIndex(where: { $0.kind == kind && $0.tag == tag }) else { return nil }
            return entries.remove(at: i).raw
        }
        guard let i = index?.removeValue(forKey: Key(kind: kind, tag: tag)) else { return nil }
        let raw = entries[i].raw
        entries[i].raw = -1
        tombstones += 1
        if tombstones > entries.count / 2 { compact() }
        return raw
    }

    /// Calls `body` with each entry, in the order added.
    func forEach(_ body: (Kind, Int) -> Void) {
        for entry in entries where entry.raw >= 0 { body(entry.kind, entry.raw) }
    }

    private mutating func buildIndex() {
        var built: [Key: Int] = [:]
        built.reserveCapacity(entries.count * 2)
        for (i, entry) in entries.enumerated() where entry.raw >= 0 { built[Key(kind: entry.kind, tag: entry.tag)] = i }
        index = built
    }

    private mutating func compact() {
        entries.removeAll { $0.raw < 0 }
        tombstones = 0
        buildIndex()
    }
}

/// A running call's machine: one case per kind of call. Adding a machine adds a case here and a
/// line to ``handle(_:now:cache:actions:)``; the engine dispatches every input through that one switch.
private enum Machine: Sendable {
    case get(GetFlowMachine), preload(PreloadMachine), orDefault(OrDefaultMachine)
    case layout(LayoutMachine), prefetch(AssetPrefetchMachine), profile(ProfileMachine)

    /// Hands an input to the machine, mutated in place (moved out and back, never copied). Inlined,
    /// so that each caller keeps only the branch of its input (a cache hit: `start` alone).
    @inline(__always)
    mutating func handle(_ input: borrowing MachineInput, now: EngineTime, cache: FlowEngine, actions: inout [MachineAction]) {
        switch consume self {
        case .get(var m): m.handle(input, now: now, cache: cache, actions: &actions); self = .get(m)
        case .preload(var m): m.handle(input, now: now, cache: cache, actions: &actions); self = .preload(m)
        case .orDefault(var m): m.handle(input, now: now, cache: cache, actions: &actions); self = .orDefault(m)
        case .layout(var m): m.handle(input, now: now, cache: cache, actions: &actions); self = .layout(m)
        case .prefetch(var m): m.handle(input, now: now, cache: cache, actions: &actions); self = .prefetch(m)
        case .profile(var m): m.handle(input, now: now, cache: cache, actions: &actions); self = .profile(m)
        }
    }
}

extension Machine {
    /// A response for the machine, passed on without being wrapped in an input (and so copied).
    @inline(__always)
    mutating func response(tag: Int, _ completion: RequestCompletion, now: EngineTime, cache: FlowEngine, actions: inout [MachineAction]) {
        switch consume self {
        case .get(var m): m.response(tag: tag, completion, now: now, cache: cache, actions: &actions); self = .get(m)
        case .preload(var m): m.response(tag: tag, completion, now: now, cache: cache, actions: &actions); self = .preload(m)
        case .orDefault(var m): m.response(tag: tag, completion, now: now, cache: cache, actions: &actions); self = .orDefault(m)
        case .layout(var m): m.response(tag: tag, completion, now: now, cache: cache, actions: &actions); self = .layout(m)
        case .prefetch(var m): m.response(tag: tag, completion, now: now, cache: cache, actions: &actions); self = .prefetch(m)
        case .profile(var m): m.response(tag: tag, completion, now: now, cache: cache, actions: &actions); self = .profile(m)
        }
    }
}

/// An input to a machine, as the engine receives it from the app or its driver.
private enum MachineInput {
    case start
    case response(tag: Int, RequestCompletion)
    case timer(tag: Int)
    case child(tag: Int, CallOutcome)
    case attributionApplied
    case abort(FlowError)
}

extension FetchMachine {
    /// Calls the method of ``FetchMachine`` that takes `input`.
    @inline(__always)
    fileprivate mutating func handle(_ input: borrowing MachineInput, now: EngineTime, cache: FlowEngine,
                                     actions: inout [MachineAction]) {
        switch input {
        case .start: start(now: now, cache: cache, actions: &actions)
        case .response(let tag, let completion): response(tag: tag, completion, now: now, cache: cache, actions: &actions)
        case .timer(let tag): timer(tag: tag, now: now, cache: cache, actions: &actions)
        case .child(let tag, let outcome): child(tag: tag, outcome, now: now, cache: cache, actions: &actions)
        case .attributionApplied: attributionApplied(now: now, cache: cache, actions: &actions)
        case .abort(let error): abort(error, now: now, actions: &actions)
        }
    }
}
