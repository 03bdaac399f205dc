import TestSupport
import FlowJSON
import Foundation
import Testing
@testable import FlowScopeCLI

/// Every endpoint of interfaces.md ("HTTPS endpoints") over the real `flowscope serve` stack: real
/// TLS sockets on 127.0.0.1, events put in through POST /api/ingest.
@Suite("flowscope serve endpoints", .ownThread)
struct ServeEndpointTests {
    @Test("GET / serves the dashboard's index.html from the web root")
    func dashboardFromWebRoot() throws {
        let web = makeTemporaryDirectory("web")
        defer { removeDirectory(web) }
        let page = "<!doctype html><html><head><title>FlowScope</title></head><body>dashboard</body></html>\n"
        try write(page, to: web + "/index.html")
        let fixture = try StackFixture(server: "webRoot: \"\(web)\"")
        let reply = try fixture.get("/")
        #expect(reply.status == 200)
        #expect(reply.header("content-type")?.hasPrefix("text/html") == true)
        #expect(reply.text == page)
    }

    @Test("GET / without a configured web root serves the embedded dashboard, byte for byte the repository's web/")
    func dashboardDefault() throws {
        let fixture = try StackFixture()
        for (path, file) in [("/", "index.html"), ("/app.js", "app.js"), ("/style.css", "style.css")] {
            let reply = try fixture.get(path)
            #expect(reply.status == 200, "\(path)")
            #expect(reply.body == [UInt8](try Data(contentsOf: URL(fileURLWithPath: packageRoot + "/web/" + file))), "\(path)")
        }
        #expect(try fixture.get("/").header("content-type")?.hasPrefix("text/html") == true)
        #expect(try fixture.get("/README.md").status == 404, "the directory's README is not served")
    }

    @Test("GET /healthz answers {\"status\":\"ok\"}")
    func healthz() throws {
        let fixture = try StackFixture()
        let reply = try fixture.get("/healthz")
        #expect(reply.status == 200)
        #expect(reply.json == ["status": "ok"])
    }

    @Test("GET /metrics is Prometheus text 0.0.4, and OpenMetrics 1.0 when Accept asks for it")
    func metricsFormats() throws {
        let fixture = try StackFixture()
        let text = try fixture.get("/metrics")
        #expect(text.status == 200)
        #expect(text.header("content-type") == "text/plain; version=0.0.4; charset=utf-8")
        #expect(text.text.contains("# TYPE flowscope_build_info gauge\nflowscope_build_info{version=\"\(flowScopeVersion)\"} 1\n"))
        #expect(!text.text.contains("# EOF"))

        let open = try fixture.get("/metrics", headers: [("Accept", "application/openmetrics-text; version=1.0.0,text/plain;q=0.5")])
        #expect(open.status == 200)
        #expect(open.header("content-type") == "application/openmetrics-text; version=1.0.0; charset=utf-8")
        #expect(open.text.hasSuffix("# EOF\n"))
        #expect(open.text.contains("flowscope_build_info{version=\"\(flowScopeVersion)\"} 1\n"))
        // OpenMetrics names counter families without _total in TYPE lines.
        #expect(open.text.contains("# TYPE flowscope_fetches counter\n"))
    }

    @Test("POST /api/ingest takes a JSON array and JSON Lines: 202 {accepted: n}, then the events are in /api/events, /api/placements, /api/runs and /metrics")
    func ingestReachesEverySink() throws {
        let fixture = try StackFixture()
        let array = try fixture.ingest(Events.array([
            Events.envelope("fetch.start", placement: "p1", attrs: ["call": "getFlow", "policy": "reloadRevalidatingCacheData", "loadTimeout": 5]),
            Events.fetchEnd("p1", source: "network", duration: 0.25),
        ]))
        #expect(array.status == 202)
        #expect(array.json == ["accepted": 2])
        let lines = try fixture.ingest(Events.lines([
            Events.fetchEnd("p1", source: "cache", duration: 0.01),
            Events.envelope("cache.hit", placement: "p1", attrs: ["layer": "memory", "age": 3, "audience": "All Users"]),
            Events.envelope("timeout", placement: "p1", attrs: ["stage": "targeted", "budget": 5, "elapsed": 5]),
        ]))
        #expect(lines.status == 202)
        #expect(lines.json == ["accepted": 3])

        let events = try fixture.getJSON("/api/events")["events"]?.arrayValue ?? []
        #expect(events.compactMap { $0["name"]?.stringValue } == ["fetch.start", "fetch.end", "fetch.end", "cache.hit", "timeout"])
        #expect(events.allSatisfy { $0["run"] == "ingest-test" && $0["trace"]?.stringValue?.count == 32 })

        let placements = try fixture.getJSON("/api/placements?run=ingest-test")
        #expect(placements["run"] == "ingest-test")
        let p1 = placements["placements"]?.arrayValue?.first
        #expect(p1?["placement"] == "p1")
        #expect(p1?["fetches"] == 2)
        #expect(p1?["sources"] == ["network": 1, "cache": 1])
        #expect(p1?["timeouts"] == 1)

        let metrics = try fixture.get("/metrics").text
        #expect(metrics.contains("flowscope_fetches_total{placement=\"p1\",call=\"getFlow\",source=\"network\",outcome=\"success\"} 1\n"), "\(metrics)")
        #expect(metrics.contains("flowscope_cache_lookups_total{placement=\"p1\",result=\"hit\"} 1\n"))
        #expect(metrics.contains("flowscope_timeouts_total{placement=\"p1\",stage=\"targeted\"} 1\n"))

        let runs = try fixture.getJSON("/api/runs")["runs"]?.arrayValue ?? []
        #expect(runs.map { $0["id"] } == ["ingest-test"])
        #expect(runs.first?["events"] == 5)
        #expect(runs.first?["fetches"] == 2)
    }

