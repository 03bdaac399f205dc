import FlowEvents
import FlowJSON
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes events to a JSON Lines file, one envelope per line (events-and-metrics.md), with
/// size-based rotation.
///
/// Durability (`fsync` option):
/// - `batch` (default): at the end of every `consume` call all its lines are written and
///   `fsync`ed, so once `consume` returns the batch survives a crash of the process or the machine.
///   The pipeline hands over everything it took from the sink's queue in one call
///   (`consume(batches:)`), so a burst costs one fsync, not one per `maxBatch` events.
/// - `always`: every line is written and `fsync`ed on its own before the next one.
/// - `never`: lines are buffered (up to 64 KiB) and written when the buffer fills, on rotation and
///   on `flush()`; never `fsync`ed. A crash of the process loses at most the buffer; a crash of
///   the machine may lose what the OS had not yet written.
/// `flush()` (called at pipeline shutdown) writes everything out and, unless `never`, fsyncs.
public final class JSONLinesSink: ClosingSink {
    /// The type name in the config's `sinks` list.
    public static let type = "jsonl"

    /// When to fsync.
    public enum FsyncPolicy: String, Sendable, CaseIterable {
        case never, batch, always
    }

    /// The sink's name in metrics and logs.
    public let name: String
    /// The file written.
    public let path: String
    /// Rotation threshold in bytes.
    public let rotateBytes: Int
    /// Rotated files kept (`path.1` ... `path.keep`).
    public let keep: Int
    /// When to fsync.
    public let fsync: FsyncPolicy

    private static let bufferLimit = 64 * 1024
    /// With `fsync: batch`, the buffer is written (not yet fsynced) whenever it reaches this size.
    private static let batchWriteLimit = 1024 * 1024
    private let file: Mutex<FileState>

    /// Opens (appending to) or creates `path`, creating its parent directories.
    /// - Throws: `JSONLinesError` when the directory or file cannot be created.
    public init(name: String = "jsonl", path: String, rotateBytes: Int = 64 * 1024 * 1024, keep: Int = 3,
                fsync: FsyncPolicy = .batch) throws {
        self.name = name
        self.path = path
        self.rotateBytes = max(1, rotateBytes)
        self.keep = max(0, keep)
        self.fsync = fsync
        let directory = (path as NSString).deletingLastPathComponent
        if !directory.isEmpty {
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } catch {
                throw JSONLinesError(path: path, message: "cannot create directory \(directory): \(error.localizedDescription)")
            }
        }
        var state = FileState()
        try state.open(path)
        self.file = Mutex(state)
    }

    /// Builds the sink from its config entry. Options: `path` (default
    /// `<stateDirectory>/events.jsonl`), `rotateBytes` (default 67108864), `keep` (default 3),
    /// `fsync` (`never`, `batch` or `always`; default `batch`), `name` (default `jsonl`).
    public static func make(_ context: SinkContext) throws -> JSONLinesSink {
        let s = try settings(context)
        do {
            return try JSONLinesSink(name: s.name, path: s.path, rotateBytes: s.rotateBytes, keep: s.keep, fsync: s.fsync)
        } catch let error as JSONLinesError {
            throw JSONInputError(path: context.path(of: "path"), message: error.message)
        }
    }

    /// The options of a config entry, checked, without opening anything.
    static func settings(_ context: SinkContext) throws(JSONInputError)
        -> (name: String, path: String, rotateBytes: Int, keep: Int, fsync: FsyncPolicy) {
        try context.checkKeys(["path", "rotateBytes", "keep", "fsync", "name"])
        let path = try context.string("path") ?? (context.stateDirectory as NSString).appendingPathComponent("events.jsonl")
        let policy = try context.choice("fsync", FsyncPolicy.allCases.map(\.rawValue)).flatMap(FsyncPolicy.init(rawValue:)) ?? .batch
        return (try context.string("name") ?? "jsonl", path, try context.int("rotateBytes", in: 1...Int.max) ?? 64 * 1024 * 1024,
                try context.int("keep", in: 0...1000) ?? 3, policy)
    }

    /// Registers the `jsonl` type.
    public static func register(in registry: inout SinkRegistry) {
        registry.register(type, validate: { context in _ = try settings(context) }) { context in try make(context) }
    }

    /// Write failures so far (disk full, file removed, ...); the sink keeps going.
    public var writeErrors: Int { file.withLock { $0.writeErrors } }
    /// The last write failure, if any.
    public var lastError: String? { file.withLock { $0.lastError } }
    /// Rotations done so far.
    public var rotations: Int { file.withLock { $0.rotations } }

    /// Appends the batch, rotating when a line would take the file past `rotateBytes`.
    public func consume(_ batch: [Envelope]) {
        consume(batches: [batch])
    }

    /// Appends every batch, each line serialised straight into the sink's reused buffer; with
    /// `fsync: batch` all of them are written and fsynced once at the end of the call (the
    /// pipeline hands over everything it took from the queue in one call), so once this returns
    /// every line is durable.
    public func consume(batches: [[Envelope]]) {
        file.withLock { state in
            for batch in batches {
                // Each envelope is lent in place (no copy, no reference counting).
                batch.withUnsafeBufferPointer { envelopes in
                    for i in envelopes.indices { append(envelopes[i], to: &state) }
                }
            }
            if fsync == .batch { state.write(sync: true) }
        }
    }

    /// Serialises one line at the end of the buffer, rotating first when it would take the file
    /// past `rotateBytes`, and writes according to the fsync policy.
    private func append(_ envelope: Envelope, to state: inout FileState) {
        let start = state.count
        state.appendLine(envelope)
        let size = state.count - start
        if state.size + start + size > rotateBytes && state.size + start > 0 {
            // Rare: the line goes to the next file; what precedes it finishes this one.
            let line = Array(UnsafeBufferPointer(start: state.bytes + start, count: size))
            state.count = start
            state.write(sync: fsync != .never)
            state.rotate(path, keep: keep)
            line.withUnsafeBufferPointer { state.append($0) }
        }
        switch fsync {
        case .always: state.write(sync: true)
        // Bounded memory for a large take; the fsync comes at the end of the call.
        case .batch: if state.count >= Self.batchWriteLimit { state.write(sync: false) }
        case .never: if state.count >= Self.bufferLimit { state.write(sync: false) }
        }
    }

    /// Writes out everything buffered and, unless the policy is `never`, fsyncs.
    public func flush() {
        file.withLock { $0.write(sync: fsync != .never) }
    }

    /// Writes out what is buffered and closes the file (the pipeline calls it at shutdown);
    /// a later batch reopens it.
    public func close() {
        file.withLock { state in
            state.write(sync: fsync != .never)
            state.close()
        }
    }
}

