import FlowEvents
import FlowFetch
import FlowJSON
import Foundation
import JSONLinesSink
import Testing

func tempDirectory() -> String {
    let dir = NSTemporaryDirectory() + "jsonl-tests-" + UUID().uuidString
    try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    return dir
}

func envelope(_ seq: UInt64, attrs: EventAttributes = ["stage": "targeted", "budget": 4.5]) -> Envelope {
    Envelope(seq: seq, ts: 1_764_670_272.345678, t: Double(seq) / 10, run: "test:rotation \"quoted\"",
             trace: TraceID(high: 0x4bf9_2f35_77b3_4da6, low: 0xa3ce_929d_0e0e_4736), span: SpanID(raw: 0x00f0_67aa_0ba9_02b7),
             name: .timeout, placement: seq % 2 == 0 ? "main_paywall" : nil, attrs: attrs)
}

func lines(_ path: String) -> [String] {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [] }
    return text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
}

@Suite("JSONLinesSink")
struct JSONLinesSinkTests {
    @Test("every line parses back to its envelope, parent directories are created")
    func roundTrip() throws {
        let path = tempDirectory() + "/a/b/events.jsonl"
        let sink = try JSONLinesSink(path: path)
        let sent = (1...50).map { envelope(UInt64($0), attrs: ["i": .number(Double($0)), "text": "line\nbreak ü", "nested": ["x": [1, 2]]]) }
        sink.consume(Array(sent[..<20]))
        sink.consume(Array(sent[20...]))
        sink.flush()
        let got = lines(path)
        #expect(got.count == 50)
        for (line, envelope) in zip(got, sent) {
            #expect(line == envelope.jsonLine)
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(object?["seq"] as? Int == Int(envelope.seq))
            #expect(object?["run"] as? String == envelope.run)
            #expect(object?["ts"] as? String == "2025-12-02T10:11:12.345678Z")
            #expect(object?["trace"] as? String == "4bf92f3577b34da6a3ce929d0e0e4736")
            #expect((object?["attrs"] as? [String: Any])?["text"] as? String == "line\nbreak ü")
            // And through FlowScope's own reader: the same envelope comes back.
            let back = try Envelope(jsonValue: JSON5.parse(line))
            #expect(back.jsonLine == envelope.jsonLine)
        }
    }

    @Test("rotation keeps whole lines under rotateBytes and shifts .1 -> .2 up to keep")
    func rotation() throws {
        let dir = tempDirectory()
        let path = dir + "/trace.jsonl"
        let lineBytes = envelope(10).jsonLine.utf8.count + 1
        let sink = try JSONLinesSink(path: path, rotateBytes: lineBytes * 10, keep: 2)
        // 45 events (seq 10...54), at most 10 lines per file: files of 10-19 ... then 50-54 in the current file.
        for seq in stride(from: 10, to: 55, by: 5) { sink.consume((seq..<seq + 5).map { envelope(UInt64($0)) }) }
        sink.flush()
        #expect(sink.rotations == 4)
        let current = lines(path), one = lines(path + ".1"), two = lines(path + ".2")
        #expect(current.count == 5 && one.count == 10 && two.count == 10)
        #expect(!FileManager.default.fileExists(atPath: path + ".3"))
        // Oldest kept first: .2 then .1 then the current file, in seq order.
        let seqs = (two + one + current).compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["seq"] as? Int
        }
        #expect(seqs == Array(30..<55))
        for file in [path, path + ".1", path + ".2"] {
            let size = (try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0
            #expect(size <= lineBytes * 10)
        }
    }

    @Test("appends to an existing file and counts its size toward rotation")
    func appendsExisting() throws {
        let path = tempDirectory() + "/events.jsonl"
        try Data("{\"seq\":0}\n".utf8).write(to: URL(fileURLWithPath: path))
        let sink = try JSONLinesSink(path: path, fsync: .never)
        sink.consume([envelope(1)])
        #expect(lines(path).count == 1)  // buffered under `never`
        sink.flush()
        #expect(lines(path).count == 2 && lines(path).first == "{\"seq\":0}")
    }

