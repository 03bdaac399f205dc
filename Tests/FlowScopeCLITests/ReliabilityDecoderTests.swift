import TestSupport
import FlowEvents
import FlowFetch
import FlowJSON
import FlowSim
import Foundation
import OTLPSink
import Synchronization
import Testing
@testable import FlowScopeCLI
@testable import FlowScopeServer

// Every decoder of outside input, run over the committed fuzz corpus (fuzz/corpus/<target>/) plus
// seeded mutations: a short, deterministic version of the libFuzzer runs in fuzz/. Then bad files
// through the real command line, and regression tests for the crashes the fuzzing found.

private let packageRootURL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()


/// Byte-level mutations of the kinds libFuzzer applies, with JSON tokens spliced in.
private struct Mutator {
    var rng: SplitMix64
    static let tokens: [[UInt8]] = ["{", "}", "[", "]", "\"", ":", ",", "\\u", "1e400", "-1", "1e300", "NaN", "Infinity", "null",
                                    "true", "\"\"", "[]", "{}", "0", "9007199254740993", "//", "\n",
                                    "\"0000-01-01T00:00:00Z\"", "\"x\""].map { Array($0.utf8) }

    mutating func mutate(_ input: [UInt8]) -> [UInt8] {
        var bytes = input
        for _ in 0..<Int.random(in: 1...3, using: &rng) {
            let at = bytes.isEmpty ? 0 : Int.random(in: 0...bytes.count, using: &rng)
            switch Int.random(in: 0..<6, using: &rng) {
            case 0 where at < bytes.count: bytes[at] ^= UInt8(1) << UInt8.random(in: 0...7, using: &rng)
            case 1: bytes.insert(UInt8.random(in: 0...255, using: &rng), at: at)
            case 2 where at < bytes.count:
                // Replace a token-sized run with a JSON token: keeps most of the document valid.
                let end = min(bytes.count, at + Int.random(in: 1...8, using: &rng))
                bytes.replaceSubrange(at..<end, with: Self.tokens.randomElement(using: &rng)!)
            case 3 where at < bytes.count: bytes.removeSubrange(at..<min(bytes.count, at + Int.random(in: 1...12, using: &rng)))
            case 4: bytes = Array(bytes.prefix(at))
            default: bytes.insert(contentsOf: Self.tokens.randomElement(using: &rng)!, at: at)
            }
        }
        return bytes
    }
}

/// One decoder of outside input, as its fuzz target drives it. Returns a problem, or nil when the
/// decoder either accepted the input or refused it with a located error.
private struct DecoderUnderTest: Sendable {
    var name: String
    var run: @Sendable ([UInt8]) -> String?
}

private func located(_ e: JSONInputError) -> String? {
    let path = e.path.hasPrefix("line ") ? String(e.path.drop { $0 != "$" }) : e.path
    if !path.hasPrefix("$") { return "error path \(e.path.debugDescription) does not start at $" }
    if e.message.isEmpty { return "error at \(e.path) without a message" }
    if e.message.utf8.count > 2_000 { return "error message of \(e.message.utf8.count) bytes echoes the input" }
    return nil
}

private let cacheKey = CacheKey(profileId: "user-42", placementId: "main_paywall")

