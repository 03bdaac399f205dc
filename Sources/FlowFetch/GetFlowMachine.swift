import FlowJSON

/// getFlow and getFlowForDefaultAudience as a pure state machine (docs/fetch-rules.md).
///
/// getFlow: cache read per policy, stage A (targeted request, deadline start + A), stage B (cache
/// entry, else a default-audience request), stage C (cache entry, fallback file, or the last error).
/// getFlowForDefaultAudience: cache read per policy, a default-audience request with the client's
/// requestTimeout, then stage C.
public struct GetFlowMachine: FetchMachine {
    /// Which of the two calls this is.
    public enum Call: Sendable, Hashable {
        /// getFlow with the loadTimeout the caller gave, in seconds.
        case getFlow(loadTimeout: Double)
        case defaultAudience(requestTimeout: EngineTime)
    }

    public let call: Call
    public let placement: String
    public let policy: FetchPolicy
    public let profileId: String
    /// The app's fallback file, if it ships one (stage C's last resort).
    public let fallback: FallbackFile?
    /// False for the sub-calls of getFlowOrDefault, which report through their parent's fetch.start/end.
    public let reportsCall: Bool
    /// The loadTimeout the caller asked for, when it was raised to the minimum (reported as param.clamped).
    public let requestedLoadTimeout: Double?
    /// Whether the machine returns `.emit` actions. The engine turns it off when no sink listens, so
    /// event attributes are never built for nobody; every other action is the same either way.
    public var reportsEvents = true

    private enum Stage: Sendable { case idle, targeted, defaultAudience, done }
    private var stage = Stage.idle
    /// T in engine time (getFlow only), converted once from the caller's seconds.
    private let loadTimeout: EngineTime?
    /// maxAge in engine time (returnCacheDataIfNotExpiredElseLoad only), converted once.
    private let maxAge: EngineTime?
    private var startedAt = EngineTime.zero
    private var requestTag = -1
    private var requestStartedAt = EngineTime.zero
    private var requestBudget = EngineTime.zero
    private var timerTag = -1
    private var nextTag = 0
    private var lastFailure: RequestFailure?
    private var reportedMiss = false

    /// Validates the arguments and builds the machine. Throws wrongParam (3001) for an empty
    /// placement id or a loadTimeout that is not finite or negative; raises a loadTimeout below 1 to 1.
    public init(call: Call, placement: String, policy: FetchPolicy = .reloadRevalidatingCacheData, profileId: String,
                fallback: FallbackFile? = nil, reportsCall: Bool = true) throws(FlowError) {
        guard let id = Budget.normalizePlacement(placement) else {
            throw FlowError(.wrongParam, "placement id is empty")
        }
        var resolved = call
        var requested: Double?
        var loadTimeout: EngineTime?
        if case .getFlow(let t) = call {
            guard let clamped = Budget.loadTimeout(t) else {
                throw FlowError(.wrongParam, "loadTimeout must be a finite number >= 0, got \(t)")
            }
            if clamped != EngineTime(seconds: t) { requested = t }
            resolved = .getFlow(loadTimeout: clamped.seconds)
            loadTimeout = clamped
        }
        var maxAge: EngineTime?
        if case .returnCacheDataIfNotExpiredElseLoad(let seconds) = policy {
            guard Budget.isValidDuration(seconds) else {
                throw FlowError(.wrongParam, "maxAge must be a finite number >= 0, got \(seconds)")
            }
            maxAge = EngineTime(seconds: seconds)
        }
        self.loadTimeout = loadTimeout
        self.maxAge = maxAge
        self.call = resolved
        self.placement = id
        self.policy = policy
        self.profileId = profileId
        self.fallback = fallback
        self.reportsCall = reportsCall
        self.requestedLoadTimeout = requested
    }

