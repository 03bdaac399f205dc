import TestSupport
import FlowEvents
import FlowFetch
import FlowJSON
@testable import FlowScopeTesting
import FlowSim
import Foundation
import Synchronization
import Testing

/// A value shared between tasks.
final class Shared<Value: Sendable>: Sendable {
    private let m: Mutex<Value>
    init(_ v: Value) { m = Mutex(v) }
    func withLock<R>(_ body: (inout Value) -> R) -> R { m.withLock { body(&$0) } }
}

/// Wall-clock time whose deadlines never fire: for tests whose backend answers at once, so that a
/// cooperative pool starved by other suites cannot turn an answer into a timeout.
struct NoDeadlineClock: EngineClock {
    func now() -> EngineTime { SystemClock().now() }
    func sleep(until deadline: EngineTime) async throws { try await Task.sleep(for: .seconds(86_400)) }
    func schedule(at deadline: EngineTime, _ action: @escaping @Sendable () -> Void) -> @Sendable () -> Void { {} }
}

enum Fixtures {
    static let audiences: [AudienceDefinition] = [
        AudienceDefinition(name: "ASA", versionId: "av-asa", requiresAttribution: "appleAds", variations: [Variation(id: "asa-A", weight: 100)]),
        AudienceDefinition(name: "All Users", versionId: "av-all", variations: [Variation(id: "all-A", weight: 50), Variation(id: "all-B", weight: 50)]),
    ]
    static let placements = ["main": PlacementBackend(audiences: audiences), "onboarding": PlacementBackend(audiences: audiences)]

    static func live(latency: Double = 0.01, rules: [NetworkRule] = []) -> LiveSandboxBackend {
        LiveSandboxBackend(SandboxBackend(placements: placements, network: NetworkRules(latency: latency, rules: rules),
                                          profiles: [ScenarioProfile(id: "user-42")]))
    }

    static func temporaryDirectory() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("flowscope-kit-\(UUID().uuidString)").path
    }
}

/// Two traced tests that run at the same time (Swift Testing runs tests in parallel): each sees only its own events.
@Suite("Trace isolation between parallel tests", .flowTrace, .ownThread)
struct TraceIsolationTests {
    static func exercise(_ placement: String) async throws {
        let recorder = try #require(FlowTrace.current)
        let client = FlowClient(profile: Profile(id: "user-42"), backend: Fixtures.live(latency: 0.03), events: FlowTrace.sink,
                                clock: NoDeadlineClock())
        for _ in 0..<5 { _ = try await client.getFlow(placementId: placement, loadTimeout: 30) }
        let placements = Set(recorder.events.compactMap(\.placement))
        #expect(placements == [placement], "\(recorder.name) saw \(placements)")
        #expect(recorder.timeline.calls.count == 5)
        expectFlow(placement, source: .network, requests: 1)
    }

    @Test("the first test sees only main")
    func first() async throws { try await Self.exercise("main") }

    @Test("the second test sees only onboarding")
    func second() async throws { try await Self.exercise("onboarding") }
}

@Suite("Test kit", .ownThread)
struct FlowTraceTests {
    @Test("concurrent withFlowTrace scopes record disjoint traces, and the sink follows the task-local recorder")
    func concurrentScopes() async throws {
        let names = Shared<[String: Set<String>]>([:])
        await withTaskGroup(of: Void.self) { group in
            for placement in ["main", "onboarding"] {
                group.addTask {
                    await withFlowTrace("scope-\(placement)", environment: [:]) {
                        // One shared sink value made outside any scope: it records into whichever test is current.
                        let client = FlowClient(profile: Profile(id: "user-42"), backend: Fixtures.live(latency: 0.02),
                                                events: FlowTraceSink(recorder: nil))
                        for _ in 0..<3 { _ = try? await client.getFlow(placementId: placement, loadTimeout: 30) }
                        let seen = Set(FlowTrace.current?.events.compactMap(\.placement) ?? [])
                        names.withLock { $0[placement] = seen }
                    }
                }
            }
        }
        #expect(names.withLock { $0 } == ["main": ["main"], "onboarding": ["onboarding"]])
        #expect(FlowTrace.current == nil)
    }