/// The jsonl sink could not create its file.
public struct JSONLinesError: Error, Sendable, CustomStringConvertible {
    /// The file concerned.
    public var path: String
    /// What went wrong.
    public var message: String
    public var description: String { "\(path): \(message)" }
}

private struct FileState: ~Copyable {
    var fd: Int32 = -1
    var path = ""
    var size = 0
    /// Lines not yet written: `count` bytes at `bytes`, which has room for `capacity`.
    var bytes: UnsafeMutablePointer<UInt8>
    var capacity: Int
    var count = 0
    /// Serialises the lines (and keeps the date text of the last second written).
    var writer = EnvelopeLineWriter()
    var writeErrors = 0
    var lastError: String?
    var rotations = 0

    init() {
        capacity = 128 * 1024
        bytes = .allocate(capacity: capacity)
    }

    /// Appends `envelope`'s line and a newline to the buffer, growing it when the line does not fit.
    mutating func appendLine(_ envelope: Envelope) {
        while true {
            if capacity - count < 4096 { grow(to: capacity * 2) }
            // One byte is kept for the newline.
            if let n = writer.write(envelope, to: bytes + count, capacity: capacity - count - 1) {
                bytes[count + n] = 10
                count += n + 1
                return
            }
            grow(to: capacity * 2)
        }
    }

    /// Appends bytes to the buffer.
    mutating func append(_ source: UnsafeBufferPointer<UInt8>) {
        guard let base = source.baseAddress else { return }
        if capacity - count < source.count { grow(to: max(capacity * 2, count + source.count)) }
        (bytes + count).update(from: base, count: source.count)
        count += source.count
    }

    mutating func grow(to newCapacity: Int) {
        let larger = UnsafeMutablePointer<UInt8>.allocate(capacity: newCapacity)
        larger.update(from: bytes, count: count)
        bytes.deallocate()
        bytes = larger
        capacity = newCapacity
    }

    mutating func open(_ path: String) throws(JSONLinesError) {
        self.path = path
        let fd = POSIX.open(path)
        guard fd >= 0 else { throw JSONLinesError(path: path, message: "cannot open: \(String(cString: strerror(errno)))") }
        var info = stat()
        size = fstat(fd, &info) == 0 ? Int(info.st_size) : 0
        self.fd = fd
    }

    /// Writes the buffer out (all of it, retrying partial writes) and optionally fsyncs.
    mutating func write(sync: Bool) {
        if fd < 0 {
            do { try open(path) } catch {
                fail(error.message)
                count = 0
                return
            }
        }
        if count > 0 {
            var offset = 0
            var ok = true
            while offset < count {
                let n = POSIX.write(fd, bytes + offset, count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    ok = false
                    break
                }
                offset += n
            }
            if ok { size += count } else { fail("write failed: \(String(cString: strerror(errno)))") }
            count = 0
        }
        if sync, POSIX.fsync(fd) != 0 { fail("fsync failed: \(String(cString: strerror(errno)))") }
    }

    /// path.(keep-1) -> path.keep, ..., path -> path.1, then a fresh path.
    mutating func rotate(_ path: String, keep: Int) {
        close()
        if keep == 0 {
            unlink(path)
        } else {
            unlink("\(path).\(keep)")
            if keep > 1 {
                for i in stride(from: keep - 1, through: 1, by: -1) { rename("\(path).\(i)", "\(path).\(i + 1)") }
            }
            rename(path, "\(path).1")
        }
        rotations += 1
        do { try open(path) } catch { fail(error.message) }
    }

    mutating func close() {
        if fd >= 0 { POSIX.close(fd) }
        fd = -1
    }

    mutating func fail(_ message: String) {
        writeErrors += 1
        lastError = message
    }

    deinit {
        if fd >= 0 { POSIX.close(fd) }
        bytes.deallocate()
    }
}

/// The system calls, out of reach of FileState's methods of the same names.
private enum POSIX {
    static func open(_ path: String) -> Int32 { openFile(path) }
    static func write(_ fd: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int { writeFile(fd, bytes, count) }
    static func fsync(_ fd: Int32) -> Int32 { syncFile(fd) }
    static func close(_ fd: Int32) { closeFile(fd) }
}

private func openFile(_ path: String) -> Int32 { open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644) }
private func writeFile(_ fd: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int { write(fd, bytes, count) }
private func syncFile(_ fd: Int32) -> Int32 { fsync(fd) }
private func closeFile(_ fd: Int32) { _ = close(fd) }
