import FlowEvents
import FlowJSON
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// An error setting up the otlp sink, naming the file or endpoint at fault.
public struct OTLPSinkError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The output file or endpoint.
    public var target: String
    /// What is wrong.
    public var message: String

    /// An error about `target`.
    public init(target: String, message: String) { self.target = target; self.message = message }

    /// `target: message`, the line users see.
    public var description: String { "\(target): \(message)" }
}

/// What the otlp sink has done so far.
public struct OTLPSinkStats: Sendable, Equatable {
    /// Spans accepted by the collector (or written to the file).
    public var exportedSpans = 0
    /// Spans dropped because the export queue was full (oldest first).
    public var droppedSpans = 0
    /// Spans given up on: retries exhausted, or rejected by the collector (4xx other than 429).
    public var failedSpans = 0
    /// Export requests that succeeded.
    public var requests = 0
    /// Attempts repeated after a 429, a 5xx or a transport error.
    public var retries = 0
    /// Traces exported early because the open-trace table was full.
    public var overflowTraces = 0
    /// Traces exported without their root end (timeout, overflow, shutdown).
    public var incompleteTraces = 0
    /// Events dropped because their trace had already been exported.
    public var lateEvents = 0
    /// Traces waiting for their root to end.
    public var openTraces = 0
    /// Spans waiting to be sent.
    public var queuedSpans = 0
    /// The last export error, if any.
    public var lastError: String?
    /// Export attempts that failed (each retry's failure counts).
    public var failedAttempts = 0
    /// The last export attempt failed.
    public var failing = false

    /// All zero.
    public init() {}
}

/// The `otlp` sink: traces to an OpenTelemetry collector over OTLP/HTTP JSON, or to a file.
///
/// Events are assembled into spans by `OTLPTraceBuilder` on the pipeline's thread (in memory
/// only); finished spans go to a bounded queue that the sink's own thread sends in batches, with
/// retries and exponential backoff. `consume` never waits on the network.
///
/// ```swift
/// let otlp = try OTLPSink(options: .init(destination: .endpoint(URL(string: "http://127.0.0.1:4318/v1/traces")!)))
/// ```
public final class OTLPSink: EventSink {
    /// Where request bodies go.
    public enum Destination: Sendable, Equatable {
        /// A collector's `/v1/traces` URL (http or https).
        case endpoint(URL)
        /// A file receiving each request body as one line of JSON.
        case file(String)
    }

    /// The sink's options (`sinks[i]` in the config with `"type": "otlp"`).
    public struct Options: Sendable, Equatable {
        /// The collector endpoint or the output file.
        public var destination: Destination
        /// Extra HTTP headers (for example an API key).
        public var headers: [String: String] = [:]
        /// Seconds allowed for one HTTP request.
        public var timeout: Double = 10
        /// Most spans per export request.
        public var batchSize: Int = 512
        /// Most seconds a finished span waits before it is sent.
        public var flushInterval: Double = 5
        /// Most spans waiting to be sent; beyond it the oldest are dropped (counted).
        public var maxQueueSize: Int = 20_000
        /// Most traces waiting for their root to end (see `OTLPTraceBuilder`).
        public var maxOpenTraces: Int = 10_000
        /// Seconds after which an unfinished trace is exported as it is.
        public var traceTimeout: Double = 120
        /// Retries of one request after a 429, a 5xx or a transport error.
        public var maxRetries: Int = 5
        /// First backoff, seconds; doubled per retry up to `maxBackoff`. A `Retry-After` header wins.
        public var initialBackoff: Double = 0.5
        /// Longest backoff, seconds.
        public var maxBackoff: Double = 30
        /// Most seconds `flush()` waits for the queue to be sent.
        public var flushTimeout: Double = 30
        /// `service.version` of the exported resource.
        public var serviceVersion: String = "dev"
        /// The HTTP `User-Agent` of export requests (not a config key): the factory sets
        /// `flowscope/<FlowScope's version>`. A `User-Agent` in `headers` wins.
        public var userAgent: String = "flowscope"

