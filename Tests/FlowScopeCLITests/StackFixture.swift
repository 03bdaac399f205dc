import TestSupport
import FlowEvents
import FlowJSON
import Foundation
import Synchronization
@testable import FlowScopeCLI

/// A private temporary directory (mkdtemp); tests remove it with `removeDirectory`.
func makeTemporaryDirectory(_ label: String = "cli") -> String {
    var template = Array((NSTemporaryDirectory() + "/flowscope-\(label)-XXXXXX").utf8CString)
    return template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
}

func removeDirectory(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}

func write(_ text: String, to path: String) throws {
    try Data(text.utf8).write(to: URL(fileURLWithPath: path))
}

/// What a command printed, captured through `Output`.
final class CapturedOutput: Sendable {
    private let state = Mutex<(out: String, err: String)>(("", ""))
    var out: String { state.withLock { $0.out } }
    var err: String { state.withLock { $0.err } }
    var output: Output {
        Output(out: { s in self.state.withLock { $0.out += s } }, err: { s in self.state.withLock { $0.err += s } },
               isTerminal: false)
    }
}

/// Runs `flowscope ARGS` in-process; returns the exit status and what it printed.
func flowscope(_ arguments: String...) async -> (status: Int32, out: String, err: String) {
    await flowscope(arguments)
}

func flowscope(_ arguments: [String]) async -> (status: Int32, out: String, err: String) {
    let captured = CapturedOutput()
    let status = await CommandLine.run(arguments, output: captured.output)
    return (status, captured.out, captured.err)
}

/// The package root (this file is Tests/FlowScopeCLITests/StackFixture.swift).
let packageRoot: String = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().path

/// Waits until `condition` holds, up to `seconds`.
func eventually(_ seconds: Double = 5, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        usleep(2_000)
    }
    return try condition()
}

/// Waits until `condition` holds, up to `seconds`, sleeping between checks without blocking a thread of
/// the cooperative pool (demo traffic and other tests run there).
func poll(_ seconds: Double = 5, every interval: Duration = .milliseconds(20), _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: interval)
    }
    return try await condition()
}

/// A `flowscope serve` stack started in-process on 127.0.0.1, port 0, no demo traffic, with a fresh
/// state directory and a config file written into it (loaded through `FlowScopeConfig.load`).
final class StackFixture {
    let dir: String
    let configPath: String
    let stack: ServeStack
    var port: Int { stack.server.port }
    var token: String { stack.token.value }
    private var stopped = false
    /// The fixture made `dir` and removes it at the end.
    private let ownsDirectory: Bool

    /// - Parameters:
    ///   - server: extra keys of the `server` section (JSON5 text, e.g. `limits: { ingestBurst: 1 }`).
    ///   - sinks: the `sinks` list's elements (JSON5 text); `$DIR` is replaced by the state directory.
    ///   - dir: a directory of an earlier fixture to start again in (a restart); the caller removes it.
    ///   - factories: sink types a custom distribution adds (as `CommandLine.run(_:output:sinks:)` registers them).
    init(server: String = "", sinks: String = #"{ type: "metrics" }, { type: "memory", capacity: 5000 }"#, dir: String? = nil,
         factories: [any SinkFactory] = []) throws {
        ownsDirectory = dir == nil
        self.dir = dir ?? makeTemporaryDirectory("serve")
        configPath = self.dir + "/flowscope.json5"
        let text = """
        {
          server: { \(server.contains("bind:") ? "" : "bind: \"127.0.0.1\", ")port: 0, stateDir: "\(self.dir)/state", \(server) },
          sinks: [ \(sinks.replacingOccurrences(of: "$DIR", with: self.dir)) ],
          demo: { enabled: false },
        }
        """
        try write(text, to: configPath)
        var registry = SinkRegistry.current
        for factory in factories { try registry.register(factory) }
        let configPath = self.configPath
        stack = try SinkRegistry.$current.withValue(registry) {
            try ServeStack(config: try FlowScopeConfig.load(path: configPath), overrides: ServeStack.Overrides(port: 0, noDemo: true))
        }
    }

    func connect() throws -> TestConnection { try TestConnection(port: port) }

    /// One request on a fresh connection.
    func request(_ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8] = []) throws -> HTTPReply {
        try connect().request(method, target, headers: headers, body: body)
    }

    func get(_ target: String, headers: [(String, String)] = []) throws -> HTTPReply {
        try request("GET", target, headers: headers)
    }

    /// GET and parse the JSON body.
    func getJSON(_ target: String) throws -> JSONValue {
        let reply = try get(target)
        guard reply.status == 200 else { throw ClientError("GET \(target): \(reply.status) \(reply.text)") }
        return try JSON5.parse(reply.text)
    }

    /// POST /api/ingest with the token; waits until every sink has consumed what was accepted.
    @discardableResult
    func ingest(_ body: String, token: String? = nil) throws -> HTTPReply {
        let reply = try request("POST", "/api/ingest", headers: [("Authorization", "Bearer \(token ?? self.token)"),
                                                                  ("Content-Type", "application/x-ndjson")],
                                body: Array(body.utf8))
        stack.pipeline.waitUntilDrained()
        return reply
    }

    func stop() {
        guard !stopped else { return }
        stopped = true
        stack.stop()
    }

    deinit {
        stop()
        if ownsDirectory { removeDirectory(dir) }
    }
}

