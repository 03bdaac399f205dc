import TestSupport
import FlowEvents
import FlowFetch
import FlowJSON
@testable import FlowScopeTesting
import FlowScopeStubBackend
import FlowSim
import Foundation
import TestSupport
import Testing

/// Traced tests that fail on purpose, run only in the child process of ``FlowTraceVerdictTests``
/// (FLOWSCOPE_DELIBERATE_FAILURES=1): elsewhere they are disabled.
@Suite(.flowTrace, .enabled(if: ProcessInfo.processInfo.environment["FLOWSCOPE_DELIBERATE_FAILURES"] == "1"), .ownThread)
struct DeliberateFailures {
    struct Broken: Error {}

    /// The harness of VirtualHarnessTests: the targeted request hangs, the default audience answers.
    static func defaultAudienceCall() async throws -> Flow {
        let harness = VirtualHarness(scenario: try Scenario.decode(VirtualHarnessTests.text, file: "inline"))
        return try await harness.getFlow(placementId: "main", fetchPolicy: .reloadRevalidatingCacheData, loadTimeout: 1)
    }

    @Test func plainExpect() async throws {
        let flow = try await Self.defaultAudienceCall()
        #expect(flow.source == .network)
    }

    @Test func thrownError() async throws {
        _ = try await Self.defaultAudienceCall()
        throw Broken()
    }

    @Test func failedRequire() async throws {
        let flow = try await Self.defaultAudienceCall()
        _ = try #require(flow.source == .cache ? flow : nil)
    }

    @Test func ownExpectation() async throws {
        _ = try await Self.defaultAudienceCall()
        expectFallback("main", to: .fallbackFile)
    }

    @Test func passes() async throws {
        let flow = try await Self.defaultAudienceCall()
        #expect(flow.source == .defaultAudience)
        withKnownIssue { #expect(Bool(false), "a known issue is not a failure") }
    }

    @Test func cancelled() throws {
        try Test.cancel("not on this platform")
    }

    @Test func realClient() async throws {
        let stub = try StubBackendServer(scenario: try StubBackendRealTimeTests.scenario(targeted: "http:503"))
        defer { stub.stop() }
        let o = try await StubBackendRealTimeTests.fetch(stub.baseURL, loadTimeout: 5)
        #expect(try o.result.get().source == .network)
    }
}

/// The `.flowTrace` trait's verdict and failure output, seen as a user sees them: ``DeliberateFailures``
/// run in a child process of this test binary, its output and trace files read back.
@Suite("Test verdicts from Swift Testing", .ownThread)
struct FlowTraceVerdictTests {
    struct Child {
        var status: Int32
        var output: String
        /// Each test's trace file, by test name: its envelopes.
        var traces: [String: [Envelope]]
        /// FLOWSCOPE_TRACE_DIR of the child (removed once read).
        var directory: String
        /// The scenario files the child wrote there, by path: their text.
        var scenarios: [String: String]

        func end(_ test: String) -> EventAttributes? {
            traces["DeliberateFailures.\(test)"]?.last { $0.name == .testEnd }?.event.attrs
        }

        /// The lines of the output from test `test`'s first issue up to the next test's line.
        func failureOutput(_ test: String) -> String {
            let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
            guard let first = lines.firstIndex(where: { $0.contains("Test \(test)()") && $0.contains("recorded an issue") }) else { return "" }
            let rest = lines[(first + 1)...]
            let last = rest.firstIndex { $0.contains("Test ") && ($0.contains(" passed ") || $0.contains(" failed ") || $0.contains(" recorded ")) } ?? rest.endIndex
            return lines[first..<last].joined(separator: "\n")
        }
    }

