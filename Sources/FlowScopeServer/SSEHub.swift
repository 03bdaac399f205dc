import CMicroHTTPD
import Dispatch
import Synchronization

/// Fans published events out to Server-Sent Events clients.
///
/// Each message is written as `id: <seq>\ndata: <json>\n\n`. A client that reconnects with
/// `Last-Event-ID: N` first receives `replay(N)` (the messages after N, oldest first), then live ones,
/// without duplicates; when the replay is larger than half the client buffer, only its newest
/// messages are sent (so a client far behind catches up instead of being dropped in a loop). Every `heartbeatInterval` each client gets a `: ping` comment, which keeps
/// proxies and the server's idle timeout from closing quiet streams. A client whose unsent bytes
/// exceed `maxBufferedBytes` is disconnected (it can reconnect and resume) instead of growing memory.
/// Every connection starts with `event: hello` and `data: {"epoch":"<hub epoch>"}`: the epoch is new
/// for every hub (every server start), so a client that resumes with an id of an earlier server start
/// (whose seq began again at 1) learns that it must load again instead of waiting for ids it has seen.
///
/// ```swift
/// let hub = SSEHub(replay: { after in memory.events(after: after).map { ($0.seq, $0.jsonLine) } })
/// router.get("/api/events/stream") { _ in .eventStream(hub) }
/// hub.publish(id: envelope.seq, data: envelope.jsonLine)
/// ```
public final class SSEHub: Sendable {
    /// Messages after an id, oldest first, for clients that resume with `Last-Event-ID`.
    public typealias Replay = @Sendable (UInt64) -> [(UInt64, String)]

    /// How often idle streams get a `: ping` comment.
    public let heartbeatInterval: Duration
    /// Most unsent bytes kept per client before it is dropped.
    public let maxBufferedBytes: Int
    /// This hub's epoch: 16 random hex digits, new for every hub. Sent first on every stream and with
    /// `GET /api/events` answers; another epoch means the seq numbering started again.
    public let epoch: String
    private let replay: Replay

    private struct State {
        var streams: [ObjectIdentifier: SSEStream] = [:]
        var heartbeat: (any DispatchSourceTimer)?
        var dropped: Int = 0
    }
    private let state = Mutex(State())

    /// A hub; `replay` answers `Last-Event-ID` (by default nothing is replayed). `epoch` is the
    /// hub's epoch when given (the server passes the one its sqlite sink writes with each row), else
    /// 16 random hex digits.
    public init(heartbeatInterval: Duration = .seconds(15), maxBufferedBytes: Int = 1 << 20, epoch: String? = nil,
                replay: @escaping Replay = { _ in [] }) {
        self.heartbeatInterval = heartbeatInterval
        self.maxBufferedBytes = max(maxBufferedBytes, 1024)
        self.replay = replay
        if let epoch {
            self.epoch = epoch
        } else {
            let random = UInt64.random(in: 0...UInt64.max)
            let digits = String(random, radix: 16)
            self.epoch = String(repeating: "0", count: 16 - digits.count) + digits
        }
    }

    deinit {
        state.withLock { $0.heartbeat?.cancel() }
    }

    /// Sends one message to every connected client. `data` should be one line (compact JSON);
    /// embedded newlines are sent as several `data:` lines, as the protocol requires.
    public func publish(id: UInt64, data: String) {
        let streams = state.withLock { Array($0.streams.values) }
        guard !streams.isEmpty else { return }
        let frame = Self.frame(id: id, data: data)
        for stream in streams { stream.deliver(id: id, frame: frame) }
    }

    /// Clients connected now.
    public var clientCount: Int { state.withLock { $0.streams.count } }

    /// Clients disconnected so far for falling behind.
    public var droppedClients: Int { state.withLock { $0.dropped } }

    /// Ends every stream cleanly (the final chunk is sent, then the connection is free again).
    public func closeAll() {
        for stream in state.withLock({ Array($0.streams.values) }) { stream.close(dropped: false) }
    }

