import FlowJSON

/// getFlowOrDefault, the attribution race, as a pure state machine (docs/fetch-rules.md).
///
/// A default-audience fetch starts at once in the background. The attribution path (wait for
/// `appleAds`, then getFlow with T = 5) races a timer of `timeout` seconds. Exactly one result is
/// delivered: the targeted flow if the attribution path wins, else the default fetch's result.
public struct OrDefaultMachine: FetchMachine {
    /// The loadTimeout of the attribution path's getFlow (seconds).
    public static let attributionLoadTimeout = 5.0

    public let placement: String
    /// The race timer in seconds, as the caller gave it.
    public let timeout: Double
    /// The race timer in engine time, converted once.
    private let timer: EngineTime
    /// Whether the profile already has `appleAds` applied when the call starts.
    public let attributed: Bool
    /// Whether the machine returns `.emit` actions. The engine turns it off when no sink listens, so
    /// event attributes are never built for nobody; every other action is the same either way.
    public var reportsEvents = true

    private static let defaultChild = 0, targetedChild = 1, raceTimer = 2
    private enum Race: Sendable { case idle, waitingForAttribution, fetchingTargeted, awaitingDefault, done }
    private var race = Race.idle
    private var defaultOutcome: CallOutcome?
    private var startedAt = EngineTime.zero

    /// Validates and builds the machine; throws wrongParam (3001) for an empty placement or a bad timeout.
    public init(placement: String, timeout: Double, attributed: Bool) throws(FlowError) {
        guard let id = Budget.normalizePlacement(placement) else { throw FlowError(.wrongParam, "placement id is empty") }
        guard Budget.isValidDuration(timeout) else {
            throw FlowError(.wrongParam, "timeout must be a finite number >= 0, got \(timeout)")
        }
        self.placement = id
        self.timeout = timeout
        self.timer = EngineTime(seconds: timeout)
        self.attributed = attributed
    }

    public mutating func start(now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {
        guard race == .idle else { return }
        startedAt = now
        emit(.fetchStart, ["call": "getFlowOrDefault", "policy": .string(FetchPolicy.reloadRevalidatingCacheData.description),
                           "loadTimeout": .null, "timeout": seconds(timer)], &actions)
        actions.append(.startChild(tag: Self.defaultChild, .defaultAudience(placement: placement)))
        actions.append(.setTimer(tag: Self.raceTimer, at: now + timer))
        if attributed {
            startTargeted(&actions)
        } else {
            race = .waitingForAttribution
            actions.append(.watchAttribution)
        }
    }

    public mutating func attributionApplied(now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {
        guard race == .waitingForAttribution else { return }
        startTargeted(&actions)
    }

    public mutating func child(tag: Int, _ outcome: CallOutcome, now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {
        switch tag {
        case Self.defaultChild:
            defaultOutcome = outcome
            if race == .awaitingDefault { deliver(outcome, now: now, &actions) }
        case Self.targetedChild where race == .fetchingTargeted:
            actions.append(.clearTimer(tag: Self.raceTimer))
            if outcome.error == nil {
                if defaultOutcome == nil { actions.append(.cancelChild(tag: Self.defaultChild)) }
                deliver(outcome, now: now, &actions)
            } else {
                awaitDefault(now: now, &actions)
            }
        default:
            break
        }
    }

    public mutating func timer(tag: Int, now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {
        guard tag == Self.raceTimer, race == .waitingForAttribution || race == .fetchingTargeted else { return }
        emit(.attributionTimeout, ["after": seconds(now - startedAt)], &actions)
        if race == .fetchingTargeted { actions.append(.cancelChild(tag: Self.targetedChild)) }
        awaitDefault(now: now, &actions)
    }

    public mutating func response(tag: Int, _ completion: RequestCompletion, now: EngineTime, cache: some CacheView,
                                  actions: inout [MachineAction]) {}

    public mutating func abort(_ error: FlowError, now: EngineTime, actions: inout [MachineAction]) {
        guard race != .done else { return }
        actions.append(.clearTimer(tag: Self.raceTimer))
        if defaultOutcome == nil { actions.append(.cancelChild(tag: Self.defaultChild)) }
        if race == .fetchingTargeted { actions.append(.cancelChild(tag: Self.targetedChild)) }
        deliver(.failed(error), now: now, &actions)
    }

    private mutating func startTargeted(_ actions: inout [MachineAction]) {
        race = .fetchingTargeted
        actions.append(.startChild(tag: Self.targetedChild, .targeted(placement: placement, loadTimeout: Self.attributionLoadTimeout)))
    }

    private mutating func awaitDefault(now: EngineTime, _ actions: inout [MachineAction]) {
        race = .awaitingDefault
        if let outcome = defaultOutcome { deliver(outcome, now: now, &actions) }
    }

    private mutating func deliver(_ outcome: CallOutcome, now: EngineTime, _ actions: inout [MachineAction]) {
        race = .done
        emit(.fetchEnd, fetchEndAttrs(call: .getFlowOrDefault, outcome, duration: now - startedAt), &actions)
        actions.append(.finish(outcome))
    }

    private func emit(_ name: EventName, _ attrs: @autoclosure () -> EventAttributes, _ actions: inout [MachineAction]) {
        guard reportsEvents else { return }
        actions.append(.emit(name, placement: placement, span: 0, attrs: attrs()))
    }
}
