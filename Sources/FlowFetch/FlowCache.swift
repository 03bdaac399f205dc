import FlowJSON

/// A flow cache entry's key: entries are scoped to a profile.
public struct CacheKey: Hashable, Sendable, CustomStringConvertible {
    public let profileId: String
    public let placementId: String
    /// FNV-1a of both ids, computed once: a cache hit looks its key up in two or three tables, and
    /// hashing two strings with SipHash for each lookup cost more than the rest of the lookup.
    private let digest: UInt64

    public init(profileId: String, placementId: String) {
        self.profileId = profileId
        self.placementId = placementId
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        Self.mix(profileId, into: &h)
        h = (h ^ 0xFF) &* 0x0000_0100_0000_01b3  // never in UTF-8: "a"+"bc" and "ab"+"c" differ
        Self.mix(placementId, into: &h)
        digest = h
    }

    /// Folds the UTF-8 of `text` into `h`, eight bytes per step (FNV-style multiply, then a shift
    /// so high bits reach the low ones); the length goes in last, so trailing zero bytes count.
    private static func mix(_ text: String, into h: inout UInt64) {
        func fold(_ bytes: UnsafeBufferPointer<UInt8>, _ h: inout UInt64) {
            var i = 0
            while i < bytes.count {
                var word: UInt64 = 0
                let n = min(8, bytes.count - i)
                for k in 0..<n { word |= UInt64(bytes[i + k]) << (8 * UInt64(k)) }
                h = (h ^ word) &* 0x0000_0100_0000_01b3
                h ^= h >> 29
                i += n
            }
            h = (h ^ UInt64(bytes.count)) &* 0x0000_0100_0000_01b3
        }
        if text.utf8.withContiguousStorageIfAvailable({ fold($0, &h) }) == nil {
            let bytes = Array(text.utf8)
            bytes.withUnsafeBufferPointer { fold($0, &h) }
        }
    }

    public var description: String { "\(profileId)/\(placementId)" }

    public static func == (a: CacheKey, b: CacheKey) -> Bool {
        a.digest == b.digest && a.placementId == b.placementId && a.profileId == b.profileId
    }

    public func hash(into hasher: inout Hasher) { hasher.combine(digest) }

    /// The hash `Dictionary` and `Set` use: the digest mixed with their seed (a 64-bit finaliser)
    /// instead of a SipHash of it, which cost more than the rest of a cache lookup. Ids are the
    /// app's own, so there is no flooding to resist here.
    public func _rawHashValue(seed: Int) -> Int {
        Int(truncatingIfNeeded: mix64(digest ^ UInt64(truncatingIfNeeded: seed) &* splitMix64Gamma))
    }
}

/// An entry removed to keep the cache under its size cap.
public struct Eviction: Sendable, Hashable {
    public var key: CacheKey
    public var bytes: Int
    public init(key: CacheKey, bytes: Int) { self.key = key; self.bytes = bytes }
}

/// The disk layer of the flow cache: encoded entries that survive a restart, capped in size with
/// least-recently-used eviction. ``InMemoryDiskStore`` stands in for a disk in virtual time; the
/// runtime provides one over real files.
public protocol FlowDiskStore: AnyObject {
    /// The stored bytes for `key` (marking it recently used), or nil.
    func load(_ key: CacheKey) -> [UInt8]?
    /// Marks `key` recently used without reading it (the memory layer answered a read).
    func touch(_ key: CacheKey)
    /// Stores bytes atomically; returns the entries evicted to stay under the cap.
    func save(_ key: CacheKey, _ bytes: [UInt8]) -> [Eviction]
    func remove(_ key: CacheKey)
    /// Removes every entry of every other profile.
    func removeAll(exceptProfile profileId: String)
    /// Stores an entry given as a value; `encoded()` returns its bytes (encoding them at most once),
    /// so a store that keeps no bytes need not pay for the encoding. Returns the entries evicted.
    /// The default implementation calls `save(key, encoded())`: a byte-based store only implements
    /// `save(_:_:)`.
    func save(_ key: CacheKey, entry: CachedFlow, encoded: () -> [UInt8]) -> [Eviction]
}

