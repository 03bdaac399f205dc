import TestSupport
import Foundation
import FlowEvents
import FlowFetch
import FlowJSON
@testable import FlowScopeServer
import MemorySink
import MetricsSink
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The dashboard (web/) in a real browser: headless Chromium against the real server stack (memory and
/// metrics sinks, the dashboard API, the SSE stream, ingest over HTTPS). Chromium is part of the test
/// set-up (`make test` installs it): without it these tests fail, they do not skip.
@Suite("Dashboard in a real browser", .serialized, .heavy)
struct DashboardBrowserTests {
    @Test("the dashboard renders the placements table, the waterfall, the histogram and the tail from ingested events")
    func rendersIngestedEvents() throws {
        guard let chromium = Chromium.executable() else {
            Issue.record("chromium not found on PATH (chromium, chromium-browser, google-chrome) nor in FLOWSCOPE_CHROMIUM: install it (`apt-get install chromium`, as `make test` does)")
            return
        }
        let stack = try DashboardStack()
        let ingested = try stack.ingest(DemoCalls.sample(run: "live"))
        #expect(ingested == DemoCalls.sample(run: "live").count)
        try stack.waitForFetches(placement: "main_paywall", count: 2)

        // `?stream=off`: virtual time never advances while an EventSource is open, so the snapshot mode
        // is what `--virtual-time-budget` can wait for. The live stream has its own test below.
        let dom = try chromium.dumpDOM(url: "\(stack.baseURL)/?stream=off")
        #expect(dom.contains("data-ready=\"true\""), "the page never finished loading: \(dom.prefix(400))")
        #expect(!dom.contains("Dashboard error"))

        let main = try #require(HTMLSlice.element(in: dom, startingWith: "<tr data-placement=\"main_paywall\""))
        #expect(HTMLSlice.texts(in: main).prefix(2) == ["main_paywall", "2"], "main_paywall row: \(main)")
        #expect(main.contains("<svg class=\"chart source-bar\""))
        #expect(main.contains("data-source=\"network\"") && main.contains("data-source=\"defaultAudience\""))
        #expect(main.contains("4.70 s"), "p95 of 0.2 s and 4.7 s is 4.7 s: \(main)")

        let onboarding = try #require(HTMLSlice.element(in: dom, startingWith: "<tr data-placement=\"onboarding\""))
        #expect(HTMLSlice.texts(in: onboarding).prefix(2) == ["onboarding", "1"])
        #expect(onboarding.contains("data-source=\"cache\""))

        let upsell = try #require(HTMLSlice.element(in: dom, startingWith: "<tr data-placement=\"settings_upsell\""))
        #expect(upsell.contains("2005 networkFailed"), "last preload error: \(upsell)")

        #expect(dom.contains("<svg class=\"chart waterfall\""))
        #expect(HTMLSlice.count(of: "<g class=\"wf-call\"", in: dom) == 4, "three getFlow calls and one preloadFlows")
        #expect(dom.contains("class=\"timeout-mark\"") && dom.contains("class=\"fallback-mark\""))
        #expect(dom.contains("<svg class=\"chart histogram\""))
        #expect(HTMLSlice.count(of: "<tr class=\"ev ", in: dom) >= ingested, "every event in the tail")
        let emptyTag = try #require(HTMLSlice.element(in: dom, startingWith: "<div id=\"empty-state\"")).prefix { $0 != ">" }
        #expect(emptyTag.contains(" hidden"), "no empty state with events: \(emptyTag)")
    }

    @Test("a sink that is down is named on the page with its last error; a page of working sinks shows no alert")
    func sinkDown() throws {
        guard let chromium = Chromium.executable() else {
            Issue.record("chromium not found on PATH (chromium, chromium-browser, google-chrome) nor in FLOWSCOPE_CHROMIUM: install it (`apt-get install chromium`, as `make test` does)")
            return
        }
        let healthy = try DashboardStack()
        _ = try healthy.ingest(DemoCalls.sample(run: "live"))
        let fine = try chromium.dumpDOM(url: "\(healthy.baseURL)/?stream=off")
        #expect(fine.contains("data-ready=\"true\""))
        let fineAlert = try #require(HTMLSlice.element(in: fine, startingWith: "<div id=\"sink-alert\"")).prefix { $0 != ">" }
        #expect(fineAlert.contains(" hidden"), "no alert while every sink works: \(fineAlert)")

        let stack = try DashboardStack(extraSinks: [FailingArchive()])
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        try stack.waitForFetches(placement: "main_paywall", count: 2)
        let dom = try chromium.dumpDOM(url: "\(stack.baseURL)/?stream=off")
        let alert = try #require(HTMLSlice.element(in: dom, startingWith: "<div id=\"sink-alert\""))
        #expect(!alert.prefix { $0 != ">" }.contains(" hidden"), "\(alert)")
        #expect(alert.contains("Sink archive (otlp) is down: 127.0.0.1:4318: connection refused"), "\(alert)")
    }

    @Test("a saturated durable sink is named in the banner, with its queue and that ingest is refused until it catches up")
    func sinkSaturated() throws {
        guard let chromium = Chromium.executable() else {
            Issue.record("chromium not found on PATH (chromium, chromium-browser, google-chrome) nor in FLOWSCOPE_CHROMIUM: install it (`apt-get install chromium`, as `make test` does)")
            return
        }
        let stack = try DashboardStack(extraSinks: [DurableArchive()])
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        try stack.waitForFetches(placement: "main_paywall", count: 2)
        // Keep the archive saturated while the page loads: a batch it has no room for (limit 0), every 100 ms.
        final class Flag: Sendable { let done = Atomic<Bool>(false) }
        let flag = Flag()
        let pipeline = stack.pipeline
        let refuser = Thread {
            let batch = [Envelope(EngineEvent(name: .cacheMiss, t: 0, placement: "p", trace: TraceID(high: 1, low: 1), span: SpanID(raw: 1)),
                                  seq: 0, ts: 1, run: "live")]
            while !flag.done.load(ordering: .relaxed) {
                _ = pipeline.ingest(batch, ifRoomWithin: 0)
                usleep(100_000)
            }
        }
        refuser.start()
        defer { flag.done.store(true, ordering: .relaxed) }
        let deadline = Date().addingTimeInterval(5)
        while stack.pipeline.stats().first(where: { $0.sink == "archive" })?.saturated != true && Date() < deadline { usleep(10_000) }
        #expect(stack.pipeline.stats().first { $0.sink == "archive" }?.saturated == true)
        let dom = try chromium.dumpDOM(url: "\(stack.baseURL)/?stream=off")
        let alert = try #require(HTMLSlice.element(in: dom, startingWith: "<div id=\"sink-alert\""))
        #expect(!alert.prefix { $0 != ">" }.contains(" hidden"), "\(alert)")
        #expect(alert.contains("Sink archive (sqlite) is saturated: it cannot keep up (0 of 65536 queued, 0 events lost). Ingest is refused with 503 until it catches up."), "\(alert)")
        #expect(!alert.contains("Sink memory"), "the sinks that keep up are not named: \(alert)")
    }

    @Test("a simulation run with a sweep shows a chart per placement as the --out report does: percent ticks on a fitted range, a legend per strategy in its line's colour, the recommended point ringed; no call panels, Calls filter bar or Pause")
    func sweepChart() throws {
        guard let chromium = Chromium.executable() else {
            Issue.record("chromium not found on PATH (chromium, chromium-browser, google-chrome) nor in FLOWSCOPE_CHROMIUM")
            return
        }
        func point(_ value: JSONValue, _ tc: Double, _ p95: Double) -> JSONValue {
            ["value": value, "targetingCorrect": .number(tc), "targetingCorrectCI": [.number(tc - 0.01), .number(tc + 0.01)],
             "timeToFlowP95": .number(p95), "timeToFlowP95CI": [.number(p95 - 0.1), .number(p95 + 0.1)], "displays": 1000]
        }
        let curves: JSONValue = [
            ["strategy": "atPaywall T=5", "swept": true, "points": [point(1, 0.9, 1), point(2, 0.95, 2), point(3, 0.97, 3)]],
            ["strategy": "orDefault 3 s", "swept": false, "points": [point(.null, 0.96, 3.2)]],
        ]
        let strategy: JSONValue = ["name": "atPaywall T=5 [loadTimeout=2]", "targetingCorrect": 0.95,
                                   "timeToFlow": ["p50": 0.3, "p95": 2, "p99": 2.5], "sources": ["network": 1], "requestsPerSession": 1]
        let run: JSONValue = [
            "id": "sim:sweep", "kind": "simulation", "name": "simulate --from", "seed": 1, "sessions": 1000,
            "strategies": [strategy],
            "sweep": ["parameter": "loadTimeout", "values": [1, 2, 3], "maxP95": 3,
                      "placements": ["main_paywall": curves, "onboarding": curves]],
            "recommendation": ["main_paywall": ["strategy": "atPaywall T=5", "loadTimeout": 3, "targetingCorrect": 0.97,
                                                "timeToFlow": ["p95": 3]]],
        ]
        // The same run without its sweep: the strategies table, as a plain `simulate` run shows it.
        var plain = run.objectValue ?? [:]
        plain["id"] = "sim:plain"
        plain["sweep"] = nil
        let runs: [String: JSONValue] = ["sim:sweep": run, "sim:plain": .object(plain)]
        let stack = try DashboardStack(simulations: SimulationRuns(list: { Array(runs.values) }, find: { runs[$0] }))
        let dom = try chromium.dumpDOM(url: "\(stack.baseURL)/?stream=off#run=sim%3Asweep")
        #expect(dom.contains("data-ready=\"true\""), "the page never finished loading: \(dom.prefix(400))")
        let main = try #require(HTMLSlice.element(in: dom, startingWith: "<svg class=\"chart sweep\"") , "no sweep chart")
        #expect(HTMLSlice.count(of: "<svg class=\"chart sweep\"", in: dom) == 2, "one chart per placement")
        #expect(main.contains("data-placement=\"onboarding\"") || main.contains("data-placement=\"main_paywall\""))
        // Two panels (targeting, p95), each with both strategies; the recommendation ringed in each
        // panel of main_paywall only (onboarding has none).
        #expect(HTMLSlice.count(of: "class=\"recommended\"", in: dom) == 2)
        #expect(HTMLSlice.count(of: "<path d=", in: main) >= 4, "a line per strategy and panel")
        #expect(HTMLSlice.count(of: "data-strategy=\"orDefault 3 s\"", in: dom) == 6, "its two lines and its legend entry, per placement")

        // In a laid-out page: the ticks, the legend's colours against the lines', what is hidden.
        let browser = try DevToolsBrowser(executable: chromium.path)
        defer { browser.close() }
        try browser.open("\(stack.baseURL)/?stream=off#run=sim%3Asweep")
        #expect(try browser.waitFor("document.body.dataset.ready === 'true' && document.querySelector('svg.chart.sweep') !== null"))
        let figure = "document.querySelector('figure.sweep-figure[data-placement=\"main_paywall\"]')"
        func ticks(_ panel: String) throws -> [String] {
            let list = try browser.evaluate("JSON.stringify([...\(figure).querySelectorAll('g[data-panel=\"\(panel)\"] text.y-tick')].map((t) => t.textContent))")
            return try JSON5.parse(list.stringValue ?? "[]").arrayValue?.compactMap(\.stringValue) ?? []
        }
        // Intervals reach down to 0.89: the axis starts at 85% (rounded down to 5%), as the report's.
        let percents = try ticks("targetingCorrect")
        #expect(percents.count == 5 && percents.first == "85.0%" && percents.last == "100.0%", "targeting ticks: \(percents)")
        #expect(percents.allSatisfy { $0.range(of: #"^\d{1,3}\.\d%$"#, options: .regularExpression) != nil }, "every tick a percentage: \(percents)")
        // p95: 0 to 1.08 × the highest interval end (3.3 s): 3.564 s.
        let seconds = try ticks("timeToFlowP95")
        #expect(seconds.first == "0" && seconds.last == "3.56s", "p95 ticks: \(seconds)")
        let legend = try browser.evaluate("JSON.stringify([...\(figure).querySelectorAll('.sweep-legend li[data-strategy]')].map((li) => li.textContent))")
        #expect(legend.stringValue == #"["atPaywall T=5","orDefault 3 s (not swept)"]"#, "one legend entry per strategy: \(legend)")
        #expect(try browser.evaluate("\(figure).querySelector('.sweep-legend .legend-recommended')?.textContent") == "recommended")
        // Each entry's swatch has its line's colour (the dashed swatch its border's).
        let colours = try browser.evaluate("""
            JSON.stringify([...\(figure).querySelectorAll('.sweep-legend li[data-strategy]')].map((li) => {
              const swatch = getComputedStyle(li.querySelector('.swatch'));
              const line = \(figure).querySelector(`path.cdf-line[data-strategy="${li.dataset.strategy}"]`);
              const paint = swatch.backgroundColor === 'rgba(0, 0, 0, 0)' ? swatch.borderTopColor : swatch.backgroundColor;
              return [paint, line ? getComputedStyle(line).stroke : null];
            }))
            """).stringValue ?? ""
        let pairs = (try JSON5.parse(colours).arrayValue ?? []).map { $0.arrayValue?.map { $0.stringValue ?? "" } ?? [] }
        #expect(pairs.count == 2, "\(colours)")
        for pair in pairs { #expect(pair.count == 2 && pair[0] == pair[1] && !pair[0].isEmpty, "legend swatch and line colour: \(colours)") }
        #expect(pairs.count == 2 && pairs[0].first != pairs[1].first, "two strategies, two colours: \(colours)")
        for selector in ["#filters", "#pause", "#summary", "#placements", "#waterfall"] {
            #expect(try browser.evaluate("document.querySelector('\(selector)').hidden && document.querySelector('\(selector)').offsetParent === null") == .bool(true),
                    "\(selector) is not shown for a simulation run")
        }
        #expect(try browser.evaluate("document.querySelector('#run-kind').textContent") == "simulation")
        // The sweep's curves replace the table (a row per strategy and value) and the CDF chart, as in the report.
        #expect(try browser.evaluate("document.querySelector('#strategies .table-wrap').hidden") == .bool(true))
        #expect(try browser.evaluate("document.querySelectorAll('#strategies svg.chart.cdf').length") == .number(0))

        // Without a sweep: the table, with targeting correct to one decimal as the CLI's table gives it.
        try browser.open("\(stack.baseURL)/?stream=off#run=sim%3Aplain")
        #expect(try browser.waitFor("document.body.dataset.ready === 'true' && document.querySelector('#strategies tbody tr') !== null"))
        #expect(try browser.evaluate("document.querySelector('#strategies .table-wrap').hidden") == .bool(false))
        let cell = try browser.evaluate("document.querySelector('tr[data-strategy=\"atPaywall T=5 [loadTimeout=2]\"] td')?.textContent")
        #expect(cell == "95.0%", "targeting correct cell: \(cell)")
    }

    @Test("a run the server does not have (404) is said not to exist, without a kind badge, empty call panels or the filter bar; 'live' with no events still shows how to produce some")
    func missingRun() throws {
        guard let chromium = Chromium.executable() else {
            Issue.record("chromium not found on PATH (chromium, chromium-browser, google-chrome) nor in FLOWSCOPE_CHROMIUM")
            return
        }
        let stack = try DashboardStack()
        #expect(try stack.fixture.connect().request("GET", "/api/runs/doesnotexist").status == 404)
        let dom = try chromium.dumpDOM(url: "\(stack.baseURL)/?stream=off#run=doesnotexist")
        #expect(dom.contains("data-ready=\"true\""), "the page never finished loading: \(dom.prefix(400))")
        let alert = try #require(HTMLSlice.element(in: dom, startingWith: "<div id=\"run-alert\""))
        #expect(!alert.prefix { $0 != ">" }.contains(" hidden"), "the run alert is shown: \(alert)")
        #expect(HTMLSlice.texts(in: alert).joined().contains("Run doesnotexist does not exist"), "\(alert)")
        let badge = try #require(HTMLSlice.element(in: dom, startingWith: "<span id=\"run-kind\""))
        #expect(badge.contains("data-kind=\"missing\"") && HTMLSlice.texts(in: badge) == ["no such run"], "no TEST badge: \(badge)")
        for id in ["filters", "summary", "placements", "waterfall", "empty-state"] {
            let tag = try #require(HTMLSlice.element(in: dom, startingWith: "<section id=\"\(id)\"") ?? HTMLSlice.element(in: dom, startingWith: "<div id=\"\(id)\""))
            #expect(tag.prefix { $0 != ">" }.contains(" hidden"), "\(id) hidden for a run that does not exist")
        }

        let live = try chromium.dumpDOM(url: "\(stack.baseURL)/?stream=off#run=live")
        let liveAlert = try #require(HTMLSlice.element(in: live, startingWith: "<div id=\"run-alert\""))
        #expect(liveAlert.prefix { $0 != ">" }.contains(" hidden"), "live exists before its first event: \(liveAlert)")
        let empty = try #require(HTMLSlice.element(in: live, startingWith: "<div id=\"empty-state\""))
        #expect(!empty.prefix { $0 != ">" }.contains(" hidden"))
    }

    @Test("a run of a single call: the histogram's p50 and p95 labels do not overlap, and the waterfall's TARGETING LOST label stays inside the chart")
    func singleCallLabels() throws {
        guard let chromium = Chromium.executable() else {
            Issue.record("chromium not found on PATH (chromium, chromium-browser, google-chrome) nor in FLOWSCOPE_CHROMIUM")
            return
        }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.call(run: "live", placement: "main_paywall", t: 10, source: "defaultAudience", duration: 0.35, targetingLost: true))
        try stack.waitForFetches(placement: "main_paywall", count: 1)
        let browser = try DevToolsBrowser(executable: chromium.path)
        defer { browser.close() }
        try browser.open("\(stack.baseURL)/?stream=off#run=live")
        #expect(try browser.waitFor("document.body.dataset.ready === 'true' && document.querySelectorAll('#histogram-chart .pmark text').length === 2 && document.querySelector('#waterfall-chart .wf-flag') !== null"))
        do {
            let boxes = try browser.evaluate("""
                JSON.stringify((() => {
                  const box = (n) => { const r = n.getBoundingClientRect(); return [r.left, r.right, r.top, r.bottom]; };
                  const hist = document.querySelector('#histogram-chart svg');
                  const wf = document.querySelector('#waterfall-chart svg');
                  const label = document.querySelector('#waterfall-chart .wf-flag').closest('text');
                  return { hist: box(hist), p50: box(hist.querySelector('.pmark.p50 text')), p95: box(hist.querySelector('.pmark.p95 text')),
                           wf: box(wf), label: box(label), text: label.textContent };
                })())
                """).stringValue ?? ""
            let b = try JSON5.parse(boxes)
            func r(_ key: String) -> [Double] { b[key]?.arrayValue?.compactMap(\.numberValue) ?? [] }
            let (hist, p50, p95, wf, label) = (r("hist"), r("p50"), r("p95"), r("wf"), r("label"))
            try #require(hist.count == 4 && p50.count == 4 && p95.count == 4 && wf.count == 4 && label.count == 4, "\(boxes)")
            let apart = p50[1] <= p95[0] || p95[1] <= p50[0] || p50[3] <= p95[2] || p95[3] <= p50[2]
            #expect(apart, "p50 and p95 labels overlap: \(boxes)")
            #expect(p50[0] >= hist[0] && p95[1] <= hist[1] && p50[1] <= hist[1] && p95[0] >= hist[0], "labels inside the histogram: \(boxes)")
            #expect(b["text"]?.stringValue == "defaultAudiencetargeting lost", "\(boxes)")
            #expect(label[1] <= wf[1] && label[0] >= wf[0], "TARGETING LOST inside the waterfall: \(boxes)")
        }
    }

    @Test("with no events the dashboard says how to produce some")
    func emptyState() throws {
        guard let chromium = Chromium.executable() else {
            Issue.record("chromium not found on PATH (chromium, chromium-browser, google-chrome) nor in FLOWSCOPE_CHROMIUM")
            return
        }
        let stack = try DashboardStack()
        let dom = try chromium.dumpDOM(url: "\(stack.baseURL)/?stream=off")
        #expect(dom.contains("data-ready=\"true\""))
        let empty = try #require(HTMLSlice.element(in: dom, startingWith: "<div id=\"empty-state\""))
        #expect(!empty.prefix { $0 != ">" }.contains(" hidden"), "the empty state is shown: \(empty)")
        #expect(empty.contains("flowscope run config/scenarios/*.json5"))
        #expect(!dom.contains("<tr data-placement="))
    }

    @Test("events ingested after the page opened arrive over the live stream and update the page")
    func liveStream() throws {
        guard let chromium = Chromium.executable() else {
            Issue.record("chromium not found on PATH (chromium, chromium-browser, google-chrome) nor in FLOWSCOPE_CHROMIUM")
            return
        }
        let stack = try DashboardStack()
        _ = try stack.ingest(Array(DemoCalls.sample(run: "live").prefix(6)))
        try stack.waitForFetches(placement: "main_paywall", count: 1)

        let browser = try DevToolsBrowser(executable: chromium.path)
        defer { browser.close() }
        try browser.open("\(stack.baseURL)/")
        let state = try browser.waitFor("document.body.dataset.ready === 'true' && document.querySelector('#conn-state').dataset.state === 'open'")
        #expect(state, "the stream connected (conn-state open)")
        #expect(try browser.evaluate("document.querySelector('#placements tr[data-placement=\"winback_offer\"]') === null") == .bool(true))

        _ = try stack.ingest(DemoCalls.call(run: "live", placement: "winback_offer", t: 100, source: "network", duration: 0.3))
        let tail = try browser.waitFor("[...document.querySelectorAll('#tail tbody tr[data-name=\"fetch.end\"] td')].some((td) => td.textContent === 'winback_offer')")
        #expect(tail, "the new fetch.end reached the tail without a reload")
        let row = try browser.waitFor("document.querySelector('#placements tr[data-placement=\"winback_offer\"]') !== null")
        #expect(row, "the placements table was refreshed after live events")
        #expect(try browser.evaluate("document.querySelectorAll('#waterfall g.wf-call[data-placement=\"winback_offer\"]').length") == .number(1))
        #expect(try browser.evaluate("document.querySelector('#app-error').hidden") == .bool(true))

        // The server ends every stream: EventSource reconnects by itself (with Last-Event-ID) and the
        // page keeps following.
        stack.hub.closeAll()
        _ = try stack.ingest(DemoCalls.call(run: "live", placement: "after_reconnect", t: 200, source: "cache", duration: 0.01))
        let resumed = try browser.waitFor("[...document.querySelectorAll('#tail tbody tr[data-name=\"fetch.end\"] td')].some((td) => td.textContent === 'after_reconnect')", timeout: 30)
        #expect(resumed, "events after the stream was closed arrived once the page reconnected")
        #expect(try browser.waitFor("document.querySelector('#conn-state').dataset.state === 'open'"))
    }
}

