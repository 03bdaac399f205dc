import FlowEvents
import Foundation
import FlowJSON
@testable import FlowScopeServer
import MemorySink
import SQLiteSink
import Synchronization
import TestSupport
import Testing

/// `GET /api/calls` and the filters of `GET /api/events`: events folded by trace into calls, each
/// filter, bad parameters, preloads matching the placements they name, and bounded reads.
@Suite("Call queries", .ownThread)
struct CallQueryTests {
    /// Wall clock of the fixture's events: 2026-01-01T00:00:00Z plus the call's `at` seconds.
    static let base = 1_767_225_600.0

    /// A store with seven calls of run `live` (and one of `test:x`), wall-clock seconds apart:
    /// - 0 main_paywall getFlow network 0.2 s (iOS US / all-A)
    /// - 1 main_paywall getFlow defaultAudience 4.7 s, targeting lost, a timeout and a fallback (All Users / all-B)
    /// - 2 onboarding getFlow cache 0.001 s
    /// - 3 settings_upsell via a preload, failed 2005, 5 s
    /// - 4 checkout getFlowOrDefault error 2004, 0.3 s
    /// - 5 onboarding getFlow network 2 s (iOS DE / all-C)
    /// - 6 (run test:x) main_paywall getFlow network 0.5 s
    static func store(window: Int = 20_000) throws -> (MemorySink, [String: String]) {
        let memory = MemorySink()
        var b = Builder()
        var traces: [String: String] = [:]
        traces["network"] = b.fetch(at: 0, placement: "main_paywall", duration: 0.2, source: "network", audience: "iOS US", variation: "all-A")
        traces["lost"] = b.fetch(at: 1, placement: "main_paywall", duration: 4.7, source: "defaultAudience", audience: "All Users",
                                 variation: "all-B", lost: true, timeout: true)
        traces["cache"] = b.fetch(at: 2, placement: "onboarding", duration: 0.001, source: "cache", audience: "iOS US", variation: "all-A")
        traces["preload"] = b.preload(at: 3, placement: "settings_upsell", duration: 5, failedCode: 2005)
        traces["error"] = b.fetch(at: 4, placement: "checkout", call: "getFlowOrDefault", duration: 0.3, errorCode: 2004)
        traces["slow"] = b.fetch(at: 5, placement: "onboarding", duration: 2, source: "network", audience: "iOS DE", variation: "all-C")
        traces["other"] = b.fetch(at: 6, placement: "main_paywall", duration: 0.5, source: "network", run: "test:x")
        memory.consume(try b.envelopes())
        return (memory, traces)
    }

    static func router(_ store: any EventStore, window: Int = 20_000, calls: CallCache.Limits = CallCache.Limits()) -> Router {
        let pipeline = EventPipeline(run: "live", sinks: [])
        pipeline.shutdown() // only ingest would use it
        var limits = DashboardAPI.Limits()
        limits.queryWindow = window
        limits.calls = calls
        return DashboardAPI.router(pipeline: pipeline, metrics: NoMetrics(), store: store, sinks: SinkStatus(stats: pipeline.stats), hub: SSEHub(),
                                   web: nil, ingestLimiter: RateLimiter(ratePerSecond: 10, burst: 10), limits: limits)
    }

    static func get(_ router: Router, _ path: String, _ query: [(String, String)]) -> (status: Int, body: JSONValue) {
        let response = router.respond(to: Request(method: "GET", path: path, queryItems: query.map { (name: $0.0, value: $0.1) }),
                                      token: nil, policy: .loopbackReadsOpen)
        let text = String(decoding: response.bodyBytes, as: UTF8.self)
        return (response.status, (try? JSON5.parse(text)) ?? .string(text))
    }

    /// The traces /api/calls answers for `query` (run live unless the query names one).
    static func traces(_ router: Router, _ query: [(String, String)]) -> [String] {
        let q = query.contains { $0.0 == "run" } ? query : [("run", "live")] + query
        let answer = get(router, "/api/calls", q)
        #expect(answer.status == 200, "\(q): \(answer.body.jsonText)")
        return answer.body["calls"]?.arrayValue?.compactMap { $0["trace"]?.stringValue } ?? []
    }