extension FlowDiskStore {
    /// Marks `key` recently used by loading it; stores with a cheaper way implement `touch` themselves.
    public func touch(_ key: CacheKey) { _ = load(key) }

    /// Encodes the entry and stores its bytes with `save(_:_:)`.
    public func save(_ key: CacheKey, entry: CachedFlow, encoded: () -> [UInt8]) -> [Eviction] {
        save(key, encoded())
    }
}

/// Least-recently-used bookkeeping shared by disk stores: sizes, recency, and who to evict.
public struct LRUIndex<Key: Hashable & Sendable>: Sendable {
    public let maxBytes: Int
    public private(set) var totalBytes = 0
    private struct Slot: Sendable { var size: Int; var lastUse: UInt64 }
    private var slots: [Key: Slot] = [:]
    private var clock: UInt64 = 0

    public init(maxBytes: Int) { self.maxBytes = maxBytes }

    public var count: Int { slots.count }
    public func contains(_ key: Key) -> Bool { slots[key] != nil }

    /// Marks `key` most recently used (no effect for a key not indexed).
    public mutating func touch(_ key: Key) {
        clock += 1
        if let i = slots.index(forKey: key) { slots.values[i].lastUse = clock }
    }

    /// Records `key` at `bytes` (replacing its previous size) as most recently used, then evicts least
    /// recently used keys until the total fits; `key` itself goes last, only if it alone is too big.
    /// Returns the evicted keys with their sizes.
    public mutating func record(_ key: Key, bytes: Int) -> [(key: Key, bytes: Int)] {
        clock += 1
        totalBytes += bytes - (slots.updateValue(Slot(size: bytes, lastUse: clock), forKey: key)?.size ?? 0)
        var evicted: [(key: Key, bytes: Int)] = []
        guard totalBytes > maxBytes else { return evicted }
        for victim in keysByRecency where victim != key && totalBytes > maxBytes {
            if let size = remove(victim) { evicted.append((victim, size)) }
        }
        if totalBytes > maxBytes, let size = remove(key) { evicted.append((key, size)) }
        return evicted
    }

    /// Forgets `key`; returns its size if it was indexed.
    @discardableResult
    public mutating func remove(_ key: Key) -> Int? {
        guard let slot = slots.removeValue(forKey: key) else { return nil }
        totalBytes -= slot.size
        return slot.size
    }

    /// Indexed keys, least recently used first.
    public var keysByRecency: [Key] { slots.sorted { $0.value.lastUse < $1.value.lastUse }.map(\.key) }
}

/// A disk layer kept in memory: survives engine restarts as long as the object lives (the scenario
/// runner keeps it across `restart` steps), so it has the restart semantics of a real disk.
public final class InMemoryDiskStore: FlowDiskStore {
    // Unchecked exclusivity: used by one engine at a time, from that engine's thread.
    @exclusivity(unchecked) private var entries: [CacheKey: [UInt8]] = [:]
    @exclusivity(unchecked) private var lru: LRUIndex<CacheKey>

    /// A store capped at `maxBytes` (default 20 MiB).
    public init(maxBytes: Int = 20 * 1024 * 1024) { lru = LRUIndex(maxBytes: maxBytes) }

    public func load(_ key: CacheKey) -> [UInt8]? {
        lru.touch(key)
        return entries[key]
    }

    public func touch(_ key: CacheKey) { lru.touch(key) }

    public func save(_ key: CacheKey, _ bytes: [UInt8]) -> [Eviction] {
        entries[key] = bytes
        return lru.record(key, bytes: bytes.count).map { victim in
            entries[victim.key] = nil
            return Eviction(key: victim.key, bytes: victim.bytes)
        }
    }

    public func remove(_ key: CacheKey) {
        entries[key] = nil
        lru.remove(key)
    }

    public func removeAll(exceptProfile profileId: String) {
        for key in entries.keys where key.profileId != profileId { remove(key) }
    }

    /// Overwrites a stored entry's bytes without updating its checksum, as a torn write would (tests).
    public func corrupt(_ key: CacheKey) {
        guard var bytes = entries[key], !bytes.isEmpty else { return }
        bytes[bytes.count - 1] ^= 0x5A
        entries[key] = bytes
    }

