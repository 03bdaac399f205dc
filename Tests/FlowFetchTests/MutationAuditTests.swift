import Testing
@testable import FlowFetch
import FlowJSON

/// Rules of fetch-semantics.md that a mutation audit found no test pinning: each test here fails
/// when the engine breaks its rule in one small way (named in the test's comment).
@Suite("Fetch rules pinned by the mutation audit")
struct MutationAuditTests {
    /// Starts getFlow (T = 5) at 0 and answers its targeted request with `failure` at 0.2.
    static func stageAFails(_ failure: RequestFailure) throws -> (GetFlowMachine, Acts) {
        var m = try GetFlowMachine(call: .getFlow(loadTimeout: 5), placement: "main_paywall", profileId: "user-42")
        var actions: [MachineAction] = []
        m.start(now: 0, cache: FakeCache(), actions: &actions)
        let tag = try #require(Acts(actions).sends.first).tag
        actions = []
        m.response(tag: tag, RequestCompletion(.failure(failure)), now: 0.2, cache: FakeCache(), actions: &actions)
        return (m, Acts(actions))
    }

    // Mutations: 499 (or 500) left out of the server class, so it fails as a client error.
    @Test("HTTP 429, 499 and every 5xx are server errors: stage A falls back to a default-audience request of T - elapsed, and its failure throws 2004")
    func serverStatusesFallBack() throws {
        for status in [429, 499, 500, 503, 599] {
            var (m, a) = try Self.stageAFails(.http(status: status))
            #expect(a.sends.map(\.spec.kind) == [.default], "http:\(status)")
            #expect(a.sends.first?.spec.timeout == 4.8, "http:\(status)")  // min(max(5 - 0.2, 0.5), 60)
            #expect(a.timers.map(\.at) == [5], "http:\(status)")
            #expect(a.events.contains(.fallback), "http:\(status)")
            #expect(a.finish == nil, "http:\(status)")
            var actions: [MachineAction] = []
            let tag = try #require(a.sends.first).tag
            m.response(tag: tag, RequestCompletion(.failure(.http(status: status))), now: 0.3, cache: FakeCache(), actions: &actions)
            #expect(Acts(actions).finish?.error?.code == .serverError, "http:\(status)")
        }
        for status in [400, 404, 498] {
            let (_, a) = try Self.stageAFails(.http(status: status))
            #expect(a.sends.isEmpty, "http:\(status)")
            #expect(a.finish?.error?.code == .badRequest, "http:\(status)")
        }
    }

    // Mutation: `cumulative >= b` instead of `cumulative > b` in the walk.
    @Test("a bucket equal to a cumulative weight draws the next variation; a variation of weight 0 is never drawn")
    func bucketOnABoundary() {
        // Computed offline with Python 3: int.from_bytes(hashlib.md5(key.encode()).digest()[8:16], 'big') % 100
        // "av-all-user-8" -> 8, "av-all-user-7" -> 3, "av-all-user-13" -> 0.
        #expect(VariationDraw.bucket(audienceVersionId: "av-all", profileId: "user-8") == 8)
        #expect(VariationDraw.bucket(audienceVersionId: "av-all", profileId: "user-13") == 0)
        // Sorted (8 small, 92 big): cumulative 8, 100. Bucket 8: 8 > 8 is false -> big. Bucket 3 -> small.
        let split = AudiencePayload(placementId: "p", audienceName: "x", audienceVersionId: "av-all",
                                    variations: [Variation(id: "big", weight: 92), Variation(id: "small", weight: 8)])
        #expect(VariationDraw.pick(split, profileId: "user-8")?.id == "big")
        #expect(VariationDraw.pick(split, profileId: "user-7")?.id == "small")
        // Sorted (0 off, 100 on): cumulative 0 is never > a bucket, even bucket 0.
        let paused = AudiencePayload(placementId: "p", audienceName: "x", audienceVersionId: "av-all",
                                     variations: [Variation(id: "on", weight: 100), Variation(id: "off", weight: 0)])
        #expect(VariationDraw.pick(paused, profileId: "user-13")?.id == "on")
        // The engine draws through its bucket memo: the same answers.
        var memo = VariationDraw.BucketMemo()
        #expect(VariationDraw.pick(split, profileId: "user-8", memo: &memo)?.id == "big")
        #expect(VariationDraw.pick(paused, profileId: "user-13", memo: &memo)?.id == "on")
    }

    // Mutation: the fallback file's layout looked up before the layout cache.
    @Test("the layout cache is read before the fallback file's layout; the fallback file's answers only on a cache miss")
    func layoutCacheBeforeFallbackFile() throws {
        var f = flow("all-B", source: .network)
        f.layout = LayoutRef(id: "L1", version: 3)
        let cached = Layout(id: "L1", version: 3, images: [LayoutImage(url: "https://cdn/cached.png")])
        let bundled = Layout(id: "L1", version: 3, images: [LayoutImage(url: "https://cdn/bundled.png")])
        let fallback = FallbackFile(placements: [:], layouts: ["L1": bundled])

        var hit = try LayoutMachine(flow: f, loadTimeout: 5, fallback: fallback, profileId: "u")
        var actions: [MachineAction] = []
        hit.start(now: 0, cache: FakeCache(layouts: [cached.ref: cached]), actions: &actions)
        var a = Acts(actions)
        #expect(a.sends.isEmpty)
        #expect(a.events.contains(.layoutCacheHit))
        #expect(!a.events.contains(.layoutCacheMiss))
        #expect(a.finish == .configuration(FlowConfiguration(flow: f, layout: cached, source: .cache)))
        #expect(actions.contains { if case .prefetchAssets(let urls) = $0 { urls == ["https://cdn/cached.png"] } else { false } })

        var miss = try LayoutMachine(flow: f, loadTimeout: 5, fallback: fallback, profileId: "u")
        actions = []
        miss.start(now: 0, cache: FakeCache(), actions: &actions)
        a = Acts(actions)
        #expect(a.sends.isEmpty)
        #expect(a.events.contains(.layoutCacheMiss))
        #expect(a.finish == .configuration(FlowConfiguration(flow: f, layout: bundled, source: .fallbackFile)))
    }

