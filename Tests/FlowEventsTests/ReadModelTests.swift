import FlowEvents
import FlowFetch
import FlowJSON
import Testing

/// Envelopes of calls as the engine writes them, numbered from 1 in the order added.
private struct Calls {
    var out: [Envelope] = []
    private var traces: UInt64 = 0

    mutating func add(_ trace: UInt64, _ span: UInt64, _ name: EventName, _ placement: String?, t: Double,
                      run: String = "live", _ attrs: EventAttributes = [:]) {
        out.append(Envelope(seq: UInt64(out.count + 1), ts: 1_800_000_000 + t, t: t, run: run, trace: TraceID(high: 7, low: trace),
                            span: SpanID(raw: span), name: name, placement: placement, attrs: attrs))
    }

    /// A getFlow of `placement` ending after `duration` with `source`, or with `errorCode`.
    @discardableResult
    mutating func fetch(_ placement: String, at t: Double = 0, duration: Double, source: String = "network",
                        errorCode: Int? = nil, lost: Bool = false, timeouts: Int = 0, run: String = "live") -> UInt64 {
        traces += 1
        let trace = traces
        add(trace, 1, .fetchStart, placement, t: t, run: run, ["call": "getFlow"])
        for _ in 0..<timeouts { add(trace, 1, .timeout, placement, t: t, run: run, ["stage": "targeted"]) }
        var end: EventAttributes = ["call": "getFlow", "duration": .number(duration), "targetingLost": .bool(lost)]
        if let errorCode { end["errorCode"] = .number(Double(errorCode)) } else { end["source"] = .string(source) }
        add(trace, 1, .fetchEnd, placement, t: t + duration, run: run, end)
        return trace
    }

    /// A preload of `placements`; those in `failed` failed with their code.
    @discardableResult
    mutating func preload(_ placements: [String], failed: [String: Int] = [:], at t: Double = 0, duration: Double = 1) -> UInt64 {
        traces += 1
        let trace = traces
        add(trace, 1, .preloadStart, nil, t: t, ["call": "preloadFlows", "placements": .array(placements.map(JSONValue.string))])
        add(trace, 1, .preloadEnd, nil, t: t + duration, [
            "call": "preloadFlows", "succeeded": .array(placements.filter { failed[$0] == nil }.map(JSONValue.string)),
            "failed": .object(failed.mapValues { .number(Double($0)) }), "duration": .number(duration),
        ])
        return trace
    }
}

@Suite("Read model: calls and their statistics")
struct ReadModelTests {
    @Test("placement statistics: counts by source, errors, timeouts, targeting lost and exact nearest-rank p50/p95 over every fetch")
    func placementStatistics() {
        var b = Calls()
        // Durations 0.01 ... 1.00 in a shuffled order: p50 = 0.50, p95 = 0.95 (nearest rank).
        var durations = (1...100).map { Double($0) / 100 }
        durations.shuffle()
        for (i, d) in durations.enumerated() {
            let source = ["network", "cache", "defaultAudience", "fallbackFile"][i % 4]
            b.fetch("main_paywall", duration: d, source: source, lost: source == "defaultAudience")
        }
        b.fetch("main_paywall", duration: 4.5, errorCode: 2005, timeouts: 2)
        b.fetch("onboarding", duration: 0.2)
        let placements = CallStatistics.placements(CallFold.calls(b.out))
        #expect(placements.map(\.placement) == ["main_paywall", "onboarding"])
        let main = placements[0]
        #expect(main.fetches == 101 && main.calls == 101 && main.open == 0)
        #expect(main.sources == ["network": 25, "cache": 25, "defaultAudience": 25, "fallbackFile": 25])
        #expect(main.errors == 1 && main.timeouts == 2 && main.targetingLost == 25)
        // With 4.5 added: 101 samples; rank ceil(50.5)=51 -> 0.51, ceil(95.95)=96 -> 0.96.
        #expect(main.duration == DurationPercentiles(durations + [4.5]))
        #expect(main.duration.samples == 101 && main.duration.p50 == 0.51 && main.duration.p95 == 0.96)
        #expect(placements[1].duration.p50 == 0.2 && placements[1].duration.p95 == 0.2)
    }

