#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How the HTTPS server listens, what it presents and how much it accepts.
///
/// ```swift
/// let tls = try TLSMaterial.loadOrCreate(stateDir: ".flowscope")
/// let token = try AuthToken.loadOrCreate(stateDir: ".flowscope")
/// let config = ServerConfig(bind: "127.0.0.1", port: 8443, tls: tls, token: token)
/// ```
public struct ServerConfig: Sendable {
    /// Address to listen on: an IPv4 or IPv6 literal, or `localhost` (127.0.0.1). Default 127.0.0.1.
    public var bind: String
    /// Port to listen on; 0 picks a free one (read it back from `HTTPSServer.port`). Default 8443.
    public var port: Int
    /// Certificate and key; required unless `insecureHTTP` is set.
    public var tls: TLSMaterial?
    /// Serve plain HTTP instead of HTTPS (`--insecure-http`, for local debugging only).
    public var insecureHTTP: Bool
    /// The bearer token; with none, routes that need a token always answer 401.
    public var token: AuthToken?
    /// Resource limits.
    public var limits: ServerLimits
    /// GnuTLS priority string: TLS 1.3, and TLS 1.2 with ECDHE and AEAD ciphers only; server order.
    public var tlsPriorities: String
    /// Receives libmicrohttpd's own diagnostics (one line each). Default: dropped.
    public var log: @Sendable (String) -> Void
    /// Whether `log` also receives libmicrohttpd's messages about one connection that its client ended
    /// or broke: a failed TLS handshake (a client that rejects the certificate), a client gone while its
    /// response was sent (an event stream closed) or its request read, a malformed request. Default
    /// false: they are only counted (`HTTPSServer.clientErrors`).
    public var logClientErrors: Bool

    /// The default GnuTLS priorities: TLS 1.3, and TLS 1.2 with ECDHE key exchange and AEAD ciphers
    /// (AES-GCM, ChaCha20-Poly1305) only: no CBC suites (LUCKY13), no static RSA, no finite-field DH.
    public static let defaultTLSPriorities =
        "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:+CHACHA20-POLY1305"
        + ":-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:%SERVER_PRECEDENCE"

    /// A configuration; everything but the TLS material has a default.
    public init(bind: String = "127.0.0.1", port: Int = 8443, tls: TLSMaterial?, insecureHTTP: Bool = false,
                token: AuthToken? = nil, limits: ServerLimits = ServerLimits(),
                tlsPriorities: String = ServerConfig.defaultTLSPriorities,
                log: @escaping @Sendable (String) -> Void = { _ in }, logClientErrors: Bool = false) {
        self.bind = bind
        self.port = port
        self.tls = tls
        self.insecureHTTP = insecureHTTP
        self.token = token
        self.limits = limits
        self.tlsPriorities = tlsPriorities
        self.log = log
        self.logClientErrors = logClientErrors
    }

    /// Who needs the token, decided by the bind address.
    public var accessPolicy: AccessPolicy { policyForTesting ?? AccessPolicy(bindAddress: bind) }

    /// Tests only: a policy other than the bind address's (the off-loopback one on 127.0.0.1).
    var policyForTesting: AccessPolicy?
}

/// Resource limits of the server.
public struct ServerLimits: Sendable, Equatable {
    /// Open connections in total (libmicrohttpd splits this across its worker threads). Default 512.
    public var maxConnections: Int
    /// Open connections from one client address; further ones are closed at once. Default 32.
    public var maxConnectionsPerIP: Int
    /// The largest request head served: the request line and header fields, as sent. Default 32 KiB.
    /// Beyond it the server answers 414 (a request target longer than this) or 431, with the JSON
    /// error body, as long as the head fits in `connectionMemoryBytes` (see there).
    public var maxHeaderBytes: Int
    /// Request body cap; larger bodies get 413. Default 1 MiB.
    public var maxBodyBytes: Int
    /// Idle connections are closed after this many seconds (SSE streams are kept alive by heartbeats). Default 30.
    /// A TLS connection that has not sent its first request line within half of it is closed too.
    public var connectionTimeoutSeconds: Int
    /// libmicrohttpd worker threads (epoll each); default the number of online cores.
    public var threads: Int

    /// libmicrohttpd's memory per connection (`MHD_OPTION_CONNECTION_MEMORY_LIMIT`):
    /// `maxHeaderBytes` plus 32 KiB (64 KiB by default), the hard bound on what one connection's
    /// request head takes.
    ///
    /// libmicrohttpd 0.9.75 keeps the request line and every header field in it, each field with
    /// about 64 bytes of its own bookkeeping, and needs room there for the answer's header. A head too
    /// large for it never reaches FlowScope: libmicrohttpd answers 431 (414 while still in the request
    /// line) with its own HTML body, or closes the connection when the head leaves no room for an
    /// answer. Heads over `maxHeaderBytes` that fit get FlowScope's JSON 414/431.
    public var connectionMemoryBytes: Int { max(4096, maxHeaderBytes) + Self.connectionMemoryMargin }

    /// What `connectionMemoryBytes` adds to `maxHeaderBytes`: 32 KiB.
    public static let connectionMemoryMargin = 32 * 1024

    /// Limits with the defaults above, overridable one by one.
    public init(maxConnections: Int = 512, maxConnectionsPerIP: Int = 32, maxHeaderBytes: Int = 32 * 1024,
                maxBodyBytes: Int = 1 << 20, connectionTimeoutSeconds: Int = 30, threads: Int? = nil) {
        self.maxConnections = maxConnections
        self.maxConnectionsPerIP = maxConnectionsPerIP
        self.maxHeaderBytes = maxHeaderBytes
        self.maxBodyBytes = maxBodyBytes
        self.connectionTimeoutSeconds = connectionTimeoutSeconds
        self.threads = threads ?? max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
    }
}

/// Which requests need the bearer token.
///
/// Bound to loopback, reads are open and only routes marked `requiresToken` (ingest) need it.
/// Bound elsewhere, every route needs it except `GET /healthz`, which reveals nothing and
/// must answer liveness probes that carry no credentials.
public enum AccessPolicy: Sendable, Equatable {
    /// Loopback: only `requiresToken` routes are guarded.
    case loopbackReadsOpen
    /// Any other address: everything but /healthz is guarded.
    case tokenEverywhere

    /// The policy for a bind address: loopback for `localhost`, 127.0.0.0/8 and ::1.
    public init(bindAddress: String) {
        self = Self.isLoopback(bindAddress) ? .loopbackReadsOpen : .tokenEverywhere
    }

    /// Whether `address` is a loopback address.
    public static func isLoopback(_ address: String) -> Bool {
        if address == "localhost" { return true }
        var v4 = in_addr()
        if inet_pton(AF_INET, address, &v4) == 1 { return (UInt32(bigEndian: v4.s_addr) >> 24) == 127 }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, address, &v6) == 1 {
            return withUnsafeBytes(of: &v6) { $0.prefix(15).allSatisfy { $0 == 0 } && $0[15] == 1 }
        }
        return false
    }
}
