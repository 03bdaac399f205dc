import FlowJSON
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How the command line creates the directories it keeps state in (the state directory, the
/// certificate directory of `server.tls.dir` and `cert --dir`): the directory and every missing
/// parent, each mode 0700 whatever the umask. Directories that already exist are left as they are.
enum PrivateDirectory {
    /// The mode of every directory created.
    static let mode: mode_t = 0o700

    /// Creates `path` and its missing parents, outermost first. Nil when `path` is a directory
    /// afterwards, else one line naming `path` (made absolute) and what is wrong: `not a directory`,
    /// `cannot be created: <dir> is not a directory`, `cannot create the directory: <why>`, or
    /// `cannot create its parent <dir>: <why>`. Nothing is created when a parent is a file.
    static func create(_ path: String) -> String? {
        var missing: [String] = []
        var current = path
        while current.count > 1 && current.hasSuffix("/") { current.removeLast() }
        while !current.isEmpty, current != "/", current != "." {
            var st = stat()
            if stat(current, &st) == 0 {
                guard (st.st_mode & S_IFMT) == S_IFDIR else {
                    let shown = FlowScopeConfig.absolutePath(path), blocking = FlowScopeConfig.absolutePath(current)
                    return blocking == shown ? "\(shown): not a directory" : "\(shown): cannot be created: \(blocking) is not a directory"
                }
                break
            }
            missing.append(current)
            current = FilePaths.directory(of: current)
        }
        for directory in missing.reversed() {
            if mkdir(directory, mode) != 0 {
                let err = errno
                var st = stat()
                if err == EEXIST, stat(directory, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR { continue }  // made meanwhile
                return problem(path, directory, err == EEXIST ? "not a directory" : ServeChecks.describe(errno: err))
            }
            chmod(directory, mode)  // the umask may have narrowed it
        }
        return nil
    }

    private static func problem(_ path: String, _ failed: String, _ why: String) -> String {
        let shown = FlowScopeConfig.absolutePath(path)
        let failedShown = FlowScopeConfig.absolutePath(failed)
        return failedShown == shown || failed == path
            ? "\(shown): cannot create the directory: \(why)"
            : "\(shown): cannot create its parent \(failedShown): \(why)"
    }
}
