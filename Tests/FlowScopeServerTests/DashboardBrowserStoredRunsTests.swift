import Foundation
import TestSupport
import FlowJSON
import SQLiteSink
import Testing

/// A stack that records into the sqlite file at `path` and reads the runs memory does not hold from it.
private func storedStack(_ path: String) throws -> DashboardStack {
    try DashboardStack(archive: try SQLiteSink(path: path))
}

/// Waits until `GET /api/runs` lists `run` with `events` events.
private func waitForRun(_ stack: DashboardStack, _ run: String, events: Int) throws {
    let deadline = Date().addingTimeInterval(10)
    var last = ""
    while Date() < deadline {
        last = try stack.fixture.connect().request("GET", "/api/runs").text
        let runs = try JSON5.parse(last)["runs"]?.arrayValue ?? []
        if runs.contains(where: { $0["id"]?.stringValue == run && $0["events"]?.intValue == events }) { return }
        usleep(20_000)
    }
    throw ClientError("\(run) never had \(events) events; last /api/runs: \(last)")
}

/// Stores `sample` through a server on the sqlite file `path`, stops that server once `run` is
/// listed with all of it, and starts a second server on the same file. Returns the second server
/// and how many events the first accepted.
private func restartedOnStoredRun(_ sample: [JSONValue], _ run: String, path: String) throws -> (stack: DashboardStack, ingested: Int) {
    let first = try storedStack(path)
    let ingested = try first.ingest(sample)
    try waitForRun(first, run, events: sample.count)
    first.stop()
    return (try storedStack(path), ingested)
}

/// A second server on the sqlite file in `dir` after a first one stored `DemoCalls.sample` as run
/// `test:checkout`, and a page opened on that run (closed again if it cannot open). Returns the
/// server, the page and how many events the run has.
private func openStoredCheckout(_ chromium: Chromium, dir: String) throws -> (stack: DashboardStack, browser: DevToolsBrowser, events: Int) {
    let sample = DemoCalls.sample(run: "test:checkout")
    let second = try restartedOnStoredRun(sample, "test:checkout", path: dir + "/events.sqlite").stack
    let browser = try DevToolsBrowser(executable: chromium.path)
    do {
        try browser.open("\(second.baseURL)/#run=test%3Acheckout")
    } catch {
        browser.close()
        throw error
    }
    return (second, browser, sample.count)
}

/// The dashboard after a restart of its server on the same sqlite file, in headless Chromium.
@Suite("Dashboard in a real browser: stored runs", .serialized, .heavy)
struct DashboardBrowserStoredRunsTests {
    @Test("after a restart the run picker lists a run stored by the sqlite sink, and opening it renders its placements, calls and events")
    func storedRunAfterRestart() throws {
        guard let chromium = Chromium.executable() else {
            Issue.record("chromium not found on PATH (chromium, chromium-browser, google-chrome) nor in FLOWSCOPE_CHROMIUM")
            return
        }
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let sample = DemoCalls.sample(run: "test:checkout")
        let (second, ingested) = try restartedOnStoredRun(sample, "test:checkout", path: dir + "/events.sqlite")
        #expect(ingested == sample.count)
        let dom = try chromium.dumpDOM(url: "\(second.baseURL)/?stream=off#run=test%3Acheckout")
        #expect(dom.contains("data-ready=\"true\""), "the page never finished loading: \(dom.prefix(400))")
        let option = try #require(HTMLSlice.element(in: dom, startingWith: "<option value=\"test:checkout\""))
        #expect(option.contains("stored"), "the run picker marks the run stored: \(option)")

        let main = try #require(HTMLSlice.element(in: dom, startingWith: "<tr data-placement=\"main_paywall\""))
        #expect(HTMLSlice.texts(in: main).prefix(2) == ["main_paywall", "2"], "main_paywall row: \(main)")
        #expect(main.contains("4.70 s"), "p95 of 0.2 s and 4.7 s, counted from the stored rows: \(main)")
        let upsell = try #require(HTMLSlice.element(in: dom, startingWith: "<tr data-placement=\"settings_upsell\""))
        #expect(upsell.contains("2005 networkFailed"), "last preload error from the stored preload.end: \(upsell)")
        #expect(HTMLSlice.count(of: "<g class=\"wf-call\"", in: dom) == 4, "three getFlow calls and one preloadFlows")
        #expect(HTMLSlice.count(of: "<tr class=\"ev ", in: dom) >= sample.count, "every stored event in the tail")
    }

    @Test("a stored run's KPIs and placements table show the same numbers with no filter and with a filter that excludes nothing (minDuration=0)")
    func storedRunNoOpFilter() throws {
        guard let chromium = Chromium.executable() else {
            Issue.record("chromium not found on PATH (chromium, chromium-browser, google-chrome) nor in FLOWSCOPE_CHROMIUM")
            return
        }
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let (stack, browser, events) = try openStoredCheckout(chromium, dir: dir)
        defer { browser.close(); _ = stack } // the server lives as long as the page
        #expect(try browser.waitFor("document.body.dataset.ready === 'true' && document.querySelectorAll('#tail tbody tr.ev').length >= \(events)"))
        #expect(try browser.waitFor("\(DashboardBrowserFilterTests.kpiFetches) === '3'"), "three getFlow calls ended")
        _ = try DashboardBrowserFilterTests.expectSameWithNoOpFilter(browser)
    }

