import Foundation
import Synchronization
import TestSupport
import Testing
@testable import FlowFetch
import FlowJSON

/// A clock the test sets by hand; its deadlines never fire (the backends answer at once).
final class ManualClock: EngineClock {
    private let time: Mutex<EngineTime>
    init(_ now: EngineTime) { time = Mutex(now) }
    func set(_ now: EngineTime) { time.withLock { $0 = now } }
    func now() -> EngineTime { time.withLock { $0 } }
    func sleep(until deadline: EngineTime) async throws { try await Task.sleep(for: .seconds(86_400)) }
    func schedule(at deadline: EngineTime, _ action: @escaping @Sendable () -> Void) -> @Sendable () -> Void { {} }
}

/// A backend that answers every request with one variation and counts the requests.
final class CountingBackend: FlowBackend {
    let count = Atomic<Int>(0)
    func send(_ request: RequestSpec) async -> RequestCompletion {
        count.add(1, ordering: .relaxed)
        return await FixedBackend().send(request)
    }
}

@Suite("Engine time")
struct EngineTimeTests {
    @Test("seconds convert once to whole microseconds, rounding to the nearest, so decimal differences are exact")
    func conversion() {
        #expect(EngineTime(seconds: 0.1).microseconds == 100_000)
        #expect(EngineTime(seconds: 0.3) - EngineTime(seconds: 0.1) == EngineTime(seconds: 0.2))
        #expect(EngineTime(seconds: 4.7) - EngineTime(seconds: 0.5) == EngineTime(microseconds: 4_200_000))
        #expect(EngineTime(seconds: 0.0000004).microseconds == 0)
        #expect(EngineTime(seconds: 0.0000005).microseconds == 1)
        #expect(EngineTime(seconds: -0.0000005).microseconds == -1)
        #expect((EngineTime(seconds: 0.3) - EngineTime(seconds: 0.1)).seconds == 0.2)
        #expect(EngineTime(microseconds: 4_700_000).seconds == 4.7)
        let literal: EngineTime = 0.1
        #expect(literal == EngineTime(microseconds: 100_000))
    }

    @Test("any input saturates instead of trapping: huge, infinite and NaN seconds, sums of extremes")
    func saturation() {
        #expect(EngineTime(seconds: 1e300) == .max)
        #expect(EngineTime(seconds: -.infinity) == .min)
        #expect(EngineTime(seconds: .nan) == .zero)
        #expect(EngineTime.max + .max == .max)
        #expect(EngineTime.min - .max == .min)
        #expect(EngineTime(microseconds: .max) == .max)
    }

    @Test("the budgets are computed on integers: stage A max(T - 0.5, 0.5), stage B min(max(T - elapsed, 0.5), 60)")
    func budgets() {
        #expect(Budget.stageA(EngineTime(seconds: 4.7)) == EngineTime(microseconds: 4_200_000))
        #expect(Budget.stageB(EngineTime(seconds: 4.7), elapsed: EngineTime(seconds: 4.2)) == EngineTime(microseconds: 500_000))
        #expect(Budget.stageB(EngineTime(seconds: 1.3), elapsed: EngineTime(seconds: 0.1)) == EngineTime(microseconds: 1_200_000))
        #expect(Budget.stageB(EngineTime(seconds: 60.7), elapsed: EngineTime(seconds: 0.7)) == EngineTime(microseconds: 60_000_000))
        #expect(Budget.stageB(EngineTime(seconds: 60.7), elapsed: EngineTime(seconds: 0.8)) == EngineTime(microseconds: 59_900_000))
        #expect(Budget.loadTimeout(0.3) == EngineTime(microseconds: 1_000_000))
        #expect(Budget.loadTimeout(-0.1) == nil && Budget.loadTimeout(.nan) == nil && Budget.loadTimeout(.infinity) == nil)
    }
}

@Suite("maxAge at decimal times")
struct DecimalMaxAgeTests {
    static func entry(at storedAt: EngineTime) -> FakeCache {
        FakeCache(flows: ["main_paywall": .hit(CachedFlow(flow: flow("all-A"), storedAt: storedAt, fromDefaultAudience: false), layer: .memory)])
    }

