import CMicroHTTPD
import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Closes TLS connections that have not sent their first request line within a deadline
/// (half the connection timeout), which libmicrohttpd 0.9.75 cannot do by itself.
///
/// Why: libmicrohttpd's idle handler stops early while a connection is inside the TLS handshake. When
/// the connection timeout expires there, it marks the connection closed (without even a `shutdown`,
/// because of `MHD_USE_TURBO`), but the step that frees it (`cleanup_connection`, reached only through
/// the state machine the handshake skips) never runs: the slot, the socket and the per-address count
/// stay taken until the daemon stops, and the worker keeps finding the connection timed out, so it
/// spins. The thread-pool, epoll and suspend/resume flags play no part; the timeout itself does fire.
///
/// What works instead: a handshake that *fails* is cleaned up normally. So before libmicrohttpd's own
/// timeout can fire, this watchdog calls `shutdown(fd, SHUT_RD)` on the server's end of a connection
/// that is still waiting for its first request: the worker reads end-of-stream, GnuTLS fails the
/// handshake, and libmicrohttpd closes and frees the connection (the client sees the close only then,
/// which is what the tests check). The deadline is half the connection timeout, so the watchdog always
/// acts well before libmicrohttpd's timeout would strand the connection.
///
/// The descriptor is touched only under the table's lock, and a connection leaves the table in
/// libmicrohttpd's CLOSED notification, which comes before libmicrohttpd closes the descriptor, so a
/// reused descriptor number is never shut down.
final class HandshakeDeadline: Sendable {
    /// How long a connection may take from accept to its first request line.
    let limit: Duration

    private struct Pending {
        var fd: Int32
        var deadline: ContinuousClock.Instant
    }

    private let pending = Mutex<[UInt: Pending]>([:])
    private let expired = Atomic<Int>(0)
    private let timer = Mutex<(any DispatchSourceTimer)?>(nil)

    /// A watchdog for `connectionTimeoutSeconds`: the deadline is half of it, checked every tenth of it
    /// (50 ms to 500 ms), so a shut-down connection is gone well before libmicrohttpd's own timeout.
    init(connectionTimeoutSeconds: Int) {
        let timeout = Duration.seconds(max(1, connectionTimeoutSeconds))
        limit = timeout / 2
        let tick = min(max(timeout / 10, .milliseconds(50)), .milliseconds(500))
        let nanos = Int(tick.components.seconds) * 1_000_000_000 + Int(tick.components.attoseconds / 1_000_000_000)
        timer.withLock { slot in
            let source = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "flowscope.server.handshake-deadline"))
            source.schedule(deadline: .now() + .nanoseconds(nanos), repeating: .nanoseconds(nanos), leeway: .milliseconds(10))
            source.setEventHandler { [weak self] in self?.sweep() }
            source.resume()
            slot = source
        }
    }

    deinit { stop() }

    /// Connections shut down by the watchdog so far.
    var expiredCount: Int { expired.load(ordering: .relaxed) }

    /// Connections waiting for their first request now.
    var waitingCount: Int { pending.withLock { $0.count } }

    /// A connection was accepted (libmicrohttpd's STARTED notification, on its worker thread).
    func started(_ connection: OpaquePointer) {
        guard let fd = ConnectionInfo.socket(of: connection) else { return }
        let deadline = ContinuousClock.now + limit
        pending.withLock { $0[UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection)))] = Pending(fd: fd, deadline: deadline) }
    }

    /// A request line arrived on the connection: its handshake is done.
    func requestArrived(_ connection: OpaquePointer) {
        let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection)))
        pending.withLock { table in
            if !table.isEmpty { table.removeValue(forKey: key) }
        }
    }

    /// The connection is closing; libmicrohttpd closes its descriptor after this returns.
    func closed(_ connection: OpaquePointer) {
        requestArrived(connection)
    }

    /// Stops the timer. Idempotent.
    func stop() {
        timer.withLock { slot in
            slot?.cancel()
            slot = nil
        }
    }

    private func sweep() {
        let now = ContinuousClock.now
        pending.withLock { table in
            guard !table.isEmpty else { return }
            var late: [UInt] = []
            for (key, entry) in table where entry.deadline <= now {
                // Still under the lock: the CLOSED notification, which precedes close(fd), waits for it.
                shutdown(entry.fd, Int32(SHUT_RD))
                late.append(key)
            }
            for key in late { table.removeValue(forKey: key) }
            if !late.isEmpty { expired.add(late.count, ordering: .relaxed) }
        }
    }
}

/// `MHD_get_connection_info` for the values that read no variadic argument.
///
/// That function is C-variadic, which Swift cannot call directly. For the info types used here it
/// reads no variadic argument, so it is called through a non-variadic pointer of the same fixed
/// parameters: the fixed arguments are passed identically on the SysV x86-64 and AAPCS64 ABIs.
enum ConnectionInfo {
    private typealias Info = @convention(c) (OpaquePointer?, UInt32) -> UnsafeRawPointer?
    private static let function: Info? = {
        guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "MHD_get_connection_info") else { return nil }
        return unsafeBitCast(symbol, to: Info.self)
    }()

    /// The union MHD_ConnectionInfo for `type`, or nil.
    static func raw(_ connection: OpaquePointer, _ type: MHD_ConnectionInfoType) -> UnsafeRawPointer? {
        function?(connection, type.rawValue)
    }

    /// The connection's socket descriptor.
    static func socket(of connection: OpaquePointer) -> Int32? {
        raw(connection, .CONNECTION_INFO_CONNECTION_FD).map { $0.load(as: Int32.self) }
    }
}
