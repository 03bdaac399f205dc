import Foundation
import Synchronization

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif

// Every call FlowEvents makes into the C library is in this file: POSIX signals, a pipe and a
// signal mask, spelled the same on Linux and Apple platforms. Tests/PackageGraphTests/
// PlatformCallTests.swift lists them and fails on a call into the C library anywhere else.

/// The write end of the self-pipe, read by the C signal handler (an atomic load and a write(2)
/// are async-signal-safe).
private let relayPipe = Atomic<Int32>(-1)

/// Runs Swift closures when signals arrive: the C handler writes the signal number to a pipe and
/// a dedicated thread reads it and runs the closures registered for that signal, in order.
/// (A self-pipe rather than Dispatch signal sources: on Linux those only see a signal when every
/// thread blocks it.) Closures must return quickly: the next signal waits for them.
public enum SignalRelay {
    private static let handlers = Mutex<[Int32: [@Sendable () -> Void]]>([:])

    /// The relay thread's name as the OS shows it (`/proc/PID/task/TID/comm`, debuggers): at most
    /// 15 bytes, Linux's limit.
    public static let threadName = "flowscope-sig"

    /// Registers `action` for each of `signals` and installs the C handler for them.
    public static func install(_ signals: [Int32], _ action: @escaping @Sendable () -> Void) {
        handlers.withLock { handlers in
            for signalNumber in signals { handlers[signalNumber, default: []].append(action) }
            guard relayPipe.load(ordering: .acquiring) < 0 else { return }
            var fds: [Int32] = [-1, -1]
            guard pipe(&fds) == 0 else { return }
            _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
            _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
            relayPipe.store(fds[1], ordering: .releasing)
            let readEnd = fds[0]
            let thread = Thread { relay(from: readEnd) }
            thread.start()
        }
        for signalNumber in signals {
            _ = signal(signalNumber) { received in
                let fd = relayPipe.load(ordering: .relaxed)
                guard fd >= 0 else { return }
                var byte = UInt8(truncatingIfNeeded: received)
                _ = write(fd, &byte, 1)
            }
        }
    }

    /// The relay thread's loop. It first names itself and clears its signal mask: a thread starts
    /// with the mask of the thread that made it (Dispatch's worker threads block SIGINT and SIGTERM,
    /// and so would every thread they make), and a signal that every thread blocks stays pending
    /// for ever. With an empty mask this thread can always take the signals it relays.
    private static func relay(from fd: Int32) {
        #if canImport(Darwin)
        _ = pthread_setname_np(threadName)
        #else
        // Glibc's pthread_setname_np is not visible to Swift; Linux names a thread through this file.
        try? threadName.write(toFile: "/proc/thread-self/comm", atomically: false, encoding: .utf8)
        #endif
        var mask = sigset_t()
        sigemptyset(&mask)
        pthread_sigmask(SIG_SETMASK, &mask, nil)
        var byte: UInt8 = 0
        while true {
            let n = read(fd, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            guard n == 1 else { return }
            let actions = handlers.withLock { $0[Int32(byte)] ?? [] }
            for action in actions { action() }
        }
    }
}
