import TestSupport
import Foundation
import FlowEvents
import FlowJSON
@testable import FlowScopeServer
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The dashboard as a debugger, in headless Chromium, while live traffic flows: the call a user clicks
/// is the call that opens, the keyboard reaches every control, a run stays whole, a server restart is
/// noticed. (Type name contains "DashboardBrowser": the Makefile runs these serially.)
@Suite("Dashboard in a real browser, with live traffic", .serialized, .heavy)
struct DashboardBrowserDebuggerTests {
    static func chromium() -> Chromium? {
        let found = Chromium.executable()
        if found == nil {
            Issue.record("chromium not found on PATH (chromium, chromium-browser, google-chrome) nor in FLOWSCOPE_CHROMIUM: install it (`apt-get install chromium`, as `make test` does)")
        }
        return found
    }

    /// Opens the dashboard on `path` and waits for the first load and the open stream.
    /// A page on a stack holding a full waterfall (the sample calls and 12 more), with live traffic
    /// flowing that has reached the waterfall. Close the browser and stop the traffic when done.
    static func openLivePage(_ chromium: Chromium) throws -> (DashboardStack, DevToolsBrowser, LiveTraffic) {
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        for i in 0..<12 { _ = try stack.ingest(DemoCalls.call(run: "live", placement: "warmup_\(i)", t: Double(100 + i), source: "network", duration: 0.3)) }
        let browser = try openPage(chromium, stack)
        let traffic = stack.liveTraffic()
        #expect(try browser.waitFor("document.querySelectorAll('#waterfall g.wf-call[data-placement^=\"live_\"]').length > 0"), "live traffic reached the waterfall")
        return (stack, browser, traffic)
    }

    static func openPage(_ chromium: Chromium, _ stack: DashboardStack, path: String = "/") throws -> DevToolsBrowser {
        let browser = try DevToolsBrowser(executable: chromium.path)
        try browser.open("\(stack.baseURL)\(path)")
        let ready = try browser.waitFor("document.body.dataset.ready === 'true' && document.querySelector('#conn-state').dataset.state === 'open'", timeout: 30)
        if !ready { Issue.record("the page never loaded with its stream open") }
        return browser
    }

