import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A tiny HTTP/1.1 server on 127.0.0.1 over POSIX sockets, for tests: one thread per connection,
/// one request per connection, answers chosen by a handler.
public final class LoopbackServer: Sendable {
    /// What to do with a request.
    public enum Reply: Sendable {
        case respond(status: Int, body: [UInt8], contentType: String = "application/json")
        /// Accept, read the request, never answer (until the client closes).
        case hang
        /// Close the connection without answering.
        case close
    }

    /// A request as the server saw it.
    public struct Request: Sendable {
        public var method: String
        public var target: String
        public var headers: [String: String]
        public var body: [UInt8]
    }

    public let port: UInt16
    private let listener: Int32
    private let handler: @Sendable (Request) -> Reply
    private let seen = Mutex<[Request]>([])
    /// Connections that saw the client close while the server was hanging.
    public let closedByClient = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)

    public init(handler: @escaping @Sendable (Request) -> Reply) throws {
        self.handler = handler
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 64) == 0 else { close(fd); throw POSIXError(.EADDRINUSE) }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        port = UInt16(bigEndian: addr.sin_port)
        listener = fd
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    public var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }
    public var requests: [Request] { seen.withLock { $0 } }

    private let listenerClosed = Atomic<Bool>(false)

    /// Stops accepting. The accept thread closes the listening socket itself when it wakes up, so its
    /// descriptor is never reused under a thread still blocked on it; returns once it is closed.
    public func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        while !listenerClosed.load(ordering: .relaxed) { usleep(1000) }
    }

    /// A port nothing listens on (bound, then closed).
    public static func closedPort() -> UInt16 {
        guard let s = try? LoopbackServer(handler: { _ in .close }) else { return 9 }
        s.stop()
        return s.port
    }

    private func acceptLoop() {
        defer { close(listener); listenerClosed.store(true, ordering: .relaxed) }
        while !stopped.load(ordering: .relaxed) {
            let client = accept(listener, nil, nil)
            if client < 0 { if errno == EINTR { continue }; return }
            if stopped.load(ordering: .relaxed) { close(client); return }
            let t = Thread { [self] in serve(client) }
            t.start()
        }
    }

    private func serve(_ fd: Int32) {
        defer { close(fd) }
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        var headEnd: Int?
        while headEnd == nil {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { return }
            buffer.append(contentsOf: chunk[0..<n])
            headEnd = Self.find([13, 10, 13, 10], in: buffer)
        }
        let head = String(decoding: buffer[..<headEnd!], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let first = lines.removeFirst().split(separator: " ")
        var headers: [String: String] = [:]
        for l in lines {
            guard let c = l.firstIndex(of: ":") else { continue }
            headers[l[..<c].lowercased()] = l[l.index(after: c)...].trimmingCharacters(in: .whitespaces)
        }
        var body = Array(buffer[(headEnd! + 4)...])
        let length = Int(headers["content-length"] ?? "0") ?? 0
        while body.count < length {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { return }
            body.append(contentsOf: chunk[0..<n])
        }
        let request = Request(method: first.first.map(String.init) ?? "", target: first.count > 1 ? String(first[1]) : "",
                              headers: headers, body: body)
        seen.withLock { $0.append(request) }
        switch handler(request) {
        case .respond(let status, let body, let type):
            let head = "HTTP/1.1 \(status) X\r\nContent-Type: \(type)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
            let bytes = Array(head.utf8) + body
            _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        case .hang:
            // Wait for the client to give up: recv returns 0 (or an error) when it closes the connection.
            while true {
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n <= 0 { closedByClient.add(1, ordering: .relaxed); return }
            }
        case .close:
            return
        }
    }

    private static func find(_ needle: [UInt8], in hay: [UInt8]) -> Int? {
        guard hay.count >= needle.count else { return nil }
        for i in 0...(hay.count - needle.count) where hay[i..<(i + needle.count)].elementsEqual(needle) { return i }
        return nil
    }
}
