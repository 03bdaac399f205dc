import Foundation

/// One run of a test process (one `swift test`, one Xcode test action): what groups its tests in
/// `GET /api/runs` and the dashboard, so a test of a later invocation never merges into an earlier
/// one. Every traced test of the process shares it.
public struct TestInvocation: Sendable, Hashable {
    /// 8 random lowercase hex characters, or `FLOWSCOPE_INVOCATION` when set (letters, digits,
    /// `.`, `_`, `-`; at most 64 bytes): a CI job can name its invocation, and a test process that
    /// forks workers can share one.
    public let id: String
    /// When the invocation started (its first traced test), seconds since 1970.
    public let start: Double
    /// The machine it ran on (`FLOWSCOPE_HOST`, else the host name).
    public let host: String
    /// The git revision under test, when known: `FLOWSCOPE_REVISION`, `GITHUB_SHA`, `CI_COMMIT_SHA`,
    /// else the `HEAD` of the git checkout holding the working directory.
    public let revision: String?

    /// An invocation with these values.
    public init(id: String, start: Double, host: String, revision: String?) {
        self.id = id; self.start = start; self.host = host; self.revision = revision
    }

    /// This process's invocation, made at first use from the process environment.
    public static let current = TestInvocation(environment: ProcessInfo.processInfo.environment,
                                               directory: FileManager.default.currentDirectoryPath)

    /// The invocation `environment` describes (see the properties), started now. An invalid
    /// `FLOWSCOPE_INVOCATION` is replaced by a random id (with one warning on standard error).
    public init(environment: [String: String], directory: String, now: Double = Date().timeIntervalSince1970) {
        if let given = environment["FLOWSCOPE_INVOCATION"], !given.isEmpty {
            if Self.isValidID(given) {
                id = given
            } else {
                id = Self.randomID()
                FileHandle.standardError.write(Data(("flowscope: FLOWSCOPE_INVOCATION=\(given.prefix(80)): expected 1 to 64 letters, "
                                                     + "digits, '.', '_' or '-'; using \(id)\n").utf8))
            }
        } else {
            id = Self.randomID()
        }
        start = now
        host = environment["FLOWSCOPE_HOST"].flatMap { $0.isEmpty ? nil : $0 } ?? ProcessInfo.processInfo.hostName
        revision = ["FLOWSCOPE_REVISION", "GITHUB_SHA", "CI_COMMIT_SHA"].lazy.compactMap { environment[$0] }.first { !$0.isEmpty }
            ?? GitCheckout.head(from: directory)
    }

    /// The run id of test `name` in this invocation: `test:<invocation>:<name>`.
    public func run(for name: String) -> String { "test:\(id):\(name)" }

    static func isValidID(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 64 && id.unicodeScalars.allSatisfy { s in
            s.isASCII && (s.properties.isAlphabetic || ("0"..."9").contains(s) || s == "." || s == "_" || s == "-")
        }
    }

    static func randomID() -> String {
        String(UInt32.random(in: .min ... .max), radix: 16).leftPadded(to: 8)
    }
}

/// Reads the commit a git checkout has checked out, with plain file reads (no `git` process).
enum GitCheckout {
    /// The commit of `HEAD` in the checkout holding `directory` (searched upwards), nil outside one
    /// or when it cannot be read.
    static func head(from directory: String) -> String? {
        var dir = URL(fileURLWithPath: directory).standardizedFileURL
        for _ in 0..<64 {
            let dotGit = dir.appendingPathComponent(".git")
            if let gitDir = gitDirectory(dotGit) { return commit(in: gitDir) }
            let parent = dir.deletingLastPathComponent()
            if parent.path == dir.path { return nil }
            dir = parent
        }
        return nil
    }

    /// `.git` itself, or the directory a `.git` file (a worktree, a submodule) points to.
    private static func gitDirectory(_ dotGit: URL) -> URL? {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dotGit.path, isDirectory: &isDirectory) else { return nil }
        if isDirectory.boolValue { return dotGit }
        guard let text = try? String(contentsOf: dotGit, encoding: .utf8), text.hasPrefix("gitdir:") else { return nil }
        let path = text.dropFirst("gitdir:".count).trimmingCharacters(in: .whitespacesAndNewlines)
        return path.hasPrefix("/") ? URL(fileURLWithPath: path)
            : dotGit.deletingLastPathComponent().appendingPathComponent(path).standardizedFileURL
    }

    private static func commit(in gitDir: URL) -> String? {
        guard let head = read(gitDir.appendingPathComponent("HEAD")) else { return nil }
        guard head.hasPrefix("ref:") else { return isCommit(head) ? head : nil }
        let ref = head.dropFirst(4).trimmingCharacters(in: .whitespaces)
        // A worktree keeps its HEAD; branches live in the common directory.
        var places = [gitDir]
        if let common = read(gitDir.appendingPathComponent("commondir")) {
            places.append(common.hasPrefix("/") ? URL(fileURLWithPath: common) : gitDir.appendingPathComponent(common).standardizedFileURL)
        }
        for place in places {
            if let loose = read(place.appendingPathComponent(ref)), isCommit(loose) { return loose }
            if let packed = read(place.appendingPathComponent("packed-refs")) {
                for line in packed.split(separator: "\n") where line.hasSuffix(" " + ref) {
                    let hash = String(line.prefix { $0 != " " })
                    if isCommit(hash) { return hash }
                }
            }
        }
        return nil
    }

    private static func read(_ url: URL) -> String? {
        (try? String(contentsOf: url, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private static func isCommit(_ text: String) -> Bool {
        (text.utf8.count == 40 || text.utf8.count == 64) && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
