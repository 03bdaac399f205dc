import FlowEvents
import FlowFetch
import FlowJSON
import FlowSim
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing
#if canImport(FlowTLS)
import FlowTLS
#endif

/// The events of one test, kept in memory, written to `FLOWSCOPE_TRACE_DIR/<test-name>.jsonl` and
/// streamed to `FLOWSCOPE_ATTACH` when those are set, with the test's verdict (`test.start` and
/// `test.end` events). One recorder per test: parallel tests never see each other's events (the
/// current recorder is task-local, there is no global bootstrap).
public final class FlowTraceRecorder: Sendable {
    /// The test's name, made a valid run name (``Envelope/runName(_:empty:)``: an empty name is
    /// `test`, a name over 256 UTF-8 bytes is cut and ends with a hash of the whole name); its trace
    /// file's name (``fileName(for:)``).
    public let name: String
    /// The test process run it belongs to (shared by every recorder of the process by default).
    public let invocation: TestInvocation
    /// The `run` of its envelopes: `test:<invocation>:<name>` (``TestInvocation/run(for:)``), so the
    /// same test in a later invocation is another run.
    public let run: String
    /// Called when an expectation fails, with the message (timeline included) and where it was made.
    public let onFailure: @Sendable (String, SourceLocation) -> Void
    /// The test's session (random, one per recorder): events that carry no session of their own
    /// (a `FlowClient` stamps its own) are recorded with it.
    public let session = SessionID.random()
    private let envelopeStore = Mutex<[Envelope]>([])
    private let traceDirectory: String?
    private let attach: AttachStream?
    private let attachRequired: Bool
    /// Whether the test framework reports every issue to the recorder (`.flowTrace` in Swift
    /// Testing), so its own expectations need not count their failures themselves.
    let frameworkReportsIssues: Bool
    private let verdict = Mutex(Verdict())
    private let testTrace = TraceID(high: .random(in: 1 ... .max), low: .random(in: 0 ... .max))
    private let startedAt = Date()

    /// What the test came to so far.
    private struct Verdict {
        var failures: [String] = []
        var failureCount = 0
        var skipped: String?
        var ended = false
        var attachReported = false
        /// What ``reproductionNote()`` said per call (trace), so each is written once.
        var reproductions: [String: String] = [:]
    }

    /// A recorder named `name` (made a valid run name). `environment` supplies FLOWSCOPE_TRACE_DIR,
    /// FLOWSCOPE_ATTACH, FLOWSCOPE_TOKEN, FLOWSCOPE_CA, FLOWSCOPE_ATTACH_RETRY and
    /// FLOWSCOPE_ATTACH_REQUIRED (the process environment by default).
    /// `onFailure` defaults to Swift Testing's `Issue.record` inside a Swift Testing test and to
    /// standard error elsewhere (XCTest users pass `{ message, _ in XCTFail(message) }`).
    public convenience init(name: String, environment: [String: String] = ProcessInfo.processInfo.environment,
                            invocation: TestInvocation = .current,
                            onFailure: (@Sendable (String, SourceLocation) -> Void)? = nil) {
        self.init(name: name, environment: environment, invocation: invocation, onFailure: onFailure, framework: nil)
    }

    /// `framework`: `swift-testing` when Swift Testing reports every issue of the test to the
    /// recorder (``FlowTraceTrait``), nil elsewhere.
    init(name: String, environment: [String: String], invocation: TestInvocation,
         onFailure: (@Sendable (String, SourceLocation) -> Void)?, framework: String?) {
        self.name = Envelope.runName(name, empty: "test")
        self.invocation = invocation
        self.run = Envelope.runName(invocation.run(for: self.name), empty: "test")
        self.onFailure = onFailure ?? FlowTraceRecorder.defaultFailure
        self.frameworkReportsIssues = framework == "swift-testing"
        let dir = environment["FLOWSCOPE_TRACE_DIR"].flatMap { $0.isEmpty ? nil : $0 }
        self.traceDirectory = dir
        self.attachRequired = ["1", "true", "yes"].contains(environment["FLOWSCOPE_ATTACH_REQUIRED"]?.lowercased() ?? "")
        self.attach = environment["FLOWSCOPE_ATTACH"].flatMap { $0.isEmpty ? nil : $0 }.map {
            AttachStream(server: $0, token: environment["FLOWSCOPE_TOKEN"], caFile: environment["FLOWSCOPE_CA"],
                         retrySeconds: environment["FLOWSCOPE_ATTACH_RETRY"].flatMap(Double.init).map { max(0, min($0, 3600)) }
                            ?? AttachStream.defaultRetrySeconds)
        }
        #if canImport(FlowTLS)
        // Linux: FLOWSCOPE_CA and HTTPBackend(caFile:) in a traced test trust their file through
        // OpenSSL, as URLSession there cannot (a transport the tests installed themselves wins).
        if !CustomCATransport.isInstalled { TLSTransport.install() }
        #endif
        start(framework: framework ?? "none")
    }