    @Test("an entry stored at 0.1 and read at 0.3 with maxAge 0.2 is expired, and its event says age 0.2, maxAge 0.2")
    func machineBoundary() throws {
        var m = try GetFlowMachine(call: .getFlow(loadTimeout: 5), placement: "main_paywall",
                                   policy: .returnCacheDataIfNotExpiredElseLoad(maxAge: 0.2), profileId: "user-42")
        var actions: [MachineAction] = []
        m.start(now: EngineTime(seconds: 0.3), cache: Self.entry(at: EngineTime(seconds: 0.1)), actions: &actions)
        let a = Acts(actions)
        #expect(a.finish == nil && a.sends.count == 1)
        let attrs = actions.compactMap { if case .emit(.cacheExpired, _, _, let attrs) = $0 { attrs } else { nil } }.first
        #expect(attrs?["age"] == JSONValue.number(0.2))
        #expect(attrs?["maxAge"] == JSONValue.number(0.2))
    }

    @Test("one microsecond younger than maxAge is served from the cache with its exact age")
    func justFresh() throws {
        var m = try GetFlowMachine(call: .getFlow(loadTimeout: 5), placement: "main_paywall",
                                   policy: .returnCacheDataIfNotExpiredElseLoad(maxAge: 0.2), profileId: "user-42")
        var actions: [MachineAction] = []
        m.start(now: EngineTime(seconds: 0.299999), cache: Self.entry(at: EngineTime(seconds: 0.1)), actions: &actions)
        #expect(Acts(actions).finish?.flow?.source == .cache)
        let attrs = actions.compactMap { if case .emit(.cacheHit, _, _, let attrs) = $0 { attrs } else { nil } }.first
        #expect(attrs?["age"] == JSONValue.number(0.199999))
    }

    @Test("through FlowClient: fetched at 0.1, read at 0.3 with maxAge 0.2 goes to the network; at 0.299 it is the cache")
    func clientBoundary() async throws {
        let clock = ManualClock(EngineTime(seconds: 0.1))
        let backend = CountingBackend()
        let client = FlowClient(profile: Profile(id: "user-1"), backend: backend, clock: clock)
        #expect(try await client.getFlow(placementId: "main").source == .network)
        clock.set(EngineTime(seconds: 0.299))
        let policy = FetchPolicy.returnCacheDataIfNotExpiredElseLoad(maxAge: 0.2)
        #expect(try await client.getFlow(placementId: "main", fetchPolicy: policy).source == .cache)
        clock.set(EngineTime(seconds: 0.3))
        #expect(try await client.getFlow(placementId: "main", fetchPolicy: policy).source == .network)
        #expect(backend.count.load(ordering: .relaxed) == 2)
    }
}

@Suite("Disk entries written before exact time")
struct OldCacheFormatTests {
    /// An entry as the engine wrote it before engine time was exact: `storedAt` in seconds only.
    static let oldEntry = """
        flowscope-cache-1 226c5bb13edd6caa12a19d5ecea54c3011c092cb70a309315d7583eac7438978
        {"audienceName":"All Users","audienceVersionId":"av-all","fromDefaultAudience":false,"layout":null,"placementId":"main","productIds":[],"profileId":"user-1","remoteConfig":{},"revision":0,"storedAt":0.1,"variationId":"old-A"}
        """
    /// The same with a `storedAt` that is not a number (a damaged entry).
    static let damagedEntry = """
        flowscope-cache-1 faacfd1a62929a40f572ae0e1e79ac38d0e265702d007d4d618f436f15e7aada
        {"audienceName":"All Users","audienceVersionId":"av-all","fromDefaultAudience":false,"layout":null,"placementId":"main","productIds":[],"profileId":"user-1","remoteConfig":{},"revision":0,"storedAt":"0.1","variationId":"old-A"}
        """
    static let key = CacheKey(profileId: "user-1", placementId: "main")

    @Test("an old entry loads, its storedAt in seconds rounded once to the microsecond")
    func oldEntryLoads() throws {
        let decoded = try CacheEntryCodec.decode(Array(Self.oldEntry.utf8), key: Self.key).get()
        #expect(decoded.storedAt == EngineTime(microseconds: 100_000))
        #expect(decoded.flow.variationId == "old-A")
    }

