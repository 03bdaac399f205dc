import TestSupport
import Foundation
import FlowEvents
import FlowJSON
@testable import FlowScopeServer
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The time range in headless Chromium: a custom from/to in the page, and a range the server's bound
/// cuts said in the panels. (Type name contains "DashboardBrowser": the Makefile runs these serially.)
@Suite("Dashboard time range in a real browser", .serialized, .heavy)
struct DashboardBrowserRangeTests {
    @Test("From … to … in the page is in the URL, asked of the server as from and to, and reopens; a run or range cut by the server's bound says so in the placements panel (and with a filter the histogram), an uncut one says nothing")
    func customRangeAndCut() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        var limits = DashboardAPI.Limits()
        limits.queryWindow = 200
        limits.calls = CallCache.Limits(maxEvents: 200)
        let stack = try DashboardStack(limits: limits)
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        var calls: [JSONValue] = []
        for i in 0..<60 { calls += DemoCalls.call(run: "live", placement: "p_\(i % 4)", t: Double(100 + i), source: "network", duration: 0.1) }
        _ = try stack.ingest(calls)
        _ = try stack.ingest(DemoCalls.call(run: "test:small", placement: "checkout", t: 1, source: "network", duration: 0.1))
        try stack.waitForFetches(placement: "p_3", count: 5) // of the newest events the bound keeps
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack, path: "/#run=live")
        defer { browser.close() }

        // No filter: the run (256 events) is past the read model's bound of 200 events per run; the
        // placements panel says so.
        let placementsNote = "document.querySelector('#placements .cut-note')"
        let histogramNote = "document.querySelector('#histogram .cut-note')"
        #expect(try browser.waitFor("!\(placementsNote).hidden"))
        let runText = try browser.evaluate("\(placementsNote).textContent").stringValue ?? ""
        #expect(runText.contains("count the newest ") && runText.contains("not the whole run"), "\(runText)")
        #expect(try browser.evaluate("\(histogramNote).hidden") == .bool(true), "the unfiltered histogram draws the page's own events")

        // From … to … chosen in the page: its inputs show, the range goes to the URL and the server.
        #expect(try browser.evaluate("document.querySelector('#f-custom').hidden") == .bool(true))
        try DashboardBrowserFilterTests.setFilter(browser, "f-range", "custom")
        #expect(try browser.waitFor("!document.querySelector('#f-custom').hidden"))
        try DashboardBrowserFilterTests.setFilter(browser, "f-from", "-1h")
        try DashboardBrowserFilterTests.setFilter(browser, "f-to", "-0s")
        #expect(try browser.waitFor("location.hash.includes('range=custom') && location.hash.includes('from=-1h') && location.hash.includes('to=-0s')"))
        #expect(try browser.waitFor("performance.getEntriesByType('resource').some((r) => r.name.includes('/api/calls?') && r.name.includes('from=-1h') && r.name.includes('to=-0s'))"),
                "the server was asked for the range")
        #expect(try browser.waitFor("!\(histogramNote).hidden && \(placementsNote).textContent.includes('not the whole time range')"),
                "the cut range is said in the placements panel and the histogram")

        // The URL reopens the range in another page.
        let url = try browser.evaluate("location.href").stringValue ?? ""
        let other = try DashboardBrowserDebuggerTests.openPage(chromium, stack, path: String(url.drop { $0 != "/" }.dropFirst(2).drop { $0 != "/" }))
        defer { other.close() }
        #expect(try other.evaluate("[document.querySelector('#f-range').value, document.querySelector('#f-from').value, document.querySelector('#f-to').value, document.querySelector('#f-custom').hidden]")
                == ["custom", "-1h", "-0s", false])

        // A run within the bound: no note.
        _ = try browser.evaluate("location.hash = 'run=test%3Asmall'")
        #expect(try browser.waitFor("document.querySelector('#placements tr[data-placement=\"checkout\"]') !== null && \(placementsNote).hidden && \(histogramNote).hidden"))
    }
}