    @Test("a stored run open in the page that gets new events is loaded again from the server's memory")
    func storedRunGoesLive() throws {
        guard let chromium = Chromium.executable() else {
            Issue.record("chromium not found on PATH (chromium, chromium-browser, google-chrome) nor in FLOWSCOPE_CHROMIUM")
            return
        }
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let (second, browser, events) = try openStoredCheckout(chromium, dir: dir)
        defer { browser.close() }
        #expect(try browser.waitFor("document.body.dataset.ready === 'true' && document.querySelector('#conn-state').dataset.state === 'open'"))
        let selected = "document.querySelector('#run-select').selectedOptions[0]?.textContent ?? ''"
        #expect(try browser.waitFor("(\(selected)).includes('stored') && document.querySelectorAll('#tail tbody tr.ev').length >= \(events)"),
                "the stored run is open with its events")

        // The run gets new events in this server: its memory holds it now, with the stream's numbering.
        _ = try second.ingest(DemoCalls.call(run: "test:checkout", placement: "winback_offer", t: 100, source: "network", duration: 0.3))
        let reloaded = try browser.waitFor(
            "!(\(selected)).includes('stored') && document.querySelector('#placements tr[data-placement=\"winback_offer\"]') !== null " +
            "&& document.querySelector('#placements tr[data-placement=\"onboarding\"]') === null", timeout: 30)
        #expect(reloaded, "the page loaded the run's aggregates again from memory (only the new call), no longer marked stored")
        // The tail holds the memory's events only: the new call, none of the stored ones (whose numbers
        // would otherwise collide with the stream's).
        let cells = "[...document.querySelectorAll('#tail tbody tr td')].map((td) => td.textContent)"
        let tail = try browser.waitFor("\(cells).includes('winback_offer') && !\(cells).includes('onboarding')", timeout: 30)
        let seen = try browser.evaluate(cells)
        #expect(tail, "tail after the run went live: \(seen)")
        #expect(try browser.evaluate("document.querySelector('#app-error').hidden") == .bool(true))
    }


    @Test("a stored run that gets new events while zoomed, a call open, is reloaded from memory on the fitted axis, and zoom= and call= leave the URL without a new history entry")
    func storedRunGoesLiveDropsZoomFromURL() throws {
        guard let chromium = Chromium.executable() else {
            Issue.record("chromium not found on PATH (chromium, chromium-browser, google-chrome) nor in FLOWSCOPE_CHROMIUM")
            return
        }
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let sample = DemoCalls.sample(run: "test:checkout")
        let second = try restartedOnStoredRun(sample, "test:checkout", path: dir + "/events.sqlite").stack
        let browser = try DevToolsBrowser(executable: chromium.path)
        defer { browser.close() }
        try browser.open("\(second.baseURL)/#run=test%3Acheckout&zoom=0.05-0.2")
        let svg = "document.querySelector('#waterfall-chart svg')"
        let selected = "document.querySelector('#run-select').selectedOptions[0]?.textContent ?? ''"
        #expect(try browser.waitFor("document.body.dataset.ready === 'true' && document.querySelector('#conn-state').dataset.state === 'open' && (\(selected)).includes('stored')"))
        #expect(try browser.waitFor("Number(\(svg)?.dataset.axisMin) === 0.05 && Number(\(svg)?.dataset.axisMax) === 0.2"), "the stored run opened zoomed, as the link says")
        _ = try browser.evaluate("document.querySelector('#waterfall g.wf-call').dispatchEvent(new MouseEvent('click', { bubbles: true }))")
        #expect(try browser.waitFor("location.hash.includes('call=') && location.hash.includes('zoom=0.05-0.2') && !document.querySelector('#trace-detail').hidden"),
                "a stored call open, zoomed")
        let entries = try browser.evaluate("history.length").numberValue ?? 0

        // The run gets new events: the page reloads it from memory and drops the zoom, in the URL too.
        _ = try second.ingest(DemoCalls.call(run: "test:checkout", placement: "winback_offer", t: 100, source: "network", duration: 0.3))
        #expect(try browser.waitFor("!(\(selected)).includes('stored') && document.querySelector('#waterfall g.wf-call[data-placement=\"winback_offer\"]') !== null", timeout: 30),
                "the page loaded the run again from memory")
        #expect(try browser.waitFor("Number(\(svg).dataset.axisMin) === 0 && document.querySelector('#waterfall-note').textContent.startsWith('zoomed') === false"),
                "the zoom is gone from the view")
        #expect(try browser.waitFor("document.querySelector('#trace-detail').hidden"), "the stored call is closed")
        let hash = try browser.evaluate("location.hash").stringValue ?? ""
        #expect(!hash.contains("zoom=") && !hash.contains("call=") && hash.contains("run=test%3Acheckout"), "the URL says the view: \(hash)")
        #expect(try browser.evaluate("history.length").numberValue == entries, "the URL was replaced, not a new history entry")

        // The URL reproduces the view: a page opened on it shows the same axis.
        let axis = "JSON.stringify([Number(\(svg).dataset.axisMin), Number(\(svg).dataset.axisMax)])"
        let shown = try browser.evaluate(axis).stringValue ?? ""
        let other = try DevToolsBrowser(executable: chromium.path)
        defer { other.close() }
        try other.open(try browser.evaluate("location.href").stringValue ?? "")
        let same = try other.waitFor("document.body.dataset.ready === 'true' && document.querySelector('#waterfall g.wf-call[data-placement=\"winback_offer\"]') !== null && \(axis) === \(JSONValue.string(shown).jsonText)")
        #expect(same, "the link reopens the view: axis \(shown)")
        #expect(try browser.evaluate("document.querySelector('#app-error').hidden") == .bool(true))
    }
}