    /// Records one engine event (stamped with a process-wide seq, the wall clock and, when it has
    /// none, the test's ``session``).
    public func record(_ event: EngineEvent) {
        var event = event
        if event.session == nil { event.session = session }
        let envelope = Envelope(event, seq: FlowTraceRecorder.sequence.add(1, ordering: .relaxed).newValue,
                                ts: Date().timeIntervalSince1970, run: run)
        envelopeStore.withLock { $0.append(envelope) }
        attach?.append(envelope)
    }

    /// Every event recorded so far, in order, the test's own `test.start` and `test.end` included.
    public var envelopes: [Envelope] { envelopeStore.withLock { $0 } }
    /// Every engine event recorded so far, in order (not the test's own `test.start`/`test.end`).
    public var events: [EngineEvent] {
        envelopes.compactMap { $0.name == .testStart || $0.name == .testEnd ? nil : $0.event }
    }
    /// The recorded calls, with their requests and events.
    public var timeline: FlowTimeline { FlowTimeline(events: events) }

    /// The trace file this recorder writes when FLOWSCOPE_TRACE_DIR is set.
    public var traceFile: String? { traceDirectory.map { "\($0)/\(FlowTraceRecorder.fileName(for: name)).jsonl" } }

    /// What the test came to so far: failed once an issue was recorded (or, outside Swift Testing,
    /// once an expectation of the test kit failed or the body threw), skipped when it was skipped.
    public var status: TestStatus {
        verdict.withLock { v in v.failureCount > 0 ? .failed : v.skipped != nil ? .skipped : .passed }
    }

    /// The failures noted so far (at most 20 messages of at most 2,000 bytes each).
    public var failures: [String] { verdict.withLock { $0.failures } }

    /// Notes a failure of the test (what makes its verdict `failed`).
    public func noteFailure(_ message: String) {
        verdict.withLock { v in
            v.failureCount += 1
            guard v.failures.count < 20 else { return }
            v.failures.append(message.utf8.count <= 2000 ? message : String(message.prefix(1990)) + " [cut]")
        }
    }

    /// Notes that the test was skipped (a verdict of `skipped` unless it also failed).
    public func noteSkipped(_ reason: String) {
        verdict.withLock { v in if v.skipped == nil { v.skipped = reason } }
    }

    /// Records the test's `test.start` event (when the recorder is made).
    private func start(framework: String) {
        var attrs: EventAttributes = ["test": .string(name), "invocation": .string(invocation.id),
                                      "invocationStart": .number(invocation.start), "host": .string(invocation.host),
                                      "framework": .string(framework)]
        if let revision = invocation.revision { attrs.append("revision", .string(revision)) }
        record(testEvent(.testStart, attrs))
    }

    /// The timeline of every call so far, for a failure message (empty when there is none), and the
    /// scenario file that reproduces the last call of a real client (``reproductionNote()``).
    func timelineText() -> String {
        let timeline = self.timeline
        guard !timeline.calls.isEmpty else { return "" }
        return "timeline (\(name)):\n" + timeline.text(origin: timeline.calls.first?.startedAt) + reproductionNote()
    }