    /// The wire form of one message.
    static func frame(id: UInt64, data: String) -> [UInt8] {
        var text = "id: \(id)\n"
        for line in data.split(separator: "\n", omittingEmptySubsequences: false) {
            text += "data: "
            text += line.hasSuffix("\r") ? line.dropLast() : line
            text += "\n"
        }
        text += "\n"
        return Array(text.utf8)
    }

    /// Registers a stream for `connection`, replaying after `lastEventID` when given.
    func subscribe(connection: ConnectionRef, lastEventID: UInt64?, onFinish: @escaping @Sendable (SSEStream) -> Void) -> SSEStream {
        let stream = SSEStream(connection: connection, hub: self, maxBufferedBytes: maxBufferedBytes,
                               replaying: lastEventID != nil, onFinish: onFinish)
        stream.enqueue(Array("retry: 2000\n: connected\nevent: hello\ndata: {\"epoch\":\"\(epoch)\"}\n\n".utf8))
        state.withLock { state in
            state.streams[ObjectIdentifier(stream)] = stream
            if state.heartbeat == nil { state.heartbeat = startHeartbeat() }
        }
        if let lastEventID {
            let items = replay(lastEventID).filter { $0.0 > lastEventID }.sorted { $0.0 < $1.0 }
            var frames: [(UInt64, [UInt8])] = []
            var bytes = 0
            for (id, data) in items.reversed() {
                let frame = Self.frame(id: id, data: data)
                bytes += frame.count
                if bytes > maxBufferedBytes / 2 { break }
                frames.append((id, frame))
            }
            stream.finishReplay(frames.reversed())
        }
        return stream
    }

    func remove(_ stream: SSEStream, dropped: Bool) {
        state.withLock { state in
            if state.streams.removeValue(forKey: ObjectIdentifier(stream)) != nil, dropped { state.dropped += 1 }
        }
    }

    private func startHeartbeat() -> any DispatchSourceTimer {
        let timer = DispatchSource.makeTimerSource(queue: .global(qos: .utility))
        let interval = DispatchTimeInterval.nanoseconds(Int(heartbeatInterval.components.seconds) * 1_000_000_000
            + Int(heartbeatInterval.components.attoseconds / 1_000_000_000))
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [weak self] in self?.beat() }
        timer.resume()
        return timer
    }

    private func beat() {
        let streams = state.withLock { state -> [SSEStream] in
            if state.streams.isEmpty {
                state.heartbeat?.cancel()
                state.heartbeat = nil
            }
            return Array(state.streams.values)
        }
        let ping = Array(": ping\n\n".utf8)
        for stream in streams { stream.enqueue(ping) }
    }
}

/// `struct MHD_Connection *` handed to publisher threads.
// Safe to share unchecked: it holds only that C pointer, which stays valid until the response's free
// callback runs (which marks the stream finished under its lock before the connection can go away),
// and MHD_resume_connection may be called from any thread.
struct ConnectionRef: @unchecked Sendable {
    let raw: OpaquePointer
}

/// One client's stream: a bounded byte queue drained by libmicrohttpd's content-reader callback.
///
/// When the queue is empty the reader suspends the connection (returning 0 without suspending would
/// busy-loop the polling thread); `enqueue` resumes it.
final class SSEStream: Sendable {
    private struct State {
        var connection: ConnectionRef?
        var pending: [UInt8] = []
        var offset = 0
        var suspended = false
        var closed = false
        var dropped = false
        var replaying: Bool
        var held: [(UInt64, [UInt8])] = []
        var heldBytes = 0
        var lastID: UInt64?
        var finished = false
    }
    private let state: Mutex<State>
    private let hub: SSEHub
    private let maxBufferedBytes: Int
    private let onFinish: @Sendable (SSEStream) -> Void

    init(connection: ConnectionRef, hub: SSEHub, maxBufferedBytes: Int, replaying: Bool,
         onFinish: @escaping @Sendable (SSEStream) -> Void) {
        state = Mutex(State(connection: connection, replaying: replaying))
        self.hub = hub
        self.maxBufferedBytes = maxBufferedBytes
        self.onFinish = onFinish
    }