    @Test("events fold by trace into calls with their placement, source, audience, variation, targeting, error, duration and start")
    func foldsCalls() throws {
        let (memory, t) = try Self.store()
        let calls = CallFold.calls(memory.events(limit: 1000, run: "live"))
        #expect(calls.map(\.trace) == [t["slow"], t["error"], t["preload"], t["cache"], t["lost"], t["network"]].compactMap { $0 },
                "newest first")
        let lost = try #require(calls.first { $0.trace == t["lost"] })
        #expect(lost.placement == "main_paywall" && lost.name == "getFlow" && lost.source == "defaultAudience" && lost.kind == .fetch)
        #expect(lost.audience == "All Users" && lost.variation == "all-B" && lost.targetingLost && lost.duration == 4.7)
        #expect(lost.timeouts.count == 1 && lost.fallbacks == ["defaultAudience"] && lost.requests.count == 2 && lost.events == 8 && lost.finished)
        #expect(lost.requests.map(\.outcome) == ["timeout", "ok"] && lost.requests.map(\.budget) == [4.5, 0.5] && !lost.isIncomplete)
        #expect(lost.start == Self.base + 1)
        let preload = try #require(calls.first { $0.trace == t["preload"] })
        #expect(preload.placement == nil && preload.placements == ["settings_upsell"] && preload.name == "preloadFlows" && preload.kind == .preload)
        #expect(preload.failed == ["settings_upsell": 2005] && preload.isError && preload.duration == 5)
        let error = try #require(calls.first { $0.trace == t["error"] })
        #expect(error.errorCode == 2004 && error.name == "getFlowOrDefault" && error.source == nil)
    }

    @Test("each filter narrows /api/calls to exactly the calls it names")
    func eachFilter() throws {
        let (memory, t) = try Self.store()
        let r = Self.router(memory)
        func expect(_ query: [(String, String)], _ keys: [String], sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(Self.traces(r, query) == keys.map { t[$0]! }, "\(query)", sourceLocation: sourceLocation)
        }
        expect([], ["slow", "error", "preload", "cache", "lost", "network"])
        expect([("run", "test:x")], ["other"])
        expect([("placement", "main_paywall")], ["lost", "network"])
        expect([("placement", "settings_upsell")], ["preload"]) // the preload names it; its own placement is null
        expect([("call", "getFlowOrDefault")], ["error"])
        expect([("call", "preloadFlows")], ["preload"])
        expect([("source", "cache")], ["cache"])
        expect([("audience", "iOS US")], ["cache", "network"])
        expect([("variation", "all-C")], ["slow"])
        expect([("targetingLost", "true")], ["lost"])
        expect([("targetingLost", "false")], ["slow", "error", "preload", "cache", "network"])
        expect([("errorCode", "2004")], ["error"])
        expect([("errorCode", "2005")], ["preload"])
        expect([("errorCode", "any")], ["error", "preload"])
        expect([("errorCode", "none")], ["slow", "cache", "lost", "network"])
        expect([("minDuration", "0.3")], ["slow", "error", "preload", "lost"])
        expect([("minDuration", "300ms"), ("maxDuration", "2s")], ["error"]) // at least min, shorter than max
        expect([("maxDuration", "200ms")], ["cache"])
        expect([("trace", String(t["lost"]!.prefix(20)))], ["lost"])
        expect([("trace", t["cache"]!.uppercased())], ["cache"])
        expect([("q", "ios de")], ["slow"])
        expect([("q", "defaultAudience")], ["lost"]) // the fallback's `to` and the source
        expect([("q", "timeout")], ["preload", "lost"]) // event names and attribute values
        expect([("from", ISO8601.format(Self.base + 3))], ["slow", "error", "preload"])
        expect([("from", String(Self.base + 1)), ("to", String(Self.base + 2))], ["cache", "lost"])
        expect([("placement", "onboarding"), ("source", "network")], ["slow"])
        // Relative to now: the fixture's events are from 2026-01-01, long before the last hour.
        expect([("from", "-1h")], [])
        #expect(Self.traces(r, [("from", "-100000d")]).count == 6)
        expect([("limit", "2")], ["slow", "error"])
    }

    @Test("the answer counts matched and scanned calls and gives p50, p95 (of the fetches that ended), sources, errors, timeouts and targeting lost of the matched calls")
    func statsAndCounts() throws {
        let (memory, t) = try Self.store()
        let answer = Self.get(Self.router(memory), "/api/calls", [("run", "live"), ("limit", "1")])
        #expect(answer.status == 200)
        let body = answer.body
        #expect(body["calls"]?.arrayValue?.count == 1)
        #expect(body["counts"]?["matched"] == 6 && body["counts"]?["returned"] == 1 && body["counts"]?["scannedCalls"] == 6)
        #expect(body["counts"]?["windowFull"] == false)
        let stats = try #require(body["stats"])
        // Fetch durations 0.001, 0.2, 0.3, 2, 4.7 (the preload's 5 s is no fetch): nearest rank p50 is the 3rd, p95 the 5th.
        #expect(stats["p50"] == 0.3 && stats["p95"] == 4.7 && stats["samples"] == 5)
        #expect(stats["calls"] == 6 && stats["fetches"] == 5 && stats["open"] == 0)
        #expect(body["coverage"]?["complete"] == true && body["coverage"]?["events"] == body["counts"]?["scannedEvents"])
        #expect(stats["sources"] == ["network": 2, "cache": 1, "defaultAudience": 1])
        #expect(stats["errors"] == 2 && stats["timeouts"] == 1 && stats["targetingLost"] == 1)
        #expect(stats["durations"]?.arrayValue?.count == 5)
        #expect(stats["durations"]?.arrayValue?.contains([0.3, "error", .string(t["error"]!), "checkout"]) == true)
        #expect(body["latestSeq"]?.numberValue == Double(memory.latestSeq ?? 0))
        #expect(body["epoch"]?.stringValue?.isEmpty == false)
    }

    @Test("a bad value answers 400 with a message naming the parameter, for /api/calls and /api/events alike")
    func badParameters() throws {
        let (memory, _) = try Self.store()
        let r = Self.router(memory)
        for (name, value) in [("limit", "0"), ("limit", "many"), ("minDuration", "fast"), ("maxDuration", "-1s"), ("minDuration", "3 parsecs"),
                              ("targetingLost", "maybe"), ("errorCode", "a b"), ("errorCode", "abc"), ("errorCode", "2005x"), ("errorCode", "-2005"), ("trace", "xyz"), ("trace", String(repeating: "a", count: 33)),
                              ("from", "yesterday"), ("to", "-5 weeks"), ("from", "2026-13-01T00:00:00Z"),
                              ("q", String(repeating: "x", count: 201))] {
            for path in ["/api/calls", "/api/events"] {
                let answer = Self.get(r, path, [(name, value)])
                #expect(answer.status == 400, "\(path) \(name)=\(value)")
                let message = answer.body["error"]?["message"]?.stringValue ?? answer.body.jsonText
                #expect(message.hasPrefix("\(name): expected"), "\(path) \(name)=\(value): \(message)")
            }
        }
        #expect(Self.get(r, "/api/calls", [("limit", "5000")]).body["calls"]?.arrayValue?.count == 7, "limit over 1000 is capped, not refused")
    }

    @Test("over HTTPS, errorCode=abc is refused with a 400 JSON error naming the parameter; a code, any and none are served")
    func errorCodeOverHTTPS() throws {
        let (memory, _) = try Self.store()
        let fixture = try ServerFixture { $0 = Self.router(memory) }
        let c = try fixture.connect()
        for path in ["/api/calls", "/api/events", "/api/placements"] {
            let reply = try c.request("GET", "\(path)?run=live&errorCode=abc")
            #expect(reply.status == 400, "\(path): \(reply.text)")
            #expect(reply.header("content-type") == "application/json")
            let message = (try? JSON5.parse(reply.text))?["error"]?["message"]?.stringValue
            #expect(message == #"errorCode: expected an error code (a whole number such as 2005), any or none, got "abc""#, "\(path)")
        }
        for (value, count) in [("2004", 1), ("02004", 1), ("any", 2), ("none", 4), ("9000", 0)] {
            let reply = try c.request("GET", "/api/calls?run=live&errorCode=\(value)")
            #expect(reply.status == 200, "errorCode=\(value): \(reply.text)")
            #expect((try? JSON5.parse(reply.text))?["counts"]?["matched"]?.intValue == count, "errorCode=\(value)")
        }
    }

    @Test("without run, /api/calls, /api/events and /api/placements answer the runs in memory (this start's); a named run not in memory is read from the sqlite file, live too until its first event of this start")
    func omittedRunIsTheMemorySinks() throws {
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        // An earlier start stored two live calls and one of test:old.
        let sqlite = try SQLiteSink(path: dir + "/events.sqlite")
        var earlier = Builder()
        let storedLive = [earlier.fetch(at: 0, placement: "main_paywall", duration: 0.2, source: "network"),
                          earlier.fetch(at: 1, placement: "onboarding", duration: 0.3, source: "cache")]
        let storedOther = earlier.fetch(at: 2, placement: "main_paywall", duration: 0.4, source: "network", run: "test:old")
        let storedCount = try earlier.envelopes().count
        sqlite.consume(try earlier.envelopes())
        let memory = MemorySink()
        let fixture = try ServerFixture { $0 = Self.router(LayeredEventStore(primary: memory, archive: sqlite)) }
        let c = try fixture.connect()
        func calls(_ query: String) throws -> [String] {
            let reply = try c.request("GET", "/api/calls" + query)
            #expect(reply.status == 200, "\(query): \(reply.text)")
            return (try JSON5.parse(reply.text))["calls"]?.arrayValue?.compactMap { $0["trace"]?.stringValue } ?? []
        }
        func events(_ query: String) throws -> Int {
            (try JSON5.parse(try c.request("GET", "/api/events" + query).text))["events"]?.arrayValue?.count ?? -1
        }
        func placements(_ query: String) throws -> [String] {
            let rows = (try JSON5.parse(try c.request("GET", "/api/placements" + query).text))["placements"]?.arrayValue ?? []
            return rows.compactMap { $0["placement"]?.stringValue }.sorted()
        }

        // After the restart, before this start's first event: nothing without run; the stored runs by name.
        #expect(try calls("") == [] && events("") == 0 && placements("") == [])
        #expect(try Set(calls("?run=live")) == Set(storedLive))
        #expect(try events("?run=live") == 8 && placements("?run=live") == ["main_paywall", "onboarding"])
        #expect(try calls("?run=test:old") == [storedOther])

        // This start's first events: live is read from memory only; without run, memory's runs.
        let fresh = earlier.fetch(at: 10, placement: "checkout", duration: 0.1, source: "network")
        let test = earlier.fetch(at: 11, placement: "checkout", duration: 0.1, source: "network", run: "test:new")
        memory.consume(Array(try earlier.envelopes().dropFirst(storedCount)))
        #expect(try calls("?run=live") == [fresh])
        #expect(try calls("") == [test, fresh])
        #expect(try events("") == 8 && placements("") == ["checkout"])
        #expect(try calls("?run=test:old") == [storedOther], "a run memory never held is still read from the file")
        sqlite.close()
    }

    @Test("a preload of two placements, one failed: with a placement filter, only that placement's failure counts")
    func preloadFailurePerPlacement() throws {
        let memory = MemorySink()
        var b = Builder()
        let trace = b.preload(at: 0, placements: ["home", "upsell"], failed: ["upsell": 2005], duration: 1)
        memory.consume(try b.envelopes())
        let r = Self.router(memory)
        #expect(Self.traces(r, [("placement", "home")]) == [trace], "the preload names home")
        #expect(Self.traces(r, [("placement", "home"), ("errorCode", "any")]) == [], "home did not fail")
        #expect(Self.traces(r, [("placement", "home"), ("errorCode", "none")]) == [trace])
        #expect(Self.traces(r, [("placement", "upsell"), ("errorCode", "2005")]) == [trace])
        #expect(Self.traces(r, [("errorCode", "2005")]) == [trace])
        func stats(_ query: [(String, String)]) -> JSONValue? { Self.get(r, "/api/calls", query).body["stats"] }
        #expect(stats([("placement", "home")])?["errors"] == 0)
        #expect(stats([("placement", "home")])?["durations"] == [], "a preload's duration is no fetch duration")
        #expect(stats([("placement", "upsell")])?["errors"] == 1)
        #expect(stats([])?["errors"] == 1 && stats([])?["calls"] == 1 && stats([])?["fetches"] == 0)
    }

    @Test("/api/placements follows the filters and the time range: per placement, the matching calls (a preload counts for each placement it names); without filters, the same as a filter that excludes nothing")
    func placementsFollowFilters() throws {
        let memory = MemorySink()
        var b = Builder()
        let early = b.fetch(at: 0, placement: "home", duration: 0.2, source: "network")
        _ = b.fetch(at: 1, placement: "home", duration: 4.7, source: "defaultAudience", lost: true, timeout: true)
        _ = b.fetch(at: 2, placement: "upsell", duration: 0.1, source: "cache")
        let preload = b.preload(at: 3, placements: ["home", "upsell"], failed: ["upsell": 2005], duration: 1)
        _ = b.fetch(at: 4, placement: "checkout", duration: 0.3, errorCode: 2004)
        memory.consume(try b.envelopes())
        let r = Self.router(memory)
        func rows(_ query: [(String, String)]) -> [String: JSONValue] {
            let answer = Self.get(r, "/api/placements", [("run", "live")] + query)
            #expect(answer.status == 200, "\(query): \(answer.body.jsonText)")
            var out: [String: JSONValue] = [:]
            for row in answer.body["placements"]?.arrayValue ?? [] { out[row["placement"]?.stringValue ?? "?"] = row }
            return out
        }
        // Without filters: the same as with a filter that excludes nothing.
        #expect(rows([]) == rows([("minDuration", "0")]) && rows([]) == rows([("from", "-100000d")]))
        #expect(rows([])["home"]?["fetches"] == 2 && rows([])["home"]?["calls"] == 3)

        // Every call: the preload counts for home and for upsell.
        let all = rows([("from", "-100000d")])
        #expect(all["home"]?["calls"] == 3 && all["home"]?["fetches"] == 2 && all["upsell"]?["calls"] == 2 && all["checkout"]?["calls"] == 1)
        #expect(all["home"]?["sources"] == ["network": 1, "defaultAudience": 1] && all["home"]?["targetingLost"] == 1)
        #expect(all["home"]?["timeouts"] == 1 && all["home"]?["errors"] == 0 && all["home"]?["lastPreloadError"] == .null)
        #expect(all["home"]?["duration"] == ["p50": 0.2, "p95": 4.7, "samples": 2], "the fetches' durations, not the preload's")
        #expect(all["upsell"]?["errors"] == 1 && all["upsell"]?["lastPreloadError"]?["code"] == 2005)
        #expect(all["checkout"]?["errors"] == 1 && all["checkout"]?["sources"] == [:])

        // A source filter: only the cache fetch; a time range: from the preload on.
        #expect(Set(rows([("source", "cache")]).keys) == ["upsell"] && rows([("source", "cache")])["upsell"]?["calls"] == 1)
        let late = rows([("from", ISO8601.format(Self.base + 3))])
        #expect(late["home"]?["calls"] == 1 && late["upsell"]?["calls"] == 1 && late["checkout"]?["calls"] == 1)
        #expect(late["home"]?["fetches"] == 0 && late["home"]?["errors"] == 0 && late["upsell"]?["errors"] == 1)
        // A placement filter: that placement's row only, though the preload names two.
        #expect(Set(rows([("placement", "home")]).keys) == ["home"] && rows([("placement", "home")])["home"]?["calls"] == 3)
        #expect(rows([("trace", early)])["home"]?["calls"] == 1 && rows([("trace", preload)]).count == 2)
        #expect(Self.get(r, "/api/placements", [("run", "live"), ("source", "cache")]).body["counts"] == ["matched": 1, "windowFull": false])
        // The table's counts are the matched calls per placement that /api/calls answers.
        let calls = Self.get(r, "/api/calls", [("run", "live"), ("minDuration", "0.2"), ("limit", "1000")]).body["calls"]?.arrayValue ?? []
        var perPlacement: [String: Double] = [:]
        for c in calls {
            for p in c["placements"]?.arrayValue ?? [c["placement"] ?? .null] { if let p = p.stringValue { perPlacement[p, default: 0] += 1 } }
        }
        #expect(rows([("minDuration", "0.2")]).mapValues { $0["calls"]?.numberValue ?? -1 } == perPlacement)
        let bad = Self.get(r, "/api/placements", [("minDuration", "fast")])
        #expect(bad.status == 400 && bad.body["error"]?["message"]?.stringValue?.hasPrefix("minDuration: expected") == true)
    }

    @Test("durations accept seconds, 300ms, 2s and minutes; times accept ISO 8601, epoch seconds and -5m/-1h relative to now")
    func valueForms() {
        #expect(CallFilter.parseDuration("0.3") == 0.3)
        #expect(CallFilter.parseDuration("300ms") == 0.3)
        #expect(CallFilter.parseDuration("2s") == 2)
        #expect(CallFilter.parseDuration("1.5m") == 90)
        #expect(CallFilter.parseDuration("-1") == nil && CallFilter.parseDuration("ms") == nil)
        #expect(CallFilter.parseTime("-5m", now: 1000) == 700)
        #expect(CallFilter.parseTime("-1h", now: 10_000) == 6400)
        #expect(CallFilter.parseTime("1767225600", now: 0) == Self.base)
        #expect(CallFilter.parseTime("2026-01-01T00:00:00Z", now: 0) == Self.base)
        #expect(CallFilter.parseTime("2026-01-01T00:00:00.5Z", now: 0) == Self.base + 0.5)
        #expect(CallFilter.parseTime("-5", now: 0) == nil && CallFilter.parseTime("soon", now: 0) == nil)
    }

    @Test("/api/events takes the same filters: the placement keeps the preload's events naming it; a call filter keeps its calls' events")
    func eventsFilters() throws {
        let (memory, t) = try Self.store()
        let r = Self.router(memory)
        func events(_ query: [(String, String)]) -> [JSONValue] {
            let answer = Self.get(r, "/api/events", query)
            #expect(answer.status == 200, "\(query): \(answer.body.jsonText)")
            #expect(answer.body["epoch"]?.stringValue != nil)
            return answer.body["events"]?.arrayValue ?? []
        }
        let upsell = events([("run", "live"), ("placement", "settings_upsell")])
        #expect(upsell.compactMap { $0["name"]?.stringValue } == ["preload.start", "request.start", "request.end", "preload.end"])
        let cache = events([("run", "live"), ("source", "cache")])
        #expect(Set(cache.compactMap { $0["trace"]?.stringValue }) == [t["cache"]!] && cache.count == 4)
        let slowEnds = events([("minDuration", "1s"), ("name", "fetch.end")])
        #expect(slowEnds.compactMap { $0["trace"]?.stringValue } == [t["lost"]!, t["slow"]!])
        #expect(events([("trace", t["error"]!)]).count == 4)
        #expect(events([("run", "live"), ("placement", "main_paywall"), ("limit", "3")]).count == 3, "the newest 3")
        // Without filters, the store answers as before.
        #expect(events([("limit", "1000")]).count == memory.events(limit: 1000).count)
    }

    /// A memory sink holding a live run of 300 fetches (1,200 events) over three placements, and a
    /// store over it that counts what it answers.
    static func countedRun() throws -> (MemorySink, CountingStore) {
        let memory = MemorySink(capacity: 100_000)
        var b = Builder()
        for i in 0..<300 { _ = b.fetch(at: Double(i), placement: "p\(i % 3)", duration: 0.1, source: "network") }
        memory.consume(try b.envelopes())
        return (memory, CountingStore(memory))
    }

    @Test("calls and placements cover the whole run, read in pages; a second query reads only the events that arrived since")
    func wholeRunInPages() throws {
        let (memory, counting) = try Self.countedRun()
        let r = Self.router(counting, window: 400, calls: CallCache.Limits(page: 250))
        let answer = Self.get(r, "/api/calls", [("run", "live"), ("placement", "p0")])
        #expect(counting.largestLimit == 250, "pages of 250")
        #expect(counting.read == 1200, "every event of the run, once")
        #expect(answer.body["counts"]?["scannedEvents"] == 1200)
        #expect(answer.body["counts"]?["windowFull"] == false && answer.body["coverage"]?["complete"] == true)
        #expect(answer.body["counts"]?["matched"] == 100)
        // Nothing new: nothing read; the unfiltered answer of the same run comes from the same fold.
        _ = Self.get(r, "/api/placements", [("run", "live")])
        #expect(counting.read == 1200)
        // Four new events (one call): only they are read.
        var more = Builder(startingAt: 1200)
        _ = more.fetch(at: 300, placement: "p0", duration: 0.1, source: "network")
        memory.consume(try more.envelopes())
        let after = Self.get(r, "/api/placements", [("run", "live")])
        #expect(counting.read == 1204)
        #expect(after.body["totals"]?["fetches"] == 301)
        _ = Self.get(r, "/api/events", [("placement", "p0")])
        #expect(counting.largestLimit == 400, "/api/events with a placement reads the window of newest events")
    }

    @Test("a stored run longer than the old 20,000-event window, read from the sqlite file after a restart: its statistics are the whole run's, and say so")
    func storedRunCountedWhole() throws {
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        var b = Builder()
        for i in 0..<6_000 { _ = b.fetch(at: Double(i), placement: "p\(i % 5)", duration: Double(i % 100) / 100, source: "network") }
        let events = try b.envelopes()
        do {
            let writer = try SQLiteSink(path: dir + "/events.sqlite")
            writer.consume(events)
            writer.close()
        }
        let sqlite = try SQLiteSink(path: dir + "/events.sqlite")
        defer { sqlite.close() }
        let r = Self.router(LayeredEventStore(primary: MemorySink(), archive: sqlite))
        let placements = Self.get(r, "/api/placements", [("run", "live")]).body
        #expect(placements["coverage"]?["events"] == .number(Double(events.count)) && events.count == 24_000)
        #expect(placements["coverage"]?["complete"] == true && placements["counts"]?["windowFull"] == false)
        #expect(placements["totals"]?["fetches"] == 6_000)
        #expect(placements["placements"]?.arrayValue?.map { $0["fetches"] } == Array(repeating: 1_200, count: 5))
        let detail = Self.get(r, "/api/runs/live", []).body
        #expect(detail["placements"] == placements["placements"] && detail["coverage"] == placements["coverage"])
        let calls = Self.get(r, "/api/calls", [("run", "live"), ("placement", "p0")]).body
        #expect(calls["counts"]?["matched"] == 1_200 && calls["stats"]?["samples"] == 1_200)
    }

    @Test("a run longer than the cache's bound: the answer covers its newest half-bound of events and says it is not complete")
    func boundedRun() throws {
        let (_, counting) = try Self.countedRun()
        let r = Self.router(counting, calls: CallCache.Limits(maxEvents: 800, page: 100))
        let answer = Self.get(r, "/api/placements", [("run", "live")])
        #expect(counting.largestLimit == 400, "pages of 100, then the newest 400")
        #expect(answer.body["coverage"]?["events"] == 400 && answer.body["coverage"]?["complete"] == false)
        #expect(answer.body["counts"]?["windowFull"] == true)
        #expect(answer.body["totals"]?["fetches"] == 100, "the newest 100 calls whole (4 events each)")
    }
}