    /// For a test that ran a real `FlowClient` (events of a session other than the test's own): a
    /// line naming a scenario file that reproduces its last finished call in virtual time (written
    /// once per call, into FLOWSCOPE_TRACE_DIR or the temporary directory), or why it cannot be.
    /// Empty when the test ran no real client.
    func reproductionNote() -> String {
        let envelopes = self.envelopes
        guard let last = envelopes.last(where: { e in
            (e.name == .fetchEnd || e.name == .preloadEnd) && e.session != nil && e.session != session
        }) else { return "" }
        let trace = last.event.trace.hex
        if let known = verdict.withLock({ $0.reproductions[trace] }) { return known }
        let note: String
        switch Recording(envelopes).scenario(trace: trace, session: true) {
        case .failure(let refusal):
            note = "\nnot reproducible as a scenario (\(refusal.reason.rawValue)): \(refusal.message)\n"
        case .success(let reproduced):
            let directory = traceDirectory ?? FileManager.default.temporaryDirectory.appendingPathComponent("flowscope-reproduce").path
            let file = "\(directory)/\(FlowTraceRecorder.fileName(for: name)).\(trace.prefix(8)).scenario.json5"
            do {
                try AtomicFile.makeDirectory(directory)
                try AtomicFile.write(Array(reproduced.text.utf8), to: file)
                note = "\nreproduces in virtual time: flowscope run \(file)\n"
            } catch {
                note = "\ncannot write the scenario that reproduces call \(trace): \(error)\n"
            }
        }
        verdict.withLock { $0.reproductions[trace] = note }
        return note
    }

    private func testEvent(_ name: EventName, _ attrs: EventAttributes) -> EngineEvent {
        EngineEvent(name: name, t: max(0, Date().timeIntervalSince1970 - invocation.start), placement: nil,
                    trace: testTrace, span: SpanID(trace: testTrace, index: name == .testStart ? 0 : 1), attrs: attrs)
    }

