import CMicroHTTPD
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why the server could not start: which address, which option, and libmicrohttpd's last words.
public struct ServerStartError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, e.g. `cannot listen on 127.0.0.1:8443: Address already in use`.
    public var message: String
    /// Creates an error.
    public init(_ message: String) { self.message = message }
    /// The message.
    public var description: String { message }
}

/// The HTTPS server: libmicrohttpd with GnuTLS, answering through a `Router`.
///
/// Threading: one libmicrohttpd daemon with an internal epoll thread per worker, `limits.threads`
/// workers (default: the number of cores). Every access-handler call, and therefore every route
/// handler, runs on one of those threads; a connection stays on one worker. Handlers must not block.
/// Server-Sent Events streams suspend their connection while they have nothing to send and are
/// resumed by the publishing thread. See Sources/FlowScopeServer/README.md for the limits.
///
/// ```swift
/// let server = try HTTPSServer(config: config, router: router)
/// try server.start()
/// print("listening on \(server.baseURL)")
/// server.stop()
/// ```
public final class HTTPSServer: Sendable {
    /// The configuration the server was built with.
    public let config: ServerConfig
    /// The port actually bound (the configured one, or the one the system picked for port 0).
    public let port: Int
    /// `https://<bind>:<port>` (`http://` in insecure mode; IPv6 addresses in brackets).
    public let baseURL: String

    private let context: ServerContext
    private let listener: Mutex<ListenState>

    private enum ListenState {
        case bound(Int32)
        /// Serving: the daemon, and our listening socket (the daemon runs on a duplicate of it).
        case running(DaemonHandle, listenFD: Int32)
        case stopped
    }

    /// Binds the listening socket (so `port` is known) and prepares the daemon; `start()` begins serving.
    public init(config: ServerConfig, router: Router) throws(ServerStartError) {
        guard config.insecureHTTP || config.tls != nil else {
            throw ServerStartError("no TLS certificate: configure server.tls or use --insecure-http")
        }
        guard (0...65_535).contains(config.port) else {
            throw ServerStartError("server.port: expected 0...65535, got \(config.port)")
        }
        let (fd, port) = try ListeningSocket.open(bind: config.bind, port: config.port)
        self.config = config
        self.port = port
        let host = config.bind == "localhost" ? "127.0.0.1" : config.bind
        let shownHost = host.contains(":") ? "[\(host)]" : host
        baseURL = "\(config.insecureHTTP ? "http" : "https")://\(shownHost):\(port)"
        context = ServerContext(config: config, router: router, port: port)
        listener = Mutex(.bound(fd))
    }

    deinit {
        stop()
    }

    /// Starts serving. Throws if libmicrohttpd refuses the options (its log line is in the message).
    ///
    /// Sets SIGPIPE to be ignored in the process: a client that goes away mid-write must cost an
    /// error return, never the process.
    public func start() throws(ServerStartError) {
        signal(SIGPIPE, SIG_IGN)
        try listener.withLock { (state: inout ListenState) throws(ServerStartError) in
            guard case .bound(let fd) = state else { throw ServerStartError("server already started or stopped") }
            let handle = try DaemonHandle.start(listenFD: fd, config: config, context: context)
            state = .running(handle, listenFD: fd)
        }
    }

    /// Stops serving: answers every new request 503, ends every event stream (resuming suspended
    /// connections, as libmicrohttpd requires), waits briefly for them to finish, then stops the daemon.
    public func stop() {
        let previous = listener.withLock { state -> ListenState in
            let previous = state
            state = .stopped
            return previous
        }
        switch previous {
        case .bound(let fd): close(fd)
        case .stopped: return
        case .running(let handle, let ownFD):
            // From here every request is answered 503. No MHD_quiesce_daemon: with epoll worker
            // threads (0.9.75) it races a worker removing the listen socket from its epoll set, and
            // whichever loses aborts the process ("Failed to remove listen FD from epoll set").
            context.stopping.store(true, ordering: .releasing)
            context.closeStreams()
            let clock = ContinuousClock()
            let deadline = clock.now + .seconds(2)
            while context.streamCount > 0 && clock.now < deadline { usleep(2_000) }
            // MHD_stop_daemon closes its duplicate of the listen socket; ours is closed after it.
            handle.stop()
            context.dropKeptResponses()
            context.handshake?.stop()
            close(ownFD)
        }
    }

    /// Event-stream clients connected to this server now.
    public var eventStreamClients: Int { context.streamCount }

    /// libmicrohttpd's messages about a connection that its client ended or broke (see
    /// `ServerConfig.logClientErrors`) since the server started, logged or not.
    public var clientErrors: Int { context.clientErrors.load(ordering: .relaxed) }

