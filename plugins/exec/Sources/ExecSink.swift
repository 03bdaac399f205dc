import Dispatch
import FlowEvents
import FlowJSON
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Feeds events to an external program as JSON Lines on its standard input.
///
/// The program (`command`, an argv array) is started once and receives
/// `{"type":"hello","protocol":1,"version":"..."}` and then one envelope per line
/// (events-and-metrics.md). If it exits, it is started again after a backoff that begins at
/// `backoffInitial` and doubles up to `backoffMax` (reset once a program has run for 10 s); each
/// new program gets its own hello line first.
///
/// Nothing waits for the program: `consume` only appends lines to a bounded in-memory buffer
/// (`bufferBytes`), and a feeder thread of the sink writes it to the pipe with non-blocking
/// writes. A line that does not fit in the buffer is lost and counted (`lost`); so is a line
/// half-written when the program died, and what is still buffered at `close()`. SIGPIPE is
/// ignored process-wide so that a program that goes away cannot kill FlowScope.
public final class ExecSink: EventSink {
    /// The type name in the config's `sinks` list.
    public static let type = "exec"

    /// The sink's name in metrics and logs.
    public let name: String
    /// The program and its arguments.
    public let command: [String]
    /// The buffer's bound in bytes.
    public let bufferBytes: Int
    /// How long `flush()` waits for the buffer to reach the program, seconds.
    public let flushTimeout: Double