    @Test("with live traffic flowing, the call under the pointer is the call that opens, on its own time scale with its budgets; Escape closes it")
    func clickedCallOpens() throws {
        guard let chromium = Self.chromium() else { return }
        let (stack, browser, traffic) = try Self.openLivePage(chromium)
        defer { browser.close(); traffic.stop(); _ = stack }

        for attempt in 0..<4 {
            // Point at a row in the middle of the chart, as a user about to click.
            let point = try browser.evaluate("""
                (() => { const chart = document.querySelector('#waterfall-chart'); chart.scrollIntoView({ block: 'start' });
                  const row = chart.querySelectorAll('g.wf-call')[\(3 + attempt)].querySelector('.row-bg').getBoundingClientRect();
                  return { x: row.left + 160, y: row.top + 10 }; })()
                """)
            let x = try #require(point["x"]?.numberValue), y = try #require(point["y"]?.numberValue)
            try browser.mouse("mouseMoved", x: x, y: y)
            usleep(600_000)
            let under = try browser.evaluate("document.elementFromPoint(\(x), \(y))?.closest('g.wf-call')?.dataset.trace ?? null")
            let trace = try #require(under.stringValue, "a call under the pointer (attempt \(attempt))")
            usleep(600_000) // new calls keep arriving while the user moves to click
            #expect(try browser.evaluate("document.elementFromPoint(\(x), \(y))?.closest('g.wf-call')?.dataset.trace ?? null") == .string(trace),
                    "the row under the pointer stayed in place (attempt \(attempt))")
            try browser.click(x: x, y: y)
            #expect(try browser.waitFor("!document.querySelector('#trace-detail').hidden"), "the call opened (attempt \(attempt))")
            #expect(try browser.evaluate("document.querySelector('#trace-detail').dataset.trace") == .string(trace),
                    "the opened call is the clicked one (attempt \(attempt))")
            // Its own time scale: the call alone, with its request and that request's budget.
            #expect(try browser.evaluate("document.querySelectorAll('#trace-detail svg.waterfall.fit g.wf-call').length") == .number(1))
            #expect(try browser.evaluate("document.querySelector('#trace-detail svg.waterfall.fit g.wf-call').dataset.trace") == .string(trace))
            #expect(try browser.evaluate("document.querySelectorAll('#trace-detail svg.waterfall.fit .wf-budget').length >= 1") == .bool(true),
                    "the request's budget is drawn")
            #expect(try browser.evaluate("location.hash.includes('call=' + \(JSONValue.string(trace).jsonText))") == .bool(true), "the call is in the URL")
            try browser.press("Escape")
            #expect(try browser.waitFor("document.querySelector('#trace-detail').hidden"), "Escape closed the call")
            try browser.mouse("mouseMoved", x: 2, y: 2)
            usleep(300_000)
        }

        #expect(try browser.evaluate("document.querySelector('#app-error').hidden") == .bool(true))
        #expect(traffic.sent > 10, "traffic flowed during the test (\(traffic.sent) calls)")
    }

    @Test("with live traffic flowing, the histogram under the pointer holds still (a bar is not redrawn between press and release), and follows again once the pointer leaves")
    func histogramHoldsUnderPointer() throws {
        guard let chromium = Self.chromium() else { return }
        // A full waterfall above (its most rows), so that the histogram stays where the pointer is.
        let (stack, browser, traffic) = try Self.openLivePage(chromium)
        defer { browser.close(); traffic.stop(); _ = stack }
        let point = try browser.evaluate("""
            (() => { const chart = document.querySelector('#histogram-chart'); chart.scrollIntoView({ block: 'center' });
              const r = chart.getBoundingClientRect(); return { x: r.left + r.width / 2, y: r.top + r.height / 2 }; })()
            """)
        try browser.mouse("mouseMoved", x: try #require(point["x"]?.numberValue), y: try #require(point["y"]?.numberValue))
        // Mark the drawn chart: a redraw replaces it.
        _ = try browser.evaluate("document.querySelector('#histogram-chart svg').dataset.mark = 'held'")
        let seqBefore = try browser.evaluate("Number(document.body.dataset.latestSeq)").numberValue ?? 0
        usleep(2_500_000)
        let seqAfter = try browser.evaluate("Number(document.body.dataset.latestSeq)").numberValue ?? 0
        #expect(seqAfter > seqBefore, "events kept arriving (\(seqBefore) -> \(seqAfter))")
        #expect(try browser.evaluate("document.querySelector('#histogram-chart svg')?.dataset.mark ?? null") == .string("held"),
                "the histogram under the pointer was not redrawn")
        try browser.mouse("mouseMoved", x: 2, y: 2)
        #expect(try browser.waitFor("document.querySelector('#histogram-chart svg')?.dataset.mark !== 'held'"),
                "once the pointer left, the histogram follows the traffic again")
    }

    @Test("Pause freezes the waterfall, the histogram, the placements and the tail while events keep arriving; Resume shows them")
    func pauseFreezesEveryPanel() throws {
        guard let chromium = Self.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        let browser = try Self.openPage(chromium, stack)
        defer { browser.close() }
        let traffic = stack.liveTraffic()
        defer { traffic.stop() }
        #expect(try browser.waitFor("document.querySelectorAll('#waterfall g.wf-call[data-placement^=\"live_\"]').length > 0"))

        let snapshot = """
            JSON.stringify([document.querySelector('#waterfall g.wf-call')?.dataset.trace,
              document.querySelector('#tail tbody tr')?.dataset.seq, document.querySelector('#histogram-note').textContent,
              document.querySelector('#placements tbody').textContent, document.querySelector('.kpi[data-kpi=fetches] .kpi-value').textContent])
            """
        _ = try browser.evaluate("document.querySelector('#pause').click()")
        #expect(try browser.evaluate("document.querySelector('#pause').getAttribute('aria-pressed')") == .string("true"))
        // The pressed button's label stays readable (WCAG AA) in both themes.
        for scheme in ["light", "dark"] {
            try browser.emulate(colorScheme: scheme)
            let ratio = try browser.evaluate(DashboardBrowserFilterTests.contrast("#pause")).numberValue ?? 0
            #expect(ratio >= 4.5, "Resume's label against its background in the \(scheme) theme: \(ratio):1")
        }
        try browser.emulate(colorScheme: "light")
        usleep(400_000)
        let frozen = try browser.evaluate(snapshot)
        let seqBefore = try browser.evaluate("Number(document.body.dataset.latestSeq)").numberValue ?? 0
        usleep(2_500_000)
        #expect(try browser.evaluate(snapshot) == frozen, "nothing moved while paused")
        let seqAfter = try browser.evaluate("Number(document.body.dataset.latestSeq)").numberValue ?? 0
        #expect(seqAfter > seqBefore, "events kept arriving while paused (\(seqBefore) -> \(seqAfter))")

        _ = try browser.evaluate("document.querySelector('#pause').click()")
        #expect(try browser.waitFor("\(snapshot) !== \(frozen.jsonText)"), "Resume shows what arrived")
    }

    @Test("with live traffic flowing, Tab from the top reaches every control, focus never falls back to the page, and no chart with role img holds controls")
    func keyboardReachesEveryControl() throws {
        guard let chromium = Self.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        let browser = try Self.openPage(chromium, stack)
        defer { browser.close() }
        // Four calls a second: a redraw after each Tab, and a focused row stays among the 24 shown.
        let traffic = stack.liveTraffic(interval: 0.25)
        defer { traffic.stop() }
        #expect(try browser.waitFor("document.querySelectorAll('#waterfall g.wf-call[data-placement^=\"live_\"]').length > 0"))

        let describe = """
            (() => { const a = document.activeElement; if (!a || a === document.body) return 'BODY';
              if (a.id) return '#' + a.id; if (a.matches('g.wf-call')) return 'waterfall-row';
              if (a.matches('#tail tbody tr')) return 'tail-row'; if (a.matches('.skip-link')) return 'skip-link';
              if (a.matches('#histogram g.bin')) return 'histogram-bin';
              return a.tagName.toLowerCase() + (a.getAttribute('href') ? ':' + a.getAttribute('href') : ''); })()
            """
        let filterBar = ["#f-range", "#filter-placement", "#f-call", "#f-source", "#f-audience", "#f-variation", "#f-targeting", "#f-error",
                         "#f-min", "#f-max", "#f-trace", "#f-q", "#f-clear"]
        // The zoom buttons: Zoom in only, on the fitted axis (Zoom out and Reset zoom are disabled).
        let controls = ["#run-select", "#pause"] + filterBar + ["#wf-zoom-in", "waterfall-row", "histogram-bin", "#filter-run", "#filter-name", "tail-row"]
        var reached: [String] = []
        // One Tab per control, the skip link and the brand link, and a few to spare.
        for _ in 0..<30 where !Set(controls).isSubset(of: reached) {
            try browser.press("Tab")
            usleep(350_000) // redraws happen while the focus is on each stop
            reached.append(try browser.evaluate(describe).stringValue ?? "?")
        }
        #expect(reached.first == "skip-link", "the first Tab stop is the skip link: \(reached)")
        #expect(!reached.contains("BODY"), "the focus never fell back to the page: \(reached)")
        for control in controls {
            #expect(reached.contains(control), "\(control) reached within 30 Tabs: \(reached)")
        }

        // On a waterfall row, arrow keys move between calls and the focus stays through redraws.
        _ = try browser.evaluate("document.querySelector('#waterfall g.wf-call[tabindex=\"0\"]').focus()")
        try browser.press("ArrowDown")
        try browser.press("ArrowDown")
        let focused = try browser.evaluate("document.activeElement.dataset.trace ?? null")
        #expect(focused.stringValue != nil)
        usleep(1_500_000)
        #expect(try browser.evaluate("document.activeElement.dataset.trace ?? null") == focused, "the focused call kept the focus across redraws")
        try browser.press("Enter")
        #expect(try browser.waitFor("document.querySelector('#trace-detail').dataset.trace === \(focused.jsonText)"), "Enter opened the focused call")
        try browser.press("Escape")
        #expect(try browser.waitFor("document.querySelector('#trace-detail').hidden && document.activeElement.dataset.trace === \(focused.jsonText)"),
                "Escape closed it and gave the focus back to its row")

        // Roles: no controls inside a picture; the skip link leads to the main content.
        #expect(try browser.evaluate("document.querySelectorAll('[role=img] [role=button], [role=img] [role=option], [role=img] [tabindex]').length") == .number(0))
        #expect(try browser.evaluate("document.querySelector('#waterfall-chart svg').getAttribute('role')") == .string("listbox"))
        _ = try browser.evaluate("document.querySelector('.skip-link').focus()")
        try browser.press("Enter")
        #expect(try browser.waitFor("document.activeElement.id === 'main'"), "the skip link moves the focus to the main content")
    }

    @Test("a test run keeps showing all its calls after 6,000 newer events of other runs arrive, and after a reload")
    func runStaysWhole() throws {
        guard let chromium = Self.chromium() else { return }
        let stack = try DashboardStack()
        var checkout: [JSONValue] = []
        for i in 0..<5 { checkout += DemoCalls.call(run: "test:checkout", placement: "checkout_\(i)", t: Double(10 * i), source: "network", duration: 0.2) }
        _ = try stack.ingest(checkout)
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        let browser = try Self.openPage(chromium, stack, path: "/#run=test%3Acheckout")
        defer { browser.close() }
        #expect(try browser.waitFor("document.querySelectorAll('#waterfall g.wf-call').length === 5"), "the run's 5 calls")

        // 6,000 newer events of the live run, over the stream, in batches the stream can carry.
        var newest = 0.0
        for batch in 0..<15 {
            var events: [JSONValue] = []
            for i in 0..<100 { events += DemoCalls.call(run: "live", placement: "other_\(i % 7)", t: Double(1000 + batch * 100 + i), source: "cache", duration: 0.01) }
            _ = try stack.ingest(events)
            usleep(150_000)
        }
        newest = Double(try #require(stack.memory.latestSeq))
        #expect(newest >= 6000 + 40)
        #expect(try browser.waitFor("Number(document.body.dataset.latestSeq) >= \(newest)", timeout: 30), "the page saw every newer event")
        usleep(600_000)
        #expect(try browser.evaluate("document.querySelectorAll('#waterfall g.wf-call').length") == .number(5), "the run's calls are all still shown")
        #expect(try browser.evaluate("[...document.querySelectorAll('#waterfall g.wf-call')].every((g) => g.dataset.placement.startsWith('checkout_'))") == .bool(true))
        #expect(try browser.evaluate("document.querySelectorAll('#tail tbody tr').length") == .number(20), "all 20 events of the run in its tail")

        // A page opened now loads the run from the server, whole.
        let later = try Self.openPage(chromium, stack, path: "/#run=test%3Acheckout")
        defer { later.close() }
        #expect(try later.waitFor("document.querySelectorAll('#waterfall g.wf-call').length === 5"), "a new page shows the run's 5 calls")
    }

    @Test("an open page notices a server restart: stale while the server is down, then the new server's events within 10 s")
    func noticesRestart() throws {
        guard let chromium = Self.chromium() else { return }
        var stack = try DashboardStack()
        let port = stack.fixture.port
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        let browser = try Self.openPage(chromium, stack)
        defer { browser.close() }
        #expect(try browser.waitFor("document.querySelectorAll('#waterfall g.wf-call[data-placement=\"main_paywall\"]').length === 2"))

        stack.stop()
        #expect(try browser.waitFor("!document.querySelector('#offline-banner').hidden && document.body.classList.contains('is-stale')", timeout: 15),
                "an offline banner and stale panels while the server is down")
        let banner = try browser.evaluate("document.querySelector('#offline-banner').textContent").stringValue ?? ""
        #expect(banner.contains("Offline") && banner.contains(" s "), "the banner says for how long: \(banner)")

        stack = try DashboardStack(port: port)
        let restarted = Date()
        // The new server numbers its events from 1 again: the page must not take them for ones it has.
        _ = try stack.ingest(DemoCalls.call(run: "live", placement: "after_restart", t: 5, source: "network", duration: 0.2))
        let shown = try browser.waitFor("""
            document.querySelectorAll('#waterfall g.wf-call[data-placement="after_restart"]').length === 1
              && document.querySelectorAll('#waterfall g.wf-call[data-placement="main_paywall"]').length === 0
            """, timeout: 10)
        #expect(shown, "the new server's events replaced the old ones within 10 s (waited \(Date().timeIntervalSince(restarted)) s)")
        #expect(try browser.waitFor("document.querySelector('#offline-banner').hidden && !document.body.classList.contains('is-stale')"))
    }

    @Test("the placement filter keeps in the tail the preload events that name the placement (their own placement is null)")
    func placementFilterKeepsPreloads() throws {
        guard let chromium = Self.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        try stack.waitForFetches(placement: "main_paywall", count: 2)
        let dom = try chromium.dumpDOM(url: "\(stack.baseURL)/?stream=off#run=live&placement=settings_upsell")
        #expect(dom.contains("data-ready=\"true\""))
        let tail = try #require(HTMLSlice.element(in: dom, startingWith: "<section id=\"tail\""))
        let names = tail.components(separatedBy: "data-name=\"").dropFirst().map { String($0.prefix { $0 != "\"" }) }
        #expect(names.sorted() == ["preload.end", "preload.start", "request.end", "request.start"], "\(names)")
    }

    @Test("the Errors KPI counts failed fetches and failed preload placements alike in a run's view and in all runs")
    func errorsKPIMeansOneThing() throws {
        guard let chromium = Self.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live")) // no failed fetch, one preload placement failed
        try stack.waitForFetches(placement: "main_paywall", count: 2)
        for hash in ["#run=live", "#run="] {
            let dom = try chromium.dumpDOM(url: "\(stack.baseURL)/?stream=off\(hash)")
            let kpi = try #require(HTMLSlice.element(in: dom, startingWith: "<div class=\"kpi\" data-kpi=\"errors\""))
            #expect(HTMLSlice.texts(in: kpi) == ["Errors", "1", "fetch + preload"], "\(hash): \(kpi)")
        }
    }

    @Test("secondary text, the ok and warning texts and the axis labels reach 4.5:1 on their panels (WCAG AA) in the light and dark themes")
    func contrast() throws {
        guard let chromium = Self.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        let browser = try DevToolsBrowser(executable: chromium.path)
        defer { browser.close() }
        try browser.open("\(stack.baseURL)/?stream=off")
        #expect(try browser.waitFor("document.body.dataset.ready === 'true'", timeout: 30))
        let ratios = """
            (() => {
              const rgb = (c) => (c.match(/[\\d.]+/g) || []).slice(0, 3).map(Number);
              const lum = ([r, g, b]) => [r, g, b].map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
                .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
              const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
              const panel = rgb(getComputedStyle(document.querySelector('.panel')).backgroundColor);
              const out = {};
              for (const [name, selector, prop] of [['secondary', '.kpi-sub', 'color'], ['axis', '#waterfall .axis-label', 'fill'],
                  ['ok', '#waterfall .out-ok-text', 'fill'], ['warn', '#waterfall .wf-flag', 'fill'], ['warnKpi', '.kpi[data-tone=warn] .kpi-value', 'color'],
                  ['filterStatus', '#filter-status', 'color']]) {
                const node = document.querySelector(selector);
                out[name] = node ? Math.round(ratio(rgb(getComputedStyle(node)[prop]), panel) * 100) / 100 : -1;
              }
              return out; })()
            """
        for scheme in ["light", "dark"] {
            try browser.emulate(colorScheme: scheme)
            usleep(200_000)
            let measured = try browser.evaluate(ratios)
            for name in ["secondary", "axis", "ok", "warn", "warnKpi", "filterStatus"] {
                let value = measured[name]?.numberValue ?? -1
                #expect(value >= 4.5, "\(scheme) \(name): \(value):1 (\(measured.jsonText))")
            }
        }
    }

    @Test("a run switch that cannot load says so instead of showing an empty or another run's view")
    func failedRunSwitch() throws {
        guard let chromium = Self.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        _ = try stack.ingest(DemoCalls.call(run: "test:a", placement: "checkout", t: 1, source: "network", duration: 0.1))
        let browser = try Self.openPage(chromium, stack)
        defer { browser.close() }
        #expect(try browser.evaluate("document.querySelector('#run-alert').hidden") == .bool(true))
        stack.stop()
        _ = try browser.evaluate("(() => { const s = document.querySelector('#run-select'); s.value = 'test:a'; s.dispatchEvent(new Event('change')); })()")
        #expect(try browser.waitFor("!document.querySelector('#run-alert').hidden", timeout: 20))
        let text = try browser.evaluate("document.querySelector('#run-alert').textContent").stringValue ?? ""
        #expect(text.hasPrefix("Could not load run test:a"), "\(text)")
        #expect(try browser.evaluate("document.querySelectorAll('#waterfall g.wf-call[data-placement=\"main_paywall\"]').length") == .number(0),
                "the previous run's calls are not shown as if they were this run's")
    }

    @Test("run, tail filters and the open call are in the URL with a history entry each: Back returns to the view before")
    func urlForEveryView() throws {
        guard let chromium = Self.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        _ = try stack.ingest(DemoCalls.call(run: "test:a", placement: "checkout", t: 1, source: "network", duration: 0.1))
        let browser = try Self.openPage(chromium, stack)
        defer { browser.close() }
        let entries = try browser.evaluate("history.length").numberValue ?? 0
        _ = try browser.evaluate("(() => { const s = document.querySelector('#run-select'); s.value = 'test:a'; s.dispatchEvent(new Event('change')); })()")
        #expect(try browser.waitFor("document.querySelectorAll('#waterfall g.wf-call[data-placement=\"checkout\"]').length === 1"))
        #expect(try browser.evaluate("history.length").numberValue == entries + 1, "a run switch is a history entry")
        _ = try browser.evaluate("document.querySelector('#waterfall g.wf-call').dispatchEvent(new MouseEvent('click', { bubbles: true }))")
        let trace = try browser.evaluate("document.querySelector('#waterfall g.wf-call').dataset.trace")
        #expect(try browser.waitFor("location.hash.includes('call=')"))
        _ = try browser.evaluate("(() => { const s = document.querySelector('#filter-name'); s.value = 'fetch.end'; s.dispatchEvent(new Event('change')); })()")
        let url = try browser.evaluate("location.href").stringValue ?? ""
        #expect(url.contains("run=test%3Aa") && url.contains("event=fetch.end") && url.contains("call="), "\(url)")

        // The link reopens the view in a new page.
        let other = try DevToolsBrowser(executable: chromium.path)
        defer { other.close() }
        try other.open(url)
        #expect(try other.waitFor("document.body.dataset.ready === 'true' && document.querySelector('#trace-detail').dataset.trace === \(trace.jsonText)"),
                "the link opened the same call")
        #expect(try other.evaluate("[document.querySelector('#run-select').value, document.querySelector('#filter-name').value]") == ["test:a", "fetch.end"])

        // Back: the filter goes, then the call closes, then the run switches back.
        _ = try browser.evaluate("history.back()")
        #expect(try browser.waitFor("document.querySelector('#filter-name').value === '' && !document.querySelector('#trace-detail').hidden"))
        _ = try browser.evaluate("history.back()")
        #expect(try browser.waitFor("document.querySelector('#trace-detail').hidden && document.querySelector('#run-select').value === 'test:a'"))
        _ = try browser.evaluate("history.back()")
        #expect(try browser.waitFor("document.querySelector('#run-select').value === 'live' && document.querySelectorAll('#waterfall g.wf-call[data-placement=\"main_paywall\"]').length === 2"))
    }
}