    /// The URL to open in a browser when bound off loopback, `https://<host>:<port>/?token=<token>`
    /// (see ``BrowserLogin``); nil on loopback, without a token, and for plain HTTP (the login's
    /// cookie is `Secure`).
    public var browserLoginURL: String? {
        guard config.accessPolicy == .tokenEverywhere, !config.insecureHTTP, let token = config.token else { return nil }
        return BrowserLogin.url(bind: config.bind, port: port, token: token)
    }

    /// Per-request state objects alive now (0 when idle; a test hook for leaks).
    var liveRequests: Int { context.liveRequests.load(ordering: .relaxed) }

    /// Response bodies libmicrohttpd still holds but for the kept responses' (0 once every response
    /// is sent; a test hook for leaks).
    var liveResponseBodies: Int { context.liveBodies.load(ordering: .relaxed) - context.keptBodies }

    /// Answers queued from a kept response, not rebuilt (a test hook).
    var keptResponseHits: Int { context.keptHits.load(ordering: .relaxed) }

    /// The watchdog that closes TLS connections sending no request in time (nil for plain HTTP; a test hook).
    var handshakeDeadline: HandshakeDeadline? { context.handshake }
}

extension ServerConfig {
    /// Whether `bind` is an address the server can listen on: an IPv4 or IPv6 address, or `localhost`
    /// (127.0.0.1). Checked before anything is created, with the same rule the start uses.
    public static func isValidBind(_ bind: String) -> Bool { bindProblem(bind) == nil }

    /// Why the server cannot listen on `bind` (nil when it can), e.g. `expected an IPv4 or IPv6
    /// address or localhost, got "x"`. An IPv4-mapped address (`::ffff:127.0.0.1`) is refused with
    /// its IPv4 spelling: the server's IPv6 sockets are IPv6-only, so the kernel would refuse it.
    public static func bindProblem(_ bind: String) -> String? {
        if case .refused(let problem) = parse(bind: bind) { problem } else { nil }
    }

    /// `bind` as the server listens on it, or why it cannot.
    enum ParsedBind {
        case v4(in_addr), v6(in6_addr), refused(String)
    }

    /// The one parse of `bind`, for the checks and for the start.
    static func parse(bind: String) -> ParsedBind {
        let host = bind == "localhost" ? "127.0.0.1" : bind
        var v4 = in_addr(), v6 = in6_addr()
        if inet_pton(AF_INET, host, &v4) == 1 { return .v4(v4) }
        guard inet_pton(AF_INET6, host, &v6) == 1 else {
            return .refused("expected an IPv4 or IPv6 address or localhost, got \"\(bind)\"")
        }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        guard bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF else { return .v6(v6) }
        let ipv4 = bytes[12...].map(String.init).joined(separator: ".")
        return .refused("\"\(bind)\" is an IPv4 address in IPv6 form, which an IPv6-only socket cannot listen on; write \(ipv4)")
    }
}

/// The listening socket, opened by us so that port 0 can be read back and IPv6 works alike.
enum ListeningSocket {
    static func open(bind: String, port: Int) throws(ServerStartError) -> (fd: Int32, port: Int) {
        var v4 = sockaddr_in()
        var v6 = sockaddr_in6()
        let family: Int32
        switch ServerConfig.parse(bind: bind) {
        case .refused(let problem):
            throw ServerStartError("server.bind: \(problem)")
        case .v4(let address):
            family = AF_INET
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_addr = address
            v4.sin_port = in_port_t(UInt16(port).bigEndian)
        case .v6(let address):
            family = AF_INET6
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_addr = address
            v6.sin6_port = in_port_t(UInt16(port).bigEndian)
        }
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ServerStartError("cannot create a socket: \(StateDirectory.describe(errno: errno))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if family == AF_INET6 { setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size)) }
        let bound: Int32 = family == AF_INET
            ? withUnsafePointer(to: &v4) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            : withUnsafePointer(to: &v6) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        guard bound == 0, listen(fd, 512) == 0 else {
            let reason = StateDirectory.describe(errno: errno)
            close(fd)
            throw ServerStartError("cannot listen on \(bind):\(port): \(reason)")
        }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        let actual: UInt16 = withUnsafeBytes(of: &storage) { raw in
            family == AF_INET
                ? UInt16(bigEndian: raw.load(as: sockaddr_in.self).sin_port)
                : UInt16(bigEndian: raw.load(as: sockaddr_in6.self).sin6_port)
        }
        return (fd, Int(actual))
    }
}

/// The running daemon and the C strings it borrows. Owned by `HTTPSServer` under its lock.
// Safe to share unchecked: it only holds C pointers that are written once at start and freed once in
// `stop()`, which the server calls exactly once (the state machine in `HTTPSServer.stop` guarantees it).
final class DaemonHandle: @unchecked Sendable {
    let daemon: OpaquePointer
    private let strings: [UnsafeMutablePointer<CChar>]

    private init(daemon: OpaquePointer, strings: [UnsafeMutablePointer<CChar>]) {
        self.daemon = daemon
        self.strings = strings
    }