    @Test("GET /api/events: newest last, limit keeps the newest, since pages forward, run/placement/name filter")
    func eventsQuery() throws {
        let fixture = try StackFixture()
        var batch: [JSONValue] = []
        for i in 0..<6 {
            batch.append(Events.envelope(i % 2 == 0 ? "cache.miss" : "cache.hit", placement: i < 3 ? "p1" : "p2",
                                         run: i % 3 == 0 ? "run-a" : "run-b", t: Double(i)))
        }
        try #require(fixture.ingest(Events.lines(batch)).status == 202)
        let all = try fixture.getJSON("/api/events")
        let seqs = all["events"]?.arrayValue?.compactMap { $0["seq"]?.intValue } ?? []
        try #require(seqs.count == 6)
        #expect(seqs == seqs.sorted() && Set(seqs).count == 6)
        #expect(all["events"]?.arrayValue?.compactMap { $0["t"]?.intValue } == [0, 1, 2, 3, 4, 5])
        #expect(all["latestSeq"]?.intValue == seqs.last)

        func query(_ q: String) throws -> [Int] {
            try fixture.getJSON("/api/events?" + q)["events"]?.arrayValue?.compactMap { $0["t"]?.intValue } ?? []
        }
        #expect(try query("limit=2") == [4, 5])
        #expect(try query("since=\(seqs[1])") == [2, 3, 4, 5])
        #expect(try query("since=\(seqs[1])&limit=2") == [2, 3])
        #expect(try query("since=\(seqs[5])") == [])
        #expect(try query("run=run-a") == [0, 3])
        #expect(try query("placement=p2") == [3, 4, 5])
        #expect(try query("name=cache.hit") == [1, 3, 5])
        #expect(try query("run=run-b&placement=p1&name=cache.hit") == [1])
        #expect(try query("run=nobody") == [])

        let badSince = try fixture.get("/api/events?since=abc")
        #expect(badSince.status == 400)
        #expect(badSince.errorMessage?.hasPrefix("since:") == true, "\(badSince.text)")
        let badLimit = try fixture.get("/api/events?limit=0")
        #expect(badLimit.status == 400)
        #expect(badLimit.errorMessage?.hasPrefix("limit:") == true, "\(badLimit.text)")
    }

    @Test("GET /api/placements?run= aggregates counts by source, p50/p95, timeouts, targeting lost and the last preload error")
    func placements() throws {
        let fixture = try StackFixture()
        var events: [JSONValue] = []
        for (i, d) in [0.1, 0.2, 0.3, 0.4, 2.0].enumerated() {
            events.append(Events.fetchEnd("main_paywall", source: i == 4 ? "defaultAudience" : "network", duration: d,
                                          targetingLost: i == 4))
        }
        events.append(Events.fetchEnd("main_paywall", source: "fallbackFile", duration: 5, run: "other", errorCode: "timeout"))
        // A call still open that timed out, and a preload that failed onboarding.
        events.append(Events.envelope("fetch.start", placement: "main_paywall", attrs: ["call": "getFlow"]))
        events.append(Events.envelope("timeout", placement: "main_paywall", attrs: ["stage": "targeted", "budget": 1.5, "elapsed": 1.5]))
        events.append(Events.envelope("preload.end", trace: Events.newTrace(),
                                      attrs: ["succeeded": 1, "failed": ["onboarding": "http_503"], "duration": 0.4]))
        try #require(fixture.ingest(Events.lines(events)).status == 202)

        let body = try fixture.getJSON("/api/placements?run=ingest-test")
        let list = body["placements"]?.arrayValue ?? []
        #expect(list.compactMap { $0["placement"]?.stringValue } == ["main_paywall", "onboarding"])
        let main = list.first
        #expect(main?["fetches"] == 5)
        #expect(main?["sources"] == ["network": 4, "defaultAudience": 1])
        #expect(main?["duration"] == ["p50": 0.3, "p95": 2.0, "samples": 5])
        #expect(main?["targetingLost"] == 1)
        #expect(main?["timeouts"] == 1)
        #expect(main?["errors"] == 0)
        #expect(main?["lastPreloadError"] == .null)
        #expect(list.last?["lastPreloadError"]?["code"] == "http_503")

        let other = try fixture.getJSON("/api/placements?run=other")["placements"]?.arrayValue ?? []
        #expect(other.count == 1)
        #expect(other.first?["errors"] == 1)
        #expect(other.first?["sources"] == [:], "sources count successful fetches only")
        let merged = try fixture.getJSON("/api/placements")
        #expect(merged["run"] == .null)
        #expect(merged["placements"]?.arrayValue?.first?["fetches"] == 6)
        #expect(try fixture.getJSON("/api/placements?run=nobody")["placements"] == [])
    }

