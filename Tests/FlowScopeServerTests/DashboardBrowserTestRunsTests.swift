import FlowEvents
import FlowFetch
import FlowJSON
import FlowScopeTesting
import FlowSim
import Foundation
import SQLiteSink
import TestSupport
import Testing

/// `invocations` invocations of `tests` traced tests each (test.start and test.end, no calls), the
/// newest invocation's test 7 failing; JSON Lines in batches of 2,000 envelopes.
private func testRunBatches(invocations: Int, tests: Int) -> [String] {
    var lines: [String] = []
    lines.reserveCapacity(invocations * tests * 2)
    let base = Date().timeIntervalSince1970 - Double(invocations) * 100
    for n in 0..<invocations {
        let id = "inv-\(n)", start = base + Double(n) * 100
        for i in 0..<tests {
            let run = "test:\(id):Suite.test\(i)", trace = TraceID(high: UInt64(n + 1), low: UInt64(i + 1))
            let failed = n == invocations - 1 && i == 7
            let common: [String: JSONValue] = ["test": .string("Suite.test\(i)"), "invocation": .string(id)]
            var startAttrs = common
            startAttrs["invocationStart"] = .number(start); startAttrs["host"] = "ci-runner"
            var endAttrs = common
            endAttrs["status"] = failed ? "failed" : "passed"; endAttrs["duration"] = 0.25
            endAttrs["failures"] = failed ? ["PaywallTests.swift:12: Expectation failed: (flow.source → .cache) == .network"] : []
            lines.append(Envelope(EngineEvent(name: .testStart, t: 0, placement: nil, trace: trace, span: SpanID(raw: 1),
                                              attrs: EventAttributes(startAttrs)), seq: 0, ts: start + Double(i) / 1000, run: run).jsonLine)
            lines.append(Envelope(EngineEvent(name: .testEnd, t: 0.25, placement: nil, trace: trace, span: SpanID(raw: 2),
                                              attrs: EventAttributes(endAttrs)), seq: 0, ts: start + Double(i) / 1000 + 0.25, run: run).jsonLine)
        }
    }
    return stride(from: 0, to: lines.count, by: 2000).map { lines[$0..<min(lines.count, $0 + 2000)].joined(separator: "\n") }
}