    static func start(listenFD: Int32, config: ServerConfig, context: ServerContext) throws(ServerStartError) -> DaemonHandle {
        var flags = MHD_USE_EPOLL_INTERNAL_THREAD.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue
            | MHD_USE_ERROR_LOG.rawValue | MHD_USE_TURBO.rawValue
        var strings: [UnsafeMutablePointer<CChar>] = []
        let cls = Unmanaged.passUnretained(context).toOpaque()
        let logger: MHD_LogCallback = mhdLog
        let uriLog: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>?, OpaquePointer?) -> UnsafeMutableRawPointer? = mhdURILog
        let completed: MHD_RequestCompletedCallback = mhdCompleted
        // libmicrohttpd gets a duplicate of the socket: see flowscope_listen_duplicate.
        let given = flowscope_listen_duplicate(listenFD)
        guard given >= 0 else {
            throw ServerStartError("cannot duplicate the listening socket: \(StateDirectory.describe(errno: errno))")
        }
        var items: [MHD_OptionItem] = [
            MHD_OptionItem(option: .EXTERNAL_LOGGER, value: unsafeBitCast(logger, to: Int.self), ptr_value: cls),
            MHD_OptionItem(option: .LISTEN_SOCKET, value: Int(given), ptr_value: nil),
            MHD_OptionItem(option: .CONNECTION_LIMIT, value: max(1, config.limits.maxConnections), ptr_value: nil),
            MHD_OptionItem(option: .PER_IP_CONNECTION_LIMIT, value: max(1, config.limits.maxConnectionsPerIP), ptr_value: nil),
            MHD_OptionItem(option: .CONNECTION_MEMORY_LIMIT, value: config.limits.connectionMemoryBytes, ptr_value: nil),
            MHD_OptionItem(option: .CONNECTION_TIMEOUT, value: max(1, config.limits.connectionTimeoutSeconds), ptr_value: nil),
            MHD_OptionItem(option: .URI_LOG_CALLBACK, value: unsafeBitCast(uriLog, to: Int.self), ptr_value: cls),
            MHD_OptionItem(option: .NOTIFY_COMPLETED, value: unsafeBitCast(completed, to: Int.self), ptr_value: cls),
        ]
        if context.handshake != nil {
            let notify: MHD_NotifyConnectionCallback = mhdConnection
            items.append(MHD_OptionItem(option: .NOTIFY_CONNECTION, value: unsafeBitCast(notify, to: Int.self), ptr_value: cls))
        }
        if config.limits.threads > 1 {
            items.append(MHD_OptionItem(option: .THREAD_POOL_SIZE, value: config.limits.threads, ptr_value: nil))
        }
        if !config.insecureHTTP, let tls = config.tls {
            flags |= MHD_USE_TLS.rawValue
            let key = strdup(tls.keyPEM)!
            let cert = strdup(tls.certPEM)!
            let priorities = strdup(config.tlsPriorities)!
            strings = [key, cert, priorities]
            items.append(MHD_OptionItem(option: .HTTPS_MEM_KEY, value: 0, ptr_value: UnsafeMutableRawPointer(key)))
            items.append(MHD_OptionItem(option: .HTTPS_MEM_CERT, value: 0, ptr_value: UnsafeMutableRawPointer(cert)))
            items.append(MHD_OptionItem(option: .HTTPS_PRIORITIES, value: 0, ptr_value: UnsafeMutableRawPointer(priorities)))
        }
        items.append(MHD_OptionItem(option: .END, value: 0, ptr_value: nil))
        let handler: MHD_AccessHandlerCallback = mhdAccess
        // MHD_start_daemon is variadic: pass every option through MHD_OPTION_ARRAY so that only
        // three plain values go through the va_list.
        let daemon = items.withUnsafeMutableBufferPointer { buffer in
            withVaList([MHD_OPTION.ARRAY.rawValue, buffer.baseAddress!, MHD_OPTION.END.rawValue]) { va in
                MHD_start_daemon_va(flags, 0, nil, nil, handler, cls, va)
            }
        }
        guard let daemon else {
            flowscope_release_listen_duplicate(given, listenFD)
            for s in strings { free(s) }
            let last = context.lastLogLine()
            throw ServerStartError("libmicrohttpd did not start on \(config.bind)" + (last.map { ": \($0)" } ?? ""))
        }
        return DaemonHandle(daemon: daemon, strings: strings)
    }

    func stop() {
        MHD_stop_daemon(daemon)
        for s in strings { free(s) }
    }
}