    private func fail(attachProblem: String) {
        guard verdict.withLock({ v in defer { v.attachReported = true }; return !v.attachReported }) else { return }
        let message = "FLOWSCOPE_ATTACH_REQUIRED is set and the events of \(name) were not delivered: \(attachProblem)"
        noteFailure(message)  // after test.end, where no issue handler notes it
        onFailure(message, SourceLocation(fileID: "FlowScopeTesting/FlowTrace.swift", filePath: #filePath, line: #line, column: 1))
    }

    /// Ends the recording: records `test.end` with the verdict, writes the trace file and sends
    /// what is left to the attached server. Never throws: an unreachable server or an unwritable
    /// directory prints one warning, and fails the test when FLOWSCOPE_ATTACH_REQUIRED is set.
    public func finish() async {
        let ending = verdict.withLock { v -> (Bool, [String], Int, String?) in
            defer { v.ended = true }
            return (!v.ended, v.failures, v.failureCount, v.skipped)
        }
        if ending.0 {
            let status = self.status
            var attrs: EventAttributes = ["test": .string(name), "invocation": .string(invocation.id),
                                          "status": .string(status.rawValue),
                                          "duration": .number((Date().timeIntervalSince(startedAt) * 1000).rounded() / 1000),
                                          "failures": .array(ending.1.map(JSONValue.string))]
            if ending.2 > ending.1.count { attrs.append("failureCount", .number(Double(ending.2))) }
            if let skipped = ending.3, status == .skipped { attrs.append("skipReason", .string(skipped)) }
            record(testEvent(.testEnd, attrs))
        }
        if let file = traceFile, let dir = traceDirectory {
            let text = envelopes.map { $0.jsonLine + "\n" }.joined()
            do {
                try AtomicFile.makeDirectory(dir)
                try AtomicFile.write(Array(text.utf8), to: file)
            } catch {
                FlowTraceRecorder.warnOnce("flowscope: cannot write the trace of \(name): \(error)")
            }
        }
        await attach?.close()
        if ending.0, attachRequired, let failure = attach?.failure {
            fail(attachProblem: failure)
        }
    }

    /// Why events stopped streaming to FLOWSCOPE_ATTACH (the warning printed once per process), or
    /// nil while they stream or when nothing is attached.
    var attachFailure: String? { attach?.failure }

    // MARK: process-wide state (ids and warnings only; no events)

    static let sequence = Atomic<UInt64>(0)
    private static let warned = Atomic<Bool>(false)
    private static let usedNames = Mutex<[String: Int]>([:])

    /// Prints `message` to standard error the first time only.
    static func warnOnce(_ message: String) {
        guard !warned.exchange(true, ordering: .relaxed) else { return }
        FileHandle.standardError.write(Data((message + "\n").utf8))
    }

    /// `name` the first time, then `name-2`, `name-3`, ... for later recorders of the same name in
    /// this process (the recorder then makes it a valid run name, and ``fileName(for:)`` a file name).
    static func uniqueName(_ name: String) -> String {
        usedNames.withLock { used in
            let n = (used[name] ?? 0) + 1
            used[name] = n
            return n == 1 ? name : "\(name)-\(n)"
        }
    }

    /// `name` made safe as a file name.
    public static func fileName(for name: String) -> String {
        var out = ""
        var lastWasUnderscore = false
        for s in name.unicodeScalars {
            let safe = s.isASCII && (s.properties.isAlphabetic || ("0"..."9").contains(s) || s == "." || s == "-" || s == "_")
            if safe { out.unicodeScalars.append(s); lastWasUnderscore = s == "_" }
            else if !lastWasUnderscore { out += "_"; lastWasUnderscore = true }
        }
        while out.hasPrefix(".") { out.removeFirst() }
        while out.hasSuffix("_") { out.removeLast() }
        if out.isEmpty { out = "test" }
        if out.utf8.count > 120 {
            out = String(out.prefix(100)) + "-" + String(Digest.hex(Digest.sha256(Array(name.utf8))).prefix(16))
        }
        return out
    }

    static let defaultFailure: @Sendable (String, SourceLocation) -> Void = { message, location in
        if Test.current != nil {
            Issue.record(Comment(rawValue: message), sourceLocation: location)
        } else {
            FileHandle.standardError.write(Data("\(location.fileID):\(location.line): \(message)\n".utf8))
        }
    }
}

/// The test kit's entry points: the current test's recorder and the sink to give a FlowClient.
///
/// ```swift
/// @Test(.flowTrace) func paywallFallsBack() async throws {
///     let client = FlowClient(profile: Profile(id: "u1"), backend: backend, events: FlowTrace.sink)
///     _ = try await client.getFlow(placementId: "main", loadTimeout: 1)
///     expectFlow("main", source: .fallbackFile)   // prints the call's timeline when it fails
/// }
/// ```
public enum FlowTrace {
    /// The recorder of the test running in this task (nil outside `.flowTrace` / ``withFlowTrace(_:onFailure:_:)``).
    @TaskLocal public static var current: FlowTraceRecorder?

    /// An event sink for a FlowClient: records into the current test's recorder (the one current when
    /// the sink is made, else the one current where each event is emitted).
    public static var sink: EngineEventSink { FlowTraceSink(recorder: current) }
}

/// Records engine events into a test's recorder.
public struct FlowTraceSink: EngineEventSink {
    /// The recorder it was bound to when made, if any.
    public let recorder: FlowTraceRecorder?
    /// A sink bound to `recorder` (nil: the task-local current recorder at each event).
    public init(recorder: FlowTraceRecorder?) { self.recorder = recorder }
    public func receive(_ event: EngineEvent) { (recorder ?? FlowTrace.current)?.record(event) }
}

/// What a traced test came to (the `status` of its `test.end` event).
public enum TestStatus: String, Sendable, Hashable, CaseIterable {
    case passed, failed, skipped
}

/// Runs `body` with a fresh recorder named `name` as the current one, then finishes it (verdict,
/// trace file, attached server). For XCTest or any code outside Swift Testing:
///
/// ```swift
/// func testPaywall() async throws {
///     try await withFlowTrace(onFailure: { message, _ in XCTFail(message) }) { ... }
/// }
/// ```
///
/// The verdict (`test.end`) counts the test kit's failed expectations and an error `body` throws
/// (`XCTSkip` makes it skipped); on Linux also every XCTest failure recorded while `body` runs
/// (`XCTAssert...`, `XCTFail`), seen through XCTest's observation API. `environment` supplies
/// FLOWSCOPE_TRACE_DIR and FLOWSCOPE_ATTACH (the process environment by default).
public func withFlowTrace<R: Sendable>(_ name: String = #function,
                                       environment: [String: String] = ProcessInfo.processInfo.environment,
                                       onFailure: (@Sendable (String, SourceLocation) -> Void)? = nil,
                                       _ body: () async throws -> R) async rethrows -> R {
    let recorder = FlowTraceRecorder(name: FlowTraceRecorder.uniqueName(name), environment: environment, onFailure: onFailure)
    do {
        #if canImport(XCTest) && os(Linux)
        // Inside XCTest (no Swift Testing test running), XCTest's own failures count too.
        let result = try await FlowTrace.$current.withValue(recorder) {
            guard Test.current == nil else { return try await body() }
            XCTestVerdictObserver.register()
            return try await XCTestVerdictObserver.shared.observing(recorder) { try await body() }
        }
        #else
        let result = try await FlowTrace.$current.withValue(recorder) { try await body() }
        #endif
        await recorder.finish()
        return result
    } catch {
        if FlowTraceTrait.isSkip(error) { recorder.noteSkipped(String(describing: error)) }
        else { recorder.noteFailure("Caught error: \(error)") }
        await recorder.finish()
        throw error
    }
}

/// The `.flowTrace` trait: each test it applies to (directly or through its suite) gets its own
/// recorder, and its verdict from Swift Testing itself: every issue recorded in the test counts
/// (an `#expect`, a `#require`, a thrown error, the test kit's expectations), and each failing one
/// carries the timeline of the test's calls.
public struct FlowTraceTrait: TestTrait, SuiteTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        guard !test.isSuite else { return try await function() }
        let name = test.id.nameComponents.map { $0.hasSuffix("()") ? String($0.dropLast(2)) : $0 }.joined(separator: ".")
        let recorder = FlowTraceRecorder(name: FlowTraceRecorder.uniqueName(name.isEmpty ? test.name : name),
                                         environment: ProcessInfo.processInfo.environment, invocation: .current,
                                         onFailure: nil, framework: "swift-testing")
        let issues: IssueHandlingTrait = .compactMapIssues { issue in recorder.handle(issue) }
        do {
            try await FlowTrace.$current.withValue(recorder) {
                try await issues.provideScope(for: test, testCase: testCase) {
                    do {
                        try await function()
                    } catch let error where !FlowTraceTrait.isSkip(error) && !(error is ExpectationFailedError) {
                        // Recorded here, inside the issue handler, so its failure carries the timeline
                        // too (`#require` has recorded its own issue before throwing).
                        Issue.record(error, sourceLocation: test.sourceLocation)
                    }
                }
            }
        } catch {
            if FlowTraceTrait.isSkip(error) { recorder.noteSkipped(String(describing: error)) }
            await recorder.finish()
            throw error
        }
        await recorder.finish()
    }

