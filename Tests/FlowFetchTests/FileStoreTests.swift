import FlowFetch
import FlowJSON
import Foundation
import Synchronization
import TestSupport
import Testing

/// A backend answering every audience request with one variation, or failing every request.
struct FixedBackend: FlowBackend {
    var variation = "net-A"
    var fail: RequestFailure?
    func send(_ request: RequestSpec) async -> RequestCompletion {
        if let fail { return RequestCompletion(.failure(fail)) }
        let payload = AudiencePayload(placementId: request.placement ?? "", audienceName: "All Users", audienceVersionId: "av",
                                      variations: [Variation(id: variation, weight: 100)])
        return RequestCompletion(.success(.audience(payload)), bytes: 100)
    }
}

/// Collects engine events.
final class Events: EngineEventSink {
    let list = Mutex<[EngineEvent]>([])
    func receive(_ event: EngineEvent) { list.withLock { $0.append(event) } }
    var names: [EventName] { list.withLock { $0.map(\.name) } }
}

/// Wall-clock time whose deadlines never fire: for tests whose backend answers at once, so that a
/// cooperative pool starved by other suites cannot turn an answer into a timeout.
struct NoDeadlineClock: EngineClock {
    func now() -> EngineTime { SystemClock().now() }
    func sleep(until deadline: EngineTime) async throws { try await Task.sleep(for: .seconds(86_400)) }
    func schedule(at deadline: EngineTime, _ action: @escaping @Sendable () -> Void) -> @Sendable () -> Void { {} }
}

func temporaryDirectory() -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("flowscope-test-\(UUID().uuidString)").path
}

@Suite("File stores", .ownThread)
struct FileStoreTests {
    static func entry(_ placement: String, variation: String = "v", profile: String = "p1") -> (CacheKey, [UInt8]) {
        let key = CacheKey(profileId: profile, placementId: placement)
        let flow = Flow(placementId: placement, variationId: variation, audienceName: "All Users", audienceVersionId: "av",
                        source: .network, targetingLost: false)
        return (key, CacheEntryCodec.encode(CachedFlow(flow: flow, storedAt: 1, fromDefaultAudience: false), key: key))
    }

    @Test("a restart (a new client on the same directory) keeps disk entries")
    func restartKeepsEntries() async throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let first = FlowClient(profile: Profile(id: "user-1"), backend: FixedBackend(), disk: try FileFlowStore(directory: dir),
                               clock: NoDeadlineClock())
        let fetched = try await first.getFlow(placementId: "main", loadTimeout: 30)
        #expect(fetched.source == .network)