    @Test("a preload counts as a call of each placement it names, its failures as errors of the failed placement; its duration is no fetch duration")
    func preloads() {
        var b = Calls()
        b.preload(["a", "b"], failed: ["a": 2005, "b": 2002], at: 0)
        b.preload(["a"], failed: ["a": 2003], at: 10)
        b.preload(["a", "b"], at: 20)
        b.fetch("a", at: 30, duration: 0.5)
        let calls = CallFold.calls(b.out)
        let byPlacement = Dictionary(uniqueKeysWithValues: CallStatistics.placements(calls).map { ($0.placement, $0) })
        #expect(byPlacement["a"]?.calls == 4 && byPlacement["a"]?.fetches == 1 && byPlacement["a"]?.errors == 2)
        #expect(byPlacement["b"]?.calls == 2 && byPlacement["b"]?.fetches == 0 && byPlacement["b"]?.errors == 1)
        #expect(byPlacement["a"]?.lastPreloadError == PreloadError(code: 2003, ts: 1_800_000_011, seq: 4))
        #expect(byPlacement["b"]?.lastPreloadError == PreloadError(code: 2002, ts: 1_800_000_001, seq: 2))
        #expect(byPlacement["a"]?.duration.samples == 1 && byPlacement["b"]?.duration.samples == 0)
        let totals = CallStatistics.totals(calls)
        #expect(totals.calls == 4 && totals.fetches == 1 && totals.errors == 3 && totals.duration.samples == 1)
        #expect(CallStatistics.totals(calls, placement: "b").errors == 1)
    }

    @Test("placements past the bound count under _other (by their first call), with exact percentiles over their merged fetches")
    func otherPlacements() {
        var b = Calls()
        for (i, p) in ["p1", "p2", "p3", "p4", "p1"].enumerated() { b.fetch(p, at: Double(i), duration: Double(i + 1)) }
        let rows = CallStatistics.placements(CallFold.calls(b.out), bounds: CallStatistics.Bounds(placements: 2))
        #expect(rows.map(\.placement) == ["_other", "p1", "p2"])
        #expect(rows[0].fetches == 2 && rows[0].duration == DurationPercentiles([3, 4]))
        #expect(rows[1].fetches == 2)
    }

    @Test("totals equal the sums of the placement rows: fetches, errors, timeouts, targeting lost, sources")
    func totalsAreSums() {
        var b = Calls()
        b.fetch("a", duration: 1, lost: true, timeouts: 1)
        b.fetch("b", duration: 2, errorCode: 2004, timeouts: 2)
        b.preload(["a", "c"], failed: ["c": 2005])
        let calls = CallFold.calls(b.out)
        let rows = CallStatistics.placements(calls)
        let totals = CallStatistics.totals(calls)
        #expect(totals.fetches == rows.map(\.fetches).reduce(0, +))
        #expect(totals.errors == rows.map(\.errors).reduce(0, +) && totals.errors == 2)
        #expect(totals.timeouts == rows.map(\.timeouts).reduce(0, +) && totals.timeouts == 3)
        #expect(totals.targetingLost == 1 && totals.sources == ["network": 1])
    }