/// Builds envelopes as the engine writes them, numbered from 1.
struct Builder {
    private var json: [JSONValue] = []
    private var next = 0
    private var seqBase = 0

    /// A builder whose events are numbered from `seq + 1` (and whose ids differ from those of a builder before it).
    init(startingAt seq: Int = 0) {
        seqBase = seq
        next = seq
    }

    private mutating func hex(_ length: Int) -> String {
        next += 1
        let digits = String(next, radix: 16)
        // The number zero-padded, reversed: every id distinct (padding with a hex digit on the right made 0x1 and 0x1b
        // one id), and ids differ in their first digits (trace prefixes tell them apart).
        return String((String(repeating: "0", count: max(0, length - digits.count)) + digits).reversed())
    }

    private mutating func add(_ run: String, _ trace: String, _ span: String, _ name: String, _ placement: String?, _ at: Double,
                              _ t: Double, _ attrs: [String: JSONValue]) {
        json.append(["seq": .number(Double(seqBase + json.count + 1)), "ts": .number(CallQueryTests.base + at + t / 1000), "t": .number(t),
                     "run": .string(run), "trace": .string(trace), "span": .string(span), "name": .string(name),
                     "placement": placement.map(JSONValue.string) ?? .null, "attrs": .object(attrs)])
    }

