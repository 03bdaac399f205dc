#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// File operations on the state directory (default `.flowscope/`): private directories, private files.
enum StateDirectory {
    /// Largest file read back (certificates, keys, tokens are a few KiB).
    static let maxFileBytes = 1 << 20

    static func exists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }

    /// Creates `path` with mode 0700 if absent; an existing non-directory is an error.
    static func create(_ path: String) throws(ServerFileError) {
        if mkdir(path, 0o700) == 0 { return }
        let err = errno
        var st = stat()
        if err == EEXIST, stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR { return }
        throw ServerFileError(path: path, message: "cannot create directory: \(describe(errno: err == EEXIST ? ENOTDIR : err))")
    }

    /// Writes `contents` to `path` through a temporary file and a rename, with `mode` from the start.
    static func writeFile(_ path: String, contents: String, mode: mode_t) throws(ServerFileError) {
        let temporary = path + ".tmp-\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode)
        guard fd >= 0 else { throw ServerFileError(path: path, message: "cannot write: \(describe(errno: errno))") }
        let bytes = Array(contents.utf8)
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, bytes.count - written) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                let err = errno
                close(fd)
                unlink(temporary)
                throw ServerFileError(path: path, message: "cannot write: \(describe(errno: err))")
            }
            written += n
        }
        fchmod(fd, mode)  // the umask may have narrowed or the file pre-existed
        fsync(fd)
        close(fd)
        guard rename(temporary, path) == 0 else {
            let err = errno
            unlink(temporary)
            throw ServerFileError(path: path, message: "cannot write: \(describe(errno: err))")
        }
    }

    /// Reads a small text file; `what` names what was expected in the error.
    static func readFile(_ path: String, what: String) throws(ServerFileError) -> String {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let err = errno
            let reason = err == ENOENT ? "file not found" : "cannot read: \(describe(errno: err))"
            throw ServerFileError(path: path, message: "\(reason); expected \(what)")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            throw ServerFileError(path: path, message: "not a regular file; expected \(what)")
        }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw ServerFileError(path: path, message: "cannot read: \(describe(errno: errno))") }
            if n == 0 { break }
            bytes += chunk[0..<n]
            guard bytes.count <= maxFileBytes else {
                throw ServerFileError(path: path, message: "larger than \(maxFileBytes) bytes; expected \(what)")
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The permission bits of `path`, or nil if it cannot be stat'ed.
    static func mode(of path: String) -> mode_t? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return st.st_mode & 0o777
    }

    static func describe(errno code: Int32) -> String {
        guard let text = strerror(code) else { return "errno \(code)" }
        return String(cString: text)
    }
}