    /// Bytes waiting to be sent.
    var bufferedBytes: Int { state.withLock { $0.pending.count - $0.offset } }

    /// A live message: held while the replay is pending, skipped when already sent.
    func deliver(id: UInt64, frame: [UInt8]) {
        let shouldDrop = state.withLock { s -> Bool in
            guard !s.closed else { return false }
            if s.replaying {
                s.held.append((id, frame))
                s.heldBytes += frame.count
                return s.heldBytes > maxBufferedBytes
            }
            if let last = s.lastID, id <= last { return false }
            s.lastID = id
            return !append(frame, to: &s)
        }
        if shouldDrop { close(dropped: true) }
    }

    /// Writes the replayed messages, then the live ones that arrived meanwhile.
    func finishReplay(_ items: [(UInt64, [UInt8])]) {
        let shouldDrop = state.withLock { s -> Bool in
            guard !s.closed else { return false }
            s.replaying = false
            let held = s.held
            s.held = []
            s.heldBytes = 0
            for (id, frame) in items + held {
                if let last = s.lastID, id <= last { continue }
                s.lastID = id
                if !append(frame, to: &s) { return true }
            }
            return false
        }
        if shouldDrop { close(dropped: true) }
    }

    /// Raw bytes (comments, heartbeats).
    func enqueue(_ bytes: [UInt8]) {
        let ok = state.withLock { s -> Bool in
            guard !s.closed else { return true }
            return append(bytes, to: &s)
        }
        if !ok { close(dropped: true) }
    }

    /// Appends and wakes the connection; false when the client is too far behind.
    private func append(_ bytes: [UInt8], to s: inout State) -> Bool {
        guard s.pending.count - s.offset + bytes.count <= maxBufferedBytes else { return false }
        s.pending += bytes
        wake(&s)
        return true
    }

    /// Resumes the connection if the reader suspended it. Called under the lock so the connection
    /// cannot be finished (and freed) between the check and the call.
    private func wake(_ s: inout State) {
        if s.suspended, let connection = s.connection {
            s.suspended = false
            MHD_resume_connection(connection.raw)
        }
    }

    /// Ends the stream: cleanly (final chunk) or, for a dropped client, by closing the connection.
    func close(dropped: Bool) {
        state.withLock { s in
            guard !s.closed else { return }
            s.closed = true
            s.dropped = dropped
            if dropped {
                s.pending = []
                s.offset = 0
            }
            wake(&s)
        }
        hub.remove(self, dropped: dropped)
    }

    /// The content-reader callback: copy queued bytes, or end, or suspend until there are some.
    func read(into buffer: UnsafeMutablePointer<CChar>, max: Int) -> Int {
        state.withLock { s in
            let available = s.pending.count - s.offset
            if available > 0 {
                let n = min(max, available)
                s.pending.withUnsafeBytes { bytes in
                    UnsafeMutableRawPointer(buffer).copyMemory(from: bytes.baseAddress! + s.offset, byteCount: n)
                }
                s.offset += n
                if s.offset == s.pending.count {
                    s.pending.removeAll(keepingCapacity: s.pending.capacity <= 65_536)
                    s.offset = 0
                } else if s.offset > 65_536 && s.offset * 2 > s.pending.count {
                    s.pending.removeFirst(s.offset)
                    s.offset = 0
                }
                return n
            }
            if s.closed { return s.dropped ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM }
            guard let connection = s.connection else { return MHD_CONTENT_READER_END_WITH_ERROR }
            s.suspended = true
            MHD_suspend_connection(connection.raw)
            return 0
        }
    }

    /// The response's free callback: the connection is gone.
    func finished() {
        let first = state.withLock { s -> Bool in
            guard !s.finished else { return false }
            s.finished = true
            s.closed = true
            s.connection = nil
            s.pending = []
            return true
        }
        guard first else { return }
        hub.remove(self, dropped: false)
        onFinish(self)
    }
}
