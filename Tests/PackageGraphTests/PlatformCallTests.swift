import FlowJSON
import Foundation
import TestSupport
import Testing

/// The libraries apps link (FlowFetch, FlowEvents, FlowScopeTesting and the modules they pull in)
/// compile on Apple platforms as well as on Linux, although only Linux builds them here. Every call
/// they make into the C library or the OS is listed below with the file it stands in and the branch
/// of `#if` that guards it; the checks fail on a call or a C name outside the list, and on a name that
/// exists on one platform only outside a branch of that platform (`st_mtim` is Glibc's spelling of
/// Darwin's `st_mtimespec`).
@Suite("Platform calls", .ownThread)
struct PlatformCallTests {
    /// Which platforms a branch of `#if` is compiled for.
    enum Branch: String, CustomStringConvertible {
        case both, linux, darwin
        var description: String { rawValue }
        /// Whether code in a branch compiled for `self` may use a name allowed in `allowed`.
        func admits(_ allowed: Branch) -> Bool { allowed == .both || allowed == self }
    }

    /// A C function (or a Glibc/Darwin overlay function) the libraries call, the one file that may,
    /// and the branch it is called in.
    struct Function: CustomStringConvertible {
        var name: String
        var file: String
        var branch: Branch
        var description: String { "\(name) in \(file)" }
        init(_ name: String, _ file: String, _ branch: Branch = .both) { self.name = name; self.file = file; self.branch = branch }
    }

    /// A C constant, type or field the libraries name, the file that may, and the branch it needs.
    struct Name {
        var name: String
        var file: String
        var branch: Branch
        init(_ name: String, _ file: String, _ branch: Branch) { self.name = name; self.file = file; self.branch = branch }
    }

    static let files = "FlowFetch/SystemFiles.swift"
    static let clocks = "FlowFetch/SystemClocks.swift"
    static let signals = "FlowEvents/SignalRelay.swift"

    /// Every C function the libraries call. All are POSIX, spelled the same on both platforms; the
    /// Darwin-only calls are not in the Linux objects, and the source check guards their branch
    /// through the constants they take (`F_FULLFSYNC`).
    static let functions: [Function] = [
        .init("open", files), .init("read", files), .init("write", files), .init("close", files),
        .init("fsync", files), .init("fcntl", files, .darwin), .init("rename", files), .init("unlink", files),
        .init("mkdir", files), .init("utimes", files), .init("strerror", files), .init("errno", files),
        .init("clock_gettime", clocks),
        .init("signal", signals), .init("pipe", signals), .init("fcntl", signals), .init("read", signals),
        .init("write", signals), .init("errno", signals), .init("sigemptyset", signals), .init("pthread_sigmask", signals),
        // Darwin names the calling thread; Linux through /proc/thread-self/comm (Foundation).
        .init("pthread_setname_np", signals, .darwin),
    ]

    /// Every C constant, type and field the libraries name, with the branch that guards it.
    static let names: [Name] = [
        .init("O_WRONLY", files, .both), .init("O_RDONLY", files, .both), .init("O_CREAT", files, .both),
        .init("O_EXCL", files, .both), .init("O_CLOEXEC", files, .both), .init("O_DIRECTORY", files, .both),
        .init("EINTR", files, .both), .init("EEXIST", files, .both),
        // fsync leaves data in the drive's cache on Apple platforms; F_FULLFSYNC flushes it.
        .init("F_FULLFSYNC", files, .darwin),
        .init("timespec", clocks, .both), .init("CLOCK_REALTIME", clocks, .both), .init("CLOCK_THREAD_CPUTIME_ID", clocks, .both),
        .init("F_SETFD", signals, .both), .init("FD_CLOEXEC", signals, .both), .init("EINTR", signals, .both),
        .init("SIG_SETMASK", signals, .both), .init("sigset_t", signals, .both),
        // The default signals of `EventPipeline.shutdownOnSignals`.
        .init("SIGINT", "FlowEvents/EventPipeline.swift", .both), .init("SIGTERM", "FlowEvents/EventPipeline.swift", .both),
    ]