    /// One fetch call at `at` seconds past the base; returns its trace.
    mutating func fetch(at: Double, placement: String, call: String = "getFlow", duration: Double, source: String? = nil,
                        audience: String = "iOS US", variation: String = "all-A", lost: Bool = false, timeout: Bool = false,
                        errorCode: Int? = nil, run: String = "live") -> String {
        let trace = hex(32), root = hex(16), request = hex(16)
        add(run, trace, root, "fetch.start", placement, at, 0, ["call": .string(call), "policy": "reloadRevalidatingCacheData", "loadTimeout": 5])
        add(run, trace, request, "request.start", placement, at, 0, ["kind": "targeted", "timeout": 4.5])
        if timeout {
            add(run, trace, request, "request.end", placement, at, 4.5, ["kind": "targeted", "outcome": "timeout", "duration": 4.5])
            add(run, trace, root, "timeout", placement, at, 4.5, ["stage": "targeted", "budget": 4.5, "elapsed": 4.5])
            add(run, trace, root, "fallback", placement, at, 4.5, ["to": "defaultAudience", "reason": "timeout"])
            let fallback = hex(16)
            add(run, trace, fallback, "request.start", placement, at, 4.5, ["kind": "default", "timeout": 0.5])
            add(run, trace, fallback, "request.end", placement, at, duration, ["kind": "default", "outcome": "ok", "duration": 0.2])
        } else {
            add(run, trace, request, "request.end", placement, at, duration, ["kind": "targeted", "outcome": errorCode == nil ? "ok" : "server",
                                                                               "duration": .number(duration)])
        }
        var end: [String: JSONValue] = ["call": .string(call), "duration": .number(duration)]
        if let errorCode {
            end["errorCode"] = .number(Double(errorCode))
        } else {
            end["source"] = source.map(JSONValue.string) ?? .null
            end["audience"] = .string(audience)
            end["variation"] = .string(variation)
            end["targetingLost"] = .bool(lost)
        }
        add(run, trace, root, "fetch.end", placement, at, duration, end)
        return trace
    }

