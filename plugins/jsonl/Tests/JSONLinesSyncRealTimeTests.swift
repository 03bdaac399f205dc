import FlowEvents
import Foundation
import JSONLinesSink
import TestSupport
import Testing

/// Polls `condition` every 10 ms until it holds or `seconds` of wall time have passed.
func eventually(within seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        Thread.sleep(forTimeInterval: 0.01)
    }
    return condition()
}

/// Threads of this process whose name is `name` (the interval timer is named `fsync:<sink name>`).
func threads(named name: String) -> Int {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    return tasks.filter { task in
        (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines) == name
    }.count
}

/// A short sink name unique to one test, so parallel tests never see each other's timer threads.
func uniqueName() -> String { String(UUID().uuidString.prefix(8)) }

/// The `interval` policy's background timer, against wall time: margins are generous (seconds
/// where the interval is 50 ms) because other processes share the cores.
@Suite("JSONLinesSink interval fsync", .realTime)
struct JSONLinesSyncRealTimeTests {
    @Test("the timer syncs written lines within about fsyncInterval, and does nothing while nothing is written")
    func syncsWhatWasWritten() throws {
        let path = tempDirectory() + "/events.jsonl"
        let sink = try JSONLinesSink(path: path, fsyncInterval: 0.05)
        // Nothing written: no sync over several intervals.
        Thread.sleep(forTimeInterval: 0.3)
        #expect(sink.syncs == 0)
        sink.consume([envelope(1)])
        #expect(sink.syncs == 0)  // consume itself does not sync
        #expect(eventually(within: 5) { sink.syncs >= 1 })
        // Idle again: the lines are synced, so the ticks that follow find nothing to do.
        Thread.sleep(forTimeInterval: 0.1)
        let synced = sink.syncs
        Thread.sleep(forTimeInterval: 0.4)
        #expect(sink.syncs == synced)
        // New lines: synced by a later tick, without any further event to drive it.
        sink.consume([envelope(2), envelope(3)])
        #expect(eventually(within: 5) { sink.syncs > synced })
        #expect(lines(path).count == 3 && sink.writeErrors == 0)
        sink.close()
    }

    @Test("under a steady stream of batches the timer syncs at most once per fsyncInterval")
    func atMostOncePerInterval() throws {
        let path = tempDirectory() + "/events.jsonl"
        let sink = try JSONLinesSink(path: path, fsyncInterval: 0.1)
        let start = Date()
        var seq: UInt64 = 0
        while Date().timeIntervalSince(start) < 0.6 {
            sink.consume((0..<10).map { _ in seq += 1; return envelope(seq) })
            Thread.sleep(forTimeInterval: 0.001)
        }
        let elapsed = Date().timeIntervalSince(start)
        // Ticks are `fsyncInterval` apart at least (later under load), plus one for rounding.
        #expect(sink.syncs >= 1)
        #expect(Double(sink.syncs) <= elapsed / 0.1 + 1)
        #expect(lines(path).count == Int(seq))
        sink.close()
    }

    @Test("close stops the timer thread, a later batch restarts it, and releasing the sink stops it")
    func timerStops() throws {
        let path = tempDirectory() + "/events.jsonl"
        let name = uniqueName()
        let label = "fsync:\(name)"
        var sink: JSONLinesSink? = try JSONLinesSink(name: name, path: path, fsyncInterval: 0.05)
        // No thread until something is written.
        #expect(threads(named: label) == 0)
        sink?.consume([envelope(1)])
        #expect(eventually(within: 5) { threads(named: label) == 1 })
        #expect(eventually(within: 5) { (sink?.syncs ?? 0) >= 1 })
        sink?.close()
        #expect(eventually(within: 5) { threads(named: label) == 0 })
        let synced = sink?.syncs ?? 0
        Thread.sleep(forTimeInterval: 0.3)
        #expect(sink?.syncs == synced)
        // A batch after close reopens the file and restarts the timer.
        sink?.consume([envelope(2)])
        #expect(eventually(within: 5) { threads(named: label) == 1 })
        #expect(eventually(within: 5) { (sink?.syncs ?? 0) > synced })
        #expect(lines(path).count == 2)
        // Released without close (deinit): the thread goes away, nothing crashes later.
        sink?.consume([envelope(3)])
        sink = nil
        #expect(eventually(within: 5) { threads(named: label) == 0 })
        Thread.sleep(forTimeInterval: 0.2)
        #expect(lines(path).count == 3)
    }

    @Test("rotations racing the timer: every line lands in order in a kept file, no write or sync error")
    func rotationsWhileSyncing() throws {
        for keep in [0, 3] {
            let dir = tempDirectory()
            let path = dir + "/events.jsonl"
            let lineBytes = envelope(1000).jsonLine.utf8.count + 1
            let sink = try JSONLinesSink(path: path, rotateBytes: lineBytes * 40, keep: keep, fsyncInterval: 0.01)
            var seq: UInt64 = 1000
            let start = Date()
            while Date().timeIntervalSince(start) < 0.5 {
                sink.consume((0..<7).map { _ in seq += 1; return envelope(seq) })
            }
            #expect(eventually(within: 5) { sink.syncs >= 1 })
            sink.close()
            #expect(sink.writeErrors == 0, "\(sink.lastError ?? "")")
            #expect(sink.rotations > keep)
            let files = (keep > 0 ? (1...keep).reversed().map { "\(path).\($0)" } : []) + [path]
            let got = files.flatMap(lines)
            // The kept files hold the last lines written, whole and in order.
            #expect(!got.isEmpty && got == ((seq - UInt64(got.count) + 1)...seq).map { envelope($0).jsonLine })
        }
    }
}