    /// Runs ``DeliberateFailures`` in a child process of this test binary (killed by `timeout` after 120 s).
    static let child: Result<Child, any Error> = Result {
        let dir = Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var env = ProcessInfo.processInfo.environment
        env["FLOWSCOPE_DELIBERATE_FAILURES"] = "1"
        env["FLOWSCOPE_TRACE_DIR"] = dir
        env["FLOWSCOPE_INVOCATION"] = "verdicts-1"
        env["NO_COLOR"] = "1"
        for key in ["FLOWSCOPE_ATTACH", "FLOWSCOPE_ATTACH_REQUIRED"] { env[key] = nil }
        let run = try runProgram("/usr/bin/timeout", ["-s", "KILL", "120", CommandLine.arguments[0], "--testing-library", "swift-testing",
                                                      "--filter", "DeliberateFailures"], environment: env)
        var traces: [String: [Envelope]] = [:]
        for file in try FileManager.default.contentsOfDirectory(atPath: dir) where file.hasSuffix(".jsonl") {
            let text = try String(contentsOfFile: dir + "/" + file, encoding: .utf8)
            traces[String(file.dropLast(6))] = try text.split(separator: "\n").map { try Envelope(jsonValue: JSON5.parse(String($0))) }
        }
        var scenarios: [String: String] = [:]
        for file in try FileManager.default.contentsOfDirectory(atPath: dir) where file.hasSuffix(".scenario.json5") {
            scenarios[dir + "/" + file] = try String(contentsOfFile: dir + "/" + file, encoding: .utf8)
        }
        return Child(status: run.status, output: run.output, traces: traces, directory: dir, scenarios: scenarios)
    }

    @Test("a plain #expect failing in a traced test fails its verdict and prints the timeline of the test's calls")
    func plainExpectation() throws {
        let child = try Self.child.get()
        #expect(child.status == 1, "\(child.output)")
        let end = try #require(child.end("plainExpect"), "\(child.traces.keys.sorted())")
        #expect(end["status"] == "failed")
        let failures = end["failures"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(failures.count == 1 && failures[0].contains("FlowTraceVerdictTests.swift:")
                && failures[0].contains("(flow.source → .defaultAudience) == .network"), "\(failures)")
        let output = child.failureOutput("plainExpect")
        #expect(output.contains("timeline (DeliberateFailures.plainExpect):"), "\(output)")
        #expect(output.contains("targeted main  timeout"), "\(output)")
        #expect(output.contains("default main  ok"), "\(output)")
    }

    @Test("a thrown error or a failed #require fails the verdict and prints the timeline once")
    func thrownError() throws {
        let child = try Self.child.get()
        #expect(child.end("thrownError")?["status"] == "failed")
        #expect(child.end("thrownError")?["failures"]?.arrayValue?.first?.stringValue?.contains("Broken") == true)
        #expect(child.failureOutput("thrownError").contains("default main  ok"), "\(child.failureOutput("thrownError"))")
        #expect(child.end("failedRequire")?["status"] == "failed")
        #expect(child.end("failedRequire")?["failures"]?.arrayValue?.count == 1)
        let required = child.failureOutput("failedRequire")
        #expect(required.components(separatedBy: "timeline (").count == 2, "\(required)")
    }

    @Test("the test kit's own failed expectation is one failure with one timeline")
    func ownExpectation() throws {
        let child = try Self.child.get()
        let end = try #require(child.end("ownExpectation"))
        #expect(end["status"] == "failed")
        #expect(end["failures"]?.arrayValue?.compactMap(\.stringValue).map { $0.contains("expectFallback main: no fallback to fallbackFile happened") } == [true])
        let output = child.failureOutput("ownExpectation")
        #expect(output.components(separatedBy: "timeline (").count == 2, "\(output)")
    }

    @Test("a failing test that ran a real FlowClient names a scenario file that reproduces its call; the file is a scenario of that call")
    func realClientReproduced() throws {
        let child = try Self.child.get()
        #expect(child.end("realClient")?["status"] == "failed")
        let output = child.failureOutput("realClient")
        let line = try #require(output.split(separator: "\n").first { $0.contains("reproduces in virtual time: flowscope run ") }, "\(output)")
        let file = String(line[line.range(of: "flowscope run ")!.upperBound...])
        #expect(file.hasPrefix(child.directory + "/DeliberateFailures.realClient."), "\(file)")
        #expect(file.hasSuffix(".scenario.json5"))
        let text = try #require(child.scenarios[file], "written: \(child.scenarios.keys.sorted())")
        let scenario = try Scenario.decode(text, file: file)
        #expect(!scenario.steps.isEmpty)
        // A test whose calls all ran on the harness (already a scenario) names no file.
        #expect(!child.failureOutput("plainExpect").contains("reproduces in virtual time"))
    }

    @Test("a passing traced test (a known issue included) is test.start, its events, test.end passed; a cancelled one is skipped")
    func passingAndSkipped() throws {
        let child = try Self.child.get()
        let passes = try #require(child.traces["DeliberateFailures.passes"])
        #expect(passes.first?.name == .testStart && passes.last?.name == .testEnd)
        #expect(passes.allSatisfy { $0.run == "test:verdicts-1:DeliberateFailures.passes" })
        let start = try #require(passes.first?.event.attrs)
        #expect(start["invocation"] == "verdicts-1" && start["test"] == "DeliberateFailures.passes" && start["framework"] == "swift-testing")
        #expect(start["host"]?.stringValue?.isEmpty == false)
        let end = try #require(child.end("passes"))
        #expect(end["status"] == "passed" && end["failures"] == .array([]))
        #expect((end["duration"]?.numberValue ?? -1) >= 0)
        #expect(passes.contains { $0.name == .fetchEnd })
        #expect(child.end("cancelled")?["status"] == "skipped")
        #expect(child.end("cancelled")?["skipReason"]?.stringValue?.contains("not on this platform") == true)
    }
}

@Suite("Test invocations", .ownThread)
struct TestInvocationTests {
    @Test("FLOWSCOPE_INVOCATION names the invocation when it is a valid id; otherwise a random 8-hex id")
    func ids() {
        #expect(TestInvocation(environment: ["FLOWSCOPE_INVOCATION": "ci-4711.2"], directory: "/").id == "ci-4711.2")
        for bad in ["has space", "a:b", String(repeating: "x", count: 65)] {
            let id = TestInvocation(environment: ["FLOWSCOPE_INVOCATION": bad], directory: "/").id
            #expect(id.count == 8 && id.allSatisfy(\.isHexDigit), "\(bad) -> \(id)")
        }
        let a = TestInvocation(environment: [:], directory: "/"), b = TestInvocation(environment: [:], directory: "/")
        #expect(a.id != b.id)
        #expect(a.run(for: "Suite.test") == "test:\(a.id):Suite.test")
    }

