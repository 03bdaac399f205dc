import FlowEvents
import FlowFetch
import FlowJSON
@testable import FlowScopeServer
import MemorySink
import MetricsSink
import SQLiteSink
import TestSupport
import Testing

/// Random event streams as several engines would send them at once: interleaved runs and traces,
/// fetches and preloads naming several placements, errors, timeouts, and then damaged the way
/// transport damages them: events missing (a start, an end, a request.start), ends repeated, and
/// arrival out of order. Seq numbers are given in arrival order, as the pipeline gives them.
private struct EventStream {
    static let runs = ["live", "test:a", "sim:b"]
    static let placements = ["main", "onboarding", "upsell", "checkout", "settings", "promo"]

    var random: SplitMix64
    var events: [Envelope] = []
    private var trace: UInt64 = 0

    init(seed: UInt64) { random = SplitMix64(seed: seed) }

    private mutating func roll(_ n: Int) -> Int { Int(random.next() % UInt64(n)) }

    /// The events of `calls` random calls, each trace's events in order, traces interleaved; with
    /// `damage`, some events missing, repeated or swapped with their neighbour.
    mutating func generate(calls: Int, damage: Bool = true) -> [Envelope] {
        var traces: [[(EventName, UInt64, String?, Double, EventAttributes)]] = []
        var runOf: [String] = []
        for _ in 0..<calls {
            runOf.append(Self.runs[roll(3)])
            traces.append(roll(4) == 0 ? preload() : fetch())
        }
        // Interleave: take the next event of a random unfinished trace.
        var next = Array(repeating: 0, count: traces.count)
        var open = Array(traces.indices)
        var ordered: [(Int, (EventName, UInt64, String?, Double, EventAttributes))] = []
        while !open.isEmpty {
            let k = roll(min(open.count, 6))
            let i = open[k]
            ordered.append((i, traces[i][next[i]]))
            next[i] += 1
            if next[i] == traces[i].count { open.remove(at: k) }
        }
        // Damage: drop about 3%, repeat about 1%, swap neighbours about 5%.
        var arrived: [(Int, (EventName, UInt64, String?, Double, EventAttributes))] = []
        for item in ordered {
            let r = damage ? roll(100) : 100
            if r < 3 { continue }
            arrived.append(item)
            if r < 4 { arrived.append(item) }
        }
        for i in arrived.indices.dropFirst() where damage && roll(100) < 5 { arrived.swapAt(i - 1, i) }
        for (seq, (i, event)) in arrived.enumerated() {
            let (name, span, placement, t, attrs) = event
            events.append(Envelope(seq: UInt64(seq + 1), ts: 1_800_000_000 + t, t: t, run: runOf[i],
                                   trace: TraceID(high: 0xfeed, low: UInt64(i + 1)), span: SpanID(raw: span), name: name,
                                   placement: placement, attrs: attrs))
        }
        return events
    }

    private mutating func fetch() -> [(EventName, UInt64, String?, Double, EventAttributes)] {
        trace += 1
        let start = Double(trace) * 0.37
        let placement = Self.placements[roll(Self.placements.count)]
        let duration = Double(roll(5000)) / 1000
        var out: [(EventName, UInt64, String?, Double, EventAttributes)] = [
            (.fetchStart, 1, placement, start, ["call": roll(3) == 0 ? "getFlowOrDefault" : "getFlow"]),
            (.cacheMiss, 1, placement, start, [:]),
            (.requestStart, 2, placement, start, ["kind": "targeted", "timeout": 4.5]),
        ]
        let timedOut = roll(5) == 0
        if timedOut {
            out.append((.requestEnd, 2, placement, start + 4.5, ["kind": "targeted", "outcome": "timeout", "duration": 4.5]))
            out.append((.timeout, 1, placement, start + 4.5, ["stage": "targeted"]))
            out.append((.fallback, 1, placement, start + 4.5, ["to": "defaultAudience"]))
        } else {
            out.append((.requestEnd, 2, placement, start + duration, ["kind": "targeted", "outcome": "ok", "duration": .number(duration)]))
        }
        let total = timedOut ? 4.5 + duration / 10 : duration
        var end: EventAttributes = ["call": "getFlow", "duration": .number(total)]
        if roll(8) == 0 {
            end["errorCode"] = .number(Double([2004, 2005][roll(2)]))
        } else {
            end["source"] = .string(timedOut ? "defaultAudience" : ["network", "cache"][roll(2)])
            end["targetingLost"] = .bool(timedOut)
        }
        if roll(10) == 0 { end["duration"] = nil } // the end's duration missing: end minus start
        out.append((.fetchEnd, 1, placement, start + total, end))
        return out
    }