    /// A preload of one placement that failed with `failedCode`.
    mutating func preload(at: Double, placement: String, duration: Double, failedCode: Int) -> String {
        preload(at: at, placements: [placement], failed: [placement: failedCode], duration: duration)
    }

    /// A preload of `placements`, one request each; those in `failed` failed with their code.
    mutating func preload(at: Double, placements: [String], failed: [String: Int], duration: Double) -> String {
        let trace = hex(32), root = hex(16)
        add("live", trace, root, "preload.start", nil, at, 0, ["call": "preloadFlows", "placements": .array(placements.map(JSONValue.string)), "loadTimeout": 5])
        for p in placements {
            let span = hex(16)
            add("live", trace, span, "request.start", p, at, 0, ["kind": "targeted", "timeout": 5])
            add("live", trace, span, "request.end", p, at, duration, ["kind": "targeted", "outcome": failed[p] == nil ? "ok" : "timeout",
                                                                     "duration": .number(duration)])
        }
        add("live", trace, root, "preload.end", nil, at, duration, [
            "call": "preloadFlows", "succeeded": .array(placements.filter { failed[$0] == nil }.map(JSONValue.string)),
            "failed": .object(failed.mapValues { .number(Double($0)) }), "duration": .number(duration),
        ])
        return trace
    }

