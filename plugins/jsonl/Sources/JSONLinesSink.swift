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
/// - `interval` (default): at the end of every `consume` call all its lines are written to the
///   file, so once `consume` returns the batch survives a crash of the process; a background
///   thread of the sink fdatasyncs what was written at most once per `fsyncInterval` seconds (1 by
///   default), so a crash of the machine loses at most about the last `fsyncInterval` of lines.
///   While nothing is written the thread only wakes once per interval to find nothing to do; it
///   stops at `close()` or when the sink goes away.
/// - `batch`: at the end of every `consume` call all its lines are written and `fsync`ed, so once
///   `consume` returns the batch survives a crash of the process or the machine.
///   The pipeline hands over everything it took from the sink's queue in one call
///   (`consume(batches:)`), so a burst costs one fsync, not one per `maxBatch` events.
/// - `always`: every line is written and `fsync`ed on its own before the next one.
/// - `never`: lines are buffered (up to 64 KiB) and written when the buffer fills, on rotation and
///   on `flush()`; never `fsync`ed. A crash of the process loses at most the buffer; a crash of
///   the machine may lose what the OS had not yet written.
/// `flush()` (called at pipeline shutdown) writes everything out and, unless `never`, fsyncs.
///
/// ```swift
/// let sink = try JSONLinesSink(path: ".flowscope/events.jsonl", fsync: .interval, fsyncInterval: 0.5)
/// ```
public final class JSONLinesSink: EventSink {
    /// The type name in the config's `sinks` list.
    public static let type = "jsonl"

    /// When to fsync.
    public enum FsyncPolicy: String, Sendable, CaseIterable {
        /// Lines buffered in memory (up to 64 KiB), never fsynced.
        case never
        /// Lines written at the end of each `consume` call, fdatasynced in the background at most
        /// once per `fsyncInterval`.
        case interval
        /// Lines written and fsynced at the end of each `consume` call.
        case batch
        /// Each line written and fsynced on its own.
        case always
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
    /// With `fsync: interval`, the longest time in seconds between a write and its fdatasync.
    public let fsyncInterval: Double

    private static let bufferLimit = 64 * 1024
    /// With `fsync: batch`, the buffer is written (not yet fsynced) whenever it reaches this size.
    private static let batchWriteLimit = 1024 * 1024
    /// The longest `fsyncInterval` accepted (a day), so the timer's deadline stays representable.
    static let longestFsyncInterval = 86_400.0
    private let file: Mutex<FileState>
    private let backgroundSyncs = Atomic<Int>(0)