    private mutating func preload() -> [(EventName, UInt64, String?, Double, EventAttributes)] {
        trace += 1
        let start = Double(trace) * 0.37
        var names: [String] = []
        for _ in 0..<(1 + roll(3)) {
            let p = Self.placements[roll(Self.placements.count)]
            if !names.contains(p) { names.append(p) }
        }
        var out: [(EventName, UInt64, String?, Double, EventAttributes)] = [
            (.preloadStart, 1, nil, start, ["call": "preloadFlows", "placements": .array(names.map(JSONValue.string))]),
        ]
        var failed: [String: JSONValue] = [:]
        for (k, p) in names.enumerated() {
            out.append((.requestStart, UInt64(10 + k), p, start, ["kind": "targeted", "timeout": 5]))
            let ok = roll(3) != 0
            out.append((.requestEnd, UInt64(10 + k), p, start + 1, ["kind": "targeted", "outcome": ok ? "ok" : "timeout"]))
            if !ok {
                failed[p] = .number(2005)
                out.append((.timeout, 1, p, start + 1, ["stage": "targeted"]))
            }
        }
        out.append((.preloadEnd, 1, nil, start + 1, ["call": "preloadFlows", "succeeded": .array(names.filter { failed[$0] == nil }.map(JSONValue.string)),
                                                     "failed": .object(failed), "duration": 1]))
        return out
    }
}

@Suite("Read model: the same calls and numbers from every store and every path")
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
                answers[name] = ["placements": plain["placements"] ?? .null, "stats": calls["stats"] ?? .null,
                                 "calls": calls["calls"] ?? .null, "coverage": plain["coverage"] ?? .null]
            }
            #expect(answers["memory"] == answers["sqlite"] && answers["sqlite"] == answers["layered"], "seed \(seed) run \(run)")
        }
    }

    /// The sum of every sample of `family` in a Prometheus text exposition whose labels contain `matching`.
    static func sum(_ exposition: String, _ family: String, matching: String = "") -> Double {
        exposition.split(separator: "\n").reduce(0) { total, line in
            guard line.hasPrefix(family + "{") || line.hasPrefix(family + " "), matching.isEmpty || line.contains(matching),
                  let value = line.split(separator: " ").last.flatMap({ Double($0) }) else { return total }
            return total + value
        }
    }

    @Test("undamaged random streams: the metrics sink's counters equal the calls' fetches, errors, timeouts and targeting lost",
          arguments: [11, 12, 13] as [UInt64])
    func metricsAgree(seed: UInt64) throws {
        var stream = EventStream(seed: seed)
        let events = stream.generate(calls: 300, damage: false)
        let memory = MemorySink(capacity: 100_000)
        let metrics = try MetricsSink(version: "test")
        memory.consume(events)
        metrics.consume(events)
        let totals = CallQuery().calls(in: memory, filter: CallFilter(), limit: 0).totals
        let text = String(decoding: metrics.render(), as: UTF8.self)
        #expect(Self.sum(text, "flowscope_fetches_total") == Double(totals.fetches), "seed \(seed)")
        #expect(Self.sum(text, "flowscope_fetches_total", matching: "outcome=\"error\"") + Self.sum(text, "flowscope_preload_errors_total")
                == Double(totals.errors), "seed \(seed)")
        #expect(Self.sum(text, "flowscope_timeouts_total") == Double(totals.timeouts), "seed \(seed)")
        #expect(Self.sum(text, "flowscope_targeting_lost_total") == Double(totals.targetingLost), "seed \(seed)")
        #expect(totals.fetches > 100 && totals.errors > 10 && totals.timeouts > 10 && totals.targetingLost > 10, "seed \(seed): \(totals)")
    }
}