    @Test("a new entry keeps storedAt exactly, and still carries it in seconds for older readers")
    func newEntryRoundTrips() throws {
        let entry = CachedFlow(flow: Flow(placementId: "main", variationId: "v", audienceName: "All Users", audienceVersionId: "av",
                                          source: .network, targetingLost: false),
                               storedAt: EngineTime(microseconds: 1_764_865_000_123_457), fromDefaultAudience: false)
        let bytes = CacheEntryCodec.encode(entry, key: Self.key)
        #expect(try CacheEntryCodec.decode(bytes, key: Self.key).get().storedAt == entry.storedAt)
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(text.contains("\"storedAtMicros\":1764865000123457"))
        #expect(text.contains("\"storedAt\":1764865000.123457"))
    }

    @Test("an old entry stored at 0.1 and read at 0.3 with maxAge 0.2 is expired and refetched; a damaged one is corrupt and refetched")
    func oldEntryThroughTheClient() async throws {
        for (text, expected) in [(Self.oldEntry, EventName.cacheExpired), (Self.damagedEntry, .cacheCorrupt)] {
            let disk = InMemoryDiskStore()
            _ = disk.save(Self.key, Array(text.utf8))
            let events = Events()
            let client = FlowClient(profile: Profile(id: "user-1"), backend: FixedBackend(), disk: disk, events: events,
                                    clock: ManualClock(EngineTime(seconds: 0.3)))
            let got = try await client.getFlow(placementId: "main", fetchPolicy: .returnCacheDataIfNotExpiredElseLoad(maxAge: 0.2))
            #expect(got.source == .network && got.variationId == "net-A")
            #expect(events.names.contains(expected))
            #expect(!events.names.contains(.cacheHit))
        }
    }
}

@Suite("preloadFlows validation order")
struct PreloadValidationTests {
    @Test("a bad loadTimeout is 3001 at once even when no placement id is left after normalising", arguments: [-1, -0.001, .nan, .infinity, -.infinity])
    func badLoadTimeoutFirst(_ t: Double) async throws {
        let backend = CountingBackend()
        let client = FlowClient(profile: Profile(id: "user-1"), backend: backend, clock: ManualClock(1))
        do {
            try await client.preloadFlows(placementIds: [" ", ""], loadTimeout: t)
            Issue.record("preloadFlows with loadTimeout \(t) and no id left did not throw")
        } catch {
            #expect(error.code == .wrongParam)
        }
        #expect(throws: FlowError.self) { _ = try PreloadMachine(call: .targeted(loadTimeout: t), placements: [], profileId: "user-1") }
        #expect(backend.count.load(ordering: .relaxed) == 0)
    }

    @Test("a valid loadTimeout with no placement id left returns at once with no request")
    func noIdsLeft() async throws {
        let backend = CountingBackend()
        let client = FlowClient(profile: Profile(id: "user-1"), backend: backend, clock: ManualClock(1))
        try await client.preloadFlows(placementIds: ["", " \t"], loadTimeout: 0.3)
        #expect(backend.count.load(ordering: .relaxed) == 0)
    }
}

/// maxAge through FlowClient on the system clock: what exact time changes is visible in the events
/// (ages in whole microseconds, maxAge reported as given). Wall-clock margins are generous.
@Suite("maxAge on the real clock (RealTime)", .realTime)
struct MaxAgeRealTimeTests {
    @Test("a fresh entry is served with a whole-microsecond age; after maxAge 0.3 has passed it is expired, reported as 0.3")
    func realClock() async throws {
        let events = Events()
        let client = FlowClient(profile: Profile(id: "user-1"), backend: FixedBackend(), events: events)
        #expect(try await client.getFlow(placementId: "main").source == .network)
        let fresh = try await client.getFlow(placementId: "main", fetchPolicy: .returnCacheDataIfNotExpiredElseLoad(maxAge: 30))
        #expect(fresh.source == .cache)
        try await Task.sleep(for: .milliseconds(400))
        let expired = try await client.getFlow(placementId: "main", fetchPolicy: .returnCacheDataIfNotExpiredElseLoad(maxAge: 0.3))
        #expect(expired.source == .network)
        let list = events.list.withLock { $0 }
        let hitAge = try #require(list.first { $0.name == .cacheHit }?.attrs["age"]?.numberValue)
        #expect(hitAge >= 0 && hitAge < 30)
        #expect(EngineTime(seconds: hitAge).seconds == hitAge, "a whole number of microseconds")
        let expiredEvent = try #require(list.first { $0.name == .cacheExpired })
        #expect(expiredEvent.attrs["maxAge"] == JSONValue.number(0.3))
        #expect(try #require(expiredEvent.attrs["age"]?.numberValue) >= 0.3)
    }
}
