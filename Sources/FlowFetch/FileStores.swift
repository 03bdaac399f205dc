import FlowJSON
import Foundation
import Synchronization

/// A file store could not be opened or written.
public struct FileStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file or directory at fault.
    public var path: String
    /// What went wrong.
    public var message: String
    public init(path: String, message: String) { self.path = path; self.message = message }
    public var description: String { "\(path): \(message)" }
}

/// The flow cache's disk layer over real files, scoped by profile:
/// `<dir>/<sha256(profileId)>/<sha256(placementId)>.entry`. Writes are atomic; the total size is capped
/// with least-recently-used eviction; recency survives a restart through file modification times.
/// A file damaged on disk is handed to ``FlowCache`` as is: its checksum fails there, and the entry is
/// deleted and reported, never served.
///
/// ```swift
/// let client = FlowClient(profile: profile, backend: backend, disk: try FileFlowStore(directory: ".flowscope/cache"))
/// ```
public final class FileFlowStore: FlowDiskStore {
    /// The store's root directory.
    public let directory: String
    private var lru: LRUIndex<FileKey>
    /// Cache keys of files, learned at start (from the entry's body) and from calls.
    private var names: [FileKey: CacheKey] = [:]
    /// File keys already computed (two SHA-256 digests each), bounded.
    private var fileKeys: [CacheKey: FileKey] = [:]
    /// The entry whose file was given the newest modification time by this store: touching it again
    /// changes no order on disk, so it costs no system call.
    private var newestOnDisk: FileKey?

    private struct FileKey: Hashable, Sendable { var profile: String; var placement: String }

    /// Opens (creating it if needed) a store in `directory`, capped at `maxBytes` (default 20 MiB).
    /// Entries already on disk are indexed, least recently modified first; entries over the cap are evicted.
    public init(directory: String, maxBytes: Int = 20 * 1024 * 1024) throws(FileStoreError) {
        self.directory = directory
        lru = LRUIndex(maxBytes: maxBytes)
        try AtomicFile.makeDirectory(directory)
        var found: [(key: FileKey, size: Int, mtime: Double)] = []
        for profile in AtomicFile.list(directory) where Self.isDigest(profile) {
            let dir = directory + "/" + profile
            for file in AtomicFile.list(dir) {
                if file.hasPrefix(".tmp-") { AtomicFile.remove(dir + "/" + file); continue }  // a write cut short
                guard file.hasSuffix(".entry"), let st = AtomicFile.fileStat(dir + "/" + file) else { continue }
                let key = FileKey(profile: profile, placement: String(file.dropLast(6)))
                found.append((key, st.size, st.mtime))
                if let name = Self.cacheKey(ofEntry: dir + "/" + file) { names[key] = name }
            }
        }
        for f in found.sorted(by: { $0.mtime < $1.mtime }) {
            for victim in lru.record(f.key, bytes: f.size) { deleteFile(victim.key) }
        }
    }

    /// Bytes of every entry currently indexed.
    public var totalBytes: Int { lru.totalBytes }
    /// Number of entries currently indexed.
    public var count: Int { lru.count }

    /// The file that holds `key`'s entry.
    public func path(for key: CacheKey) -> String { path(fileKey(key)) }

    public func load(_ key: CacheKey) -> [UInt8]? {
        let fk = fileKey(key)
        guard lru.contains(fk) else { return nil }
        guard let bytes = AtomicFile.read(path(fk)) else {
            lru.remove(fk)
            return nil
        }
        names[fk] = key
        touch(fk)
        return bytes
    }

    public func touch(_ key: CacheKey) {
        let fk = fileKey(key)
        if lru.contains(fk) { touch(fk) }
    }

    /// Marks an indexed entry most recently used, here and (through its modification time) on disk.
    private func touch(_ fk: FileKey) {
        lru.touch(fk)
        guard newestOnDisk != fk else { return }
        AtomicFile.touch(path(fk))
        newestOnDisk = fk
    }