private let decoders: [DecoderUnderTest] = [
    DecoderUnderTest(name: "json5") { bytes in
        do throws(JSONInputError) { _ = try JSON5.parse(bytes: bytes); return nil } catch { return located(error) }
    },
    DecoderUnderTest(name: "scenario") { bytes in
        guard let text = String(validating: bytes, as: UTF8.self) else { return nil }
        do throws(JSONInputError) {
            let report = ScenarioRunner(try Scenario.decode(text, file: "s.json5")).run()
            _ = report.timeline(events: true)
            _ = report.json.jsonText
            return nil
        } catch {
            return error.file == "s.json5" ? located(error) : "error does not name the file: \(error)"
        }
    },
    DecoderUnderTest(name: "config") { bytes in
        do throws(JSONInputError) { _ = try FlowScopeConfig.decode(JSONCursor(JSON5.parse(bytes: bytes))); return nil } catch { return located(error) }
    },
    DecoderUnderTest(name: "rest") { bytes in
        do throws(JSONInputError) {
            let payload = try RESTCoding.audience(from: JSONCursor(JSON5.parse(bytes: bytes)))
            let again = try RESTCoding.audience(from: JSONCursor(RESTCoding.audienceJSON(payload)))
            return again == payload ? nil : "audience round trip changed the payload"
        } catch { return located(error) }
    },
    DecoderUnderTest(name: "cache") { bytes in
        guard let mode = bytes.first else { return nil }
        var entry = Array(bytes.dropFirst())
        if mode & 1 == 0 { entry = Array(("flowscope-cache-1 " + Digest.hex(Digest.sha256(entry)) + "\n").utf8) + entry }
        switch CacheEntryCodec.decode(entry, key: cacheKey) {
        case .success(let flow):
            guard case .success(let again) = CacheEntryCodec.decode(CacheEntryCodec.encode(flow, key: cacheKey), key: cacheKey),
                  again == flow else { return "cache entry round trip failed" }
            return nil
        case .failure(let failure): return failure.message.isEmpty ? "failure without a reason" : nil
        }
    },
    DecoderUnderTest(name: "ingest") { bytes in
        switch Ingest.decode(bytes, maxEvents: 50) {
        case .success(let envelopes):
            // What the sinks do with accepted events must not trap either.
            for e in envelopes { _ = e.jsonLine }
            return envelopes.count <= 50 ? nil : "more than maxEvents accepted"
        case .failure(let f):
            guard f.status == 400 || f.status == 413 else { return "status \(f.status)" }
            return f.message.isEmpty ? "failure without a message" : nil
        }
    },
    DecoderUnderTest(name: "envelope") { bytes in
        do throws(JSONInputError) {
            let envelope = try Envelope(jsonValue: JSON5.parse(bytes: bytes))
            let line = envelope.jsonLine
            return try Envelope(jsonValue: JSON5.parse(line)).jsonLine == line ? nil : "envelope round trip changed \(line)"
        } catch { return located(error) }
    },
    DecoderUnderTest(name: "fallback") { bytes in
        do throws(JSONInputError) {
            let file = try FallbackFile.decode(bytes: bytes, file: "fallback.json")
            return try FallbackFile.decode(file.json).json == file.json ? nil : "fallback file round trip changed it"
        } catch {
            return error.file == "fallback.json" ? located(error) : "error does not name the file: \(error)"
        }
    },
    DecoderUnderTest(name: "layout") { bytes in
        do throws(JSONInputError) {
            let layout = try RESTCoding.layout(from: JSONCursor(JSON5.parse(bytes: bytes)))
            return try RESTCoding.layout(from: JSONCursor(RESTCoding.layoutJSON(layout))) == layout ? nil : "layout round trip changed it"
        } catch { return located(error) }
    },
]

private func corpus(_ target: String) -> [[UInt8]] {
    let dir = packageRootURL.appendingPathComponent("fuzz/corpus/\(target)")
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []).sorted()
    return names.compactMap { FileManager.default.contents(atPath: dir.appendingPathComponent($0).path).map { Array($0) } }
}

/// Captures what a command prints.
private final class ReliabilityOutput: Sendable {
    let out = Mutex(""), err = Mutex("")
    var output: Output {
        Output(out: { s in self.out.withLock { $0 += s } }, err: { s in self.err.withLock { $0 += s } }, isTerminal: false)
    }
    var errText: String { err.withLock { $0 } }
}