/// Builds envelopes for ingest bodies (events-and-metrics.md); trace/span ids are fixed but valid.
enum Events {
    static let trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    static let span = "00f067aa0ba902b7"

    private static let traces = Atomic<UInt64>(0)

    /// A trace id of its own (32 hex digits), for a call of its own.
    static func newTrace() -> String {
        let n = traces.add(1, ordering: .relaxed).newValue
        let digits = String(n, radix: 16)
        return "f" + String(repeating: "0", count: 31 - digits.count) + digits
    }

    static func envelope(_ name: String, placement: String? = nil, run: String = "ingest-test", t: Double = 1,
                         trace: String = Events.trace, attrs: [String: JSONValue] = [:]) -> JSONValue {
        var o: [String: JSONValue] = ["ts": "2026-12-02T10:11:12.345678Z", "t": .number(t), "run": .string(run),
                                      "trace": .string(trace), "span": .string(span), "name": .string(name),
                                      "attrs": .object(attrs)]
        if let placement { o["placement"] = .string(placement) }
        return .object(o)
    }

    /// A fetch.end as the engine writes it, in a trace of its own (a call without its start).
    static func fetchEnd(_ placement: String, source: String, duration: Double, run: String = "ingest-test",
                         targetingLost: Bool = false, errorCode: String? = nil, call: String = "getFlow") -> JSONValue {
        var attrs: [String: JSONValue] = ["call": .string(call), "source": .string(source), "variation": "v1",
                                          "audience": "All Users", "targetingLost": .bool(targetingLost),
                                          "duration": .number(duration)]
        if let errorCode { attrs["errorCode"] = .string(errorCode) }
        return envelope("fetch.end", placement: placement, run: run, trace: newTrace(), attrs: attrs)
    }

    /// JSON Lines text of `events`.
    static func lines(_ events: [JSONValue]) -> String {
        events.map(\.jsonText).joined(separator: "\n") + "\n"
    }

    /// A JSON array of `events`.
    static func array(_ events: [JSONValue]) -> String {
        JSONValue.array(events).jsonText
    }
}

extension HTTPReply {
    /// The body parsed as JSON (`.null` when it is not JSON).
    var json: JSONValue { (try? JSON5.parse(text)) ?? .null }
    /// `error.message` of a JSON error body.
    var errorMessage: String? { json["error"]?["message"]?.stringValue }
}

/// A finished child process: its status and what it printed.
struct ProcessResult {
    var status: Int32
    var out: String
    var err: String
}

/// Runs `executable` with `arguments`, feeding `input` on stdin; killed after `timeout` seconds.
func runProcess(_ executable: String, _ arguments: [String], input: Data = Data(), timeout: Double = 20,
                currentDirectory: String? = nil) throws -> ProcessResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if let currentDirectory { process.currentDirectoryURL = URL(fileURLWithPath: currentDirectory) }
    let stdin = Pipe(), stdout = Pipe(), stderr = Pipe()
    process.standardInput = stdin
    process.standardOutput = stdout
    process.standardError = stderr
    try process.run()
    let pid = process.processIdentifier
    let watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
    DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: watchdog)
    defer { watchdog.cancel() }
    // Read both pipes on their own threads so a full pipe never blocks the child.
    let errData = DataBox()
    let errDone = DispatchSemaphore(value: 0)
    let errHandle = stderr.fileHandleForReading
    Thread {
        let data = errHandle.readDataToEndOfFile()
        errData.value.withLock { $0 = data }
        errDone.signal()
    }.start()
    stdin.fileHandleForWriting.write(input)
    try? stdin.fileHandleForWriting.close()
    let out = stdout.fileHandleForReading.readDataToEndOfFile()
    errDone.wait()
    process.waitUntilExit()
    return ProcessResult(status: process.terminationStatus, out: String(decoding: out, as: UTF8.self),
                         err: String(decoding: errData.value.withLock { $0 }, as: UTF8.self))
}

/// Bytes filled in by another thread.
final class DataBox: Sendable {
    let value = Mutex(Data())
}

/// GET `path` from a stack on a thread of its own: the blocking socket then holds no thread of the
/// cooperative pool, which the demo traffic needs.
func getText(_ stack: ServeStack, _ path: String) async throws -> String {
    let port = stack.server.port
    return try await withCheckedThrowingContinuation { (done: CheckedContinuation<String, any Error>) in
        Thread.detachNewThread { done.resume(with: Result { try TestConnection(port: port).request("GET", path).text }) }
    }
}
