import TestSupport
import Foundation
import FlowJSON
@testable import FlowScopeServer
import Testing

/// Two runs compared in headless Chromium, with live traffic flowing. (Type name contains
/// "DashboardBrowser": these run one at a time.)
@Suite("Dashboard run comparison in a real browser, with live traffic", .serialized, .heavy)
struct DashboardBrowserCompareTests {
    /// The compare table's cell of `metric` for `placement`: [a, b, delta] as the page wrote them.
    static func cell(_ placement: String, _ metric: String) -> String {
        "(() => { const td = document.querySelector('#compare tr[data-placement=\"\(placement)\"] td[data-metric=\"\(metric)\"]');"
            + " return td ? [td.dataset.a, td.dataset.b, td.dataset.delta, td.textContent] : null; })()"
    }

    @Test("a test run compared with live traffic: per placement the calls, p50, p95, errors and targeting lost of both with B minus A, both histograms overlaid, kept in the URL; a placement of one run only shows a dash")
    func testRunAgainstLive() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        // Live: 6 slow checkout calls from the cache. The test run: 10 fast ones from the network, two
        // of them with targeting lost, and 3 calls of a placement live traffic uses too.
        for i in 0..<6 { _ = try stack.ingest(DemoCalls.call(run: "live", placement: "checkout", t: Double(i), source: "cache", duration: 2)) }
        for i in 0..<10 {
            _ = try stack.ingest(DemoCalls.call(run: "test:checkout", placement: "checkout", t: Double(i), source: "network", duration: 0.5,
                                                targetingLost: i < 2))
        }
        for i in 0..<3 { _ = try stack.ingest(DemoCalls.call(run: "test:checkout", placement: "live_0", t: Double(20 + i), source: "network", duration: 0.1)) }
        try stack.waitForFetches(placement: "checkout", count: 6)
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack, path: "/#run=live")
        defer { browser.close() }
        let traffic = stack.liveTraffic(interval: 0.1)
        defer { traffic.stop() }
        #expect(try browser.waitFor("document.querySelector('#compare .panel-empty').textContent.includes('Pick a run')"))

        // Picked in the page, as a user picks it.
        #expect(try browser.waitFor("[...document.querySelector('#compare-run').options].some((o) => o.value === 'test:checkout')"))
        _ = try browser.evaluate("(() => { const s = document.querySelector('#compare-run'); s.value = 'test:checkout'; s.dispatchEvent(new Event('change')); })()")
        #expect(try browser.waitFor("location.hash.includes('compare=test%3Acheckout')"), "the comparison is in the URL")
        let seen = try browser.waitFor("\(Self.cell("checkout", "calls")) !== null")
        let panel = try browser.evaluate("document.querySelector('#compare').textContent")
        #expect(seen, "the compare panel shows: \(panel)")
        #expect(try browser.evaluate(Self.cell("checkout", "calls")) == ["6", "10", "4", "6 → 10+4"])
        #expect(try browser.evaluate(Self.cell("checkout", "p50")) == ["2", "0.5", "-1.5", "2.00 s → 500 ms−1.50 s"])
        #expect(try browser.evaluate(Self.cell("checkout", "targetingLost")).arrayValue?[2] == "2")
        #expect(try browser.evaluate(Self.cell("checkout", "sources")).arrayValue?[3].stringValue?.contains("network – → 100%") == true)
        #expect(try browser.evaluate(Self.cell("checkout", "sources")).arrayValue?[3].stringValue?.contains("cache 100% → –") == true)
        // A placement live traffic keeps adding to: B's 3 calls against A's growing count.
        #expect(try browser.waitFor("(() => { const c = \(Self.cell("live_0", "calls")); return c && Number(c[0]) > 0 && c[1] === '3'; })()", timeout: 15))
        // Only in A: B is a dash and there is no difference.
        #expect(try browser.waitFor("(() => { const c = \(Self.cell("live_1", "calls")); return c && c[1] === '' && c[2] === '' && c[3].includes('→ –'); })()", timeout: 15))
        // Both histograms, overlaid.
        #expect(try browser.waitFor("document.querySelectorAll('#compare svg.compare-chart rect.compare-a').length > 0 && document.querySelectorAll('#compare svg.compare-chart rect.compare-b').length > 0"))
        // Live counts move on while the page stays open (refreshed every 5 s).
        let before = try browser.evaluate("Number(\(Self.cell("live_0", "calls"))[0])").numberValue ?? 0
        #expect(try browser.waitFor("Number(\(Self.cell("live_0", "calls"))[0]) > \(before)", timeout: 20), "A follows live traffic")
        #expect(try browser.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth") == .bool(true),
                "the comparison does not widen the page")

        // The URL reopens the comparison.
        let other = try DashboardBrowserDebuggerTests.openPage(chromium, stack, path: "/#run=live&compare=test%3Acheckout")
        defer { other.close() }
        #expect(try other.waitFor("document.querySelector('#compare-run').value === 'test:checkout' && \(Self.cell("checkout", "calls")) !== null"))
        #expect(try other.evaluate(Self.cell("checkout", "calls")).arrayValue?[1] == "10")
        // No other run picked: the table goes away.
        _ = try other.evaluate("(() => { const s = document.querySelector('#compare-run'); s.value = ''; s.dispatchEvent(new Event('change')); })()")
        #expect(try other.waitFor("document.querySelector('#compare table').hidden && !location.hash.includes('compare=')"))
    }

    @Test("two time ranges of one run: this run before and after a moment, each side's calls and p50 from its own range, kept in the URL")
    func twoRangesOfOneRun() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        // 4 slow checkout calls, then (after a moment) 7 fast ones, in the same run.
        for i in 0..<4 { _ = try stack.ingest(DemoCalls.call(run: "live", placement: "checkout", t: Double(i), source: "cache", duration: 2)) }
        try stack.waitForFetches(placement: "checkout", count: 4)
        Thread.sleep(forTimeInterval: 1.5)
        let moment = Int(Date().timeIntervalSince1970)
        Thread.sleep(forTimeInterval: 1.5)
        for i in 0..<7 { _ = try stack.ingest(DemoCalls.call(run: "live", placement: "checkout", t: Double(i), source: "network", duration: 0.5)) }
        try stack.waitForFetches(placement: "checkout", count: 11)
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack, path: "/#run=live")
        defer { browser.close() }
        let traffic = stack.liveTraffic(interval: 0.2)
        defer { traffic.stop() }

        _ = try browser.evaluate("(() => { const s = document.querySelector('#compare-run'); s.value = '@same'; s.dispatchEvent(new Event('change')); })()")
        #expect(try browser.waitFor("!document.querySelector('#compare .compare-ranges').hidden"), "the ranges show once B is picked")
        // With no range, both sides are the whole run.
        #expect(try browser.waitFor("(() => { const c = \(Self.cell("checkout", "calls")); return c && c[0] === '11' && c[1] === '11' && c[2] === '0'; })()"))
        for (id, value) in [("compare-aTo", "\(moment)"), ("compare-bFrom", "\(moment)")] {
            _ = try browser.evaluate("(() => { const i = document.querySelector('#\(id)'); i.value = '\(value)'; i.dispatchEvent(new Event('input')); })()")
        }
        #expect(try browser.waitFor("(() => { const c = \(Self.cell("checkout", "calls")); return c && c[0] === '4' && c[1] === '7' && c[2] === '3'; })()", timeout: 15),
                "A counts the calls before the moment, B those after")
        #expect(try browser.evaluate(Self.cell("checkout", "p50")).arrayValue?[0...2].map { $0 } == ["2", "0.5", "-1.5"])
        #expect(try browser.waitFor("location.hash.includes('compare=%40same') && location.hash.includes('aTo=\(moment)') && location.hash.includes('bFrom=\(moment)')"))
        #expect(try browser.evaluate("document.querySelector('#compare-note').textContent").stringValue?.contains("B: live, from \(moment)") == true)
        #expect(try browser.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth") == .bool(true))

        // The URL reopens both ranges; a range the server refuses is said in the panel.
        let other = try DashboardBrowserDebuggerTests.openPage(chromium, stack, path: "/#run=live&compare=%40same&aTo=\(moment)&bFrom=soon")
        defer { other.close() }
        #expect(try other.waitFor("document.querySelector('#compare-aTo').value === '\(moment)' && document.querySelector('#compare-bFrom').value === 'soon'"))
        let refused = try other.waitFor("document.querySelector('#compare .panel-empty').textContent.includes('HTTP 400') && document.querySelector('#compare table').hidden")
        let panel = try other.evaluate("document.querySelector('#compare').textContent")
        #expect(refused, "the compare panel shows: \(panel)")
    }
}