/// A sink whose every write fails, as an otlp sink with its collector gone.
final class FailingArchive: EventSink {
    let name = "archive"
    var type: String { "otlp" }
    let recorder = SinkHealthRecorder()
    func consume(_ batch: [Envelope]) {
        recorder.failed("127.0.0.1:4318: connection refused")
        recorder.dropped(batch.count)
    }
    var health: SinkHealth { recorder.current }
}

/// A durable sink that keeps up (it stores nothing): the test makes its queue refuse an ingest batch.
final class DurableArchive: EventSink {
    let name = "archive"
    var type: String { "sqlite" }
    var isDurable: Bool { true }
    func consume(_ batch: [Envelope]) {}
}

// MARK: - The server stack

/// The serve stack's parts on 127.0.0.1, port 0: metrics and memory sinks behind a pipeline, the dashboard
/// API with the SSE hub, ingest with a token, and web/ from this package.
final class DashboardStack {
    let fixture: ServerFixture
    let pipeline: EventPipeline
    let memory: MemorySink
    let hub: SSEHub
    private let unfollow: @Sendable () -> Void

    var baseURL: String { "https://127.0.0.1:\(fixture.port)" }

    /// A stack on `port` (0: any free port), e.g. the port of a stack stopped before, to restart it.
    /// With `archive` (a sink that is also an event store, as the sqlite sink), the API reads the
    /// runs memory does not hold from it, as `flowscope serve` does.
    /// `policy`: another access policy than 127.0.0.1's (the off-loopback one, for the browser login).
    /// `limits`: the API's (a small `queryWindow` cuts a run's answers with a few events).
    init(extraSinks: [any EventSink] = [], archive: (any EventSink & EventStore)? = nil, simulations: SimulationRuns = .none,
         port: Int = 0, policy: AccessPolicy? = nil, limits: DashboardAPI.Limits = DashboardAPI.Limits()) throws {
        let metrics = try MetricsSink(version: "test")
        let memory = MemorySink()
        let pipeline = EventPipeline(run: "live", sinks: [metrics, memory] + extraSinks + (archive.map { [$0] } ?? []))
        let store: any EventStore = archive.map { LayeredEventStore(primary: memory, archive: $0) } ?? memory
        let hub = SSEHub(heartbeatInterval: .seconds(2), replay: DashboardAPI.replay(store: memory))
        let web = try StaticFiles(root: Self.webRoot)
        fixture = try ServerFixture(port: port, policy: policy) { router in
            router = DashboardAPI.router(pipeline: pipeline, metrics: metrics, store: store, sinks: SinkStatus(stats: pipeline.stats), hub: hub,
                                         web: web, simulations: simulations, ingestLimiter: RateLimiter(ratePerSecond: 1000, burst: 1000),
                                         limits: limits)
        }
        self.pipeline = pipeline
        self.memory = memory
        self.hub = hub
        unfollow = DashboardAPI.connectStream(store: memory, hub: hub)
    }

