import CMicroHTTPD
import Dispatch
import FlowFetch
import FlowJSON
import FlowSim
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A request the stub backend received.
public struct StubRequest: Sendable {
    /// `GET`, `HEAD`, ...
    public var method: String
    /// The path as sent (percent-encoded).
    public var rawPath: String
    /// The query arguments (as sent, percent-encoded), as `name=value` joined by `&`, sorted by name.
    public var query: String
    /// Header fields, names lowercased.
    public var headers: [String: String]
}

/// What the stub backend does with a request, in real time: after `latency` seconds, `reply`.
public struct StubPlan: Sendable {
    /// How a request ends.
    public enum Reply: Sendable {
        /// A complete answer.
        case respond(status: Int, body: [UInt8], contentType: String)
        /// Never answers (the connection stays open until the client closes it or the server stops).
        case hang
        /// Closes the socket without an answer (with a TCP reset).
        case reset
        /// Sends the status line and headers (with the full Content-Length), then the body one byte
        /// every `interval` seconds: a drip-fed body.
        case drip(status: Int, body: [UInt8], interval: Double)
    }
    /// Seconds before the reply starts.
    public var latency: Double
    /// How the request ends.
    public var reply: Reply
    /// A plan: `reply` after `latency` seconds.
    public init(latency: Double = 0, _ reply: Reply) { self.latency = latency; self.reply = reply }
}

/// Why the stub backend could not start.
public struct StubBackendError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, naming the address, port or option at fault.
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// The backend REST protocol (docs/fetch-rules.md) as a real HTTP(S) server on libmicrohttpd, for tests and
/// `flowscope stub-backend`. Faults are applied in real time without blocking a thread: latency and
/// drip suspend the connection and resume it from a timer; hang keeps it suspended; reset closes the
/// socket with SO_LINGER 0.
///
/// ```swift
/// let stub = try StubBackendServer(scenario: scenario)        // serves the scenario's backend and network
/// let backend = try HTTPBackend(baseURL: URL(string: stub.baseURL)!)
/// ```
public final class StubBackendServer: Sendable {
    /// The port bound (the one asked for, or the one the system picked for 0).
    public let port: Int
    /// `http://127.0.0.1:<port>` (`https://` with TLS).
    public let baseURL: String
    private let context: StubContext
    private let daemon: Mutex<DaemonRef?>

