import FlowJSON

/// preloadFlows and preloadFlowsForDefaultAudience as a pure state machine (fetch-semantics.md).
///
/// preloadFlows: phase A sends targeted requests for every placement in parallel under one shared
/// deadline (start + A); when phase A has ended, phase B sends default-audience requests for the
/// placements whose error falls back. Failing placements are reported together in `preloadErrors`.
public struct PreloadMachine: FetchMachine {
    /// Which of the two calls this is.
    public enum Call: Sendable, Hashable {
        /// preloadFlows with the loadTimeout the caller gave, in seconds.
        case targeted(loadTimeout: Double)
        case defaultAudience(requestTimeout: EngineTime)
    }

    public let call: Call
    /// Normalised placement ids (trimmed, non-empty, first-seen order, no duplicates).
    public let placements: [String]
    public let profileId: String
    public let requestedLoadTimeout: Double?
    /// Whether the machine returns `.emit` actions. The engine turns it off when no sink listens, so
    /// event attributes are never built for nobody; every other action is the same either way.
    public var reportsEvents = true

    private enum Phase: Sendable { case idle, targeted, defaultAudience, done }
    private enum State: Sendable, Hashable {
        case pending(tag: Int)
        case succeeded
        case failed(RequestFailure)
    }
    private var phase = Phase.idle
    private var states: [String: State] = [:]
    private var byTag: [Int: String] = [:]
    /// T in engine time (preloadFlows only), converted once from the caller's seconds.
    private let loadTimeout: EngineTime?
    private var startedAt = EngineTime.zero
    private var phaseStartedAt = EngineTime.zero
    private var phaseBudget = EngineTime.zero
    private var timerTag = -1
    private var nextTag = 0

    /// Validates and builds the machine; throws wrongParam (3001) for a bad loadTimeout, before the
    /// ids are normalised (so even when no id is left).
    public init(call: Call, placements: [String], profileId: String) throws(FlowError) {
        var resolved = call
        var requested: Double?
        var loadTimeout: EngineTime?
        if case .targeted(let t) = call {
            guard let clamped = Budget.loadTimeout(t) else {
                throw FlowError(.wrongParam, "loadTimeout must be a finite number >= 0, got \(t)")
            }
            if clamped != EngineTime(seconds: t) { requested = t }
            resolved = .targeted(loadTimeout: clamped.seconds)
            loadTimeout = clamped
        }
        self.loadTimeout = loadTimeout
        self.call = resolved
        self.placements = Budget.normalizePlacements(placements)
        self.profileId = profileId
        self.requestedLoadTimeout = requested
    }

    private var callName: String {
        if case .targeted = call { "preloadFlows" } else { "preloadFlowsForDefaultAudience" }
    }