    private var stopped = false

    deinit { stop() }

    /// Stops the stream, the server and the pipeline, as a server process that exits (idempotent).
    func stop() {
        guard !stopped else { return }
        stopped = true
        unfollow()
        hub.closeAll()
        fixture.server.stop()
        pipeline.shutdown()
    }

    /// web/ of this package.
    static var webRoot: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("web").path
    }

    /// POSTs envelopes to /api/ingest as JSON Lines with the token; returns the `accepted` count.
    func ingest(_ envelopes: [JSONValue]) throws -> Int {
        let body = envelopes.map(\.jsonText).joined(separator: "\n")
        let reply = try fixture.connect().request("POST", "/api/ingest", headers: [
            ("Authorization", "Bearer \(fixture.token.value)"), ("Content-Type", "application/x-ndjson"),
        ], body: Array(body.utf8))
        guard reply.status == 202 else { throw ClientError("ingest answered \(reply.status): \(reply.text)") }
        return Int(try JSON5.parse(reply.text)["accepted"]?.numberValue ?? -1)
    }

    /// Live calls ingested into this stack every `interval` seconds, `limit` at most, until stopped.
    func liveTraffic(interval: Double = 0.08, limit: Int = 1500) -> LiveTraffic {
        LiveTraffic(port: fixture.port, token: fixture.token.value, interval: interval, limit: limit)
    }

    /// Waits until /api/placements counts `count` fetches of `placement` (the pipeline is asynchronous).
    func waitForFetches(placement: String, count: Int, timeout: Double = 10) throws {
        let deadline = Date().addingTimeInterval(timeout)
        var last = ""
        while Date() < deadline {
            last = try fixture.connect().request("GET", "/api/placements?run=live",
                                                 headers: [("Authorization", "Bearer \(fixture.token.value)")]).text
            let rows = try JSON5.parse(last)["placements"]?.arrayValue ?? []
            if rows.contains(where: { $0["placement"]?.stringValue == placement && ($0["fetches"]?.numberValue ?? 0) >= Double(count) }) {
                return
            }
            usleep(20_000)
        }
        throw ClientError("\(placement) never reached \(count) fetches; last /api/placements: \(last)")
    }
}