    @Test("FLOWSCOPE_TRACE_DIR leaves one JSON Lines file per traced test, named after the test, one envelope per line")
    func traceDirectory() async throws {
        let dir = Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let env = ["FLOWSCOPE_TRACE_DIR": dir]
        for (name, placement) in [("Suite.first test/α", "main"), ("Suite.second", "onboarding")] {
            await withFlowTrace(name, environment: env) {
                let client = FlowClient(profile: Profile(id: "user-42"), backend: Fixtures.live(), events: FlowTrace.sink)
                _ = try? await client.getFlow(placementId: placement, loadTimeout: 30)
            }
        }
        await withFlowTrace("Suite.untraced", environment: [:]) {}
        let files = try FileManager.default.contentsOfDirectory(atPath: dir).sorted()
        #expect(files == ["Suite.first_test", "Suite.second"].map { $0 + ".jsonl" })
        let text = try String(contentsOfFile: dir + "/Suite.second.jsonl", encoding: .utf8)
        let lines = text.split(separator: "\n")
        #expect(lines.count >= 4)
        for line in lines {
            let v = try JSON5.parse(String(line))
            #expect(v["run"] == .string("test:\(TestInvocation.current.id):Suite.second"))
            #expect(v["placement"] == "onboarding" || v["placement"] == .null)
        }
        // The test's own start and end (with its verdict) frame the engine's events.
        #expect(try JSON5.parse(String(lines[0]))["name"] == "test.start")
        #expect(try JSON5.parse(String(lines[1]))["name"] == "fetch.start")
        let end = try JSON5.parse(String(lines[lines.count - 1]))
        #expect(end["name"] == "test.end" && end["attrs"]?["status"] == "passed")
    }

    @Test("file names are sanitized and bounded")
    func fileNames() {
        #expect(FlowTraceRecorder.fileName(for: "a b/../c") == "a_b_.._c")
        #expect(FlowTraceRecorder.fileName(for: "../../etc/passwd") == "_.._etc_passwd")
        #expect(FlowTraceRecorder.fileName(for: "") == "test")
        let long = FlowTraceRecorder.fileName(for: String(repeating: "x", count: 500))
        #expect(long.utf8.count <= 120)
    }

    @Test("a failing expectation reports the call's timeline: its requests and events")
    func failingExpectationPrintsTimeline() async throws {
        let messages = Shared<[String]>([])
        let recorder = FlowTraceRecorder(name: "timeline", environment: [:]) { m, _ in messages.withLock { $0.append(m) } }
        // Virtual time: the outcome does not depend on how loaded the machine is.
        let harness = VirtualHarness(scenario: try Scenario.decode(VirtualHarnessTests.text, file: "inline"),
                                     events: FlowTraceSink(recorder: recorder))
        let flow = try await harness.getFlow(placementId: "main", fetchPolicy: .reloadRevalidatingCacheData, loadTimeout: 1)
        #expect(flow.source == .defaultAudience)
        #expect(recorder.expectFlow("main", source: .defaultAudience, targetingLost: true, requests: 2))
        #expect(recorder.expectTimeout("main", stage: .targeted))
        #expect(recorder.expectFallback("main", to: .defaultAudience))
        #expect(recorder.expectRequests(1, placement: "main", kind: .default))
        #expect(messages.withLock { $0 }.isEmpty)

        #expect(!recorder.expectFlow("main", source: .cache))
        #expect(!recorder.expectFallback("main", to: .fallbackFile))
        #expect(!recorder.expectRequests(5))
        let first = try #require(messages.withLock { $0.first })
        #expect(first.contains("source: expected cache, got defaultAudience"))
        #expect(first.contains("targeted main  timeout"), "\(first)")
        #expect(first.contains("default main  ok"), "\(first)")
        #expect(first.contains("fallback"), "\(first)")
        #expect(messages.withLock { $0.count } == 3)
    }