    @Test("under the default interval policy a batch can be read from the file by another reader once consume returns")
    func intervalWritesAtConsume() throws {
        let path = tempDirectory() + "/events.jsonl"
        let sink = try JSONLinesSink(path: path)
        #expect(sink.fsync == .interval && sink.fsyncInterval == 1)
        sink.consume([envelope(1), envelope(2)])
        #expect(lines(path) == [envelope(1).jsonLine, envelope(2).jsonLine])
        sink.consume(batches: [[envelope(3)], [], [envelope(4), envelope(5)]])
        // Another descriptor of the file, opened after the call, sees every line.
        #expect(lines(path).count == 5)
        // A batch larger than the 1 MiB write threshold is whole in the file too.
        sink.consume((6..<6006).map { envelope(UInt64($0)) })
        let got = lines(path)
        #expect(got.count == 6005 && got.last == envelope(6005).jsonLine)
        #expect(sink.writeErrors == 0)
    }

    @Test("under the batch policy a batch is in the file once consume returns")
    func batchDurable() throws {
        let path = tempDirectory() + "/events.jsonl"
        let sink = try JSONLinesSink(path: path, fsync: .batch)
        sink.consume([envelope(1), envelope(2)])
        #expect(lines(path).count == 2)
        let always = try JSONLinesSink(path: path + "2", fsync: .always)
        always.consume([envelope(3)])
        #expect(lines(path + "2").count == 1)
    }

    @Test("through a pipeline, shutdown leaves every event in the file")
    func pipelineShutdown() throws {
        let path = tempDirectory() + "/events.jsonl"
        let sink = try JSONLinesSink(path: path, fsync: .never)
        let pipeline = EventPipeline(sinks: [sink])
        for i in 0..<10_000 {
            pipeline.receive(EngineEvent(name: .cacheMiss, t: Double(i), placement: "p", trace: TraceID(high: 1, low: 1), span: SpanID(raw: 1)))
        }
        pipeline.shutdown()
        let got = lines(path)
        #expect(got.count == 10_000)
        #expect(got.allSatisfy { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) != nil })
    }