// MARK: - Events

/// Envelopes shaped like the engine's (events-and-metrics.md), as a client would ingest them.
enum DemoCalls {
    private static let clock = Mutex(0)

    static func hex(_ length: Int) -> String {
        let n = clock.withLock { value -> Int in value += 1; return value }
        let digits = String(n, radix: 16)
        return String(repeating: "a", count: max(0, length - digits.count)) + digits
    }

    static func envelope(run: String, trace: String, span: String, name: String, placement: String?, t: Double,
                         attrs: [String: JSONValue]) -> JSONValue {
        [
            "ts": .string(ISO8601.format(Date().timeIntervalSince1970 - 1 + t / 1000)), "t": .number(t), "run": .string(run),
            "trace": .string(trace), "span": .string(span), "name": .string(name),
            "placement": placement.map { .string($0) } ?? .null, "attrs": .object(attrs),
        ]
    }

    /// One getFlow call: fetch.start, a targeted request, fetch.end.
    static func call(run: String, placement: String, t: Double, source: String, duration: Double, targetingLost: Bool = false) -> [JSONValue] {
        let trace = hex(32), root = hex(16), request = hex(16)
        return [
            envelope(run: run, trace: trace, span: root, name: "fetch.start", placement: placement, t: t,
                     attrs: ["call": "getFlow", "policy": "reloadRevalidatingCacheData", "loadTimeout": 5]),
            envelope(run: run, trace: trace, span: request, name: "request.start", placement: placement, t: t,
                     attrs: ["kind": "targeted", "timeout": 4.5]),
            envelope(run: run, trace: trace, span: request, name: "request.end", placement: placement, t: t + duration,
                     attrs: ["kind": "targeted", "outcome": "ok", "status": 200, "duration": .number(duration), "bytes": 326]),
            envelope(run: run, trace: trace, span: root, name: "fetch.end", placement: placement, t: t + duration,
                     attrs: ["call": "getFlow", "source": .string(source), "variation": "all-A", "audience": "iOS US",
                             "targetingLost": .bool(targetingLost), "duration": .number(duration)]),
        ]
    }

