import FlowEvents
import Foundation
import Synchronization
import TestSupport
import Testing

/// SignalRelay's thread can take every signal it relays, whatever mask the thread that made it had.
@Suite("Signal relay", .ownThread)
struct SignalRelayTests {
    /// The blocked-signal mask of each thread of this process, by thread name (`comm`) and id.
    static func threadMasks() -> [(name: String, blocked: UInt64)] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { task in
            let base = "/proc/self/task/\(task)"
            guard let name = try? String(contentsOfFile: base + "/comm", encoding: .utf8),
                  let status = try? String(contentsOfFile: base + "/status", encoding: .utf8),
                  let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigBlk:") }),
                  let mask = UInt64(line.dropFirst("SigBlk:".count).trimmingCharacters(in: .whitespaces), radix: 16) else { return nil }
            return (name.trimmingCharacters(in: .whitespacesAndNewlines), mask)
        }
    }

    @Test("installed from a thread that blocks every signal, the relay thread blocks none and still relays SIGUSR1")
    func relayThreadBlocksNoSignal() throws {
        let relayed = DispatchSemaphore(value: 0)
        // Install from a thread that blocks everything: a thread it makes starts with that mask.
        let installed = DispatchSemaphore(value: 0)
        let installer = Thread {
            var all = sigset_t()
            sigfillset(&all)
            pthread_sigmask(SIG_BLOCK, &all, nil)
            SignalRelay.install([SIGUSR1]) { relayed.signal() }
            installed.signal()
        }
        installer.start()
        #expect(installed.wait(timeout: .now() + 10) == .success)
        // The relay thread names itself once it runs.
        var relay: [(name: String, blocked: UInt64)] = []
        for _ in 0..<200 where relay.isEmpty {
            relay = Self.threadMasks().filter { $0.name == SignalRelay.threadName }
            if relay.isEmpty { Thread.sleep(forTimeInterval: 0.01) }
        }
        try #require(relay.count == 1, "one thread named \(SignalRelay.threadName): \(Self.threadMasks())")
        #expect(relay[0].blocked == 0, "the relay thread blocks \(String(relay[0].blocked, radix: 16))")
        kill(getpid(), SIGUSR1)
        #expect(relayed.wait(timeout: .now() + 10) == .success)
    }
}

@Suite("EventPipeline: unfinished sinks", .ownThread)
struct UnfinishedSinksTests {
    @Test("a sink held in consume is unfinished with its batch in flight and the rest queued; after shutdown none is")
    func unfinishedSinksDuringShutdown() {
        let slow = RecordingSink(name: "slow", gated: true), quick = RecordingSink(name: "quick")
        let pipeline = EventPipeline(sinks: [slow, quick])
        pipeline.receive(event(0))
        #expect(slow.entered.wait(timeout: .now() + 10) == .success)  // the first batch is in consume
        for i in 1...10 { pipeline.receive(event(i)) }
        #expect(pipeline.waitUntilDrained(timeout: 0.2) == false)
        let held = pipeline.unfinishedSinks().first { $0.sink == "slow" }
        #expect(held == SinkDrain(sink: "slow", queued: 10, inFlight: 1))
        let stopped = DispatchSemaphore(value: 0)
        Thread { pipeline.shutdown(); stopped.signal() }.start()
        // The quick sink finishes; the slow one is still named, until it is let go.
        var names: [String] = []
        for _ in 0..<500 {
            names = pipeline.unfinishedSinks().map(\.sink)
            if names == ["slow"] { break }
            Thread.sleep(forTimeInterval: 0.01)
        }
        #expect(names == ["slow"])
        for _ in 0..<20 { slow.gate.signal() }
        #expect(stopped.wait(timeout: .now() + 10) == .success)
        #expect(pipeline.unfinishedSinks().isEmpty)
        #expect(slow.envelopes.count == 11 && quick.envelopes.count == 11)
    }
}