    @Test("config: defaults under the state directory, bad options name their path")
    func config() throws {
        var registry = SinkRegistry()
        try registry.register(JSONLinesSink.Factory())
        let dir = tempDirectory()
        let sink = try registry.make(type: "jsonl", context: SinkContext(options: ["rotateBytes": 1000], path: "$.sinks[1]", stateDirectory: dir))
        #expect((sink as? JSONLinesSink)?.path == dir + "/events.jsonl")
        #expect((sink as? JSONLinesSink)?.fsync == .interval && (sink as? JSONLinesSink)?.keep == 3)
        #expect((sink as? JSONLinesSink)?.fsyncInterval == 1)
        let tuned = try registry.make(type: "jsonl", context: SinkContext(options: ["fsync": "interval", "fsyncInterval": 0.25],
                                                                          path: "$.sinks[1]", stateDirectory: dir))
        #expect((tuned as? JSONLinesSink)?.fsync == .interval && (tuned as? JSONLinesSink)?.fsyncInterval == 0.25)
        let batch = try registry.make(type: "jsonl", context: SinkContext(options: ["fsync": "batch"], path: "$.sinks[1]", stateDirectory: dir))
        #expect((batch as? JSONLinesSink)?.fsync == .batch)
        for (bad, got) in [(JSONValue.number(0), "a number 0"), (.number(-1), "a number -1"), (.string("1s"), "a string \"1s\""),
                          (.number(100_000), "a number 100000")] {
            let message = "expected a number of seconds > 0 and <= 86400, got \(got)"
            #expect(throws: JSONInputError(path: "$.sinks[1].fsyncInterval", message: message)) {
                _ = try registry.make(type: "jsonl", context: SinkContext(options: ["fsyncInterval": bad], path: "$.sinks[1]", stateDirectory: dir))
            }
            // The config check (`flowscope config check`, `serve` at start) reports the same error.
            #expect(throws: JSONInputError(path: "$.sinks[0].fsyncInterval", message: message)) {
                try registry.validateSinks(.array([.object(["type": "jsonl", "fsyncInterval": bad])]),
                                           path: "$.sinks", stateDirectory: dir, version: "0")
            }
        }
        #expect(throws: JSONInputError(path: "$.sinks[1].rotateBytes", message: "expected a positive integer, got a string \"10MB\"")) {
            _ = try registry.make(type: "jsonl", context: SinkContext(options: ["rotateBytes": "10MB"], path: "$.sinks[1]", stateDirectory: dir))
        }
        #expect(throws: JSONInputError(path: "$.sinks[1].fsync", message: "expected one of \"never\", \"interval\", \"batch\", \"always\", got a string \"sometimes\"")) {
            _ = try registry.make(type: "jsonl", context: SinkContext(options: ["fsync": "sometimes"], path: "$.sinks[1]", stateDirectory: dir))
        }
        #expect(throws: JSONInputError.self) {
            _ = try registry.make(type: "jsonl", context: SinkContext(options: ["path": "/proc/nope/x.jsonl"], path: "$.sinks[1]"))
        }
    }

    @Test("consume(batches:) writes every line of every batch in order, rotating across batches, for each fsync policy")
    func batchesInOneCall() throws {
        for policy in JSONLinesSink.FsyncPolicy.allCases {
            let dir = tempDirectory()
            let path = dir + "/events.jsonl"
            let lineBytes = envelope(100).jsonLine.utf8.count + 1
            let sink = try JSONLinesSink(path: path, rotateBytes: lineBytes * 25, keep: 5, fsync: policy)
            let sent = (100..<160).map { envelope(UInt64($0)) }
            sink.consume(batches: [Array(sent[..<7]), Array(sent[7..<40]), [], Array(sent[40...])])
            if policy == .never { sink.flush() }
            // Lines of the same length: 25 per file, so 60 lines are files of 25, 25 and 10.
            #expect(sink.rotations == 2)
            let files = [path + ".2", path + ".1", path].map(lines)
            #expect(files.map(\.count) == [25, 25, 10])
            #expect(files.flatMap { $0 } == sent.map(\.jsonLine))
            #expect(sink.writeErrors == 0)
        }
    }
}

@Suite("JSONLinesSink health")
struct JSONLinesHealthTests {
    @Test("a full disk marks the sink down, counts each failed write and the lines it lost")
    func diskFull() throws {
        let sink = try JSONLinesSink(path: "/dev/full", fsync: .never)
        sink.consume((1...5).map { envelope($0) })
        #expect(sink.health == SinkHealth())
        sink.flush()
        let health = sink.health
        #expect(health.up == false)
        #expect(health.errors >= 1)
        #expect(health.dropped == 5)
        #expect(health.lastError?.contains("No space left") == true)
    }

    @Test("a rotation that cannot move the file is an error with its reason, and nothing is lost")
    func rotationFails() throws {
        let dir = tempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/events.jsonl"
        // `events.jsonl.1` is a non-empty directory: renaming the file onto it fails, for root too.
        try FileManager.default.createDirectory(atPath: path + ".1/x", withIntermediateDirectories: true)
        let sink = try JSONLinesSink(path: path, rotateBytes: 300, keep: 1, fsync: .batch)
        for i in 1...10 { sink.consume([envelope(UInt64(i))]) }
        sink.close()
        let health = sink.health
        #expect(health.errors >= 1)
        #expect(health.lastError?.hasPrefix("cannot rotate \(path)") == true, "\(health)")
        #expect(health.dropped == 0)
        #expect(lines(path).count == 10)
    }
}