    private let state: Mutex<FeedState>
    private let wake = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)
    private let hello: [UInt8]
    private let backoffInitial: Double
    private let backoffMax: Double

    /// Creates the sink and starts its feeder thread, which starts the program.
    /// - Parameters:
    ///   - command: argv; the first element is a path or a name looked up in PATH.
    ///   - version: FlowScope's version, sent in the hello line.
    public init(name: String = "exec", command: [String], version: String, bufferBytes: Int = 1 << 20,
                backoffInitial: Double = 0.1, backoffMax: Double = 10, flushTimeout: Double = 2) {
        signal(SIGPIPE, SIG_IGN)
        self.name = name
        self.command = command
        self.bufferBytes = max(1, bufferBytes)
        self.backoffInitial = max(0.001, backoffInitial)
        self.backoffMax = max(backoffInitial, backoffMax)
        self.flushTimeout = max(0, flushTimeout)
        var line = "{\"type\":\"hello\",\"protocol\":1,\"version\":"
        JSONWriter.writeString(version, to: &line)
        line += "}\n"
        self.hello = Array(line.utf8)
        self.state = Mutex(FeedState(backoff: max(0.001, backoffInitial)))
        let thread = Thread { [self] in feed() }
        thread.name = "flowscope.exec.\(name)"
        thread.start()
    }

    /// Ends the programs of every exec sink in this process at once, for a process about to exit
    /// without closing its sinks (a second Ctrl-C, a stop past its timeout): SIGTERM, up to `grace`
    /// seconds for them to end, then SIGKILL. A program that outlived FlowScope would otherwise
    /// keep running as long as it ignores end of file.
    public static func endAllPrograms(grace: Double = 0.5) {
        ChildProgram.endAll(grace: grace)
    }

    // MARK: Counters

    /// Envelopes that never reached a program (buffer full, program died mid-line, left at close).
    public var lost: UInt64 { state.withLock { $0.lost } }
    /// Envelopes written whole to a program's stdin.
    public var written: UInt64 { state.withLock { $0.written } }
    /// Programs started (the first and every restart).
    public var starts: Int { state.withLock { $0.starts } }
    /// Failed starts (program not found, not executable).
    public var startFailures: Int { state.withLock { $0.startFailures } }
    /// The last start failure or exit, for logs.
    public var lastError: String? { state.withLock { $0.lastError } }
    /// The running program's process id, nil while none runs.
    public var pid: Int32? { state.withLock { $0.process.map { $0.processIdentifier } } }
    /// Bytes waiting in the buffer.
    public var bufferedBytes: Int { state.withLock { $0.bytes } }

    /// `exec`.
    public var type: String { Self.type }
    /// Durable: ingest is accepted only while this sink's queue has room (``EventSink/isDurable``).
    public var isDurable: Bool { true }

    /// Up while a program runs (or before the first has been started); errors count failed
    /// starts and restarts after an exit; dropped counts lost envelopes.
    public var health: SinkHealth {
        state.withLock { s in
            SinkHealth(up: s.process != nil || (s.starts == 0 && s.startFailures == 0),
                       errors: UInt64(s.startFailures + max(0, s.starts - 1)), lastError: s.lastError, dropped: s.lost)
        }
    }

    // MARK: EventSink

    /// Appends the batch's lines to the buffer; lines that do not fit are lost. Never waits.
    public func consume(_ batch: [Envelope]) {
        var line = ""
        line.reserveCapacity(512)
        let added = state.withLock { state -> Bool in
            guard !state.closing else { state.lost += UInt64(batch.count); return false }
            for envelope in batch {
                line.removeAll(keepingCapacity: true)
                envelope.appendJSON(to: &line)
                line += "\n"
                let size = line.utf8.count
                if state.bytes + size > bufferBytes {
                    state.lost += 1
                } else {
                    state.lines.append(Array(line.utf8))
                    state.bytes += size
                }
            }
            return true
        }
        if added { wake.signal() }
    }

    /// Waits up to `flushTimeout` for the buffer to reach the program.
    public func flush() {
        let deadline = now() + flushTimeout
        while state.withLock({ $0.bytes > 0 || $0.helloOffset < ($0.fd >= 0 ? hello.count : 0) }) && now() < deadline {
            wake.signal()
            usleep(2000)
        }
    }

    /// Flushes, closes the program's stdin (it sees end of file), waits up to 2 s for it to exit,
    /// then sends SIGTERM (and SIGKILL 2 s later). What is still buffered is counted as lost.
    /// Idempotent.
    public func close() {
        flush()
        let first = state.withLock { state -> Bool in
            defer { state.closing = true }
            return !state.closing
        }
        if first { wake.signal() }
        finished.wait()
        finished.signal()
    }

    // MARK: Feeder thread

    private enum Step { case start, waitWritable(Int32), idle(Double), stop }

    private func feed() {
        while true {
            let step = state.withLock { state -> Step in
                if state.closing { return .stop }
                guard state.fd >= 0 else {
                    if state.process != nil { return .idle(0.05) }  // exiting; its handler will clear it
                    let wait = state.nextStart - now()
                    return wait <= 0 ? .start : .idle(min(wait, 0.5))
                }
                return writeAvailable(&state)
            }
            switch step {
            case .stop:
                stopProgram()
                finished.signal()
                return
            case .start:
                startProgram()
            case .waitWritable(let fd):
                var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                _ = poll(&pfd, 1, 50)
            case .idle(let seconds):
                _ = wake.wait(timeout: .now() + seconds)
            }
        }
    }

    /// Writes hello and buffered lines until the pipe is full or the buffer empty.
    private func writeAvailable(_ state: inout FeedState) -> Step {
        let fd = state.fd
        while state.helloOffset < hello.count {
            switch write(fd, hello, from: state.helloOffset) {
            case .wrote(let n): state.helloOffset += n
            case .full: return .waitWritable(fd)
            case .broken(let message): programGone(&state, message); return .idle(0)
            }
        }
        while state.head < state.lines.count {
            let line = state.lines[state.head]
            switch write(fd, line, from: state.lineOffset) {
            case .wrote(let n):
                state.lineOffset += n
                if state.lineOffset == line.count {
                    state.bytes -= line.count
                    state.written += 1
                    state.lines[state.head] = []
                    state.head += 1
                    state.lineOffset = 0
                }
            case .full: state.compact(); return .waitWritable(fd)
            case .broken(let message): programGone(&state, message); return .idle(0)
            }
        }
        state.compact()
        return .idle(0.5)
    }

    private enum WriteResult { case wrote(Int), full, broken(String) }

    private func write(_ fd: Int32, _ bytes: [UInt8], from offset: Int) -> WriteResult {
        bytes.withUnsafeBytes { raw in
            guard let base = raw.baseAddress else { return .wrote(0) }
            while true {
                let n = systemWrite(fd, base + offset, raw.count - offset)
                if n >= 0 { return .wrote(n) }
                let e = errno
                if e == EINTR { continue }
                if e == EAGAIN || e == EWOULDBLOCK { return .full }
                return .broken("write: \(String(cString: strerror(e)))")
            }
        }
    }

    /// The pipe broke: drop a half-written line, close our end, end the program if it lingers.
    private func programGone(_ state: inout FeedState, _ message: String) {
        state.lastError = message
        state.dropPartialLine()
        systemClose(state.fd)
        state.fd = -1
        if let process = state.process, process.isRunning { process.terminate() }
    }

    private func startProgram() {
        guard let executable = resolve(command[0]) else {
            state.withLock { state in
                state.startFailures += 1
                state.lastError = "\(command[0]): not found in PATH"
                scheduleRestart(&state)
            }
            return
        }
        // Our own pipe, both ends close-on-exec from the start, so that no other child started
        // meanwhile (by another sink or thread) inherits the write end and keeps the program from
        // ever seeing end of file. The child gets the read end as its stdin through dup2.
        var fds: [Int32] = [-1, -1]
        guard makePipe(&fds) else {
            state.withLock { state in
                state.startFailures += 1
                state.lastError = "cannot create a pipe: \(String(cString: strerror(errno)))"
                scheduleRestart(&state)
            }
            return
        }
        let readFD = fds[0]
        let writeFD = fds[1]
        _ = fcntl(writeFD, F_SETFL, fcntl(writeFD, F_GETFL) | O_NONBLOCK)
        let started = now()
        let process: ChildProgram
        do {
            process = try ChildProgram.start(executable: executable, arguments: Array(command.dropFirst()),
                                             standardInput: readFD) { [weak self] ended, exit in
                self?.programExited(ended, exit)
            }
        } catch {
            systemClose(writeFD)
            systemClose(readFD)
            state.withLock { state in
                state.startFailures += 1
                state.lastError = "\(executable): \(error)"
                scheduleRestart(&state)
            }
            return
        }
        systemClose(readFD)
        let ownFD = writeFD
        state.withLock { state in
            state.process = process
            state.fd = ownFD
            state.helloOffset = 0
            state.lineOffset = 0
            state.startedAt = started
            state.starts += 1
        }
    }

    private func programExited(_ process: ChildProgram, _ exit: ChildProgram.Exit) {
        state.withLock { state in
            guard state.process === process else { return }
            state.lastError = "\(command[0]) \(exit.description)"
            if state.fd >= 0 {
                state.dropPartialLine()
                systemClose(state.fd)
                state.fd = -1
            }
            state.process = nil
            if now() - state.startedAt >= 10 { state.backoff = backoffInitial }
            scheduleRestart(&state)
        }
        wake.signal()
    }

    private func scheduleRestart(_ state: inout FeedState) {
        state.nextStart = now() + state.backoff
        state.backoff = min(backoffMax, state.backoff * 2)
    }

    /// End of file for the program, 2 s of grace, then SIGTERM, and SIGKILL 2 s later; the rest
    /// of the buffer is lost.
    private func stopProgram() {
        let process = state.withLock { state -> ChildProgram? in
            if state.fd >= 0 {
                state.dropPartialLine()
                systemClose(state.fd)
                state.fd = -1
            }
            state.lost += UInt64(state.lines.count - state.head)
            state.lines = []; state.head = 0; state.bytes = 0
            return state.process
        }
        guard let process else { return }
        var deadline = now() + 2
        while process.isRunning && now() < deadline { usleep(5000) }
        guard process.isRunning else { return }
        process.terminate()
        deadline = now() + 2
        while process.isRunning && now() < deadline { usleep(5000) }
        if process.isRunning { process.terminate(signal: SIGKILL) }
    }

    /// A path as given (a failed start says why); a name, looked up in `PATH` as `check-config` does.
    private func resolve(_ program: String) -> String? {
        program.contains("/") ? program : SinkRequirements.resolve(program: program)
    }

    private func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
}