        /// Default options for `destination`.
        public init(destination: Destination) { self.destination = destination }

        /// Reads the options from a sink's config object at JSON path `path` (e.g. `$.sinks[3]`):
        /// `endpoint` (http(s) URL) or `file` (path), `headers` (object of strings), `timeout`,
        /// `batchSize`, `flushInterval`, `maxQueueSize`, `maxOpenTraces`, `traceTimeout`,
        /// `maxRetries`, `initialBackoff`, `maxBackoff`, `flushTimeout`, `serviceVersion`.
        /// `type` and `enabled` belong to the config loader and are ignored; any other key is an
        /// error naming its JSON path.
        /// The largest value of a seconds option (`timeout`, `flushInterval`, ...): 10^9 s.
        public static let maxSeconds: Double = 1_000_000_000

        public init(json: [String: JSONValue], path: String = "$") throws(JSONInputError) {
            let object = JSONObjectCursor(path: path, members: json)
            let seconds: [String: WritableKeyPath<Options, Double>] = [
                "timeout": \.timeout, "flushInterval": \.flushInterval, "traceTimeout": \.traceTimeout,
                "initialBackoff": \.initialBackoff, "maxBackoff": \.maxBackoff, "flushTimeout": \.flushTimeout,
            ]
            let integers: [String: (WritableKeyPath<Options, Int>, Int)] = [
                "batchSize": (\.batchSize, 1), "maxQueueSize": (\.maxQueueSize, 1), "maxOpenTraces": (\.maxOpenTraces, 1),
                "maxRetries": (\.maxRetries, 0),
            ]
            try object.rejectUnknownKeys(allowed: Set(seconds.keys).union(integers.keys)
                .union(["type", "enabled", "endpoint", "file", "headers", "serviceVersion"]))
            switch (object.optional("endpoint"), object.optional("file")) {
            case (let endpoint?, nil):
                guard let text = endpoint.value.stringValue, let url = URL(string: text),
                      let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
                      let host = url.host, !host.isEmpty else {
                    throw endpoint.expected("a collector's http(s) URL such as \"http://127.0.0.1:4318/v1/traces\"")
                }
                self.init(destination: .endpoint(url))
            case (nil, let file?):
                guard let filePath = file.value.stringValue, !filePath.isEmpty else {
                    throw file.expected("a file path as a non-empty string")
                }
                self.init(destination: .file(filePath))
            case (nil, nil):
                throw JSONInputError(path: path, message: "missing required key \"endpoint\" (a collector's /v1/traces URL) or \"file\"")
            case (_?, let file?):
                throw file.error("expected either endpoint or file, not both")
            }
            if let headers = object.optional("headers") {
                let members = try headers.object()
                for (name, value) in members.entries {
                    self.headers[name] = try value.string()
                }
            }
            for key in seconds.keys.sorted() {
                guard let keyPath = seconds[key], let value = object.optional(key) else { continue }
                // At most 10^9 s, as every other time in a config: URLSession on Linux traps on a request
                // timeout whose milliseconds do not fit an Int (`timeout: 1e308` crashed serve at the first export).
                guard let n = value.value.numberValue, n.isFinite, n > 0 || (n == 0 && key == "initialBackoff"),
                      n <= Self.maxSeconds else {
                    throw value.expected("a positive number of seconds, at most \(Int(Self.maxSeconds))")
                }
                self[keyPath: keyPath] = n
            }
            for key in integers.keys.sorted() {
                guard let (keyPath, minimum) = integers[key], let value = object.optional(key) else { continue }
                guard let n = value.value.intValue, n >= minimum else { throw value.expected("an integer >= \(minimum)") }
                self[keyPath: keyPath] = n
            }
            if let value = object.optional("serviceVersion") { serviceVersion = try value.string() }
        }
    }