        let events = Events()
        let offline = FixedBackend(fail: .transport(reason: "offline"))
        let second = FlowClient(profile: Profile(id: "user-1"), backend: offline, disk: try FileFlowStore(directory: dir), events: events, clock: NoDeadlineClock())
        let cached = try await second.getFlow(placementId: "main", fetchPolicy: .returnCacheDataElseLoad, loadTimeout: 30)
        #expect(cached.source == .cache)
        #expect(cached.variationId == "net-A")
        let hit = try #require(events.list.withLock { $0.first { $0.name == .cacheHit } })
        #expect(hit.attrs["layer"] == "disk")
    }

    @Test("a truncated entry file is never served: it is reported as corrupt, deleted, and the call goes to the network")
    func truncatedNeverServed() async throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = try FileFlowStore(directory: dir)
        let (key, bytes) = Self.entry("main", profile: "user-1")
        _ = store.save(key, bytes)
        let file = store.path(for: key)
        #expect(truncate(file, off_t(bytes.count - 7)) == 0)

        let events = Events()
        let client = FlowClient(profile: Profile(id: "user-1"), backend: FixedBackend(variation: "fresh"),
                                disk: try FileFlowStore(directory: dir), events: events, clock: NoDeadlineClock())
        let flow = try await client.getFlow(placementId: "main", fetchPolicy: .returnCacheDataElseLoad, loadTimeout: 30)
        #expect(flow.source == .network)
        #expect(flow.variationId == "fresh")
        #expect(events.names.contains(.cacheCorrupt))
        #expect(!events.names.contains(.cacheHit))
    }

    @Test("a corrupted entry (one byte flipped, size unchanged) is never served and is deleted")
    func corruptedNeverServed() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = try FileFlowStore(directory: dir)
        let (key, bytes) = Self.entry("main")
        _ = store.save(key, bytes)
        var damaged = bytes
        damaged[damaged.count - 3] ^= 0x20
        try Data(damaged).write(to: URL(fileURLWithPath: store.path(for: key)))

        let cache = FlowCache(disk: try FileFlowStore(directory: dir))
        guard case .corrupt(_, let reason) = cache.read(key) else { Issue.record("expected corrupt"); return }
        #expect(reason.contains("checksum"))
        #expect(!FileManager.default.fileExists(atPath: store.path(for: key)))
        #expect(cache.read(key) == .miss)
    }

    @Test("two profiles never see each other's entries, and switching profile removes the other's directory")
    func profilesIsolated() async throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = try FileFlowStore(directory: dir)
        let (a, aBytes) = Self.entry("main", variation: "for-a", profile: "alice")
        _ = store.save(a, aBytes)
        #expect(store.load(CacheKey(profileId: "bob", placementId: "main")) == nil)
        let (b, bBytes) = Self.entry("main", variation: "for-b", profile: "bob")
        _ = store.save(b, bBytes)
        #expect(store.load(a) == aBytes)
        #expect(store.load(b) == bBytes)

        store.removeAll(exceptProfile: "bob")
        #expect(store.load(a) == nil)
        #expect(!FileManager.default.fileExists(atPath: store.path(for: a)))
        #expect(store.load(b) == bBytes)
        let reopened = try FileFlowStore(directory: dir)
        #expect(reopened.count == 1)
        #expect(reopened.load(a) == nil)
    }

    @Test("the size cap evicts the least recently used entry, and recency survives a restart")
    func capEvictsLeastRecentlyUsed() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let (a, aBytes) = Self.entry("a")
        let (b, bBytes) = Self.entry("b")
        let (c, cBytes) = Self.entry("c")
        let (d, dBytes) = Self.entry("d")
        let cap = aBytes.count + bBytes.count + cBytes.count / 2
        let store = try FileFlowStore(directory: dir, maxBytes: cap)
        #expect(store.save(a, aBytes).isEmpty)
        Thread.sleep(forTimeInterval: 0.02)
        #expect(store.save(b, bBytes).isEmpty)
        Thread.sleep(forTimeInterval: 0.02)
        #expect(store.load(a) == aBytes)  // a is now more recent than b
        Thread.sleep(forTimeInterval: 0.02)
        let evicted = store.save(c, cBytes)
        #expect(evicted == [Eviction(key: b, bytes: bBytes.count)])
        #expect(!FileManager.default.fileExists(atPath: store.path(for: b)))

        // After a restart the order comes from modification times: a (used) is older than c (written).
        let reopened = try FileFlowStore(directory: dir, maxBytes: cap)
        #expect(reopened.count == 2)
        let next = reopened.save(d, dBytes)
        #expect(next.map(\.key) == [a], "the cache key is recovered from the entry file")
        #expect(reopened.load(c) == cBytes)
    }

    @Test("a memory-layer hit marks the entry used without reading its file, and the order survives a restart")
    func touchKeepsRecencyWithoutReading() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let (a, aBytes) = Self.entry("a")
        let (b, bBytes) = Self.entry("b")
        let (c, cBytes) = Self.entry("c")
        let cap = aBytes.count + bBytes.count + cBytes.count / 2
        let store = try FileFlowStore(directory: dir, maxBytes: cap)
        _ = store.save(a, aBytes)
        Thread.sleep(forTimeInterval: 0.02)
        _ = store.save(b, bBytes)
        Thread.sleep(forTimeInterval: 0.02)
        store.touch(a)
        store.touch(a)  // already the newest on disk: nothing to change
        let reopened = try FileFlowStore(directory: dir, maxBytes: cap)
        #expect(reopened.save(c, cBytes).map(\.key) == [b], "a was touched after b was written")

        // A touch never reads: with a's file gone, touching keeps it indexed; a load finds it missing.
        unlink(reopened.path(for: a))
        reopened.touch(a)
        #expect(reopened.count == 2)
        #expect(reopened.load(a) == nil)
        #expect(reopened.count == 1)
    }

    @Test("an interrupted write leaves no partial entry: temporary files are ignored and cleaned at start")
    func temporaryFilesIgnored() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = try FileFlowStore(directory: dir)
        let (key, bytes) = Self.entry("main")
        _ = store.save(key, bytes)
        let profileDir = (store.path(for: key) as NSString).deletingLastPathComponent
        try Data(bytes.prefix(10)).write(to: URL(fileURLWithPath: profileDir + "/.tmp-deadbeef"))
        let reopened = try FileFlowStore(directory: dir)
        #expect(reopened.count == 1)
        #expect(reopened.totalBytes == bytes.count)
        #expect(!FileManager.default.fileExists(atPath: profileDir + "/.tmp-deadbeef"))
    }

    @Test("layouts survive a restart; a damaged layout file reads as a miss and is deleted")
    func layoutStore() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let layout = Layout(id: "L1", version: 2, screens: ["main", ["title": "Hi"]], texts: ["en": ["title": "Hi"]],
                            images: [LayoutImage(url: "https://a.invalid/1.png", customMediaId: "hero", preview: "AAAA")], videos: ["v.mp4"])
        try FileLayoutStore(directory: dir).write(layout)
        let reopened = try FileLayoutStore(directory: dir)
        #expect(reopened.read(layout.ref) == layout)
        #expect(reopened.read(LayoutRef(id: "L1", version: 3)) == nil)

        let file = reopened.path(for: layout.ref)
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: file)))
        bytes[bytes.count - 2] ^= 1
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        #expect(try FileLayoutStore(directory: dir).read(layout.ref) == nil)
        #expect(!FileManager.default.fileExists(atPath: file))
    }

    @Test("the asset cache is bounded and checksummed")
    func assetCache() throws {
        let dir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let cache = try AssetDiskCache(directory: dir, maxBytes: 600)
        cache.store("u1", [UInt8](repeating: 1, count: 200))
        cache.store("u2", [UInt8](repeating: 2, count: 200))
        #expect(cache.load("u1")?.count == 200)
        #expect(cache.store("u3", [UInt8](repeating: 3, count: 200)) > 0)
        #expect(cache.load("u2") == nil, "u2 was the least recently used")
        #expect(cache.load("u1") != nil)
        #expect(try AssetDiskCache(directory: dir, maxBytes: 600).load("u3") == [UInt8](repeating: 3, count: 200))
    }
}