/// The feeder's state: the line buffer and the current program.
private struct FeedState: ~Copyable {
    var lines: [[UInt8]] = []
    var head = 0
    var lineOffset = 0
    var bytes = 0
    var helloOffset = 0
    var fd: Int32 = -1
    var process: ChildProgram?
    var startedAt = 0.0
    var nextStart = 0.0
    var backoff: Double
    var closing = false
    var lost: UInt64 = 0
    var written: UInt64 = 0
    var starts = 0
    var startFailures = 0
    var lastError: String?

    init(backoff: Double) { self.backoff = backoff }

    /// A line half-written to a program that went away cannot be finished: it is lost.
    mutating func dropPartialLine() {
        if lineOffset > 0, head < lines.count {
            bytes -= lines[head].count
            lines[head] = []
            head += 1
            lost += 1
        }
        lineOffset = 0
    }

    mutating func compact() {
        if head > 0 && head == lines.count { lines.removeAll(keepingCapacity: true); head = 0 }
        else if head > 1024 && head * 2 > lines.count { lines.removeFirst(head); head = 0 }
    }
}

private func makePipe(_ fds: inout [Int32]) -> Bool {
    fds.withUnsafeMutableBufferPointer { buffer -> Bool in
        guard let base = buffer.baseAddress else { return false }
        // pipe2(O_CLOEXEC) is not exported to Swift on Linux: pipe + fcntl, under a lock that
        // every exec sink's pipe creation shares, leaves no window for our own spawns.
        return pipeCreation.withLock { _ -> Bool in
            guard pipe(base) == 0 else { return false }
            _ = fcntl(base[0], F_SETFD, FD_CLOEXEC)
            _ = fcntl(base[1], F_SETFD, FD_CLOEXEC)
            return true
        }
    }
}

