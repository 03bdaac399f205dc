import Dispatch
import ExecSink
import FlowEvents
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// How every long-running command (`serve`, `replay --serve`, `stub-backend`) stops.
///
/// The first SIGINT or SIGTERM starts a graceful stop: the command stops serving, drains and
/// flushes, and exits 0, within a bound (`server.shutdownTimeout`), saying on stderr what it waits
/// for once that takes over a second. A second signal exits at once with status 130. Either way out
/// that skips the stop (the second signal, the timeout) first ends the exec sinks' programs
/// (`ExecSink.endAllPrograms`), which would otherwise outlive it. Signals are
/// read by `SignalRelay`'s thread and the stop runs on another, so a stop that blocks threads cannot
/// hold the second signal up.
enum StopSignals {
    private struct State {
        var installed = false
        var received = 0
        var waiter: CheckedContinuation<Void, Never>?
        var label = "flowscope"
    }
    private static let state = Mutex(State())

    /// Takes over SIGINT and SIGTERM for the rest of the process. `label` starts the lines printed
    /// (`flowscope serve`). Call before the server starts: a signal that arrives while it starts is
    /// kept, and `first()` then returns at once, so the server stops as soon as it is up.
    static func install(label: String) {
        let install = state.withLock { s -> Bool in
            s.label = label
            defer { s.installed = true }
            return !s.installed
        }
        guard install else { return }
        SignalRelay.install([SIGINT, SIGTERM]) { received() }
    }

    /// Returns once the first SIGINT or SIGTERM has arrived (at once if it already has).
    static func first() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            // The waiter is stored or resumed here, and taken out under the lock by `received`:
            // each continuation is resumed exactly once, however many signals arrive.
            let already = state.withLock { s -> Bool in
                if s.received > 0 { return true }
                s.waiter = continuation
                return false
            }
            if already { continuation.resume() }
        }
    }

    private static func received() {
        let (count, waiter, label) = state.withLock { s in
            s.received += 1
            defer { s.waiter = nil }
            return (s.received, s.waiter, s.label)
        }
        if count == 1 {
            waiter?.resume()
        } else {
            writeAll(2, "\(label): second signal: exiting now, without waiting for the stop to finish\n")
            ExecSink.endAllPrograms()
            _exit(130)
        }
    }

    /// Runs `stop` on a thread of its own and waits for it, at most `timeout` seconds. After a second,
    /// prints on stderr each second how long it has waited and, with `sinks`, which sinks it waits
    /// for; past `timeout` it says so, names what is given up, and exits with status 1 (what was not
    /// yet drained is lost). Returns when `stop` has finished.
    static func stop(label: String, timeout: Double, what: String = "draining sinks",
                     sinks: (@Sendable () -> [SinkDrain])? = nil, _ stop: @escaping @Sendable () -> Void) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let finished = DispatchSemaphore(value: 0)
            let worker = Thread {
                stop()
                finished.signal()
            }
            worker.name = "flowscope.stop"
            worker.start()
            let watcher = Thread {
                let start = ContinuousClock.now
                var reported = 0
                while finished.wait(timeout: .now() + .milliseconds(100)) == .timedOut {
                    let elapsed = ContinuousClock.now - start
                    if elapsed >= .seconds(timeout) {
                        let givenUp = sinks.map { "; given up: " + abandoned($0()) } ?? ""
                        writeAll(2, "\(label): still \(what) after \(seconds(timeout)) s (server.shutdownTimeout): exiting without waiting further\(givenUp)\n")
                        ExecSink.endAllPrograms()
                        _exit(ExitStatus.failure)
                    }
                    let whole = Int(elapsed.components.seconds)
                    if whole >= 1 && whole > reported {
                        reported = whole
                        let waiting = sinks.map { "; waiting for " + waitingFor($0()) } ?? ""
                        writeAll(2, "\(label): stopping: \(what), \(whole) s of at most \(seconds(timeout)) s\(waiting) (a second Ctrl-C exits now)\n")
                    }
                }
                continuation.resume()
            }
            watcher.name = "flowscope.stop-watch"
            watcher.start()
        }
    }

    /// The sinks a stop waits for: `otlp (flushing), sqlite (1,200 events queued, 500 being written)`.
    static func waitingFor(_ drains: [SinkDrain]) -> String {
        guard !drains.isEmpty else { return "the server to close" }
        return drains.map { d in
            var parts: [String] = []
            if d.queued > 0 { parts.append("\(grouped(d.queued)) events queued") }
            if d.inFlight > 0 { parts.append("\(grouped(d.inFlight)) being written") }
            return "\(d.sink) (\(parts.isEmpty ? "flushing" : parts.joined(separator: ", ")))"
        }.joined(separator: ", ")
    }

    /// What a stop cut at its timeout gives up: each unfinished sink, and the events not written.
    static func abandoned(_ drains: [SinkDrain]) -> String {
        guard !drains.isEmpty else { return "nothing (every sink had finished)" }
        let events = drains.reduce(0) { $0 + $1.queued + $1.inFlight }
        return waitingFor(drains) + "; \(grouped(events)) events not written"
            + (drains.contains { $0.queued + $0.inFlight == 0 } ? ", and what the flushing sinks still held" : "")
    }

    private static func grouped(_ n: Int) -> String {
        var digits = String(n), out = ""
        while digits.count > 3 { out = "," + digits.suffix(3) + out; digits.removeLast(3) }
        return digits + out
    }

    private static func seconds(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }
}