    /// Opens (appending to) or creates `path`, creating its parent directories.
    /// - Throws: `JSONLinesError` when the directory or file cannot be created.
    /// `fsyncInterval` is clamped to 0.001...86400 seconds.
    public init(name: String = "jsonl", path: String, rotateBytes: Int = 64 * 1024 * 1024, keep: Int = 3,
                fsync: FsyncPolicy = .interval, fsyncInterval: Double = 1) throws {
        self.name = name
        self.path = path
        self.rotateBytes = max(1, rotateBytes)
        self.keep = max(0, keep)
        self.fsync = fsync
        self.fsyncInterval = fsyncInterval.isNaN ? 1 : min(max(fsyncInterval, 0.001), Self.longestFsyncInterval)
        let directory = FilePaths.directory(of: path)
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

    /// Write failures so far (disk full, file removed, ...); the sink keeps going.
    public var writeErrors: Int { file.withLock { $0.writeErrors } }
    /// The last write failure, if any.
    public var lastError: String? { file.withLock { $0.lastError } }
    /// `jsonl`.
    public var type: String { Self.type }
    /// Durable: ingest is accepted only while this sink's queue has room (``EventSink/isDurable``).
    public var isDurable: Bool { true }
    /// Down from a failed write, open, fsync or rotation until the next write that works; dropped
    /// counts the lines that never reached the file.
    public var health: SinkHealth {
        file.withLock { SinkHealth(up: !$0.failing, errors: UInt64($0.writeErrors), lastError: $0.lastError, dropped: $0.lost) }
    }
    /// Rotations done so far.
    public var rotations: Int { file.withLock { $0.rotations } }
    /// Background fdatasyncs done so far by the `interval` policy's timer (one per tick that found
    /// written, unsynced lines; `flush()` and `close()` are not counted).
    public var syncs: Int { backgroundSyncs.load(ordering: .relaxed) }

    /// Appends the batch, rotating when a line would take the file past `rotateBytes`.
    public func consume(_ batch: [Envelope]) {
        consume(batches: [batch])
    }

    /// Appends every batch, each line serialised straight into the sink's reused buffer; with
    /// `fsync: batch` all of them are written and fsynced once at the end of the call (the
    /// pipeline hands over everything it took from the queue in one call), so once this returns
    /// every line is durable. With `fsync: interval` they are written at the end of the call (in
    /// the file once this returns) and fdatasynced by the sink's timer.
    public func consume(batches: [[Envelope]]) {
        file.withLock { state in
            for batch in batches {
                // Each envelope is lent in place (no copy, no reference counting).
                batch.withUnsafeBufferPointer { envelopes in
                    for i in envelopes.indices { append(envelopes[i], to: &state) }
                }
            }
            switch fsync {
            case .batch: state.write(sync: true)
            case .interval:
                state.write(sync: false)
                if state.timer == nil && (state.unsynced || !state.retired.isEmpty) { state.timer = startTimer() }
            case .always, .never: break
            }
        }
    }

    /// Starts the `interval` policy's timer: a thread that wakes every `fsyncInterval` and
    /// fdatasyncs what was written since the last tick. Signalling the returned semaphore stops it.
    /// The thread holds the sink weakly, so the sink can go away (its deinit stops the timer).
    private func startTimer() -> DispatchSemaphore {
        let stop = DispatchSemaphore(value: 0)
        let interval = fsyncInterval
        // `fsync:<sink name>`, cut to the 15 bytes Linux keeps for a thread name.
        var label = "fsync:" + name
        while label.utf8.count > 15 { label.removeLast() }
        let thread = Thread { [weak self, label] in
            nameThisThread(label)
            while stop.wait(timeout: .now() + interval) == .timedOut {
                guard let self else { return }
                self.syncWritten()
            }
        }
        thread.name = label
        thread.stackSize = 256 * 1024
        thread.start()
        return stop
    }

    /// One tick of the timer: under the lock, takes a duplicate of the file descriptor (when lines
    /// were written since the last sync) and those of rotated files not yet synced; then, with the
    /// lock released, fdatasyncs and closes them. A duplicate keeps the open file valid even when a
    /// rotation or `close()` closes the sink's descriptor meanwhile.
    private func syncWritten() {
        var pending: [Int32] = []
        let dupFailure: String? = file.withLock { state in
            swap(&pending, &state.retired)
            guard state.unsynced, state.fd >= 0 else { return nil }
            let copy = POSIX.dup(state.fd)
            // Without a descriptor the lines stay marked unsynced and the next tick tries again.
            guard copy >= 0 else { return "dup failed: \(String(cString: strerror(errno)))" }
            pending.append(copy)
            state.unsynced = false
            return nil
        }
        var failure = dupFailure
        for fd in pending {
            if POSIX.datasync(fd) != 0 { failure = "fdatasync failed: \(String(cString: strerror(errno)))" }
            POSIX.close(fd)
        }
        if !pending.isEmpty { backgroundSyncs.add(1, ordering: .relaxed) }
        if let failure { file.withLock { $0.fail(failure) } }
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
            state.write(sync: fsync == .batch || fsync == .always)
            // A kept file's unsynced lines are left to the timer (with keep 0 it is deleted).
            if fsync == .interval && keep > 0 { state.retireUnsynced() }
            state.rotate(path, keep: keep)
            line.withUnsafeBufferPointer { state.append($0) }
        }
        switch fsync {
        case .always: state.write(sync: true)
        // Bounded memory for a large take; the fsync comes at the end of the call (or the timer's).
        case .batch, .interval: if state.count >= Self.batchWriteLimit { state.write(sync: false) }
        case .never: if state.count >= Self.bufferLimit { state.write(sync: false) }
        }
    }