    /// The type name in the config's `sinks` list.
    public static let type = "otlp"
    /// The sink's name in metrics and logs (`otlp` unless its config entry names it).
    public let name: String
    /// `otlp`.
    public var type: String { Self.type }
    /// Durable: ingest is accepted only while this sink's queue has room (``EventSink/isDurable``).
    public var isDurable: Bool { true }
    /// The options the sink was created with.
    public let options: Options
    private let exporter: OTLPExporter

    /// Creates the sink and starts its sending thread.
    ///
    /// - Parameter now: the clock for trace timeouts, seconds (tests pass their own).
    /// - Throws: `OTLPSinkError` when the output file cannot be opened.
    public init(name: String = "otlp", options: Options,
                now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }) throws(OTLPSinkError) {
        self.name = name
        self.options = options
        exporter = try OTLPExporter(options: options, now: now)
        let exporter = exporter
        let thread = Thread { exporter.run() }
        thread.name = "flowscope.otlp"
        thread.start()
    }

    deinit { exporter.stop() }

    /// Assembles spans in memory and queues finished traces; never waits on the network.
    public func consume(_ batch: [Envelope]) { exporter.consume(batch) }

    /// Sends every finished span queued so far and waits for the result, at most `flushTimeout`.
    /// Traces still open stay open (see `close()`).
    public func flush() { exporter.flush(drainOpenTraces: false) }

    /// For shutdown: exports every open trace as it is (marked incomplete), waits for the sending
    /// (at most `flushTimeout`), then stops the sending thread. Spans it could not send are counted
    /// as failed. Idempotent.
    public func close() {
        exporter.close()
    }

    /// Counters of what was exported, dropped and retried.
    public var stats: OTLPSinkStats { exporter.stats }

    /// Down while exports fail; errors count failed export attempts; dropped counts SPANS lost
    /// (queue full, given up on, rejected, or still queued at close).
    public var health: SinkHealth {
        let s = exporter.stats
        return SinkHealth(up: !s.failing, errors: UInt64(s.failedAttempts), lastError: s.lastError,
                          dropped: UInt64(s.droppedSpans + s.failedSpans))
    }
}

/// The sending side: the span assembler, the bounded queue and the thread that empties it.
final class OTLPExporter: Sendable {
    private struct Queue {
        var pending: [OTLPSpan] = []
        var head = 0
        var stopped = false
        /// Set by `close()`: a failed export is given up on at once instead of retried later.
        var closing = false
        var flushWaiters: [DispatchSemaphore] = []
        var stats = OTLPSinkStats()
        var count: Int { pending.count - head }
    }

    private struct Assembly {
        var builder: OTLPTraceBuilder
        var lastExpire: Double
    }

    let options: OTLPSink.Options
    private let assembly: Mutex<Assembly>
    private let queue = Mutex(Queue())
    private let wake = DispatchSemaphore(value: 0)
    private let transport: OTLPTransport
    private let now: @Sendable () -> Double

    init(options: OTLPSink.Options, now: @escaping @Sendable () -> Double) throws(OTLPSinkError) {
        self.options = options
        self.now = now
        assembly = Mutex(Assembly(builder: OTLPTraceBuilder(maxOpenTraces: options.maxOpenTraces, traceTimeout: options.traceTimeout),
                                  lastExpire: now()))
        transport = try OTLPTransport(options: options)
    }

    func consume(_ batch: [Envelope]) {
        let t = now()
        let ready = assembly.withLock { a in
            var ready: [OTLPSpan] = []
            for e in batch { ready += a.builder.add(e, now: t) }
            if t - a.lastExpire >= 1 {
                a.lastExpire = t
                ready += a.builder.expire(now: t)
            }
            return ready
        }
        enqueue(ready)
    }