private let pipeCreation = Mutex(())

private func systemWrite(_ fd: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int { write(fd, bytes, count) }
private func systemClose(_ fd: Int32) { _ = close(fd) }

extension ExecSink {
    /// The `exec` sink type. Options: `command` (argv array, required), `bufferBytes` (default
    /// 1048576), `backoffInitial` (s, default 0.1), `backoffMax` (s, default 10), `flushTimeout`
    /// (s, default 2).
    public struct Factory: SinkFactory {
        /// The options of an `exec` entry.
        public struct Options: Sendable, Equatable {
            public var command: [String]
            public var bufferBytes = 1 << 20
            public var backoffInitial = 0.1
            public var backoffMax = 10.0
            public var flushTimeout = 2.0
        }

        /// `exec`.
        public let type = ExecSink.type

        /// The factory.
        public init() {}

        /// Reads the options; starts nothing.
        public func options(from context: SinkContext) throws(JSONInputError) -> Options {
            try context.checkKeys(["command", "bufferBytes", "backoffInitial", "backoffMax", "flushTimeout"])
            guard let command = try context.strings("command", nonEmpty: true) else {
                throw context.missing("command", "an argv array such as [\"python3\", \"summary.py\"]")
            }
            if command[0].isEmpty { throw JSONInputError(path: context.path(of: "command") + "[0]", message: "expected a program, got \"\"") }
            var o = Options(command: command)
            o.bufferBytes = try context.int("bufferBytes", in: 1...Int.max) ?? o.bufferBytes
            o.backoffInitial = try context.number("backoffInitial", in: 0.001...3600) ?? o.backoffInitial
            o.backoffMax = try context.number("backoffMax", in: 0.001...86400) ?? o.backoffMax
            o.flushTimeout = try context.number("flushTimeout", in: 0...3600) ?? o.flushTimeout
            return o
        }

        /// The program: `command[0]`, a path or a name found in `PATH`.
        public func requirements(_ o: Options, context: SinkContext) -> SinkRequirements {
            SinkRequirements(programs: [.init(option: "command[0]", program: o.command[0])])
        }

        /// Starts the sink's feeder thread, which starts the program.
        public func makeSink(_ o: Options, context: SinkContext) -> any EventSink {
            ExecSink(name: context.name, command: o.command, version: context.version, bufferBytes: o.bufferBytes,
                     backoffInitial: o.backoffInitial, backoffMax: o.backoffMax, flushTimeout: o.flushTimeout)
        }
    }
}