/// Everything the C callbacks need, reached through an unretained pointer that `HTTPSServer` keeps alive
/// for as long as the daemon runs.
final class ServerContext: Sendable {
    let router: Router
    let token: AuthToken?
    let policy: AccessPolicy
    /// The browser login off loopback (nil on loopback and without a token).
    let login: BrowserLogin?
    let maxBodyBytes: Int
    let maxHeaderBytes: Int
    let log: @Sendable (String) -> Void
    let logClientErrors: Bool
    /// libmicrohttpd's messages about a connection its client ended or broke, logged or not.
    let clientErrors = Atomic<Int>(0)
    let stopping = Atomic<Bool>(false)
    let liveRequests = Atomic<Int>(0)
    /// Response bodies lent to libmicrohttpd and not yet given back (see `ResponseBody`).
    let liveBodies = Atomic<Int>(0)
    /// Closes TLS connections that send no request in time (nil for plain HTTP, where libmicrohttpd's
    /// own timeout works).
    let handshake: HandshakeDeadline?
    private let streams = Mutex<[ObjectIdentifier: SSEStream]>([:])
    private let logState = Mutex(LogState())
    /// The last few responses, answered again without being rebuilt (see `KeptResponses`).
    private let kept = Mutex(KeptResponses())
    /// Answers queued from a kept response.
    let keptHits = Atomic<Int>(0)

    /// The last diagnostic, and how repeats are folded: libmicrohttpd logs one line per refused
    /// connection, so a flood of connections beyond the limits would otherwise write a line each.
    private struct LogState {
        var last: String?
        var lastWritten: ContinuousClock.Instant?
        var repeats = 0
    }

    /// A line repeated within this interval of its last write is counted, not written.
    static let logRepeatInterval = Duration.seconds(1)

    init(config: ServerConfig, router: Router, port: Int) {
        self.router = router
        token = config.token
        policy = config.accessPolicy
        // No login over plain HTTP: the token would cross the network in a URL, and the cookie.
        login = config.accessPolicy == .tokenEverywhere && !config.insecureHTTP ? config.token.map { BrowserLogin(token: $0, port: port) } : nil
        maxBodyBytes = config.limits.maxBodyBytes
        maxHeaderBytes = max(4096, config.limits.maxHeaderBytes)
        log = config.log
        logClientErrors = config.logClientErrors
        handshake = config.insecureHTTP ? nil : HandshakeDeadline(connectionTimeoutSeconds: config.limits.connectionTimeoutSeconds)
    }

    var streamCount: Int { streams.withLock { $0.count } }

    func closeStreams() {
        for stream in streams.withLock({ Array($0.values) }) { stream.close(dropped: false) }
    }

    /// Passes a diagnostic on to `config.log`, folding repeats of the same line: within
    /// `logRepeatInterval` of its last write a repeat is only counted; the next line written says how
    /// many were folded.
    ///
    /// A message about one connection that its client ended or broke is only counted, unless
    /// `ServerConfig.logClientErrors`.
    func record(log line: String) {
        if MHDMessage.isClientError(line) {
            clientErrors.add(1, ordering: .relaxed)
            guard logClientErrors else { return }
        }
        let now = ContinuousClock.now
        let (write, folded) = logState.withLock { state -> (Bool, Int) in
            defer { state.last = line }
            if line == state.last, let written = state.lastWritten, now - written < Self.logRepeatInterval {
                state.repeats += 1
                return (false, 0)
            }
            let folded = state.repeats
            state.repeats = 0
            state.lastWritten = now
            return (true, folded)
        }
        guard write else { return }
        if folded > 0 { log("(the previous message repeated \(folded) more times)") }
        log(line)
    }

    func lastLogLine() -> String? { logState.withLock { $0.last } }

    // MARK: request handling (on a daemon worker thread)