    /// A server answering each request with `plan(request)`. `tls` is a PEM certificate and key (nil: plain HTTP).
    public init(bind: String = "127.0.0.1", port: Int = 0, tls: (certPEM: String, keyPEM: String)? = nil,
                plan: @escaping @Sendable (StubRequest) -> StubPlan) throws(StubBackendError) {
        let (fd, bound) = try Self.listen(bind: bind, port: port)
        self.port = bound
        baseURL = "\(tls == nil ? "http" : "https")://\(bind):\(bound)"
        context = StubContext(plan: plan)
        daemon = Mutex(nil)
        #if os(Linux)
        let polling = MHD_USE_EPOLL_INTERNAL_THREAD.rawValue
        #else
        let polling = MHD_USE_POLL_INTERNAL_THREAD.rawValue  // epoll is Linux's only
        #endif
        var flags = polling | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_ERROR_LOG.rawValue
        let cls = Unmanaged.passUnretained(context).toOpaque()
        let completed: MHD_RequestCompletedCallback = stubCompleted
        let logger: MHD_LogCallback = stubLog
        let unescape: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<CChar>?) -> Int = stubKeepEscaped
        // libmicrohttpd gets a duplicate of the socket and owns it once started (see
        // flowscope_listen_duplicate); ours is closed once the start is over.
        let given = flowscope_listen_duplicate(fd)
        defer { close(fd) }
        guard given >= 0 else { throw StubBackendError("cannot duplicate the listening socket: \(String(cString: strerror(errno)))") }
        var items: [MHD_OptionItem] = [
            MHD_OptionItem(option: .EXTERNAL_LOGGER, value: unsafeBitCast(logger, to: Int.self), ptr_value: cls),
            MHD_OptionItem(option: .LISTEN_SOCKET, value: Int(given), ptr_value: nil),
            MHD_OptionItem(option: .NOTIFY_COMPLETED, value: unsafeBitCast(completed, to: Int.self), ptr_value: cls),
            MHD_OptionItem(option: .CONNECTION_LIMIT, value: 512, ptr_value: nil),
            MHD_OptionItem(option: .CONNECTION_TIMEOUT, value: 600, ptr_value: nil),
            // Keep the path percent-encoded, so that an encoded `/` inside a placement id stays one segment.
            MHD_OptionItem(option: .UNESCAPE_CALLBACK, value: unsafeBitCast(unescape, to: Int.self), ptr_value: nil),
        ]
        var strings: [UnsafeMutablePointer<CChar>] = []
        if let tls {
            flags |= MHD_USE_TLS.rawValue
            let key = strdup(tls.keyPEM)!, cert = strdup(tls.certPEM)!
            strings = [key, cert]
            items.append(MHD_OptionItem(option: .HTTPS_MEM_KEY, value: 0, ptr_value: UnsafeMutableRawPointer(key)))
            items.append(MHD_OptionItem(option: .HTTPS_MEM_CERT, value: 0, ptr_value: UnsafeMutableRawPointer(cert)))
        }
        items.append(MHD_OptionItem(option: .END, value: 0, ptr_value: nil))
        let handler: MHD_AccessHandlerCallback = stubAccess
        signal(SIGPIPE, SIG_IGN)
        let started = items.withUnsafeMutableBufferPointer { buffer in
            withVaList([MHD_OPTION.ARRAY.rawValue, buffer.baseAddress!, MHD_OPTION.END.rawValue]) { va in
                MHD_start_daemon_va(flags, 0, nil, nil, handler, cls, va)
            }
        }
        guard let started else {
            flowscope_release_listen_duplicate(given, fd)
            for s in strings { free(s) }
            throw StubBackendError("libmicrohttpd did not start on \(bind):\(bound)" + (context.lastLog.map { ": \($0)" } ?? ""))
        }
        daemon.withLock { $0 = DaemonRef(raw: started, strings: strings) }
        context.startPoking()
    }

    /// A server for a scenario's backend and network rules, applied in real time from now:
    /// latency sleeps (without a thread), hang never answers, reset closes the socket, `http:NNN`,
    /// malformed (200 with an undecodable body). Image URLs of layouts are served under `/assets/`.
    public convenience init(scenario: Scenario, bind: String = "127.0.0.1", port: Int = 0,
                            tls: (certPEM: String, keyPEM: String)? = nil) throws(StubBackendError) {
        var profiles = [scenario.profile]
        for step in scenario.steps { if case .identify(let p) = step.call { profiles.append(p) } }
        let sandbox = Mutex(SandboxBackend(placements: scenario.backend, network: scenario.network, profiles: profiles))
        let origin = ContinuousClock.now
        try self.init(bind: bind, port: port, tls: tls) { request in
            guard let spec = StubRoutes.spec(for: request) else {
                return StubPlan(.respond(status: 404, body: Array(#"{"error":{"code":"not_found"}}"#.utf8), contentType: "application/json"))
            }
            let elapsed = ContinuousClock.now - origin
            let t = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let answer = sandbox.withLock { $0.answer(spec, at: t) }
            var reply = StubRoutes.reply(for: answer.completion, spec: spec)
            if answer.drip, case .respond(let status, let body, _) = reply {
                reply = .drip(status: status, body: body, interval: StubRoutes.dripInterval)
            }
            return StubPlan(latency: answer.latency, reply)
        }
    }

    deinit { stop() }

    /// Requests received so far (a test hook).
    public var requests: [StubRequest] { context.seen.withLock { $0 } }

    /// Connections open now.
    public var openConnections: Int { context.open.load(ordering: .relaxed) }

    /// Whether `stop()` has begun (a test hook).
    var isStopping: Bool { context.stopping.load(ordering: .relaxed) }

    /// Stops: resumes every waiting connection (which then closes; none suspends again once this has
    /// begun), then stops the daemon.
    public func stop() {
        guard let d = daemon.withLock({ d -> DaemonRef? in defer { d = nil }; return d }) else { return }
        context.stopping.store(true, ordering: .relaxed)
        context.resumeAll()
        let deadline = ContinuousClock.now + .seconds(1)
        while context.live.withLock({ !$0.isEmpty }) && ContinuousClock.now < deadline { usleep(2000) }
        MHD_stop_daemon(d.raw)
        for s in d.strings { free(s) }
    }

    static func listen(bind: String, port: Int) throws(StubBackendError) -> (Int32, Int) {
        var addr = sockaddr_in()
        guard (0...65_535).contains(port) else { throw StubBackendError("--port \(port): expected 0...65535") }
        guard inet_pton(AF_INET, bind == "localhost" ? "127.0.0.1" : bind, &addr.sin_addr) == 1 else {
            throw StubBackendError("bind address \(bind): expected an IPv4 address")
        }
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        let fd = openStreamSocket()
        guard fd >= 0 else { throw StubBackendError("cannot create a socket") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let ok = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { systemBind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard ok == 0, systemListen(fd, 128) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw StubBackendError("cannot listen on \(bind):\(port): \(reason)")
        }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return (fd, Int(UInt16(bigEndian: addr.sin_port)))
    }
}

/// The REST paths and the bodies the stub serves.
public enum StubRoutes {
    /// Seconds between two bytes of a `drip` rule's body.
    public static let dripInterval = 0.25

    /// The request spec a REST request stands for (nil: not a REST path).
    public static func spec(for r: StubRequest) -> RequestSpec? {
        let parts = r.rawPath.split(separator: "/", omittingEmptySubsequences: false).map { String($0).removingPercentEncoding ?? String($0) }
        let profile = r.headers["x-profile-id"] ?? ""
        switch parts.count {
        case 5 where parts[1] == "v1" && parts[2] == "placements" && parts[4] == "audience":
            return RequestSpec(kind: .targeted, placement: parts[3], profileId: profile, timeout: 0)
        case 6 where parts[1] == "v1" && parts[2] == "placements" && parts[4] == "audience" && parts[5] == "default":
            return RequestSpec(kind: .default, placement: parts[3], profileId: profile, timeout: 0)
        case 4 where parts[1] == "v1" && parts[2] == "layouts":
            let version = r.query.split(separator: "&").first { $0.hasPrefix("version=") }.flatMap { Int($0.dropFirst(8)) }
            guard let version else { return nil }
            return RequestSpec(kind: .layout, layout: LayoutRef(id: parts[3], version: version), profileId: profile, timeout: 0)
        case 4 where parts[1] == "v1" && parts[2] == "profiles":
            return RequestSpec(kind: .profile, profileId: parts[3], timeout: 0)
        default:
            guard r.rawPath.hasPrefix("/assets/") else { return nil }
            return RequestSpec(kind: .asset, assetURL: sandboxAssetPrefix + r.rawPath.dropFirst(8), profileId: profile, timeout: 0)
        }
    }

    static let sandboxAssetPrefix = "https://assets.invalid/"

    /// The reply for a sandbox answer (nil: the request hangs).
    public static func reply(for completion: RequestCompletion?, spec: RequestSpec) -> StubPlan.Reply {
        guard let completion else { return .hang }
        switch completion.result {
        case .failure(.transport), .failure(.timeout), .failure(.cancelled):
            return .reset
        case .failure(.http(let status)):
            let code = status == 404 && (spec.kind == .targeted || spec.kind == .default) ? "placement_not_found" : "http_\(status)"
            return .respond(status: status, body: Array(#"{"error":{"code":"\#(code)"}}"#.utf8), contentType: "application/json")
        case .failure(.malformed):
            return .respond(status: 200, body: Array(#"{"placementId": "#.utf8), contentType: "application/json")
        case .success(let body):
            let json: JSONValue
            switch body {
            case .audience(let p): json = RESTCoding.audienceJSON(p)
            case .layout(var l):
                l.images = l.images.map { i in
                    var i = i
                    if i.url.hasPrefix(sandboxAssetPrefix) { i.url = "/assets/" + i.url.dropFirst(sandboxAssetPrefix.count) }
                    return i
                }
                json = RESTCoding.layoutJSON(l)
            case .profile(let p): json = RESTCoding.profileJSON(p)
            case .asset(let bytes): return .respond(status: 200, body: [UInt8](repeating: 0x89, count: bytes), contentType: "image/png")
            }
            return .respond(status: 200, body: Array(json.jsonText.utf8), contentType: "application/json")
        }
    }
}

/// The daemon pointer and the C strings it borrows.
// Safe to share unchecked: C pointers written once at start and freed once, in `stop()`, which takes
// them out of a Mutex first, so no other thread can still hold them.
struct DaemonRef: @unchecked Sendable {
    let raw: OpaquePointer
    let strings: [UnsafeMutablePointer<CChar>]
}

/// One request's state, shared by the daemon thread and resume timers.
// Safe to share unchecked: its mutable state is in a Mutex; `connection` is a C pointer that stays
// valid until NOTIFY_COMPLETED, which cannot happen while the connection is suspended; every resume
// happens under `state`'s lock, only for a connection marked suspended, and the completed callback
// marks the request finished under the same lock.
final class StubExchange: @unchecked Sendable {
    struct State {
        var plan: StubPlan?
        var waited = false
        var suspended = false
        var finished = false
        /// The client went away while the request hung: close the connection when resumed.
        var abandoned = false
        var drip = 0
        var nextDripAt = ContinuousClock.now
    }
    let connection: OpaquePointer
    unowned let context: StubContext
    let state = Mutex(State())
    init(connection: OpaquePointer, context: StubContext) { self.connection = connection; self.context = context }

    /// Suspends the connection (daemon thread only); false when the stub is stopping. `stop()` resumes
    /// the connections suspended when it starts, and libmicrohttpd aborts the process if one is still
    /// suspended when its daemon stops, so none may be suspended after that. Checked under the lock
    /// `stop()`'s resume takes, which orders the two: either this sees the flag or that sees `suspended`.
    func suspend() -> Bool {
        state.withLock { s in
            guard !context.stopping.load(ordering: .relaxed) else { return false }
            s.suspended = true
            MHD_suspend_connection(connection)
            return true
        }
    }

    /// Resumes the connection if it is suspended (any thread).
    func resume() {
        state.withLock { s in
            guard s.suspended, !s.finished else { return }
            s.suspended = false
            MHD_resume_connection(connection)
        }
    }

    func resume(after seconds: Double) {
        DispatchQueue.global().asyncAfter(deadline: .now() + max(seconds, 0)) { [self] in resume() }
    }
}

/// Everything the C callbacks need.
final class StubContext: Sendable {
    let plan: @Sendable (StubRequest) -> StubPlan
    let seen = Mutex<[StubRequest]>([])
    let live = Mutex<[ObjectIdentifier: StubExchange]>([:])
    let stopping = Atomic<Bool>(false)
    let open = Atomic<Int>(0)
    private let log = Mutex<String?>(nil)

    init(plan: @escaping @Sendable (StubRequest) -> StubPlan) { self.plan = plan }

    var lastLog: String? { log.withLock { $0 } }
    func record(log line: String) { log.withLock { $0 = line } }

    func resumeAll() { for e in live.withLock({ Array($0.values) }) { e.resume() } }

    /// Every half second, hung connections whose client went away (the socket reads end-of-file) are
    /// resumed and closed: a suspended connection is not polled by libmicrohttpd, so it would never notice.
    func startPoking() {
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.5) { [weak self] in
            guard let self, !self.stopping.load(ordering: .relaxed) else { return }
            for e in self.live.withLock({ Array($0.values) }) {
                let gone = e.state.withLock { s -> Bool in
                    guard s.suspended, !s.finished, case .hang? = s.plan?.reply,
                          let fd = ConnectionSocket.fd(e.connection) else { return false }
                    var byte: UInt8 = 0
                    let n = recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
                    let closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
                    if closed { s.abandoned = true }
                    return closed
                }
                if gone { e.resume() }
            }
            self.startPoking()
        }
    }

    func handle(_ connection: OpaquePointer, method: String, url: String, exchange: StubExchange) -> MHD_Result {
        if stopping.load(ordering: .relaxed) || exchange.state.withLock({ $0.abandoned }) { return .NO }
        var plan = exchange.state.withLock { $0.plan }
        if plan == nil {
            // libmicrohttpd hands over the path without the query; the query comes back as (decoded) arguments.
            let query = values(connection, .GET_ARGUMENT_KIND).sorted { $0.key < $1.key }
                .map { "\($0.key)=\($0.value)" }.joined(separator: "&")
            let request = StubRequest(method: method, rawPath: url, query: query, headers: values(connection, .HEADER_KIND))
            seen.withLock { $0.append(request) }
            let p = method == "GET" || method == "HEAD" ? self.plan(request)
                : StubPlan(.respond(status: 405, body: Array(#"{"error":{"code":"method_not_allowed"}}"#.utf8), contentType: "application/json"))
            exchange.state.withLock { $0.plan = p }
            plan = p
        }
        guard let plan else { return .NO }
        let mustWait = exchange.state.withLock { s -> Bool in
            defer { s.waited = true }
            return !s.waited && plan.latency > 0
        }
        if mustWait {
            guard exchange.suspend() else { return .NO }
            exchange.resume(after: plan.latency)
            return .YES
        }
        switch plan.reply {
        case .respond(let status, var body, let type):
            let created = body.withUnsafeMutableBytes { MHD_create_response_from_buffer($0.count, $0.baseAddress, .RESPMEM_MUST_COPY) }
            guard let response = created else { return .NO }
            defer { MHD_destroy_response(response) }
            MHD_add_response_header(response, "Content-Type", type)
            return MHD_queue_response(connection, UInt32(clamping: status), response)
        case .hang:
            return exchange.suspend() ? .YES : .NO
        case .reset:
            if let fd = ConnectionSocket.fd(connection) {
                var abort = linger(l_onoff: 1, l_linger: 0)
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, socklen_t(MemoryLayout<linger>.size))
            }
            return .NO
        case .drip(let status, let body, _):
            exchange.state.withLock { $0.nextDripAt = ContinuousClock.now }
            let reader: MHD_ContentReaderCallback = stubDripRead
            let retained = Unmanaged.passRetained(exchange).toOpaque()
            let free: MHD_ContentReaderFreeCallback = stubDripFree
            guard let response = MHD_create_response_from_callback(UInt64(body.count), 64, reader, retained, free) else {
                Unmanaged<StubExchange>.fromOpaque(retained).release()
                return .NO
            }
            defer { MHD_destroy_response(response) }
            MHD_add_response_header(response, "Content-Type", "application/json")
            return MHD_queue_response(connection, UInt32(clamping: status), response)
        }
    }

    /// The drip reader: one byte when its time has come, else suspend until then.
    func drip(_ exchange: StubExchange, into buffer: UnsafeMutablePointer<CChar>, max: Int) -> Int {
        if stopping.load(ordering: .relaxed) { return MHD_CONTENT_READER_END_WITH_ERROR }
        let (n, wait): (Int, Double?) = exchange.state.withLock { s in
            guard case .drip(_, let body, let interval)? = s.plan?.reply else { return (MHD_CONTENT_READER_END_WITH_ERROR, nil) }
            guard s.drip < body.count else { return (MHD_CONTENT_READER_END_OF_STREAM, nil) }
            let now = ContinuousClock.now
            if now >= s.nextDripAt {
                buffer.pointee = CChar(bitPattern: body[s.drip])
                s.drip += 1
                s.nextDripAt = now + .milliseconds(Int64(interval * 1000))
                return (1, nil)
            }
            let d = s.nextDripAt - now
            // As in `StubExchange.suspend()`: nothing is suspended once `stop()` has begun.
            guard !stopping.load(ordering: .relaxed) else { return (MHD_CONTENT_READER_END_WITH_ERROR, nil) }
            s.suspended = true
            MHD_suspend_connection(exchange.connection)
            return (0, Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18)
        }
        if let wait { exchange.resume(after: wait) }
        return n
    }

    private func values(_ connection: OpaquePointer, _ kind: MHD_ValueKind) -> [String: String] {
        let box = HeaderBox(lowercase: kind == .HEADER_KIND)
        let iterator: MHD_KeyValueIterator = stubHeader
        withExtendedLifetime(box) {
            _ = MHD_get_connection_values(connection, kind, iterator, Unmanaged.passUnretained(box).toOpaque())
        }
        return box.fields
    }
}

final class HeaderBox {
    let lowercase: Bool
    var fields: [String: String] = [:]
    init(lowercase: Bool) { self.lowercase = lowercase }
}

/// The socket of a connection, through `MHD_get_connection_info` (C-variadic; called through a
/// non-variadic pointer with the same fixed parameters, which reads no variadic argument for this query).
enum ConnectionSocket {
    private typealias Info = @convention(c) (OpaquePointer?, UInt32) -> UnsafeRawPointer?
    private static let function: Info? = {
        guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "MHD_get_connection_info") else { return nil }
        return unsafeBitCast(symbol, to: Info.self)
    }()

    static func fd(_ connection: OpaquePointer) -> Int32? {
        guard let function, let info = function(connection, MHD_ConnectionInfoType.CONNECTION_INFO_CONNECTION_FD.rawValue) else { return nil }
        return info.load(as: Int32.self)
    }
}

// MARK: - C entry points

private func stubAccess(cls: UnsafeMutableRawPointer?, connection: OpaquePointer?, url: UnsafePointer<CChar>?,
                        method: UnsafePointer<CChar>?, version: UnsafePointer<CChar>?,
                        uploadData: UnsafePointer<CChar>?, uploadDataSize: UnsafeMutablePointer<Int>?,
                        conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> MHD_Result {
    guard let cls, let connection, let url, let method, let uploadDataSize, let conCls else { return .NO }
    let context = Unmanaged<StubContext>.fromOpaque(cls).takeUnretainedValue()
    guard let raw = conCls.pointee else {
        // First call: headers only. Answering now would cost keep-alive; answer on the next call.
        let exchange = StubExchange(connection: connection, context: context)
        conCls.pointee = Unmanaged.passRetained(exchange).toOpaque()
        context.live.withLock { $0[ObjectIdentifier(exchange)] = exchange }
        context.open.add(1, ordering: .relaxed)
        return .YES
    }
    if uploadDataSize.pointee > 0 {
        uploadDataSize.pointee = 0  // request bodies are ignored
        return .YES
    }
    let exchange = Unmanaged<StubExchange>.fromOpaque(raw).takeUnretainedValue()
    return context.handle(connection, method: String(cString: method), url: String(cString: url), exchange: exchange)
}

private func stubCompleted(cls: UnsafeMutableRawPointer?, connection: OpaquePointer?,
                           conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, toe: MHD_RequestTerminationCode) {
    guard let cls, let conCls, let raw = conCls.pointee else { return }
    let context = Unmanaged<StubContext>.fromOpaque(cls).takeUnretainedValue()
    let exchange = Unmanaged<StubExchange>.fromOpaque(raw).takeRetainedValue()
    exchange.state.withLock { $0.finished = true }
    context.live.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(exchange)) }
    context.open.subtract(1, ordering: .relaxed)
    conCls.pointee = nil
}

private func stubDripRead(cls: UnsafeMutableRawPointer?, position: UInt64, buffer: UnsafeMutablePointer<CChar>?, max: Int) -> Int {
    guard let cls, let buffer, max > 0 else { return MHD_CONTENT_READER_END_WITH_ERROR }
    let exchange = Unmanaged<StubExchange>.fromOpaque(cls).takeUnretainedValue()
    return exchange.context.drip(exchange, into: buffer, max: max)
}

private func stubDripFree(cls: UnsafeMutableRawPointer?) {
    guard let cls else { return }
    Unmanaged<StubExchange>.fromOpaque(cls).release()
}

private func stubHeader(cls: UnsafeMutableRawPointer?, kind: MHD_ValueKind, key: UnsafePointer<CChar>?,
                        value: UnsafePointer<CChar>?) -> MHD_Result {
    guard let cls, let key else { return .YES }
    let box = Unmanaged<HeaderBox>.fromOpaque(cls).takeUnretainedValue()
    let name = String(cString: key)
    box.fields[box.lowercase ? name.lowercased() : name] = value.map { String(cString: $0) } ?? ""
    return .YES
}

private func stubKeepEscaped(cls: UnsafeMutableRawPointer?, connection: OpaquePointer?, text: UnsafeMutablePointer<CChar>?) -> Int {
    text.map { strlen($0) } ?? 0
}

private func stubLog(cls: UnsafeMutableRawPointer?, format: UnsafePointer<CChar>?, arguments: CVaListPointer?) {
    guard let cls, let format, let arguments else { return }
    var buffer = [CChar](repeating: 0, count: 1024)
    _ = vsnprintf(&buffer, buffer.count, format, arguments)
    let line = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    Unmanaged<StubContext>.fromOpaque(cls).takeUnretainedValue().record(log: line)
}

// The socket calls the stub makes, named apart from its own `listen`, on Linux and on Apple platforms.
#if canImport(Glibc)
/// A TCP socket closed on exec.
private func openStreamSocket() -> Int32 { socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
private func systemBind(_ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t) -> Int32 { Glibc.bind(fd, address, length) }
private func systemListen(_ fd: Int32, _ backlog: Int32) -> Int32 { Glibc.listen(fd, backlog) }
#elseif canImport(Darwin)
/// A TCP socket closed on exec.
private func openStreamSocket() -> Int32 {
    let fd = socket(AF_INET, SOCK_STREAM, 0)
    if fd >= 0 { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    return fd
}
private func systemBind(_ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t) -> Int32 { Darwin.bind(fd, address, length) }
private func systemListen(_ fd: Int32, _ backlog: Int32) -> Int32 { Darwin.listen(fd, backlog) }
#endif