    @Test("the fold marks calls still open, ends without their start, unpaired request ends and events out of order; it keeps requests with budgets and outcomes, fallbacks, cache reads and attribution")
    func incompleteCalls() {
        var b = Calls()
        // Open: a start only.
        b.add(1, 1, .fetchStart, "open", t: 0, ["call": "getFlow"])
        // An end without its start.
        b.add(2, 1, .fetchEnd, "lonely", t: 3, ["call": "getFlow", "duration": 0.5, "source": "cache"])
        // Out of order: the end arrives first, then the start; a request end without its start.
        b.add(3, 1, .fetchEnd, "late", t: 2, ["call": "getFlow", "source": "network"])
        b.add(3, 1, .fetchStart, "late", t: 1, ["call": "getFlow"])
        b.add(3, 5, .requestEnd, "late", t: 2, ["kind": "targeted", "outcome": "ok", "duration": 0.5])
        // Whole: a request with its budget, a fallback, cache reads and attribution.
        b.add(4, 1, .fetchStart, "whole", t: 0, ["call": "getFlowOrDefault"])
        b.add(4, 1, .cacheMiss, "whole", t: 0)
        b.add(4, 1, .attributionTimeout, "whole", t: 0.1, ["after": 0.1])
        b.add(4, 2, .requestStart, "whole", t: 0.1, ["kind": "default", "timeout": 2.5])
        b.add(4, 2, .requestEnd, "whole", t: 0.3, ["kind": "default", "outcome": "ok"])
        b.add(4, 1, .fallback, "whole", t: 0.3, ["to": "defaultAudience"])
        b.add(4, 1, .fetchEnd, "whole", t: 0.3, ["call": "getFlowOrDefault", "source": "defaultAudience"])
        // Not a call: attribution observed outside any call.
        b.add(5, 1, .attributionApplied, nil, t: 0)
        let calls = Dictionary(uniqueKeysWithValues: CallFold.calls(b.out).map { ($0.placement ?? "?", $0) })
        #expect(calls.count == 4)
        #expect(calls["open"]?.isOpen == true && calls["open"]?.duration == nil && calls["open"]?.isIncomplete == false)
        #expect(calls["lonely"]?.isIncomplete == true && calls["lonely"]?.hasStart == false && calls["lonely"]?.duration == 0.5)
        let late = calls["late"]
        #expect(late?.outOfOrder == true && late?.unpaired == 1 && late?.duration == 1 && late?.startT == 1)
        #expect(late?.requests.first?.hasStart == false && late?.requests.first?.issuedAt == 1.5)
        let whole = calls["whole"]
        #expect(whole?.isIncomplete == false && whole?.name == "getFlowOrDefault" && whole?.duration == 0.3)
        #expect(whole?.requests == [Call.Request(placement: "whole", kind: "default", budget: 2.5, issuedAt: 0.1, endedAt: 0.3,
                                                 outcome: "ok", hasStart: true, endSeq: 10)])
        #expect(whole?.fallbacks == ["defaultAudience"] && whole?.cacheReads == ["miss"] && whole?.attribution == "timeout")
        let totals = CallStatistics.totals(Array(calls.values))
        #expect(totals.calls == 4 && totals.open == 1 && totals.fetches == 3)
    }

    @Test("no filter and a filter that excludes nothing give the same placements and totals")
    func noOpFilter() throws {
        var b = Calls()
        b.fetch("a", duration: 0, errorCode: 2004)
        b.fetch("a", at: 1, duration: 0.4)
        b.preload(["a", "b"], failed: ["b": 2005], at: 2)
        b.add(99, 1, .fetchStart, "b", t: 5, ["call": "getFlow"]) // open: no duration
        var noOp = CallFilter()
        noOp.minDuration = 0
        let plain = CallQuery.placements(in: b.out, filter: CallFilter())
        #expect(plain.placements.map(\.placement) == ["a", "b"])
        #expect(CallQuery.placements(in: b.out, filter: try CallFilter.parse({ $0 == "from" ? "-100000d" : nil }, now: 1_900_000_000)).placements
                == plain.placements)
        #expect(CallQuery.calls(in: b.out, filter: CallFilter(), limit: 10).totals.errors == 2)
        // minDuration leaves out the call without a duration (still open): that is what it asks.
        #expect(CallQuery.placements(in: b.out, filter: noOp).placements.first { $0.placement == "b" }?.open == 0)
    }
}