    func handle(connection: OpaquePointer, method: String, url: UnsafePointer<CChar>, state: RequestState,
                uploadData: UnsafePointer<CChar>?, uploadSize: UnsafeMutablePointer<Int>) -> MHD_Result {
        if !state.headersSeen {
            state.headersSeen = true
            if state.rawURI.isEmpty { state.rawURI = String(cString: url) }
            if stopping.load(ordering: .acquiring) { return queue(.error(503, "server is stopping"), on: connection, state: state) }
            if let oversized = oversizedHead(state: state, connection: connection) {
                // Answered at once, without reading a body; libmicrohttpd closes the connection after.
                return queue(oversized, on: connection, state: state)
            }
            // libmicrohttpd has checked the field (decimal digits, at most UInt64.max): a length past
            // Int.max is over any cap, never absent (as Int(_:) alone made it).
            let length = header(connection, "Content-Length").map { UInt64($0).map { Int(clamping: $0) } ?? Int.max } ?? 0
            let chunked = header(connection, "Transfer-Encoding")?.lowercased().contains("chunked") ?? false
            let waitsForContinue = header(connection, "Expect")?.lowercased() == "100-continue"
            if length > maxBodyBytes {
                state.rejection = .error(413, "request body over \(maxBodyBytes) bytes")
            } else if length > 0 || chunked, router.needsToken(method: method, rawPath: state.rawPath, policy: policy),
                      !(token?.accepts(authorization: header(connection, "Authorization")) ?? false),
                      // A read with the login cookie is decided once its (discarded) body is read.
                      !((method == "GET" || method == "HEAD") && (login?.accepts(cookieHeader: header(connection, "Cookie")) ?? false)) {
                state.rejection = .unauthorized()
            }
            if let rejection = state.rejection, waitsForContinue || length > maxBodyBytes * 8 {
                // The client waits for 100 Continue (or the body is absurd): answer now, without
                // reading the body; libmicrohttpd closes the connection after.
                return queue(rejection, on: connection, state: state)
            }
            // Otherwise read (and discard) the body and answer at its end, so the client is
            // sure to receive the answer and the connection stays usable. Answering on the first
            // call would also cost keep-alive.
            return .YES
        }
        if uploadSize.pointee > 0 {
            let count = uploadSize.pointee
            if state.rejection == nil, state.body.count + count <= maxBodyBytes, let uploadData {
                uploadData.withMemoryRebound(to: UInt8.self, capacity: count) {
                    state.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: count))
                }
            } else {
                if state.rejection == nil { state.rejection = .error(413, "request body over \(maxBodyBytes) bytes") }
                state.body = []
            }
            uploadSize.pointee = 0
            return .YES
        }
        if let rejection = state.rejection {
            return queue(rejection, on: connection, state: state)
        }
        guard let queryItems = PercentDecoding.queryItems(state.rawQuery) else {
            return queue(.error(400, "malformed percent-encoding in the query"), on: connection, state: state)
        }
        let request = Request(method: method, path: state.rawPath, rawPath: state.rawPath, queryItems: queryItems,
                              rawQuery: state.rawQuery, headers: headers(connection), body: state.body,
                              remoteAddress: ClientAddress.of(connection) ?? "", pathParameters: [:])
        let response = router.respond(to: request, token: token, policy: policy, login: login)
        if case .eventStream(let hub) = response.body, method != "HEAD" {
            return startStream(hub, response: response, request: request, on: connection)
        }
        return queue(response, on: connection, state: state)
    }

    /// 414 for a request target over `maxHeaderBytes`, 431 for a request head (request line and
    /// header fields, as libmicrohttpd counted them) over it; nil for a head within the limit.
    private func oversizedHead(state: RequestState, connection: OpaquePointer) -> Response? {
        if state.rawURI.utf8.count > maxHeaderBytes {
            return .error(414, "request target over \(maxHeaderBytes) bytes")
        }
        let headSize = ConnectionInfo.raw(connection, .CONNECTION_INFO_REQUEST_HEADER_SIZE).map { $0.load(as: Int.self) } ?? 0
        if headSize > maxHeaderBytes {
            return .error(431, "request header fields over \(maxHeaderBytes) bytes")
        }
        return nil
    }

    private func startStream(_ hub: SSEHub, response: Response, request: Request, on connection: OpaquePointer) -> MHD_Result {
        if stopping.load(ordering: .acquiring) { return queue(.error(503, "server is stopping"), on: connection, state: nil) }
        let lastEventID = request.header("last-event-id").flatMap { UInt64($0.trimmingSpaces) }
        let stream = hub.subscribe(connection: ConnectionRef(raw: connection), lastEventID: lastEventID) { [weak self] stream in
            _ = self?.streams.withLock { $0.removeValue(forKey: ObjectIdentifier(stream)) }
        }
        streams.withLock { $0[ObjectIdentifier(stream)] = stream }
        let reader: MHD_ContentReaderCallback = sseRead
        let free: MHD_ContentReaderFreeCallback = sseFree
        // The response owns one retain of the stream, given back in the free callback.
        let retained = Unmanaged.passRetained(stream).toOpaque()
        guard let raw = MHD_create_response_from_callback(UInt64.max, 16 * 1024, reader, retained, free) else {
            Unmanaged<SSEStream>.fromOpaque(retained).release()
            stream.close(dropped: true)
            stream.finished()
            return .NO
        }
        defer { MHD_destroy_response(raw) }
        addHeaders(response, to: raw)
        if stopping.load(ordering: .acquiring) { stream.close(dropped: false) }
        return MHD_queue_response(connection, UInt32(response.status), raw)
    }

    /// Queues `response` on `connection`, corking it when large (`TCPCork`; `state` remembers it).
    private func queue(_ response: Response, on connection: OpaquePointer, state: RequestState?) -> MHD_Result {
        let body = response.bodyBytes
        if handshake != nil, body.count > TCPCork.minimumBody, let state {
            TCPCork.set(connection, true)
            state.corked = true
        }
        if let queued = kept.withLock({ $0.queueAgain(response, body: body, on: connection) }) {
            keptHits.add(1, ordering: .relaxed)
            return queued
        }
        guard let raw = ResponseBody.create(body, owner: self) else { return .NO }
        addHeaders(response, to: raw)
        let queued = MHD_queue_response(connection, UInt32(clamping: response.status), raw)
        if body.count <= KeptResponses.maxBody, !stopping.load(ordering: .acquiring) {
            kept.withLock { $0.keep(response, body: body, raw: raw) }
        } else {
            MHD_destroy_response(raw)
        }
        return queued
    }

    /// Destroys the kept responses (their bodies are given back once no connection sends them).
    func dropKeptResponses() { kept.withLock { $0.removeAll() } }

    /// Bodies of kept responses (lent to libmicrohttpd for as long as they are kept).
    var keptBodies: Int { kept.withLock { $0.lentBodies } }

    private func addHeaders(_ response: Response, to raw: OpaquePointer) {
        var hasCacheControl = false
        for (name, value) in response.headers {
            // Fields libmicrohttpd writes itself are dropped; names compared without allocating.
            if ASCII.equalsIgnoringCase(name, "content-length") || ASCII.equalsIgnoringCase(name, "connection")
                || ASCII.equalsIgnoringCase(name, "transfer-encoding") || ASCII.equalsIgnoringCase(name, "date") {
                continue
            }
            if ASCII.equalsIgnoringCase(name, "cache-control") { hasCacheControl = true }
            MHD_add_response_header(raw, name, value)
        }
        if !hasCacheControl { MHD_add_response_header(raw, "Cache-Control", "no-store") }
        for (name, value) in SecurityHeaders.fields { MHD_add_response_header(raw, name, value) }
    }

    private func header(_ connection: OpaquePointer, _ name: String) -> String? {
        MHD_lookup_connection_value(connection, .HEADER_KIND, name).map { String(cString: $0) }
    }

    private func headers(_ connection: OpaquePointer) -> [String: String] {
        let collector = HeaderCollector()
        let iterator: MHD_KeyValueIterator = mhdHeader
        withExtendedLifetime(collector) {
            _ = MHD_get_connection_values(connection, .HEADER_KIND, iterator, Unmanaged.passUnretained(collector).toOpaque())
        }
        return collector.fields
    }
}

