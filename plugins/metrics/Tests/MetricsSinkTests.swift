import FlowEvents
import FlowFetch
import FlowJSON
import Foundation
import MetricsSink
import Synchronization
import Testing

/// Builds envelopes with increasing seq numbers for one test, each of a trace of its own (a call of
/// its own) unless `trace` is given.
struct EventStream {
    var envelopes: [Envelope] = []

    mutating func add(_ name: EventName, _ placement: String? = nil, _ attrs: EventAttributes = [:], trace given: TraceID? = nil) {
        let seq = UInt64(envelopes.count + 1)
        let trace = given ?? TraceID(high: 0x4bf9_2f35_77b3_4da6, low: seq)
        envelopes.append(Envelope(seq: seq, ts: 1_800_000_000 + Double(seq), t: Double(seq) / 10, run: "test",
                                  trace: trace, span: SpanID(trace: trace, index: seq), name: name,
                                  placement: placement, attrs: attrs))
    }
}

/// The samples of a Prometheus text render: `name{labels}` -> value text.
func samples(_ text: String) -> [String: String] {
    var out: [String: String] = [:]
    for line in text.split(separator: "\n") where !line.hasPrefix("#") {
        guard let space = line.lastIndex(of: " ") else { continue }
        out[String(line[..<space])] = String(line[line.index(after: space)...])
    }
    return out
}

/// The samples whose metric name is exactly `name`.
func samples(_ all: [String: String], named name: String) -> [String: String] {
    all.filter { $0.key == name || $0.key.hasPrefix(name + "{") }
}

/// One stream that touches every mapping of the spec's metric table.
func knownStream() -> EventStream {
    var s = EventStream()
    s.add(.fetchStart, "main", ["call": "getFlow", "policy": "reloadRevalidatingCacheData", "loadTimeout": 5])
    s.add(.cacheMiss, "main")
    s.add(.requestStart, "main", ["kind": "targeted", "timeout": 4.5])
    s.add(.requestEnd, "main", ["kind": "targeted", "outcome": "success", "status": 200, "duration": 0.03, "bytes": 812])
    s.add(.fetchEnd, "main", ["call": "getFlow", "source": "network", "variation": "v1", "audience": "All Users",
                              "targetingLost": false, "duration": 0.2])
    s.add(.cacheHit, "main", ["layer": "memory", "age": 3, "audience": "All Users"])
    s.add(.fetchEnd, "main", ["call": "getFlow", "source": "cache", "variation": "v1", "audience": "All Users",
                              "targetingLost": true, "duration": 0.004])
    s.add(.cacheMiss, "main")
    s.add(.cacheExpired, "onboarding", ["age": 4000, "maxAge": 3600])
    s.add(.timeout, "main", ["stage": "targeted", "budget": 4.5, "elapsed": 4.5])
    s.add(.timeout, nil, ["stage": "batch", "budget": 10, "elapsed": 10])
    s.add(.fallback, "main", ["to": "cache", "reason": "timeout"])
    s.add(.requestEnd, "onboarding", ["kind": "default", "outcome": "timeout", "duration": 4.5, "bytes": 0])
    s.add(.fetchEnd, "onboarding", ["call": "getFlow", "source": .null, "targetingLost": false, "duration": 4.5,
                                    "errorCode": "timeout"])
    s.add(.preloadEnd, nil, ["succeeded": ["main"], "failed": ["a": "timeout", "b": "placement_not_found"], "duration": 1.2])
    s.add(.assetsPrefetchEnd, "main", ["count": 2, "bytes": 1000, "failed": 0, "duration": 0.1])
    s.add(.assetsPrefetchEnd, "main", ["count": 1, "bytes": 24, "failed": 0, "duration": 0.1])
    s.add(.sinkDropped, nil, ["sink": "jsonl", "count": 7])
    s.add(.sinkDropped, nil, ["sink": "jsonl", "count": 3])
    return s
}

