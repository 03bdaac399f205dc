import Dispatch
import ExecSink
import FlowEvents
import FlowFetch
import FlowJSON
import Foundation
import Synchronization
import TestSupport
import Testing

func tempDirectory() -> String {
    let dir = NSTemporaryDirectory() + "exec-tests-" + UUID().uuidString
    try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    return dir
}

func engineEvent(_ i: Int) -> EngineEvent {
    let names: [EventName] = [.fetchStart, .cacheMiss, .requestStart, .requestEnd, .fetchEnd]
    return EngineEvent(name: names[i % names.count], t: Double(i) / 100, placement: "main_paywall",
                       trace: TraceID(high: 7, low: UInt64(i + 1)), span: SpanID(raw: UInt64(i + 1)),
                       attrs: ["i": .number(Double(i)), "padding": .string(String(repeating: "x", count: 100))])
}

/// Waits until `condition` holds or `timeout` passes; returns whether it holds.
func eventually(timeout: Double = 10, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return true }
        usleep(10_000)
    }
    return condition()
}

let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("examples").path

@Suite("ExecSink", .ownThread)
struct ExecSinkTests {
    @Test("the program's stdin gets the hello line, then one envelope per line")
    func protocolLines() throws {
        let out = tempDirectory() + "/stdin.jsonl"
        let sink = ExecSink(command: ["sh", "-c", "cat > \"$0\"", out], version: "1.2.3", flushTimeout: 60)
        let pipeline = EventPipeline(sinks: [sink])
        for i in 0..<300 { pipeline.receive(engineEvent(i)) }
        #expect(pipeline.waitUntilDrained())
        #expect(eventually(timeout: 60) { sink.written == 300 })
        // Capture what the pipeline delivered to compare byte for byte.
        pipeline.shutdown()
        #expect(eventually { (try? String(contentsOfFile: out, encoding: .utf8))?.split(separator: "\n").count == 301 })
        let lines = try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(lines.first == #"{"type":"hello","protocol":1,"version":"1.2.3"}"#)
        let seqs = lines.dropFirst().compactMap { line -> Int? in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["seq"] as? Int
        }
        #expect(seqs.count == 300 && zip(seqs, seqs.dropFirst()).allSatisfy { $0 < $1 })
        let first = try #require(try JSONSerialization.jsonObject(with: Data(lines[1].utf8)) as? [String: Any])
        #expect(first["name"] as? String == "fetch.start" && first["run"] as? String == "live")
        #expect(sink.lost == 0 && sink.starts == 1)
    }

    @Test("the example program counts events by name and writes its summary at end of input")
    func exampleProgram() throws {
        let summaryPath = tempDirectory() + "/counts.json"
        // A generous flush timeout: python3 starts slowly on a loaded machine, and the default 2 s
        // would count the rest as lost (the sink's documented behaviour, not what this test checks).
        let sink = ExecSink(command: ["python3", examples + "/count_events.py", summaryPath], version: "9.9.9", flushTimeout: 60)
        let pipeline = EventPipeline(sinks: [sink])
        for i in 0..<1000 { pipeline.receive(engineEvent(i)) }
        pipeline.shutdown()  // flush, then close: end of input, the program writes "complete"
        #expect(eventually(timeout: 60) { FileManager.default.fileExists(atPath: summaryPath) })
        let summary = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: summaryPath))) as? [String: Any])
        #expect(summary["complete"] as? Bool == true)
        #expect(summary["version"] as? String == "9.9.9" && summary["protocol"] as? Int == 1)
        #expect(summary["events"] as? Int == 1000)
        #expect(summary["byName"] as? [String: Int] == ["fetch.start": 200, "cache.miss": 200, "request.start": 200, "request.end": 200, "fetch.end": 200])
        #expect(summary["badLines"] as? Int == 0)
        #expect(sink.lost == 0 && sink.written == 1000)
    }

    @Test("a slow reader loses events, counted, while the pipeline keeps flowing")
    func slowReader() {
        let sink = ExecSink(command: ["sh", "-c", "while read -r line; do sleep 0.05; done"], version: "1",
                            bufferBytes: 16 * 1024, flushTimeout: 0.2)
        let other = CountingSink()
        let pipeline = EventPipeline(sinks: [sink, other])
        let n = 20_000
        let start = DispatchTime.now().uptimeNanoseconds
        for i in 0..<n { pipeline.receive(engineEvent(i)) }
        #expect(pipeline.waitUntilDrained(timeout: 10))
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        // The program reads 20 lines a second: 20,000 events would take 1000 s if anything waited.
        #expect(elapsed < 10)
        #expect(other.count == n)
        #expect(sink.lost > 10_000)
        // Nothing was dropped from the pipeline's queue: the only losses are the sink's, reported as its own.
        #expect(pipeline.dropped(sink: "exec") == sink.lost)
        pipeline.shutdown()
        // After close nothing is pending: every event was either written or lost.
        #expect(sink.written + sink.lost == UInt64(n))
        #expect(sink.bufferedBytes == 0)
    }

    @Test("a program that exits is restarted with backoff, each run greeted with hello")
    func restarts() throws {
        let out = tempDirectory() + "/runs.jsonl"
        // Each run keeps its first two lines (hello and one event) and exits.
        let sink = ExecSink(command: ["sh", "-c", "head -n 2 >> \"$0\"", out], version: "r", backoffInitial: 0.02, backoffMax: 0.1)
        let pipeline = EventPipeline(sinks: [sink])
        var i = 0
        #expect(eventually(timeout: 15) {
            pipeline.receive(engineEvent(i)); i += 1
            return sink.starts >= 3
        })
        pipeline.shutdown()
        let text = try String(contentsOfFile: out, encoding: .utf8)
        let hellos = text.split(separator: "\n").filter { $0.hasPrefix(#"{"type":"hello""#) }
        #expect(hellos.count >= 2)
        #expect(sink.lastError != nil)
    }

    @Test("the program starts in a clean signal state even from a thread that blocks SIGTERM, and is gone after close")
    func cleanSignalState() throws {
        // libdispatch's worker threads, and the threads they create, block SIGTERM and SIGINT; the
        // feeder thread inherits the mask of the thread that creates the sink.
        var blocked = sigset_t(), previous = sigset_t()
        sigemptyset(&blocked)
        for signal in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&blocked, signal) }
        pthread_sigmask(SIG_BLOCK, &blocked, &previous)
        let sink = ExecSink(command: ["sleep", "60"], version: "1", flushTimeout: 0.1)  // never reads stdin
        pthread_sigmask(SIG_SETMASK, &previous, nil)
        #expect(eventually { sink.pid != nil })
        let pid = try #require(sink.pid)
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        func mask(_ field: String) -> UInt64? {
            status.split(separator: "\n").first { $0.hasPrefix(field + ":") }
                .flatMap { UInt64($0.dropFirst(field.count + 1).trimmingCharacters(in: .whitespaces), radix: 16) }
        }
        #expect(mask("SigBlk") == 0)
        let ignored = try #require(mask("SigIgn"))
        #expect(ignored & (1 << UInt64(SIGPIPE - 1)) == 0, "SIGPIPE must be at its default in the program")
        #expect(ignored & (1 << UInt64(SIGTERM - 1)) == 0)
        let start = Date()
        sink.close()  // end of file, 2 s of grace, then SIGTERM
        #expect(eventually(timeout: 5) { !FileManager.default.fileExists(atPath: "/proc/\(pid)") })
        #expect(Date().timeIntervalSince(start) < 6)
        // Recorded by the thread that reaps the program, just after /proc/PID is gone.
        #expect(eventually { sink.lastError?.contains("signal 15") == true }, "\(sink.lastError ?? "no error")")
    }

    @Test("a program that ignores SIGTERM too is killed 2 s after it")
    func killAfterTerm() throws {
        let sink = ExecSink(command: ["sh", "-c", "trap '' TERM; exec sleep 60"], version: "1", flushTimeout: 0.1)
        #expect(eventually { sink.pid != nil })
        let pid = try #require(sink.pid)
        usleep(200_000)  // let the shell install its trap before exec
        sink.close()
        #expect(eventually(timeout: 8) { !FileManager.default.fileExists(atPath: "/proc/\(pid)") })
        // Recorded by the thread that reaps the program, just after /proc/PID is gone.
        #expect(eventually { sink.lastError?.contains("signal 9") == true }, "\(sink.lastError ?? "no error")")
    }

    @Test("a missing program counts failed starts and never blocks")
    func missingProgram() {
        let sink = ExecSink(command: ["/nonexistent/flowscope-no-such-program"], version: "1", backoffInitial: 0.01, backoffMax: 0.02,
                            flushTimeout: 0.1)
        let pipeline = EventPipeline(sinks: [sink])
        for i in 0..<100 { pipeline.receive(engineEvent(i)) }
        #expect(eventually { sink.startFailures >= 2 })
        pipeline.shutdown()
        #expect(sink.starts == 0 && sink.lost == 100 && sink.written == 0)
        #expect(sink.lastError?.contains("flowscope-no-such-program") == true)
    }

    @Test("config: command is a required non-empty argv array")
    func config() throws {
        var registry = SinkRegistry()
        try registry.register(ExecSink.Factory())
        #expect(throws: JSONInputError(path: "$.sinks[3]", message: "missing required key \"command\" (expected an argv array such as [\"python3\", \"summary.py\"])")) {
            _ = try registry.make(type: "exec", context: SinkContext(path: "$.sinks[3]"))
        }
        #expect(throws: JSONInputError(path: "$.sinks[3].command", message: "expected a non-empty array of strings, got a string \"cat\"")) {
            _ = try registry.make(type: "exec", context: SinkContext(options: ["command": "cat"], path: "$.sinks[3]"))
        }
        #expect(throws: JSONInputError(path: "$.sinks[3].command[1]", message: "expected a string, got a number 3")) {
            _ = try registry.make(type: "exec", context: SinkContext(options: ["command": ["cat", 3]], path: "$.sinks[3]"))
        }
        let sink = try registry.make(type: "exec", context: SinkContext(options: ["command": ["cat"]], path: "$.sinks[3]", version: "2.0"))
        #expect((sink as? ExecSink)?.command == ["cat"])
        (sink as? ExecSink)?.close()
    }
}

final class CountingSink: EventSink {
    let name = "counting"
    private let total = Mutex(0)
    func consume(_ batch: [Envelope]) { total.withLock { $0 += batch.filter { $0.name != .sinkDropped }.count } }
    func flush() {}
    var count: Int { total.withLock { $0 } }
}
