import TestSupport
import Foundation
import FlowJSON
@testable import FlowScopeServer
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Long values in headless Chromium while live traffic flows: nothing widens the page, long text is cut
/// with an ellipsis and kept whole in its title. (Type name contains "DashboardBrowser": the Makefile
/// runs these serially.)
@Suite("Dashboard layout with long values in a real browser, with live traffic", .serialized, .heavy)
struct DashboardBrowserLayoutTests {
    /// What is wider than it may be: the page, and any table or chart wrapper wider than its box.
    static let overflow = """
        (() => { const d = document.documentElement; const out = [];
          if (d.scrollWidth > d.clientWidth) out.push('page ' + d.scrollWidth + ' > ' + d.clientWidth);
          for (const w of document.querySelectorAll('.table-wrap, .chart-wrap, .panel, .kpis, .filter-bar, .footer, .app-error')) {
            if (w.offsetParent === null) continue;
            if (w.scrollWidth > w.clientWidth + 1) out.push((w.closest('[id]')?.id ?? '') + ' ' + w.className + ' ' + w.scrollWidth + ' > ' + w.clientWidth +
              ' (columns ' + [...(w.querySelector('thead tr')?.children ?? [])].map((c) => Math.round(c.getBoundingClientRect().width)).join(' ') + ')');
          }
          return JSON.stringify(out); })()
        """

    @Test("at 1024 and 1440 px, a 3,000-character placement id, its call opened and a 40,000-character search widen nothing; the id and the search are cut with an ellipsis and whole in their titles; the text inputs carry the server's limits")
    func longValuesWidenNothing() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        let long = "placement_" + String(repeating: "x", count: 2_990)
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        let longCall = DemoCalls.call(run: "live", placement: long, t: 50, source: "network", duration: 0.2)
        let trace = try #require(longCall.first?["trace"]?.stringValue)
        _ = try stack.ingest(longCall)
        try stack.waitForFetches(placement: long, count: 1)
        let traffic = stack.liveTraffic(interval: 0.2)
        defer { traffic.stop() }
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack)
        defer { browser.close() }

        // The server's limits (CallFilter.parse): q at most 200 bytes, trace at most 32 hex digits.
        #expect(try browser.evaluate("[document.querySelector('#f-q').maxLength, document.querySelector('#f-trace').maxLength]") == [200, 32])
        #expect(try browser.evaluate("['#f-audience', '#f-variation', '#f-min', '#f-max'].every((s) => document.querySelector(s).maxLength > 0)") == .bool(true))

        for width in [1024, 1440] {
            try browser.setViewport(width: width, height: 900)
            usleep(500_000)
            #expect(try browser.waitFor("document.querySelector('#placements tr[data-placement^=\"placement_x\"]') !== null"))
            _ = try browser.waitFor("\(Self.overflow) === '[]'", timeout: 5) // the page redraws for a new width within a second
            let plain = try browser.evaluate(Self.overflow)
            #expect(plain == "[]", "nothing wider than its box at \(width) px: \(plain.jsonText)")
            let cell = try browser.evaluate("""
                (() => { const s = document.querySelector('#placements tr[data-placement^="placement_x"] th span');
                  return [s.title.length, getComputedStyle(s).textOverflow, s.scrollWidth > s.clientWidth]; })()
                """)
            #expect(cell == [3_000, "ellipsis", true], "the placement id cut with an ellipsis, whole in its title at \(width) px: \(cell.jsonText)")

            // Its call opened: the detail's header and cells are cut, nothing is wider.
            _ = try browser.evaluate("location.hash = 'run=live&call=\(trace)'")
            #expect(try browser.waitFor("document.querySelector('#trace-detail').dataset.trace === '\(trace)' && document.querySelectorAll('#trace-detail tbody tr').length >= 4"))
            usleep(300_000)
            _ = try browser.waitFor("\(Self.overflow) === '[]'", timeout: 5) // the page redraws for a new width within a second
            let open = try browser.evaluate(Self.overflow)
            #expect(open == "[]", "nothing wider than its box with the call open at \(width) px: \(open.jsonText)")
            #expect(try browser.evaluate("document.querySelector('#trace-detail h3').title.includes('\(long)')") == .bool(true))
            #expect(try browser.evaluate("[...document.querySelectorAll('#trace-detail tbody td')].some((td) => td.title === '\(long)' && td.scrollWidth > td.clientWidth)") == .bool(true),
                    "the detail's placement cell is cut and whole in its title")
            _ = try browser.evaluate("location.hash = 'run=live'")
            #expect(try browser.waitFor("document.querySelector('#trace-detail').hidden"))

            // A 40,000-character search (pasted: a script's value ignores maxlength, as a URL's does).
            try DashboardBrowserFilterTests.setFilter(browser, "f-q", String(repeating: "s", count: 40_000))
            #expect(try browser.waitFor("location.hash.includes('q=sss') && document.querySelector('#filter-status').title.length > 40000"))
            usleep(800_000)
            _ = try browser.waitFor("\(Self.overflow) === '[]'", timeout: 5) // the page redraws for a new width within a second
            let searched = try browser.evaluate(Self.overflow)
            #expect(searched == "[]", "nothing wider than its box with a 40,000-character search at \(width) px: \(searched.jsonText)")
            #expect(try browser.evaluate("getComputedStyle(document.querySelector('#filter-status')).textOverflow") == "ellipsis")
            try DashboardBrowserFilterTests.setFilter(browser, "f-q", "")
            #expect(try browser.waitFor("!location.hash.includes('q=')"))
        }
        #expect(try browser.evaluate("document.querySelector('#app-error').hidden") == .bool(true))
    }
}