    /// Three getFlow calls (main_paywall from the network, main_paywall after a targeted timeout from the
    /// default audience, onboarding from the cache) and a preload whose settings_upsell request timed out.
    static func sample(run: String) -> [JSONValue] {
        var events = call(run: run, placement: "main_paywall", t: 10, source: "network", duration: 0.2)
        let trace = hex(32), root = hex(16), targeted = hex(16), fallback = hex(16)
        events += [
            envelope(run: run, trace: trace, span: root, name: "fetch.start", placement: "main_paywall", t: 20,
                     attrs: ["call": "getFlow", "policy": "reloadRevalidatingCacheData", "loadTimeout": 5]),
            envelope(run: run, trace: trace, span: targeted, name: "request.start", placement: "main_paywall", t: 20,
                     attrs: ["kind": "targeted", "timeout": 4.5]),
            envelope(run: run, trace: trace, span: targeted, name: "request.end", placement: "main_paywall", t: 24.5,
                     attrs: ["kind": "targeted", "outcome": "timeout", "duration": 4.5, "bytes": 0]),
            envelope(run: run, trace: trace, span: root, name: "timeout", placement: "main_paywall", t: 24.5,
                     attrs: ["stage": "targeted", "budget": 4.5, "elapsed": 4.5]),
            envelope(run: run, trace: trace, span: root, name: "fallback", placement: "main_paywall", t: 24.5,
                     attrs: ["to": "defaultAudience", "reason": "timeout"]),
            envelope(run: run, trace: trace, span: fallback, name: "request.start", placement: "main_paywall", t: 24.5,
                     attrs: ["kind": "default", "timeout": 0.5]),
            envelope(run: run, trace: trace, span: fallback, name: "request.end", placement: "main_paywall", t: 24.7,
                     attrs: ["kind": "default", "outcome": "ok", "status": 200, "duration": 0.2, "bytes": 326]),
            envelope(run: run, trace: trace, span: root, name: "fetch.end", placement: "main_paywall", t: 24.7,
                     attrs: ["call": "getFlow", "source": "defaultAudience", "variation": "all-B", "audience": "All Users",
                             "targetingLost": true, "duration": 4.7]),
        ]
        let cached = hex(32), cachedRoot = hex(16)
        events += [
            envelope(run: run, trace: cached, span: cachedRoot, name: "fetch.start", placement: "onboarding", t: 30,
                     attrs: ["call": "getFlow", "policy": "returnCacheDataElseLoad", "loadTimeout": 5]),
            envelope(run: run, trace: cached, span: cachedRoot, name: "cache.hit", placement: "onboarding", t: 30,
                     attrs: ["layer": "memory", "age": 12, "audience": "targeted"]),
            envelope(run: run, trace: cached, span: cachedRoot, name: "fetch.end", placement: "onboarding", t: 30.001,
                     attrs: ["call": "getFlow", "source": "cache", "variation": "all-A", "audience": "iOS US",
                             "targetingLost": false, "duration": 0.001]),
        ]
        let preload = hex(32), preloadRoot = hex(16), batch = hex(16)
        events += [
            envelope(run: run, trace: preload, span: preloadRoot, name: "preload.start", placement: nil, t: 40,
                     attrs: ["placements": ["settings_upsell"], "loadTimeout": 5]),
            envelope(run: run, trace: preload, span: batch, name: "request.start", placement: "settings_upsell", t: 40,
                     attrs: ["kind": "default", "timeout": 5]),
            envelope(run: run, trace: preload, span: batch, name: "request.end", placement: "settings_upsell", t: 45,
                     attrs: ["kind": "default", "outcome": "timeout", "duration": 5, "bytes": 0]),
            envelope(run: run, trace: preload, span: preloadRoot, name: "preload.end", placement: nil, t: 45,
                     attrs: ["succeeded": [], "failed": ["settings_upsell": 2005], "duration": 5]),
        ]
        return events
    }
}

