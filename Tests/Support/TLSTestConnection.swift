import COpenSSL
import Foundation

/// A failure of the test client: connect, handshake, read or parse.
public struct ClientError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A parsed HTTP/1.1 response.
public struct HTTPReply {
    public var status: Int
    public var headers: [String: String]
    public var body: [UInt8]
    public var text: String { String(decoding: body, as: UTF8.self) }
    public func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// One client connection over real TCP to 127.0.0.1, TLS via OpenSSL's SSL_* API (or plain).
/// Blocking I/O with a receive timeout, so a hung server fails the test instead of hanging it.
// Safe to share unchecked: it wraps OpenSSL's SSL pointers, and every test uses a connection from one
// thread at a time (handing it over, if at all, with a thread join that orders the accesses).
public final class TestConnection: @unchecked Sendable {
    private let fd: Int32
    private var ctx: OpaquePointer?
    private var ssl: OpaquePointer?
    private var buffer: [UInt8] = []
    public private(set) var closedByPeer = false

    /// Connects; `maxTLSVersion` caps the protocol (e.g. TLS1_1_VERSION); `ciphers` is the only
    /// TLS 1.2 cipher list offered (OpenSSL names); `tls: false` speaks plain TCP.
    public init(host: String = "127.0.0.1", port: Int, tls: Bool = true, maxTLSVersion: Int? = nil,
         ciphers: String? = nil, timeout: Double = 5) throws {
        let v6 = host.contains(":")
        fd = socket(v6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ClientError("socket failed") }
        var tv = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - Double(Int(timeout))) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        let connected: Int32
        if v6 {
            var addr = sockaddr_in6()
            addr.sin6_family = sa_family_t(AF_INET6)
            addr.sin6_port = in_port_t(UInt16(port).bigEndian)
            inet_pton(AF_INET6, host, &addr.sin6_addr)
            connected = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        } else {
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = in_port_t(UInt16(port).bigEndian)
            inet_pton(AF_INET, host, &addr.sin_addr)
            connected = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        // No close(fd) before throwing: every property is set, so deinit runs and closes it. A second
        // close would close whatever file took the number meanwhile (libmicrohttpd's eventfd, once).
        guard connected == 0 else { throw ClientError("connect to \(host):\(port) failed: errno \(errno)") }
        guard tls else { return }
        ctx = SSL_CTX_new(TLS_client_method())
        guard let ctx else { throw ClientError("SSL_CTX_new failed") }
        if let maxTLSVersion {
            // Let OpenSSL offer old versions at all (OpenSSL 3 refuses TLS < 1.2 above security level 0),
            // so that it is the server that refuses.
            SSL_CTX_set_security_level(ctx, 0)
            SSL_CTX_set_cipher_list(ctx, "DEFAULT:@SECLEVEL=0")
            SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, Int(TLS1_VERSION), nil)
            SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MAX_PROTO_VERSION, maxTLSVersion, nil)
        }
        if let ciphers, SSL_CTX_set_cipher_list(ctx, ciphers) != 1 {
            throw ClientError("OpenSSL knows no cipher in \(ciphers)")
        }
        ssl = SSL_new(ctx)
        SSL_set_fd(ssl, fd)
        if SSL_connect(ssl) != 1 {
            let reason = Self.openSSLErrors()
            throw ClientError("TLS handshake failed: \(reason)")
        }
    }

    deinit {
        if let ssl { SSL_free(ssl) }
        if let ctx { SSL_CTX_free(ctx) }
        close(fd)
    }

    /// Closes the socket in both directions (the server sees the client leave).
    public func shutdownSocket() { shutdown(fd, Int32(SHUT_RDWR)) }

    /// The negotiated cipher suite (OpenSSL name).
    public var cipherName: String? { ssl.flatMap { SSL_get_current_cipher($0) }.flatMap { SSL_CIPHER_get_name($0) }.map { String(cString: $0) } }

    /// The negotiated protocol, e.g. `TLSv1.3`.
    public var tlsVersion: String? { ssl.flatMap { SSL_get_version($0) }.map { String(cString: $0) } }

    /// SHA-256 of the server certificate, `AB:CD:...`.
    public var peerFingerprint: String? {
        guard let ssl, let cert = SSL_get1_peer_certificate(ssl) else { return nil }
        defer { X509_free(cert) }
        var digest = [UInt8](repeating: 0, count: 64)
        var length: UInt32 = 0
        X509_digest(cert, EVP_sha256(), &digest, &length)
        return digest.prefix(Int(length)).map { String(format: "%02X", $0) }.joined(separator: ":")
    }

    public func send(_ text: String) throws { try send(Array(text.utf8)) }

    public func send(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let n: Int = bytes.withUnsafeBytes { raw in
                if let ssl { Int(SSL_write(ssl, raw.baseAddress! + sent, Int32(raw.count - sent))) }
                else { Glibc.send(fd, raw.baseAddress! + sent, raw.count - sent, Int32(MSG_NOSIGNAL)) }
            }
            guard n > 0 else { throw ClientError("send failed after \(sent) bytes") }
            sent += n
        }
    }

    /// Reads what is available (blocking up to the timeout); nil at end of stream or on error/timeout.
    public func readSome() -> [UInt8]? {
        var chunk = [UInt8](repeating: 0, count: 16_384)
        let n: Int = chunk.withUnsafeMutableBytes { raw in
            if let ssl { Int(SSL_read(ssl, raw.baseAddress, Int32(raw.count))) }
            else { recv(fd, raw.baseAddress, raw.count, 0) }
        }
        guard n > 0 else {
            closedByPeer = true
            return nil
        }
        return Array(chunk[0..<n])
    }

    /// Sends one request and reads one response.
    public func request(_ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8] = []) throws -> HTTPReply {
        var head = "\(method) \(target) HTTP/1.1\r\nHost: localhost\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        do {
            try send(Array(head.utf8) + body)
        } catch {
            // The server may answer (413, 401) and close before taking the whole body.
            if let reply = try? readResponse(method: method) { return reply }
            throw error
        }
        return try readResponse(method: method)
    }

    /// Reads one response (Content-Length, chunked, or until close).
    public func readResponse(method: String = "GET") throws -> HTTPReply {
        let headEnd = try fill(until: { Self.find([13, 10, 13, 10], in: $0) })
        let head = String(decoding: buffer[..<headEnd], as: UTF8.self)
        buffer.removeFirst(headEnd + 4)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { throw ClientError("bad status line: \(head)") }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            headers[name] = headers[name].map { $0 + ", " + value } ?? value
        }
        var body: [UInt8] = []
        if method == "HEAD" || status == 204 || status == 304 {
        } else if let length = headers["content-length"].flatMap(Int.init) {
            _ = try fill(until: { $0.count >= length ? length : nil })
            body = Array(buffer[..<length])
            buffer.removeFirst(length)
        } else if headers["transfer-encoding"]?.contains("chunked") == true {
            while true {
                let lineEnd = try fill(until: { Self.find([13, 10], in: $0) })
                let sizeText = String(decoding: buffer[..<lineEnd], as: UTF8.self).split(separator: ";").first ?? ""
                guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16) else { throw ClientError("bad chunk size") }
                buffer.removeFirst(lineEnd + 2)
                if size == 0 {
                    _ = try fill(until: { Self.find([13, 10], in: $0) })
                    buffer.removeFirst(Self.find([13, 10], in: buffer)! + 2)
                    break
                }
                _ = try fill(until: { $0.count >= size + 2 ? size : nil })
                body += buffer[..<size]
                buffer.removeFirst(size + 2)
            }
        } else {
            while let more = readSome() { buffer += more }
            body = buffer
            buffer = []
        }
        return HTTPReply(status: status, headers: headers, body: body)
    }

    /// Reads the decoded body of a chunked (SSE) response until `done` holds for the text so far.
    public func readStream(startingWith initial: [UInt8] = [], until done: (String) -> Bool) -> (text: String, ended: Bool) {
        var decoder = ChunkDecoder()
        var text = String(decoding: decoder.feed(buffer + initial), as: UTF8.self)
        buffer = []
        while !done(text) {
            if decoder.finished { return (text, true) }
            guard let more = readSome() else { return (text, true) }
            text += String(decoding: decoder.feed(more), as: UTF8.self)
        }
        return (text, decoder.finished)
    }

    /// Reads a response's head only (status and headers), leaving the body for `readStream`.
    public func readHead() throws -> HTTPReply {
        let headEnd = try fill(until: { Self.find([13, 10, 13, 10], in: $0) })
        let head = String(decoding: buffer[..<headEnd], as: UTF8.self)
        buffer.removeFirst(headEnd + 4)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return HTTPReply(status: statusLine.count > 1 ? Int(statusLine[1]) ?? 0 : 0, headers: headers, body: [])
    }

    private func fill(until found: ([UInt8]) -> Int?) throws -> Int {
        while true {
            if let index = found(buffer) { return index }
            guard let more = readSome() else { throw ClientError("connection ended (or timed out) with \(buffer.count) bytes buffered") }
            buffer += more
        }
    }

    public static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for i in 0...(haystack.count - needle.count) where haystack[i] == needle[0] {
            if Array(haystack[i..<(i + needle.count)]) == needle { return i }
        }
        return nil
    }

    public static func openSSLErrors() -> String {
        var parts: [String] = []
        while case let code = ERR_get_error(), code != 0 {
            var text = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &text, text.count)
            parts.append(text.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
        }
        return parts.isEmpty ? "no OpenSSL error queued" : parts.joined(separator: "; ")
    }
}

/// Incremental decoder of HTTP/1.1 chunked transfer encoding.
public struct ChunkDecoder {
    private var raw: [UInt8] = []
    private var remaining: Int? = nil  // bytes left in the current chunk (+2 for its CRLF)
    public private(set) var finished = false

    public mutating func feed(_ bytes: [UInt8]) -> [UInt8] {
        raw += bytes
        var out: [UInt8] = []
        while !finished {
            if let left = remaining {
                if left > 2 {
                    let take = min(left - 2, raw.count)
                    if take == 0 { break }
                    out += raw[..<take]
                    raw.removeFirst(take)
                    remaining = left - take
                } else {
                    guard raw.count >= left else { break }
                    raw.removeFirst(left)
                    remaining = nil
                }
            } else {
                guard let end = TestConnection.find([13, 10], in: raw) else { break }
                let size = Int(String(decoding: raw[..<end], as: UTF8.self).split(separator: ";").first ?? "", radix: 16) ?? 0
                raw.removeFirst(end + 2)
                if size == 0 { finished = true } else { remaining = size + 2 }
            }
        }
        return out
    }

    public init() {}
}