private func temporaryFile(_ name: String, _ bytes: [UInt8]) throws -> String {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("flowscope-reliability-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    let path = dir.appendingPathComponent(name).path
    guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else { throw CocoaError(.fileWriteUnknown) }
    return path
}

/// The bad files every reader of a file must refuse with exit status 2, naming the file and the path.
private let badFiles: [(name: String, bytes: [UInt8], path: String)] = [
    ("deep-arrays.json", Array(String(repeating: "[", count: 100_000).utf8), "$"),
    ("deep-objects.json", Array(String(repeating: "{\"a\":", count: 100_000).utf8), "$.a"),
    ("nan.json5", Array("{\"steps\": [NaN]}".utf8), "$.steps[0]"),
    ("infinity.json5", Array("{\"server\": {\"port\": Infinity}}".utf8), "$.server.port"),
    ("huge-number.json", Array("{\"steps\": [1e400]}".utf8), "$.steps[0]"),
    ("huge-string.json", Array(("{\"profile\": \"" + String(repeating: "x", count: 5 << 20) + "\"}").utf8), "$.profile"),
    ("binary.bin", (0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 7919 &+ 13) }, "$"),
    ("empty.json", [], "$"),
    ("wrong-type.json", Array("{\"steps\": {\"at\": 0}, \"server\": []}".utf8), "$."),
    ("unknown-key.json", Array("{\"stepz\": [], \"servr\": {}}".utf8), "$.s"),
]

@Suite("Reliability: every decoder of outside input, under seeded fuzzing and bad files", .heavy)
struct ReliabilityDecoderTests {
    @Test("each decoder accepts or refuses with a located error the committed corpus plus seeded mutations",
          arguments: ["json5", "scenario", "config", "rest", "cache", "ingest", "envelope", "fallback", "layout"])
    func corpusAndMutations(target: String) throws {
        let decoder = try #require(decoders.first { $0.name == target })
        let seeds = corpus(target)
        try #require(seeds.count >= 4, "fuzz/corpus/\(target) has \(seeds.count) files")
        var problems: [String] = []
        for (i, seed) in seeds.enumerated() {
            if let p = decoder.run(seed) { problems.append("seed \(i): \(p)") }
        }
        var mutator = Mutator(rng: SplitMix64(seed: 0xF1A5_0000 &+ UInt64(target.utf8.count)))
        let clock = ContinuousClock()
        let deadline = clock.now + .milliseconds(1500)
        var runs = 0
        while runs < 3_000 && clock.now < deadline {
            let seed = seeds[runs % seeds.count]
            let input = mutator.mutate(seed)
            if let p = decoder.run(input) { problems.append("mutation \(runs) of seed \(runs % seeds.count): \(p): \(String(decoding: input.prefix(120), as: UTF8.self))") }
            runs += 1
        }
        #expect(problems.isEmpty, "\(problems.prefix(3))")
        #expect(runs >= 200, "only \(runs) mutations in the time budget")
    }

    @Test("flowscope run refuses every bad file with exit status 2, naming the file and the JSON path")
    func runBadFiles() async throws {
        for bad in badFiles {
            let path = try temporaryFile(bad.name, bad.bytes)
            let captured = ReliabilityOutput()
            let status = await CommandLine.run(["run", path], output: captured.output)
            let err = captured.errText
            #expect(status == ExitStatus.usage, "\(bad.name): status \(status)")
            #expect(err.contains(path), "\(bad.name): \(err.prefix(200))")
            #expect(err.contains(": $"), "\(bad.name): no JSON path in \(err.prefix(200))")
            #expect(err.utf8.count < 2_000, "\(bad.name): a message of \(err.utf8.count) bytes")
        }
    }

    @Test("flowscope check-config refuses every bad file with exit status 2, naming the file and the JSON path")
    func checkConfigBadFiles() async throws {
        for bad in badFiles {
            let path = try temporaryFile(bad.name, bad.bytes)
            let captured = ReliabilityOutput()
            let status = await CommandLine.run(["check-config", path], output: captured.output)
            let err = captured.errText
            #expect(status == ExitStatus.usage, "\(bad.name): status \(status)")
            #expect(err.contains(path + ": $"), "\(bad.name): \(err.prefix(200))")
            #expect(err.utf8.count < 2_000, "\(bad.name): a message of \(err.utf8.count) bytes")
        }
    }