    public func save(_ key: CacheKey, _ bytes: [UInt8]) -> [Eviction] {
        let fk = fileKey(key)
        do {
            try AtomicFile.makeDirectory(directory + "/" + fk.profile)
            try AtomicFile.write(bytes, to: path(fk))
        } catch {
            // The disk refused the write: the memory layer still holds the entry for this run.
            lru.remove(fk)
            return []
        }
        newestOnDisk = fk
        names[fk] = key
        return lru.record(fk, bytes: bytes.count).map { victim in
            deleteFile(victim.key)
            let name = names.removeValue(forKey: victim.key)
                ?? CacheKey(profileId: victim.key.profile, placementId: victim.key.placement)
            return Eviction(key: name, bytes: victim.bytes)
        }
    }

    public func remove(_ key: CacheKey) {
        let fk = fileKey(key)
        deleteFile(fk)
        lru.remove(fk)
        names[fk] = nil
    }

    public func removeAll(exceptProfile profileId: String) {
        let keep = Self.digest(profileId)
        for key in lru.keysByRecency where key.profile != keep {
            lru.remove(key)
            names[key] = nil
        }
        for profile in AtomicFile.list(directory) where Self.isDigest(profile) && profile != keep {
            try? FileManager.default.removeItem(atPath: directory + "/" + profile)
        }
        AtomicFile.syncDirectory(directory)
    }

    private func fileKey(_ key: CacheKey) -> FileKey {
        if let known = fileKeys[key] { return known }
        let fk = FileKey(profile: Self.digest(key.profileId), placement: Self.digest(key.placementId))
        if fileKeys.count >= 4096 { fileKeys.removeAll(keepingCapacity: true) }
        fileKeys[key] = fk
        return fk
    }

    private func path(_ fk: FileKey) -> String { "\(directory)/\(fk.profile)/\(fk.placement).entry" }

    private func deleteFile(_ fk: FileKey) { AtomicFile.remove(path(fk)) }

    static func digest(_ s: String) -> String { Digest.hex(Digest.sha256(Array(s.utf8))) }

    static func isDigest(_ name: String) -> Bool {
        name.utf8.count == 64 && name.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    /// The key an entry file says it belongs to (nil for an unreadable file; FlowCache reports it when read).
    static func cacheKey(ofEntry path: String) -> CacheKey? {
        guard let bytes = AtomicFile.read(path), let nl = bytes.firstIndex(of: 10),
              let root = try? JSON5.parse(bytes: Array(bytes[(nl + 1)...])),
              let profile = root["profileId"]?.stringValue, let placement = root["placementId"]?.stringValue else { return nil }
        return CacheKey(profileId: profile, placementId: placement)
    }
}

/// The layout cache over real files: `<dir>/<sha256(id + "\n" + version)>.layout`, each written
/// atomically with a SHA-256 checksum. A damaged file is deleted and read as a miss.
public final class FileLayoutStore: LayoutStore {
    /// The store's directory.
    public let directory: String
    private var memory: [LayoutRef: Layout] = [:]
    static let magic = "flowscope-layout-1 "

    /// Opens (creating it if needed) a layout store in `directory`.
    public init(directory: String) throws(FileStoreError) {
        self.directory = directory
        try AtomicFile.makeDirectory(directory)
    }

    /// The file that holds a layout.
    public func path(for ref: LayoutRef) -> String {
        "\(directory)/\(FileFlowStore.digest("\(ref.id)\n\(ref.version)")).layout"
    }

    public func read(_ ref: LayoutRef) -> Layout? {
        if let l = memory[ref] { return l }
        let file = path(for: ref)
        guard let bytes = AtomicFile.read(file) else { return nil }
        guard let layout = Self.decode(bytes), layout.ref == ref else {
            AtomicFile.remove(file)
            return nil
        }
        memory[ref] = layout
        return layout
    }

    public func write(_ layout: Layout) {
        memory[layout.ref] = layout
        try? AtomicFile.write(Self.encode(layout), to: path(for: layout.ref))
    }