/// Per-request state, created in the URI-log callback and released in the completed callback.
/// Only the worker thread serving the connection touches it.
final class RequestState {
    var rawURI: String
    var headersSeen = false
    var body: [UInt8] = []
    /// The answer decided before the body was read (413, 401); the body is discarded.
    var rejection: Response?
    /// Its response was corked (`TCPCork`): uncorked when the request completes.
    var corked = false

    init(rawURI: String) { self.rawURI = rawURI }

    // Both scan UTF-8 bytes: `?` and `#` are ASCII, so their indices are character boundaries.
    var rawPath: String {
        guard let mark = rawURI.utf8.firstIndex(where: { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }) else { return rawURI }
        return String(rawURI[..<mark])
    }

    var rawQuery: String {
        let utf8 = rawURI.utf8
        // A `?` inside a fragment starts no query.
        guard let mark = utf8.firstIndex(where: { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }),
              utf8[mark] == UInt8(ascii: "?") else { return "" }
        let start = utf8.index(after: mark)
        let end = utf8[start...].firstIndex(of: UInt8(ascii: "#")) ?? utf8.endIndex
        return String(rawURI[start..<end])
    }
}

final class HeaderCollector {
    var fields: [String: String] = [:]
}

extension String {
    var trimmingSpaces: String {
        var s = Substring(self)
        while s.first == " " || s.first == "\t" { s = s.dropFirst() }
        while s.last == " " || s.last == "\t" { s = s.dropLast() }
        return String(s)
    }
}

/// The client's address, through `MHD_get_connection_info` (see `ConnectionInfo`).
enum ClientAddress {
    static func of(_ connection: OpaquePointer) -> String? {
        guard let info = ConnectionInfo.raw(connection, .CONNECTION_INFO_CLIENT_ADDRESS),
              let address = info.load(as: UnsafePointer<sockaddr>?.self) else { return nil }
        let family = Int32(address.pointee.sa_family)
        guard family == AF_INET || family == AF_INET6 else { return nil }
        // Formatted into a stack buffer: this runs for every request.
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: Int(INET6_ADDRSTRLEN) + 1) { text -> String? in
            guard let base = text.baseAddress else { return nil }
            let written: UnsafePointer<CChar>?
            if family == AF_INET {
                var sin = UnsafeRawPointer(address).load(as: sockaddr_in.self)
                written = inet_ntop(AF_INET, &sin.sin_addr, base, socklen_t(text.count))
            } else {
                var sin6 = UnsafeRawPointer(address).load(as: sockaddr_in6.self)
                written = inet_ntop(AF_INET6, &sin6.sin6_addr, base, socklen_t(text.count))
            }
            return written == nil ? nil : String(cString: base)
        }
    }
}

// MARK: - C entry points (top-level functions convert to @convention(c); no captures)