    @Test("the built flowscope binary exits 2 on 100,000 levels of nesting, with no stack overflow")
    func binaryDeepNesting() throws {
        let binary = packageRootURL.appendingPathComponent(".build/debug/flowscope").path
        try #require(FileManager.default.isExecutableFile(atPath: binary), "build the flowscope binary first")
        let path = try temporaryFile("deep.json5", Array(String(repeating: "{a:[", count: 100_000).utf8))
        for command in ["run", "check-config"] {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = [command, path]
            let err = Pipe()
            process.standardError = err
            process.standardOutput = Pipe()
            try process.run()
            let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            #expect(process.terminationReason == .exit, "\(command): killed by signal \(process.terminationStatus)")
            #expect(process.terminationStatus == 2, "\(command): \(text)")
            #expect(text.contains(path + ": $.a[0]"), "\(command): \(text)")
            #expect(text.contains("nesting deeper than 256 levels"), "\(command): \(text)")
        }
    }

    // MARK: - Regressions: crashes found by the fuzzing

    @Test("an envelope time outside 1970...9999 is refused at $.ts instead of trapping the sinks that format it",
          arguments: ["1e300", "-1", "1e13", "\"0000-01-01T00:00:00Z\"", "9.3e12"])
    func envelopeTimeRange(ts: String) throws {
        let line = #"{"ts":\#(ts),"t":0,"run":"r","trace":"4bf92f3577b34da6a3ce929d0e0e4736","span":"00f067aa0ba902b7","name":"timeout"}"#
        let error = #expect(throws: JSONInputError.self) { try Envelope(jsonValue: JSON5.parse(line)) }
        #expect(error?.path == "$.ts")
        guard case .failure(let failure) = Ingest.decode(Array(line.utf8), maxEvents: 10) else {
            Issue.record("ingest accepted ts \(ts)")
            return
        }
        #expect(failure.status == 400 && failure.message.contains("$.ts"), "\(failure.message)")
    }

    @Test("an ingest body may start with a UTF-8 byte order mark, as a JSON array or as JSON Lines")
    func ingestAfterByteOrderMark() {
        let line = #"{"ts":1.8e9,"t":0,"run":"r","trace":"4bf92f3577b34da6a3ce929d0e0e4736","span":"00f067aa0ba902b7","name":"timeout"}"#
        for body in ["[" + line + "," + line + "]", line + "\n" + line + "\n", " [ ]"] {
            switch Ingest.decode([0xEF, 0xBB, 0xBF] + Array(body.utf8), maxEvents: 10) {
            case .success(let envelopes): #expect(envelopes.count == (body == " [ ]" ? 0 : 2), "\(body)")
            case .failure(let failure): Issue.record("\(body): \(failure.message)")
            }
        }
    }

    @Test("a scenario with times like 1e300 is refused in one line naming the JSON path and the range (exit 2), never played",
          arguments: [("{ steps: [ { at: 1e300, call: 'getFlow', placement: 'p' } ] }", "$.steps[0].at"),
                      ("{ steps: [ { at: 0, call: 'getFlow', placement: 'p', loadTimeout: 1e300 }, { at: 0, call: 'getFlowOrDefault', placement: 'p', timeout: 1e300 } ] }",
                       "$.steps[0].loadTimeout"),
                      ("{ network: { latency: 1e300 }, client: { requestTimeout: 1e300 }, steps: [ { at: 1e15, call: 'preloadFlows', placements: ['a', 'b'] } ] }",
                       "$.network.latency")])
    func hugeScenarioTimes(text: String, path: String) async throws {
        let file = try temporaryFile("huge.json5", Array(text.utf8))
        for extra in [["--events"], ["--json"]] {
            let captured = ReliabilityOutput()
            let status = await CommandLine.run(["run", file] + extra, output: captured.output)
            #expect(status == ExitStatus.usage, "\(status): \(captured.errText)")
            #expect(captured.errText.hasPrefix("flowscope run: \(file): \(path): expected a number of seconds "), "\(captured.errText)")
            #expect(captured.errText.contains("1000000000") && captured.errText.filter { $0 == "\n" }.count == 1, "\(captured.errText)")
            #expect(captured.out.withLock { $0 }.isEmpty)
        }
    }

