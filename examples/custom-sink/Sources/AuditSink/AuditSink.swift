import FlowEvents
import Foundation
import Synchronization

/// Appends one line per event to a file: `seq name placement`. A failed write marks the sink down
/// (it shows in `flowscope_sink_up`, `/api/sinks`, `/healthz` and the dashboard) and counts the
/// lines it lost.
public final class AuditSink: EventSink {
    public let name: String
    public var type: String { "audit" }
    private let file: Mutex<FileHandle>
    private let recorder = SinkHealthRecorder()
    public var health: SinkHealth { recorder.current }

    public init(name: String = "audit", path: String) throws {
        guard FileManager.default.createFile(atPath: path, contents: nil) else { throw AuditError(path: path) }
        guard let handle = FileHandle(forWritingAtPath: path) else { throw AuditError(path: path) }
        handle.seekToEndOfFile()
        self.name = name
        self.file = Mutex(handle)
    }

    public func consume(_ batch: [Envelope]) {
        let text = batch.map { "\($0.seq) \($0.name.rawValue) \($0.placement ?? "-")\n" }.joined()
        do {
            try file.withLock { try $0.write(contentsOf: Data(text.utf8)) }
            recorder.succeeded()
        } catch {
            recorder.failed("\(error)")
            recorder.dropped(batch.count)
        }
    }

    public func flush() { file.withLock { try? $0.synchronize() } }
    public func close() { file.withLock { try? $0.close() } }

    /// The seqs written to `path`, in file order.
    public static func seqs(in path: String) throws -> [UInt64] {
        try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").compactMap { $0.split(separator: " ").first.flatMap { UInt64($0) } }
    }
}

struct AuditError: Error, CustomStringConvertible {
    var path: String
    var description: String { "\(path): cannot open for writing" }
}

/// `{ type: "audit", path: "audit.log" }` in a `sinks` list; `path` defaults to `<stateDir>/audit.log`.
public struct AuditSinkFactory: SinkFactory {
    public struct Options: Sendable { public var path: String }
    public let type = "audit"
    public init() {}

    public func options(from context: SinkContext) throws(JSONInputError) -> Options {
        try context.checkKeys(["path"])
        return Options(path: try context.string("path") ?? context.stateDirectory + "/audit.log")
    }

    public func makeSink(_ options: Options, context: SinkContext) throws -> any EventSink {
        try AuditSink(name: context.name, path: options.path)
    }
}
