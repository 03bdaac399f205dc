import FlowFetch
import Synchronization
import Testing

/// Writes down everything an engine asks of its host and every event it reports, in order.
private final class Transcript: EngineHost, EngineEventSink {
    private struct Record {
        var lines: [String] = []
        var sent: [(RequestID, RequestSpec)] = []
        var timers: [TimerID] = []
    }
    private let record = Mutex(Record())

    var lines: [String] { record.withLock { $0.lines } }
    var sent: [(RequestID, RequestSpec)] { record.withLock { $0.sent } }
    var timers: [TimerID] { record.withLock { $0.timers } }
    func clear() { record.withLock { $0 = Record() } }

    private func add(_ line: String) { record.withLock { $0.lines.append(line) } }

    func send(_ request: RequestID, _ spec: RequestSpec, origin: CallID) {
        record.withLock { $0.sent.append((request, spec)) }
        add("send \(request.raw) \(spec.kind) \(spec.placement ?? "-") \(spec.profileId) \(spec.timeout) origin \(origin.raw)")
    }
    func cancel(_ request: RequestID) { add("cancel \(request.raw)") }
    func schedule(_ timer: TimerID, at: EngineTime) {
        record.withLock { $0.timers.append(timer) }
        add("schedule \(timer.raw) at \(at)")
    }
    func unschedule(_ timer: TimerID) { add("unschedule \(timer.raw)") }
    func finished(_ call: CallID, _ outcome: CallOutcome, now: EngineTime) {
        let what = outcome.flow.map { "\($0.variationId) \($0.source) \($0.audienceName)" } ?? "\(outcome.error?.code.rawValue ?? 0)"
        add("finished \(call.raw) \(what) at \(now)")
    }
    func receive(_ event: EngineEvent) {
        add("event \(event.name.rawValue) \(event.t) \(event.placement ?? "-") \(event.trace) \(event.span) \(event.attrs)")
    }
}

/// A disk layer that keeps nothing (the strategy lab's): only the memory layer serves reads.
private final class NoDisk: FlowDiskStore {
    func load(_ key: CacheKey) -> [UInt8]? { nil }
    func save(_ key: CacheKey, _ bytes: [UInt8]) -> [Eviction] { [] }
    func remove(_ key: CacheKey) {}
    func removeAll(exceptProfile profileId: String) {}
}

@Suite("Engine reset")
struct EngineResetTests {
    private static let targeted = AudiencePayload(placementId: "main", audienceName: "Apple Ads", audienceVersionId: "main-asa-1",
                                                  variations: [Variation(id: "asa-a", weight: 50), Variation(id: "asa-b", weight: 50)])
    private static let fallback = FallbackFile(placements: [
        "main": AudiencePayload(placementId: "main", audienceName: "All Users", audienceVersionId: "fallback",
                                variations: [Variation(id: "main-fallback", weight: 100)]),
        "side": AudiencePayload(placementId: "side", audienceName: "All Users", audienceVersionId: "fallback",
                                variations: [Variation(id: "side-fallback", weight: 100)]),
    ])

    /// An engine whose trace ids count from `counter` (shared with the test, so a reset can restart them).
    private func engine(_ t: Transcript, _ counter: Counter, configuration: FlowEngine.Configuration = .init(),
                        disk: FlowDiskStore = InMemoryDiskStore()) -> FlowEngine {
        FlowEngine(configuration: configuration, profile: Profile(id: "user-1"), flowCache: FlowCache(disk: disk),
                   layouts: InMemoryLayoutStore(), host: t, events: t, traceIDs: { counter.next() })
    }

    private final class Counter {
        var n: UInt64 = 0
        func next() -> TraceID { n += 1; return TraceID(high: 7, low: n) }
    }

    /// A short session: a miss answered from the network, a cache hit, a getFlowOrDefault whose race
    /// timer fires, and a default-audience fetch that times out into the fallback file.
    private func session(_ engine: FlowEngine, _ t: Transcript) throws {
        _ = try engine.getFlow(placement: "main", policy: .returnCacheDataElseLoad, loadTimeout: 5, now: 0)
        let (request, _) = try #require(t.sent.last)
        engine.response(request, RequestCompletion(.success(.audience(Self.targeted)), bytes: 900), now: 0.25)
        _ = try engine.getFlow(placement: "main", policy: .returnCacheDataElseLoad, loadTimeout: 5, now: 1)
        _ = try engine.getFlowOrDefault(placement: "main", timeout: 2, now: 2)
        for timer in t.timers { engine.timerFired(timer, now: 60) }
        _ = try engine.getFlowForDefaultAudience(placement: "side", now: 61)
        for timer in t.timers { engine.timerFired(timer, now: 120) }
    }