    @Test("GET /api/runs lists runs; /api/runs/{id} has the detail; an unknown id is a 404 JSON error")
    func runs() throws {
        let fixture = try StackFixture()
        try #require(fixture.ingest(Events.lines([
            Events.fetchEnd("p1", source: "network", duration: 0.1, run: "test:checkout"),
            Events.envelope("cache.miss", placement: "p1", run: "test:checkout"),
            Events.envelope("cache.miss", placement: "p1", run: "live"),
        ])).status == 202)
        let runs = try fixture.getJSON("/api/runs")["runs"]?.arrayValue ?? []
        #expect(Set(runs.compactMap { $0["id"]?.stringValue }) == ["test:checkout", "live"])
        let test = runs.first { $0["id"] == "test:checkout" }
        #expect(test?["kind"] == "test")
        #expect(test?["events"] == 2)
        #expect(runs.first { $0["id"] == "live" }?["kind"] == "live")

        let detail = try fixture.getJSON("/api/runs/test:checkout")
        #expect(detail["run"]?["id"] == "test:checkout")
        #expect(detail["eventsByName"] == ["fetch.end": 1, "cache.miss": 1])
        #expect(detail["placements"]?.arrayValue?.first?["placement"] == "p1")

        let missing = try fixture.get("/api/runs/nope")
        #expect(missing.status == 404)
        #expect(missing.header("content-type") == "application/json")
        #expect(missing.errorMessage == "no run \"nope\"")
    }

    @Test("simulation runs saved in the state directory are listed by /api/runs (kind simulation) and served whole by /api/runs/{id}")
    func simulationRuns() throws {
        let fixture = try StackFixture()
        let store = SimulationStore(directory: fixture.dir + "/state/simulations")
        let summary: JSONValue = ["id": "sim:lab-1", "sessions": 200, "seed": 7,
                                  "strategies": [["name": "atPaywall T=5", "sessions": 200]]]
        try store.save(id: "sim:lab-1", summary: summary)
        let runs = try fixture.getJSON("/api/runs")["runs"]?.arrayValue ?? []
        #expect(runs.count == 1)
        #expect(runs.first?["id"] == "sim:lab-1")
        #expect(runs.first?["kind"] == "simulation")
        #expect(runs.first?["strategies"] == nil, "the list leaves the per-strategy detail out")
        #expect(try fixture.getJSON("/api/runs/sim:lab-1") == summary)
    }

    @Test("GET /api/events/stream: id is the seq, data the envelope; Last-Event-ID resumes with exactly the missed events")
    func eventStream() throws {
        let fixture = try StackFixture()
        func subscribe(lastEventID: Int? = nil) throws -> TestConnection {
            let c = try fixture.connect()
            var head = "GET /api/events/stream HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
            if let lastEventID { head += "Last-Event-ID: \(lastEventID)\r\n" }
            try c.send(head + "\r\n")
            let reply = try c.readHead()
            #expect(reply.status == 200)
            #expect(reply.header("content-type") == "text/event-stream; charset=utf-8")
            return c
        }
        /// (id, data) of every complete frame.
        func frames(_ text: String) -> [(Int, JSONValue)] {
            text.components(separatedBy: "\n\n").compactMap { frame in
                var id: Int?, data: JSONValue?
                for line in frame.split(separator: "\n") {
                    if line.hasPrefix("id: ") { id = Int(line.dropFirst(4)) }
                    if line.hasPrefix("data: ") { data = try? JSON5.parse(String(line.dropFirst(6))) }
                }
                guard let id, let data else { return nil }
                return (id, data)
            }
        }

        let live = try subscribe()
        #expect(eventually { fixture.stack.hub.clientCount == 1 })
        try #require(fixture.ingest(Events.lines((0..<3).map { Events.envelope("cache.miss", placement: "p1", t: Double($0)) })).status == 202)
        let seqs = try fixture.getJSON("/api/events")["events"]?.arrayValue?.compactMap { $0["seq"]?.intValue } ?? []
        try #require(seqs.count == 3)
        let (text, ended) = live.readStream { t in frames(t).count >= 3 }
        #expect(!ended)
        let got = frames(text)
        #expect(got.map(\.0) == seqs)
        #expect(got.map { $0.1["seq"]?.intValue } == seqs)
        #expect(got.map { $0.1["t"]?.intValue } == [0, 1, 2])

        // Resume after the first: exactly the two missed events, then live ones.
        let resumed = try subscribe(lastEventID: seqs[0])
        #expect(eventually { fixture.stack.hub.clientCount == 2 })
        try #require(fixture.ingest(Events.lines([Events.envelope("cache.hit", placement: "p1", t: 9)])).status == 202)
        let (again, _) = resumed.readStream { t in frames(t).contains { $0.1["t"]?.intValue == 9 } }
        let resumedIDs = frames(again).map(\.0)
        #expect(resumedIDs.count == 3)
        #expect(Array(resumedIDs.prefix(2)) == Array(seqs.dropFirst()))
        #expect(resumedIDs.last.map { $0 > seqs[2] } == true)
    }

    @Test("error statuses carry JSON bodies: 400 naming the line or path, 401, 404, 405, 413 over 1 MiB")
    func errorStatuses() throws {
        let fixture = try StackFixture()
        let good = Events.envelope("cache.miss", placement: "p1").jsonText

        let badLine = try fixture.ingest(good + "\n" + "{\"ts\": oops}\n")
        #expect(badLine.status == 400)
        #expect(badLine.errorMessage?.contains("line 2") == true, "\(badLine.text)")
        var wrongTrace = Events.envelope("cache.miss").objectValue ?? [:]
        wrongTrace["trace"] = "XYZ"
        let badPath = try fixture.ingest(Events.array([Events.envelope("cache.miss"), .object(wrongTrace)]))
        #expect(badPath.status == 400)
        #expect(badPath.errorMessage?.contains("$[1].trace") == true, "\(badPath.text)")
        let badName = try fixture.ingest(Events.lines([Events.envelope("no.such.event")]))
        #expect(badName.status == 400)
        #expect(badName.errorMessage?.contains("line 1: $.name") == true, "\(badName.text)")
        #expect(try fixture.getJSON("/api/events")["events"] == [], "nothing of a refused body is accepted")

        let noToken = try fixture.request("POST", "/api/ingest", body: Array(good.utf8))
        #expect(noToken.status == 401)
        #expect(noToken.header("www-authenticate")?.hasPrefix("Bearer") == true)
        let wrongToken = try fixture.ingest(good, token: String(repeating: "x", count: 43))
        #expect(wrongToken.status == 401)
        #expect(wrongToken.errorMessage != nil)

        let notFound = try fixture.get("/api/nothing")
        #expect(notFound.status == 404)
        #expect(notFound.errorMessage != nil)
        let wrongMethod = try fixture.request("DELETE", "/api/events")
        #expect(wrongMethod.status == 405)
        #expect(wrongMethod.header("allow")?.contains("GET") == true)
        let getIngest = try fixture.get("/api/ingest")
        #expect(getIngest.status == 405)
        #expect(getIngest.header("allow")?.contains("POST") == true)

        let big = String(repeating: " ", count: (1 << 20) + 1)
        let tooLarge = try fixture.ingest(big)
        #expect(tooLarge.status == 413)
        #expect(tooLarge.json["error"]?["status"] == 413)

        for reply in [badLine, badPath, noToken, wrongToken, notFound, wrongMethod, tooLarge] {
            #expect(reply.header("content-type") == "application/json")
            #expect(reply.json["error"]?["status"]?.intValue == reply.status)
        }
        #expect(try fixture.get("/healthz").status == 200, "the server lives on after bad input")
    }

    @Test("ingest over its configured rate gets 429 with Retry-After")
    func rateLimited() throws {
        let fixture = try StackFixture(server: "limits: { ingestRatePerSecond: 0.01, ingestBurst: 2 }")
        let body = Events.lines([Events.envelope("cache.miss", placement: "p1")])
        #expect(try fixture.ingest(body).status == 202)
        #expect(try fixture.ingest(body).status == 202)
        let limited = try fixture.ingest(body)
        #expect(limited.status == 429)
        #expect(limited.json["error"]?["status"] == 429)
        #expect(limited.header("retry-after").flatMap(Int.init).map { $0 >= 1 } == true, "\(limited.headers)")
        #expect(try fixture.getJSON("/api/events")["events"]?.arrayValue?.count == 2)
        #expect(try fixture.get("/api/events").status == 200, "reads are not rate limited")
    }
}