    private func enqueue(_ spans: [OTLPSpan]) {
        guard !spans.isEmpty else { return }
        let full = queue.withLock { q in
            q.pending += spans
            let over = q.count - options.maxQueueSize
            if over > 0 {
                q.head += over
                q.stats.droppedSpans += over
            }
            if q.head > 4096, q.head * 2 > q.pending.count {
                q.pending.removeFirst(q.head)
                q.head = 0
            }
            return q.count >= options.batchSize
        }
        if full { wake.signal() }
    }

    var stats: OTLPSinkStats {
        let (open, overflow, incomplete, late) = assembly.withLock {
            ($0.builder.openTraceCount, $0.builder.overflowCount, $0.builder.incompleteCount, $0.builder.lateEventCount)
        }
        var s = queue.withLock { q in
            var s = q.stats
            s.queuedSpans = q.count
            return s
        }
        s.openTraces = open; s.overflowTraces = overflow; s.incompleteTraces = incomplete; s.lateEvents = late
        return s
    }

    func flush(drainOpenTraces: Bool) {
        if drainOpenTraces { enqueue(assembly.withLock { $0.builder.drain() }) }
        let done = DispatchSemaphore(value: 0)
        let stopped = queue.withLock { q in
            if !q.stopped { q.flushWaiters.append(done) }
            return q.stopped
        }
        guard !stopped else { return }
        wake.signal()
        _ = done.wait(timeout: .now() + options.flushTimeout)
    }

    func stop() {
        queue.withLock { $0.stopped = true }
        wake.signal()
    }

    /// Exports every open trace (incomplete) with one try per batch, then stops the thread.
    func close() {
        queue.withLock { $0.closing = true }
        flush(drainOpenTraces: true)
        stop()
    }

    /// The sending thread: wakes on a full batch, a flush, or every `flushInterval`.
    func run() {
        while true {
            _ = wake.wait(timeout: .now() + options.flushInterval)
            let t = now()
            let expired = assembly.withLock { a in
                guard t - a.lastExpire >= 1 else { return [OTLPSpan]() }
                a.lastExpire = t
                return a.builder.expire(now: t)
            }
            enqueue(expired)
            // Waiters registered before this pass are released once what was queued has been tried.
            let waiters = queue.withLock { q in
                let w = q.flushWaiters
                q.flushWaiters.removeAll()
                return w
            }
            while let batch = takeBatch() { send(batch) }
            for w in waiters { w.signal() }
            if queue.withLock({ $0.stopped && $0.count == 0 }) {
                let late = queue.withLock { q in
                    let w = q.flushWaiters
                    q.flushWaiters.removeAll()
                    return w
                }
                for w in late { w.signal() }
                return
            }
        }
    }

    private func takeBatch() -> [OTLPSpan]? {
        queue.withLock { q in
            guard q.count > 0 else { return nil }
            let n = min(options.batchSize, q.count)
            let batch = Array(q.pending[q.head..<(q.head + n)])
            q.head += n
            if q.head == q.pending.count {
                q.pending.removeAll(keepingCapacity: true)
                q.head = 0
            }
            return batch
        }
    }

    /// Sends one batch, retrying 429, 5xx and transport errors with exponential backoff.
    private func send(_ spans: [OTLPSpan]) {
        let body = OTLPEncoding.exportRequest(spans, serviceVersion: options.serviceVersion)
        var attempt = 0
        while true {
            let result = transport.send(body)
            switch result {
            case .success:
                queue.withLock { q in
                    q.stats.exportedSpans += spans.count
                    q.stats.requests += 1
                    q.stats.failing = false
                }
                return
            case .rejected(let message):
                queue.withLock { q in
                    q.stats.failedSpans += spans.count
                    q.stats.lastError = message
                    q.stats.failedAttempts += 1
                    q.stats.failing = true
                }
                return
            case .retryable(let message, let retryAfter):
                if attempt >= options.maxRetries || queue.withLock({ $0.closing || $0.stopped }) {
                    queue.withLock { q in
                        q.stats.failedSpans += spans.count
                        q.stats.lastError = message + " (gave up after \(attempt + 1) attempts)"
                        q.stats.failedAttempts += 1
                        q.stats.failing = true
                    }
                    return
                }
                var delay = min(options.maxBackoff, options.initialBackoff * pow(2, Double(attempt)))
                delay *= Double.random(in: 0.8...1.0)
                if let retryAfter { delay = min(max(0, retryAfter), max(options.maxBackoff, 60)) }
                queue.withLock { q in
                    q.stats.retries += 1
                    q.stats.lastError = message
                    q.stats.failedAttempts += 1
                    q.stats.failing = true
                }
                attempt += 1
                if delay > 0 { Thread.sleep(forTimeInterval: delay) }
            }
        }
    }
}

