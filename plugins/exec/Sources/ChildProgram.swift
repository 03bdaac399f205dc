import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A program started with `posix_spawn` in a clean signal state, with a pipe as its stdin.
///
/// Foundation's `Process` hands the child the signal mask of the thread that starts it and every
/// ignored signal: started from a thread with SIGTERM blocked (libdispatch's worker threads block
/// them, and so do threads they create), the program could never be terminated, and with SIGPIPE
/// ignored (as FlowScope does) it would not die writing to a closed pipe. Here the child starts
/// with no signal blocked, the usual signals at their default disposition, in a process group of
/// its own (Ctrl-C in a terminal stops FlowScope, which then ends the program in order), and with
/// every descriptor above stderr closed.
final class ChildProgram: Sendable {
    /// The program's process id; it stays reserved until the exit has been recorded.
    let processIdentifier: pid_t
    private let exit = Mutex<Exit?>(nil)

    /// How the program ended.
    enum Exit: Equatable, Sendable {
        case status(Int32)
        case signal(Int32)

        /// For logs: "exited with status 3", "was ended by signal 15".
        var description: String {
            switch self {
            case .status(let code): "exited with status \(code)"
            case .signal(let number): "was ended by signal \(number)"
            }
        }
    }

    private init(pid: pid_t) { processIdentifier = pid }

    /// Starts `executable` with `arguments` (argv[1...]), `standardInput` as its fd 0, stdout and
    /// stderr inherited. `onExit` runs once, on a thread of its own, after the program has ended.
    static func start(executable: String, arguments: [String], standardInput: Int32,
                      onExit: @escaping @Sendable (ChildProgram, Exit) -> Void) throws(SpawnError) -> ChildProgram {
        var actions = posix_spawn_file_actions_t()
        var attributes = posix_spawnattr_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawnattr_init(&attributes)
        defer {
            posix_spawn_file_actions_destroy(&actions)
            posix_spawnattr_destroy(&attributes)
        }
        posix_spawn_file_actions_adddup2(&actions, standardInput, 0)
        if let closeFrom = closeFromAction() { _ = closeFrom(&actions, 3) }

        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD, SIGALRM] {
            sigaddset(&defaults, signal)
        }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let result = argv.withUnsafeBufferPointer { argvBuffer -> Int32 in
            guard let base = argvBuffer.baseAddress else { return EINVAL }
            return posix_spawn(&pid, executable, &actions, &attributes, base, environ)
        }
        guard result == 0 else { throw SpawnError(code: result) }

        let program = ChildProgram(pid: pid)
        running.withLock { $0[ObjectIdentifier(program)] = program }
        let waiter = Thread { program.waitForExit(then: onExit) }
        waiter.name = "flowscope.exec.wait"
        waiter.start()
        return program
    }

    /// True until the program's exit has been recorded.
    var isRunning: Bool { exit.withLock { $0 == nil } }

    /// How it ended, nil while it runs.
    var ended: Exit? { exit.withLock { $0 } }

    /// Sends `signal` unless the program has already ended (its pid cannot have been reused: it
    /// is reaped only under the same lock, after the exit is recorded).
    func terminate(signal: Int32 = SIGTERM) {
        exit.withLock { if $0 == nil { _ = kill(processIdentifier, signal) } }
    }

    private func waitForExit(then onExit: @Sendable (ChildProgram, Exit) -> Void) {
        var info = siginfo_t()
        // Wait without reaping, so the pid stays ours while `terminate` may still signal it.
        while waitid(P_PID, id_t(processIdentifier), &info, WEXITED | WNOWAIT) != 0 {
            if errno != EINTR { break }
        }
        let ended: Exit
        var status: Int32 = 0
        ended = exit.withLock { exit in
            while waitpid(processIdentifier, &status, 0) < 0 && errno == EINTR {}
            let value: Exit = (status & 0x7f) == 0 ? .status((status >> 8) & 0xff) : .signal(status & 0x7f)
            exit = value
            return value
        }
        _ = Self.running.withLock { $0.removeValue(forKey: ObjectIdentifier(self)) }
        onExit(self, ended)
    }

    /// Every program started and not yet ended, in this process.
    private static let running = Mutex<[ObjectIdentifier: ChildProgram]>([:])

    /// Sends SIGTERM to every running program, waits up to `grace` seconds for them to end, then
    /// sends SIGKILL to the rest.
    static func endAll(grace: Double) {
        let programs = running.withLock { Array($0.values) }
        guard !programs.isEmpty else { return }
        for program in programs { program.terminate() }
        let deadline = DispatchTime.now() + grace
        while programs.contains(where: \.isRunning) && DispatchTime.now() < deadline { usleep(5000) }
        for program in programs where program.isRunning { program.terminate(signal: SIGKILL) }
    }
}

/// `posix_spawn` failed: the errno it returned.
struct SpawnError: Error, CustomStringConvertible {
    let code: Int32
    var description: String { String(cString: strerror(code)) }
}

/// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34+), not exported to Swift: looked up
/// at run time, skipped where the C library lacks it (every descriptor FlowScope opens is
/// close-on-exec anyway).
private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
private func closeFromAction() -> CloseFrom? {
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else { return nil }
    return unsafeBitCast(symbol, to: CloseFrom.self)
}
