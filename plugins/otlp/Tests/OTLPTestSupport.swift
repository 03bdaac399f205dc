import FlowEvents
import FlowFetch
import FlowJSON
import Foundation
import Synchronization

/// Builds a realistic event stream: envelopes with increasing seq and the given wall time.
struct StreamBuilder {
    var seq: UInt64 = 0
    var events: [Envelope] = []
    let base = 1_796_000_000.0

    mutating func add(_ name: EventName, at offset: Double, trace: TraceID, span: SpanID, placement: String?,
                      _ attrs: EventAttributes = [:]) {
        seq += 1
        events.append(Envelope(seq: seq, ts: base + offset, t: offset, run: "live", trace: trace, span: span,
                               name: name, placement: placement, attrs: attrs))
    }
}

let getFlowTrace = TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e4736")!
let getFlowRoot = SpanID(trace: getFlowTrace, index: 0)
let targetedRequest = SpanID(trace: getFlowTrace, index: 1)
let defaultRequest = SpanID(trace: getFlowTrace, index: 2)

let preloadTrace = TraceID(hex: "0af7651916cd43dd8448eb211c80319c")!
let preloadRoot = SpanID(trace: preloadTrace, index: 0)
let preloadRequests = (1...4).map { SpanID(trace: preloadTrace, index: UInt64($0)) }

let failingTrace = TraceID(hex: "00000000000000000000000000000a01")!
let failingRoot = SpanID(trace: failingTrace, index: 0)
let failingRequest = SpanID(trace: failingTrace, index: 1)

/// getFlow main_paywall whose targeted request times out and falls back to the default audience,
/// interleaved with a preload of three placements (one fails), then a getFlow that fails.
func sampleStream() -> [Envelope] {
    var s = StreamBuilder()
    let p = "main_paywall"
    s.add(.fetchStart, at: 0, trace: getFlowTrace, span: getFlowRoot, placement: p,
          ["call": "getFlow", "policy": "reloadRevalidatingCacheData", "loadTimeout": 5])
    s.add(.cacheMiss, at: 0, trace: getFlowTrace, span: getFlowRoot, placement: p)
    s.add(.requestStart, at: 0.001, trace: getFlowTrace, span: targetedRequest, placement: p, ["kind": "targeted", "timeout": 4.5])
    s.add(.preloadStart, at: 0.5, trace: preloadTrace, span: preloadRoot, placement: nil,
          ["placements": ["onboarding", "settings", "promo"], "loadTimeout": 5])
    for (i, placement) in ["onboarding", "settings", "promo"].enumerated() {
        s.add(.requestStart, at: 0.5 + Double(i) * 0.001, trace: preloadTrace, span: preloadRequests[i], placement: placement,
              ["kind": "targeted", "timeout": 4.5])
    }
    s.add(.requestEnd, at: 0.7, trace: preloadTrace, span: preloadRequests[0], placement: "onboarding",
          ["kind": "targeted", "outcome": "ok", "status": 200, "duration": 0.2, "bytes": 2048])
    s.add(.requestEnd, at: 0.8, trace: preloadTrace, span: preloadRequests[1], placement: "settings",
          ["kind": "targeted", "outcome": "ok", "status": 200, "duration": 0.299, "bytes": 1024])
    s.add(.requestEnd, at: 0.9, trace: preloadTrace, span: preloadRequests[2], placement: "promo",
          ["kind": "targeted", "outcome": "server", "status": 503, "duration": 0.398, "bytes": 0])
    s.add(.fallback, at: 0.9, trace: preloadTrace, span: preloadRoot, placement: "promo", ["to": "defaultAudience", "reason": "server"])
    s.add(.requestStart, at: 0.9, trace: preloadTrace, span: preloadRequests[3], placement: "promo", ["kind": "default", "timeout": 4.1])
    s.add(.requestEnd, at: 1.0, trace: preloadTrace, span: preloadRequests[3], placement: "promo",
          ["kind": "default", "outcome": "client", "status": 404, "duration": 0.1, "bytes": 40])
    s.add(.preloadEnd, at: 1.0, trace: preloadTrace, span: preloadRoot, placement: nil,
          ["succeeded": ["onboarding", "settings"], "failed": ["promo": 2003], "duration": 0.5])
    s.add(.timeout, at: 4.501, trace: getFlowTrace, span: targetedRequest, placement: p,
          ["stage": "targeted", "budget": 4.5, "elapsed": 4.5])
    s.add(.requestEnd, at: 4.501, trace: getFlowTrace, span: targetedRequest, placement: p,
          ["kind": "targeted", "outcome": "timeout", "duration": 4.5, "bytes": 0])
    s.add(.fallback, at: 4.501, trace: getFlowTrace, span: getFlowRoot, placement: p, ["to": "defaultAudience", "reason": "timeout"])
    s.add(.requestStart, at: 4.502, trace: getFlowTrace, span: defaultRequest, placement: p, ["kind": "default", "timeout": 0.5])
    s.add(.requestEnd, at: 4.7, trace: getFlowTrace, span: defaultRequest, placement: p,
          ["kind": "default", "outcome": "ok", "status": 200, "duration": 0.198, "bytes": 1234])
    s.add(.cacheStored, at: 4.7, trace: getFlowTrace, span: getFlowRoot, placement: p, ["audience": "All Users", "bytes": 1234])
    s.add(.fetchEnd, at: 4.7, trace: getFlowTrace, span: getFlowRoot, placement: p,
          ["call": "getFlow", "source": "network", "variation": "v2", "audience": "All Users", "targetingLost": true,
           "duration": 4.7, "nested": ["list": [1, 2.5, "x"], "ünï": "🚀"]])
    s.add(.fetchStart, at: 5, trace: failingTrace, span: failingRoot, placement: "onboarding",
          ["call": "getFlow", "policy": "reloadRevalidatingCacheData", "loadTimeout": 5])
    s.add(.requestStart, at: 5, trace: failingTrace, span: failingRequest, placement: "onboarding", ["kind": "targeted", "timeout": 4.5])
    s.add(.requestEnd, at: 5.1, trace: failingTrace, span: failingRequest, placement: "onboarding",
          ["kind": "targeted", "outcome": "client", "status": 404, "duration": 0.1, "bytes": 40])
    s.add(.fetchEnd, at: 5.1, trace: failingTrace, span: failingRoot, placement: "onboarding",
          ["call": "getFlow", "source": "none", "targetingLost": false, "duration": 0.1, "errorCode": 2003])
    return s.events
}

