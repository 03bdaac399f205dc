import FlowEvents
import FlowJSON
import Foundation
import SQLiteSink
import TestSupport
import Testing
@testable import FlowScopeCLI

/// JSON Lines of request.start/request.end pairs with a known distribution: log-normal latency
/// (median, sigma), each request given `budget` seconds (longer ones recorded as timeouts).
func syntheticTraceLines(placement: String, median: Double, sigma: Double, budget: Double, requests: Int, seed: UInt64) -> [String] {
    var state = seed
    func uniform() -> Double {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return Double((z ^ (z >> 31)) >> 11) * 0x1p-53
    }
    var lines: [String] = []
    for i in 0..<requests {
        let normal = (-2 * log(max(uniform(), 1e-300))).squareRoot() * cos(2 * .pi * uniform())
        let latency = median * exp(sigma * normal)
        let timedOut = latency > budget
        let duration = ((timedOut ? budget : latency) * 1e6).rounded() / 1e6
        let trace = String(format: "%016llx%016llx", seed | 1, UInt64(i + 1))
        let span = String(format: "%016llx", UInt64(i + 1) &* 2_654_435_761 | 1)
        func line(_ name: String, _ attrs: String) -> String {
            #"{"seq":\#(lines.count + 1),"ts":"2026-12-02T10:11:12.000000Z","t":\#(Double(i) * 0.01),"run":"live","trace":"\#(trace)","span":"\#(span)","name":"\#(name)","placement":"\#(placement)","attrs":{\#(attrs)}}"#
        }
        lines.append(line("request.start", #""kind":"targeted","timeout":\#(budget)"#))
        lines.append(line("request.end", #""kind":"targeted","outcome":"\#(timedOut ? "timeout" : "ok")","duration":\#(duration),"bytes":0"#))
    }
    return lines
}

/// P(Z > z) of the standard normal.
private func normalSurvival(_ z: Double) -> Double { 0.5 * erfc(z / 2.0.squareRoot()) }

@Suite(.serialized, .ownThread) struct SimulateFromTests {
    @Test func aRecordedTraceIsFittedWithinToleranceAndGetsARecommendationPerPlacement() async throws {
        let dir = makeTemporaryDirectory("from")
        defer { removeDirectory(dir) }
        let lines = syntheticTraceLines(placement: "main_paywall", median: 0.7, sigma: 0.7, budget: 1.5, requests: 1_500, seed: 3)
            + syntheticTraceLines(placement: "onboarding", median: 0.3, sigma: 0.5, budget: 1.0, requests: 600, seed: 5)
        try write(lines.joined(separator: "\n") + "\n", to: dir + "/trace.jsonl")
        let run = await flowscope("simulate", "--from", dir + "/trace.jsonl", "--json", "--sessions", "300", "--threads", "1")
        #expect(run.status == 0, "\(run.err)")
        let json = try JSON5.parse(run.out)
        let paywall = try #require(json["fitted"]?["main_paywall"]?["targeted"])
        #expect(paywall["requests"]?.numberValue == 1_500)
        let paywallShare = normalSurvival((log(1.5) - log(0.7)) / 0.7)
        #expect(abs((paywall["timeoutShare"]?.numberValue ?? -1) - paywallShare) < 0.05)
        #expect(abs((paywall["p50"]?.numberValue ?? -1) / 0.7 - 1) < 0.08)
        let onboarding = try #require(json["fitted"]?["onboarding"]?["targeted"])
        #expect(abs((onboarding["timeoutShare"]?.numberValue ?? -1) - normalSurvival((log(1.0) - log(0.3)) / 0.5)) < 0.05)
        for placement in ["main_paywall", "onboarding"] {
            let r = try #require(json["recommendation"]?[placement], "no recommendation for \(placement)")
            #expect(r["strategy"]?.stringValue != nil)
            #expect(r["targetingCorrect"]?.numberValue != nil && r["timeToFlow"]?["p95"]?.numberValue != nil)
        }
        #expect(json["strategies"]?.arrayValue?.count == 7)
    }

    @Test func theSameEventsFromJSONLinesSQLiteAndALiveServerGiveTheSameFit() async throws {
        let stack = try StackFixture(sinks: #"""
            { type: "memory", capacity: 20000 }, { type: "jsonl", path: "$DIR/trace.jsonl", fsync: "never" },
            { type: "sqlite", path: "$DIR/events.db" }
            """#)
        defer { stack.stop() }
        let lines = syntheticTraceLines(placement: "main_paywall", median: 0.9, sigma: 0.6, budget: 2, requests: 400, seed: 9)
            + syntheticTraceLines(placement: "onboarding", median: 0.4, sigma: 0.4, budget: 1, requests: 10, seed: 4)
        let reply = try stack.ingest(lines.joined(separator: "\n") + "\n")
        #expect(reply.status == 202, "\(reply.text)")
        let common = ["--json", "--sessions", "200", "--threads", "1"]
        let fromServer = await flowscope(["simulate", "--from", "https://127.0.0.1:\(stack.port)/api/events",
                                          "--ca", stack.dir + "/state/tls/cert.pem"] + common)
        let fromSQLite = await flowscope(["simulate", "--from", stack.dir + "/events.db"] + common)
        // The jsonl sink buffers lines; stopping the stack writes out the last of them.
        stack.stop()
        let fromFile = await flowscope(["simulate", "--from", stack.dir + "/trace.jsonl"] + common)
        for run in [fromFile, fromSQLite, fromServer] { #expect(run.status == 0, "\(run.err)") }
        let fits = try [fromFile, fromSQLite, fromServer].map { try JSON5.parse($0.out) }
        let fitted = fits.map { $0["fitted"] }
        #expect(fitted[0]?["main_paywall"]?["targeted"]?["requests"]?.numberValue == 400)
        #expect(fitted[0] == fitted[1])
        #expect(fitted[0] == fitted[2])
        #expect(fits.map { $0["recommendation"] }.allSatisfy { $0 == fits[0]["recommendation"] })
        // The placement with 10 requests: a warning with the numbers, no recommendation.
        let warnings = fits[0]["warnings"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(warnings.contains { $0.contains("onboarding") && $0.contains("10 recorded") && $0.contains("at least 30") })
        #expect(fits[0]["recommendation"]?["onboarding"] == nil)
        #expect(fits[0]["recommendation"]?["main_paywall"] != nil)
    }

    @Test func aSweepDrawsTheCurvesInTheTableTheJSONAndTheReport() async throws {
        let dir = makeTemporaryDirectory("sweep")
        defer { removeDirectory(dir) }
        try write(syntheticTraceLines(placement: "main_paywall", median: 0.8, sigma: 0.8, budget: 3, requests: 300, seed: 2)
            .joined(separator: "\n"), to: dir + "/trace.jsonl")
        let args = ["simulate", "--from", dir + "/trace.jsonl", "--sweep", "loadTimeout=1:4:1", "--sessions", "200", "--threads", "1"]
        let table = await flowscope(args + ["--out", dir + "/report"])
        #expect(table.status == 0, "\(table.err)")
        #expect(table.out.contains("Sweep of loadTimeout over 4 values"))
        #expect(table.out.contains("Recommendation") && table.out.contains("main_paywall: "))
        let html = try String(contentsOfFile: dir + "/report/report.html", encoding: .utf8)
        #expect(html.contains("<svg") && html.contains("class=\"recommended\""))
        #expect(table.out.contains("wrote \(dir)/report/simulate.json and \(dir)/report/report.html"))
        // A directory written with its trailing slash names the files once, without "//".
        let slashed = await flowscope(args + ["--out", dir + "/slashed/"])
        #expect(slashed.status == 0 && FileManager.default.fileExists(atPath: dir + "/slashed/report.html"))
        #expect(slashed.out.contains("wrote \(dir)/slashed/simulate.json and \(dir)/slashed/report.html"))
        let json = try JSON5.parse(await flowscope(args + ["--json"]).out)
        #expect(json["sweep"]?["values"]?.arrayValue?.count == 4)
        #expect(json["sweep"]?["placements"]?["main_paywall"]?.arrayValue?.isEmpty == false)
        #expect(json["recommendation"]?["main_paywall"]?["loadTimeout"]?.numberValue != nil)
    }

    @Test func aBadSourceOrSweepExitsWithStatus2AndSaysWhy() async throws {
        let dir = makeTemporaryDirectory("bad")
        defer { removeDirectory(dir) }
        try write(syntheticTraceLines(placement: "p", median: 1, sigma: 0.5, budget: 3, requests: 1, seed: 1)[0] + "\n{not json\n",
                  to: dir + "/broken.jsonl")
        try write("", to: dir + "/empty.jsonl")
        try write("garbage\n", to: dir + "/junk.sqlite")
        let cwd = FileManager.default.currentDirectoryPath
        let cases: [([String], String)] = [
            (["--from", dir + "/missing.jsonl"], "--from \(dir)/missing.jsonl: not found"),
            (["--from", "nonexistent-\(UUID()).jsonl"], "--from \(cwd)/nonexistent-"),
            (["--from", dir], "--from \(dir): is a directory, expected a file"),
            (["--from", dir + "/broken.jsonl"], "--from \(dir)/broken.jsonl: line 2:"),
            (["--from", dir + "/junk.sqlite"], "--from \(dir)/junk.sqlite: line 1:"),
            (["--from", "https://127.0.0.1:1/api/events", "--ca", dir + "/missing.pem"], "--ca \(dir)/missing.pem: not found"),
            (["--from", "https://127.0.0.1:1/api/events", "--ca", dir], "--ca \(dir): is a directory, expected a file"),
            (["--from", "https://127.0.0.1:1/api/events", "--ca", "/etc/hostname"],
             "--ca /etc/hostname: expected a PEM certificate (-----BEGIN CERTIFICATE-----), found none"),
            (["--from", dir + "/empty.jsonl"], "no flow requests to fit"),
            (["--from", "https://"], "expected a URL"),
            (["--from", "ftp://x"], "--from ftp://x: the URL scheme ftp is not read; expected https:// or http://"),
            (["--from", "FILE:///tmp/t.jsonl"], "--from FILE:///tmp/t.jsonl: the URL scheme file is not read; expected https:// or http://"),
            (["--sweep", "loadTimeout=1:10"], "--sweep: expected NAME=FROM:TO:STEP"),
            (["--sweep", "budget=1:2:1"], "--sweep: unknown parameter \"budget\""),
            (["--sweep", "loadTimeout=1:1e308:1e306"], "flowscope simulate: --sweep: loadTimeout: TO must be a number of seconds from 0 to 1000000000, got 1e308"),
            (["--sweep", "loadTimeout=1:10:1e-300"], "flowscope simulate: --sweep: loadTimeout=1:10:1e-300 gives more than 10^15 values; at most 200"),
            (["--max-p95", "soon"], "--max-p95 expects a number of seconds > 0"),
            (["--max-p95", "2"], "--max-p95 bounds the recommendation of --from or --sweep, and neither is given"),
            (["--ca", dir + "/ca.pem"], "--ca applies to --from"),
        ]
        for (extra, message) in cases {
            let run = await flowscope(["simulate", "--sessions", "10"] + extra)
            #expect(run.status == 2, "\(extra)")
            #expect(run.err.contains(message), "\(extra): \(run.err)")
            #expect(run.err.split(separator: "\n").count == 1, "\(extra): \(run.err)")
        }
    }

    @Test("an --out that cannot take the report is a usage error naming --out before anything is simulated or saved")
    func aBadOutIsRefusedBeforeTheRun() async throws {
        let dir = (makeTemporaryDirectory("out") as NSString).standardizingPath
        defer { removeDirectory(dir) }
        try write("x", to: dir + "/afile")
        try FileManager.default.createDirectory(atPath: dir + "/taken/simulate.json", withIntermediateDirectories: true)
        let cases: [(out: String, message: String)] = [
            (dir + "/afile", "--out \(dir)/afile: not a directory; expected a directory for simulate.json and report.html"),
            (dir + "/afile/sub", "--out \(dir)/afile/sub: cannot be created: \(dir)/afile is not a directory; expected a directory for simulate.json and report.html"),
            (dir + "/taken", "--out \(dir)/taken: simulate.json is a directory; expected a file to replace or none"),
            ("", "--out expects a directory (for simulate.json and report.html)"),
        ]
        for c in cases {
            let started = Date()
            let run = await flowscope(["simulate", "--sessions", "50", "--threads", "1", "--state-dir", dir + "/state", "--out", c.out])
            #expect(run.status == 2, "\(c.out): \(run.err)")
            #expect(run.err == "flowscope simulate: \(c.message)\n", "\(c.out)")
            #expect(run.out.isEmpty)
            #expect(!FileManager.default.fileExists(atPath: dir + "/state"), "nothing saved: the run never started")
            #expect(Date().timeIntervalSince(started) < 5)
        }
        #expect(try String(contentsOfFile: dir + "/afile", encoding: .utf8) == "x")
        // A directory that does not exist yet is created, with its parents.
        let made = await flowscope(["simulate", "--sessions", "10", "--threads", "1", "--state-dir", dir + "/state", "--out", dir + "/new/report"])
        #expect(made.status == 0, "\(made.err)")
        #expect(FileManager.default.fileExists(atPath: dir + "/new/report/simulate.json"))
    }

    @Test func anSQLiteSourceIsReadWithoutChangingItAndAnotherDatabaseIsRefusedInOneLine() async throws {
        let dir = makeTemporaryDirectory("from-sqlite")
        defer { removeDirectory(dir) }
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/sqlite3"), "the sqlite3 tool is needed (scripts/setup.sh installs it)")
        let empty = dir + "/empty.sqlite", foreign = dir + "/foreign.sqlite", store = dir + "/events.sqlite"
        for (path, sql) in [(empty, "CREATE TABLE t (x); DROP TABLE t;"), (foreign, "CREATE TABLE customers (id INTEGER);")] {
            let made = try runProcess("/usr/bin/sqlite3", [path, sql])
            #expect(made.status == 0, "\(made.err)")
        }
        do {
            let sink = try SQLiteSink(path: store)
            let lines = syntheticTraceLines(placement: "main_paywall", median: 0.5, sigma: 0.5, budget: 2, requests: 50, seed: 7)
            sink.consume(try lines.map { try Envelope(jsonValue: try JSON5.parse($0)) })
        }
        func files() throws -> [String: Data] {
            var out: [String: Data] = [:]
            for name in try FileManager.default.contentsOfDirectory(atPath: dir) where name != "state" {
                out[name] = try Data(contentsOf: URL(fileURLWithPath: dir + "/" + name))
            }
            return out
        }
        let before = try files()
        #expect(before.keys.sorted() == ["empty.sqlite", "events.sqlite", "foreign.sqlite"])

        let fitted = await flowscope("simulate", "--from", store, "--json", "--sessions", "50", "--threads", "1", "--state-dir", dir + "/state")
        #expect(fitted.status == 0, "\(fitted.err)")
        #expect(try JSON5.parse(fitted.out)["fitted"]?["main_paywall"]?["targeted"]?["requests"] == 50)
        for path in [empty, foreign] {
            let run = await flowscope("simulate", "--from", path, "--sessions", "10", "--state-dir", dir + "/state")
            #expect(run.status == 2)
            #expect(run.err == "flowscope simulate: --from \(path): not an event store written by flowscope's sqlite sink (no events table)\n")
        }
        #expect(try files() == before, "reading a source changed the files in its directory")
    }

    @Test func aStoredRunOfMoreThanOnePageIsReadWholeFromTheDocumentedURL() async throws {
        let dir = makeTemporaryDirectory("from-stored")
        defer { removeDirectory(dir) }
        let sinks = #"{ type: "memory" }, { type: "sqlite", path: "$DIR/events.sqlite" }"#
        // 700 requests, 1,400 events of run live: two pages of /api/events.
        let lines = syntheticTraceLines(placement: "main_paywall", median: 0.6, sigma: 0.5, budget: 2, requests: 700, seed: 11)
        do {
            let first = try StackFixture(sinks: sinks, dir: dir)
            #expect(try first.ingest(lines.joined(separator: "\n") + "\n").status == 202)
            first.stop()
        }
        // After a restart the memory sink holds no run: live is a stored run, and latestSeq is null.
        let second = try StackFixture(sinks: sinks, dir: dir)
        defer { second.stop() }
        #expect(try second.getJSON("/api/events?run=live")["latestSeq"] == .null)
        let base = "https://127.0.0.1:\(second.port)/api/events"
        for url in [base, base + "?run=live"] {
            let run = await flowscope(["simulate", "--from", url, "--ca", dir + "/state/tls/cert.pem", "--json", "--sessions", "50",
                                       "--threads", "1", "--state-dir", dir + "/sim"])
            #expect(run.status == 0, "\(url): \(run.err)")
            let requests = (try? JSON5.parse(run.out))?["fitted"]?["main_paywall"]?["targeted"]?["requests"]
            #expect(requests == 700, "\(url)")
        }
    }

    @Test func aServerURLWithoutARunAsksForLiveAndPagesBySince() throws {
        let url = try #require(URL(string: "https://h:1/api/events?placement=p&since=5&limit=3"))
        let page = try #require(TrafficSource.pageURL(url, since: 42))
        #expect(page.absoluteString == "https://h:1/api/events?placement=p&run=live&since=42&limit=1000")
        let named = try #require(URL(string: "https://h:1/api/events?run=test:a"))
        #expect(TrafficSource.pageURL(named, since: 0)?.absoluteString == "https://h:1/api/events?run=test:a&since=0&limit=1000")
    }

    @Test("a trace read in chunks of any size gives the same envelopes and the same line numbers in errors")
    func chunkedReading() throws {
        let dir = makeTemporaryDirectory("chunks")
        defer { removeDirectory(dir) }
        let lines = syntheticTraceLines(placement: "p", median: 0.5, sigma: 0.5, budget: 2, requests: 40, seed: 9)
        // Blank lines, a CRLF line, whitespace-only lines and no newline after the last line.
        var text = lines[0] + "\n\n" + lines[1] + "\r\n  \t\n"
        text += lines.dropFirst(2).joined(separator: "\n")
        try write(text, to: dir + "/trace.jsonl")
        guard case .success(let whole) = TrafficSource.readJSONLines(dir + "/trace.jsonl") else {
            Issue.record("the trace did not read")
            return
        }
        #expect(whole.count == lines.count)
        #expect(whole.map(\.seq) == Array(1...UInt64(lines.count)))
        for chunk in [1, 2, 3, 7, 64, 200, 1_000] {
            guard case .success(let read) = TrafficSource.readJSONLines(dir + "/trace.jsonl", chunkSize: chunk) else {
                Issue.record("chunk \(chunk): the trace did not read")
                continue
            }
            #expect(read.map(\.seq) == whole.map(\.seq), "chunk \(chunk)")
            #expect(read.map { "\($0.event)" } == whole.map { "\($0.event)" }, "chunk \(chunk)")
        }
        // A broken line 6 (after two lines, a blank one, a CRLF line and a blank one), longer than the chunks.
        try write(lines[0] + "\n" + lines[1] + "\n\n" + lines[2] + "\r\n\n{" + String(repeating: "x", count: 5_000) + "\n" + lines[3] + "\n",
                  to: dir + "/broken.jsonl")
        for chunk in [1, 5, 4_096, 1 << 20] {
            guard case .failure(let error) = TrafficSource.readJSONLines(dir + "/broken.jsonl", chunkSize: chunk) else {
                Issue.record("chunk \(chunk): a broken line was read")
                continue
            }
            #expect(error.message.contains("broken.jsonl: line 6: $"), "chunk \(chunk): \(error.message.prefix(200))")
        }
    }
}
