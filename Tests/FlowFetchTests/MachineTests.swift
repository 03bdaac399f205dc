import Testing
@testable import FlowFetch
import FlowJSON

/// A cache the machines read: fixed entries per placement, fixed layouts.
struct FakeCache: CacheView {
    var flows: [String: CacheRead] = [:]
    var layouts: [LayoutRef: Layout] = [:]
    func readFlow(placement: String) -> CacheRead { flows[placement] ?? .miss }
    func readLayout(_ ref: LayoutRef) -> Layout? { layouts[ref] }
}

/// The sends, timers, cancels and finish of a batch of actions, in a form easy to compare.
struct Acts {
    var sends: [(tag: Int, spec: RequestSpec)] = []
    var timers: [(tag: Int, at: EngineTime)] = []
    var cancels: [Int] = []
    var clears: [Int] = []
    var events: [EventName] = []
    var stores: [(placement: String, entry: CachedFlow, keepTargeted: Bool)] = []
    var children: [(tag: Int, call: ChildCall)] = []
    var cancelledChildren: [Int] = []
    var watches = 0
    var finish: CallOutcome?
    var finishes = 0
    init(_ actions: [MachineAction]) {
        for a in actions {
            switch a {
            case .send(let tag, let spec): sends.append((tag, spec))
            case .setTimer(let tag, let at): timers.append((tag, at))
            case .cancel(let tag): cancels.append(tag)
            case .clearTimer(let tag): clears.append(tag)
            case .emit(let name, _, _, _): events.append(name)
            case .storeFlow(let p, let e, let k): stores.append((p, e, k))
            case .startChild(let tag, let c): children.append((tag, c))
            case .cancelChild(let tag): cancelledChildren.append(tag)
            case .watchAttribution: watches += 1
            case .finish(let o): finish = o; finishes += 1
            default: break
            }
        }
    }
}

let allUsers = AudiencePayload(placementId: "main_paywall", audienceName: "All Users", audienceVersionId: "av-all",
                               variations: [Variation(id: "all-A", weight: 50), Variation(id: "all-B", weight: 50)])

func flow(_ variation: String, source: FlowSource = .cache, lost: Bool = false) -> Flow {
    Flow(placementId: "main_paywall", variationId: variation, audienceName: "All Users", audienceVersionId: "av-all",
         source: source, targetingLost: lost)
}

@Suite("GetFlowMachine")
struct GetFlowMachineTests {
    func machine(_ t: Double = 5, policy: FetchPolicy = .reloadRevalidatingCacheData, fallback: FallbackFile? = nil) throws -> GetFlowMachine {
        try GetFlowMachine(call: .getFlow(loadTimeout: t), placement: " main_paywall ", policy: policy, profileId: "user-42",
                           fallback: fallback)
    }

    @Test("start sends the targeted request with budget A and sets the timer at start + A")
    func start() throws {
        var m = try machine()
        var actions: [MachineAction] = []
        m.start(now: 10, cache: FakeCache(), actions: &actions)
        let a = Acts(actions)
        #expect(m.placement == "main_paywall")
        #expect(a.sends.count == 1)
        #expect(a.sends.first?.spec == RequestSpec(kind: .targeted, placement: "main_paywall", profileId: "user-42", timeout: 4.5))
        #expect(a.timers.count == 1)
        #expect(a.timers.first?.at == 14.5)
        #expect(a.timers.first?.tag != a.sends.first?.tag)
        #expect(a.events.first == .fetchStart)
        #expect(a.finish == nil)
    }

