@testable import FlowEvents
import FlowFetch
import FlowJSON
@testable import FlowScopeServer
import MemorySink
import MetricsSink
import SQLiteSink
import TestSupport
import Testing

@Suite("Read model: the same calls and numbers from every store and every path", .heavy)
struct ReadModelPropertyTests {
    /// The router over `store`, with the placements bound low enough that `_other` is used.
    static func router(_ store: any EventStore) -> Router {
        let pipeline = EventPipeline(run: "live", sinks: [])
        pipeline.shutdown()
        var limits = DashboardAPI.Limits()
        limits.placements = CallStatistics.Bounds(placements: 4)
        return DashboardAPI.router(pipeline: pipeline, metrics: NoMetrics(), store: store, sinks: SinkStatus(stats: pipeline.stats),
                                   hub: SSEHub(), web: nil, ingestLimiter: RateLimiter(ratePerSecond: 10, burst: 10), limits: limits)
    }

    @Test("random streams: memory, sqlite read after a restart, /api/calls, /api/placements (with and without a filter that excludes nothing) and /api/runs/{id} give the same calls and numbers",
          arguments: [1, 2, 3, 4, 5] as [UInt64])
    func sameEverywhere(seed: UInt64) throws {
        var stream = EventStream(seed: seed)
        let events = stream.generate(calls: 400)
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let memory = MemorySink(capacity: 100_000)
        do {
            let writer = try SQLiteSink(path: dir + "/events.sqlite")
            // Batches of odd sizes; the first half before a "restart", the rest after.
            var i = 0
            while i < events.count {
                let n = min(1 + Int(stream.random.next() % 97), events.count - i)
                memory.consume(Array(events[i..<i + n]))
                writer.consume(Array(events[i..<i + n]))
                i += n
            }
            writer.close()
        }
        let sqlite = try SQLiteSink(path: dir + "/events.sqlite")
        defer { sqlite.close() }
        let stores: [(String, Router)] = [("memory", Self.router(memory)), ("sqlite", Self.router(sqlite)),
                                          ("layered", Self.router(LayeredEventStore(primary: MemorySink(), archive: sqlite)))]
        let query = CallQuery(bounds: CallStatistics.Bounds(placements: 4))
        for run in EventStream.runs {
            var filter = CallFilter()
            filter.run = run
            // Typed: the same calls, statistics and coverage from memory and from the reopened file.
            let fromMemory = query.calls(in: memory, filter: filter, limit: 10_000)
            let fromSQLite = query.calls(in: sqlite, filter: filter, limit: 10_000)
            #expect(fromMemory.calls == fromSQLite.calls, "seed \(seed) run \(run)")
            #expect(fromMemory.totals == fromSQLite.totals && fromMemory.coverage == fromSQLite.coverage, "seed \(seed) run \(run)")
            #expect(fromMemory.calls.contains { $0.isIncomplete } && fromMemory.calls.contains { $0.kind == .preload })
            let placements = query.placements(in: memory, filter: filter)
            #expect(placements.placements == query.placements(in: sqlite, filter: filter).placements, "seed \(seed) run \(run)")
            #expect(placements.placements.contains { $0.placement == "_other" }, "seed \(seed) run \(run): the bound is used")
            // The totals are the sums of the rows.
            #expect(fromMemory.totals.fetches == placements.placements.map(\.fetches).reduce(0, +))
            #expect(fromMemory.totals.errors == placements.placements.map(\.errors).reduce(0, +))
            #expect(fromMemory.totals.timeouts == placements.placements.map(\.timeouts).reduce(0, +))
            // The run's summary, counted by each store over every event, is the same.
            let summary = try #require(memory.runDetail(id: run)?.summary)
            #expect(summary == sqlite.runDetail(id: run)?.summary)

            // Over HTTP, from every store, with no filter and with filters that exclude nothing.
            var answers: [String: JSONValue] = [:]
            for (name, router) in stores {
                let plain = CallQueryTests.get(router, "/api/placements", [("run", run)]).body
                let noOp = CallQueryTests.get(router, "/api/placements", [("run", run), ("from", "-100000d")]).body
                let detail = CallQueryTests.get(router, "/api/runs/\(run)", []).body
                #expect(plain["placements"] == noOp["placements"] && plain["coverage"] == noOp["coverage"], "seed \(seed) \(name) \(run)")
                #expect(detail["placements"] == plain["placements"], "seed \(seed) \(name) \(run)")
                let calls = CallQueryTests.get(router, "/api/calls", [("run", run), ("limit", "1000")]).body
                let callsNoOp = CallQueryTests.get(router, "/api/calls", [("run", run), ("limit", "1000"), ("to", "2100-01-01T00:00:00Z")]).body
                #expect(calls["calls"] == callsNoOp["calls"] && calls["stats"] == callsNoOp["stats"], "seed \(seed) \(name) \(run)")
                #expect(calls["calls"]?.arrayValue?.count == fromMemory.calls.count, "seed \(seed) \(name) \(run)")
                // The KPIs' two sources, /api/placements' totals and /api/calls' stats, are one.
                if case .object(var stats)? = calls["stats"] {
                    stats["durations"] = nil
                    #expect(plain["totals"] == .object(stats) && noOp["totals"] == .object(stats), "seed \(seed) \(name) \(run)")
                } else {
                    Issue.record("seed \(seed) \(name) \(run): no stats in \(calls.jsonText.prefix(200))")
                }
                answers[name] = ["placements": plain["placements"] ?? .null, "stats": calls["stats"] ?? .null,
                                 "calls": calls["calls"] ?? .null, "coverage": plain["coverage"] ?? .null]
            }
            #expect(answers["memory"] == answers["sqlite"] && answers["sqlite"] == answers["layered"], "seed \(seed) run \(run)")
        }
    }