/// The outcome of one export attempt.
enum OTLPSendResult: Equatable {
    case success
    /// Will never succeed as it is (4xx other than 429): dropped.
    case rejected(String)
    /// Worth another try, after `retryAfter` seconds when the server said so.
    case retryable(String, retryAfter: Double?)
}

/// Where request bodies go: a collector over HTTP(S), or a file.
final class OTLPTransport: Sendable {
    private enum Kind {
        case http(URLSession, URL)
        case file(Int32, String)
    }

    private let kind: Kind
    private let options: OTLPSink.Options

    init(options: OTLPSink.Options) throws(OTLPSinkError) {
        self.options = options
        switch options.destination {
        case .endpoint(let url):
            let configuration = URLSessionConfiguration.ephemeral
            configuration.timeoutIntervalForRequest = options.timeout
            configuration.timeoutIntervalForResource = options.timeout
            configuration.httpMaximumConnectionsPerHost = 1
            kind = .http(URLSession(configuration: configuration), url)
        case .file(let path):
            let parent = FilePaths.directory(of: path)
            if !parent.isEmpty { try? FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true) }
            let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
            guard fd >= 0 else {
                throw OTLPSinkError(target: path, message: "cannot open the output file: \(String(cString: strerror(errno)))")
            }
            kind = .file(fd, path)
        }
    }

    deinit {
        switch kind {
        case .file(let fd, _): close(fd)
        case .http(let session, _): session.finishTasksAndInvalidate()
        }
    }

    func send(_ body: String) -> OTLPSendResult {
        switch kind {
        case .file(let fd, let path): return write(body + "\n", fd: fd, path: path)
        case .http(let session, let url): return post(body, session: session, url: url)
        }
    }

    private func write(_ line: String, fd: Int32, path: String) -> OTLPSendResult {
        var bytes = Array(line.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Foundation.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 {
                if errno == EINTR { continue }
                return .retryable("\(path): write failed: \(String(cString: strerror(errno)))", retryAfter: nil)
            }
            offset += n
        }
        bytes.removeAll()
        return .success
    }

    private func post(_ body: String, session: URLSession, url: URL) -> OTLPSendResult {
        var request = URLRequest(url: url, timeoutInterval: options.timeout)
        request.httpMethod = "POST"
        request.httpBody = Data(body.utf8)
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue(options.userAgent, forHTTPHeaderField: "User-Agent")
        for (name, value) in options.headers { request.setValue(value, forHTTPHeaderField: name) }
        let done = DispatchSemaphore(value: 0)
        let outcome = Mutex<OTLPSendResult>(.retryable("\(url.absoluteString): no answer", retryAfter: nil))
        let task = session.dataTask(with: request) { data, response, error in
            let result: OTLPSendResult
            if let error {
                result = .retryable("\(url.absoluteString): \(Self.describe(error, timeout: self.options.timeout))", retryAfter: nil)
            } else if let http = response as? HTTPURLResponse {
                let status = http.statusCode
                let text = data.map { String(decoding: $0.prefix(200), as: UTF8.self) } ?? ""
                if (200..<300).contains(status) {
                    result = .success
                } else if status == 429 || (500..<600).contains(status) {
                    result = .retryable("\(url.absoluteString): HTTP \(status) \(text)",
                                        retryAfter: Self.retryAfter(http.value(forHTTPHeaderField: "Retry-After")))
                } else {
                    result = .rejected("\(url.absoluteString): HTTP \(status) \(text)")
                }
            } else {
                result = .retryable("\(url.absoluteString): not an HTTP response", retryAfter: nil)
            }
            outcome.withLock { $0 = result }
            done.signal()
        }
        task.resume()
        if done.wait(timeout: .now() + options.timeout + 5) == .timedOut {
            task.cancel()
            return .retryable("\(url.absoluteString): no answer within \(Self.seconds(options.timeout)) s", retryAfter: nil)
        }
        return outcome.withLock { $0 }
    }

    /// A transport error in plain words: `timed out after 10 s`, `cannot connect (connection refused)`,
    /// `host not found`, `TLS: the server's certificate is not trusted`, ...; any other error as
    /// Foundation describes it.
    static func describe(_ error: Error, timeout: Double) -> String {
        let ns = error as NSError
        guard ns.domain == NSURLErrorDomain else { return error.localizedDescription }
        switch URLError.Code(rawValue: ns.code) {
        case .timedOut: return "timed out after \(seconds(timeout)) s"
        case .cannotConnectToHost: return "cannot connect (connection refused)"
        case .cannotFindHost, .dnsLookupFailed: return "host not found"
        case .serverCertificateUntrusted, .serverCertificateHasUnknownRoot, .serverCertificateHasBadDate,
             .serverCertificateNotYetValid:
            return "TLS: the server's certificate is not trusted"
        case .secureConnectionFailed: return "TLS: secure connection failed (often an untrusted certificate)"
        case .networkConnectionLost: return "connection closed before an answer"
        case .notConnectedToInternet: return "no network connection"
        default: return error.localizedDescription
        }
    }

    /// Seconds as written in a config: `10`, `0.5`.
    static func seconds(_ value: Double) -> String { JSONValue.number(value).jsonText }

    /// `Retry-After` as seconds: a number of seconds or an HTTP date.
    static func retryAfter(_ value: String?) -> Double? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Double(value), seconds.isFinite { return max(0, seconds) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        return max(0, date.timeIntervalSinceNow)
    }
}