    /// Names that exist on one platform only: wherever they stand, it must be in a branch for it.
    static let linuxOnly: Set<String> = [
        "Glibc", "st_mtim", "st_atim", "st_ctim", "O_DIRECT", "O_NOATIME", "O_PATH", "O_TMPFILE", "O_LARGEFILE",
        "CLOCK_BOOTTIME", "CLOCK_MONOTONIC_COARSE", "CLOCK_REALTIME_COARSE", "MSG_NOSIGNAL", "SOCK_CLOEXEC",
        "SOCK_NONBLOCK", "prctl", "PR_SET_PDEATHSIG", "PR_SET_NAME", "epoll_create1", "epoll_ctl", "epoll_wait",
        "eventfd", "signalfd", "inotify_init1", "inotify_add_watch", "sendfile", "accept4", "pipe2", "dup3",
        "syscall", "gettid", "fdatasync", "posix_fadvise", "fallocate", "statx", "getrandom", "memfd_create",
        "timerfd_create", "ppoll", "clock_nanosleep", "sem_timedwait", "sigtimedwait", "malloc_usable_size",
        "mremap", "sched_getaffinity", "get_nprocs", "FoundationNetworking",
    ]
    static let darwinOnly: Set<String> = [
        "Darwin", "st_mtimespec", "st_atimespec", "st_ctimespec", "st_birthtimespec", "F_FULLFSYNC", "F_NOCACHE",
        "O_EVTONLY", "O_SYMLINK", "mach_absolute_time", "mach_timebase_info", "malloc_size", "Security",
        "SecTrustEvaluateWithError", "SecTrustSetAnchorCertificates", "SecTrustSetAnchorCertificatesOnly",
        "SecCertificateCreateWithData", "CFData", "CFArray", "CFError", "CLOCK_UPTIME_RAW", "SO_NOSIGPIPE",
    ]

    // MARK: Reading sources

    /// One identifier of a source file, outside comments and string literals, and the platforms its
    /// line is compiled for.
    struct Token: Equatable {
        var name: String
        var line: Int
        var branch: Branch
    }

