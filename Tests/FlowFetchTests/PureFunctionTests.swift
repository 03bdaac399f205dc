import Testing
@testable import FlowFetch
import FlowJSON

@Suite("Budget")
struct BudgetTests {
    @Test("loadTimeout: below 1 raised to 1; negative or not finite rejected")
    func clamp() {
        #expect(Budget.clampLoadTimeout(0.3) == 1)
        #expect(Budget.clampLoadTimeout(0) == 1)
        #expect(Budget.clampLoadTimeout(1) == 1)
        #expect(Budget.clampLoadTimeout(7.5) == 7.5)
        #expect(Budget.clampLoadTimeout(-0.1) == nil)
        #expect(Budget.clampLoadTimeout(.nan) == nil)
        #expect(Budget.clampLoadTimeout(.infinity) == nil)
        // The engine's form of the same rule, in engine time.
        #expect(Budget.loadTimeout(0.3) == 1 && Budget.loadTimeout(0) == 1 && Budget.loadTimeout(7.5) == 7.5)
        #expect(Budget.loadTimeout(-0.1) == nil && Budget.loadTimeout(.nan) == nil && Budget.loadTimeout(.infinity) == nil)
    }

    @Test("stage A is max(T - 0.5, 0.5); stage B is min(max(T - elapsed, 0.5), 60)")
    func stages() {
        #expect(Budget.stageA(5) == 4.5)
        #expect(Budget.stageA(1) == 0.5)
        #expect(Budget.stageA(0.8) == 0.5)
        #expect(Budget.stageB(5, elapsed: 4.5) == 0.5)
        #expect(Budget.stageB(5, elapsed: 9) == 0.5)
        #expect(Budget.stageB(3, elapsed: 1) == 2)
        #expect(Budget.stageB(100, elapsed: 0.1) == 60)
        #expect(Budget.stageB(60.5, elapsed: 0.5) == 60)
    }

    @Test("placement ids: trimmed, empty dropped, duplicates dropped in first-seen order")
    func normalize() {
        #expect(Budget.normalizePlacement("  a \n") == "a")
        #expect(Budget.normalizePlacement(" \t ") == nil)
        #expect(Budget.normalizePlacements([" b", "a", "", "b ", "  ", "c", "a"]) == ["b", "a", "c"])
        #expect(Budget.normalizePlacements([]) == [])
        // More than eight ids take the hashing path; it keeps the same first-seen order.
        let many = (0..<12).map { " p\(4 - $0 % 5) " } + ["", "p9"]
        #expect(Budget.normalizePlacements(many) == ["p4", "p3", "p2", "p1", "p0", "p9"])
        #expect(Budget.normalizePlacements(Array(many.prefix(8))) == ["p4", "p3", "p2", "p1", "p0"])
    }
}

@Suite("VariationDraw")
struct VariationDrawTests {
    // Expected buckets computed offline with Python 3:
    //   import hashlib
    //   int.from_bytes(hashlib.md5(key.encode()).digest()[8:16], 'big') % 100
    // e.g. md5("av-all-user-42") = ef8cf9679810b464 f2554c0355c54da7; 0xf2554c0355c54da7 = 17461946707406572967 -> 67.
    static let buckets: [(version: String, profile: String, bucket: Int)] = [
        ("av-all", "user-42", 67), ("av-asa", "user-42", 62), ("av-all", "user-7", 3), ("av-all", "user-8", 8),
        ("av-onb", "user-42", 70), ("av-set", "user-42", 56), ("av-all", "user-99", 63), ("av-x", "user-1", 33),
        ("abc", "def", 56),
    ]

    @Test("buckets match MD5 values computed independently")
    func buckets() {
        for (v, p, b) in Self.buckets {
            #expect(VariationDraw.bucket(audienceVersionId: v, profileId: p) == b, "\(v)-\(p)")
        }
    }

    @Test("the spec's example: key av-all-user-42 draws all-B of a 50/50 split")
    func specExample() {
        let payload = AudiencePayload(placementId: "p", audienceName: "All Users", audienceVersionId: "av-all",
                                      variations: [Variation(id: "all-B", weight: 50), Variation(id: "all-A", weight: 50)])
        #expect(VariationDraw.pick(payload, profileId: "user-42")?.id == "all-B")
        // bucket 3 -> the first cumulative weight > 3 -> all-A
        #expect(VariationDraw.pick(payload, profileId: "user-7")?.id == "all-A")
    }

