import TestSupport
import FlowEvents
import FlowFetch
import FlowJSON
import FlowScopeTesting
import Foundation
import Testing
@testable import FlowScopeCLI

/// The envelopes a traced test sends (test.start, one call's events, test.end), made by the test
/// kit's own recorder for invocation `invocation`, failing when `failure` is given.
private func testEnvelopes(_ name: String, invocation: TestInvocation, failure: String? = nil) async -> [Envelope] {
    let recorder = FlowTraceRecorder(name: name, environment: [:], invocation: invocation) { _, _ in }
    let trace = TraceID(high: 7, low: UInt64(abs(name.hashValue)))
    recorder.record(EngineEvent(name: .fetchStart, t: 0, placement: "main", trace: trace, span: SpanID(raw: 1),
                                attrs: ["call": "getFlow", "policy": "reloadRevalidatingCacheData"]))
    recorder.record(EngineEvent(name: .fetchEnd, t: 0.2, placement: "main", trace: trace, span: SpanID(raw: 1),
                                attrs: ["call": "getFlow", "source": "network", "variation": "A", "audience": "All Users",
                                        "targetingLost": false, "duration": 0.2]))
    if let failure { recorder.noteFailure(failure) }
    await recorder.finish()
    return recorder.envelopes
}

private func ingest(_ fixture: StackFixture, _ envelopes: [Envelope]) throws {
    for chunk in stride(from: 0, to: envelopes.count, by: 2000) {
        let body = envelopes[chunk..<min(envelopes.count, chunk + 2000)].map { $0.jsonLine + "\n" }.joined()
        let reply = try fixture.ingest(body)
        try #require(reply.status == 202, "\(reply.text)")
    }
}