    @Test("the revision comes from FLOWSCOPE_REVISION, GITHUB_SHA, else the git checkout's HEAD: a branch, packed, detached, or a worktree")
    func revision() throws {
        let sha = String(repeating: "ab", count: 20), other = String(repeating: "cd", count: 20)
        #expect(TestInvocation(environment: ["GITHUB_SHA": sha], directory: "/").revision == sha)
        #expect(TestInvocation(environment: ["FLOWSCOPE_REVISION": "v1.2", "GITHUB_SHA": sha], directory: "/").revision == "v1.2")
        let root = Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let fm = FileManager.default
        func write(_ path: String, _ text: String) throws {
            try fm.createDirectory(atPath: (root + "/" + path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try text.write(toFile: root + "/" + path, atomically: true, encoding: .utf8)
        }
        try fm.createDirectory(atPath: root + "/repo/Sources/deep", withIntermediateDirectories: true)
        try write("repo/.git/HEAD", "ref: refs/heads/main\n")
        try write("repo/.git/refs/heads/main", sha + "\n")
        #expect(TestInvocation(environment: [:], directory: root + "/repo/Sources/deep").revision == sha)
        try fm.removeItem(atPath: root + "/repo/.git/refs/heads/main")
        try write("repo/.git/packed-refs", "# pack-refs with: peeled\n\(other) refs/heads/main\n")
        #expect(TestInvocation(environment: [:], directory: root + "/repo").revision == other)
        try write("repo/.git/HEAD", sha + "\n")
        #expect(TestInvocation(environment: [:], directory: root + "/repo").revision == sha)
        // A worktree: .git is a file naming its git directory, whose branches live in the common one.
        try write("wt/.git", "gitdir: \(root)/repo/.git/worktrees/wt\n")
        try write("repo/.git/worktrees/wt/HEAD", "ref: refs/heads/feature\n")
        try write("repo/.git/worktrees/wt/commondir", "../..\n")
        try write("repo/.git/refs/heads/feature", other + "\n")
        #expect(TestInvocation(environment: [:], directory: root + "/wt").revision == other)
        #expect(TestInvocation(environment: [:], directory: "/").revision == nil)
    }
}

#if os(Linux)
@Suite("Test verdicts from XCTest (Linux)", .ownThread)
struct XCTestVerdictTests {
    @Test("an XCTAssert failing in a withFlowTrace body fails its verdict; the test kit's own failure through XCTFail counts once; a clean body passes")
    func xctestVerdicts() throws {
        let dir = Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var env = ProcessInfo.processInfo.environment
        env["FLOWSCOPE_DELIBERATE_FAILURES"] = "1"
        env["FLOWSCOPE_TRACE_DIR"] = dir
        for key in ["FLOWSCOPE_ATTACH", "FLOWSCOPE_ATTACH_REQUIRED"] { env[key] = nil }
        let run = try runProgram("/usr/bin/timeout", ["-s", "KILL", "120", CommandLine.arguments[0],
                                                      "FlowScopeTestingTests.DeliberateXCTestFailures"], environment: env)
        #expect(run.status != 0, "\(run.output)")
        func end(_ name: String) throws -> EventAttributes? {
            let text = try String(contentsOfFile: dir + "/" + name + ".jsonl", encoding: .utf8)
            return try text.split(separator: "\n").map { try Envelope(jsonValue: JSON5.parse(String($0))) }.last { $0.name == .testEnd }?.event.attrs
        }
        let failed = try end("XC.assertFails")
        #expect(failed?["status"] == "failed", "\(run.output)")
        let failures = failed?["failures"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(failures.count == 1 && failures[0].contains("DeliberateXCTestFailures.swift:") && failures[0].contains("XCTAssertEqual failed"), "\(failures)")
        let own = try end("XC.ownExpectation")
        #expect(own?["status"] == "failed")
        #expect(own?["failures"]?.arrayValue?.count == 1, "the expectation's XCTFail is not a second failure: \(own?["failures"] ?? .null)")
        #expect(try end("XC.passes")?["status"] == "passed")
        #expect(try end("XC.passes")?["framework"] == nil)
    }
}
#endif

@Suite("Test verdicts outside Swift Testing (withFlowTrace)", .ownThread)
struct WithFlowTraceVerdictTests {
    struct Broken: Error {}

    @Test("the test kit's failed expectations and a thrown error make the verdict; a clean body passes")
    func verdicts() async throws {
        let messages = Shared<[String]>([])
        let failing = await withFlowTrace("xc.failing", environment: [:], onFailure: { m, _ in messages.withLock { $0.append(m) } }) {
            () -> FlowTraceRecorder? in
            _ = try? await DeliberateFailures.defaultAudienceCall()
            expectFallback("main", to: .cache)
            return FlowTrace.current
        }
        #expect(failing?.status == .failed)
        #expect(failing?.failures.first?.hasPrefix("expectFallback main: no fallback to cache happened") == true)
        #expect(messages.withLock { $0.count } == 1)
        #expect(failing?.envelopes.last?.event.attrs["status"] == "failed")

        let thrown = Shared<FlowTraceRecorder?>(nil)
        await #expect(throws: Broken.self) {
            try await withFlowTrace("xc.thrown", environment: [:]) {
                thrown.withLock { $0 = FlowTrace.current }
                throw Broken()
            }
        }
        #expect(thrown.withLock { $0 }?.status == .failed)
        #expect(thrown.withLock { $0 }?.failures == ["Caught error: Broken()"])

        let clean = await withFlowTrace("xc.clean", environment: [:]) { FlowTrace.current }
        #expect(clean?.status == .passed)
        #expect(clean?.envelopes.first?.event.attrs["framework"] == "none")
    }
}
