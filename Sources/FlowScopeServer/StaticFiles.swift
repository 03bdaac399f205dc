#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Files served from one directory (the dashboard, `web/`), or from memory (the dashboard compiled
/// into the binary): `/` is `index.html`.
///
/// Paths are checked before the file system is touched: backslashes, NUL, encoded `/`, `\`, `.` or NUL,
/// `.` and `..` segments, empty segments and hidden names are refused (400); then the resolved real path
/// must stay under the root (symlinks out of it are 404). Only regular files up to `maxFileBytes` are served.
public struct StaticFiles: Sendable {
    /// The root directory, fully resolved.
    public let root: String
    /// Largest file served.
    public let maxFileBytes: Int
    /// Files held in memory by relative path (`index.html`, `js/app.js`); nil when served from `root`.
    private let embedded: [String: [UInt8]]?

    /// Serves `root`, which must be an existing directory.
    public init(root: String, maxFileBytes: Int = 16 << 20) throws(ServerFileError) {
        guard let resolved = Self.realPath(root) else {
            throw ServerFileError(path: root, message: "static directory not found")
        }
        var st = stat()
        guard stat(resolved, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR else {
            throw ServerFileError(path: root, message: "expected a directory of static files")
        }
        self.root = resolved
        self.maxFileBytes = maxFileBytes
        self.embedded = nil
    }

    /// Serves `files` from memory, keyed by path relative to the root (`index.html`, `js/app.js`).
    /// `root` is then `label`, as messages name it.
    public init(files: [String: [UInt8]], label: String = "(embedded)") {
        root = label
        maxFileBytes = files.values.map(\.count).max() ?? 0
        embedded = files
    }

    /// Whether `/` has a page to serve: `index.html` is present (and a regular file, on disk).
    public var hasIndex: Bool {
        if let embedded { return embedded["index.html"] != nil }
        var st = stat()
        return stat(root + "/index.html", &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG
    }

    /// The file for `request.rawPath`, or a JSON 400/404.
    public func response(for request: Request) -> Response {
        guard let relative = Self.safeRelativePath(request.rawPath) else {
            return .error(400, "invalid path")
        }
        if let embedded {
            guard let bytes = embedded[relative] else { return .error(404, "no such file: /\(relative)") }
            return Response(status: 200, headers: [
                ("Content-Type", Self.contentType(forPath: relative)),
                ("Cache-Control", "no-cache"),
            ], body: bytes)
        }
        let candidate = root + "/" + relative
        guard let resolved = Self.realPath(candidate), resolved.hasPrefix(root + "/") else {
            return .error(404, "no such file: /\(relative)")
        }
        let fd = open(resolved, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return .error(404, "no such file: /\(relative)") }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            return .error(404, "no such file: /\(relative)")
        }
        guard Int(st.st_size) <= maxFileBytes else { return .error(404, "file too large to serve: /\(relative)") }
        var bytes = [UInt8](repeating: 0, count: Int(st.st_size))
        var filled = 0
        while filled < bytes.count {
            let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + filled, $0.count - filled) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            filled += n
        }
        bytes.removeSubrange(filled...)
        return Response(status: 200, headers: [
            ("Content-Type", Self.contentType(forPath: resolved)),
            ("Cache-Control", "no-cache"),
        ], body: bytes)
    }

    /// The path below the root for a raw (still encoded) request path, or nil if it is unsafe.
    static func safeRelativePath(_ rawPath: String) -> String? {
        let lower = rawPath.lowercased()
        guard rawPath.hasPrefix("/"), !rawPath.hasPrefix("//"),
              !lower.contains("\\"), !lower.contains("\0"),
              !lower.contains("%2f"), !lower.contains("%5c"), !lower.contains("%2e"), !lower.contains("%00")
        else { return nil }
        guard var segments = Router.decodeSegments(rawPath) else { return nil }
        if segments.last == "" { segments[segments.count - 1] = "index.html" }
        for segment in segments {
            guard !segment.isEmpty, !segment.hasPrefix("."),
                  !segment.contains("/"), !segment.contains("\\"), !segment.unicodeScalars.contains(where: { $0.value < 0x20 })
            else { return nil }
        }
        return segments.joined(separator: "/")
    }

    /// The media type for a file name's extension.
    public static func contentType(forPath path: String) -> String {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        let ext = name.split(separator: ".").count > 1 ? String(name.split(separator: ".").last!).lowercased() : ""
        switch ext {
        case "html", "htm": return "text/html; charset=utf-8"
        case "css": return "text/css; charset=utf-8"
        case "js", "mjs": return "text/javascript; charset=utf-8"
        case "json", "map": return "application/json"
        case "svg": return "image/svg+xml"
        case "png": return "image/png"
        case "jpg", "jpeg": return "image/jpeg"
        case "ico": return "image/x-icon"
        case "woff2": return "font/woff2"
        case "txt": return "text/plain; charset=utf-8"
        case "webmanifest": return "application/manifest+json"
        default: return "application/octet-stream"
        }
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