    @Test("a reset engine plays a session exactly as a new engine does: ids, traces, requests, events, outcomes")
    func resetIsNew() throws {
        let config = FlowEngine.Configuration(requestTimeout: 4, fallback: Self.fallback)
        let fresh = Transcript(), freshCounter = Counter()
        let new = engine(fresh, freshCounter, configuration: config, disk: NoDisk())
        try session(new, fresh)

        let used = Transcript(), usedCounter = Counter()
        let reused = engine(used, usedCounter, configuration: .init(requestTimeout: 9), disk: NoDisk())
        // Leave it busy: a cached flow, a call still running, attribution applied, another profile.
        _ = try reused.getFlow(placement: "main", policy: .returnCacheDataElseLoad, loadTimeout: 5, now: 0)
        reused.response(try #require(used.sent.last).0, RequestCompletion(.success(.audience(Self.targeted))), now: 0.1)
        _ = try reused.getFlow(placement: "side", now: 0.2)
        reused.applyAttribution("appleAds", now: 0.3)
        _ = try reused.getFlowOrDefault(placement: "main", timeout: 3, now: 0.4)
        #expect(reused.flowCache.read(CacheKey(profileId: "user-1", placementId: "main")) != .miss)

        reused.reset(profile: Profile(id: "user-1"), configuration: config)
        usedCounter.n = 0
        used.clear()
        #expect(reused.lastTrace == nil)
        #expect(reused.profile == Profile(id: "user-1"))
        #expect(reused.configuration.requestTimeout == 4)
        try session(reused, used)
        #expect(used.lines == fresh.lines)
        #expect(fresh.lines.contains { $0.hasPrefix("event cache.hit") })
        #expect(fresh.lines.contains { $0.contains("side-fallback fallbackFile") })
    }

    @Test("reset without a configuration keeps the engine's; the profile is the one given")
    func resetKeepsConfiguration() throws {
        let t = Transcript()
        let engine = engine(t, Counter(), configuration: .init(requestTimeout: 3))
        engine.reset(profile: Profile(id: "user-2", appliedAttributionSources: ["appleAds"]))
        #expect(engine.configuration.requestTimeout == 3)
        _ = try engine.getFlowForDefaultAudience(placement: "main", now: 0)
        #expect(t.sent.last?.1.timeout == 3)
        #expect(t.sent.last?.1.profileId == "user-2")
        #expect(engine.profile.appliedAttributionSources == ["appleAds"])
    }

    @Test("reset empties the flow cache's memory layer and keeps its disk layer, as a restart does")
    func resetKeepsDisk() throws {
        let disk = InMemoryDiskStore()
        let t = Transcript()
        let engine = engine(t, Counter(), disk: disk)
        _ = try engine.getFlow(placement: "main", loadTimeout: 5, now: 0)
        engine.response(try #require(t.sent.last).0, RequestCompletion(.success(.audience(Self.targeted))), now: 0.1)
        let key = CacheKey(profileId: "user-1", placementId: "main")
        guard case .hit(_, .memory) = engine.flowCache.read(key) else { Issue.record("not in memory"); return }
        engine.reset(profile: Profile(id: "user-1"))
        guard case .hit(_, .disk) = engine.flowCache.read(key) else { Issue.record("not on disk after the reset"); return }

        let nothingKept = FlowCache(disk: InMemoryDiskStore(maxBytes: 0))
        _ = nothingKept.write(key, CachedFlow(flow: Flow(payload: Self.targeted, variation: Self.targeted.variations[0], source: .network,
                                                         targetingLost: false), storedAt: 0, fromDefaultAudience: false),
                              keepTargeted: false)
        nothingKept.removeMemory()
        #expect(nothingKept.read(key) == .miss)
    }

    @Test("the engine's remembered buckets draw the variation VariationDraw draws, for more pairs than it remembers")
    func rememberedDraws() throws {
        let engine = engine(Transcript(), Counter())
        let payloads = (0..<5).map { v in
            AudiencePayload(placementId: "p", audienceName: "a", audienceVersionId: "av-\(v)",
                            variations: (0..<10).map { Variation(id: "v\($0)", weight: 10) })
        }
        for round in 0..<3 {
            for profile in 0..<7 {
                for payload in payloads {
                    let id = "user-\(profile)"
                    let drawn = engine.drawVariation(payload, profileId: id)
                    #expect(drawn == VariationDraw.pick(payload, profileId: id), "round \(round), \(id), \(payload.audienceVersionId)")
                }
            }
        }
        // The same pair again and again, alternating with another: still the same draw.
        let a = payloads[0], b = payloads[1]
        for _ in 0..<20 {
            #expect(engine.drawVariation(a, profileId: "user-3") == VariationDraw.pick(a, profileId: "user-3"))
            #expect(engine.drawVariation(b, profileId: "user-4") == VariationDraw.pick(b, profileId: "user-4"))
        }
    }

    @Test("a preload of 150 placements (a call owning many ids, kept in an index) cancels exactly the requests still open, each once, and clears every timer")
    func largePreloadBookkeeping() throws {
        let t = Transcript()
        let engine = engine(t, Counter())
        let ids = (0..<150).map { "p\($0)" }
        _ = try engine.preloadFlows(placements: ids, loadTimeout: 5, now: 0)
        let phaseA = t.sent
        #expect(phaseA.count == 150)
        var answered = Set<Int>()
        for (i, (request, spec)) in phaseA.enumerated() {
            let placement = try #require(spec.placement)
            switch i % 3 {
            case 0:
                let payload = AudiencePayload(placementId: placement, audienceName: "All Users", audienceVersionId: "v",
                                              variations: [Variation(id: "\(placement)-a", weight: 100)])
                engine.response(request, RequestCompletion(.success(.audience(payload))), now: 0.1)
                answered.insert(request.raw)
            case 1:
                engine.response(request, RequestCompletion(.failure(.http(status: 500))), now: 0.2)
                answered.insert(request.raw)
            default:
                break  // never answered: the deadline ends it
            }
        }
        // Phase A's deadline, then phase B's (default-audience requests for the 100 failed placements).
        for round in 1...2 {
            let timers = t.timers
            for timer in timers { engine.timerFired(timer, now: EngineTime(seconds: Double(10 * round))) }
        }
        let lines = t.lines
        let cancelled = lines.filter { $0.hasPrefix("cancel ") }.compactMap { Int($0.dropFirst("cancel ".count)) }
        let open = Set(t.sent.map(\.0.raw)).subtracting(answered)
        #expect(cancelled.count == Set(cancelled).count, "a request cancelled twice")
        #expect(Set(cancelled) == open)
        #expect(t.sent.count == 250)
        let finished = try #require(lines.last { $0.hasPrefix("finished ") })
        #expect(finished.contains(" \(FlowError.Code.networkFailed.rawValue) "), "\(finished)")
        let scheduled = Set(t.timers.map(\.raw))
        let unscheduled = Set(lines.filter { $0.hasPrefix("unschedule ") }.compactMap { Int($0.dropFirst("unschedule ".count)) })
        let fired = scheduled.subtracting(unscheduled)
        #expect(fired.count == 2, "only the two phase deadlines fire; every other timer is cleared")
    }

    @Test("the engine's remembered flows are the flows built afresh: any source, other profiles, equal payloads in new boxes, 1,000 draws")
    func rememberedFlowsAreFresh() {
        let engine = engine(Transcript(), Counter())
        let other = AudiencePayload(placementId: "main", audienceName: "All Users", audienceVersionId: "main-all-1",
                                    variations: [Variation(id: "all-a", weight: 30), Variation(id: "all-b", weight: 70)])
        let invalid = AudiencePayload(placementId: "main", audienceName: "All Users", audienceVersionId: "bad",
                                      variations: [Variation(id: "x", weight: 60)])
        let sources: [(FlowSource, Bool)] = [(.network, false), (.defaultAudience, true), (.cache, false)]
        var rng = SystemRandomNumberGenerator()
        var seen = Set<String>()
        for i in 0..<1_000 {
            // Few profiles and payloads, so the memo hits, misses and replaces entries.
            let profile = "user-\(Int.random(in: 0..<12, using: &rng))"
            let base = i % 3 == 0 ? other : Self.targeted
            // An equal payload in a new box must draw as the original does.
            let payload = i % 7 == 0 ? AudiencePayload(placementId: base.placementId, audienceName: base.audienceName,
                                                       audienceVersionId: base.audienceVersionId, variations: base.variations) : base
            let (source, lost) = sources[i % sources.count]
            let drawn = engine.drawFlow(payload, profileId: profile, source: source, targetingLost: lost)
            let variation = VariationDraw.pick(payload, profileId: profile)
            let fresh = variation.map { Flow(payload: payload, variation: $0, source: source, targetingLost: lost) }
            #expect(drawn == fresh, "draw \(i): \(profile)")
            #expect(drawn?.source == source && drawn?.targetingLost == lost)
            if let drawn { seen.insert(drawn.variationId) }
            #expect(engine.drawFlow(invalid, profileId: profile, source: source, targetingLost: lost) == nil)
        }
        #expect(seen == ["asa-a", "asa-b", "all-a", "all-b"], "\(seen)")
    }
}