    /// Keys currently stored.
    public var keys: [CacheKey] { Array(entries.keys) }
}

/// The flow cache: a memory layer in front of a disk layer. Entries are checksummed on disk; a corrupt
/// or unreadable entry is deleted and reported, never served. A restart (a new cache over the same
/// disk layer) keeps disk entries and loses memory entries.
public final class FlowCache {
    public let disk: FlowDiskStore
    // Unchecked exclusivity: like the engine that owns it, the cache is used from one thread at a
    // time and no access outlives the statement that makes it.
    @exclusivity(unchecked) private var memory: [CacheKey: CachedFlow] = [:]

    public init(disk: FlowDiskStore) { self.disk = disk }

    /// Reads an entry: memory first, then disk (promoting it to memory).
    public func read(_ key: CacheKey) -> CacheRead {
        if let entry = memory[key] {
            disk.touch(key)  // keep the disk layer's recency in step
            return .hit(entry, layer: .memory)
        }
        guard let bytes = disk.load(key) else { return .miss }
        switch CacheEntryCodec.decode(bytes, key: key) {
        case .success(let entry):
            memory[key] = entry
            return .hit(entry, layer: .disk)
        case .failure(let reason):
            disk.remove(key)
            return .corrupt(key: key.description, reason: reason.message)
        }
    }

    /// The outcome of a write.
    public struct WriteResult: Sendable {
        public var stored: Bool
        public var bytes: Int
        public var evicted: [Eviction]
        /// A corrupt entry found (and deleted) while checking for a targeted one.
        public var corrupt: (key: String, reason: String)?
    }

    /// Writes an entry. With `keepTargeted`, an existing targeted entry is left in place (a targeted
    /// entry is never replaced by a default-audience one). With `measure` false the entry is encoded
    /// only if the disk layer asks for its bytes, and `bytes` is then 0 when it did not (the engine
    /// needs the size only for the `cache.stored` event).
    public func write(_ key: CacheKey, _ entry: CachedFlow, keepTargeted: Bool) -> WriteResult {
        write(key, entry, keepTargeted: keepTargeted, measure: true)
    }

    /// ``write(_:_:keepTargeted:)``, encoding the entry only when the disk layer or `measure` needs it.
    public func write(_ key: CacheKey, _ entry: CachedFlow, keepTargeted: Bool, measure: Bool) -> WriteResult {
        var corrupt: (key: String, reason: String)?
        if keepTargeted {
            switch peek(key) {
            case .hit(let existing, _) where !existing.fromDefaultAudience:
                return WriteResult(stored: false, bytes: 0, evicted: [])
            case .corrupt(let k, let reason):
                corrupt = (k, reason)
            default:
                break
            }
        }
        var bytes: [UInt8]?
        memory[key] = entry
        let evicted = disk.save(key, entry: entry) {
            if let bytes { return bytes }
            let encoded = CacheEntryCodec.encode(entry, key: key)
            bytes = encoded
            return encoded
        }
        for e in evicted { memory[e.key] = nil }
        if measure, bytes == nil { bytes = CacheEntryCodec.encode(entry, key: key) }
        return WriteResult(stored: memory[key] != nil, bytes: bytes?.count ?? 0, evicted: evicted, corrupt: corrupt)
    }

    /// Empties the memory layer, as a restart does (the disk layer keeps its entries); the memory
    /// layer keeps its storage for the entries to come.
    public func removeMemory() {
        guard !memory.isEmpty else { return }
        memory.removeAll(keepingCapacity: true)
    }

    /// Drops every other profile's entries (identify).
    public func retainOnly(profileId: String) {
        memory = memory.filter { $0.key.profileId == profileId }
        disk.removeAll(exceptProfile: profileId)
    }

    private func peek(_ key: CacheKey) -> CacheRead {
        if let entry = memory[key] { return .hit(entry, layer: .memory) }
        return read(key)
    }
}

/// Why a stored entry could not be read.
public struct CacheDecodeFailure: Error, Sendable { public var message: String }

