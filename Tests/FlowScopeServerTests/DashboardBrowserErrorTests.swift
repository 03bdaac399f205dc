import TestSupport
import Foundation
import FlowJSON
@testable import FlowScopeServer
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Answers other than 2xx in headless Chromium while live traffic flows: each is shown where the data
/// would be, and a refused filter is not sent again. (Type name contains "DashboardBrowser": the
/// Makefile runs these serially.)
@Suite("Dashboard errors in a real browser, with live traffic", .serialized, .heavy)
struct DashboardBrowserErrorTests {
    /// Requests of the filtered view the page has sent (`/api/calls?...`).
    static let callRequests = "performance.getEntriesByType('resource').filter((r) => r.name.includes('/api/calls?')).length"

    /// The empty-state line of every call panel: [waterfall, placements, histogram, tail], each its text and status.
    static let panelLines = """
        JSON.stringify(['#waterfall > .panel-empty', '#placements .panel-empty', '#histogram .panel-empty', '#tail .panel-empty']
          .map((s) => { const n = document.querySelector(s); return [n.hidden ? '' : n.textContent, n.dataset.status ?? '']; }))
        """

    /// Expects every call panel to show `status` with `message`, and no `/api/calls` request for 2.5 s of live traffic.
    static func expectShownNotRepolled(_ browser: DevToolsBrowser, status: Int, message: String,
                                       sourceLocation: SourceLocation = #_sourceLocation) throws {
        let shown = try browser.waitFor("""
            (() => { const lines = JSON.parse(\(panelLines)); return lines.every(([text, s]) => s === '\(status)' && text.includes(\(JSONValue.string(message).jsonText))); })()
            """, timeout: 10)
        let lines = try browser.evaluate(panelLines).stringValue ?? "?"
        #expect(shown, "every call panel shows HTTP \(status) with its message: \(lines)", sourceLocation: sourceLocation)
        #expect(try browser.evaluate("document.querySelector('#waterfall > .panel-empty').textContent.includes('No call matches')") == .bool(false),
                "not shown as no matches", sourceLocation: sourceLocation)
        #expect(try browser.evaluate("document.querySelector('.kpi[data-kpi=fetches] .kpi-value').textContent") == "–",
                "no KPI without an answer", sourceLocation: sourceLocation)
        let before = try browser.evaluate(callRequests).numberValue ?? -1
        let seqBefore = try browser.evaluate("Number(document.body.dataset.latestSeq)").numberValue ?? 0
        usleep(2_500_000) // the page asks again at most once a second: two chances
        #expect(try browser.evaluate("Number(document.body.dataset.latestSeq)").numberValue ?? 0 > seqBefore, "events kept arriving",
                sourceLocation: sourceLocation)
        let after = try browser.evaluate(callRequests).numberValue ?? -1
        #expect(after == before, "the refused filter was not sent again in 2.5 s of traffic (\(before) -> \(after) requests)", sourceLocation: sourceLocation)
    }

    @Test("with live traffic flowing, a 400 (minDuration=fast) and a 414 (a filter URL over the server's 32 KiB) are shown with their message in every call panel, not as no matches, and not sent again until the filter changes")
    func refusedFiltersShownNotRepolled() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack)
        defer { browser.close() }
        let traffic = stack.liveTraffic(interval: 0.1)
        defer { traffic.stop() }
        _ = try browser.evaluate("performance.setResourceTimingBufferSize(100000)")
        #expect(try browser.waitFor("document.querySelectorAll('#waterfall g.wf-call[data-placement^=\"live_\"]').length > 0"))

        try DashboardBrowserFilterTests.setFilter(browser, "f-min", "fast")
        try Self.expectShownNotRepolled(browser, status: 400, message: "minDuration: expected a duration such as 0.3, 300ms or 2s, got \"fast\"")
        #expect(try browser.evaluate("document.querySelector('#filter-error').textContent.includes('minDuration: expected a duration')") == .bool(true))

        // A changed filter is asked at once, and answered.
        let before = try browser.evaluate(Self.callRequests).numberValue ?? 0
        try DashboardBrowserFilterTests.setFilter(browser, "f-min", "0")
        #expect(try browser.waitFor("\(Self.callRequests) > \(before) && document.querySelectorAll('#waterfall g.wf-call').length > 0 && document.querySelector('#filter-error').hidden"))

        // A search making each request's target longer than the server's 32 KiB: 414.
        try DashboardBrowserFilterTests.setFilter(browser, "f-q", String(repeating: "s", count: 40_000))
        try Self.expectShownNotRepolled(browser, status: 414, message: "request target over 32768 bytes")

        // Back to no filter: the panels show the run again.
        try DashboardBrowserFilterTests.setFilter(browser, "f-q", "")
        try DashboardBrowserFilterTests.setFilter(browser, "f-min", "")
        #expect(try browser.waitFor("document.querySelectorAll('#waterfall g.wf-call').length > 0 && document.querySelector('#waterfall > .panel-empty').hidden"))
        #expect(try browser.evaluate("document.querySelector('#app-error').hidden") == .bool(true))
    }
}