// MARK: - Chromium

/// A headless Chromium found on this machine.
struct Chromium {
    let path: String

    /// FLOWSCOPE_CHROMIUM, else the first of chromium, chromium-browser, google-chrome(-stable) on PATH.
    static func executable() -> Chromium? {
        let environment = ProcessInfo.processInfo.environment
        if let configured = environment["FLOWSCOPE_CHROMIUM"], !configured.isEmpty {
            return access(configured, X_OK) == 0 ? Chromium(path: configured) : nil
        }
        let directories = (environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":").map(String.init)
        for name in ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"] {
            for directory in directories where access("\(directory)/\(name)", X_OK) == 0 {
                return Chromium(path: "\(directory)/\(name)")
            }
        }
        return nil
    }

    /// The DOM after scripts ran (`--dump-dom` with a virtual time budget), self-signed certificate accepted.
    func dumpDOM(url: String, timeout: Double = 90) throws -> String {
        let profile = makeTemporaryDirectory()
        defer { removeDirectory(profile) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = ["--headless", "--no-sandbox", "--disable-gpu", "--ignore-certificate-errors",
                             "--user-data-dir=\(profile)", "--no-first-run", "--virtual-time-budget=5000",
                             "--window-size=1400,1000", "--dump-dom", url]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let pid = process.processIdentifier
        let killer = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: killer)
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        killer.cancel()
        let dom = String(decoding: data, as: UTF8.self)
        guard process.terminationStatus == 0, !dom.isEmpty else {
            throw ClientError("\(path) --dump-dom \(url) exited with \(process.terminationStatus) after printing \(data.count) bytes")
        }
        return dom
    }
}

/// Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: commands
/// on fd 3, answers on fd 4, each message a JSON text ended by NUL), to watch a page that keeps its
/// event stream open.
final class DevToolsBrowser {
    private let pid: pid_t
    private let commands: Int32
    private let answers: Int32
    private let profile: String
    private var buffer: [UInt8] = []
    private var nextID = 0
    private var session: String?

    init(executable: String) throws {
        profile = makeTemporaryDirectory()
        var toBrowser: [Int32] = [0, 0], fromBrowser: [Int32] = [0, 0]
        guard pipe(&toBrowser) == 0, pipe(&fromBrowser) == 0 else { throw ClientError("pipe failed: errno \(errno)") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, toBrowser[0], 3)
        posix_spawn_file_actions_adddup2(&actions, fromBrowser[1], 4)
        let devNull = "/dev/null"
        posix_spawn_file_actions_addopen(&actions, 1, devNull, O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, devNull, O_WRONLY, 0)
        let arguments = [executable, "--headless", "--no-sandbox", "--disable-gpu", "--ignore-certificate-errors",
                         "--user-data-dir=\(profile)", "--no-first-run", "--remote-debugging-pipe",
                         "--window-size=1400,1000", "about:blank"]
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        var child: pid_t = 0
        let spawned = posix_spawn(&child, executable, &actions, nil, &argv, environ)
        Glibc.close(toBrowser[0])
        Glibc.close(fromBrowser[1])
        guard spawned == 0 else {
            Glibc.close(toBrowser[1]); Glibc.close(fromBrowser[0])
            removeDirectory(profile)
            throw ClientError("cannot start \(executable): error \(spawned)")
        }
        pid = child
        commands = toBrowser[1]
        answers = fromBrowser[0]
        signal(SIGPIPE, SIG_IGN)
    }

    /// Opens a page in a new tab and attaches to it.
    func open(_ url: String) throws {
        let target = try command("Target.createTarget", ["url": "about:blank"])["targetId"]?.stringValue
        guard let target else { throw ClientError("Target.createTarget gave no targetId") }
        session = try command("Target.attachToTarget", ["targetId": .string(target), "flatten": true])["sessionId"]?.stringValue
        _ = try command("Page.navigate", ["url": .string(url)])
    }

    /// The value of a JavaScript expression in the page (null when it threw or is not JSON).
    func evaluate(_ expression: String) throws -> JSONValue {
        let result = try command("Runtime.evaluate", ["expression": .string(expression), "returnByValue": true])
        return result["result"]?["value"] ?? .null
    }