private func mhdAccess(cls: UnsafeMutableRawPointer?, connection: OpaquePointer?, url: UnsafePointer<CChar>?,
                       method: UnsafePointer<CChar>?, version: UnsafePointer<CChar>?,
                       uploadData: UnsafePointer<CChar>?, uploadDataSize: UnsafeMutablePointer<Int>?,
                       conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> MHD_Result {
    guard let cls, let connection, let url, let method, let uploadDataSize, let conCls else { return .NO }
    let context = Unmanaged<ServerContext>.fromOpaque(cls).takeUnretainedValue()
    let state: RequestState
    if let raw = conCls.pointee {
        state = Unmanaged<RequestState>.fromOpaque(raw).takeUnretainedValue()
    } else {
        state = RequestState(rawURI: String(cString: url))
        conCls.pointee = Unmanaged.passRetained(state).toOpaque()
        context.liveRequests.add(1, ordering: .relaxed)
    }
    return context.handle(connection: connection, method: String(cString: method), url: url,
                          state: state, uploadData: uploadData, uploadSize: uploadDataSize)
}

private func mhdURILog(cls: UnsafeMutableRawPointer?, uri: UnsafePointer<CChar>?, connection: OpaquePointer?) -> UnsafeMutableRawPointer? {
    guard let cls else { return nil }
    let context = Unmanaged<ServerContext>.fromOpaque(cls).takeUnretainedValue()
    context.liveRequests.add(1, ordering: .relaxed)
    if let connection { context.handshake?.requestArrived(connection) }
    let state = RequestState(rawURI: uri.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: strlen($0)), as: UTF8.self) } ?? "")
    return Unmanaged.passRetained(state).toOpaque()
}

private func mhdCompleted(cls: UnsafeMutableRawPointer?, connection: OpaquePointer?,
                          conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, toe: MHD_RequestTerminationCode) {
    guard let cls, let conCls, let raw = conCls.pointee else { return }
    let state = Unmanaged<RequestState>.fromOpaque(raw)
    if let connection, state.takeUnretainedValue().corked { TCPCork.set(connection, false) }
    state.release()
    conCls.pointee = nil
    Unmanaged<ServerContext>.fromOpaque(cls).takeUnretainedValue().liveRequests.subtract(1, ordering: .relaxed)
}

private func mhdConnection(cls: UnsafeMutableRawPointer?, connection: OpaquePointer?,
                           socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, code: MHD_ConnectionNotificationCode) {
    guard let cls, let connection else { return }
    let context = Unmanaged<ServerContext>.fromOpaque(cls).takeUnretainedValue()
    if code == .CONNECTION_NOTIFY_STARTED {
        context.handshake?.started(connection)
    } else {
        context.handshake?.closed(connection)
    }
}

private func mhdHeader(cls: UnsafeMutableRawPointer?, kind: MHD_ValueKind, key: UnsafePointer<CChar>?,
                       value: UnsafePointer<CChar>?) -> MHD_Result {
    guard let cls, let key else { return .YES }
    let collector = Unmanaged<HeaderCollector>.fromOpaque(cls).takeUnretainedValue()
    let name = ASCII.lowercasedString(key)
    let text = value.map { String(cString: $0) } ?? ""
    if let existing = collector.fields[name] {
        collector.fields[name] = existing + ", " + text
    } else {
        collector.fields[name] = text
    }
    return .YES
}

/// What libmicrohttpd (0.9.7x) says about its connections.
enum MHDMessage {
    /// The starts of its messages about one connection that the client ended or broke: a TLS
    /// handshake that failed (a client rejecting the certificate, plain HTTP sent to the TLS port), a
    /// client gone while its response was being sent (an event stream closed) or while its request
    /// was read, a malformed request that libmicrohttpd answered itself, a request head too large for
    /// the connection's memory. Ordinary on any server; the client sees the failure on its side.
    static let clientErrorPrefixes = [
        "Error: received handshake message out of context.",
        "Failed to send data in request for ",
        "Failed to send the response headers for the request for ",
        "Failed to send the response body for the request for ",
        "Failed to send the chunked response body for the request for ",
        "Failed to send the footers for the request for ",
        "Connection socket is closed when reading request due to the error: ",
        "Connection was closed by remote side with incomplete request.",
        "Error processing request (HTTP response code is ",
        "Too large value of 'Content-Length' header.",
        "Failed to parse `Content-Length' header.",
        "Not enough memory in pool to allocate header record!",
        "Closing connection (failed to create response header).",
    ]

    /// Whether `line` is one of those messages.
    static func isClientError(_ line: String) -> Bool {
        clientErrorPrefixes.contains { line.hasPrefix($0) }
    }
}

private func mhdLog(cls: UnsafeMutableRawPointer?, format: UnsafePointer<CChar>?, arguments: CVaListPointer?) {
    guard let cls, let format, let arguments else { return }
    var buffer = [CChar](repeating: 0, count: 1024)
    _ = vsnprintf(&buffer, buffer.count, format, arguments)
    var line = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    while line.hasSuffix("\n") { line.removeLast() }
    Unmanaged<ServerContext>.fromOpaque(cls).takeUnretainedValue().record(log: line)
}