    /// Whether `error` skips the test rather than failing it (what `Test.cancel()` and XCTest's
    /// `XCTSkip` throw).
    static func isSkip(_ error: any Error) -> Bool {
        let type = String(describing: Swift.type(of: error))
        return type == "SkipInfo" || type == "XCTSkip"
    }
}

extension FlowTraceRecorder {
    /// Swift Testing's issue handler for a traced test: notes a failing issue in the verdict and
    /// adds the timeline to it unless it carries one (the test kit's expectations do).
    func handle(_ issue: Issue) -> Issue? {
        guard issue.isFailure else { return issue }
        let comments = issue.comments.map(\.rawValue)
        let location = issue.sourceLocation.map { "\($0.fileID):\($0.line): " } ?? ""
        let what = comments.first.map { c in String(c.prefix { $0 != "\n" }) }
        let kind = String(describing: issue.kind)
        // An issue recorded by hand (`Issue.record`, the test kit's expectations) is its comment.
        var unconditional = false
        if case .unconditional = issue.kind { unconditional = true }
        noteFailure(location + (what.map { unconditional ? $0 : kind + ": " + $0 } ?? kind))
        guard !comments.contains(where: { $0.contains("\ntimeline (") || $0.hasPrefix("timeline (") }) else { return issue }
        let timeline = timelineText()
        guard !timeline.isEmpty else { return issue }
        var issue = issue
        issue.comments.append(Comment(rawValue: timeline))
        return issue
    }
}

extension Trait where Self == FlowTraceTrait {
    /// Gives each test its own flow trace recorder (``FlowTrace/current``).
    public static var flowTrace: Self { FlowTraceTrait() }
}

