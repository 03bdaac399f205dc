import COpenSSL
import FlowFetch
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// HTTP/1.1 exchanges over TLS (OpenSSL), verifying the server against a given PEM CA file and the
/// URL's host. It exists because URLSession on Linux cannot trust a custom CA (it never calls trust
/// delegates and ignores CA settings). `TLSTransport.install()` makes it the way ``HTTPBackend``
/// (`caFile:`) and the test kit's attach (FLOWSCOPE_CA) trust a custom CA in this process.
///
/// Each exchange runs on its own thread with blocking I/O (`Connection: close`); cancelling the
/// calling task shuts the socket down, which ends the exchange at once.
///
/// ```swift
/// TLSTransport.install()
/// let backend = try HTTPBackend(baseURL: URL(string: "https://127.0.0.1:8443")!, caFile: "ca.pem")
/// ```
public struct TLSTransport: HTTPTransport {
    /// The PEM file of the CA (or self-signed certificate) servers are verified against.
    public let caFile: String

    /// A transport that trusts only `caFile`. Throws when the file cannot be read or holds no PEM
    /// certificate.
    public init(caFile: String) throws(HTTPBackendError) {
        guard FileManager.default.isReadableFile(atPath: caFile) else { throw HTTPBackendError("cannot read the file") }
        if let problem = Self.certificateProblem(caFile) { throw HTTPBackendError(problem) }
        self.caFile = caFile
    }

    /// Why OpenSSL cannot trust `caFile` (no PEM certificate in it), nil when it can.
    public static func certificateProblem(_ caFile: String) -> String? {
        guard let ctx = SSL_CTX_new(TLS_client_method()) else { return "cannot create a TLS context" }
        defer { SSL_CTX_free(ctx) }
        guard SSL_CTX_load_verify_locations(ctx, caFile, nil) == 1 else {
            ERR_clear_error()
            return "expected a PEM certificate (-----BEGIN CERTIFICATE-----), found none"
        }
        return nil
    }

    /// Makes this transport the way custom CAs are trusted in this process (``CustomCATransport``).
    public static func install() {
        CustomCATransport.install { caFile throws(HTTPBackendError) in try TLSTransport(caFile: caFile) }
    }

    public func perform(_ exchange: HTTPExchange, timeout: Double, maxBodyBytes: Int) async -> Result<HTTPAnswer, HTTPTransportFailure> {
        await Self.send(exchange.method, url: exchange.url, headers: exchange.headers, body: exchange.body, caFile: caFile,
                        timeout: timeout, maxBodyBytes: maxBodyBytes)
    }

