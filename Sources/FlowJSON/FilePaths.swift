/// Path text shared by everything that reads a path from a config, a flag or a sink's options.
///
/// `NSString.deletingLastPathComponent` traps on a relative one-character path (`"x"`, `"x/"`,
/// `"."`) in swift-corelibs-foundation 6.3, so `--state-dir s` or `cert --dir x` crashed; this is
/// the same answer without Foundation.
public enum FilePaths {
    /// The directory part of `path`, as `NSString.deletingLastPathComponent` gives it: `""` for a
    /// bare name, `"/"` for a name at the root, trailing and doubled slashes ignored.
    ///
    /// ```swift
    /// FilePaths.directory(of: "state/events.jsonl")  // "state"
    /// FilePaths.directory(of: "s")                   // ""
    /// FilePaths.directory(of: "/x")                  // "/"
    /// ```
    public static func directory(of path: String) -> String {
        var bytes = Array(path.utf8)
        while bytes.count > 1, bytes.last == UInt8(ascii: "/") { bytes.removeLast() }
        guard bytes != [UInt8(ascii: "/")] else { return "/" }
        guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return "" }
        bytes.removeSubrange(slash...)
        while bytes.last == UInt8(ascii: "/") { bytes.removeLast() }
        return bytes.isEmpty ? "/" : String(decoding: bytes, as: UTF8.self)
    }
}