    func envelopes() throws -> [Envelope] { try json.map { try Envelope(jsonValue: $0) } }
}

/// An event store that passes every query to another and remembers the largest `limit` asked for.
final class CountingStore: EventStore {
    let store: MemorySink
    private let largest = Mutex(0)
    private let total = Mutex(0)
    init(_ store: MemorySink) { self.store = store }
    var largestLimit: Int { largest.withLock { $0 } }
    /// Events answered so far.
    var read: Int { total.withLock { $0 } }
    func events(since: UInt64?, limit: Int, run: String?, placement: String?, name: String?) -> [Envelope] {
        largest.withLock { $0 = max($0, limit) }
        let events = store.events(since: since, limit: limit, run: run, placement: placement, name: name)
        total.withLock { $0 += events.count }
        return events
    }
    var latestSeq: UInt64? { store.latestSeq }
    func runSummaries() -> [RunSummary] { store.runSummaries() }
    func runDetail(id: String) -> RunDetail? { store.runDetail(id: id) }
    func follow(_ handler: @escaping @Sendable ([Envelope]) -> Void) -> @Sendable () -> Void { store.follow(handler) }
}

/// Metrics the call routes never read.
struct NoMetrics: MetricsExposing {
    func exposition(accept: String?) -> (contentType: String, body: [UInt8]) { ("text/plain", []) }
}