    @Test("the stage-A timer cancels the request, emits timeout and sends the default request with the stage-B budget")
    func timerToStageB() throws {
        var m = try machine()
        var actions: [MachineAction] = []
        m.start(now: 10, cache: FakeCache(), actions: &actions)
        let first = Acts(actions)
        actions = []
        m.timer(tag: try #require(first.timers.first).tag, now: 14.5, cache: FakeCache(), actions: &actions)
        let a = Acts(actions)
        #expect(a.cancels == [first.sends[0].tag])
        #expect(a.events.contains(.timeout))
        #expect(a.events.contains(.fallback))
        #expect(a.sends.first?.spec.kind == .default)
        #expect(a.sends.first?.spec.timeout == 0.5)  // min(max(5 - 4.5, 0.5), 60)
        #expect(a.timers.first?.at == 15)
        actions = []
        m.response(tag: a.sends[0].tag, RequestCompletion(.success(.audience(allUsers))), now: 14.7, cache: FakeCache(), actions: &actions)
        let done = Acts(actions)
        #expect(done.stores.count == 1)
        #expect(done.stores.first?.keepTargeted == true)
        #expect(done.stores.first?.entry.fromDefaultAudience == true)
        #expect(done.stores.first?.entry.storedAt == 14.7)
        #expect(done.finish?.flow?.source == .defaultAudience)
        #expect(done.finish?.flow?.variationId == "all-B")
        #expect(done.finish?.flow?.targetingLost == true)
        #expect(done.finishes == 1)
    }

    @Test("stage B returns a cached entry of any age without a request, keeping its targeting")
    func stageBCache() throws {
        var m = try machine()
        var actions: [MachineAction] = []
        m.start(now: 0, cache: FakeCache(), actions: &actions)
        let tag = Acts(actions).sends[0].tag
        actions = []
        let cache = FakeCache(flows: ["main_paywall": .hit(CachedFlow(flow: flow("all-A"), storedAt: -1e7, fromDefaultAudience: true), layer: .disk)])
        m.response(tag: tag, RequestCompletion(.failure(.http(status: 503))), now: 1, cache: cache, actions: &actions)
        let a = Acts(actions)
        #expect(a.sends.isEmpty)
        #expect(a.finish?.flow?.source == .cache)
        #expect(a.finish?.flow?.targetingLost == true)
        #expect(a.events.contains(.cacheHit))
    }

    @Test("a non-eligible stage-A error skips stage B: the fallback file, else the error itself")
    func notEligible() throws {
        let fb = FallbackFile(placements: ["main_paywall": AudiencePayload(placementId: "main_paywall", audienceName: "All Users",
                                                                          audienceVersionId: "fallback", variations: [Variation(id: "fb", weight: 100)])])
        for (fallback, failure, code) in [(nil, RequestFailure.http(status: 404), FlowError.Code.badRequest),
                                          (nil, .malformed(reason: "x"), .decodingFailed), (fb, .http(status: 404), nil)] {
            var m = try machine(fallback: fallback)
            var actions: [MachineAction] = []
            m.start(now: 0, cache: FakeCache(), actions: &actions)
            let tag = Acts(actions).sends[0].tag
            actions = []
            m.response(tag: tag, RequestCompletion(.failure(failure)), now: 0.2, cache: FakeCache(), actions: &actions)
            let a = Acts(actions)
            #expect(a.sends.isEmpty)
            #expect(a.finish?.error?.code == code)
            if code == nil { #expect(a.finish?.flow?.source == .fallbackFile) }
        }
    }

    @Test("weights that do not sum to 100 make the response invalid: 2006")
    func badWeights() throws {
        var m = try machine()
        var actions: [MachineAction] = []
        m.start(now: 0, cache: FakeCache(), actions: &actions)
        let tag = Acts(actions).sends[0].tag
        actions = []
        var bad = allUsers
        bad.variations[1].weight = 49
        m.response(tag: tag, RequestCompletion(.success(.audience(bad))), now: 0.2, cache: FakeCache(), actions: &actions)
        #expect(Acts(actions).finish?.error?.code == .decodingFailed)
        #expect(Acts(actions).stores.isEmpty)
    }

    @Test("policies: returnCacheDataElseLoad hits at once; maxAge expires at age == maxAge")
    func policies() throws {
        let entry = CachedFlow(flow: flow("all-A"), storedAt: 0, fromDefaultAudience: false)
        let cache = FakeCache(flows: ["main_paywall": .hit(entry, layer: .memory)])
        var m = try machine(policy: .returnCacheDataElseLoad)
        var actions: [MachineAction] = []
        m.start(now: 1e6, cache: cache, actions: &actions)
        #expect(Acts(actions).sends.isEmpty)
        #expect(Acts(actions).finish?.flow?.source == .cache)

        var fresh = try machine(policy: .returnCacheDataIfNotExpiredElseLoad(maxAge: 10))
        actions = []
        fresh.start(now: 9.999, cache: cache, actions: &actions)
        #expect(Acts(actions).sends.isEmpty)

        var expired = try machine(policy: .returnCacheDataIfNotExpiredElseLoad(maxAge: 10))
        actions = []
        expired.start(now: 10, cache: cache, actions: &actions)
        #expect(Acts(actions).events.contains(.cacheExpired))
        #expect(Acts(actions).sends.first?.spec.kind == .targeted)
    }

    @Test("invalid arguments throw wrongParam; a loadTimeout below 1 is raised to 1 and reported")
    func validation() throws {
        #expect(throws: FlowError.self) { try machine(-1) }
        #expect(throws: FlowError.self) { try machine(.nan) }
        #expect(throws: FlowError.self) { try machine(.infinity) }
        #expect(throws: FlowError.self) { try GetFlowMachine(call: .getFlow(loadTimeout: 5), placement: "  ", profileId: "u") }
        var m = try machine(0.3)
        var actions: [MachineAction] = []
        m.start(now: 0, cache: FakeCache(), actions: &actions)
        let a = Acts(actions)
        #expect(a.events.first == .paramClamped)
        #expect(a.timers.first?.at == 0.5)
    }

    @Test("getFlowForDefaultAudience sends a default request with requestTimeout")
    func defaultAudience() throws {
        var m = try GetFlowMachine(call: .defaultAudience(requestTimeout: 7), placement: "main_paywall", profileId: "u")
        var actions: [MachineAction] = []
        m.start(now: 3, cache: FakeCache(), actions: &actions)
        #expect(Acts(actions).sends.first?.spec.kind == .default)
        #expect(Acts(actions).timers.first?.at == 10)
    }
}

@Suite("PreloadMachine")
struct PreloadMachineTests {
    @Test("phase B starts only when phase A has ended, with the stage-B budget, for eligible errors only")
    func phases() throws {
        var m = try PreloadMachine(call: .targeted(loadTimeout: 3), placements: [" a", "", "b", "a", "c"], profileId: "u")
        #expect(m.placements == ["a", "b", "c"])
        var actions: [MachineAction] = []
        m.start(now: 0, cache: FakeCache(), actions: &actions)
        let a = Acts(actions)
        #expect(a.sends.map(\.spec.placement) == ["a", "b", "c"])
        #expect(a.sends.allSatisfy { $0.spec.timeout == 2.5 })
        #expect(a.timers.map(\.at) == [2.5])
        actions = []
        m.response(tag: a.sends[0].tag, RequestCompletion(.failure(.http(status: 503))), now: 0.1, cache: FakeCache(), actions: &actions)
        #expect(Acts(actions).sends.isEmpty)
        actions = []
        m.response(tag: a.sends[1].tag, RequestCompletion(.failure(.http(status: 404))), now: 0.2, cache: FakeCache(), actions: &actions)
        #expect(Acts(actions).sends.isEmpty)
        actions = []
        m.timer(tag: a.timers[0].tag, now: 2.5, cache: FakeCache(), actions: &actions)
        let b = Acts(actions)
        #expect(b.cancels == [a.sends[2].tag])
        #expect(b.sends.map(\.spec.placement) == ["a", "c"])
        #expect(b.sends.allSatisfy { $0.spec.kind == .default && $0.spec.timeout == 0.5 })
        actions = []
        var payload = allUsers
        payload.placementId = "a"
        m.response(tag: b.sends[0].tag, RequestCompletion(.success(.audience(payload))), now: 2.7, cache: FakeCache(), actions: &actions)
        #expect(Acts(actions).stores.first?.keepTargeted == true)
        actions = []
        m.timer(tag: b.timers[0].tag, now: 3.0, cache: FakeCache(), actions: &actions)
        let end = Acts(actions)
        let error = try #require(end.finish?.error)
        #expect(error.code == .networkFailed)
        #expect(error.preloadErrors?.mapValues(\.code) == ["b": .badRequest, "c": .networkFailed])
    }

    @Test("nothing left after normalisation: done at once, no request")
    func empty() throws {
        var m = try PreloadMachine(call: .targeted(loadTimeout: 5), placements: ["", " "], profileId: "u")
        var actions: [MachineAction] = []
        m.start(now: 0, cache: FakeCache(), actions: &actions)
        #expect(Acts(actions).sends.isEmpty)
        #expect(Acts(actions).finish == .done)
    }
}

@Suite("OrDefaultMachine")
struct OrDefaultMachineTests {
    @Test("timer first: attribution.timeout, then the default result once it arrives; exactly one finish")
    func timerFirst() throws {
        var m = try OrDefaultMachine(placement: "p", timeout: 2, attributed: false)
        var actions: [MachineAction] = []
        m.start(now: 0, cache: FakeCache(), actions: &actions)
        let a = Acts(actions)
        #expect(a.children.count == 1)
        #expect(a.watches == 1)
        #expect(a.timers.map(\.at) == [2])
        actions = []
        m.timer(tag: a.timers[0].tag, now: 2, cache: FakeCache(), actions: &actions)
        #expect(Acts(actions).events == [.attributionTimeout])
        #expect(Acts(actions).finish == nil)
        actions = []
        let result = CallOutcome.flow(flow("all-B", source: .defaultAudience, lost: true))
        m.child(tag: a.children[0].tag, result, now: 3, cache: FakeCache(), actions: &actions)
        #expect(Acts(actions).finish == result)
        actions = []
        m.attributionApplied(now: 4, cache: FakeCache(), actions: &actions)
        #expect(actions.isEmpty)
    }

    @Test("attribution first: the targeted flow wins and the default fetch is cancelled")
    func attributionFirst() throws {
        var m = try OrDefaultMachine(placement: "p", timeout: 3, attributed: false)
        var actions: [MachineAction] = []
        m.start(now: 0, cache: FakeCache(), actions: &actions)
        let defaultTag = Acts(actions).children[0].tag
        actions = []
        m.attributionApplied(now: 1, cache: FakeCache(), actions: &actions)
        let t = Acts(actions)
        #expect(t.children.first?.call == .targeted(placement: "p", loadTimeout: 5))
        actions = []
        let targeted = CallOutcome.flow(flow("asa-A", source: .network))
        m.child(tag: t.children[0].tag, targeted, now: 1.2, cache: FakeCache(), actions: &actions)
        let a = Acts(actions)
        #expect(a.cancelledChildren == [defaultTag])
        #expect(a.finish == targeted)
        actions = []
        m.child(tag: defaultTag, .flow(flow("all-B")), now: 2, cache: FakeCache(), actions: &actions)
        #expect(Acts(actions).finishes == 0)
    }
}

@Suite("LayoutMachine")
struct LayoutMachineTests {
    @Test("a cached layout answers at once; bundled media are not downloaded")
    func cached() throws {
        var f = flow("all-B", source: .network)
        f.layout = LayoutRef(id: "L1", version: 3)
        let layout = Layout(id: "L1", version: 3, images: [LayoutImage(url: "u1", customMediaId: "hero"), LayoutImage(url: "u2")])
        var m = try LayoutMachine(flow: f, loadTimeout: 5, isBundled: { $0 == "hero" }, fallback: nil, profileId: "u")
        var actions: [MachineAction] = []
        m.start(now: 0, cache: FakeCache(layouts: [layout.ref: layout]), actions: &actions)
        let a = Acts(actions)
        #expect(a.sends.isEmpty)
        #expect(a.events.contains(.assetBundled))
        #expect(actions.contains { if case .prefetchAssets(let urls) = $0 { urls == ["u2"] } else { false } })
        if case .configuration(let c)? = a.finish { #expect(c.source == .cache) } else { Issue.record("no configuration") }
    }

    @Test("image sizes whose sum passes Int.max saturate the prefetch's byte total instead of trapping")
    func prefetchBytesSaturate() {
        var m = AssetPrefetchMachine(placement: "p", urls: ["a", "b", "c"], requestTimeout: 5, profileId: "u")
        var actions: [MachineAction] = []
        m.start(now: 0, cache: FakeCache(), actions: &actions)
        for tag in 0..<3 {
            m.response(tag: tag, RequestCompletion(.success(.asset(bytes: Int.max / 2))), now: 1, cache: FakeCache(), actions: &actions)
        }
        let end = actions.compactMap { action -> EventAttributes? in
            if case .emit(.assetsPrefetchEnd, _, _, let attrs) = action { attrs } else { nil }
        }
        #expect(end.count == 1)
        #expect(end.first?["bytes"] == .number(Double(Int.max)))
    }

    @Test("a layout not cached is fetched with deadline start + A")
    func network() throws {
        var f = flow("all-B", source: .network)
        f.layout = LayoutRef(id: "L1", version: 3)
        var m = try LayoutMachine(flow: f, loadTimeout: 2, fallback: nil, profileId: "u")
        var actions: [MachineAction] = []
        m.start(now: 8, cache: FakeCache(), actions: &actions)
        #expect(Acts(actions).sends.first?.spec.kind == .layout)
        #expect(Acts(actions).timers.first?.at == 9.5)
    }
}