    @Test("random streams, undamaged and damaged, fed in small batches with a query after each: the placements answer kept call by call equals the one computed at once over every event so far; a bound reached gives way to computing at once",
          arguments: [(21, false), (22, true), (23, true), (24, true)] as [(UInt64, Bool)])
    func liveStatisticsAgree(seed: UInt64, damage: Bool) throws {
        var stream = EventStream(seed: seed)
        let events = stream.generate(calls: 300, damage: damage)
        let memory = MemorySink(capacity: 100_000)
        let live = CallQuery()
        // Low enough that a run reaches it part way: the answer must stay exact across the switch.
        let bounded = CallQuery(bounds: CallStatistics.Bounds(placements: 5, sources: 3))
        var i = 0, queries = 0
        while i < events.count {
            let n = min(1 + Int(stream.random.next() % 40), events.count - i)
            memory.consume(Array(events[i..<i + n]))
            i += n
            for run in EventStream.runs {
                var filter = CallFilter()
                filter.run = run
                let held = memory.events(since: nil, limit: 100_000, run: run, placement: nil, name: nil)
                for (query, bounds) in [(live, CallStatistics.Bounds()), (bounded, CallStatistics.Bounds(placements: 5, sources: 3))] {
                    let kept = query.placements(in: memory, filter: filter)
                    let once = CallQuery.placements(in: held, filter: filter, bounds: bounds)
                    #expect(kept.placements == once.placements, "seed \(seed) run \(run) after \(i) events, bounds \(bounds)")
                    #expect(kept.totals == once.totals && kept.matched == once.matched, "seed \(seed) run \(run) after \(i) events")
                    // The calls answer's order (kept call by call too) is the newest first of every call.
                    let calls = query.calls(in: memory, filter: filter, limit: 100_000).calls.map(\.trace)
                    #expect(calls == CallQuery.calls(in: held, filter: filter, limit: 100_000).calls.map(\.trace),
                            "seed \(seed) run \(run) after \(i) events")
                }
                queries += 1
            }
        }
        #expect(queries > 30)
        // The unbounded query answered call by call (not at once) at the end, for every run.
        #expect(live.cache.liveRuns == EventStream.runs.count, "seed \(seed)")
    }

    /// The sum of every sample of `family` in a Prometheus text exposition whose labels contain `matching`.
    static func sum(_ exposition: String, _ family: String, matching: String = "") -> Double {
        exposition.split(separator: "\n").reduce(0) { total, line in
            guard line.hasPrefix(family + "{") || line.hasPrefix(family + " "), matching.isEmpty || line.contains(matching),
                  let value = line.split(separator: " ").last.flatMap({ Double($0) }) else { return total }
            return total + value
        }
    }

    @Test("random streams, undamaged and damaged (ends repeated, events missing or reordered): the metrics sink's counters equal the calls' fetches, errors and targeting lost; its timeouts are the calls' plus those of traces that are no call",
          arguments: [(11, false), (12, false), (13, true), (14, true), (15, true)] as [(UInt64, Bool)])
    func metricsAgree(seed: UInt64, damage: Bool) throws {
        var stream = EventStream(seed: seed)
        let events = stream.generate(calls: 300, damage: damage)
        let memory = MemorySink(capacity: 100_000)
        let metrics = try MetricsSink(version: "test")
        memory.consume(events)
        metrics.consume(events)
        let totals = CallQuery().calls(in: memory, filter: CallFilter(), limit: 0).totals
        var fold = CallFold()
        for e in events { fold.add(e) }
        let strayTimeouts = fold.traces.filter { !$0.isCall }.reduce(0) { $0 + $1.timeouts.count }
        let text = String(decoding: metrics.render(), as: UTF8.self)
        #expect(Self.sum(text, "flowscope_fetches_total") == Double(totals.fetches), "seed \(seed)")
        #expect(Self.sum(text, "flowscope_fetches_total", matching: "outcome=\"error\"") + Self.sum(text, "flowscope_preload_errors_total")
                == Double(totals.errors), "seed \(seed)")
        #expect(Self.sum(text, "flowscope_timeouts_total") == Double(totals.timeouts + strayTimeouts), "seed \(seed)")
        #expect(Self.sum(text, "flowscope_targeting_lost_total") == Double(totals.targetingLost), "seed \(seed)")
        #expect(totals.fetches > 100 && totals.errors > 10 && totals.timeouts > 10 && totals.targetingLost > 10, "seed \(seed): \(totals)")
        if damage {
            // The streams do repeat ends: without the rule, the counters would count them twice.
            #expect(Self.sum(text, "flowscope_events_total", matching: "name=\"fetch.end\"") > Double(totals.fetches), "seed \(seed)")
        }
    }
}