    @Test("variations are walked sorted by (weight, id)")
    func order() {
        // bucket("av-onb", "user-42") = 70: onb-A (30) cumulative 30, onb-B (70) cumulative 100 -> onb-B,
        // whatever order the backend lists them in.
        let listed = [Variation(id: "onb-B", weight: 70), Variation(id: "onb-A", weight: 30)]
        for vs in [listed, listed.reversed()] {
            let p = AudiencePayload(placementId: "p", audienceName: "All Users", audienceVersionId: "av-onb", variations: vs)
            #expect(VariationDraw.pick(p, profileId: "user-42")?.id == "onb-B")
        }
        // bucket("av-all", "user-8") = 8: sorted (5 z, 10 a, 85 m) -> cumulative 5, 15 -> "a".
        let p = AudiencePayload(placementId: "p", audienceName: "x", audienceVersionId: "av-all",
                                variations: [Variation(id: "m", weight: 85), Variation(id: "a", weight: 10), Variation(id: "z", weight: 5)])
        #expect(VariationDraw.pick(p, profileId: "user-8")?.id == "a")
    }

    @Test("weights that do not sum to 100 draw nothing")
    func badWeights() {
        for weights in [[50, 49], [60, 60], [], [101, -1]] {
            let p = AudiencePayload(placementId: "p", audienceName: "x", audienceVersionId: "v",
                                    variations: weights.enumerated().map { Variation(id: "v\($0.offset)", weight: $0.element) })
            #expect(VariationDraw.pick(p, profileId: "u") == nil)
        }
    }
}

@Suite("LRUIndex")
struct LRUIndexTests {
    @Test("evicts least recently used first, the new key last and only if it alone exceeds the cap")
    func order() {
        var lru = LRUIndex<String>(maxBytes: 100)
        #expect(lru.record("a", bytes: 40).isEmpty)
        #expect(lru.record("b", bytes: 40).isEmpty)
        lru.touch("a")
        let evicted = lru.record("c", bytes: 40)
        #expect(evicted.map(\.key) == ["b"])
        #expect(evicted.map(\.bytes) == [40])
        #expect(lru.totalBytes == 80)
        #expect(lru.keysByRecency == ["a", "c"])
        let all = lru.record("d", bytes: 150)
        #expect(all.map(\.key) == ["a", "c", "d"])
        #expect(lru.count == 0)
        #expect(lru.totalBytes == 0)
    }

    @Test("recency follows a plain model over random records, touches (repeated ones too) and removals")
    func recencyModel() {
        var lru = LRUIndex<Int>(maxBytes: 1_000_000)
        var model: [Int] = []  // least recently used first
        var state: UInt64 = 5
        func draw(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
        for step in 0..<3_000 {
            let key = draw(12)
            switch draw(4) {
            case 0:
                _ = lru.record(key, bytes: 1)
                model.removeAll { $0 == key }
                model.append(key)
            case 1:
                lru.remove(key)
                model.removeAll { $0 == key }
            default:
                // Touch the newest again half the time: that must change nothing.
                let touched = draw(2) == 0 ? (model.last ?? key) : key
                lru.touch(touched)
                if model.contains(touched) { model.removeAll { $0 == touched }; model.append(touched) }
            }
            guard lru.keysByRecency == model else {
                Issue.record("step \(step): \(lru.keysByRecency) != \(model)")
                return
            }
        }
    }

    @Test("re-recording a key replaces its size")
    func replace() {
        var lru = LRUIndex<Int>(maxBytes: 100)
        _ = lru.record(1, bytes: 90)
        #expect(lru.record(1, bytes: 60).isEmpty)
        #expect(lru.totalBytes == 60)
        #expect(lru.remove(1) == 60)
        #expect(lru.remove(1) == nil)
    }
}

@Suite("Flow cache")
struct FlowCacheTests {
    let key = CacheKey(profileId: "user-42", placementId: "main_paywall")