    // Mutation: stage C serves the fallback file's flow before the cache entry. (Only a simulation
    // tally noticed it before.)
    @Test("stage C serves the cache entry before the fallback file's flow: after a 404, and after a failed getFlowForDefaultAudience")
    func stageCCacheBeforeFallbackFile() throws {
        let fallback = FallbackFile(placements: ["main_paywall": AudiencePayload(placementId: "main_paywall", audienceName: "All Users",
                                                                                audienceVersionId: "fallback", variations: [Variation(id: "fb", weight: 100)])])
        let cache = FakeCache(flows: ["main_paywall": .hit(CachedFlow(flow: flow("all-A"), storedAt: 1, fromDefaultAudience: true), layer: .disk)])
        var get = try GetFlowMachine(call: .getFlow(loadTimeout: 5), placement: "main_paywall", profileId: "user-42", fallback: fallback)
        var actions: [MachineAction] = []
        get.start(now: 10, cache: FakeCache(), actions: &actions)
        let tag = try #require(Acts(actions).sends.first).tag
        actions = []
        get.response(tag: tag, RequestCompletion(.failure(.http(status: 404))), now: 10.2, cache: cache, actions: &actions)
        var a = Acts(actions)
        #expect(a.sends.isEmpty)
        #expect(a.finish == .flow(flow("all-A", source: .cache, lost: true)))

        var byDefault = try GetFlowMachine(call: .defaultAudience(requestTimeout: 30), placement: "main_paywall", profileId: "user-42",
                                           fallback: fallback)
        actions = []
        byDefault.start(now: 10, cache: FakeCache(), actions: &actions)
        let defaultTag = try #require(Acts(actions).sends.first).tag
        actions = []
        byDefault.response(tag: defaultTag, RequestCompletion(.failure(.http(status: 503))), now: 10.3, cache: cache, actions: &actions)
        a = Acts(actions)
        #expect(a.sends.isEmpty)
        #expect(a.finish == .flow(flow("all-A", source: .cache, lost: true)))
    }

    // Mutation: any attribution source, not only appleAds, releases getFlowOrDefault's attribution path.
    @Test("getFlowOrDefault's attribution path waits for appleAds: another source applied starts no targeted request")
    func attributionPathWaitsForAppleAds() throws {
        let host = SpecHost()
        let engine = FlowEngine(profile: Profile(id: "user-42"), flowCache: FlowCache(disk: InMemoryDiskStore()),
                                layouts: InMemoryLayoutStore(), host: host, events: nil, traceIDs: { TraceID(high: 1, low: 1) })
        let call = try engine.getFlowOrDefault(placement: "main_paywall", timeout: 3, now: 0)
        #expect(host.specs.map(\.kind) == [.default])
        engine.applyAttribution("googleAds", now: 1)
        #expect(host.specs.map(\.kind) == [.default])
        #expect(engine.profile.appliedAttributionSources == ["googleAds"])
        engine.applyAttribution("appleAds", now: 1.5)
        #expect(host.specs.map(\.kind) == [.default, .targeted])
        #expect(host.specs.last?.timeout == 4.5)  // getFlow with T = 5: A = 4.5
        #expect(engine.isRunning(call))
        #expect(host.finished.isEmpty)
    }

    // Mutation: the default-audience fetch of getFlowOrDefault (or of preloadFlowsForDefaultAudience)
    // with a fixed timeout instead of the configuration's requestTimeout.
    @Test("getFlowOrDefault's default-audience fetch and preloadFlowsForDefaultAudience's requests use the configured requestTimeout")
    func defaultFetchesUseRequestTimeout() throws {
        for requestTimeout in [4.0, 12.5] {
            let host = SpecHost()
            let engine = FlowEngine(configuration: .init(requestTimeout: requestTimeout), profile: Profile(id: "user-42"),
                                    flowCache: FlowCache(disk: InMemoryDiskStore()), layouts: InMemoryLayoutStore(),
                                    host: host, events: nil, traceIDs: { TraceID(high: 1, low: 1) })
            _ = try engine.getFlowOrDefault(placement: "main_paywall", timeout: 2, now: 0)
            #expect(host.specs.map(\.kind) == [.default])
            #expect(host.specs.first?.timeout == requestTimeout)
            _ = try engine.preloadFlowsForDefaultAudience(placements: ["a", "b"], now: 0)
            #expect(host.specs.dropFirst().map(\.timeout) == [requestTimeout, requestTimeout])
        }
    }
}

/// A host that records the requests the engine sends and the calls it finishes.
private final class SpecHost: EngineHost {
    var specs: [RequestSpec] = []
    var finished: [CallID] = []
    func send(_ request: RequestID, _ spec: RequestSpec, origin: CallID) { specs.append(spec) }
    func cancel(_ request: RequestID) {}
    func schedule(_ timer: TimerID, at: EngineTime) {}
    func unschedule(_ timer: TimerID) {}
    func finished(_ call: CallID, _ outcome: CallOutcome, now: EngineTime) { finished.append(call) }
}
