import Foundation

/// What a sink needs from the machine before it can start: the files it writes and the programs it
/// runs. A factory declares them (``SinkFactory/requirements(_:context:)``); `check-config` and
/// `serve` check them for every sink the same way before anything is created: each file in a
/// directory that exists or can be created, written by one sink only, of the expected format when it
/// exists; each program found.
public struct SinkRequirements: Sendable, Equatable {
    /// A file the sink writes.
    public struct File: Sendable, Equatable {
        /// The option that names it (`path`), for error messages (`$.sinks[2].path`).
        public var option: String
        /// The file, resolved as the sink resolves it.
        public var path: String
        /// What an existing, non-empty file must be, nil for any file.
        public var format: FileFormat?
        /// A file written through `option`.
        public init(option: String, path: String, format: FileFormat? = nil) {
            self.option = option; self.path = path; self.format = format
        }
    }

    /// The kind of file a sink reopens: a regular file starting with `header` (or empty).
    public struct FileFormat: Sendable, Equatable {
        /// What the file is, with its article (`an SQLite database`).
        public var description: String
        /// Whose header it is (`SQLite`), for "its first bytes are not SQLite's header".
        public var headerOwner: String
        /// The first bytes of a file of this format.
        public var header: [UInt8]
        /// A format.
        public init(description: String, headerOwner: String, header: [UInt8]) {
            self.description = description; self.headerOwner = headerOwner; self.header = header
        }
    }

    /// A program the sink starts.
    public struct Program: Sendable, Equatable {
        /// The option that names it (`command[0]`).
        public var option: String
        /// A path (it contains `/`) or a name looked up in `PATH`.
        public var program: String
        /// A program named by `option`.
        public init(option: String, program: String) { self.option = option; self.program = program }
    }

    /// The files it writes.
    public var files: [File]
    /// The programs it runs.
    public var programs: [Program]

    /// Requirements; none by default.
    public init(files: [File] = [], programs: [Program] = []) {
        self.files = files; self.programs = programs
    }

    /// The executable `program` names: itself when it contains `/` (relative to the working
    /// directory), else the first executable file of that name in `PATH` (`searchPath`, default the
    /// environment's). Nil when there is none.
    public static func resolve(program: String, searchPath: String? = nil) -> String? {
        if program.contains("/") { return isProgram(program) ? program : nil }
        let path = searchPath ?? ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":", omittingEmptySubsequences: true) {
            let candidate = "\(directory)/\(program)"
            if isProgram(candidate) { return candidate }
        }
        return nil
    }

    /// Why `program` cannot be started, nil when it can: "not found in PATH", "not found", "not executable".
    public static func problem(program: String) -> String? {
        guard resolve(program: program) == nil else { return nil }
        guard program.contains("/") else { return "not found in PATH" }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: program, isDirectory: &isDirectory) else { return "not found" }
        return isDirectory.boolValue ? "is a directory, expected a program" : "not executable"
    }

    /// Whether `path` is an executable file (not a directory). Foundation, not the C library: the
    /// libraries' C calls stay in their listed files (docs/platforms.md).
    private static func isProgram(_ path: String) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && !isDirectory.boolValue
            && FileManager.default.isExecutableFile(atPath: path)
    }
}