    static func encode(_ layout: Layout) -> [UInt8] {
        let body = Array(RESTCoding.layoutJSON(layout).jsonText.utf8)
        return Array((magic + Digest.hex(Digest.sha256(body)) + "\n").utf8) + body
    }

    static func decode(_ bytes: [UInt8]) -> Layout? {
        guard let nl = bytes.firstIndex(of: 10) else { return nil }
        let header = String(decoding: bytes[..<nl], as: UTF8.self)
        let body = Array(bytes[(nl + 1)...])
        guard header.hasPrefix(magic), header.dropFirst(magic.count) == Digest.hex(Digest.sha256(body)),
              let root = try? JSON5.parse(bytes: body) else { return nil }
        return try? RESTCoding.layout(from: JSONCursor(root))
    }
}

/// A bounded disk cache of downloaded images (layout asset prefetch): `<dir>/<sha256(url)>.asset`,
/// checksummed, least-recently-used eviction. Safe to use from several tasks at once.
public final class AssetDiskCache: Sendable {
    /// The cache's directory.
    public let directory: String
    private let lru: Mutex<LRUIndex<String>>
    static let magic = "flowscope-asset-1 "

    /// Opens (creating it if needed) an asset cache in `directory`, capped at `maxBytes` (default 50 MiB).
    public init(directory: String, maxBytes: Int = 50 * 1024 * 1024) throws(FileStoreError) {
        self.directory = directory
        try AtomicFile.makeDirectory(directory)
        var index = LRUIndex<String>(maxBytes: maxBytes)
        var found: [(String, Int, Double)] = []
        for file in AtomicFile.list(directory) {
            if file.hasPrefix(".tmp-") { AtomicFile.remove(directory + "/" + file); continue }
            guard file.hasSuffix(".asset"), let st = AtomicFile.fileStat(directory + "/" + file) else { continue }
            found.append((String(file.dropLast(6)), st.size, st.mtime))
        }
        for f in found.sorted(by: { $0.2 < $1.2 }) {
            for victim in index.record(f.0, bytes: f.1) { AtomicFile.remove("\(directory)/\(victim.key).asset") }
        }
        lru = Mutex(index)
    }

    /// The cached bytes of `url`, or nil (a damaged file is deleted and is a miss).
    public func load(_ url: String) -> [UInt8]? {
        let name = FileFlowStore.digest(url)
        guard lru.withLock({ $0.contains(name) }) else { return nil }
        let file = "\(directory)/\(name).asset"
        guard let bytes = AtomicFile.read(file), let nl = bytes.firstIndex(of: 10) else {
            lru.withLock { _ = $0.remove(name) }
            AtomicFile.remove(file)
            return nil
        }
        let body = Array(bytes[(nl + 1)...])
        guard String(decoding: bytes[..<nl], as: UTF8.self) == Self.magic + Digest.hex(Digest.sha256(body)) else {
            lru.withLock { _ = $0.remove(name) }
            AtomicFile.remove(file)
            return nil
        }
        lru.withLock { $0.touch(name) }
        AtomicFile.touch(file)
        return body
    }

    /// Stores the bytes of `url`; returns how many bytes were evicted to stay under the cap.
    @discardableResult
    public func store(_ url: String, _ body: [UInt8]) -> Int {
        let name = FileFlowStore.digest(url)
        let bytes = Array((Self.magic + Digest.hex(Digest.sha256(body)) + "\n").utf8) + body
        do { try AtomicFile.write(bytes, to: "\(directory)/\(name).asset") } catch { return 0 }
        let victims = lru.withLock { $0.record(name, bytes: bytes.count) }
        for v in victims { AtomicFile.remove("\(directory)/\(v.key).asset") }
        return victims.reduce(0) { $0 + $1.bytes }
    }

    /// Bytes currently cached.
    public var totalBytes: Int { lru.withLock { $0.totalBytes } }
}