    /// Sends `method url` with `headers` and `body`; trusts only `caFile`; gives up after `timeout` seconds.
    public static func send(_ method: String, url: URL, headers: [(String, String)] = [], body: [UInt8] = [],
                            caFile: String, timeout: Double, maxBodyBytes: Int) async -> Result<HTTPAnswer, HTTPTransportFailure> {
        let control = ExchangeControl()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<HTTPAnswer, HTTPTransportFailure>, Never>) in
                let thread = Thread {
                    // OpenSSL writes with write(2): a peer that closed (or a cancelled exchange's shut
                    // down socket) would raise SIGPIPE and kill the process. Blocked on this thread,
                    // which runs only this exchange, the write fails with EPIPE instead.
                    var pipeSignal = sigset_t()
                    sigemptyset(&pipeSignal)
                    sigaddset(&pipeSignal, SIGPIPE)
                    pthread_sigmask(SIG_BLOCK, &pipeSignal, nil)
                    let r = exchange(method, url: url, headers: headers, body: body, caFile: caFile, timeout: timeout,
                                     maxBodyBytes: maxBodyBytes, control: control)
                    continuation.resume(returning: r)
                }
                thread.start()
            }
        } onCancel: {
            control.cancelled.store(true, ordering: .relaxed)
            control.socket.withLock { fd in if fd >= 0 { shutdown(fd, Int32(SHUT_RDWR)) } }
        }
    }

    private static func exchange(_ method: String, url: URL, headers: [(String, String)], body: [UInt8], caFile: String,
                                 timeout: Double, maxBodyBytes: Int, control: ExchangeControl) -> Result<HTTPAnswer, HTTPTransportFailure> {
        func fail(_ reason: String, _ detail: String) -> Result<HTTPAnswer, HTTPTransportFailure> {
            .failure(HTTPTransportFailure(reason: control.cancelled.load(ordering: .relaxed) ? "cancelled" : reason, detail: detail))
        }
        guard url.scheme == "https", let host = url.host else { return fail("protocol", "expected an https URL") }
        let port = url.port ?? 443
        let deadline = Date().addingTimeInterval(timeout)

        // Resolve and connect.
        var hints = addrinfo()
        hints.ai_socktype = streamSocketType
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &list) == 0, let first = list else { return fail("dns", "cannot resolve \(host)") }
        defer { freeaddrinfo(list) }
        let fd = openStreamSocket(first.pointee.ai_family)
        guard fd >= 0 else { return fail("transport", "socket: \(String(cString: strerror(errno)))") }
        control.socket.withLock { $0 = fd }
        defer {
            control.socket.withLock { $0 = -1 }
            close(fd)
        }
        if control.cancelled.load(ordering: .relaxed) { return fail("cancelled", "") }
        var tv = timeval(tv_sec: Int(timeout.rounded(.up)), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        guard connect(fd, first.pointee.ai_addr, first.pointee.ai_addrlen) == 0 else {
            return fail(errno == ECONNREFUSED ? "refused" : errno == EAGAIN || errno == EINPROGRESS ? "timeout" : "transport",
                        "connect: \(String(cString: strerror(errno)))")
        }

        // TLS, verifying the chain against the CA file and the name against the host.
        guard let ctx = SSL_CTX_new(TLS_client_method()) else { return fail("tls", "cannot create a TLS context") }
        defer { SSL_CTX_free(ctx) }
        guard SSL_CTX_load_verify_locations(ctx, caFile, nil) == 1 else { return fail("tls", "cannot read the CA file \(caFile)") }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
        _ = SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, Int(TLS1_2_VERSION), nil)
        guard let ssl = SSL_new(ctx) else { return fail("tls", "cannot create a TLS session") }
        defer { SSL_free(ssl) }
        let isIP = host.contains(":") || host.allSatisfy { $0.isNumber || $0 == "." }
        if isIP {
            X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host)
        } else {
            SSL_set1_host(ssl, host)
            _ = host.withCString { SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, Int(TLSEXT_NAMETYPE_host_name), UnsafeMutableRawPointer(mutating: $0)) }
        }
        SSL_set_fd(ssl, fd)
        guard SSL_connect(ssl) == 1 else {
            let verify = SSL_get_verify_result(ssl)
            let detail = verify != X509_V_OK ? String(cString: X509_verify_cert_error_string(verify)) : "handshake failed"
            return fail(verify != X509_V_OK ? "tls" : (errno == EAGAIN ? "timeout" : "tls"), detail)
        }

        // Request.
        var head = "\(method) \(url.path.isEmpty ? "/" : url.path)\(url.query.map { "?" + $0 } ?? "") HTTP/1.1\r\n"
        head += "Host: \(host)\(url.port.map { ":\($0)" } ?? "")\r\nConnection: close\r\nContent-Length: \(body.count)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        let request = Array((head + "\r\n").utf8) + body
        var sent = 0
        while sent < request.count {
            let n = request.withUnsafeBytes { SSL_write(ssl, $0.baseAddress! + sent, Int32(request.count - sent)) }
            guard n > 0 else { return fail("reset", "write failed") }
            sent += Int(n)
        }

        // Response: read to the end (Connection: close), bounded.
        var raw: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            if Date() > deadline { return fail("timeout", "no complete answer in \(timeout) s") }
            let n = chunk.withUnsafeMutableBytes { SSL_read(ssl, $0.baseAddress, Int32($0.count)) }
            if n > 0 {
                raw.append(contentsOf: chunk[0..<Int(n)])
                if raw.count > maxBodyBytes + 64 * 1024 { return fail("toolarge", "body over \(maxBodyBytes) bytes") }
                continue
            }
            let error = SSL_get_error(ssl, n)
            if error == SSL_ERROR_ZERO_RETURN || (error == SSL_ERROR_SYSCALL && errno == 0) { break }
            if error == SSL_ERROR_SYSCALL && (errno == EAGAIN || errno == EWOULDBLOCK) { return fail("timeout", "read timed out") }
            if raw.isEmpty { return fail("reset", "connection closed without an answer") }
            break
        }
        return parse(raw, maxBodyBytes: maxBodyBytes).mapError { HTTPTransportFailure(reason: "protocol", detail: $0.detail) }
    }

    /// The socket of a running exchange and whether it was cancelled, shared with the cancellation handler.
    final class ExchangeControl: Sendable {
        let socket = Mutex<Int32>(-1)
        let cancelled = Atomic<Bool>(false)
    }

    /// Parses a complete HTTP/1.1 response (Content-Length, chunked, or to the end).
    public static func parse(_ raw: [UInt8], maxBodyBytes: Int) -> Result<HTTPAnswer, HTTPTransportFailure> {
        guard let end = find([13, 10, 13, 10], in: raw, from: 0) else {
            return raw.isEmpty ? .failure(HTTPTransportFailure(reason: "reset", detail: "no answer")) : .failure(HTTPTransportFailure(reason: "protocol", detail: "incomplete header"))
        }
        let lines = String(decoding: raw[..<end], as: UTF8.self).components(separatedBy: "\r\n")
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, statusParts[0].hasPrefix("HTTP/1."), let status = Int(statusParts[1]) else {
            return .failure(HTTPTransportFailure(reason: "protocol", detail: "bad status line"))
        }
        var fields: [String: String] = [:]
        for l in lines.dropFirst() {
            guard let c = l.firstIndex(of: ":") else { continue }
            fields[l[..<c].lowercased()] = l[l.index(after: c)...].trimmingCharacters(in: .whitespaces)
        }
        var body = Array(raw[(end + 4)...])
        if fields["transfer-encoding"]?.lowercased().contains("chunked") == true {
            var out: [UInt8] = []
            var i = 0
            while let lineEnd = find([13, 10], in: body, from: i) {
                let sizeText = String(decoding: body[i..<lineEnd], as: UTF8.self).split(separator: ";").first ?? ""
                guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16) else {
                    return .failure(HTTPTransportFailure(reason: "protocol", detail: "bad chunk size"))
                }
                if size == 0 { break }
                let start = lineEnd + 2
                guard start + size <= body.count else { return .failure(HTTPTransportFailure(reason: "protocol", detail: "truncated chunk")) }
                out.append(contentsOf: body[start..<(start + size)])
                i = start + size + 2
            }
            body = out
        } else if let length = fields["content-length"].flatMap({ Int($0) }) {
            guard body.count >= length else { return .failure(HTTPTransportFailure(reason: "reset", detail: "body cut short")) }
            body = Array(body.prefix(length))
        }
        guard body.count <= maxBodyBytes else { return .failure(HTTPTransportFailure(reason: "toolarge", detail: "body over \(maxBodyBytes) bytes")) }
        return .success(HTTPAnswer(status: status, body: body))
    }

    private static func find(_ needle: [UInt8], in hay: [UInt8], from: Int) -> Int? {
        guard hay.count >= needle.count + from else { return nil }
        var i = from
        while i <= hay.count - needle.count {
            if hay[i] == needle[0] && hay[i..<(i + needle.count)].elementsEqual(needle) { return i }
            i += 1
        }
        return nil
    }
}

#if canImport(Glibc)
private let streamSocketType = Int32(SOCK_STREAM.rawValue)

/// A TCP socket closed on exec.
private func openStreamSocket(_ family: Int32) -> Int32 {
    Glibc.socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
}
#elseif canImport(Darwin)
private let streamSocketType = SOCK_STREAM

/// A TCP socket closed on exec that raises no SIGPIPE when the peer has gone.
private func openStreamSocket(_ family: Int32) -> Int32 {
    let fd = Darwin.socket(family, SOCK_STREAM, 0)
    if fd >= 0 {
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
    }
    return fd
}
#endif