/// Streams a test's events to a running `flowscope serve` (POST /api/ingest, JSON Lines, bearer
/// token) in batches, one at a time, in order. With FLOWSCOPE_CA over https it trusts that file:
/// on Linux through OpenSSL (FlowTLS, linked on Linux only), on Apple platforms through URLSession. A batch the server refuses for now (503 or 429, as
/// it does while its durable sinks are behind) is sent again after the wait its `Retry-After` asks
/// (at least 0.2 s, doubling up to 5 s), for at most `retrySeconds` in all. Never fails a test: the
/// first failure, or a batch still refused after that, prints one warning saying how many events
/// were not delivered and stops the stream.
final class AttachStream: Sendable {
    /// The most seconds one refused batch is retried for, unless FLOWSCOPE_ATTACH_RETRY says otherwise.
    static let defaultRetrySeconds = 30.0
    private struct State {
        var buffer: [Envelope] = []
        var broken = false
        var failure: String?
        var flusher: Task<Void, Never>?
        /// The last send scheduled: the next one waits for it, so batches go out in order.
        var tail: Task<Void, Never>?
        /// Events given up on: a batch that failed or stayed refused, and everything after it.
        var undelivered = 0
    }
    private let state = Mutex(State())
    private let endpoint: URL?
    private let token: String?
    /// Why nothing can be sent (a malformed FLOWSCOPE_ATTACH, a FLOWSCOPE_CA that is not a readable
    /// file), known before the first send.
    let problem: String?
    /// FLOWSCOPE_CA: the server's certificate (or its CA), trusted through ``CustomCATransport`` (on
    /// Linux that needs `TLSTransport.install()` from the FlowTLS library, since URLSession there cannot
    /// trust a custom CA). Looked up at the first send, so a test may install it in its own setup.
    private let caFile: String?
    private let retrySeconds: Double

    init(server: String, token: String?, caFile: String?, retrySeconds: Double = AttachStream.defaultRetrySeconds) {
        var base = server
        while base.hasSuffix("/") { base.removeLast() }
        let endpoint = URL(string: base + "/api/ingest")
        self.endpoint = endpoint
        self.token = token
        self.retrySeconds = retrySeconds
        let given = caFile.flatMap { $0.isEmpty ? nil : $0 }
        // Resolved once, against the working directory the tests run in, and named so in errors.
        let caFile = given.map { Self.resolve($0) }
        self.caFile = caFile
        if endpoint == nil || !(server.hasPrefix("http://") || server.hasPrefix("https://")) {
            problem = "FLOWSCOPE_ATTACH=\(server): expected http://host:port or https://host:port"
        } else if let given, let caFile, !FileManager.default.isReadableFile(atPath: caFile) {
            problem = "FLOWSCOPE_CA=\(given): no readable file at \(caFile)"
                + (given.hasPrefix("/") ? "" : " (relative to the working directory \(FileManager.default.currentDirectoryPath))")
                + "; `flowscope attach-env` in serve's directory prints the variables with absolute paths"
        } else if let endpoint, !(caFile != nil && endpoint.scheme == "https"),
                  let urlSession = HTTPBackend.urlSessionProblem(for: endpoint) {
            // Without FLOWSCOPE_CA the events go through URLSession.
            problem = "FLOWSCOPE_ATTACH=\(server): \(urlSession)"
        } else {
            problem = nil
        }
    }

    /// Why the stream stopped, if it did.
    var failure: String? { state.withLock { $0.failure } }

    /// `path` made absolute against the working directory (`~/` against the home directory).
    static func resolve(_ path: String) -> String {
        if path.hasPrefix("/") { return URL(fileURLWithPath: path).standardizedFileURL.path }
        if path.hasPrefix("~/") {
            return URL(fileURLWithPath: NSHomeDirectory()).appendingPathComponent(String(path.dropFirst(2))).standardizedFileURL.path
        }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(path).standardizedFileURL.path
    }

    /// Events that were not delivered (the stream stopped before or while sending them).
    var undelivered: Int { state.withLock { $0.undelivered } }

    func append(_ e: Envelope) {
        state.withLock { s in
            guard !s.broken else { s.undelivered += 1; return }
            s.buffer.append(e)
            guard s.flusher == nil else { return }
            let previous = s.tail
            let flusher = Task { [self] in
                try? await Task.sleep(for: .milliseconds(200))
                await previous?.value
                await self.flush()
            }
            s.flusher = flusher
            s.tail = flusher
        }
    }

    func close() async {
        let pending = state.withLock { $0.tail }
        await pending?.value
        await flush()
    }

    /// What one POST came to.
    private enum Sent {
        case delivered
        /// 503 or 429: try again after `retryAfter` seconds (the server's `Retry-After`), if it said.
        case refused(status: Int, retryAfter: Double?, reason: String)
        case failed(String)
    }