private func sseRead(cls: UnsafeMutableRawPointer?, position: UInt64, buffer: UnsafeMutablePointer<CChar>?, max: Int) -> Int {
    guard let cls, let buffer else { return MHD_CONTENT_READER_END_WITH_ERROR }
    return Unmanaged<SSEStream>.fromOpaque(cls).takeUnretainedValue().read(into: buffer, max: max)
}

private func sseFree(cls: UnsafeMutableRawPointer?) {
    guard let cls else { return }
    Unmanaged<SSEStream>.fromOpaque(cls).takeRetainedValue().finished()
}

/// Holds a large TLS response's records back until the whole response is written, so its head and
/// body leave in as few TCP segments as fit (Linux `TCP_CORK`).
///
/// libmicrohttpd 0.9.75 writes a TLS response's head as one record and its body as records of at
/// most 16 KiB, one `sendmsg` each; uncorked, each goes out as its own segment and wakes the
/// client once per record. The cork is set when a response with a body over `minimumBody` is
/// queued and cleared when libmicrohttpd reports that request completed (its last byte written, or
/// the connection ended), so nothing waits for the kernel's 200 ms cork limit. Smaller responses
/// (two records) are not corked: the three `setsockopt` calls cost what the saved segment saves
/// (measured with bench/nginx-compare.sh). Event streams are never corked. Elsewhere than Linux
/// it does nothing.
enum TCPCork {
    /// Bodies up to one TLS record's payload are sent uncorked.
    static let minimumBody = 16 * 1024

    static func set(_ connection: OpaquePointer, _ on: Bool) {
        #if os(Linux)
        guard let fd = ConnectionInfo.socket(of: connection) else { return }
        var value: Int32 = on ? 1 : 0
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_CORK, &value, socklen_t(MemoryLayout<Int32>.size))
        #endif
    }
}

/// The last few libmicrohttpd responses, queued again when a route answers with the same status,
/// header fields and body storage: a constant body (`/healthz`'s, the dashboard's files) or one kept
/// by its producer while nothing changed (the metrics registry's last render). A repeat then costs
/// no response object, no header copies and no body box; the rest of the request path is unchanged.
///
/// Matching on the body's storage is exact: an entry keeps its body alive, so while it is kept no
/// other array can have that address. Bodies over `maxBody` are never kept, so the entries hold at
/// most `capacity * maxBody` bytes.
// Safe to share unchecked: only the C pointers to libmicrohttpd's responses are not Sendable; the value
// lives in `ServerContext`'s Mutex, and every use of a pointer (queue, destroy) happens under that lock.
struct KeptResponses: @unchecked Sendable {
    static let capacity = 8
    static let maxBody = 64 * 1024

    private struct Entry {
        var status: Int
        var headers: [(name: String, value: String)]
        var body: [UInt8]
        var raw: OpaquePointer
    }

    /// Least recently used first.
    private var entries: [Entry] = []

    /// Kept bodies lent to libmicrohttpd (an empty body is not lent).
    var lentBodies: Int { entries.reduce(0) { $0 + ($1.body.isEmpty ? 0 : 1) } }

    /// Queues the kept response equal to `response` on `connection`; nil when none is kept.
    mutating func queueAgain(_ response: Response, body: [UInt8], on connection: OpaquePointer) -> MHD_Result? {
        guard let index = entries.lastIndex(where: { Self.same($0, response, body) }) else { return nil }
        // Under the lock: an entry evicted by another thread cannot be destroyed before it is queued.
        let queued = MHD_queue_response(connection, UInt32(clamping: response.status), entries[index].raw)
        if index != entries.count - 1 { entries.append(entries.remove(at: index)) }  // most recently used last
        return queued
    }

    /// Keeps `raw`, the response built for `response`, evicting (destroying) the least recently used
    /// beyond `capacity`.
    mutating func keep(_ response: Response, body: [UInt8], raw: OpaquePointer) {
        entries.append(Entry(status: response.status, headers: response.headers, body: body, raw: raw))
        if entries.count > Self.capacity { MHD_destroy_response(entries.removeFirst().raw) }
    }

    mutating func removeAll() {
        for entry in entries { MHD_destroy_response(entry.raw) }
        entries.removeAll()
    }

    private static func same(_ entry: Entry, _ response: Response, _ body: [UInt8]) -> Bool {
        guard entry.status == response.status, entry.body.count == body.count,
              entry.headers.count == response.headers.count else { return false }
        let sameStorage = entry.body.withUnsafeBufferPointer { kept in
            body.withUnsafeBufferPointer { kept.baseAddress == $0.baseAddress }
        }
        guard sameStorage else { return false }
        for (a, b) in zip(entry.headers, response.headers) where a.name != b.name || a.value != b.value { return false }
        return true
    }
}