    /// Polls an expression until it is true; false after `timeout` seconds.
    func waitFor(_ expression: String, timeout: Double = 20) throws -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try evaluate(expression) == .bool(true) { return true }
            usleep(100_000)
        }
        return false
    }

    /// A mouse event at a point of the viewport: `mouseMoved`, `mousePressed` or `mouseReleased`.
    func mouse(_ type: String, x: Double, y: Double) throws {
        var params: [String: JSONValue] = ["type": .string(type), "x": .number(x), "y": .number(y)]
        if type != "mouseMoved" { params["button"] = "left"; params["clickCount"] = 1 }
        _ = try command("Input.dispatchMouseEvent", params)
    }

    /// Emulates `prefers-color-scheme` (`light` or `dark`).
    func emulate(colorScheme: String) throws {
        _ = try command("Emulation.setEmulatedMedia", ["features": [["name": "prefers-color-scheme", "value": .string(colorScheme)]]])
    }

    /// A left click at a point, as a user's: press and release.
    func click(x: Double, y: Double) throws {
        try mouse("mousePressed", x: x, y: y)
        try mouse("mouseReleased", x: x, y: y)
    }

    /// Presses and releases a key (`Tab`, `Escape`, `Enter`, `ArrowDown`, `+`, `-`, `0`, `" "` for Space), as a keyboard does.
    func press(_ key: String) throws {
        let codes: [String: Double] = ["Tab": 9, "Enter": 13, "Escape": 27, "ArrowDown": 40, "ArrowUp": 38, "Home": 36, "End": 35]
        var params: [String: JSONValue] = ["type": "rawKeyDown", "key": .string(key), "code": .string(key),
                                           "windowsVirtualKeyCode": .number(codes[key] ?? 0)]
        if key == "Enter" { params["text"] = "\r" }
        if key == "Enter" { params["type"] = "keyDown" }
        // Characters typed: their key code and text (`+` as the `=`/`+` key, `-`, digits).
        let characters: [String: (code: String, keyCode: Double)] = ["+": ("Equal", 187), "-": ("Minus", 189), "0": ("Digit0", 48), " ": ("Space", 32)]
        if let c = characters[key] {
            params["type"] = "keyDown"; params["text"] = .string(key)
            params["code"] = .string(c.code); params["windowsVirtualKeyCode"] = .number(c.keyCode)
        }
        _ = try command("Input.dispatchKeyEvent", params)
        params["type"] = "keyUp"
        params["text"] = nil
        _ = try command("Input.dispatchKeyEvent", params)
    }

    /// The role and accessible name Chromium computes for the first element matching `selector`, or nil.
    func accessibility(_ selector: String) throws -> (role: String, name: String)? {
        guard let root = try command("DOM.getDocument", ["depth": 0])["root"]?["nodeId"] else { return nil }
        let node = try command("DOM.querySelector", ["nodeId": root, "selector": .string(selector)])["nodeId"]
        guard let node, node.numberValue != 0 else { return nil }
        let tree = try command("Accessibility.getPartialAXTree", ["nodeId": node, "fetchRelatives": false])
        guard let ax = tree["nodes"]?.arrayValue?.first else { return nil }
        return (ax["role"]?["value"]?.stringValue ?? "", ax["name"]?["value"]?.stringValue ?? "")
    }

    func close() {
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        Glibc.close(commands)
        Glibc.close(answers)
        removeDirectory(profile)
    }

    /// Sets the viewport's size in CSS pixels (`Emulation.setDeviceMetricsOverride`), as a window of that size.
    func setViewport(width: Int, height: Int) throws {
        _ = try command("Emulation.setDeviceMetricsOverride", ["width": .number(Double(width)), "height": .number(Double(height)),
                                                              "deviceScaleFactor": 1, "mobile": false])
    }

    /// Sends a DevTools command to the page (its `result`).
    func command(_ method: String, _ params: [String: JSONValue], timeout: Double = 20) throws -> JSONValue {
        nextID += 1
        var message: [String: JSONValue] = ["id": .number(Double(nextID)), "method": .string(method), "params": .object(params)]
        if let session, !method.hasPrefix("Target.") { message["sessionId"] = .string(session) }
        let bytes = Array(JSONValue.object(message).jsonText.utf8) + [0]
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { write(commands, $0.baseAddress, $0.count) }
            guard n > 0 else { throw ClientError("DevTools pipe closed while sending \(method)") }
            sent += n
        }
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            while let end = buffer.firstIndex(of: 0) {
                let text = String(decoding: buffer[..<end], as: UTF8.self)
                buffer.removeSubrange(...end)
                let answer = try JSON5.parse(text)
                guard answer["id"]?.numberValue == Double(nextID) else { continue }
                if let error = answer["error"] { throw ClientError("\(method) failed: \(error.jsonText)") }
                return answer["result"] ?? .null
            }
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { throw ClientError("no answer to \(method) within \(timeout) s") }
            var poller = pollfd(fd: answers, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, Int32(min(left, 1) * 1000)) >= 0 else { throw ClientError("poll failed: errno \(errno)") }
            guard poller.revents != 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 65_536)
            let n = chunk.withUnsafeMutableBytes { read(answers, $0.baseAddress, $0.count) }
            guard n > 0 else { throw ClientError("the browser closed the DevTools pipe while waiting for \(method)") }
            buffer += chunk[..<n]
        }
    }
}

// MARK: - HTML

/// Just enough HTML reading for assertions on Chromium's serialized DOM.
enum HTMLSlice {
    /// The element starting at the first occurrence of `prefix`, up to its matching closing tag.
    static func element(in html: String, startingWith prefix: String) -> String? {
        guard let start = html.range(of: prefix) else { return nil }
        let nameEnd = prefix.dropFirst().firstIndex(where: { $0 == " " || $0 == ">" }) ?? prefix.endIndex
        let name = String(prefix[prefix.index(after: prefix.startIndex)..<nameEnd])
        var depth = 0
        var index = start.lowerBound
        while index < html.endIndex {
            if html[index...].hasPrefix("<\(name)") {
                let after = html.index(index, offsetBy: name.count + 1, limitedBy: html.endIndex) ?? html.endIndex
                if after < html.endIndex, html[after] == " " || html[after] == ">" { depth += 1 }
            } else if html[index...].hasPrefix("</\(name)>") {
                depth -= 1
                if depth == 0 { return String(html[start.lowerBound..<html.index(index, offsetBy: name.count + 3)]) }
            }
            index = html.index(after: index)
        }
        return nil
    }

    /// The text runs between tags, trimmed, without the empty ones.
    static func texts(in html: String) -> [String] {
        var out: [String] = [], current = "", inTag = false
        for c in html {
            if c == "<" { inTag = true; if !current.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty { out.append(current.trimmingCharacters(in: .whitespacesAndNewlines)) }; current = "" }
            else if c == ">" { inTag = false }
            else if !inTag { current.append(c) }
        }
        return out
    }

    /// Occurrences of `needle`.
    static func count(of needle: String, in html: String) -> Int {
        html.components(separatedBy: needle).count - 1
    }
}