extension OTLPSink {
    /// The `otlp` sink type; its options are ``Options`` (`endpoint` or `file`, required).
    public struct Factory: SinkFactory {
        /// `otlp`.
        public let type = OTLPSink.type

        /// The factory.
        public init() {}

        /// Reads ``Options``; a relative `file` resolves against the config file's directory
        /// (``SinkContext/filePath(_:)``), `serviceVersion` defaults to FlowScope's version, and the
        /// HTTP `User-Agent` is `flowscope/<FlowScope's version>`.
        public func options(from context: SinkContext) throws(JSONInputError) -> Options {
            var options = try Options(json: context.options, path: context.path)
            if case .file = options.destination, let file = try context.filePath("file") { options.destination = .file(file) }
            if context.options["serviceVersion"] == nil { options.serviceVersion = context.version }
            options.userAgent = "flowscope/\(context.version)"
            return options
        }

        /// The output file, `file`, when it writes to one.
        public func requirements(_ options: Options, context: SinkContext) -> SinkRequirements {
            guard case .file(let path) = options.destination else { return SinkRequirements() }
            return SinkRequirements(files: [.init(option: "file", path: path)])
        }

        /// Starts the sink's sending thread (and opens its output file, if any).
        public func makeSink(_ options: Options, context: SinkContext) throws -> any EventSink {
            do {
                return try OTLPSink(name: context.name, options: options)
            } catch {
                throw JSONInputError(path: context.path, message: error.description)
            }
        }
    }
}