    @Test("FLOWSCOPE_ATTACH streams events to /api/ingest as JSON Lines with the bearer token, run = the test name", .realTime)
    func attach() async throws {
        let server = try LoopbackServer { _ in .respond(status: 202, body: Array(#"{"accepted":1}"#.utf8)) }
        defer { server.stop() }
        let env = ["FLOWSCOPE_ATTACH": "http://127.0.0.1:\(server.port)", "FLOWSCOPE_TOKEN": "s3cret"]
        let (recorded, run) = await withFlowTrace("attached test", environment: env) { () -> (Int, String) in
            let client = FlowClient(profile: Profile(id: "user-42"), backend: Fixtures.live(), events: FlowTrace.sink)
            _ = try? await client.getFlow(placementId: "main", loadTimeout: 30)
            return ((FlowTrace.current?.envelopes.count ?? 0) + 1, FlowTrace.current?.run ?? "")  // + test.end
        }
        #expect(run == "test:\(TestInvocation.current.id):attached test")
        let posts = server.requests
        #expect(!posts.isEmpty)
        #expect(posts.allSatisfy { $0.method == "POST" && $0.target == "/api/ingest" && $0.headers["authorization"] == "Bearer s3cret" })
        let lines = posts.flatMap { String(decoding: $0.body, as: UTF8.self).split(separator: "\n") }
        #expect(lines.count == recorded)
        for line in lines { #expect(try JSON5.parse(String(line))["run"] == .string(run)) }
    }

    @Test("a test name too long for a run still leaves a trace file and a stream that decode, and long names stay apart", .realTime)
    func attachLongNames() async throws {
        let dir = Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let server = try LoopbackServer { _ in .respond(status: 202, body: Array(#"{"accepted":1}"#.utf8)) }
        defer { server.stop() }
        let env = ["FLOWSCOPE_TRACE_DIR": dir, "FLOWSCOPE_ATTACH": "http://127.0.0.1:\(server.port)"]
        let base = "LongSuite." + String(repeating: "aVeryLongTestName", count: 16) + "_end_" // 288 bytes with the ending
        var runs: [String] = []
        for ending in ["x", "y"] {
            let run = await withFlowTrace(base + ending, environment: env) { () -> String in
                let client = FlowClient(profile: Profile(id: "user-42"), backend: Fixtures.live(), events: FlowTrace.sink)
                _ = try? await client.getFlow(placementId: "main", loadTimeout: 30)
                return FlowTrace.current?.run ?? ""
            }
            #expect((base + ending).utf8.count == 288)
            #expect(run.utf8.count <= 256 && run.hasPrefix("test:\(TestInvocation.current.id):LongSuite.aVeryLongTestName"))
            runs.append(run)
        }
        #expect(runs[0] != runs[1])
        let files = try FileManager.default.contentsOfDirectory(atPath: dir)
        #expect(files.count == 2)
        var fileRuns: Set<String> = []
        for file in files {
            let lines = try String(contentsOfFile: dir + "/" + file, encoding: .utf8).split(separator: "\n")
            #expect(!lines.isEmpty)
            // What `flowscope replay` does with each line.
            for line in lines { fileRuns.insert(try Envelope(jsonValue: JSON5.parse(String(line))).run) }
        }
        #expect(fileRuns == Set(runs))
        let streamed = server.requests.flatMap { String(decoding: $0.body, as: UTF8.self).split(separator: "\n") }
        #expect(!streamed.isEmpty)
        // What `POST /api/ingest` does with each line.
        let streamedRuns = try Set(streamed.map { try Envelope(jsonValue: JSON5.parse(String($0))).run })
        #expect(streamedRuns == Set(runs))
    }

    static func attachFailure(_ attach: String, _ extra: [String: String] = [:]) async -> String? {
        let recorder = FlowTraceRecorder(name: "attach failure", environment: extra.merging(["FLOWSCOPE_ATTACH": attach]) { a, _ in a })
        recorder.record(EngineEvent(name: .fetchStart, t: 0, placement: "main", trace: TraceID(high: 1, low: 1), span: SpanID(raw: 1)))
        await recorder.finish()
        return recorder.attachFailure
    }

    @Test("a server that refuses the stream is reported with its reason: the JSON error body's message, else the body's text", .realTime)
    func attachRefusedReason() async throws {
        let json = try LoopbackServer { _ in
            .respond(status: 400, body: Array(#"{"error":{"status":400,"message":"$[0].run: expected a run name of 1 to 256 bytes"}}"#.utf8))
        }
        defer { json.stop() }
        #expect(await Self.attachFailure("http://127.0.0.1:\(json.port)")
                == "FLOWSCOPE_ATTACH=http://127.0.0.1:\(json.port)/api/ingest: the server answered 400: $[0].run: expected a run name of 1 to 256 bytes")
        let text = try LoopbackServer { _ in .respond(status: 502, body: Array("bad gateway\n".utf8), contentType: "text/plain") }
        defer { text.stop() }
        #expect(await Self.attachFailure("http://127.0.0.1:\(text.port)")
                == "FLOWSCOPE_ATTACH=http://127.0.0.1:\(text.port)/api/ingest: the server answered 502: bad gateway")
        let empty = try LoopbackServer { _ in .respond(status: 401, body: []) }
        defer { empty.stop() }
        #expect(await Self.attachFailure("http://127.0.0.1:\(empty.port)")
                == "FLOWSCOPE_ATTACH=http://127.0.0.1:\(empty.port)/api/ingest: the server answered 401")
    }

    @Test("a batch refused with 503 is sent again after the wait the server asks, and arrives once", .realTime)
    func attachRetriesRefusedBatch() async throws {
        let answered = Atomic<Int>(0)
        let server = try LoopbackServer { _ in
            // The first two answers refuse, as serve does while a durable sink is behind.
            if answered.add(1, ordering: .relaxed).newValue <= 2 {
                return .respond(status: 503, body: Array(#"{"error":{"status":503,"message":"sink sqlite is behind; nothing of this batch was stored; retry after 1 s","retryAfter":1}}"#.utf8))
            }
            return .respond(status: 202, body: Array(#"{"accepted":1}"#.utf8))
        }
        defer { server.stop() }
        let recorder = FlowTraceRecorder(name: "attach retry", environment: ["FLOWSCOPE_ATTACH": "http://127.0.0.1:\(server.port)"])
        for i in 0..<3 {
            recorder.record(EngineEvent(name: .fetchStart, t: Double(i), placement: "main", trace: TraceID(high: 1, low: 1), span: SpanID(raw: UInt64(i + 1))))
        }
        let start = Date()
        await recorder.finish()
        #expect(recorder.attachFailure == nil)
        #expect(Date().timeIntervalSince(start) >= 1.9, "waited Retry-After (1 s) twice")
        let posts = server.requests
        #expect(posts.count == 3)
        #expect(posts.allSatisfy { $0.body == posts[0].body }, "the same batch each time")
        #expect(String(decoding: posts[0].body, as: UTF8.self).split(separator: "\n").count == 5, "test.start, 3 events, test.end")
    }

    @Test("a batch still refused after FLOWSCOPE_ATTACH_RETRY seconds is given up and reported with how many events were not delivered", .realTime)
    func attachGivesUpAndReports() async throws {
        let server = try LoopbackServer { _ in
            .respond(status: 503, body: Array(#"{"error":{"status":503,"message":"sink sqlite is behind; nothing of this batch was stored; retry after 1 s","retryAfter":1}}"#.utf8))
        }
        defer { server.stop() }
        let start = Date()
        let failure = await Self.attachFailure("http://127.0.0.1:\(server.port)", ["FLOWSCOPE_ATTACH_RETRY": "2"])
        #expect(Date().timeIntervalSince(start) < 10)
        #expect(failure == "FLOWSCOPE_ATTACH=http://127.0.0.1:\(server.port)/api/ingest: the server refused a batch 3 times in 2 s "
                + "(503: sink sqlite is behind; nothing of this batch was stored; retry after 1 s); 3 events not delivered (FLOWSCOPE_ATTACH_RETRY=2)")
        #expect(server.requests.count == 3)
    }

    @Test("a FLOWSCOPE_ATTACH without a scheme is reported as expecting what is accepted: http:// or https://", .realTime)
    func attachBadURL() async throws {
        #expect(await Self.attachFailure("localhost:18446") == "FLOWSCOPE_ATTACH=localhost:18446: expected http://host:port or https://host:port")
        #if canImport(FoundationNetworking)
        let v6 = await Self.attachFailure("http://[::1]:18446")
        #expect(v6?.hasPrefix("FLOWSCOPE_ATTACH=http://[::1]:18446: URLSession on this platform cannot reach an IPv6 address literal") == true,
                "\(v6 ?? "nil")")
        #endif
    }

    @Test("an attach server that is down never fails the test", .realTime)
    func attachDown() async throws {
        let env = ["FLOWSCOPE_ATTACH": "http://127.0.0.1:\(LoopbackServer.closedPort())"]
        let count = await withFlowTrace("attach down", environment: env) { () -> Int in
            let client = FlowClient(profile: Profile(id: "user-42"), backend: Fixtures.live(), events: FlowTrace.sink)
            _ = try? await client.getFlow(placementId: "main", loadTimeout: 30)
            return FlowTrace.current?.envelopes.count ?? 0
        }
        #expect(count >= 3)
    }
}

/// A traced test whose suite and function names together are longer than a run may be.
@Suite(.flowTrace, .ownThread)
struct TraceOfALongNamedTest {
    @Test func thisTestFunctionHasAVeryLongNameBecauseReviewersNoticedThatLongTestNamesMadeTraceFilesThatFlowScopeItselfRefusedToReplayAndAttachedServersAnsweredWithStatus400SoTheRunNameIsNowCutToTwoHundredAndFiftySixBytesOnACharacterBoundaryWithAShortStableHashSuffixToKeepDistinctNamesDistinct() throws {
        let recorder = try #require(FlowTrace.current)
        #expect("TraceOfALongNamedTest.".utf8.count + #function.utf8.count - 2 > 256)
        #expect(recorder.name.utf8.count <= 256 && recorder.name.hasPrefix("TraceOfALongNamedTest.thisTestFunctionHasAVeryLongName"))
        recorder.record(EngineEvent(name: .fetchStart, t: 0, placement: "main", trace: TraceID(high: 1, low: 1), span: SpanID(raw: 1)))
        let line = try #require(recorder.envelopes.last?.jsonLine)
        #expect(try Envelope(jsonValue: JSON5.parse(line)).run == recorder.run)
        #expect(recorder.run == Envelope.runName("test:\(TestInvocation.current.id):\(recorder.name)"))
    }
}
