import FlowJSON

/// The background profile fetch after identify: learns which attribution the backend has applied.
public struct ProfileMachine: FetchMachine {
    public let profileId: String
    public let requestTimeout: EngineTime
    private var startedAt = EngineTime.zero
    private var done = false

    public init(profileId: String, requestTimeout: EngineTime) { self.profileId = profileId; self.requestTimeout = requestTimeout }

    public mutating func start(now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {
        startedAt = now
        actions.append(.emit(.requestStart, placement: nil, span: 1, attrs: ["kind": "profile", "timeout": seconds(requestTimeout)]))
        actions.append(.send(tag: 0, RequestSpec(kind: .profile, profileId: profileId, timeout: requestTimeout.seconds)))
        actions.append(.setTimer(tag: 1, at: now + requestTimeout))
    }

    public mutating func response(tag: Int, _ completion: RequestCompletion, now: EngineTime, cache: some CacheView,
                                  actions: inout [MachineAction]) {
        guard !done else { return }
        actions.append(.clearTimer(tag: 1))
        var attrs: EventAttributes = ["kind": "profile", "duration": seconds(now - startedAt), "bytes": .number(Double(completion.bytes))]
        var applied: [String] = []
        switch completion.result {
        case .success(.profile(let p)) where p.id == profileId:
            attrs["outcome"] = "ok"
            applied = Array(p.appliedAttributionSources)
        case .success:
            attrs["outcome"] = "malformed"
        case .failure(let f):
            attrs["outcome"] = .string(f.outcome)
        }
        actions.append(.emit(.requestEnd, placement: nil, span: 1, attrs: attrs))
        if !applied.isEmpty { actions.append(.applyAttribution(applied)) }
        end(&actions)
    }

    public mutating func timer(tag: Int, now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {
        guard !done else { return }
        actions.append(.cancel(tag: 0))
        actions.append(.emit(.requestEnd, placement: nil, span: 1,
                             attrs: ["kind": "profile", "outcome": "timeout", "duration": seconds(now - startedAt), "bytes": 0]))
        end(&actions)
    }

    public mutating func abort(_ error: FlowError, now: EngineTime, actions: inout [MachineAction]) {
        guard !done else { return }
        actions.append(.cancel(tag: 0))
        actions.append(.clearTimer(tag: 1))
        end(&actions)
    }

    private mutating func end(_ actions: inout [MachineAction]) {
        done = true
        actions.append(.finish(.done))
    }
}