    @Test("a scenario with every time at the 10^9 s limit plays and prints finite times in its timeline and JSON",
          arguments: ["{ steps: [ { at: 1e9, call: 'getFlow', placement: 'p' } ] }",
                      "{ steps: [ { at: 1e9, call: 'getFlow', placement: 'p', loadTimeout: 1e9 }, { at: 1e9, call: 'getFlowOrDefault', placement: 'p', timeout: 1e9 } ] }",
                      "{ network: { latency: 1e9 }, client: { requestTimeout: 1e9 }, steps: [ { at: 1e9, call: 'preloadFlows', placements: ['a', 'b'] } ] }"])
    func scenarioTimesAtTheLimit(text: String) async throws {
        let file = try temporaryFile("limit.json5", Array(text.utf8))
        for extra in [["--events"], ["--json"]] {
            let captured = ReliabilityOutput()
            let status = await CommandLine.run(["run", file] + extra, output: captured.output)
            #expect(status == ExitStatus.success || status == ExitStatus.failure, "\(status): \(captured.errText)")
            let out = captured.out.withLock { $0 }
            #expect(!out.isEmpty)
            #expect(!out.contains("inf") && !out.contains("nan"), "\(out.prefix(600))")
            if extra == ["--json"] {
                let results = try JSON5.parse(out)["results"]?.arrayValue ?? []
                #expect(!results.isEmpty)
                for result in results {
                    #expect(result["startedAt"]?.numberValue != nil && result["completedAt"]?.numberValue != nil, "\(result)")
                }
            }
        }
    }

    @Test("ISO8601.format clamps any Double into years 1970...9999 instead of trapping")
    func formatClamps() {
        #expect(ISO8601.format(1e300) == "9999-12-31T23:59:59.999999Z")
        #expect(ISO8601.format(-1e300) == "1970-01-01T00:00:00.000000Z")
        #expect(ISO8601.format(.nan) == "1970-01-01T00:00:00.000000Z")
        #expect(ISO8601.format(.infinity) == "9999-12-31T23:59:59.999999Z")
        #expect(ISO8601.format(1_796_206_272.5) == "2026-12-02T10:11:12.500000Z")
    }

    @Test("an assets.prefetch.end with a huge failed count does not trap the OTLP trace builder")
    func otlpFailedCount() throws {
        var builder = OTLPTraceBuilder()
        let e = Envelope(seq: 1, ts: 1_796_206_272, t: 1, run: "r", trace: TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e4736")!,
                         span: SpanID(hex: "00f067aa0ba902b7")!, name: .assetsPrefetchEnd, placement: "p",
                         attrs: ["failed": 1e300, "duration": 1e300])
        let spans = builder.add(e, now: 0) + builder.drain()
        #expect(spans.allSatisfy { $0.status == .unset }, "\(spans.map(\.status))")
        let ok = Envelope(seq: 2, ts: 1_796_206_272, t: 1, run: "r", trace: TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e4737")!,
                          span: SpanID(hex: "00f067aa0ba902b8")!, name: .assetsPrefetchEnd, placement: "p", attrs: ["failed": 3])
        let failedSpans = builder.add(ok, now: 0) + builder.drain()
        #expect(failedSpans.contains { $0.status == .error("3 asset(s) failed") }, "\(failedSpans.map(\.status))")
    }
}