@Suite("flowscope serve: test runs with their invocation and verdict in /api/runs", .ownThread)
struct TestRunsEndpointTests {
    @Test("two invocations of the same tests are two sets of runs with their own verdicts; filters and order=status put failures first")
    func twoInvocations() async throws {
        let fixture = try StackFixture()
        let first = TestInvocation(id: "inv-1", start: 1_800_000_000, host: "ci-1", revision: String(repeating: "a", count: 40))
        let second = TestInvocation(id: "inv-2", start: 1_800_000_100, host: "ci-1", revision: nil)
        var envelopes: [Envelope] = []
        for name in ["Paywall.passes", "Paywall.fails"] { envelopes += await testEnvelopes(name, invocation: first) }
        envelopes += await testEnvelopes("Paywall.passes", invocation: second)
        envelopes += await testEnvelopes("Paywall.fails", invocation: second, failure: "PaywallTests.swift:12: Expectation failed: source")
        try ingest(fixture, envelopes)

        let answer = try fixture.getJSON("/api/runs?kind=test")
        let runs = answer["runs"]?.arrayValue ?? []
        let byID = Dictionary(runs.compactMap { r in r["id"]?.stringValue.map { ($0, r) } }, uniquingKeysWith: { a, _ in a })
        #expect(Set(byID.keys) == ["test:inv-1:Paywall.passes", "test:inv-1:Paywall.fails",
                                   "test:inv-2:Paywall.passes", "test:inv-2:Paywall.fails"])
        #expect(byID["test:inv-1:Paywall.fails"]?["status"] == "passed", "the first invocation's run did not merge with the second's")
        let failed = try #require(byID["test:inv-2:Paywall.fails"])
        #expect(failed["status"] == "failed" && failed["test"] == "Paywall.fails" && failed["invocation"] == "inv-2")
        #expect(failed["failures"] == ["PaywallTests.swift:12: Expectation failed: source"])
        #expect(failed["fetches"] == 1 && failed["errors"] == 0, "the verdict is the test's, not derived from its calls")
        #expect(answer["matched"] == 4 && answer["next"] == .null)

        let invocations = answer["invocations"]?.arrayValue ?? []
        #expect(invocations.compactMap { $0["id"]?.stringValue } == ["inv-2", "inv-1"], "newest first")
        #expect(invocations.first?["passed"] == 1 && invocations.first?["failed"] == 1 && invocations.first?["tests"] == 2)
        #expect(invocations.last?["failed"] == 0 && invocations.last?["revision"] == .string(String(repeating: "a", count: 40)))
        #expect(invocations.last?["host"] == "ci-1")

        let listed = try fixture.getJSON("/api/invocations")
        #expect(listed["invocations"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == ["inv-2", "inv-1"] && listed["total"] == 2)
        #expect(try fixture.getJSON("/api/invocations?limit=1")["invocations"]?.arrayValue?.count == 1)
        #expect(try fixture.get("/api/invocations?limit=x").status == 400)

        let failuresFirst = try fixture.getJSON("/api/runs?invocation=inv-2&order=status")["runs"]?.arrayValue ?? []
        #expect(failuresFirst.compactMap { $0["id"]?.stringValue } == ["test:inv-2:Paywall.fails", "test:inv-2:Paywall.passes"])
        let onlyFailed = try fixture.getJSON("/api/runs?status=failed")["runs"]?.arrayValue ?? []
        #expect(onlyFailed.compactMap { $0["id"]?.stringValue } == ["test:inv-2:Paywall.fails"])
        let named = try fixture.getJSON("/api/runs?q=PAYWALL.FAILS")["runs"]?.arrayValue ?? []
        #expect(Set(named.compactMap { $0["id"]?.stringValue }) == ["test:inv-1:Paywall.fails", "test:inv-2:Paywall.fails"])
    }

    @Test("a test still running is listed as running; its end, arriving later, settles it once")
    func running() async throws {
        let fixture = try StackFixture()
        let invocation = TestInvocation(id: "inv-r", start: 1_800_000_000, host: "h", revision: nil)
        let envelopes = await testEnvelopes("Slow.test", invocation: invocation, failure: "boom")
        try ingest(fixture, Array(envelopes.dropLast()))
        #expect(try fixture.getJSON("/api/runs?kind=test")["runs"]?[0]?["status"] == "running")
        try ingest(fixture, [envelopes.last!, envelopes.last!])
        let answer = try fixture.getJSON("/api/runs?kind=test")
        #expect(answer["runs"]?[0]?["status"] == "failed")
        #expect(answer["invocations"]?[0]?["failed"] == 1 && answer["invocations"]?[0]?["running"] == 0
                && answer["invocations"]?[0]?["tests"] == 1, "\(answer["invocations"] ?? .null)")
    }

    @Test("/api/runs pages with a cursor: every run once, in order; bad parameters are 400 naming the parameter")
    func paging() async throws {
        let fixture = try StackFixture()
        let invocation = TestInvocation(id: "inv-p", start: 1_800_000_000, host: "h", revision: nil)
        var envelopes: [Envelope] = []
        for i in 0..<23 { envelopes += await testEnvelopes("Many.test\(i)", invocation: invocation, failure: i % 5 == 0 ? "no" : nil) }
        try ingest(fixture, envelopes)
        var seen: [String] = []
        var cursor: String?
        for _ in 0..<10 {
            let target = "/api/runs?kind=test&order=status&limit=5" + (cursor.map { "&cursor=" + ($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "") } ?? "")
            let page = try fixture.getJSON(target)
            seen += page["runs"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
            cursor = page["next"]?.stringValue
            if cursor == nil { break }
        }
        #expect(seen.count == 23 && Set(seen).count == 23)
        #expect(seen.prefix(5).allSatisfy { id in ["0", "5", "10", "15", "20"].contains { id == "test:inv-p:Many.test\($0)" } },
                "the 5 failures first: \(seen.prefix(5))")
        for (query, parameter) in [("status=nope", "status"), ("kind=tests", "kind"), ("limit=0", "limit"), ("order=name", "order"),
                                   ("cursor=nonsense", "cursor")] {
            let reply = try fixture.get("/api/runs?" + query)
            #expect(reply.status == 400, "\(query)")
            #expect(reply.errorMessage?.hasPrefix(parameter + ":") == true, "\(query): \(reply.errorMessage ?? "nil")")
        }
    }

    @Test("with 20,000 test runs stored, a page of /api/runs stays small and the invocations hold every run's verdict")
    func twentyThousandRuns() async throws {
        let dir = makeTemporaryDirectory("manyruns")
        defer { removeDirectory(dir) }
        let fixture = try StackFixture(sinks: #"{ type: "metrics" }, { type: "memory" }, { type: "sqlite", path: "$DIR/events.sqlite" }"#, dir: dir)
        var envelopes: [Envelope] = []
        envelopes.reserveCapacity(40_000)
        for n in 0..<20 {
            let invocation = TestInvocation(id: "inv-\(n)", start: 1_800_000_000 + Double(n) * 100, host: "ci", revision: nil)
            for i in 0..<1000 {
                let run = invocation.run(for: "Suite.test\(i)")
                let start = Envelope(EngineEvent(name: .testStart, t: 0, placement: nil, trace: TraceID(high: UInt64(n + 1), low: UInt64(i + 1)),
                                                 span: SpanID(raw: 1), attrs: ["test": .string("Suite.test\(i)"), "invocation": .string(invocation.id),
                                                                               "invocationStart": .number(invocation.start)]),
                                     seq: 0, ts: invocation.start + Double(i) / 100, run: run)
                let end = Envelope(EngineEvent(name: .testEnd, t: 0.01, placement: nil, trace: TraceID(high: UInt64(n + 1), low: UInt64(i + 1)),
                                               span: SpanID(raw: 2), attrs: ["test": .string("Suite.test\(i)"), "invocation": .string(invocation.id),
                                                                             "status": i == 7 ? "failed" : "passed", "duration": 0.01,
                                                                             "failures": i == 7 ? ["boom"] : []]),
                                   seq: 0, ts: invocation.start + Double(i) / 100 + 0.01, run: run)
                envelopes += [start, end]
            }
        }
        try ingest(fixture, envelopes)
        #expect(await poll(30) { (try? fixture.getJSON("/api/runs?limit=1")["matched"]?.intValue) == 20_000 })
        let reply = try fixture.get("/api/runs")
        #expect(reply.status == 200)
        #expect(reply.json["runs"]?.arrayValue?.count == 100, "100 runs a page by default")
        #expect(reply.body.count < 64_000, "\(reply.body.count) bytes")
        let failed = try fixture.getJSON("/api/runs?status=failed&limit=1000")
        #expect(failed["matched"] == 20 && failed["runs"]?.arrayValue?.count == 20)
        #expect(failed["invocations"]?.arrayValue?.count == 20)
        #expect(failed["invocations"]?[0]?["tests"] == 1000 && failed["invocations"]?[0]?["failed"] == 1)
        // After a restart the verdicts are read back from the sqlite file.
        fixture.stop()
        let again = try StackFixture(sinks: #"{ type: "metrics" }, { type: "memory" }, { type: "sqlite", path: "$DIR/events.sqlite" }"#, dir: dir)
        let stored = try again.getJSON("/api/runs?status=failed&limit=1000")
        #expect(stored["matched"] == 20, "\(stored["matched"] ?? .null)")
        #expect(stored["invocations"]?[0]?["passed"] == 999)
    }
}