    /// The identifiers of `source` that are code (comments and string literals skipped, interpolations
    /// read), each with the branch of `#if` it stands in.
    static func tokens(of source: String) -> [Token] {
        var out: [Token] = []
        // The open #if blocks, innermost last: the branch around each, and the platform an earlier
        // branch of it selected (`.both`: none), which a later #elseif or #else excludes.
        var blocks: [(outer: Branch, taken: Branch)] = []
        var current = Branch.both
        var inBlockComment = 0
        var strings: [(multiline: Bool, hashes: Int)] = []  // open string literals (interpolation: code)
        var interpolationDepth: [Int] = []                  // parentheses open in each interpolation
        for (index, rawLine) in source.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let words = rawLine.trimmingCharacters(in: .whitespaces).split(separator: " ", maxSplits: 1)
            let keyword = words.first.map(String.init) ?? ""
            if inBlockComment == 0 && strings.isEmpty, ["#if", "#elseif", "#else", "#endif"].contains(keyword) {
                let platform = words.count > 1 ? platform(of: String(words[1])) : .both
                switch keyword {
                case "#if":
                    blocks.append((current, platform))
                    current = narrowed(current, platform)
                case "#elseif" where !blocks.isEmpty:
                    let block = blocks[blocks.count - 1]
                    current = narrowed(block.outer, platform != .both ? platform : opposite(block.taken))
                    if block.taken == .both { blocks[blocks.count - 1].taken = platform }
                case "#else" where !blocks.isEmpty:
                    current = narrowed(blocks[blocks.count - 1].outer, opposite(blocks[blocks.count - 1].taken))
                case "#endif" where !blocks.isEmpty:
                    current = blocks.removeLast().outer
                default:
                    break
                }
                continue
            }
            let branch = current
            let chars = Array(rawLine.unicodeScalars)
            var i = 0
            var identifier = ""
            func flush() {
                if !identifier.isEmpty { out.append(Token(name: identifier, line: index + 1, branch: branch)) }
                identifier = ""
            }
            while i < chars.count {
                let c = chars[i]
                let next: Unicode.Scalar? = i + 1 < chars.count ? chars[i + 1] : nil
                if inBlockComment > 0 {
                    if c == "*" && next == "/" { inBlockComment -= 1; i += 2 } else if c == "/" && next == "*" { inBlockComment += 1; i += 2 } else { i += 1 }
                    continue
                }
                if let string = strings.last, interpolationDepth.count < strings.count {
                    // Inside a string literal.
                    let closing = string.multiline ? "\"\"\"" : "\""
                    if c == "\\" {
                        var j = i + 1, hashes = 0
                        while j < chars.count && chars[j] == "#" { hashes += 1; j += 1 }
                        if hashes == string.hashes && j < chars.count && chars[j] == "(" {
                            interpolationDepth.append(0); i = j + 1
                        } else {
                            i += 2
                        }
                        continue
                    }
                    if hasPrefix(chars, at: i, closing + String(repeating: "#", count: string.hashes)) {
                        strings.removeLast(); i += closing.count + string.hashes
                        continue
                    }
                    i += 1
                    continue
                }
                // Code (possibly an interpolation).
                if c == "/" && next == "/" { break }
                if c == "/" && next == "*" { flush(); inBlockComment = 1; i += 2; continue }
                if !interpolationDepth.isEmpty && interpolationDepth.count == strings.count {
                    if c == "(" { interpolationDepth[interpolationDepth.count - 1] += 1 }
                    if c == ")" {
                        if interpolationDepth[interpolationDepth.count - 1] == 0 { flush(); interpolationDepth.removeLast(); i += 1; continue }
                        interpolationDepth[interpolationDepth.count - 1] -= 1
                    }
                }
                if c == "#" || c == "\"" {
                    var j = i, hashes = 0
                    while j < chars.count && chars[j] == "#" { hashes += 1; j += 1 }
                    if j < chars.count && chars[j] == "\"" {
                        flush()
                        let multiline = hasPrefix(chars, at: j, "\"\"\"")
                        strings.append((multiline, hashes))
                        i = j + (multiline ? 3 : 1)
                        continue
                    }
                }
                if c == "_" || c.properties.isAlphabetic || (c.properties.numericType != nil && !identifier.isEmpty) {
                    identifier.unicodeScalars.append(c)
                } else {
                    flush()
                }
                i += 1
            }
            flush()
            // A single-line string cannot go on past its line (an unterminated one is a compile error).
            while let last = strings.last, !last.multiline, interpolationDepth.count < strings.count { strings.removeLast() }
        }
        return out
    }

    private static func hasPrefix(_ chars: [Unicode.Scalar], at i: Int, _ prefix: String) -> Bool {
        let p = Array(prefix.unicodeScalars)
        guard i + p.count <= chars.count else { return false }
        return Array(chars[i..<(i + p.count)]) == p
    }

    /// The platforms an `#if` condition selects: Apple's (`canImport(Darwin)`, `os(macOS)`, ...),
    /// Linux (`canImport(Glibc)`, `os(Linux)`, ...), or `.both` for a condition about anything else.
    static func platform(of condition: String) -> Branch {
        let c = condition.replacingOccurrences(of: " ", with: "")
        let darwin = ["canImport(Darwin)", "canImport(Security)", "canImport(ObjectiveC)", "os(macOS)", "os(iOS)",
                      "os(tvOS)", "os(watchOS)", "os(visionOS)"]
        let linux = ["canImport(Glibc)", "canImport(Musl)", "canImport(FoundationNetworking)", "os(Linux)"]
        let negated = c.hasPrefix("!")
        let found: Branch = darwin.contains(where: c.contains) ? .darwin : linux.contains(where: c.contains) ? .linux : .both
        return negated && found != .both ? opposite(found) : found
    }

    private static func opposite(_ b: Branch) -> Branch { b == .darwin ? .linux : b == .linux ? .darwin : .both }
    private static func narrowed(_ outer: Branch, _ inner: Branch) -> Branch { inner == .both ? outer : inner }

    /// Whether `token` has the shape of a C name: `O_CREAT`, `st_mtim`, `sigset_t`, `EINTR`, `SIGTERM`, `timespec`.
    static func looksLikeC(_ token: String) -> Bool {
        token.range(of: #"^([A-Z][A-Z0-9]*_[A-Z0-9_]+|st_[a-z_]+|[a-z][a-z0-9]*_t|E[A-Z]{3,}|SIG[A-Z]+|timespec|timeval)$"#,
                    options: .regularExpression) != nil
    }

    /// What is wrong with one file's platform names: `file` is `Module/File.swift`.
    static func problems(file: String, source: String) -> [String] {
        var found: [String] = []
        for token in tokens(of: source) {
            let at = "\(file):\(token.line)"
            if linuxOnly.contains(token.name) && token.branch != .linux {
                found.append("\(at): \(token.name) exists on Linux only, but stands in a branch compiled for \(token.branch == .both ? "every platform" : "Apple platforms")")
                continue
            }
            if darwinOnly.contains(token.name) && token.branch != .darwin {
                found.append("\(at): \(token.name) exists on Apple platforms only, but stands in a branch compiled for \(token.branch == .both ? "every platform" : "Linux")")
                continue
            }
            guard looksLikeC(token.name) else { continue }
            let listed = names.filter { $0.name == token.name }
            guard let entry = listed.first(where: { $0.file == file }) else {
                found.append("\(at): \(token.name) is a C name outside the list (allowed in: \(listed.map(\.file).joined(separator: ", ")))")
                continue
            }
            if !token.branch.admits(entry.branch) {
                found.append("\(at): \(token.name) needs a \(entry.branch) branch, stands in one for \(token.branch)")
            }
        }
        return found
    }

    // MARK: The libraries' modules

    /// The modules FlowFetch, FlowEvents and FlowScopeTesting pull in, with their source folders.
    static func portableModules() throws -> [(name: String, path: String)] {
        let described = try PackageGraphTests.describePackage()
        var paths: [String: String] = [:]
        var dependencies: [String: [String]] = [:]
        for t in described["targets"]?.arrayValue ?? [] {
            guard let name = t["name"]?.stringValue else { continue }
            paths[name] = t["path"]?.stringValue
            dependencies[name] = (t["target_dependencies"]?.arrayValue ?? []).compactMap(\.stringValue)
        }
        var seen = Set<String>(), queue = PackageGraphTests.portableProducts
        while let next = queue.popLast() {
            guard seen.insert(next).inserted else { continue }
            queue += dependencies[next] ?? []
        }
        return try seen.sorted().map { (name: $0, path: try #require(paths[$0], "no path for target \($0)")) }
    }

    // MARK: Tests

    @Test("no C name of the libraries stands outside its listed file and branch; no one-platform name outside its platform's branch")
    func sourcesUseListedNamesOnly() throws {
        let modules = try Self.portableModules()
        #expect(Set(modules.map(\.name)).isSuperset(of: ["FlowFetch", "FlowEvents", "FlowScopeTesting", "FlowJSON"]))
        var problems: [String] = []
        var seen = Set<String>()
        for module in modules {
            let folder = PackageGraphTests.packageRoot + "/" + module.path
            let files = try FileManager.default.subpathsOfDirectory(atPath: folder).filter { $0.hasSuffix(".swift") }
            for file in files.sorted() {
                let source = try String(contentsOfFile: folder + "/" + file, encoding: .utf8)
                let key = "\(module.name)/\(file)"
                problems += Self.problems(file: key, source: source)
                for token in Self.tokens(of: source) where Self.names.contains(where: { $0.name == token.name && $0.file == key }) {
                    seen.insert("\(token.name) \(key)")
                }
            }
        }
        #expect(problems.isEmpty, "\(problems.count) platform names outside their place:\n\(problems.joined(separator: "\n"))")
        let unused = Self.names.filter { !seen.contains("\($0.name) \($0.file)") }.map { "\($0.name) in \($0.file)" }
        #expect(unused.isEmpty, "listed but no longer used (take them off the list): \(unused)")
    }

    @Test("every C function the libraries' objects call is listed, and called from its listed file only")
    func objectsCallListedFunctionsOnly() throws {
        #if os(Linux)
        let modules = try Self.portableModules()
        // The test binary sits in the build folder beside each module's objects (Module.build/File.swift.o).
        let buildFolder = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let folder = ["", "/.."].lazy.map { buildFolder.path + $0 }
            .first { FileManager.default.fileExists(atPath: $0 + "/FlowFetch.build") }
        let build = try #require(folder, "no FlowFetch.build beside \(CommandLine.arguments[0]): build the tests first (swift build --build-tests)")
        var problems: [String] = []
        var called = Set<String>()
        for module in modules {
            let objects = (try? FileManager.default.contentsOfDirectory(atPath: "\(build)/\(module.name).build"))?
                .filter { $0.hasSuffix(".swift.o") } ?? []
            #expect(!objects.isEmpty, "no objects in \(build)/\(module.name).build")
            for object in objects.sorted() {
                let file = "\(module.name)/\(object.dropLast(2))"
                for symbol in try Self.undefinedSymbols("\(build)/\(module.name).build/\(object)") {
                    guard let name = Self.cFunction(symbol) else { continue }
                    if Self.functions.contains(where: { $0.name == name && $0.file == file }) {
                        called.insert("\(name) \(file)")
                    } else {
                        let allowed = Self.functions.filter { $0.name == name }.map(\.file)
                        problems.append("\(file) calls \(name), which is not listed for it (listed in: \(allowed.joined(separator: ", ")))")
                    }
                }
            }
        }
        #expect(problems.isEmpty, "\(problems.count) calls into the C library outside the list:\n\(problems.joined(separator: "\n"))")
        let unused = Self.functions.filter { $0.branch != .darwin && !called.contains("\($0.name) \($0.file)") }.map(\.description)
        #expect(unused.isEmpty, "listed but no longer called (take them off the list): \(unused)")
        #endif
    }

    /// Symbols an object file uses from elsewhere (`nm -u`).
    static func undefinedSymbols(_ object: String) throws -> [String] {
        let nm = try runProgram("/usr/bin/env", ["nm", "-u", "--format=just-symbols", object])
        try #require(nm.status == 0, "nm -u \(object) failed: \(nm.output)")
        return nm.output.split(separator: "\n").map(String.init)
    }

    /// Symbols the compiler and the Swift runtime bring in by themselves (copies, allocation, stack
    /// protection, thread-locals, blocks for Dispatch; `syscall` is the futex of Synchronization's
    /// Mutex, inlined), and the C math library, which is the same on every platform.
    static let toolchainSymbols: Set<String> = [
        "memcpy", "memmove", "memset", "memcmp", "malloc", "calloc", "realloc", "free", "malloc_usable_size",
        "posix_memalign", "__stack_chk_fail", "__tls_get_addr", "_Block_copy", "_Block_release",
        "_NSConcreteStackBlock", "_NSConcreteGlobalBlock", "syscall", "_GLOBAL_OFFSET_TABLE_", "__dso_handle",
        "ceil", "floor", "round", "rint", "trunc", "sqrt", "exp", "exp2", "log", "log2", "log10", "pow", "sin", "cos",
        "tan", "erf", "erfc", "fmod", "lround", "nearbyint", "cbrt", "hypot", "atan", "atan2", "expm1", "log1p",
    ]

    /// The C function an undefined symbol names (a C symbol, or a function or variable of Swift's Glibc
    /// overlay such as `errno` and `open(_:_:_:)`), or nil for Swift code and the toolchain's own.
    static func cFunction(_ symbol: String) -> String? {
        if symbol.hasPrefix("$s") {
            // $s5Glibc<length><name>...: a declaration of the Glibc overlay module.
            for module in ["5Glibc", "10SwiftGlibc"] where symbol.dropFirst(2).hasPrefix(module) {
                let rest = symbol.dropFirst(2 + module.count)
                let digits = rest.prefix(while: \.isNumber)
                guard let length = Int(digits) else { return nil }
                return String(rest.dropFirst(digits.count).prefix(length))
            }
            return nil
        }
        if symbol.hasPrefix("swift_") || symbol.hasPrefix("_swift") || symbol.hasPrefix("__swift") { return nil }
        return toolchainSymbols.contains(symbol) ? nil : symbol
    }

    // MARK: The checker itself

    @Test("st_mtim read outside a Linux branch is found; inside one, or in the other branch of a Darwin #if, it is not")
    func checkerFindsAGlibcOnlyField() {
        let unguarded = "func mtime(_ st: stat) -> Int { Int(st.st_mtim.tv_sec) }\n"
        #expect(Self.problems(file: "FlowFetch/FileStores.swift", source: unguarded).contains { $0.contains("st_mtim exists on Linux only") })
        let guarded = """
            #if canImport(Darwin)
            let seconds = st.st_mtimespec.tv_sec
            #else
            let seconds = st.st_mtim.tv_sec
            #endif
            """
        #expect(Self.problems(file: "FlowFetch/FileStores.swift", source: guarded).filter { $0.contains("exists on") }.isEmpty)
        #expect(Self.problems(file: "FlowFetch/FileStores.swift", source: guarded).count == 2, "both fields are C names outside the list")
        let wrongBranch = "#if canImport(Glibc)\nlet s = st.st_mtimespec\n#endif\n"
        #expect(Self.problems(file: "FlowFetch/FileStores.swift", source: wrongBranch).contains { $0.contains("st_mtimespec exists on Apple platforms only") })
    }

    @Test("a C constant outside its listed file or branch is found; comments and strings are not code")
    func checkerFindsUnlistedNames() {
        #expect(Self.problems(file: "FlowSim/Simulation.swift", source: "let fd = open(p, O_RDONLY)\n").contains { $0.contains("O_RDONLY is a C name outside the list") })
        #expect(Self.problems(file: Self.files, source: "_ = fcntl(fd, F_FULLFSYNC)\n").contains { $0.contains("F_FULLFSYNC") })
        #expect(Self.problems(file: Self.files, source: "#if !canImport(Glibc)\n_ = fcntl(fd, F_FULLFSYNC)\n#endif\n").isEmpty)
        let quiet = """
            // st_mtim and O_DIRECT in a comment
            /* st_mtim /* nested */ O_DIRECT */
            let text = "st_mtim \\(value.count) O_DIRECT"
            let more = \"\"\"
                st_mtim
                \"\"\"
            let raw = #"st_mtim "quoted" O_DIRECT"#
            """
        #expect(Self.problems(file: "FlowSim/Simulation.swift", source: quiet).isEmpty)
        #expect(Self.problems(file: "FlowSim/Simulation.swift", source: "let t = \"a\\(st.st_mtim)b\"\n").contains { $0.contains("st_mtim") },
                "an interpolation is code")
    }

    @Test("an undefined symbol is a C function unless it is Swift's or the toolchain's")
    func symbolsAreClassified() {
        #expect(Self.cFunction("fsync") == "fsync")
        #expect(Self.cFunction("prctl") == "prctl")
        #expect(Self.cFunction("$s5Glibc5errnos5Int32Vvg") == "errno")
        #expect(Self.cFunction("$s5Glibc4openys5Int32VSPys4Int8VG_AEtF") == "open")
        #expect(Self.cFunction("$s9FlowFetch10AtomicFileO4readySays5UInt8VGSgSSFZ") == nil)
        #expect(Self.cFunction("swift_retain") == nil)
        #expect(Self.cFunction("memcpy") == nil)
    }
}

