import FlowJSON

/// preloadFlows and preloadFlowsForDefaultAudience as a pure state machine (docs/fetch-rules.md).
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
        case unsent
        case pending(tag: Int)
        case succeeded
        case failed(RequestFailure)
    }
    private var phase = Phase.idle
    /// Per placement, by its index in `placements` (arrays, not dictionaries: a preload has a few
    /// placements and tags, both numbered densely).
    private var states: [State]
    /// Per tag, the index of the placement whose request is still pending under it, or -1.
    private var byTag: [Int] = []
    /// Requests pending.
    private var pendingCount = 0
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
        self.states = Array(repeating: .unsent, count: self.placements.count)
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
            sendAll(Array(placements.indices), kind: .targeted, budget: Budget.stageA(loadTimeout ?? Budget.minimumLoadTimeout), now: now, &actions)
        case .defaultAudience(let requestTimeout):
            phase = .defaultAudience
            sendAll(Array(placements.indices), kind: .default, budget: requestTimeout, now: now, &actions)
        }
    }

    public mutating func response(tag: Int, _ completion: RequestCompletion, now: EngineTime, cache: some CacheView,
                                  actions: inout [MachineAction]) {
        guard byTag.indices.contains(tag), case let index = byTag[tag], index >= 0, states[index] == .pending(tag: tag) else { return }
        let placement = placements[index]
        byTag[tag] = -1
        pendingCount -= 1
        var result = completion.result
        if case .success(let body) = result {
            let fromDefault = phase == .defaultAudience
            if case .audience(let payload) = body,
               let flow = cache.drawFlow(payload, profileId: profileId, source: fromDefault ? .defaultAudience : .network,
                                         targetingLost: fromDefault) {
                actions.append(.storeFlow(placement: placement,
                                          CachedFlow(flow: flow, storedAt: now, fromDefaultAudience: fromDefault),
                                          keepTargeted: fromDefault))
            } else {
                result = .failure(.malformed(reason: "invalid audience response"))
            }
        }
        emitRequestEnd(placement, tag: tag, result: result, bytes: completion.bytes, now: now, &actions)
        switch result {
        case .success: states[index] = .succeeded
        case .failure(let f): states[index] = .failed(f)
        }
        if pendingCount == 0 {
            actions.append(.clearTimer(tag: timerTag))
            endPhase(now: now, &actions)
        }
    }

    public mutating func timer(tag: Int, now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {
        guard tag == timerTag, phase == .targeted || phase == .defaultAudience else { return }
        for (requestTag, index) in byTag.enumerated() where index >= 0 {
            let placement = placements[index]
            actions.append(.cancel(tag: requestTag))
            emitRequestEnd(placement, tag: requestTag, result: .failure(.timeout), bytes: 0, now: now, &actions)
            emit(.timeout, placement, ["stage": .string(phase == .targeted ? "batch" : "default"),
                                       "budget": seconds(phaseBudget), "elapsed": seconds(now - startedAt)], &actions)
            states[index] = .failed(.timeout)
        }
        clearPending()
        endPhase(now: now, &actions)
    }

    public mutating func abort(_ error: FlowError, now: EngineTime, actions: inout [MachineAction]) {
        guard phase != .done else { return }
        for (requestTag, index) in byTag.enumerated() where index >= 0 {
            actions.append(.cancel(tag: requestTag))
            emitRequestEnd(placements[index], tag: requestTag, result: .failure(.cancelled), bytes: 0, now: now, &actions)
        }
        clearPending()
        actions.append(.clearTimer(tag: timerTag))
        phase = .done
        emit(.preloadEnd, nil, ["call": .string(callName), "succeeded": .array([]), "failed": .object([:]),
                                "duration": seconds(now - startedAt), "errorCode": .number(Double(error.code.rawValue))], &actions)
        actions.append(.finish(.failed(error)))
    }

    private mutating func clearPending() {
        for i in byTag.indices { byTag[i] = -1 }
        pendingCount = 0
    }

    private mutating func endPhase(now: EngineTime, _ actions: inout [MachineAction]) {
        if phase == .targeted, let t = loadTimeout {
            let retry = placements.indices.filter { if case .failed(let f) = states[$0] { f.errorClass.fallsBack } else { false } }
            if !retry.isEmpty {
                phase = .defaultAudience
                for i in retry {
                    if case .failed(let f) = states[i] {
                        emit(.fallback, placements[i], ["to": "defaultAudience", "reason": .string(f.errorClass.rawValue)], &actions)
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
        for (i, p) in placements.enumerated() {
            switch states[i] {
            case .failed(let f):
                let error = f.flowError
                errors[p] = error
                if reportsEvents { failed[p] = .number(Double(error.code.rawValue)) }
            default:
                if reportsEvents { succeeded.append(.string(p)) }
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

    /// Sends a request for each placement of `indices` (into `placements`).
    private mutating func sendAll(_ indices: [Int], kind: RequestKind, budget: EngineTime, now: EngineTime, _ actions: inout [MachineAction]) {
        phaseStartedAt = now
        phaseBudget = budget
        if byTag.isEmpty { byTag.reserveCapacity(2 * placements.count + 2) }
        for i in indices {
            let p = placements[i]
            let tag = nextTag
            nextTag += 1
            while byTag.count <= tag { byTag.append(-1) }
            byTag[tag] = i
            pendingCount += 1
            states[i] = .pending(tag: tag)
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