    func entry(_ v: String, fromDefault: Bool, at: EngineTime = 12.5) -> CachedFlow {
        CachedFlow(flow: Flow(placementId: "main_paywall", variationId: v, audienceName: "ASA", audienceVersionId: "av-asa",
                              revision: 3, productIds: ["p1", "p2"], remoteConfig: ["k": [1, "x", true]],
                              layout: LayoutRef(id: "L1", version: 3), source: .cache, targetingLost: fromDefault),
                   storedAt: at, fromDefaultAudience: fromDefault)
    }

    @Test("the codec round-trips an entry")
    func roundTrip() throws {
        let e = entry("asa-A", fromDefault: false)
        let bytes = CacheEntryCodec.encode(e, key: key)
        let decoded = try CacheEntryCodec.decode(bytes, key: key).get()
        #expect(decoded == e)
    }

    @Test("the codec detects corruption, truncation and entries of another key")
    func corruption() {
        let bytes = CacheEntryCodec.encode(entry("asa-A", fromDefault: false), key: key)
        var flipped = bytes
        flipped[flipped.count - 3] ^= 0x01
        for bad in [flipped, Array(bytes.dropLast(5)), [], Array("garbage\n{}".utf8)] {
            if case .success = CacheEntryCodec.decode(bad, key: key) { Issue.record("corrupt bytes decoded") }
        }
        if case .success = CacheEntryCodec.decode(bytes, key: CacheKey(profileId: "user-7", placementId: "main_paywall")) {
            Issue.record("entry of another profile decoded")
        }
    }

    @Test("a corrupt disk entry is deleted and reported, then a miss")
    func corruptRead() {
        let disk = InMemoryDiskStore()
        let cache = FlowCache(disk: disk)
        _ = disk.save(key, CacheEntryCodec.encode(entry("asa-A", fromDefault: false), key: key))
        disk.corrupt(key)
        if case .corrupt = cache.read(key) {} else { Issue.record("not reported as corrupt") }
        #expect(cache.read(key) == .miss)
        #expect(disk.keys.isEmpty)
    }

    @Test("keepTargeted: a default-audience write never replaces a targeted entry, but replaces a default one")
    func keepTargeted() {
        let cache = FlowCache(disk: InMemoryDiskStore())
        #expect(cache.write(key, entry("t", fromDefault: false), keepTargeted: false).stored)
        #expect(!cache.write(key, entry("d", fromDefault: true), keepTargeted: true).stored)
        if case .hit(let e, _) = cache.read(key) { #expect(e.flow.variationId == "t") } else { Issue.record("miss") }
        let other = CacheKey(profileId: "user-42", placementId: "other")
        #expect(cache.write(other, entry("d1", fromDefault: true), keepTargeted: true).stored)
        #expect(cache.write(other, entry("d2", fromDefault: true), keepTargeted: true).stored)
        if case .hit(let e, _) = cache.read(other) { #expect(e.flow.variationId == "d2") } else { Issue.record("miss") }
        #expect(cache.write(key, entry("t2", fromDefault: false), keepTargeted: false).stored)
    }

    @Test("a restart (new cache, same disk) loses memory and hits the disk layer")
    func restart() {
        let disk = InMemoryDiskStore()
        let first = FlowCache(disk: disk)
        _ = first.write(key, entry("t", fromDefault: false), keepTargeted: false)
        if case .hit(_, let layer) = first.read(key) { #expect(layer == .memory) } else { Issue.record("miss") }
        let second = FlowCache(disk: disk)
        if case .hit(_, let layer) = second.read(key) { #expect(layer == .disk) } else { Issue.record("miss") }
        if case .hit(_, let layer) = second.read(key) { #expect(layer == .memory) } else { Issue.record("miss") }
    }

    @Test("retainOnly drops every other profile's entries")
    func retainOnly() {
        let disk = InMemoryDiskStore()
        let cache = FlowCache(disk: disk)
        let mine = CacheKey(profileId: "user-7", placementId: "main_paywall")
        _ = cache.write(key, entry("t", fromDefault: false), keepTargeted: false)
        _ = cache.write(mine, entry("t", fromDefault: false), keepTargeted: false)
        cache.retainOnly(profileId: "user-7")
        #expect(cache.read(key) == .miss)
        #expect(disk.keys == [mine])
    }
}