/// The workflow for a public CI host is the only place the libraries meet an Apple compiler.
@Suite("Public CI workflow", .ownThread)
struct PublicWorkflowTests {
    @Test("the workflow builds the three libraries on macOS and for the iOS Simulator")
    func workflowBuildsTheLibrariesForApplePlatforms() throws {
        let text = try String(contentsOfFile: PackageGraphTests.packageRoot + "/.github/workflows/ci.yml", encoding: .utf8)
        #expect(text.contains("runs-on: macos-"))
        #expect(text.contains("generic/platform=iOS Simulator"))
        #expect(text.contains("for product in FlowFetch FlowEvents FlowScopeTesting"))
        #expect(text.contains("for scheme in FlowFetch FlowEvents FlowScopeTesting"))
        #expect(text.contains("make test"), "the Linux job runs the same suite as .ci/run")
    }
}

/// macOS and Windows check a repository out onto case-insensitive file systems by default: two paths
/// that differ only by case (`plugins/` and `Plugins/`) become one folder there.
@Suite("Repository paths", .ownThread)
struct RepositoryPathTests {
    /// Every path the repository holds (files and the folders above them), from `git ls-files`.
    static func repositoryPaths() throws -> [String] {
        let git = try runProgram("/usr/bin/env", ["git", "-C", PackageGraphTests.packageRoot, "ls-files", "-z"])
        try #require(git.status == 0, "git ls-files failed in \(PackageGraphTests.packageRoot): \(git.output)")
        var paths = Set<String>()
        for file in git.output.split(separator: "\0").map(String.init) {
            var parts = file.split(separator: "/").map(String.init)
            while !parts.isEmpty { paths.insert(parts.joined(separator: "/")); parts.removeLast() }
        }
        return paths.sorted()
    }

    /// The groups of `paths` that differ only by case.
    static func caseCollisions(_ paths: [String]) -> [[String]] {
        Dictionary(grouping: paths, by: { $0.lowercased() }).values.filter { $0.count > 1 }.map { $0.sorted() }.sorted { $0[0] < $1[0] }
    }

    @Test("no two paths in the repository differ only by case")
    func noCaseOnlyPathPairs() throws {
        let paths = try Self.repositoryPaths()
        #expect(paths.contains("plugins") && paths.contains("BuildTools/EmbedAssets/plugin.swift"))
        let collisions = Self.caseCollisions(paths)
        #expect(collisions.isEmpty, "paths that one folder would hold on a case-insensitive file system: \(collisions)")
    }

    @Test("a case-only pair is found, folders included")
    func caseOnlyPairsAreFound() {
        #expect(Self.caseCollisions(["plugins", "plugins/a.swift", "Plugins", "Plugins/b.swift"]) == [["Plugins", "plugins"]])
        #expect(Self.caseCollisions(["README.md", "docs/readme.md"]).isEmpty)
    }
}