    private var callName: FetchCallName {
        if case .getFlow = call { .getFlow } else { .getFlowForDefaultAudience }
    }
    public mutating func start(now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {
        guard stage == .idle else { return }
        startedAt = now
        if let requested = requestedLoadTimeout, let t = loadTimeout {
            emit(.paramClamped, ["name": "loadTimeout", "from": .number(requested), "to": seconds(t)], &actions)
        }
        if reportsCall {
            emit(.fetchStart, .fetchStart(call: callName, policy: policy, loadTimeout: loadTimeout?.seconds), &actions)
        }
        switch policy {
        case .reloadRevalidatingCacheData:
            break
        case .returnCacheDataElseLoad:
            if let (entry, _) = lookup(now: now, cache: cache, &actions) {
                return finishFromCache(entry, now: now, &actions)
            }
        case .returnCacheDataIfNotExpiredElseLoad:
            let maxAge = self.maxAge ?? .zero
            switch read(cache) {
            case .hit(let entry, let layer):
                let age = now - entry.storedAt
                if age < maxAge {
                    emitHit(entry, layer: layer, now: now, &actions)
                    return finishFromCache(entry, now: now, &actions)
                }
                emit(.cacheExpired, ["age": seconds(age), "maxAge": seconds(maxAge)], &actions)
                reportedMiss = true
            case .miss:
                emitMiss(&actions)
            case .corrupt(let key, let reason):
                emit(.cacheCorrupt, ["key": .string(key), "reason": .string(reason)], &actions)
                emitMiss(&actions)
            }
        }
        switch call {
        case .getFlow:
            stage = .targeted
            send(.targeted, budget: Budget.stageA(loadTimeout ?? Budget.minimumLoadTimeout), now: now, &actions)
        case .defaultAudience(let requestTimeout):
            stage = .defaultAudience
            send(.default, budget: requestTimeout, now: now, &actions)
        }
    }

    public mutating func response(tag: Int, _ completion: RequestCompletion, now: EngineTime, cache: some CacheView,
                                  actions: inout [MachineAction]) {
        guard tag == requestTag, stage == .targeted || stage == .defaultAudience else { return }
        actions.append(.clearTimer(tag: timerTag))
        requestTag = -1
        // Matched in place: the completion (and its payload) is not copied into a local first.
        let failure: RequestFailure
        switch completion.result {
        case .success(.audience(let payload)):
            let fromDefault = stage == .defaultAudience
            guard let flow = cache.drawFlow(payload, profileId: profileId, source: fromDefault ? .defaultAudience : .network,
                                            targetingLost: fromDefault) else {
                failure = .malformed(reason: "variation weights do not sum to 100")
                break
            }
            emitRequestEnd(tag: tag, result: completion.result, bytes: completion.bytes, now: now, &actions)
            actions.append(.storeFlow(placement: placement,
                                      CachedFlow(flow: flow, storedAt: now, fromDefaultAudience: fromDefault),
                                      keepTargeted: fromDefault))
            return finish(.flow(flow), now: now, &actions)
        case .success:
            failure = .malformed(reason: "unexpected response body")
        case .failure(let f):
            failure = f
        }
        emitRequestEnd(tag: tag, result: .failure(failure), bytes: completion.bytes, now: now, &actions)
        failed(failure, now: now, cache: cache, &actions)
    }

    public mutating func timer(tag: Int, now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {
        guard tag == timerTag, requestTag >= 0 else { return }
        let cut = requestTag
        requestTag = -1
        actions.append(.cancel(tag: cut))
        emitRequestEnd(tag: cut, result: .failure(.timeout), bytes: 0, now: now, &actions)
        emit(.timeout, ["stage": .string(stage == .targeted ? "targeted" : "default"),
                        "budget": seconds(requestBudget), "elapsed": seconds(now - startedAt)], &actions)
        failed(.timeout, now: now, cache: cache, &actions)
    }

    public mutating func abort(_ error: FlowError, now: EngineTime, actions: inout [MachineAction]) {
        guard stage != .done else { return }
        if requestTag >= 0 {
            actions.append(.cancel(tag: requestTag))
            actions.append(.clearTimer(tag: timerTag))
            emitRequestEnd(tag: requestTag, result: .failure(.cancelled), bytes: 0, now: now, &actions)
            requestTag = -1
        }
        finish(.failed(error), now: now, &actions)
    }

    // MARK: stages

    private mutating func failed(_ failure: RequestFailure, now: EngineTime, cache: some CacheView, _ actions: inout [MachineAction]) {
        lastFailure = failure
        let reason = failure.errorClass
        if stage == .targeted, reason.fallsBack {
            stageB(reason: reason, now: now, cache: cache, &actions)
        } else {
            stageC(reason: reason, now: now, cache: cache, &actions)
        }
    }

    private mutating func stageB(reason: ErrorClass, now: EngineTime, cache: some CacheView, _ actions: inout [MachineAction]) {
        if let (entry, _) = lookup(now: now, cache: cache, &actions) {
            emit(.fallback, ["to": "cache", "reason": .string(reason.rawValue)], &actions)
            return finishFromCache(entry, now: now, &actions)
        }
        emit(.fallback, ["to": "defaultAudience", "reason": .string(reason.rawValue)], &actions)
        stage = .defaultAudience
        send(.default, budget: Budget.stageB(loadTimeout ?? .zero, elapsed: now - startedAt), now: now, &actions)
    }

    private mutating func stageC(reason: ErrorClass, now: EngineTime, cache: some CacheView, _ actions: inout [MachineAction]) {
        if let (entry, _) = lookup(now: now, cache: cache, &actions) {
            emit(.fallback, ["to": "cache", "reason": .string(reason.rawValue)], &actions)
            return finishFromCache(entry, now: now, &actions)
        }
        if let flow = fallback?.flow(for: placement) {
            emit(.fallback, ["to": "fallbackFile", "reason": .string(reason.rawValue)], &actions)
            return finish(.flow(flow), now: now, &actions)
        }
        finish(.failed((lastFailure ?? .timeout).flowError), now: now, &actions)
    }

    // MARK: pieces

    private mutating func send(_ kind: RequestKind, budget: EngineTime, now: EngineTime, _ actions: inout [MachineAction]) {
        requestTag = nextTag
        timerTag = nextTag + 1
        nextTag += 2
        requestStartedAt = now
        requestBudget = budget
        if reportsEvents {
            actions.append(.emit(.requestStart, placement: placement, span: requestTag + 1,
                                 attrs: ["kind": .string(kind.rawValue), "timeout": seconds(budget)]))
        }
        actions.append(.send(tag: requestTag, RequestSpec(kind: kind, placement: placement, profileId: profileId, timeout: budget.seconds)))
        actions.append(.setTimer(tag: timerTag, at: now + budget))
    }

    private func emitRequestEnd(tag: Int, result: RequestResult, bytes: Int, now: EngineTime, _ actions: inout [MachineAction]) {
        guard reportsEvents else { return }
        var attrs: EventAttributes = [
            "kind": .string(stage == .targeted ? "targeted" : "default"),
            "duration": seconds(now - requestStartedAt), "bytes": .number(Double(bytes)),
        ]
        switch result {
        case .success: attrs["outcome"] = "ok"; attrs["status"] = 200
        case .failure(let f):
            attrs["outcome"] = .string(f.outcome)
            if case .http(let status) = f { attrs["status"] = .number(Double(status)) }
            if case .malformed = f { attrs["status"] = 200 }
        }
        actions.append(.emit(.requestEnd, placement: placement, span: tag + 1, attrs: attrs))
    }

    private func read(_ cache: some CacheView) -> CacheRead { cache.readFlow(placement: placement) }

    /// Reads the cache and reports the lookup: a hit, or a miss (only the first miss of a call is reported).
    private mutating func lookup(now: EngineTime, cache: some CacheView, _ actions: inout [MachineAction]) -> (CachedFlow, CacheLayer)? {
        switch read(cache) {
        case .hit(let entry, let layer):
            emitHit(entry, layer: layer, now: now, &actions)
            return (entry, layer)
        case .miss:
            emitMiss(&actions)
        case .corrupt(let key, let reason):
            emit(.cacheCorrupt, ["key": .string(key), "reason": .string(reason)], &actions)
            emitMiss(&actions)
        }
        return nil
    }

    private func emitHit(_ entry: CachedFlow, layer: CacheLayer, now: EngineTime, _ actions: inout [MachineAction]) {
        emit(.cacheHit, .cacheHit(layer: layer, age: (now - entry.storedAt).seconds,
                                  fromDefaultAudience: entry.fromDefaultAudience), &actions)
    }

    private mutating func emitMiss(_ actions: inout [MachineAction]) {
        guard !reportedMiss else { return }
        reportedMiss = true
        emit(.cacheMiss, [:], &actions)
    }

    private mutating func finishFromCache(_ entry: CachedFlow, now: EngineTime, _ actions: inout [MachineAction]) {
        var flow = entry.flow
        flow.source = .cache
        flow.targetingLost = entry.fromDefaultAudience
        finish(.flow(flow), now: now, &actions)
    }

    private mutating func finish(_ outcome: consuming CallOutcome, now: EngineTime, _ actions: inout [MachineAction]) {
        stage = .done
        if reportsCall && reportsEvents {
            actions.append(.emit(.fetchEnd, placement: placement, span: 0,
                                 attrs: fetchEndAttrs(call: callName, outcome, duration: now - startedAt)))
        }
        actions.append(.finish(outcome))
    }

    private func emit(_ name: EventName, _ attrs: @autoclosure () -> EventAttributes, _ actions: inout [MachineAction]) {
        guard reportsEvents else { return }
        actions.append(.emit(name, placement: placement, span: 0, attrs: attrs()))
    }
}

/// The attributes of fetch.end for a call's outcome.
func fetchEndAttrs(call: FetchCallName, _ outcome: CallOutcome, duration: EngineTime) -> EventAttributes {
    if let flow = outcome.flow {
        let source = if case .configuration(let c) = outcome { c.source } else { flow.source }
        return .fetchEndFlow(call: call, duration: duration.seconds, source: source, variation: flow.variationId,
                             audience: flow.audienceName, targetingLost: flow.targetingLost)
    }
    var attrs = EventAttributes(minimumCapacity: 3)
    attrs.append("call", .string(call.rawValue))
    attrs.append("duration", seconds(duration))
    if let error = outcome.error {
        attrs.append("errorCode", .number(Double(error.code.rawValue)))
    }
    return attrs
}