/// The on-disk form of a flow cache entry: a header line with a format tag and the SHA-256 of the body,
/// then the entry as JSON. The time it was stored is written twice: `storedAtMicros`, the exact engine
/// time in whole microseconds, and `storedAt`, the same in seconds, which is all that entries written
/// before engine time was exact carry (such an entry is read by rounding it to the microsecond).
public enum CacheEntryCodec {
    static let magic = "flowscope-cache-1 "

    /// Encodes an entry with its checksum.
    public static func encode(_ entry: CachedFlow, key: CacheKey) -> [UInt8] {
        let f = entry.flow
        var layout: JSONValue = .null
        if let l = f.layout { layout = ["id": .string(l.id), "version": .number(Double(l.version))] }
        let body: JSONValue = [
            "profileId": .string(key.profileId), "placementId": .string(f.placementId),
            "variationId": .string(f.variationId), "audienceName": .string(f.audienceName),
            "audienceVersionId": .string(f.audienceVersionId), "revision": .number(Double(f.revision)),
            "productIds": .array(f.productIds.map(JSONValue.string)), "remoteConfig": .object(f.remoteConfig),
            "layout": layout, "storedAt": .number(entry.storedAt.seconds),
            "storedAtMicros": .number(Double(entry.storedAt.microseconds)), "fromDefaultAudience": .bool(entry.fromDefaultAudience),
        ]
        let bodyBytes = Array(body.jsonText.utf8)
        return Array((magic + Digest.hex(Digest.sha256(bodyBytes)) + "\n").utf8) + bodyBytes
    }

    /// Decodes and verifies an entry; any mismatch is a failure with a reason.
    public static func decode(_ bytes: [UInt8], key: CacheKey) -> Result<CachedFlow, CacheDecodeFailure> {
        func fail(_ m: String) -> Result<CachedFlow, CacheDecodeFailure> { .failure(CacheDecodeFailure(message: m)) }
        guard let newline = bytes.firstIndex(of: 10) else { return fail("no header") }
        let header = String(decoding: bytes[..<newline], as: UTF8.self)
        guard header.hasPrefix(magic) else { return fail("unknown format") }
        let body = Array(bytes[(newline + 1)...])
        guard Digest.hex(Digest.sha256(body)) == header.dropFirst(magic.count) else { return fail("checksum mismatch") }
        do {
            let root = try JSON5.parse(bytes: body)
            let o = try JSONCursor(root).object()
            guard try o.required("profileId").string() == key.profileId,
                  try o.required("placementId").string() == key.placementId else { return fail("entry of another key") }
            var layout: LayoutRef?
            if let l = o.optional("layout"), !l.isNull {
                let lo = try l.object()
                layout = LayoutRef(id: try lo.required("id").string(), version: try lo.required("version").int())
            }
            let fromDefault = try o.required("fromDefaultAudience").bool()
            let flow = Flow(placementId: key.placementId, variationId: try o.required("variationId").string(),
                            audienceName: try o.required("audienceName").string(),
                            audienceVersionId: try o.required("audienceVersionId").string(),
                            revision: try o.required("revision").int(),
                            productIds: try o.required("productIds").array().map { c throws(JSONInputError) in try c.string() },
                            remoteConfig: try o.required("remoteConfig").object().members,
                            layout: layout, source: .cache, targetingLost: fromDefault)
            let storedAt: EngineTime
            if let micros = o.optional("storedAtMicros") {
                storedAt = EngineTime(microseconds: Int64(try micros.int()))
            } else {
                storedAt = EngineTime(seconds: try o.required("storedAt").double())
            }
            return .success(CachedFlow(flow: flow, storedAt: storedAt, fromDefaultAudience: fromDefault))
        } catch {
            return fail("unreadable entry: \(error.description)")
        }
    }
}

/// The layout cache: layouts by id and version; survives restarts.
public protocol LayoutStore: AnyObject {
    func read(_ ref: LayoutRef) -> Layout?
    func write(_ layout: Layout)
}

/// A layout store kept in memory (virtual time; kept across restarts by whoever owns it).
public final class InMemoryLayoutStore: LayoutStore {
    private var layouts: [LayoutRef: Layout] = [:]
    public init() {}
    public func read(_ ref: LayoutRef) -> Layout? { layouts[ref] }
    public func write(_ layout: Layout) { layouts[layout.ref] = layout }
}
