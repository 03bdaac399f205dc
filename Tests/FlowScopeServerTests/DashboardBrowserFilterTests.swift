import TestSupport
import Foundation
import FlowEvents
import FlowJSON
@testable import FlowScopeServer
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The filter bar, the histogram drill-down and the waterfall's axis in headless Chromium, with live
/// traffic ingested. (Type name contains "DashboardBrowser": the Makefile runs these serially.)
@Suite("Dashboard filters in a real browser, with live traffic", .serialized, .heavy)
struct DashboardBrowserFilterTests {
    /// Sets a filter control as a user does (its value, then `change`).
    static func setFilter(_ browser: DevToolsBrowser, _ id: String, _ value: String) throws {
        _ = try browser.evaluate("""
            (() => { const c = document.getElementById(\(JSONValue.string(id).jsonText)); c.value = \(JSONValue.string(value).jsonText);
              c.dispatchEvent(new Event('change')); })()
            """)
    }

    /// GET on the stack's API, parsed.
    static func api(_ stack: DashboardStack, _ pathAndQuery: String) throws -> JSONValue {
        try JSON5.parse(try stack.fixture.connect().request("GET", pathAndQuery).text)
    }

    /// The placements table shows, per placement, the calls of `/api/calls?<query>` that concern it
    /// (a preload's for each placement it names), with the count column titled Calls.
    static func expectPlacementsTable(_ browser: DevToolsBrowser, _ stack: DashboardStack, _ query: String, preload: String? = nil,
                                      sourceLocation: SourceLocation = #_sourceLocation) throws {
        let calls = try api(stack, "/api/calls?\(query)&limit=1000")["calls"]?.arrayValue ?? []
        var expected: [String: Double] = [:]
        for c in calls {
            for p in c["placements"]?.arrayValue ?? [c["placement"] ?? .null] { if let p = p.stringValue { expected[p, default: 0] += 1 } }
        }
        #expect(!expected.isEmpty, sourceLocation: sourceLocation)
        if let preload { #expect((expected[preload] ?? 0) > 0, "a preload names \(preload)", sourceLocation: sourceLocation) }
        let table = "JSON.stringify(Object.fromEntries([...document.querySelectorAll('#placements tbody tr')].map((tr) => [tr.dataset.placement, Number(tr.querySelector('td.count').textContent.replace(/,/g, ''))])))"
        let want = JSONValue.object(expected.mapValues(JSONValue.number))
        let ok = try browser.waitFor("(() => { const t = JSON.parse(\(table)); const w = \(want.jsonText); return Object.keys(t).length === Object.keys(w).length && Object.keys(w).every((k) => t[k] === w[k]); })()")
        let shown = try browser.evaluate(table).stringValue ?? "?"
        #expect(ok, "table \(shown) vs server \(want.jsonText)", sourceLocation: sourceLocation)
        #expect(try browser.evaluate("document.querySelector('#placements th[data-col=count]').textContent") == "Calls", sourceLocation: sourceLocation)
    }

    /// The KPIs, every cell of the placements table (a last error's age, "6s ago", left out: it
    /// changes with the clock) and the count column's header, as JSON text.
    static let kpisAndTable = """
        JSON.stringify([['fetches', 'network', 'p50', 'p95', 'timeouts', 'targetingLost', 'errors']
          .map((k) => document.querySelector(`.kpi[data-kpi=${k}] .kpi-value`).textContent),
          [...document.querySelectorAll('#placements tbody tr')].map((tr) => [...tr.children]
            .map((c) => c.textContent.replace(/(just now|\\d+\\s?[smhd] ago)$/, ''))),
          document.querySelector('#placements th[data-col=count]').textContent])
        """

    /// Sets `minDuration=0` (a filter that excludes nothing on a run without open calls) and expects the
    /// KPIs and the placements table to show what they showed without it; returns what they show.
    static func expectSameWithNoOpFilter(_ browser: DevToolsBrowser, sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
        let plain = try browser.evaluate(kpisAndTable).stringValue ?? "?"
        try setFilter(browser, "f-min", "0")
        #expect(try browser.waitFor("location.hash.includes('minDuration=0') && document.querySelector('.kpi[data-kpi=fetches] .kpi-sub').textContent.endsWith(' matching calls')"),
                sourceLocation: sourceLocation)
        usleep(1_000_000)
        let filtered = try browser.evaluate(kpisAndTable).stringValue ?? "?"
        #expect(filtered == plain, "no filter \(plain), minDuration=0 \(filtered)", sourceLocation: sourceLocation)
        return plain
    }

    static let kpiFetches = "document.querySelector('.kpi[data-kpi=fetches] .kpi-value').textContent"
    static let callRequests = "performance.getEntriesByType('resource').filter((r) => r.name.includes('/api/calls?')).length"