/// Calls of the run `live` ingested in the background over HTTPS, one every `interval` seconds (placements
/// `live_0` ... `live_4`), until `stop()` or `limit` calls.
final class LiveTraffic: Sendable {
    private let running = Atomic<Bool>(true)
    private let count = Atomic<Int>(0)
    private let finished = DispatchSemaphore(value: 0)

    /// Calls ingested so far.
    var sent: Int { count.load(ordering: .relaxed) }

    init(port: Int, token: String, interval: Double = 0.08, limit: Int = 1500) {
        Thread.detachNewThread { [self] in
            defer { finished.signal() }
            var i = 0
            while running.load(ordering: .relaxed), i < limit {
                let events = DemoCalls.call(run: "live", placement: "live_\(i % 5)", t: Double(10_000 + i), source: i % 3 == 0 ? "cache" : "network", duration: 0.05 + Double(i % 4) * 0.1)
                let body = events.map(\.jsonText).joined(separator: "\n")
                if let connection = try? TestConnection(host: "127.0.0.1", port: port, tls: true),
                   let reply = try? connection.request("POST", "/api/ingest", headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/x-ndjson")], body: Array(body.utf8)),
                   reply.status == 202 {
                    count.add(1, ordering: .relaxed)
                }
                i += 1
                usleep(UInt32(interval * 1_000_000))
            }
        }
    }

    /// Stops the traffic and waits for the last request.
    func stop() {
        guard running.exchange(false, ordering: .relaxed) else { return }
        finished.wait()
    }
}
