import TestSupport
import FlowJSON
import FlowScopeCLI
import FlowScopeStubBackend
import Foundation
import Synchronization
import Testing

/// Captures what a command prints.
final class Captured: Sendable {
    let out = Mutex<String>("")
    let err = Mutex<String>("")
    var output: Output {
        Output(out: { s in self.out.withLock { $0 += s } }, err: { s in self.err.withLock { $0 += s } }, isTerminal: false)
    }
}

@Suite("flowscope fetch and replay", .realTime)
struct FetchCommandRealTimeTests {
    static let audience = #"{"placementId":"main","audience":{"name":"All Users","versionId":"av"},"variations":[{"id":"v-A","weight":100}],"createdAt":0}"#

    @Test("fetch --json prints one object shaped like a run result, with the call's requests and events")
    func jsonShape() async throws {
        let server = try LoopbackServer { r in
            r.target.hasSuffix("/audience") ? .respond(status: 503, body: []) : .respond(status: 200, body: Array(Self.audience.utf8))
        }
        defer { server.stop() }
        let io = Captured()
        let status = await CommandLine.run(["fetch", "main", "--backend", server.baseURL.absoluteString, "--profile", "u1",
                                            "--load-timeout", "2", "--json"], output: io.output)
        #expect(status == 0, "\(io.err.withLock { $0 })")
        let json = try JSON5.parse(io.out.withLock { $0 })
        let result = try #require(json["results"]?.arrayValue?.first)
        #expect(result["call"] == "getFlow")
        #expect(result["placement"] == "main")
        #expect(result["outcome"] == "success")
        #expect(result["source"] == "defaultAudience")
        #expect(result["variation"] == "v-A")
        #expect(result["audience"] == "All Users")
        #expect(result["targetingLost"] == true)
        #expect(result["requests"] == 2)
        #expect(result["error"] == .null)
        #expect(result["startedAt"] == 0)
        #expect((result["completedAt"]?.numberValue ?? -1) >= 0)
        let requests = try #require(json["requests"]?.arrayValue)
        #expect(requests.map { $0["kind"] } == ["targeted", "default"])
        #expect(requests.map { $0["outcome"] } == ["http:503", "ok"])
        for r in requests { #expect(Set(r.objectValue?.keys ?? [:].keys) == ["step", "placement", "kind", "issuedAt", "endedAt", "outcome"]) }
        let events = try #require(json["events"]?.arrayValue)
        #expect(events.first?["name"] == "fetch.start")
        #expect(events.last?["name"] == "fetch.end")
        for e in events { #expect(Set(e.objectValue?.keys ?? [:].keys) == ["step", "t", "name", "placement", "attrs"]) }
        #expect(server.requests.first?.headers["x-profile-id"] == "u1")
    }

    @Test("fetch against a closed port fails with exit 1 and prints the timeline")
    func refused() async throws {
        let port = LoopbackServer.closedPort()
        let io = Captured()
        // A refusal arrives in milliseconds; the budget is generous so that a loaded machine cannot turn it into a timeout.
        let status = await CommandLine.run(["fetch", "main", "--backend", "http://127.0.0.1:\(port)", "--load-timeout", "10"], output: io.output)
        #expect(status == 1)
        let out = io.out.withLock { $0 }
        #expect(out.contains("error 2005 networkFailed"))
        #expect(out.contains("targeted main  refused"))
    }

    @Test("bad fetch flags exit 2 naming the flag", arguments: [
        (["fetch", "main"], "--backend URL is required"),
        (["fetch", "main", "--backend", "ftp://x"], "--backend ftp://x"),
        (["fetch", "main", "--backend", "http://127.0.0.1:1", "--policy", "sometimes"], "--policy sometimes"),
        (["fetch", "main", "--backend", "http://127.0.0.1:1", "--policy", "maxAge:-3"], "--policy maxAge:-3"),
        (["fetch", "main", "--backend", "http://127.0.0.1:1", "--load-timeout", "soon"], "--load-timeout soon"),
        (["fetch", "main", "--backend", "http://127.0.0.1:1", "--load-timeout", "0x10"], "--load-timeout 0x10: expected a number of seconds from 0 to 1000000000"),
        (["fetch", "main", "--backend", "http://127.0.0.1:1", "--load-timeout", "1e10"], "--load-timeout 1e10"),
        (["fetch", "main", "--backend", "http://127.0.0.1:1", "--policy", "maxAge:0x10"], "--policy maxAge:0x10"),
        (["fetch", "main", "--backend", "http://127.0.0.1:1", "--policy", "maxAge:1e10"], "--policy maxAge:1e10"),
        (["fetch", "main", "--backend", "http://127.0.0.1:1", "--cache-dir", ""], "--cache-dir: expected a directory, got an empty value"),
        (["fetch", "main", "--backend", "http://127.0.0.1:1", "--profile", "u1\r\nX-Evil: 1"], "--profile: expected a profile id without control characters"),
        (["fetch", "main", "--backend", "http://127.0.0.1:1", "--cache-dir", "/proc/nope"], "--cache-dir: /proc/nope: cannot create the directory: "),
        (["fetch", "main", "--backend", "http://127.0.0.1:1", "--cache-dir", "/dev/null"], "--cache-dir: /dev/null: not a directory"),
        (["fetch", "main", "--backend", "http://127.0.0.1:1", "--cache-dir", "/dev/null/a/b"], "--cache-dir: /dev/null: not a directory"),
        (["fetch", "main", "--backend", "https://127.0.0.1:1", "--ca", "/etc/hostname"],
         "--ca /etc/hostname: expected a PEM certificate (-----BEGIN CERTIFICATE-----), found none"),
        (["fetch", "main", "--backend", "http://127.0.0.1:1", "--ca", "/etc/hostname"], "--ca /etc/hostname: applies to https:// backends only"),
        (["fetch", "main", "--backend", "https://127.0.0.1:1", "--ca", "/nonexistent/ca.pem"], "--ca /nonexistent/ca.pem: not found"),
    ])
    func badFlags(arguments: [String], fragment: String) async {
        let io = Captured()
        let status = await CommandLine.run(arguments, output: io.output)
        #expect(status == 2)
        #expect(io.err.withLock { $0 }.contains(fragment), "\(io.err.withLock { $0 })")
    }

    @Test("fetch --ca trusts the stub backend's self-signed certificate over HTTPS; without --ca, or with another certificate, the error line says the certificate was not trusted and names --ca")
    func fetchWithCustomCA() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("flowscope-fetch-ca-\(UUID())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let made = try runProgram("/usr/bin/env", ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                                                   "-keyout", dir + "/key.pem", "-out", dir + "/cert.pem", "-days", "1", "-subj", "/CN=localhost",
                                                   "-addext", "subjectAltName=IP:127.0.0.1"])
        try #require(made.status == 0, "openssl could not make a certificate: \(made.output)")
        let tls = (try String(contentsOfFile: dir + "/cert.pem", encoding: .utf8), try String(contentsOfFile: dir + "/key.pem", encoding: .utf8))
        let stub = try StubBackendServer(tls: tls) { r in
            r.rawPath.hasSuffix("/audience")
                ? StubPlan(.respond(status: 200, body: Array(Self.audience.utf8), contentType: "application/json"))
                : StubPlan(.respond(status: 404, body: [], contentType: "text/plain"))
        }
        defer { stub.stop() }
        #expect(stub.baseURL.hasPrefix("https://"))

        let trusted = Captured()
        let ok = await CommandLine.run(["fetch", "main", "--backend", stub.baseURL, "--ca", dir + "/cert.pem", "--load-timeout", "5"],
                                       output: trusted.output)
        #expect(ok == 0, "\(trusted.err.withLock { $0 })")
        #expect(trusted.out.withLock { $0 }.contains("targeted main  ok"), "\(trusted.out.withLock { $0 })")

        let untrusted = Captured()
        let refused = await CommandLine.run(["fetch", "main", "--backend", stub.baseURL, "--load-timeout", "5"], output: untrusted.output)
        #expect(refused == 1)
        let untrustedText = untrusted.out.withLock { $0 }
        #expect(untrustedText.contains("targeted main  tls"), "\(untrustedText)")
        #expect(untrustedText.hasPrefix("main: error 2005 networkFailed: the server's certificate was not trusted (TLS); "
                                        + "pass --ca FILE with the server's certificate or its CA, e.g. .flowscope/tls/cert.pem "
                                        + "for a FlowScope server or stub backend\n"), "\(untrustedText)")
        #expect(!untrustedText.contains("transport error"), "\(untrustedText)")

        let other = try runProgram("/usr/bin/env", ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                                                    "-keyout", dir + "/other-key.pem", "-out", dir + "/other.pem", "-days", "1", "-subj", "/CN=localhost",
                                                    "-addext", "subjectAltName=IP:127.0.0.1"])
        try #require(other.status == 0, "openssl could not make a certificate: \(other.output)")
        let wrongCA = Captured()
        let wrong = await CommandLine.run(["fetch", "main", "--backend", stub.baseURL, "--ca", dir + "/other.pem", "--load-timeout", "5", "--json"],
                                          output: wrongCA.output)
        #expect(wrong == 1)
        let json = try JSON5.parse(wrongCA.out.withLock { $0 })
        #expect(json["results"]?.arrayValue?.first?["error"]?["message"]?.stringValue
                == "the server's certificate was not trusted by --ca \(dir)/other.pem (TLS); pass the certificate the server presents, or the CA that signed it",
                "\(wrongCA.out.withLock { $0 })")
    }

    @Test("stub-backend rejects bad flags and bad scenario files with exit 2", arguments: [
        (["stub-backend", "--port", "70000"], "flowscope stub-backend: --port expects a port number 0-65535, got 70000"),
        (["stub-backend", "--scenario", "/nonexistent.json5"], "--scenario /nonexistent.json5: not found"),
    ])
    func stubBackendFlags(arguments: [String], fragment: String) async {
        let io = Captured()
        #expect(await CommandLine.run(arguments, output: io.output) == 2)
        #expect(io.err.withLock { $0 }.contains(fragment), "\(io.err.withLock { $0 })")
    }

    @Test("replay prints a trace file as a timeline; a bad line is an error naming file and line")
    func replay() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("flowscope-replay-\(UUID())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let trace = "0123456789abcdef0123456789abcdef", span = "0123456789abcdef"
        let lines = [
            #"{"seq":1,"ts":"2026-12-02T10:11:12.000000Z","t":100,"run":"T.test","trace":"\#(trace)","span":"\#(span)","name":"fetch.start","placement":"main","attrs":{"call":"getFlow","policy":"reloadRevalidatingCacheData","loadTimeout":1}}"#,
            #"{"seq":2,"ts":"2026-12-02T10:11:12.000000Z","t":100,"run":"T.test","trace":"\#(trace)","span":"1123456789abcdef","name":"request.start","placement":"main","attrs":{"kind":"targeted","timeout":0.5}}"#,
            #"{"seq":3,"ts":"2026-12-02T10:11:12.500000Z","t":100.5,"run":"T.test","trace":"\#(trace)","span":"1123456789abcdef","name":"request.end","placement":"main","attrs":{"kind":"targeted","outcome":"timeout"}}"#,
            #"{"seq":4,"ts":"2026-12-02T10:11:13.000000Z","t":101,"run":"T.test","trace":"\#(trace)","span":"\#(span)","name":"fetch.end","placement":"main","attrs":{"call":"getFlow","source":"fallbackFile","variation":"fb-A","audience":"All Users","targetingLost":true}}"#,
        ]
        try (lines.joined(separator: "\n") + "\n").write(toFile: dir + "/t.jsonl", atomically: true, encoding: .utf8)
        let io = Captured()
        #expect(await CommandLine.run(["replay", dir + "/t.jsonl"], output: io.output) == 0)
        let out = io.out.withLock { $0 }
        #expect(out.contains("run T.test"))
        #expect(out.contains("0.000s -> 1.000s  getFlow main  fallbackFile fb-A (All Users) targetingLost  (1 request)"), "\(out)")
        #expect(out.contains("0.000s -> 0.500s  targeted main  timeout"), "\(out)")

        try (lines[0] + "\n{\"seq\": 2}\n").write(toFile: dir + "/bad.jsonl", atomically: true, encoding: .utf8)
        let bad = Captured()
        #expect(await CommandLine.run(["replay", dir + "/bad.jsonl"], output: bad.output) == 2)
        #expect(bad.err.withLock { $0 }.contains("bad.jsonl:2: $.ts: "), "\(bad.err.withLock { $0 })")
        // --serve serves until stopped; a bad --port is refused before anything starts.
        #expect(await CommandLine.run(["replay", dir + "/t.jsonl", "--serve", "--port", "x"], output: Captured().output) == 2)
    }

    @Test("replay without --serve refuses --port and --config (they need --serve), and --serve refuses --events: exit 2, one line naming the flag")
    func replayFlagsOfTheOtherMode() async throws {
        let dir = (makeTemporaryDirectory("replay-flags") as NSString).standardizingPath
        defer { removeDirectory(dir) }
        try write("", to: dir + "/t.jsonl")
        let cases: [([String], String)] = [
            (["--port", "5"], "flowscope replay: --port needs --serve (it applies to the dashboard --serve starts)\n"),
            (["--config", dir + "/nonexistent.json5"], "flowscope replay: --config needs --serve (it applies to the dashboard --serve starts)\n"),
            (["--port", "5", "--config", "nonexistent"], "flowscope replay: --config and --port need --serve (they apply to the dashboard --serve starts)\n"),
            (["--events", "--serve"], "flowscope replay: --events prints the timeline, which --serve does not print; give one or the other\n"),
        ]
        for (extra, message) in cases {
            let run = await flowscope(["replay", dir + "/t.jsonl"] + extra)
            #expect(run.status == 2, "\(extra): \(run.out)")
            #expect(run.err == message, "\(extra)")
            #expect(run.out.isEmpty, "\(extra)")
        }
        let plain = await flowscope("replay", dir + "/t.jsonl", "--events")
        #expect(plain.status == 0 && plain.out == "\(dir)/t.jsonl: no events\n", "\(plain.err)")
    }

    @Test("replay shows engine-level events (attribution observed, profile switch) as one line at their time, not as calls that never end; a call in flight stays pending")
    func replayEngineEvents() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("flowscope-replay-engine-\(UUID())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        func line(_ seq: Int, _ t: Double, _ trace: String, _ span: String, _ name: String, _ placement: String?, _ attrs: String) -> String {
            #"{"seq":\#(seq),"ts":"2026-12-02T10:11:12.000000Z","t":\#(t),"run":"live","trace":"\#(trace)","span":"\#(span)","name":"\#(name)","placement":\#(placement.map { "\"\($0)\"" } ?? "null"),"attrs":\#(attrs)}"#
        }
        let done = "0123456789abcdef0123456789abcde1", attribution = "0123456789abcdef0123456789abcde2"
        let profile = "0123456789abcdef0123456789abcde3", inFlight = "0123456789abcdef0123456789abcde4"
        let lines = [
            line(1, 10, done, "0000000000000001", "fetch.start", "main", #"{"call":"getFlow","policy":"reloadRevalidatingCacheData","loadTimeout":3}"#),
            line(2, 10, done, "0000000000000002", "request.start", "main", #"{"kind":"targeted","timeout":2.5}"#),
            line(3, 10.2, done, "0000000000000002", "request.end", "main", #"{"kind":"targeted","outcome":"ok","status":200,"duration":0.2,"bytes":40}"#),
            line(4, 10.2, done, "0000000000000001", "fetch.end", "main", #"{"call":"getFlow","source":"network","variation":"v-A","audience":"All Users","targetingLost":false,"duration":0.2}"#),
            line(5, 10.534, attribution, "0000000000000003", "attribution.applied", nil, #"{"source":"appleAds","after":0.534}"#),
            line(6, 11, profile, "0000000000000004", "profile.changed", nil, #"{"from":"u1","to":"u2"}"#),
            line(7, 11, profile, "0000000000000005", "request.start", nil, #"{"kind":"profile","timeout":5}"#),
            line(8, 11.1, profile, "0000000000000005", "request.end", nil, #"{"kind":"profile","outcome":"ok","status":200,"duration":0.1,"bytes":20}"#),
            line(9, 12, inFlight, "0000000000000006", "fetch.start", "promo", #"{"call":"getFlow","policy":"reloadRevalidatingCacheData","loadTimeout":3}"#),
            line(10, 12, inFlight, "0000000000000007", "request.start", "promo", #"{"kind":"targeted","timeout":2.5}"#),
        ]
        try (lines.joined(separator: "\n") + "\n").write(toFile: dir + "/t.jsonl", atomically: true, encoding: .utf8)
        let io = Captured()
        #expect(await CommandLine.run(["replay", dir + "/t.jsonl"], output: io.output) == 0)
        let out = io.out.withLock { $0 }
        #expect(out == """
            run live  (10 events, from 2026-12-02T10:11:12.000000Z)
              0.000s -> 0.200s  getFlow main  network v-A (All Users)  (1 request)
                    0.000s -> 0.200s  targeted main  ok
              0.534s  attribution.applied  after=0.534 source="appleAds"
              1.000s  profile.changed  from="u1" to="u2"
                    1.000s -> 1.100s  profile  ok
              2.000s -> never  getFlow promo  pending  (1 request)
                    2.000s -> never  targeted promo  open

            """, "\(out)")
        #expect(!out.contains("attribution.applied  pending") && !out.contains("profile.changed  pending"), "\(out)")

        let events = Captured()
        #expect(await CommandLine.run(["replay", dir + "/t.jsonl", "--events"], output: events.output) == 0)
        let withEvents = events.out.withLock { $0 }
        #expect(withEvents.contains("""
              0.534s  attribution.applied  after=0.534 source="appleAds"
              1.000s  profile.changed  from="u1" to="u2"
                    1.000s -> 1.100s  profile  ok
                      1.000s request.start  kind="profile" timeout=5
                      1.100s request.end  bytes=20 duration=0.1 kind="profile" outcome="ok" status=200
              2.000s -> never  getFlow promo  pending  (1 request)

            """), "\(withEvents)")
    }
}