    @Test("a filter narrows the waterfall, the histogram, the KPIs and the tail to the matching calls, refetched at most once a second and not while paused")
    func filterNarrowsEveryPanel() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack)
        defer { browser.close() }
        let traffic = stack.liveTraffic(interval: 0.1)
        defer { traffic.stop() }
        _ = try browser.evaluate("performance.setResourceTimingBufferSize(100000)") // count every request below
        #expect(try browser.waitFor("document.querySelectorAll('#waterfall g.wf-call[data-source=\"network\"]').length > 2"))

        try Self.setFilter(browser, "f-source", "cache")
        #expect(try browser.waitFor("location.hash.includes('source=cache')"), "the filter is in the URL")
        let onlyCache = """
            (() => { const rows = [...document.querySelectorAll('#waterfall g.wf-call')];
              return rows.length > 0 && rows.every((g) => g.dataset.source === 'cache'); })()
            """
        #expect(try browser.waitFor(onlyCache), "the waterfall shows cache calls only")
        #expect(try browser.waitFor("\(Self.kpiFetches) !== '–' && document.querySelector('.kpi[data-kpi=fetches] .kpi-sub').textContent.endsWith(' matching calls')"))

        // Live: new matching calls keep arriving, with one /api/calls request a second at most.
        let before = try browser.evaluate(Self.callRequests).numberValue ?? 0
        let shownBefore = try browser.evaluate("Number(\(Self.kpiFetches).replace(/,/g, ''))").numberValue ?? 0
        usleep(4_000_000)
        let during = (try browser.evaluate(Self.callRequests).numberValue ?? 0) - before
        #expect(during >= 2 && during <= 5, "\(during) /api/calls requests in 4 s of traffic")
        #expect((try browser.evaluate("Number(\(Self.kpiFetches).replace(/,/g, ''))").numberValue ?? 0) > shownBefore, "the KPIs followed the traffic")

        // Paused: no request at all while traffic flows.
        _ = try browser.evaluate("document.querySelector('#pause').click()")
        usleep(300_000)
        let pausedAt = try browser.evaluate(Self.callRequests).numberValue ?? 0
        usleep(2_500_000)
        #expect(try browser.evaluate(Self.callRequests).numberValue == pausedAt, "nothing is fetched while paused")
        _ = try browser.evaluate("document.querySelector('#pause').click()")

        // Still: what every panel shows is the server's answer for the filter.
        traffic.stop()
        usleep(300_000)
        let answer = try Self.api(stack, "/api/calls?run=live&source=cache&limit=1000")
        let matched = Int(answer["counts"]?["matched"]?.numberValue ?? -1)
        #expect(matched > 3)
        #expect(try browser.waitFor("\(Self.kpiFetches) === '\(matched)'"), "KPI fetches = the \(matched) matching calls, all of them fetches that ended")
        #expect(try browser.waitFor("[...document.querySelectorAll('#histogram g.bin')].reduce((s, g) => s + Number(g.dataset.count), 0) === \(matched)"),
                "the histogram counts the matching calls")
        let traces = Set(answer["calls"]?.arrayValue?.compactMap { $0["trace"]?.stringValue } ?? [])
        let shown = try browser.evaluate("[...document.querySelectorAll('#waterfall g.wf-call')].map((g) => g.dataset.trace)").arrayValue ?? []
        #expect(!shown.isEmpty && shown.allSatisfy { traces.contains($0.stringValue ?? "") }, "every waterfall row is a matching call")
        let ends = try browser.evaluate("[...document.querySelectorAll('#tail tbody tr[data-name=\"fetch.end\"] td.attrs')].map((td) => td.textContent)").arrayValue ?? []
        #expect(!ends.isEmpty && ends.allSatisfy { ($0.stringValue ?? "").contains("source=cache") }, "the tail holds the matching calls' events: \(ends.prefix(3))")

        // The placements table: per placement, the matching calls the server answers.
        try Self.expectPlacementsTable(browser, stack, "run=live&source=cache")
        // A filter that preloads pass: the preload counts for the placement it names.
        try Self.setFilter(browser, "f-source", "")
        try Self.setFilter(browser, "f-min", "0")
        #expect(try browser.waitFor("location.hash.includes('minDuration=0') && !location.hash.includes('source=')"))
        try Self.expectPlacementsTable(browser, stack, "run=live&minDuration=0", preload: "settings_upsell")

        // Clearing the filters shows every call again.
        _ = try browser.evaluate("document.querySelector('#f-clear').click()")
        #expect(try browser.waitFor("[...document.querySelectorAll('#waterfall g.wf-call')].some((g) => g.dataset.source === 'network')"))
        #expect(try browser.evaluate("location.hash.includes('source=')") == .bool(false))
    }

    @Test("the KPIs and the placements table show the same numbers with no filter and with a filter that excludes nothing (minDuration=0 on a run without open calls)")
    func noOpFilterKeepsKpis() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack, path: "/#run=live")
        defer { browser.close() }
        #expect(try browser.waitFor("\(Self.kpiFetches) !== '–' && \(Self.kpiFetches) !== '0'"))
        usleep(1_500_000)
        let plain = try Self.expectSameWithNoOpFilter(browser)
        #expect(plain.contains("settings_upsell") && plain.contains("main_paywall"), "the table has its rows: \(plain)")
    }

    @Test("a bad filter value is refused with a message naming the parameter; a filter nothing matches says so")
    func badFilterNamed() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack)
        defer { browser.close() }
        try Self.setFilter(browser, "f-min", "fast")
        #expect(try browser.waitFor("!document.querySelector('#filter-error').hidden"))
        let text = try browser.evaluate("document.querySelector('#filter-error').textContent").stringValue ?? ""
        #expect(text.contains("minDuration: expected a duration"), "\(text)")
        try Self.setFilter(browser, "f-min", "1s")
        #expect(try browser.waitFor("document.querySelector('#filter-error').hidden && document.querySelectorAll('#waterfall g.wf-call').length === 2"),
                "1 s or longer: the 4.7 s getFlow and the 5 s preload")
        try Self.setFilter(browser, "f-audience", "nobody")
        #expect(try browser.waitFor("document.querySelectorAll('#waterfall g.wf-call').length === 0 && !document.querySelector('#waterfall > .panel-empty').hidden"))
        #expect(try browser.evaluate("document.querySelector('#waterfall > .panel-empty').textContent") == "No call matches these filters.")
        #expect(try browser.evaluate("document.querySelector('#filter-status').textContent.startsWith('0 of 4 calls match')") == .bool(true))
    }

    @Test("clicking a histogram bar, or Enter on it, lists exactly the calls it counts; a listed call opens")
    func binListsItsCalls() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack)
        defer { browser.close() }
        let traffic = stack.liveTraffic(interval: 0.05, limit: 60)
        defer { traffic.stop() }
        try Self.setFilter(browser, "f-call", "getFlow")
        #expect(try browser.waitFor("location.hash.includes('callName=getFlow')"))
        traffic.stop()
        usleep(1_500_000) // the last calls reach the store and the page refetches
        let answer = try Self.api(stack, "/api/calls?run=live&call=getFlow&limit=1")
        let matched = Int(answer["counts"]?["matched"]?.numberValue ?? -1)
        #expect(try browser.waitFor("[...document.querySelectorAll('#histogram g.bin')].reduce((s, g) => s + Number(g.dataset.count), 0) === \(matched)"))

        // The fullest bin that has an upper edge (not the last one, which holds every longer call too).
        let bin = try browser.evaluate("""
            (() => { const bins = [...document.querySelectorAll('#histogram g.bin')].filter((g) => g.dataset.hi !== undefined);
              bins.sort((a, b) => Number(b.dataset.count) - Number(a.dataset.count)); const g = bins[0];
              g.scrollIntoView({ block: 'center' }); const r = g.querySelector('.bin-hit').getBoundingClientRect();
              return { index: g.dataset.index, lo: g.dataset.lo, hi: g.dataset.hi, count: Number(g.dataset.count), x: r.left + r.width / 2, y: r.top + r.height - 3 }; })()
            """)
        let count = Int(try #require(bin["count"]?.numberValue))
        let lo = try #require(bin["lo"]?.stringValue), hi = try #require(bin["hi"]?.stringValue)
        try browser.click(x: try #require(bin["x"]?.numberValue), y: try #require(bin["y"]?.numberValue))
        #expect(try browser.waitFor("!document.querySelector('#bin-calls').hidden"), "the bin's calls are listed")
        let listed = try browser.evaluate("[...document.querySelectorAll('#bin-calls button.bin-call')].map((b) => b.dataset.trace)").arrayValue?
            .compactMap(\.stringValue) ?? []
        #expect(listed.count == count, "\(listed.count) listed, the bar counts \(count)")
        let server = try Self.api(stack, "/api/calls?run=live&call=getFlow&minDuration=\(lo)&maxDuration=\(hi)&limit=1000")
        let expected = server["calls"]?.arrayValue?.compactMap { $0["trace"]?.stringValue } ?? []
        #expect(Set(listed) == Set(expected) && listed.count == expected.count, "the list is exactly the server's calls of \(lo) <= duration < \(hi)")

        // Keyboard: Escape closes the list, Enter on the focused bar lists it again.
        try browser.press("Escape")
        #expect(try browser.waitFor("document.querySelector('#bin-calls').hidden"))
        _ = try browser.evaluate("document.querySelector('#histogram g.bin[data-index=\"\(bin["index"]?.stringValue ?? "")\"]').focus()")
        try browser.press("Enter")
        #expect(try browser.waitFor("!document.querySelector('#bin-calls').hidden && document.querySelectorAll('#bin-calls button.bin-call').length === \(count)"))

        // A listed call opens in the call panel.
        let first = try #require(listed.first)
        _ = try browser.evaluate("document.querySelector('#bin-calls button.bin-call').click()")
        #expect(try browser.waitFor("document.querySelector('#trace-detail').dataset.trace === '\(first)' && document.querySelectorAll('#trace-detail tbody tr').length === 4"),
                "the listed call opened with its 4 events")
    }

    @Test("a URL with filters and a time range reopens the filtered view; Back returns to the view before the filter")
    func urlReopensFilteredView() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack)
        defer { browser.close() }
        let traffic = stack.liveTraffic(interval: 0.2)
        defer { traffic.stop() }
        #expect(try browser.waitFor("document.querySelectorAll('#waterfall g.wf-call[data-placement^=\"live_\"]').length > 0"))
        try Self.setFilter(browser, "f-range", "5m")
        try Self.setFilter(browser, "filter-placement", "main_paywall")
        try Self.setFilter(browser, "f-targeting", "true")
        let lostOnly = """
            (() => { const rows = [...document.querySelectorAll('#waterfall g.wf-call')];
              return rows.length === 1 && rows[0].dataset.placement === 'main_paywall' && rows[0].dataset.source === 'defaultAudience'; })()
            """
        #expect(try browser.waitFor(lostOnly), "the one main_paywall call that lost targeting")
        let url = try browser.evaluate("location.href").stringValue ?? ""
        #expect(url.contains("range=5m") && url.contains("placement=main_paywall") && url.contains("targetingLost=true"), "\(url)")

        let other = try DevToolsBrowser(executable: chromium.path)
        defer { other.close() }
        try other.open(url)
        #expect(try other.waitFor("document.body.dataset.ready === 'true' && \(lostOnly)"), "the link reopened the filtered view")
        #expect(try other.evaluate("[document.querySelector('#f-range').value, document.querySelector('#filter-placement').value, document.querySelector('#f-targeting').value]")
                == ["5m", "main_paywall", "true"])

        _ = try browser.evaluate("history.back()")
        #expect(try browser.waitFor("document.querySelector('#f-targeting').value === '' && document.querySelectorAll('#waterfall g.wf-call').length === 2"),
                "Back: both main_paywall calls")
        _ = try browser.evaluate("history.back()")
        _ = try browser.evaluate("history.back()")
        #expect(try browser.waitFor("document.querySelector('#f-range').value === '' && [...document.querySelectorAll('#waterfall g.wf-call')].some((g) => g.dataset.placement.startsWith('live_'))"),
                "Back to no filter: every call, live traffic included")
    }

    @Test("the time range keeps the calls of the last hour or 5 minutes, or the run's whole span")
    func timeRange() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        var events: [JSONValue] = []
        // Three calls two hours ago (their wall clock is now minus 1 s plus t/1000), two now.
        for i in 0..<3 { events += DemoCalls.call(run: "test:range", placement: "old_\(i)", t: -7_200_000 + Double(i) * 1000, source: "network", duration: 0.1) }
        for i in 0..<2 { events += DemoCalls.call(run: "test:range", placement: "new_\(i)", t: Double(i), source: "cache", duration: 0.1) }
        _ = try stack.ingest(events)
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack, path: "/#run=test%3Arange")
        defer { browser.close() }
        let traffic = stack.liveTraffic(interval: 0.3)
        defer { traffic.stop() }
        let rows = "[...document.querySelectorAll('#waterfall g.wf-call')].map((g) => g.dataset.placement).sort().join(' ')"
        #expect(try browser.waitFor("\(rows) === 'new_0 new_1 old_0 old_1 old_2'"))
        for (range, expected) in [("1h", "new_0 new_1"), ("span", "new_0 new_1 old_0 old_1 old_2"), ("5m", "new_0 new_1"), ("", "new_0 new_1 old_0 old_1 old_2")] {
            try Self.setFilter(browser, "f-range", range)
            #expect(try browser.waitFor("\(rows) === '\(expected)'"), "range \(range.isEmpty ? "all" : range): \(expected)")
        }
    }

    @Test("the waterfall axis fits the calls: a long call is cut and marked with its full duration, budgets past the axis are marked, and dragging on the axis zooms until Reset zoom")
    func zoomAndCut() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        var events: [JSONValue] = []
        for i in 0..<10 { events += DemoCalls.call(run: "test:zoom", placement: "quick_\(i)", t: Double(i), source: "network", duration: 0.1 + Double(i) * 0.02) }
        events += DemoCalls.call(run: "test:zoom", placement: "slow", t: 20, source: "network", duration: 12)
        _ = try stack.ingest(events)
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack, path: "/#run=test%3Azoom")
        defer { browser.close() }
        // Live traffic of another run flows meanwhile.
        let traffic = stack.liveTraffic(interval: 0.2)
        defer { traffic.stop() }
        #expect(try browser.waitFor("document.querySelectorAll('#waterfall g.wf-call').length === 11"))
        let svg = "document.querySelector('#waterfall-chart svg')"
        let axisMax = try browser.evaluate("Number(\(svg).dataset.axisMax)").numberValue ?? 0
        #expect(axisMax > 0.28 && axisMax <= 1, "the axis ends near 1.5 x p90 of the calls, not at 12 s: \(axisMax)")
        #expect(try browser.evaluate("\(svg).dataset.cut") == "1")
        let slow = "document.querySelector('#waterfall g.wf-call[data-placement=\"slow\"]')"
        #expect(try browser.evaluate("\(slow).classList.contains('cut')") == .bool(true))
        #expect(try browser.evaluate("\(slow).querySelector('text.wf-cut').firstChild.nodeValue") == "» 12.0 s", "the cut call says its full duration")
        #expect(try browser.evaluate("document.querySelectorAll('#waterfall g.wf-call.cut').length") == .number(1), "only the long call is cut")
        #expect(try browser.evaluate("document.querySelectorAll('#waterfall .wf-budget-cut').length") == .number(11), "every 4.5 s budget runs past the axis")
        #expect(try browser.evaluate("document.querySelector('#wf-reset-zoom').disabled") == .bool(true))

        // Drag across the axis, from a fifth to three fifths of its track.
        let strip = try browser.evaluate("""
            (() => { const r = document.querySelector('#waterfall-chart .wf-zoom-hit'); r.scrollIntoView({ block: 'center' });
              const b = r.getBoundingClientRect(); return { left: b.left, width: b.width, y: b.top + b.height / 2 }; })()
            """)
        let left = try #require(strip["left"]?.numberValue), width = try #require(strip["width"]?.numberValue), y = try #require(strip["y"]?.numberValue)
        try browser.mouse("mousePressed", x: left + width * 0.2, y: y)
        try browser.mouse("mouseMoved", x: left + width * 0.4, y: y)
        try browser.mouse("mouseMoved", x: left + width * 0.6, y: y)
        try browser.mouse("mouseReleased", x: left + width * 0.6, y: y)
        #expect(try browser.waitFor("!document.querySelector('#wf-reset-zoom').disabled"), "Reset zoom is enabled")
        let zoomed = try browser.evaluate("[Number(\(svg).dataset.axisMin), Number(\(svg).dataset.axisMax)]").arrayValue?.compactMap(\.numberValue) ?? []
        #expect(zoomed.count == 2 && abs(zoomed[0] - axisMax * 0.2) < axisMax * 0.03 && abs(zoomed[1] - axisMax * 0.6) < axisMax * 0.03,
                "zoomed to the dragged span: \(zoomed) of 0 ... \(axisMax)")
        #expect(try browser.evaluate("document.querySelector('#waterfall-note').textContent.startsWith('zoomed to')") == .bool(true))
        _ = try browser.evaluate("document.querySelector('#wf-reset-zoom').click()")
        #expect(try browser.waitFor("document.querySelector('#wf-reset-zoom').disabled && Number(\(svg).dataset.axisMin) === 0 && Number(\(svg).dataset.axisMax) === \(axisMax)"),
                "Reset zoom restores the fitted axis")

        // A new filter starts from the fitted axis again.
        try browser.mouse("mousePressed", x: left + width * 0.1, y: y)
        try browser.mouse("mouseMoved", x: left + width * 0.5, y: y)
        try browser.mouse("mouseReleased", x: left + width * 0.5, y: y)
        #expect(try browser.waitFor("!document.querySelector('#wf-reset-zoom').disabled"))
        try Self.setFilter(browser, "f-min", "0.15")
        #expect(try browser.waitFor("document.querySelector('#wf-reset-zoom').disabled && Number(\(svg).dataset.axisMin) === 0 && document.querySelectorAll('#waterfall g.wf-call').length === 8"),
                "the 7 calls of 0.16 s or more and the long one, on the fitted axis")
        #expect(try browser.evaluate("document.querySelector('#app-error').hidden") == .bool(true))
    }
    /// Ten calls of 0.1-0.28 s in run test:zoom, one a second: the zoom tests' run.
    static let zoomRun: [JSONValue] = (0..<10).flatMap { i in
        DemoCalls.call(run: "test:zoom", placement: "quick_\(i)", t: Double(i), source: "network", duration: 0.1 + Double(i) * 0.02)
    }

    @Test("the zoom is in the URL: a link reopens the waterfall zoomed, + and - zoom from the keyboard, Back undoes a zoom, Reset zoom removes it")
    func zoomInURLAndKeyboard() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(Self.zoomRun)
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack, path: "/#run=test%3Azoom")
        defer { browser.close() }
        let traffic = stack.liveTraffic(interval: 0.2)
        defer { traffic.stop() }
        #expect(try browser.waitFor("document.querySelectorAll('#waterfall g.wf-call').length === 10"))
        let svg = "document.querySelector('#waterfall-chart svg')"
        let axis = "[Number(\(svg).dataset.axisMin), Number(\(svg).dataset.axisMax)]"
        let fit = try #require(try browser.evaluate("Number(\(svg).dataset.axisMax)").numberValue)
        let hash = try browser.evaluate("location.hash").stringValue ?? ""
        #expect(fit > 0 && !hash.contains("zoom="))

        // Keyboard: + halves the axis span from its start, - doubles it back to the fitted axis.
        _ = try browser.evaluate("document.querySelector('#waterfall g.wf-call[tabindex=\"0\"]').focus()")
        try browser.press("+")
        let zoomedIn = try browser.waitFor("JSON.stringify(\(axis)) === JSON.stringify([0, \(fit / 2)]) && !document.querySelector('#wf-reset-zoom').disabled")
        let shown = try browser.evaluate(axis).jsonText
        #expect(zoomedIn, "+ zoomed to 0 ... \(fit / 2): \(shown)")
        #expect(try browser.waitFor("location.hash.includes('zoom=0-')"), "the zoom is in the URL")
        #expect(try browser.evaluate("document.activeElement.closest('#waterfall-chart g.wf-call') !== null") == .bool(true), "the focus stays on the row")
        try browser.press("+")
        #expect(try browser.waitFor("Number(\(svg).dataset.axisMax) === \(fit / 4)"))
        try browser.press("-")
        #expect(try browser.waitFor("Number(\(svg).dataset.axisMax) === \(fit / 2)"))

        // Back undoes each zoom, down to the fitted axis.
        _ = try browser.evaluate("history.back()")
        #expect(try browser.waitFor("Number(\(svg).dataset.axisMax) === \(fit / 4)"), "Back: the zoom before")
        _ = try browser.evaluate("history.back()")
        _ = try browser.evaluate("history.back()")
        let backToFit = try browser.waitFor("JSON.stringify(\(axis)) === JSON.stringify([0, \(fit)]) && document.querySelector('#wf-reset-zoom').disabled && !location.hash.includes('zoom=')")
        let afterBack = try browser.evaluate(axis).jsonText
        #expect(backToFit, "Back to the fitted axis: \(afterBack)")
        _ = try browser.evaluate("document.querySelector('#waterfall g.wf-call[tabindex=\"0\"]').focus()")
        try browser.press("+")
        #expect(try browser.waitFor("Number(\(svg).dataset.axisMax) === \(fit / 2)"))
        try browser.press("-")
        #expect(try browser.waitFor("JSON.stringify(\(axis)) === JSON.stringify([0, \(fit)]) && document.querySelector('#wf-reset-zoom').disabled && !location.hash.includes('zoom=')"),
                "- back out to the fitted axis removes the zoom")

        // A link with a zoom reopens the waterfall zoomed; Reset zoom takes it out of the URL.
        let url = (try browser.evaluate("location.href.split('#')[0]").stringValue ?? "") + "#run=test%3Azoom&zoom=0.05-0.2"
        let other = try DevToolsBrowser(executable: chromium.path)
        defer { other.close() }
        try other.open(url)
        #expect(try other.waitFor("document.body.dataset.ready === 'true' && document.querySelectorAll('#waterfall g.wf-call').length === 10 && JSON.stringify(\(axis)) === '[0.05,0.2]'"),
                "the link reopened the zoom")
        #expect(try other.evaluate("!document.querySelector('#wf-reset-zoom').disabled && document.querySelector('#waterfall-note').textContent.startsWith('zoomed to')") == .bool(true))
        _ = try other.evaluate("document.querySelector('#wf-reset-zoom').click()")
        #expect(try other.waitFor("JSON.stringify(\(axis)) === JSON.stringify([0, \(fit)]) && !location.hash.includes('zoom=')"), "Reset zoom removes it from the URL")
        #expect(try other.evaluate("document.querySelector('#app-error').hidden") == .bool(true))
    }


    /// The contrast ratio (WCAG) of an element's colour, or of its outline, against the first opaque
    /// background behind it; -1 when the element is missing.
    static func contrast(_ selector: String, _ property: String = "color") -> String {
        """
        (() => {
          // rgb()/rgba() in 0-255, or color(srgb r g b / a) in 0-1 (what color-mix() computes to).
          const rgb = (c) => { const v = (c.match(/[\\d.]+/g) || []).slice(0, 4).map(Number);
            return c.startsWith('color(srgb') ? v.map((x, i) => i < 3 ? x * 255 : x) : v; };
          const lum = ([r, g, b]) => [r, g, b].map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
            .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
          const node = document.querySelector(\(JSONValue.string(selector).jsonText));
          if (!node) return -1;
          let back = node;
          while (back && (rgb(getComputedStyle(back).backgroundColor)[3] === 0 || getComputedStyle(back).backgroundColor === 'transparent')) back = back.parentElement;
          const bg = rgb(getComputedStyle(back ?? document.body).backgroundColor);
          const fg = rgb(getComputedStyle(node)[\(JSONValue.string(property).jsonText)]);
          const [x, y] = [lum(fg), lum(bg)].sort((p, q) => q - p);
          return Math.round((x + 0.05) / (y + 0.05) * 100) / 100; })()
        """
    }

    @Test("the zoom buttons are real buttons outside the chart, reached with Tab, named, with a visible focus and AA contrast in both themes, and act exactly as +, - and 0: same axis, same zoom= in the URL, same history entries")
    func zoomButtons() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(Self.zoomRun)
        // One page zoomed from the keyboard on a row, one with the buttons; live traffic of another run meanwhile.
        let keys = try DashboardBrowserDebuggerTests.openPage(chromium, stack, path: "/#run=test%3Azoom")
        defer { keys.close() }
        let buttons = try DashboardBrowserDebuggerTests.openPage(chromium, stack, path: "/#run=test%3Azoom")
        defer { buttons.close() }
        let traffic = stack.liveTraffic(interval: 0.2)
        defer { traffic.stop() }
        for page in [keys, buttons] { #expect(try page.waitFor("document.querySelectorAll('#waterfall g.wf-call').length === 10")) }

        // Real buttons, outside any picture, with their names.
        let ids = ["#wf-zoom-in": "Zoom in", "#wf-zoom-out": "Zoom out", "#wf-reset-zoom": "Reset zoom"]
        for (id, name) in ids.sorted(by: { $0.key < $1.key }) {
            let sel = JSONValue.string(id).jsonText
            #expect(try buttons.evaluate("(() => { const b = document.querySelector(\(sel)); return b !== null && b.tagName === 'BUTTON' && b.type === 'button' && !b.hidden && b.closest('[role=img], svg') === null; })()") == .bool(true),
                    "\(id) is a visible <button> outside any role=img element")
            let ax = try buttons.accessibility(id)
            #expect(ax?.role == "button" && ax?.name == name, "\(id): role and accessible name \(String(describing: ax))")
        }
        let disabled = "['#wf-zoom-in', '#wf-zoom-out', '#wf-reset-zoom'].map((id) => document.querySelector(id).disabled)"
        #expect(try buttons.evaluate(disabled) == [false, true, true], "on the fitted axis: nothing to zoom out or reset")

        // Keyboard: Tab from the filter bar's last control reaches Zoom in, with a visible focus ring.
        func tabToZoomIn(sourceLocation: SourceLocation = #_sourceLocation) throws {
            _ = try buttons.evaluate("document.querySelector('#f-clear').focus()")
            var reached = false
            for _ in 0..<8 where !reached {
                try buttons.press("Tab")
                reached = try buttons.evaluate("document.activeElement?.id === 'wf-zoom-in'") == .bool(true)
            }
            #expect(reached, "Tab reaches Zoom in", sourceLocation: sourceLocation)
            let ring = try buttons.evaluate("(() => { const s = getComputedStyle(document.activeElement); return [document.activeElement.matches(':focus-visible'), s.outlineStyle, parseFloat(s.outlineWidth)]; })()")
            #expect(ring.arrayValue?.first == .bool(true) && ring.arrayValue?[1] == "solid" && (ring.arrayValue?[2].numberValue ?? 0) >= 2,
                    "a visible 2 px focus ring: \(ring.jsonText)", sourceLocation: sourceLocation)
        }
        try tabToZoomIn()

        // The same steps on both pages: keys on a focused row, the buttons by Enter, Space and mouse clicks.
        let svg = "document.querySelector('#waterfall-chart svg')"
        let view = "JSON.stringify([Number(\(svg).dataset.axisMin), Number(\(svg).dataset.axisMax), new URLSearchParams(location.hash.slice(1)).get('zoom'), \(disabled)])"
        let steps: [(key: String, button: String, how: String)] = [
            ("+", "#wf-zoom-in", "Enter"), ("+", "#wf-zoom-in", "click"), ("-", "#wf-zoom-out", "click"), ("0", "#wf-reset-zoom", "click"),
            ("+", "#wf-zoom-in", " "), ("+", "#wf-zoom-in", "click"), ("-", "#wf-zoom-out", "click"), ("-", "#wf-zoom-out", "click"),
        ]
        var views: [String] = [try keys.evaluate(view).stringValue ?? ""]
        #expect(try buttons.evaluate(view).stringValue == views[0])
        let startKeys = try keys.evaluate("history.length").numberValue ?? 0
        let startButtons = try buttons.evaluate("history.length").numberValue ?? 0
        for (n, step) in steps.enumerated() {
            _ = try keys.evaluate("document.querySelector('#waterfall g.wf-call[tabindex=\"0\"]').focus()")
            try keys.press(step.key)
            #expect(try keys.waitFor("\(view) !== \(JSONValue.string(views.last ?? "").jsonText)"), "step \(n): \(step.key) changed the view")
            let afterKey = try keys.evaluate(view).stringValue ?? ""
            views.append(afterKey)

            let sel = JSONValue.string(step.button).jsonText
            switch step.how {
            case "click":
                let point = try buttons.evaluate("(() => { const b = document.querySelector(\(sel)); b.scrollIntoView({ block: 'center' }); const r = b.getBoundingClientRect(); return { x: r.left + r.width / 2, y: r.top + r.height / 2 }; })()")
                try buttons.click(x: try #require(point["x"]?.numberValue), y: try #require(point["y"]?.numberValue))
            default:
                _ = try buttons.evaluate("document.querySelector(\(sel)).focus()")
                try buttons.press(step.how)
            }
            let same = try buttons.waitFor("\(view) === \(JSONValue.string(afterKey).jsonText)", timeout: 5)
            let shown = try buttons.evaluate(view).stringValue ?? ""
            #expect(same, "step \(n): \(step.button) by \(step.how) = \(step.key) on a row: \(shown) vs \(afterKey)")
            let keyEntries = (try keys.evaluate("history.length").numberValue ?? 0) - startKeys
            let buttonEntries = (try buttons.evaluate("history.length").numberValue ?? 0) - startButtons
            #expect(buttonEntries == keyEntries, "step \(n): \(buttonEntries) history entries by the buttons, \(keyEntries) by the keys")
            #expect(try buttons.evaluate("document.activeElement !== document.body && document.activeElement !== null") == .bool(true),
                    "step \(n): the focus did not fall back to the page")
        }
        #expect(views[1] != views[0] && views[3] == views[1] && views[4] == views[0], "+ zoomed, - came back, 0 reset: \(views)")
        #expect(views.last == views[0], "- twice back to the fitted axis: \(views)")
        #expect(try buttons.evaluate("document.activeElement.id") == "wf-zoom-in", "Zoom out disabled by its own press hands the focus to Zoom in")

        // Back undoes a button's zoom, as it does a key's.
        _ = try buttons.evaluate("document.querySelector('#wf-zoom-in').click()")
        #expect(try buttons.waitFor("location.hash.includes('zoom=0-') && !document.querySelector('#wf-reset-zoom').disabled"))
        _ = try buttons.evaluate("history.back()")
        #expect(try buttons.waitFor("!location.hash.includes('zoom=') && document.querySelector('#wf-reset-zoom').disabled && document.querySelector('#wf-zoom-out').disabled"),
                "Back: the fitted axis, nothing to reset")

        // Contrast, enabled and disabled, and the focus ring, in both themes.
        _ = try buttons.evaluate("document.querySelector('#wf-zoom-in').click()") // Zoom out and Reset zoom enabled
        #expect(try buttons.waitFor("!document.querySelector('#wf-zoom-out').disabled"))
        for scheme in ["light", "dark"] {
            try buttons.emulate(colorScheme: scheme)
            usleep(200_000)
            for id in ["#wf-zoom-in", "#wf-zoom-out"] {
                let ratio = try buttons.evaluate(Self.contrast(id)).numberValue ?? -1
                #expect(ratio >= 4.5, "\(scheme) \(id) text: \(ratio):1")
            }
            try tabToZoomIn()
            let outline = try buttons.evaluate(Self.contrast("#wf-zoom-in", "outlineColor")).numberValue ?? -1
            #expect(outline >= 3, "\(scheme) focus ring: \(outline):1 (non-text contrast)")
        }
        _ = try buttons.evaluate("document.querySelector('#wf-reset-zoom').click()")
        #expect(try buttons.waitFor("document.querySelector('#wf-zoom-out').disabled && document.querySelector('#wf-reset-zoom').disabled"))
        for scheme in ["light", "dark"] {
            try buttons.emulate(colorScheme: scheme)
            usleep(200_000)
            let ratio = try buttons.evaluate(Self.contrast("#wf-reset-zoom")).numberValue ?? -1
            #expect(ratio >= 4.5, "\(scheme) disabled Reset zoom text, still readable: \(ratio):1")
        }
        #expect(try buttons.evaluate("document.querySelector('#app-error').hidden") == .bool(true))
    }


    @Test("a histogram bar's listed calls and the highlighted range stay the same range of durations while live calls rescale the chart")
    func listedRangeStaysHighlighted() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        var base: [JSONValue] = []
        for i in 0..<30 { base += DemoCalls.call(run: "live", placement: "base_\(i % 3)", t: Double(i), source: "network", duration: 0.1 + Double(i % 10) * 0.03) }
        _ = try stack.ingest(base)
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack)
        defer { browser.close() }
        let total = "[...document.querySelectorAll('#histogram g.bin')].reduce((s, g) => s + Number(g.dataset.count), 0)"
        #expect(try browser.waitFor("\(total) === 30"))

        // Click the fullest bar that has an upper edge, as a user does.
        let bin = try browser.evaluate("""
            (() => { const bins = [...document.querySelectorAll('#histogram g.bin')].filter((g) => g.dataset.hi !== undefined);
              bins.sort((a, b) => Number(b.dataset.count) - Number(a.dataset.count)); const g = bins[0];
              g.scrollIntoView({ block: 'center' }); const r = g.querySelector('.bin-hit').getBoundingClientRect();
              return { lo: Number(g.dataset.lo), hi: Number(g.dataset.hi), count: Number(g.dataset.count), x: r.left + r.width / 2, y: r.top + r.height - 3 }; })()
            """)
        let lo = try #require(bin["lo"]?.numberValue), hi = try #require(bin["hi"]?.numberValue)
        let count = Int(try #require(bin["count"]?.numberValue))
        // Point at the bar first, as a user does, and click once it is still under the pointer: a panel
        // above may still grow as the page's first answers arrive and move the chart down.
        var (x, y) = (try #require(bin["x"]?.numberValue), try #require(bin["y"]?.numberValue))
        for _ in 0..<10 {
            try browser.mouse("mouseMoved", x: x, y: y)
            usleep(300_000)
            let at = try browser.evaluate("""
                (() => { const g = [...document.querySelectorAll('#histogram g.bin')].find((b) => Number(b.dataset.lo) === \(lo));
                  const r = g.querySelector('.bin-hit').getBoundingClientRect();
                  return { x: r.left + r.width / 2, y: r.top + r.height - 3,
                    under: Number(document.elementFromPoint(\(x), \(y))?.closest('g.bin')?.dataset.lo ?? -1) }; })()
                """)
            if at["under"]?.numberValue == lo { break }
            (x, y) = (try #require(at["x"]?.numberValue), try #require(at["y"]?.numberValue))
        }
        try browser.click(x: x, y: y)
        try browser.mouse("mouseMoved", x: 2, y: 2)
        #expect(try browser.waitFor("!document.querySelector('#bin-calls').hidden && document.querySelectorAll('#bin-calls button.bin-call').length === \(count)"))
        let listedTraces = "JSON.stringify([...document.querySelectorAll('#bin-calls button.bin-call')].map((b) => b.dataset.trace).sort())"
        let listed = try browser.evaluate(listedTraces).stringValue ?? ""
        let durations = try browser.evaluate("[...document.querySelectorAll('#bin-calls button.bin-call')].map((b) => Number(b.dataset.duration))").arrayValue?.compactMap(\.numberValue) ?? []
        #expect(durations.count == count && durations.allSatisfy { $0 >= lo && $0 < hi }, "the list holds the calls of \(lo) ..< \(hi): \(durations)")
        let scaleBefore = try browser.evaluate("(() => { const g = document.querySelector('#histogram g.bin'); return Number(g.dataset.hi) - Number(g.dataset.lo); })()").numberValue ?? 0

        // Where the chart draws the listed range now: the bars' own time-to-pixel scale (a bar's hit area
        // spans its lo + 1 px to its hi - 1 px) applied to [lo, hi), against the highlight's extent (the
        // listed-range band, or the bar marked open).
        let check = """
            (() => { const bins = [...document.querySelectorAll('#histogram g.bin')].filter((g) => g.dataset.hi !== undefined);
              if (bins.length < 2) return { error: 'fewer than 2 bars' };
              const edge = (g) => { const r = g.querySelector('.bin-hit'); return [Number(g.dataset.lo), Number(r.getAttribute('x')) - 1, Number(g.dataset.hi), Number(r.getAttribute('x')) + Number(r.getAttribute('width')) + 1]; };
              const [t0, p0] = edge(bins[0]); const e = edge(bins[bins.length - 1]); const [t1, p1] = [e[2], e[3]];
              const px = (t) => p0 + (t - t0) * (p1 - p0) / (t1 - t0);
              const band = document.querySelector('#histogram-chart .listed-range');
              let from = null, to = null;
              if (band) { from = Number(band.getAttribute('x')); to = from + Number(band.getAttribute('width')); }
              else { const open = document.querySelector('#histogram g.bin.open .bin-hit');
                if (open) { from = Number(open.getAttribute('x')) - 1; to = from + Number(open.getAttribute('width')) + 2; } }
              return { from, to, want: [px(\(lo)), px(\(hi))], binWidth: Number(bins[0].dataset.hi) - Number(bins[0].dataset.lo),
                bandLo: band ? Number(band.dataset.lo) : null, bandHi: band ? Number(band.dataset.hi) : null,
                listLo: Number(document.querySelector('#bin-calls').dataset.lo), listHi: Number(document.querySelector('#bin-calls').dataset.hi),
                title: document.querySelector('#bin-calls').textContent }; })()
            """
        func expectHighlightOnRange(_ when: String) throws -> Double {
            let at = try browser.evaluate(check)
            let from = at["from"]?.numberValue, to = at["to"]?.numberValue
            let want = at["want"]?.arrayValue?.compactMap(\.numberValue) ?? []
            let drawn = if let from, let to, want.count == 2 { abs(from - want[0]) <= 1.5 && abs(to - want[1]) <= 1.5 } else { false }
            #expect(drawn,
                    "\(when): the highlight spans \(lo) ..< \(hi) s as the chart draws it: \(at.jsonText)")
            #expect(at["bandLo"]?.numberValue == lo && at["bandHi"]?.numberValue == hi && at["listLo"]?.numberValue == lo && at["listHi"]?.numberValue == hi,
                    "\(when): the highlight and the list name the same range: \(at.jsonText)")
            return at["binWidth"]?.numberValue ?? 0
        }
        _ = try expectHighlightOnRange("when clicked")

        // Live calls of 1 to 3 s: the axis stretches, every bar covers another range than before.
        var seen = 30
        for batch in 0..<3 {
            var long: [JSONValue] = []
            for i in 0..<15 { long += DemoCalls.call(run: "live", placement: "slow_\(i % 3)", t: Double(100 + batch * 20 + i), source: "cache", duration: 1 + Double(batch) + Double(i) * 0.05) }
            _ = try stack.ingest(long)
            seen += 15
            #expect(try browser.waitFor("\(total) === \(seen)"), "batch \(batch) reached the histogram")
            usleep(300_000)
            let binWidth = try expectHighlightOnRange("after \(seen - 30) slow calls")
            #expect(binWidth > scaleBefore * 2, "the chart rescaled: bars \(binWidth) s wide, \(scaleBefore) s before")
            #expect(try browser.evaluate(listedTraces).stringValue == listed, "the list still holds the calls it listed")
        }
        let title = try browser.evaluate("document.querySelector('#bin-calls').textContent").stringValue ?? ""
        #expect(title.contains("to under"), "the list says its range: \(title)")

        try browser.press("Escape")
        #expect(try browser.waitFor("document.querySelector('#bin-calls').hidden && document.querySelector('#histogram-chart .listed-range, #histogram g.bin.open') === null"),
                "Escape closes the list and its highlight")
        #expect(try browser.evaluate("document.querySelector('#app-error').hidden") == .bool(true))
    }
}