    public mutating func start(now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {
        guard phase == .idle else { return }
        startedAt = now
        guard !placements.isEmpty else {
            phase = .done
            actions.append(.finish(.done))
            return
        }
        var loadTimeoutAttr: JSONValue = .null
        if let t = loadTimeout {
            loadTimeoutAttr = seconds(t)
            if let requested = requestedLoadTimeout {
                emit(.paramClamped, nil, ["name": "loadTimeout", "from": .number(requested), "to": seconds(t)], &actions)
            }
        }
        emit(.preloadStart, nil, ["call": .string(callName), "placements": .array(placements.map(JSONValue.string)),
                                  "loadTimeout": loadTimeoutAttr], &actions)
        switch call {
        case .targeted:
            phase = .targeted
            sendAll(placements, kind: .targeted, budget: Budget.stageA(loadTimeout ?? Budget.minimumLoadTimeout), now: now, &actions)
        case .defaultAudience(let requestTimeout):
            phase = .defaultAudience
            sendAll(placements, kind: .default, budget: requestTimeout, now: now, &actions)
        }
    }

    public mutating func response(tag: Int, _ completion: RequestCompletion, now: EngineTime, cache: some CacheView,
                                  actions: inout [MachineAction]) {
        guard let placement = byTag[tag], states[placement] == .pending(tag: tag) else { return }
        byTag[tag] = nil
        var result = completion.result
        if case .success(let body) = result {
            if case .audience(let payload) = body, let v = cache.drawVariation(payload, profileId: profileId) {
                let fromDefault = phase == .defaultAudience
                let flow = Flow(payload: payload, variation: v, source: fromDefault ? .defaultAudience : .network,
                                targetingLost: fromDefault)
                actions.append(.storeFlow(placement: placement,
                                          CachedFlow(flow: flow, storedAt: now, fromDefaultAudience: fromDefault),
                                          keepTargeted: fromDefault))
            } else {
                result = .failure(.malformed(reason: "invalid audience response"))
            }
        }
        emitRequestEnd(placement, tag: tag, result: result, bytes: completion.bytes, now: now, &actions)
        switch result {
        case .success: states[placement] = .succeeded
        case .failure(let f): states[placement] = .failed(f)
        }
        if byTag.isEmpty {
            actions.append(.clearTimer(tag: timerTag))
            endPhase(now: now, &actions)
        }
    }

    public mutating func timer(tag: Int, now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {
        guard tag == timerTag, phase == .targeted || phase == .defaultAudience else { return }
        for (requestTag, placement) in byTag.sorted(by: { $0.key < $1.key }) {
            actions.append(.cancel(tag: requestTag))
            emitRequestEnd(placement, tag: requestTag, result: .failure(.timeout), bytes: 0, now: now, &actions)
            emit(.timeout, placement, ["stage": .string(phase == .targeted ? "batch" : "default"),
                                       "budget": seconds(phaseBudget), "elapsed": seconds(now - startedAt)], &actions)
            states[placement] = .failed(.timeout)
        }
        byTag.removeAll()
        endPhase(now: now, &actions)
    }

    public mutating func abort(_ error: FlowError, now: EngineTime, actions: inout [MachineAction]) {
        guard phase != .done else { return }
        for (requestTag, placement) in byTag.sorted(by: { $0.key < $1.key }) {
            actions.append(.cancel(tag: requestTag))
            emitRequestEnd(placement, tag: requestTag, result: .failure(.cancelled), bytes: 0, now: now, &actions)
        }
        byTag.removeAll()
        actions.append(.clearTimer(tag: timerTag))
        phase = .done
        emit(.preloadEnd, nil, ["call": .string(callName), "succeeded": .array([]), "failed": .object([:]),
                                "duration": seconds(now - startedAt), "errorCode": .number(Double(error.code.rawValue))], &actions)
        actions.append(.finish(.failed(error)))
    }

    private mutating func endPhase(now: EngineTime, _ actions: inout [MachineAction]) {
        if phase == .targeted, let t = loadTimeout {
            let retry = placements.filter { if case .failed(let f) = states[$0] { f.errorClass.fallsBack } else { false } }
            if !retry.isEmpty {
                phase = .defaultAudience
                for p in retry {
                    if case .failed(let f) = states[p] {
                        emit(.fallback, p, ["to": "defaultAudience", "reason": .string(f.errorClass.rawValue)], &actions)
                    }
                }
                sendAll(retry, kind: .default, budget: Budget.stageB(t, elapsed: now - startedAt), now: now, &actions)
                return
            }
        }
        phase = .done
        var succeeded: [JSONValue] = []
        var failed: [String: JSONValue] = [:]
        var errors: [String: FlowError] = [:]
        for p in placements {
            switch states[p] {
            case .failed(let f):
                errors[p] = f.flowError
                failed[p] = .number(Double(f.flowError.code.rawValue))
            default:
                succeeded.append(.string(p))
            }
        }
        emit(.preloadEnd, nil, ["call": .string(callName), "succeeded": .array(succeeded), "failed": .object(failed),
                                "duration": seconds(now - startedAt)], &actions)
        if errors.isEmpty {
            actions.append(.finish(.done))
        } else {
            actions.append(.finish(.failed(FlowError(.networkFailed, "\(errors.count) of \(placements.count) placements failed to preload",
                                                     preloadErrors: errors))))
        }
    }

    private mutating func sendAll(_ ids: [String], kind: RequestKind, budget: EngineTime, now: EngineTime, _ actions: inout [MachineAction]) {
        phaseStartedAt = now
        phaseBudget = budget
        for p in ids {
            let tag = nextTag
            nextTag += 1
            byTag[tag] = p
            states[p] = .pending(tag: tag)
            if reportsEvents {
                actions.append(.emit(.requestStart, placement: p, span: tag + 1,
                                     attrs: ["kind": .string(kind.rawValue), "timeout": seconds(budget)]))
            }
            actions.append(.send(tag: tag, RequestSpec(kind: kind, placement: p, profileId: profileId, timeout: budget.seconds)))
        }
        timerTag = nextTag
        nextTag += 1
        actions.append(.setTimer(tag: timerTag, at: now + budget))
    }

    private func emitRequestEnd(_ placement: String, tag: Int, result: RequestResult, bytes: Int, now: EngineTime,
                                _ actions: inout [MachineAction]) {
        guard reportsEvents else { return }
        var attrs: EventAttributes = [
            "kind": .string(phase == .targeted ? "targeted" : "default"),
            "duration": seconds(now - phaseStartedAt), "bytes": .number(Double(bytes)),
        ]
        switch result {
        case .success: attrs["outcome"] = "ok"; attrs["status"] = 200
        case .failure(let f):
            attrs["outcome"] = .string(f.outcome)
            if case .http(let status) = f { attrs["status"] = .number(Double(status)) }
        }
        actions.append(.emit(.requestEnd, placement: placement, span: tag + 1, attrs: attrs))
    }

    private func emit(_ name: EventName, _ placement: String?, _ attrs: @autoclosure () -> EventAttributes,
                      _ actions: inout [MachineAction]) {
        guard reportsEvents else { return }
        actions.append(.emit(name, placement: placement, span: 0, attrs: attrs()))
    }
}