@Suite("Metrics sink")
struct MetricsSinkTests {
    @Test("A known event stream gives exact values for every metric of the spec")
    func knownStreamValues() throws {
        let sink = try MetricsSink(version: "1.2.3")
        let stream = knownStream()
        sink.consume(Array(stream.envelopes[..<5]))
        sink.consume(Array(stream.envelopes[5...]))
        // Sink health is read from the stats source at render time; sink.dropped events add nothing.
        let depth = Atomic<Int>(3)
        sink.collectSinkStats {
            [SinkStats(sink: "jsonl", type: "jsonl", queueDepth: 12, capacity: 100, dropped: 10, consumed: 40, batches: 2,
                       up: false, errors: 2, lastError: "disk full", saturated: true, durable: true),
             SinkStats(sink: "memory", queueDepth: depth.load(ordering: .relaxed), capacity: 100, dropped: 0, consumed: 50, batches: 3)]
        }
        _ = sink.render()
        depth.store(0, ordering: .relaxed)
        let all = samples(String(decoding: sink.render(format: .prometheusText), as: UTF8.self))

        #expect(samples(all, named: "flowscope_fetches_total") == [
            #"flowscope_fetches_total{placement="main",call="getFlow",source="cache",outcome="success"}"#: "1",
            #"flowscope_fetches_total{placement="main",call="getFlow",source="network",outcome="success"}"#: "1",
            #"flowscope_fetches_total{placement="onboarding",call="getFlow",source="none",outcome="error"}"#: "1",
        ])
        #expect(samples(all, named: "flowscope_fetch_duration_seconds_count") == [
            #"flowscope_fetch_duration_seconds_count{placement="main",source="cache"}"#: "1",
            #"flowscope_fetch_duration_seconds_count{placement="main",source="network"}"#: "1",
            #"flowscope_fetch_duration_seconds_count{placement="onboarding",source="none"}"#: "1",
        ])
        #expect(all[#"flowscope_fetch_duration_seconds_sum{placement="main",source="network"}"#] == "0.2")
        #expect(all[#"flowscope_fetch_duration_seconds_bucket{placement="main",source="cache",le="0.005"}"#] == "1")
        #expect(all[#"flowscope_fetch_duration_seconds_bucket{placement="onboarding",source="none",le="2.5"}"#] == "0")
        #expect(all[#"flowscope_fetch_duration_seconds_bucket{placement="onboarding",source="none",le="5"}"#] == "1")
        #expect(samples(all, named: "flowscope_targeting_lost_total") == [#"flowscope_targeting_lost_total{placement="main"}"#: "1"])
        #expect(samples(all, named: "flowscope_cache_lookups_total") == [
            #"flowscope_cache_lookups_total{placement="main",result="hit"}"#: "1",
            #"flowscope_cache_lookups_total{placement="main",result="miss"}"#: "2",
            #"flowscope_cache_lookups_total{placement="onboarding",result="expired"}"#: "1",
        ])
        #expect(samples(all, named: "flowscope_timeouts_total") == [
            #"flowscope_timeouts_total{placement="",stage="batch"}"#: "1",
            #"flowscope_timeouts_total{placement="main",stage="targeted"}"#: "1",
        ])
        #expect(samples(all, named: "flowscope_fallbacks_total") == [
            #"flowscope_fallbacks_total{placement="main",to="cache",reason="timeout"}"#: "1",
        ])
        #expect(samples(all, named: "flowscope_preload_errors_total") == [
            #"flowscope_preload_errors_total{placement="a",code="timeout"}"#: "1",
            #"flowscope_preload_errors_total{placement="b",code="placement_not_found"}"#: "1",
        ])
        #expect(samples(all, named: "flowscope_requests_total") == [
            #"flowscope_requests_total{kind="default",outcome="timeout"}"#: "1",
            #"flowscope_requests_total{kind="targeted",outcome="success"}"#: "1",
        ])
        #expect(samples(all, named: "flowscope_request_duration_seconds_sum") == [
            #"flowscope_request_duration_seconds_sum{kind="default"}"#: "4.5",
            #"flowscope_request_duration_seconds_sum{kind="targeted"}"#: "0.03",
        ])
        #expect(samples(all, named: "flowscope_assets_prefetched_bytes_total") == ["flowscope_assets_prefetched_bytes_total": "1024"])
        #expect(samples(all, named: "flowscope_events_dropped_total") == [
            #"flowscope_events_dropped_total{sink="jsonl"}"#: "10", #"flowscope_events_dropped_total{sink="memory"}"#: "0",
        ])
        #expect(samples(all, named: "flowscope_sink_queue_depth") == [
            #"flowscope_sink_queue_depth{sink="jsonl"}"#: "12", #"flowscope_sink_queue_depth{sink="memory"}"#: "0",
        ])
        #expect(samples(all, named: "flowscope_sink_consumed_total") == [
            #"flowscope_sink_consumed_total{sink="jsonl"}"#: "40", #"flowscope_sink_consumed_total{sink="memory"}"#: "50",
        ])
        #expect(samples(all, named: "flowscope_sink_errors_total") == [
            #"flowscope_sink_errors_total{sink="jsonl"}"#: "2", #"flowscope_sink_errors_total{sink="memory"}"#: "0",
        ])
        #expect(samples(all, named: "flowscope_sink_up") == [
            #"flowscope_sink_up{sink="jsonl"}"#: "0", #"flowscope_sink_up{sink="memory"}"#: "1",
        ])
        #expect(samples(all, named: "flowscope_sink_saturated") == [
            #"flowscope_sink_saturated{sink="jsonl"}"#: "1", #"flowscope_sink_saturated{sink="memory"}"#: "0",
        ])
        #expect(samples(all, named: "flowscope_build_info") == [#"flowscope_build_info{version="1.2.3"}"#: "1"])

        // events_total: one series per event name of the spec, counting exactly what was consumed.
        var expectedEvents: [String: String] = [:]
        for name in EventName.allCases {
            let n = stream.envelopes.filter { $0.name == name }.count
            expectedEvents[#"flowscope_events_total{name="\#(name.rawValue)"}"#] = String(n)
        }
        #expect(samples(all, named: "flowscope_events_total") == expectedEvents)
        #expect(all[#"flowscope_events_total{name="fetch.end"}"#] == "3")
    }

    @Test("A second end of one trace is no second fetch: it counts in flowscope_events_total only, as the read model counts it")
    func repeatedEndCountsOnce() throws {
        let sink = try MetricsSink(version: "1.2.3")
        var s = EventStream()
        let fetch = TraceID(high: 7, low: 1), preload = TraceID(high: 7, low: 2)
        let end: EventAttributes = ["call": "getFlow", "source": "network", "targetingLost": true, "duration": 0.2, "errorCode": 2005]
        s.add(.fetchEnd, "main", end, trace: fetch)
        s.add(.fetchEnd, "main", end, trace: fetch)
        s.add(.preloadEnd, nil, ["failed": ["main": 2005]], trace: preload)
        s.add(.preloadEnd, nil, ["failed": ["main": 2005]], trace: preload)
        s.add(.fetchEnd, "main", end)
        sink.consume(s.envelopes)
        let all = samples(String(decoding: sink.render(), as: UTF8.self))
        #expect(all[#"flowscope_events_total{name="fetch.end"}"#] == "3")
        #expect(all[#"flowscope_fetches_total{placement="main",call="getFlow",source="network",outcome="error"}"#] == "2")
        #expect(all[#"flowscope_targeting_lost_total{placement="main"}"#] == "2")
        #expect(all[#"flowscope_preload_errors_total{placement="main",code="2005"}"#] == "1")
        #expect(all[#"flowscope_fetch_duration_seconds_count{placement="main",source="network"}"#] == "2")
    }

    @Test("The sink registers exactly the spec's seventeen families and the saturation gauge, each with HELP and TYPE")
    func familiesOfTheSpec() throws {
        let sink = try MetricsSink(version: "0.1.0")
        let families = sink.registry.families.map { "\($0.name) \($0.kind.rawValue) \($0.labelNames.joined(separator: ","))" }
        #expect(families == [
            "flowscope_assets_prefetched_bytes_total counter ",
            "flowscope_build_info gauge version",
            "flowscope_cache_lookups_total counter placement,result",
            "flowscope_events_dropped_total counter sink",
            "flowscope_events_total counter name",
            "flowscope_fallbacks_total counter placement,to,reason",
            "flowscope_fetch_duration_seconds histogram placement,source",
            "flowscope_fetches_total counter placement,call,source,outcome",
            "flowscope_preload_errors_total counter placement,code",
            "flowscope_request_duration_seconds histogram kind",
            "flowscope_requests_total counter kind,outcome",
            "flowscope_sink_consumed_total counter sink",
            "flowscope_sink_errors_total counter sink",
            "flowscope_sink_queue_depth gauge sink",
            "flowscope_sink_saturated gauge sink",
            "flowscope_sink_up gauge sink",
            "flowscope_targeting_lost_total counter placement",
            "flowscope_timeouts_total counter placement,stage",
        ])
        let text = String(decoding: sink.render(), as: UTF8.self)
        for family in sink.registry.families {
            #expect(text.contains("# HELP \(family.name) "))
            #expect(text.contains("# TYPE \(family.name) \(family.kind.rawValue)\n"))
        }
        #expect(sink.name == "metrics")
    }

    @Test("Placements beyond placementLimit fold into placement=\"_other\" in every placement metric")
    func placementCap() throws {
        let sink = try MetricsSink(options: .init(placementLimit: 2), version: "1")
        var s = EventStream()
        for p in ["p1", "p2", "p3", "p4", "p1"] {
            s.add(.cacheMiss, p)
            s.add(.fetchEnd, p, ["call": "getFlow", "source": "network", "duration": 0.1, "targetingLost": true])
        }
        s.add(.preloadEnd, nil, ["failed": ["p1": "timeout", "x1": "timeout", "x2": "timeout"]])
        sink.consume(s.envelopes)
        let all = samples(String(decoding: sink.render(), as: UTF8.self))
        #expect(samples(all, named: "flowscope_cache_lookups_total") == [
            #"flowscope_cache_lookups_total{placement="_other",result="miss"}"#: "2",
            #"flowscope_cache_lookups_total{placement="p1",result="miss"}"#: "2",
            #"flowscope_cache_lookups_total{placement="p2",result="miss"}"#: "1",
        ])
        #expect(samples(all, named: "flowscope_targeting_lost_total") == [
            #"flowscope_targeting_lost_total{placement="_other"}"#: "2",
            #"flowscope_targeting_lost_total{placement="p1"}"#: "2",
            #"flowscope_targeting_lost_total{placement="p2"}"#: "1",
        ])
        #expect(samples(all, named: "flowscope_fetch_duration_seconds_count").count == 3)
        #expect(samples(all, named: "flowscope_preload_errors_total") == [
            #"flowscope_preload_errors_total{placement="_other",code="timeout"}"#: "1",
            #"flowscope_preload_errors_total{placement="p1",code="timeout"}"#: "1",
            #"flowscope_preload_errors_total{placement="x1",code="timeout"}"#: "1",
        ])
    }

    @Test("Attribute-valued labels are capped too, so ingested events cannot blow up the series count")
    func attributeCap() throws {
        let sink = try MetricsSink(version: "1")
        var s = EventStream()
        for i in 0..<1000 { s.add(.requestEnd, nil, ["kind": .string("k\(i)"), "outcome": "success", "duration": 0.01]) }
        sink.consume(s.envelopes)
        let all = samples(String(decoding: sink.render(), as: UTF8.self))
        let requests = samples(all, named: "flowscope_requests_total")
        #expect(requests.count == MetricsSink.attributeValueLimit + 1)
        #expect(requests[#"flowscope_requests_total{kind="_other",outcome="success"}"#] == String(1000 - MetricsSink.attributeValueLimit))
    }

    @Test("Counts stay exact through the series-handle cache: interleaved series, repeats, and more keys than the cache holds")
    func handleCacheExact() throws {
        let sink = try MetricsSink(options: .init(placementLimit: 50), version: "test")
        var s = EventStream()
        // 6,000 distinct placements (past the cache's 4,096 entries and the 50-placement limit),
        // each hit once, then again interleaved with misses; plus runs of the same series.
        for i in 0..<6000 { s.add(.cacheHit, "p\(i)") }
        for i in 0..<6000 { s.add(.cacheHit, "p\(i)"); s.add(.cacheMiss, "p\(i % 7)") }
        for _ in 0..<500 { s.add(.fetchEnd, "p1", ["call": "getFlow", "source": "cache", "duration": 0.02]) }
        for (i, part) in stride(from: 0, to: s.envelopes.count, by: 997).enumerated() {
            let batch = Array(s.envelopes[part..<min(part + 997, s.envelopes.count)])
            if i % 2 == 0 { sink.consume(batch) } else { sink.consume(batches: [Array(batch.prefix(10)), Array(batch.dropFirst(10))]) }
        }
        let all = samples(String(decoding: sink.render(), as: UTF8.self))
        let lookups = samples(all, named: "flowscope_cache_lookups_total")
        func value(_ key: String) -> Int { Int(lookups[key] ?? "") ?? -1 }
        // p0...p49 are kept (seen first); every other placement folds into _other.
        #expect(value(#"flowscope_cache_lookups_total{placement="p1",result="hit"}"#) == 2)
        #expect(value(#"flowscope_cache_lookups_total{placement="_other",result="hit"}"#) == 2 * 5950)
        #expect(value(#"flowscope_cache_lookups_total{placement="p3",result="miss"}"#) == (0..<6000).filter { $0 % 7 == 3 }.count)
        #expect(lookups.values.compactMap { Int($0) }.reduce(0, +) == 18_000)
        #expect(all[#"flowscope_fetch_duration_seconds_count{placement="p1",source="cache"}"#] == "500")
        #expect(all[#"flowscope_events_total{name="cache.hit"}"#] == "12000")
    }

    @Test("Malformed attributes are tolerated: missing labels become unknown, bad numbers are ignored")
    func malformedAttributes() throws {
        let sink = try MetricsSink(version: "1")
        var s = EventStream()
        s.add(.timeout, "p")
        s.add(.requestEnd, nil, ["kind": 3, "duration": "slow"])
        s.add(.sinkDropped, nil, ["sink": "exec", "count": -4])
        s.add(.sinkDropped, nil, ["count": 2.5])
        s.add(.assetsPrefetchEnd, nil, ["bytes": "lots"])
        s.add(.preloadEnd, nil, ["failed": "everything"])
        s.add(.fetchEnd, "p", ["duration": -1])
        sink.consume(s.envelopes)
        let all = samples(String(decoding: sink.render(), as: UTF8.self))
        #expect(samples(all, named: "flowscope_timeouts_total") == [#"flowscope_timeouts_total{placement="p",stage="unknown"}"#: "1"])
        #expect(samples(all, named: "flowscope_requests_total") == [#"flowscope_requests_total{kind="3",outcome="unknown"}"#: "1"])
        #expect(samples(all, named: "flowscope_request_duration_seconds_count").isEmpty)
        #expect(samples(all, named: "flowscope_events_dropped_total").isEmpty)
        #expect(samples(all, named: "flowscope_assets_prefetched_bytes_total") == ["flowscope_assets_prefetched_bytes_total": "0"])
        #expect(samples(all, named: "flowscope_preload_errors_total").isEmpty)
        #expect(samples(all, named: "flowscope_fetches_total") == [
            #"flowscope_fetches_total{placement="p",call="unknown",source="none",outcome="success"}"#: "1",
        ])
        #expect(samples(all, named: "flowscope_fetch_duration_seconds_count").isEmpty)
    }

    @Test("Options parse placementLimit and buckets, allow type and enabled, and reject anything else with its path")
    func options() throws {
        let ok = try MetricsSink.Options(json: ["type": "metrics", "enabled": true, "placementLimit": 50, "buckets": [0.1, 1, 10]],
                                         path: "$.sinks[0]")
        #expect(ok == MetricsSink.Options(placementLimit: 50, buckets: [0.1, 1, 10]))
        #expect(try MetricsSink.Options(json: [:]) == MetricsSink.Options())
        #expect(MetricsSink.Options().placementLimit == 200)

        func failure(_ json: [String: JSONValue]) -> JSONInputError? {
            #expect(throws: JSONInputError.self) { try MetricsSink.Options(json: json, path: "$.sinks[0]") }
        }
        let unknown = failure(["type": "metrics", "placementLimt": 3])
        #expect(unknown?.path == "$.sinks[0].placementLimt")
        #expect(unknown?.message.contains("expected one of: buckets, placementLimit") == true)
        #expect(failure(["bad key": 1])?.path == #"$.sinks[0]["bad key"]"#)
        let zero = failure(["placementLimit": 0])
        #expect(zero?.path == "$.sinks[0].placementLimit")
        #expect(zero?.message == "expected an integer >= 1, got 0")
        #expect(failure(["placementLimit": 2.5])?.path == "$.sinks[0].placementLimit")
        #expect(failure(["placementLimit": "200"])?.message == #"expected an integer >= 1, got "200""#)
        let order = failure(["buckets": [1, 0.5]])
        #expect(order?.path == "$.sinks[0].buckets[1]")
        #expect(order?.message == "expected a number greater than the previous bucket 1, got 0.5")
        #expect(failure(["buckets": [1, "2"]])?.path == "$.sinks[0].buckets[1]")
        #expect(failure(["buckets": []])?.path == "$.sinks[0].buckets")
        #expect(failure(["buckets": 5])?.path == "$.sinks[0].buckets")
        #expect(unknown?.description == "$.sinks[0].placementLimt: " + (unknown?.message ?? ""))
    }

    @Test("Custom buckets from the options are used by both duration histograms; bad options are refused")
    func customBuckets() throws {
        let sink = try MetricsSink(options: .init(buckets: [0.5, 2]), version: "1")
        var s = EventStream()
        s.add(.requestEnd, nil, ["kind": "layout", "outcome": "success", "duration": 1])
        s.add(.fetchEnd, "p", ["call": "getFlow", "source": "network", "duration": 3])
        sink.consume(s.envelopes)
        let text = String(decoding: sink.render(), as: UTF8.self)
        #expect(text.contains(#"flowscope_request_duration_seconds_bucket{kind="layout",le="0.5"} 0"#
            + "\n" + #"flowscope_request_duration_seconds_bucket{kind="layout",le="2"} 1"#
            + "\n" + #"flowscope_request_duration_seconds_bucket{kind="layout",le="+Inf"} 1"#))
        #expect(text.contains(#"flowscope_fetch_duration_seconds_bucket{placement="p",source="network",le="2"} 0"#))
        #expect(throws: MetricsError.self) { try MetricsSink(options: .init(placementLimit: 0), version: "1") }
        #expect(throws: MetricsError.self) { try MetricsSink(options: .init(buckets: [2, 1]), version: "1") }
    }

    @Test("The sink's negotiate and OpenMetrics render match the registry's")
    func sinkOpenMetrics() throws {
        let sink = try MetricsSink(version: "1")
        sink.consume(knownStream().envelopes)
        let (contentType, format) = MetricsSink.negotiate(accept: "application/openmetrics-text; version=1.0.0")
        #expect(contentType == "application/openmetrics-text; version=1.0.0; charset=utf-8")
        let text = String(decoding: sink.render(format: format), as: UTF8.self)
        #expect(text.hasSuffix("\n# EOF\n"))
        #expect(text.contains("# TYPE flowscope_fetches counter\n"))
        #expect(text.contains("# TYPE flowscope_assets_prefetched_bytes counter\n# UNIT flowscope_assets_prefetched_bytes bytes\n"
            + "flowscope_assets_prefetched_bytes_total 1024\n"))
        #expect(text.contains("# UNIT flowscope_fetch_duration_seconds seconds\n"))
        #expect(text.contains(#"flowscope_fetch_duration_seconds_bucket{placement="main",source="cache",le="1.0"} 1"#))
        #expect(!text.contains("_total_total"))
        #expect(sink.withRendered(format: .openMetrics) { $0.count } == text.utf8.count)
    }
}