    /// Writes out everything buffered and, unless the policy is `never`, fsyncs (with `interval`,
    /// rotated files not yet synced too).
    public func flush() {
        file.withLock { state in
            state.write(sync: fsync != .never)
            state.syncRetired()
        }
    }

    /// Writes out what is buffered, fsyncs as `flush()` does, stops the `interval` timer and closes
    /// the file (the pipeline calls it at shutdown); a later batch reopens it (and restarts the timer).
    public func close() {
        file.withLock { state in
            state.write(sync: fsync != .never)
            state.syncRetired()
            state.stopTimer()
            state.close()
        }
    }

    deinit {
        file.withLock { $0.stopTimer() }
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
    /// The last write, open, sync or rotation failed (cleared by the next write that works).
    var failing = false
    /// Lines that never reached the file (a write or open that failed).
    var lost: UInt64 = 0
    var rotations = 0
    /// Lines were written to `fd` since its last sync.
    var unsynced = false
    /// Duplicated descriptors of rotated files with lines not yet synced (`interval` policy).
    var retired: [Int32] = []
    /// The `interval` policy's timer while it runs (signal it to stop it).
    var timer: DispatchSemaphore?
    /// At most this many rotated files wait for the timer; beyond, a rotation syncs at once.
    static let retiredLimit = 16

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
                lost += lines(from: 0)
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
            if ok {
                size += count
                failing = false
            } else {
                fail("write failed: \(String(cString: strerror(errno)))")
                // A line cut short counts as lost too: its newline was not written.
                lost += lines(from: offset)
            }
            if offset > 0 { unsynced = true }
            count = 0
        }
        if sync {
            if POSIX.fsync(fd) != 0 { fail("fsync failed: \(String(cString: strerror(errno)))") }
            unsynced = false
        }
    }

    /// Before a rotation closes `fd`: hands its unsynced lines to the timer (a duplicate
    /// descriptor), or syncs them now when too many rotated files are already waiting.
    mutating func retireUnsynced() {
        guard unsynced, fd >= 0 else { return }
        if retired.count < Self.retiredLimit, case let copy = POSIX.dup(fd), copy >= 0 {
            retired.append(copy)
        } else if POSIX.datasync(fd) != 0 {
            fail("fdatasync failed: \(String(cString: strerror(errno)))")
        }
        unsynced = false
    }

    /// Syncs and closes the rotated files still waiting for the timer.
    mutating func syncRetired() {
        for copy in retired {
            if POSIX.datasync(copy) != 0 { fail("fdatasync failed: \(String(cString: strerror(errno)))") }
            POSIX.close(copy)
        }
        retired.removeAll()
    }

    mutating func stopTimer() {
        timer?.signal()
        timer = nil
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
            if rename(path, "\(path).1") != 0 && errno != ENOENT {
                fail("cannot rotate \(path): \(String(cString: strerror(errno)))")
            }
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
        failing = true
    }

    /// Lines (newlines) in the buffer from `offset` on.
    func lines(from offset: Int) -> UInt64 {
        var n: UInt64 = 0
        for i in offset..<count where bytes[i] == 10 { n += 1 }
        return n
    }

    deinit {
        if fd >= 0 { POSIX.close(fd) }
        for copy in retired { POSIX.close(copy) }
        bytes.deallocate()
    }
}