/// A fresh directory under the system temp dir.
func temporaryDirectory() -> String {
    let dir = NSTemporaryDirectory() + "flowscope-otlp-\(UUID().uuidString)"
    try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    return dir
}

/// The package root, found from this file's path (plugins/otlp/Tests/<file>).
let packageRoot: String = {
    var url = URL(fileURLWithPath: #filePath)
    for _ in 0..<4 { url.deleteLastPathComponent() }
    return url.path
}()

/// A minimal HTTP/1.1 server on 127.0.0.1 that answers each request with the next scripted action
/// (then 200), and records what it received.
final class StubCollector: Sendable {
    enum Action: Sendable {
        case status(Int, retryAfter: String? = nil)
        /// Closes the connection without answering (a transport error for the client).
        case close
        /// Reads the request and never answers, keeping the connection open until `stop()`.
        case hang
    }

    struct Received: Sendable {
        var head: String
        var body: String
        var at: Double
    }

    let port: UInt16
    private let listener: Int32
    private let state: Mutex<(script: [Action], received: [Received])>
    /// Connections held open by `.hang`, closed by `stop()`.
    private let held = Mutex<[Int32]>([])

    init(script: [Action]) throws {
        state = Mutex((script, []))
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = 0
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else { close(fd); throw POSIXError(.EADDRINUSE) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        port = UInt16(bigEndian: addr.sin_port)
        listener = fd
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    var url: URL { URL(string: "http://127.0.0.1:\(port)/v1/traces")! }
    var received: [Received] { state.withLock { $0.received } }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        for fd in held.withLock({ h in defer { h.removeAll() }; return h }) { close(fd) }
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return
            }
            handle(client)
        }
    }

    private func handle(_ client: Int32) {
        var keepOpen = false
        defer { if !keepOpen { close(client) } }
        var data = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 65536)
        var headEnd: Int?
        var contentLength = 0
        while true {
            let n = read(client, &buffer, buffer.count)
            if n <= 0 { return }
            data += buffer[0..<n]
            if headEnd == nil, let r = findHeadEnd(data) {
                headEnd = r
                let head = String(decoding: data[0..<r], as: UTF8.self)
                for line in head.split(separator: "\r\n") where line.lowercased().hasPrefix("content-length:") {
                    contentLength = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) ?? 0
                }
            }
            if let headEnd, data.count >= headEnd + 4 + contentLength { break }
        }
        let end = headEnd ?? 0
        let head = String(decoding: data[0..<end], as: UTF8.self)
        let body = String(decoding: data[(end + 4)..<(end + 4 + contentLength)], as: UTF8.self)
        let action = state.withLock { s -> Action in
            s.received.append(Received(head: head, body: body, at: Date().timeIntervalSince1970))
            return s.script.isEmpty ? .status(200) : s.script.removeFirst()
        }
        switch action {
        case .close:
            return
        case .hang:
            keepOpen = true
            held.withLock { $0.append(client) }
        case .status(let code, let retryAfter):
            let payload = code == 200 ? "{}" : "{\"code\":\(code)}"
            var response = "HTTP/1.1 \(code) Scripted\r\nContent-Type: application/json\r\nContent-Length: \(payload.utf8.count)\r\nConnection: close\r\n"
            if let retryAfter { response += "Retry-After: \(retryAfter)\r\n" }
            response += "\r\n" + payload
            let bytes = Array(response.utf8)
            _ = bytes.withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
        }
    }

    private func findHeadEnd(_ data: [UInt8]) -> Int? {
        guard data.count >= 4 else { return nil }
        for i in 0...(data.count - 4) where data[i] == 13 && data[i + 1] == 10 && data[i + 2] == 13 && data[i + 3] == 10 {
            return i
        }
        return nil
    }
}