/// The dashboard's test runs in headless Chromium: invocations with their verdicts, failing tests
/// first, the run picker searching instead of listing every run.
@Suite("Dashboard in a real browser: test runs", .serialized, .heavy)
struct DashboardBrowserTestRunsTests {
    @Test("with 20,000 test runs stored the page opens under 5,000 DOM nodes; invocations show their verdicts, failures first; the run search finds a run; picking a test opens its run")
    func twentyThousandTestRuns() throws {
        guard let chromium = Chromium.executable() else {
            Issue.record("chromium not found on PATH (chromium, chromium-browser, google-chrome) nor in FLOWSCOPE_CHROMIUM")
            return
        }
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let stack = try DashboardStack(archive: try SQLiteSink(path: dir + "/events.sqlite"))
        defer { stack.stop() }
        for body in testRunBatches(invocations: 20, tests: 1000) {
            let reply = try stack.fixture.connect().request("POST", "/api/ingest", headers: [
                ("Authorization", "Bearer \(stack.fixture.token.value)"), ("Content-Type", "application/x-ndjson"),
            ], body: Array(body.utf8))
            try #require(reply.status == 202, "\(reply.text)")
        }
        let deadline = Date().addingTimeInterval(60)
        var matched = 0
        while Date() < deadline {
            matched = try JSON5.parse(stack.fixture.connect().request("GET", "/api/runs?kind=test&limit=1").text)["matched"]?.intValue ?? 0
            if matched == 20_000 { break }
            usleep(100_000)
        }
        try #require(matched == 20_000, "the stores list \(matched) test runs")

        let browser = try DevToolsBrowser(executable: chromium.path)
        defer { browser.close() }
        try browser.open("\(stack.baseURL)/#run=live")
        try #require(try browser.waitFor("document.body.dataset.ready === 'true' && !document.querySelector('#test-runs').hidden"
                                          + " && document.querySelectorAll('#test-runs li.test').length > 0"))
        let nodes = try browser.evaluate("document.getElementsByTagName('*').length").intValue ?? .max
        #expect(nodes < 5000, "\(nodes) DOM nodes")
        let options = try browser.evaluate("document.querySelectorAll('#run-select option').length").intValue ?? .max
        #expect(options <= 102, "the picker lists a page of runs, not all of them: \(options) options")

        // The newest invocation is open, its failing test first with its failure.
        let invocations = try browser.evaluate("[...document.querySelectorAll('#test-runs details.invocation')].map(d => d.dataset.invocation)")
        #expect(invocations.arrayValue?.count == 10)
        #expect(invocations.arrayValue?.first == "inv-19")
        let summary = try browser.evaluate("document.querySelector('#test-runs details.invocation').querySelector('summary').textContent")
        #expect(summary.stringValue?.contains("1 failed") == true && summary.stringValue?.contains("999 passed") == true, "\(summary)")
        let older = try browser.evaluate("document.querySelectorAll('#test-runs details.invocation')[1].querySelector('summary').textContent")
        #expect(older.stringValue?.contains("0 failed") == true && older.stringValue?.contains("1,000 passed") == true, "\(older)")
        let firstTest = try browser.evaluate("""
            (() => { const li = document.querySelector('#test-runs details.invocation[open] li.test');
                     return li ? [li.dataset.status, li.dataset.run, li.querySelector('.test-failure')?.textContent ?? ''] : null; })()
            """)
        #expect(firstTest.arrayValue?.first == "failed", "\(firstTest)")
        #expect(firstTest.arrayValue?[1] == "test:inv-19:Suite.test7")
        #expect(firstTest.arrayValue?.last?.stringValue?.contains("Expectation failed") == true)

        // The search box asks the server: every run matching "test777" (one per invocation), no other.
        _ = try browser.evaluate("(() => { const s = document.querySelector('#run-search'); s.value = 'test777'; s.dispatchEvent(new Event('input')); })()")
        #expect(try browser.waitFor("""
            (() => { const ids = [...document.querySelectorAll('#run-select option')].map(o => o.value).filter(v => v.startsWith('test:'));
                     return ids.length === 20 && ids.every(v => v.endsWith(':Suite.test777')); })()
            """, timeout: 10))

        // A click on the failing test opens its run.
        let box = try browser.evaluate("""
            (() => { const r = document.querySelector('#test-runs li.test[data-status="failed"] button').getBoundingClientRect();
                     window.scrollTo(0, 0); return [r.x + 20, r.y + r.height / 2]; })()
            """)
        let point = box.arrayValue?.compactMap(\.numberValue) ?? []
        try #require(point.count == 2)
        try browser.click(x: point[0], y: point[1])
        #expect(try browser.waitFor("decodeURIComponent(location.hash).includes('run=test:inv-19:Suite.test7')"
                                    + " && document.querySelector('#run-kind').textContent === 'test'", timeout: 10))
    }
}

/// "Reproduce as scenario" in the call detail, in headless Chromium.
@Suite("Dashboard in a real browser: reproducing a call", .serialized, .heavy)
struct DashboardBrowserReproduceTests {
    /// A traced test's events: a getFlow whose targeted request hangs and whose default audience answers.
    static func recordedCall() async throws -> [Envelope] {
        let scenario = try Scenario.decode("""
            { name: "targeted hangs", profile: { id: "user-42" },
              backend: { placements: { main: { audiences: [
                { name: "All Users", versionId: "av-all", variations: [ { id: "all-A", weight: 100 } ] } ] } } },
              network: { latency: 0.2, rules: [ { match: { kind: "targeted" }, fail: "hang" } ] },
              steps: [] }
            """, file: "inline")
        let recorder = FlowTraceRecorder(name: "Reproduce.fromTheDashboard", environment: [:])
        let harness = VirtualHarness(scenario: scenario, events: FlowTraceSink(recorder: recorder))
        _ = try await harness.getFlow(placementId: "main", fetchPolicy: .reloadRevalidatingCacheData, loadTimeout: 1)
        await recorder.finish()
        return recorder.envelopes
    }

    @Test("the open call's Reproduce as scenario saves the server's scenario (a file flowscope run plays); a call the server cannot reproduce says why")
    func reproduceButton() async throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        defer { stack.stop() }
        let envelopes = try await Self.recordedCall()
        let run = try #require(envelopes.first?.run)
        let trace = try #require(envelopes.first { $0.name == .fetchStart }?.event.trace.hex)
        _ = try stack.ingest(envelopes.map { try JSON5.parse($0.jsonLine) })
        // A call with its start only: not reproducible (unfinished).
        let open = "00000000000000000000000000000abc"
        _ = try stack.ingest([Envelope(EngineEvent(name: .fetchStart, t: 0, placement: "main", trace: TraceID(hex: open)!, span: SpanID(raw: 1),
                                                   attrs: ["call": "getFlow", "policy": "reloadRevalidatingCacheData"]),
                                       seq: 0, ts: Date().timeIntervalSince1970, run: run)].map { try JSON5.parse($0.jsonLine) })
        let path = "/#run=\(run.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? run)&call=\(trace)"
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack, path: path)
        defer { browser.close() }
        #expect(try browser.waitFor("document.querySelector('#trace-detail').dataset.trace === '\(trace)' && !document.querySelector('#trace-detail').hidden"))
        // The page hands the scenario to a download; keep its text to compare with the server's.
        _ = try browser.evaluate("""
            (() => { const made = URL.createObjectURL; window.savedScenario = null;
                     URL.createObjectURL = (blob) => { blob.text().then((t) => { window.savedScenario = t; }); return made(blob); }; })()
            """)
        _ = try browser.evaluate("document.querySelector('#trace-detail [data-reproduce=\"call\"]').click()")
        #expect(try browser.waitFor("document.querySelector('#trace-detail .reproduce-status').textContent.startsWith('Saved reproduce-\(trace.prefix(8)).json5')"
                                    + " && typeof window.savedScenario === 'string'", timeout: 10))
        let saved = try browser.evaluate("window.savedScenario").stringValue ?? ""
        let served = try stack.fixture.connect().request("GET", "/api/calls/\(trace)/scenario").text
        #expect(!saved.isEmpty && saved == served)
        #expect(saved.contains("expect"), "\(saved.prefix(300))")

        _ = try browser.evaluate("location.hash = 'run=\(run.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? run)&call=\(open)'")
        #expect(try browser.waitFor("document.querySelector('#trace-detail').dataset.trace === '\(open)'"))
        #expect(try browser.evaluate("document.querySelector('#trace-detail .reproduce-status').textContent") == "", "cleared for another call")
        _ = try browser.evaluate("document.querySelector('#trace-detail [data-reproduce=\"call\"]').click()")
        #expect(try browser.waitFor("document.querySelector('#trace-detail .reproduce-status').textContent.startsWith('Not reproducible (HTTP 422)')", timeout: 10))
    }
}