/// The system calls, out of reach of FileState's methods of the same names.
private enum POSIX {
    static func open(_ path: String) -> Int32 { openFile(path) }
    static func write(_ fd: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int { writeFile(fd, bytes, count) }
    static func fsync(_ fd: Int32) -> Int32 { syncFile(fd) }
    static func datasync(_ fd: Int32) -> Int32 { syncFileData(fd) }
    static func dup(_ fd: Int32) -> Int32 { duplicateFile(fd) }
    static func close(_ fd: Int32) { closeFile(fd) }
}

private func openFile(_ path: String) -> Int32 { open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644) }
private func writeFile(_ fd: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int { write(fd, bytes, count) }
private func syncFile(_ fd: Int32) -> Int32 { fsync(fd) }
#if os(Linux)
private func syncFileData(_ fd: Int32) -> Int32 { fdatasync(fd) }
#else
private func syncFileData(_ fd: Int32) -> Int32 { fsync(fd) }
#endif
/// Names the calling thread (seen in `top -H`, `/proc/<pid>/task/*/comm`): Foundation's
/// `Thread.name` does not reach the kernel here, and Glibc's module lacks `pthread_setname_np`.
private func nameThisThread(_ name: String) {
    #if os(Linux)
    let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
    guard fd >= 0 else { return }
    _ = name.utf8CString.withUnsafeBufferPointer { write(fd, $0.baseAddress, $0.count - 1) }
    _ = close(fd)
    #endif
}
private func duplicateFile(_ fd: Int32) -> Int32 { fcntl(fd, F_DUPFD_CLOEXEC, 0) }
private func closeFile(_ fd: Int32) { _ = close(fd) }

extension JSONLinesSink {
    /// The `jsonl` sink type. Options: `path` (default `<stateDirectory>/events.jsonl`; relative to
    /// the working directory), `rotateBytes` (default 67108864), `keep` (default 3), `fsync`
    /// (`never`, `interval`, `batch` or `always`; default `interval`), `fsyncInterval` (seconds,
    /// > 0; default 1).
    public struct Factory: SinkFactory {
        /// The options of a `jsonl` entry.
        public struct Options: Sendable, Equatable {
            public var path: String
            public var rotateBytes = 64 * 1024 * 1024
            public var keep = 3
            public var fsync = FsyncPolicy.interval
            public var fsyncInterval = 1.0
        }

        /// `jsonl`.
        public let type = JSONLinesSink.type

        /// The factory.
        public init() {}

        /// Reads the options; opens nothing.
        public func options(from context: SinkContext) throws(JSONInputError) -> Options {
            try context.checkKeys(["path", "rotateBytes", "keep", "fsync", "fsyncInterval"])
            var o = Options(path: try context.string("path") ?? (context.stateDirectory as NSString).appendingPathComponent("events.jsonl"))
            o.fsync = try context.choice("fsync", FsyncPolicy.allCases.map(\.rawValue)).flatMap(FsyncPolicy.init(rawValue:)) ?? o.fsync
            if let option = context.cursor.optional("fsyncInterval") {
                guard let seconds = option.value.numberValue, seconds > 0, seconds <= longestFsyncInterval else {
                    throw option.expected("a number of seconds > 0 and <= \(Int(longestFsyncInterval))")
                }
                o.fsyncInterval = seconds
            }
            o.rotateBytes = try context.int("rotateBytes", in: 1...Int.max) ?? o.rotateBytes
            o.keep = try context.int("keep", in: 0...1000) ?? o.keep
            return o
        }

        /// The events file, `path`.
        public func requirements(_ o: Options, context: SinkContext) -> SinkRequirements {
            SinkRequirements(files: [.init(option: "path", path: o.path)])
        }

        /// Opens (or creates) the file.
        public func makeSink(_ o: Options, context: SinkContext) throws -> any EventSink {
            do {
                return try JSONLinesSink(name: context.name, path: o.path, rotateBytes: o.rotateBytes, keep: o.keep, fsync: o.fsync,
                                         fsyncInterval: o.fsyncInterval)
            } catch let error as JSONLinesError {
                throw JSONInputError(path: context.path(of: "path"), message: error.message)
            }
        }
    }
}