    private func flush() async {
        let batch = state.withLock { s -> [Envelope] in
            defer { s.buffer = []; s.flusher = nil }
            return s.broken ? [] : s.buffer
        }
        guard !batch.isEmpty else { return }
        if let problem { return fail(problem, undelivered: batch.count) }
        guard let endpoint else { return }
        let body = Array(batch.map { $0.jsonLine + "\n" }.joined().utf8)
        var waited = 0.0, backoff = 0.2, attempts = 0
        while true {
            attempts += 1
            switch await send(body, to: endpoint) {
            case .delivered:
                return
            case .failed(let message):
                return fail(message, undelivered: batch.count)
            case .refused(let status, let retryAfter, let reason):
                let wait = max(retryAfter ?? 0, backoff)
                guard waited + wait <= retrySeconds else {
                    return fail("FLOWSCOPE_ATTACH=\(endpoint.absoluteString): the server refused a batch "
                                + "\(attempts) time\(attempts == 1 ? "" : "s") in \(Int(waited.rounded())) s (\(status)\(reason)); "
                                + "\(batch.count) event\(batch.count == 1 ? "" : "s") not delivered (FLOWSCOPE_ATTACH_RETRY=\(Int(retrySeconds)))",
                                undelivered: batch.count)
                }
                try? await Task.sleep(for: .seconds(wait))
                waited += wait
                backoff = min(backoff * 2, 5)
            }
        }
    }

    /// One POST of `body`.
    private func send(_ body: [UInt8], to endpoint: URL) async -> Sent {
        if let caFile, endpoint.scheme == "https" {
            let transport: any HTTPTransport
            do throws(HTTPBackendError) {
                transport = try CustomCATransport.make(caFile: caFile)
            } catch {
                return .failed("FLOWSCOPE_CA=\(caFile): \(error.message)")
            }
            var headers = [("Content-Type", "application/x-ndjson")]
            if let token { headers.append(("Authorization", "Bearer \(token)")) }
            let exchange = HTTPExchange(method: "POST", url: endpoint, headers: headers, body: body)
            switch await transport.perform(exchange, timeout: 5, maxBodyBytes: 1 << 20) {
            case .success(let a) where (200..<300).contains(a.status): return .delivered
            case .success(let a): return answered(a.status, a.body, retryAfter: nil, endpoint: endpoint)
            case .failure(let f):
                return .failed("FLOWSCOPE_ATTACH=\(endpoint.absoluteString): \(f.reason) (\(f.detail)); events stay in the test's memory")
            }
        }
        var request = URLRequest(url: endpoint, timeoutInterval: 5)
        request.httpMethod = "POST"
        request.setValue("application/x-ndjson", forHTTPHeaderField: "Content-Type")
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        request.httpBody = Data(body)
        do {
            let (data, response) = try await URLSession.shared.data(for: request)
            let http = response as? HTTPURLResponse
            let status = http?.statusCode ?? 0
            if (200..<300).contains(status) { return .delivered }
            return answered(status, Array(data), retryAfter: http?.value(forHTTPHeaderField: "Retry-After").flatMap(Double.init), endpoint: endpoint)
        } catch {
            return .failed("FLOWSCOPE_ATTACH=\(endpoint.absoluteString): \(error.localizedDescription); events stay in the test's memory")
        }
    }

    /// A non-2xx answer: 503 and 429 are "not now" (the wait from `Retry-After`, else from the JSON
    /// error body's `retryAfter`); anything else stops the stream.
    private func answered(_ status: Int, _ body: [UInt8], retryAfter: Double?, endpoint: URL) -> Sent {
        if status == 503 || status == 429 {
            let fromBody = (try? JSON5.parse(bytes: body))?["error"]?["retryAfter"]?.numberValue
            return .refused(status: status, retryAfter: retryAfter ?? fromBody, reason: Self.reason(body))
        }
        return .failed("FLOWSCOPE_ATTACH=\(endpoint.absoluteString): the server answered \(status)\(Self.reason(body))")
    }

    /// `: ` and the server's reason for refusing a batch: the message of its JSON error body
    /// (`{"error":{"message":...}}`), else the start of the body's text; empty without a body.
    static func reason(_ body: [UInt8]) -> String {
        if let message = (try? JSON5.parse(bytes: body))?["error"]?["message"]?.stringValue, !message.isEmpty {
            return ": " + message
        }
        let text = String(decoding: body.prefix(200), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? "" : ": " + text
    }

    private func fail(_ message: String, undelivered: Int) {
        state.withLock { s in
            s.undelivered += undelivered + s.buffer.count
            s.broken = true; s.buffer = []
            if s.failure == nil { s.failure = message }
        }
        FlowTraceRecorder.warnOnce("flowscope: not streaming test events: \(message)")
    }
}
