import FlowJSON
import Foundation
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif

// Every call FlowFetch makes into the C library for files is in this file. They are POSIX and
// spelled the same on Linux and Apple platforms, except inside the `#if canImport(Darwin)` branches
// below. Tests/PackageGraphTests/PlatformCallTests.swift lists each of them with its branch, and
// fails on a call into the C library anywhere else in the libraries apps link.

/// Atomic file writes and whole-file reads (POSIX).
public enum AtomicFile {
    /// Writes `bytes` to `path` atomically: a temporary file in the same directory, flushed to the
    /// drive, renamed over `path`, then the directory flushed. A reader sees the old file or the new
    /// one, never a torn one.
    public static func write(_ bytes: [UInt8], to path: String) throws(FileStoreError) {
        let parent = FilePaths.directory(of: path)
        let dir = parent.isEmpty ? "." : parent  // a bare file name is in the working directory
        let tmp = dir + "/.tmp-" + String(UInt64.random(in: 1...UInt64.max), radix: 16)
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw FileStoreError(path: tmp, message: "cannot create: \(errnoText())") }
        var ok = bytes.withUnsafeBytes { buf -> Bool in
            var offset = 0
            while offset < buf.count {
                let n = systemWrite(fd, buf.baseAddress! + offset, buf.count - offset)
                if n < 0 { if errno == EINTR { continue }; return false }
                offset += n
            }
            return true
        }
        if ok { ok = flushToDrive(fd) }
        let reason = errnoText()
        close(fd)
        guard ok, rename(tmp, path) == 0 else {
            unlink(tmp)
            throw FileStoreError(path: path, message: "cannot write: \(ok ? errnoText() : reason)")
        }
        syncDirectory(dir)
    }

    /// The whole file, or nil when it cannot be read.
    public static func read(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { systemRead(fd, $0.baseAddress, $0.count) }
            if n < 0 { if errno == EINTR { continue }; return nil }
            if n == 0 { return out }
            out.append(contentsOf: chunk[0..<n])
        }
    }

    /// Creates a directory and its parents (mode 0700 for new ones). The error names the part of the
    /// path at fault: "/dev/null: not a directory", "/root/x: cannot create the directory: Permission denied".
    public static func makeDirectory(_ path: String) throws(FileStoreError) {
        var prefix = path.hasPrefix("/") ? "" : "."
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            prefix = prefix.isEmpty ? "/" + part : prefix + "/" + part
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: prefix, isDirectory: &isDirectory) {
                guard isDirectory.boolValue else { throw FileStoreError(path: prefix, message: "not a directory") }
                continue
            }
            if mkdir(prefix, 0o700) != 0 && errno != EEXIST {
                throw FileStoreError(path: prefix, message: "cannot create the directory: \(errnoText())")
            }
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw FileStoreError(path: path, message: "not a directory")
        }
    }

    /// Why the file at `path` cannot be read (`no such file or directory`, `is a directory`, ...), or nil.
    static func readProblem(_ path: String) -> String? {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            return "is a directory"
        }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let text = errnoText()
            return text.prefix(1).lowercased() + text.dropFirst()
        }
        close(fd)
        return nil
    }

    /// Deletes a file; a file that is already gone is no error.
    static func remove(_ path: String) { unlink(path) }

    /// Flushes a directory's entries (a rename in it) to the drive.
    static func syncDirectory(_ dir: String) {
        let fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = flushToDrive(fd)
        close(fd)
    }

    /// Flushes what was written to `fd` to the drive itself. On Linux `fsync` does. On Apple
    /// platforms `fsync` only hands the data to the drive, which may keep it in its cache across a
    /// power loss; `F_FULLFSYNC` asks the drive to write it, and is refused by some file systems
    /// (network and FAT volumes), where `fsync` is the best there is.
    private static func flushToDrive(_ fd: Int32) -> Bool {
        #if canImport(Darwin)
        return fcntl(fd, F_FULLFSYNC) != -1 || fsync(fd) == 0
        #else
        return fsync(fd) == 0
        #endif
    }

    /// Size and modification time (seconds since 1970) of a regular file, through Foundation.
    static func fileStat(_ path: String) -> (size: Int, mtime: Double)? {
        let keys: Set<URLResourceKey> = [.isRegularFileKey, .fileSizeKey, .contentModificationDateKey]
        guard let values = try? URL(fileURLWithPath: path).resourceValues(forKeys: keys), values.isRegularFile == true,
              let size = values.fileSize, let modified = values.contentModificationDate else { return nil }
        return (size, modified.timeIntervalSince1970)
    }

    /// Sets a file's modification time to now (recency that survives a restart).
    static func touch(_ path: String) { _ = utimes(path, nil) }

    static func list(_ dir: String) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
    }

    static func errnoText() -> String { String(cString: strerror(errno)) }
}

/// write(2) and read(2), named apart from ``AtomicFile``'s own `write` and `read`.
#if canImport(Darwin)
private func systemWrite(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int { Darwin.write(fd, buffer, count) }
private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int { Darwin.read(fd, buffer, count) }
#else
private func systemWrite(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int { Glibc.write(fd, buffer, count) }
private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int { Glibc.read(fd, buffer, count) }
#endif
