// sample: imports
import FlowEvents
import Foundation
import Synchronization
// end sample: imports

/// Appends one line per event to a file: `seq name placement`. A failed write marks the sink down
/// (it shows in `flowscope_sink_up`, `/api/sinks`, `/healthz` and the dashboard) and counts the
/// lines it lost. Its own metric family, `audit_lines_total`, joins `GET /metrics`.
public final class AuditSink: EventSink, MetricsExposing {
    public let name: String
    public var type: String { "audit" }
    private let file: Mutex<FileHandle>
    private let written = Atomic<Int>(0)
    private let lost = Atomic<Int>(0)
    // sample: health
    private let recorder = SinkHealthRecorder()
    public var health: SinkHealth { recorder.current }
    // end sample: health

    // sample: open
    /// Opens `path` for appending: creates the file when it is missing, keeps what earlier runs
    /// wrote, and never replaces it (a device or a file another program holds open stays itself).
    public init(name: String = "audit", path: String) throws {
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw AuditError(path: path, reason: String(cString: strerror(errno))) }
        self.name = name
        self.file = Mutex(FileHandle(fileDescriptor: fd, closeOnDealloc: true))
    }
    // end sample: open

    // sample: consume
    public func consume(_ batch: [Envelope]) {
        let text = batch.map { "\($0.seq) \($0.name.rawValue) \($0.placement ?? "-")\n" }.joined()
        do {
            try file.withLock { try $0.write(contentsOf: Data(text.utf8)) }
            written.add(batch.count, ordering: .relaxed)
            recorder.succeeded()
        } catch {
            lost.add(batch.count, ordering: .relaxed)
            recorder.failed("\(error)")
            recorder.dropped(batch.count)
        }
    }
    // end sample: consume

    // sample: metrics
    /// `audit_lines_total{outcome="written"|"lost"}` in Prometheus text, for every scrape.
    public func exposition(accept: String?) -> (contentType: String, body: [UInt8]) {
        let text = """
            # HELP audit_lines_total Lines the audit sink wrote, or lost to a failed write.
            # TYPE audit_lines_total counter
            audit_lines_total{outcome="written"} \(written.load(ordering: .relaxed))
            audit_lines_total{outcome="lost"} \(lost.load(ordering: .relaxed))

            """
        return ("text/plain; version=0.0.4; charset=utf-8", Array(text.utf8))
    }
    // end sample: metrics

    public func flush() { file.withLock { try? $0.synchronize() } }
    public func close() { file.withLock { try? $0.close() } }

    /// Why `init` could not open `path`, found without creating anything; nil when it can: the file
    /// exists and is writable, or its directory exists and is writable.
    public static func problem(opening path: String) -> String? {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
            if isDirectory.boolValue { return "is a directory" }
            return access(path, W_OK) == 0 ? nil : "is not writable"
        }
        let parent = (path as NSString).deletingLastPathComponent
        let directory = parent.isEmpty ? "." : parent
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
            return "directory \(directory) does not exist"
        }
        return access(directory, W_OK) == 0 ? nil : "directory \(directory) is not writable"
    }

    /// The seqs written to `path`, in file order.
    public static func seqs(in path: String) throws -> [UInt64] {
        try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").compactMap { $0.split(separator: " ").first.flatMap { UInt64($0) } }
    }
}

struct AuditError: Error, CustomStringConvertible {
    var path: String
    var reason: String
    var description: String { "\(path): cannot open for appending: \(reason)" }
}

// sample: factory
/// `{ type: "audit", path: "audit.log" }` in a `sinks` list. A relative `path` is relative to the
/// config file's directory; without `path` the file is `<stateDir>/audit.log`.
public struct AuditSinkFactory: SinkFactory {
    public struct Options: Sendable { public var path: String }
    public let type = "audit"
    public init() {}

    public func options(from context: SinkContext) throws(JSONInputError) -> Options {
        try context.checkKeys(["path"])
        return Options(path: try context.filePath("path") ?? context.stateDirectory + "/audit.log")
    }

    /// What `makeSink` would fail on, without creating anything (`check-config` runs this): the file
    /// or its directory must exist and be writable. The default file's directory is the state
    /// directory, which `serve` creates before it builds the sinks.
    public func validate(_ options: Options, context: SinkContext) throws(JSONInputError) {
        guard try context.filePath("path") != nil, let problem = AuditSink.problem(opening: options.path) else { return }
        throw JSONInputError(path: context.path(of: "path"), message: "\(options.path): \(problem)")
    }

    /// The file it writes: `check-config` and `serve` check it as they check the built-in sinks'
    /// files (its directory can be created, no other sink writes it).
    public func requirements(_ options: Options, context: SinkContext) -> SinkRequirements {
        SinkRequirements(files: [.init(option: "path", path: options.path)])
    }

    public func makeSink(_ options: Options, context: SinkContext) throws -> any EventSink {
        try AuditSink(name: context.name, path: options.path)
    }
}
// end sample: factory
