import FlowEvents
import FlowFetch
import FlowJSON
import FlowSim
import Foundation
import JSONLinesSink
import MemorySink
import MetricsSink
import SQLiteSink
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One benchmark's result, as `flowscope bench --json` prints it (docs/cli.md, bench).
public struct BenchmarkResult: Sendable, Equatable {
    /// The fixed name, e.g. `engine.getFlow.cacheHit`.
    public var name: String
    /// The median over the measured runs.
    public var value: Double
    /// What `value` counts, e.g. `ns/op`.
    public var unit: String
    /// The baseline measured in the same run, if the benchmark has one.
    public var baseline: (name: String, value: Double)?
    /// What the benchmark aims for (printed in the table, not part of the JSON).
    public var target: String

    /// `value / baseline`, or nil without a baseline.
    public var ratio: Double? {
        guard let b = baseline, b.value != 0 else { return nil }
        return value / b.value
    }

    /// The result as the JSON object of the contract.
    public var json: JSONValue {
        [
            "name": .string(name), "value": .number(Self.round(value)), "unit": .string(unit),
            "baseline": baseline.map { ["name": .string($0.name), "value": .number(Self.round($0.value))] } ?? .null,
            "ratio": ratio.map { .number(Self.round($0)) } ?? .null,
        ]
    }

    public static func == (a: BenchmarkResult, b: BenchmarkResult) -> Bool {
        a.name == b.name && a.value == b.value && a.unit == b.unit && a.baseline?.name == b.baseline?.name
            && a.baseline?.value == b.baseline?.value
    }

    /// Four significant digits: enough for a benchmark, short in JSON.
    static func round(_ v: Double) -> Double {
        guard v.isFinite, v != 0 else { return v }
        let scale = pow(10, 3 - floor(log10(abs(v))))
        return (v * scale).rounded() / scale
    }
}

/// The benchmarks of BENCHMARKS.md: each warms up, runs several times and keeps the median; each
/// baseline is measured in the same run, interleaved with the benchmark's own runs.
public struct BenchmarkSuite: Sendable {
    /// Measured runs per benchmark (the median is reported).
    public var runs: Int
    /// Multiplies every benchmark's work per run (1 for the full suite; smaller for `--quick`).
    public var scale: Double
    /// A directory for the jsonl and SQLite files the benchmarks write (removed afterwards).
    public var directory: String

    /// The full suite (`runs` 7) or the quick one (`runs` 3, a tenth of the work).
    public init(quick: Bool, directory: String) {
        runs = quick ? 3 : 7
        scale = quick ? 0.1 : 1
        self.directory = directory
    }

    /// The names, in the order they run and print.
    public static let names = [
        "engine.getFlow.cacheHit", "engine.getFlow.cacheHit.noSink", "client.getFlow.cacheHit", "pipeline.emit", "pipeline.throughput",
        "metrics.counter.increment", "metrics.render", "sim.calls", "scenario.steps", "sqlite.insert", "ingest.sqlite",
        "readmodel.fold", "api.placements", "api.calls",
    ]

    func count(_ n: Int, minimum: Int = 100) -> Int { max(minimum, Int(Double(n) * scale)) }

    /// Runs every benchmark (or those whose names start with one of `only`); `progress` hears
    /// each name before it starts.
    public func run(only: [String] = [], progress: (String) -> Void = { _ in }) async throws -> [BenchmarkResult] {
        var results: [BenchmarkResult] = []
        for name in Self.names where only.isEmpty || only.contains(where: { name.hasPrefix($0) }) {
            progress(name)
            switch name {
            case "engine.getFlow.cacheHit": results.append(try engineCacheHit(sinks: true))
            case "engine.getFlow.cacheHit.noSink": results.append(try engineCacheHit(sinks: false))
            case "client.getFlow.cacheHit": results.append(try await clientCacheHit())
            case "pipeline.emit": results.append(try pipelineEmit())
            case "pipeline.throughput": results.append(try pipelineThroughput())
            case "metrics.counter.increment": results.append(counterIncrement())
            case "metrics.render": results.append(try metricsRender())
            case "sim.calls": results.append(simCalls())
            case "scenario.steps": results.append(try scenarioSteps())
            case "ingest.sqlite": results.append(try sqliteIngest())
            case "readmodel.fold": results.append(readModelFold())
            case "api.placements": results.append(apiQuery(placements: true))
            case "api.calls": results.append(apiQuery(placements: false))
            default: results.append(try sqliteInsert())
            }
        }
        return results
    }

    // MARK: engine

    /// A getFlow answered from the memory cache by the engine itself (no async hop): the machine
    /// runs, reads the cache (and touches the disk layer's recency), and emits fetch.start,
    /// cache.hit and fetch.end into a pipeline with the metrics, memory and jsonl sinks.
    /// Without `sinks` (the informational `.noSink` line) the engine has no event sink at all: the
    /// difference is what the events cost the caller.
    func engineCacheHit(sinks: Bool) throws -> BenchmarkResult {
        let pipeline = try threeSinkPipeline("engine")
        defer { pipeline.shutdown() }
        let host = BenchHost()
        let traces = TraceCounter()
        let engine = FlowEngine(profile: Profile(id: "user-1"), flowCache: FlowCache(disk: InMemoryDiskStore()),
                                layouts: InMemoryLayoutStore(), host: host, events: sinks ? pipeline : nil,
                                traceIDs: traces.next)
        let flow = benchFlow()
        _ = engine.flowCache.write(CacheKey(profileId: "user-1", placementId: flow.placementId),
                                   CachedFlow(flow: flow, storedAt: 0, fromDefaultAudience: false), keepTargeted: false)
        let table = Mutex<[String: CachedFlow]>([:])
        for i in 0..<64 {
            table.withLock { $0["placement_\(i)"] = CachedFlow(flow: flow, storedAt: 0, fromDefaultAudience: false) }
        }
        table.withLock { $0[flow.placementId] = CachedFlow(flow: flow, storedAt: 0, fromDefaultAudience: false) }

        // 3 events per call: a run stays under the queue bound, and the queues drain between runs.
        let n = count(20_000)
        var now: EngineTime = 1
        // The lookup costs ~1/20 of the hit: 16 times as many make a baseline run about as long.
        let measured = try interleaved(
            n: n, baselineScale: 16, between: { pipeline.waitUntilDrained(timeout: 30) },
            subject: { n throws in
                for _ in 0..<n {
                    now += EngineTime(microseconds: 1_000)
                    _ = try engine.getFlow(placement: "main_paywall", policy: .returnCacheDataElseLoad, loadTimeout: 5, now: now)
                }
            },
            baseline: { n in
                let key = flow.placementId
                for _ in 0..<n { blackHole(table.withLock { $0[key] }) }
            })
        guard host.flows >= n, pipeline.stats().allSatisfy({ $0.dropped == 0 }) else {
            throw BenchError("engine.getFlow.cacheHit: expected \(n) cache hits and no dropped events, got \(host.flows) hits")
        }
        guard sinks else {
            return BenchmarkResult(name: "engine.getFlow.cacheHit.noSink", value: measured.subject, unit: "ns/op",
                                   baseline: ("Mutex<[String: CachedFlow]> lookup", measured.baseline),
                                   target: "(informational: the same hit with no event sink)")
        }
        return BenchmarkResult(name: "engine.getFlow.cacheHit", value: measured.subject, unit: "ns/op",
                               baseline: ("Mutex<[String: CachedFlow]> lookup", measured.baseline),
                               target: "<= 1000 ns and <= 20x baseline")
    }

    /// The same cache hit through the public async API (`FlowClient.getFlow`): adds the lock and the
    /// async call (a call that ends within its start does not suspend).
    func clientCacheHit() async throws -> BenchmarkResult {
        let pipeline = try threeSinkPipeline("client")
        defer { pipeline.shutdown() }
        let flow = benchFlow()
        // The entry is on "disk" already: the first call promotes it to memory, no request is sent
        // (a loaded machine could not time out a network warm-up).
        let disk = InMemoryDiskStore()
        let key = CacheKey(profileId: "user-1", placementId: flow.placementId)
        _ = disk.save(key, CacheEntryCodec.encode(CachedFlow(flow: flow, storedAt: 0, fromDefaultAudience: false), key: key))
        let client = FlowClient(profile: Profile(id: "user-1"), backend: BenchBackend(flow: flow), disk: disk, events: pipeline)
        _ = try await client.getFlow(placementId: flow.placementId, fetchPolicy: .returnCacheDataElseLoad, loadTimeout: 60)
        let n = count(20_000)
        var samples: [Double] = []
        for run in 0...runs {
            pipeline.waitUntilDrained(timeout: 30)
            let start = monotonicNanos()
            for _ in 0..<n {
                let f = try await client.getFlow(placementId: flow.placementId, fetchPolicy: .returnCacheDataElseLoad, loadTimeout: 60)
                blackHole(f)
            }
            if run > 0 { samples.append(Double(monotonicNanos() - start) / Double(n)) }
        }
        return BenchmarkResult(name: "client.getFlow.cacheHit", value: median(samples), unit: "ns/op", baseline: nil,
                               target: "(informational: engine.getFlow.cacheHit + the async call)")
    }

    // MARK: pipeline

    /// Caller-side cost of `EventPipeline.receive` with metrics, memory and jsonl attached.
    func pipelineEmit() throws -> BenchmarkResult {
        let pipeline = try threeSinkPipeline("emit")
        defer { pipeline.shutdown() }
        let event = benchEvent()
        let n = count(50_000)
        var samples: [Double] = []
        var wall: [Double] = []
        for run in 0...runs {
            pipeline.waitUntilDrained(timeout: 30)
            let start = threadCPUNanos(), wallStart = monotonicNanos()
            for _ in 0..<n { pipeline.receive(event) }
            if run > 0 {
                samples.append(Double(threadCPUNanos() - start) / Double(n))
                wall.append(Double(monotonicNanos() - wallStart) / Double(n))
            }
        }
        pipeline.waitUntilDrained(timeout: 30)
        guard pipeline.stats().allSatisfy({ $0.dropped == 0 && $0.consumed >= UInt64(n * (runs + 1)) }) else {
            throw BenchError("pipeline.emit: events were dropped or not delivered: \(pipeline.stats())")
        }
        return BenchmarkResult(name: "pipeline.emit", value: median(samples), unit: "ns/event", baseline: nil,
                               target: "<= 150 ns (caller CPU time; wall \(Int(median(wall))) ns)")
    }

    /// Events per second from one emitting thread until every sink has consumed them all.
    func pipelineThroughput() throws -> BenchmarkResult {
        let n = count(400_000, minimum: 20_000)
        // Queues big enough that nothing is dropped: every event is delivered to all three sinks.
        let pipeline = try threeSinkPipeline("throughput", capacity: n)
        defer { pipeline.shutdown() }
        let event = benchEvent()
        var samples: [Double] = []
        var expected: UInt64 = 0
        for run in 0...runs {
            pipeline.waitUntilDrained(timeout: 60)
            let start = monotonicNanos()
            for _ in 0..<n { pipeline.receive(event) }
            guard pipeline.waitUntilDrained(timeout: 120) else { throw BenchError("pipeline.throughput: sinks did not drain in 120 s") }
            let seconds = Double(monotonicNanos() - start) / 1e9
            expected += UInt64(n)
            if run > 0 { samples.append(Double(n) / seconds) }
        }
        guard pipeline.stats().allSatisfy({ $0.dropped == 0 && $0.consumed == expected }) else {
            throw BenchError("pipeline.throughput: events were dropped or not delivered: \(pipeline.stats())")
        }
        return BenchmarkResult(name: "pipeline.throughput", value: median(samples), unit: "events/s", baseline: nil,
                               target: ">= 2,000,000")
    }

    // MARK: metrics

    /// `Counter.inc()` on a series already looked up, against a bare `Atomic<Int>` add.
    func counterIncrement() -> BenchmarkResult {
        let registry = MetricsRegistry()
        let family = try? registry.counter("bench_total", help: "Bench.", labels: ["placement"])
        let counter = family?.labels("main_paywall")
        let atomic = Atomic<Int>(0)
        let n = count(20_000_000)
        let measured = interleaved(
            n: n, between: {},
            subject: { n in for _ in 0..<n { counter?.inc() } },
            baseline: { n in for _ in 0..<n { atomic.wrappingAdd(1, ordering: .relaxed) } })
        return BenchmarkResult(name: "metrics.counter.increment", value: measured.subject, unit: "ns/op",
                               baseline: ("Atomic<Int> add", measured.baseline), target: "<= 15 ns")
    }

    /// Renders a registry of 10,000 series (samples, as Prometheus counts them; histograms
    /// included) in Prometheus text; reports microseconds per 1000 series.
    func metricsRender() throws -> BenchmarkResult {
        let registry = MetricsRegistry()
        let requests = try registry.counter("bench_requests_total", help: "Requests.", labels: ["placement", "outcome"])
        let durations = try registry.histogram("bench_duration_seconds", help: "Durations.", labels: ["placement"])
        let perHistogram = HistogramFamily.defaultSecondsBuckets.count + 3  // buckets, +Inf, _sum, _count
        let histograms = 320
        let counters = 10_000 - histograms * perHistogram
        for i in 0..<counters { requests.labels("placement_\(i / 4)", ["ok", "timeout", "http_503", "reset"][i % 4]).add(UInt64(i)) }
        for i in 0..<histograms {
            let h = durations.labels("placement_\(i)")
            for k in 0..<10 { h.observe(Double(k) * 0.37 + Double(i) * 0.001) }
        }
        let lines = registry.withRendered(format: .prometheusText) { bytes in
            bytes.reduce(0) { $0 + ($1 == 10 ? 1 : 0) }
        }
        let samplesRendered = lines - 4  // HELP and TYPE of two families
        guard samplesRendered == 10_000 else { throw BenchError("metrics.render: expected 10000 series, rendered \(samplesRendered)") }
        let renders = count(100, minimum: 10)
        var samples: [Double] = []
        for run in 0...runs {
            let start = monotonicNanos()
            for _ in 0..<renders { blackHole(registry.withRendered(format: .prometheusText) { $0.count }) }
            if run > 0 { samples.append(Double(monotonicNanos() - start) / Double(renders) / 1000 / 10) }
        }
        return BenchmarkResult(name: "metrics.render", value: median(samples), unit: "us/1000 series", baseline: nil,
                               target: "<= 100 us")
    }

    // MARK: simulation

    /// The strategy lab on one thread: engine calls per CPU second of that thread.
    func simCalls() -> BenchmarkResult {
        let lab = Simulation(config: .standard)
        let sessions = count(20_000, minimum: 200)
        _ = lab.run(sessions: max(50, sessions / 10), seed: 7, threads: 1)
        var samples: [Double] = []
        for run in 0..<runs {
            let result = lab.run(sessions: sessions, seed: UInt64(run + 1), threads: 1)
            samples.append(result.throughput.callsPerCoreSecond)
        }
        return BenchmarkResult(name: "sim.calls", value: median(samples), unit: "calls/s", baseline: nil, target: ">= 2,000,000")
    }

    /// `flowscope run` on a long scenario (its report and timeline included), against the same
    /// scenario a tenth as long: steps per CPU second of each, so a ratio near 1 says the cost of a
    /// step does not grow with the scenario's length.
    func scenarioSteps() throws -> BenchmarkResult {
        func scenario(steps: Int) throws -> Scenario {
            let lines = (0..<steps).map { i in
                let call = i % 4 == 3 ? "getFlowOrDefault', timeout: 2" : "getFlow', loadTimeout: 3"
                return "{ at: \(Double(i) * 0.01), call: '\(call), placement: 'p\(i % 50)' }"
            }
            return try Scenario.decode("{ network: { latency: 0.2, rules: [ { match: { placement: 'p7', nth: 3 }, fail: 'reset' } ] }, steps: [\(lines.joined(separator: ","))] }")
        }
        let long = try scenario(steps: count(20_000, minimum: 2_000))
        let short = try scenario(steps: long.steps.count / 10)
        func play(_ s: Scenario) throws -> Double {
            let start = threadCPUNanos()
            let report = ScenarioRunner(s).run()
            let text = report.timeline(events: false)
            guard report.results.allSatisfy({ $0.outcome != nil }), text.utf8.count > s.steps.count else {
                throw BenchError("scenario.steps: a step of \(s.steps.count) did not end")
            }
            return Double(s.steps.count) / (Double(threadCPUNanos() - start) / 1e9)
        }
        _ = try play(short)
        var longRates: [Double] = [], shortRates: [Double] = []
        for _ in 0..<runs {
            longRates.append(try play(long))
            shortRates.append(try play(short))
        }
        return BenchmarkResult(name: "scenario.steps", value: median(longRates), unit: "steps/s",
                               baseline: ("the same scenario a tenth as long", median(shortRates)), target: ">= 0.5x baseline")
    }

    // MARK: sqlite

    /// The sqlite sink (its defaults: WAL, 1000-row transactions, indexes) storing a batch, against
    /// plain SQLite inserting the same rows in one transaction.
    func sqliteInsert() throws -> BenchmarkResult {
        let rows = (0..<count(50_000, minimum: 2_000)).map { i in
            var e = Envelope(benchEvent(), seq: UInt64(i + 1), ts: 1_790_000_000 + Double(i) / 1000, run: "bench")
            e.placement = "placement_\(i % 16)"
            return e
        }
        return try againstPlainSQLite("sqlite.insert", rows: rows, file: "sink") { path in
            let store = try SQLiteSink(options: .init(path: path))
            let start = monotonicNanos()
            store.consume(rows)
            store.flush()
            return (Double(monotonicNanos() - start) / 1e9, try store.count())
        }
    }

    /// Sustained ingest as `POST /api/ingest` does it, without HTTP: batches of 500 envelopes offered
    /// with `ingest(_:ifRoomWithin:)` (32,768, serve's default) into serve's sinks (metrics, memory,
    /// sqlite with its defaults), a refused batch offered again after 1 ms, until every batch is
    /// accepted and the pipeline has shut down (every row committed). Events/s over that wall time,
    /// against plain SQLite inserting the same rows in one transaction.
    func sqliteIngest() throws -> BenchmarkResult {
        let rows = (0..<count(200_000, minimum: 5_000)).map { i in
            var e = Envelope(benchEvent(), seq: UInt64(i + 1), ts: 1_790_000_000 + Double(i) / 1000, run: "bench")
            e.placement = "placement_\(i % 16)"
            return e
        }
        let batches = stride(from: 0, to: rows.count, by: 500).map { Array(rows[$0..<min($0 + 500, rows.count)]) }
        return try againstPlainSQLite("ingest.sqlite", rows: rows, file: "ingest") { path in
            let store = try SQLiteSink(options: .init(path: path))
            let pipeline = EventPipeline(run: "bench", sinks: [try MetricsSink(version: flowScopeVersion), MemorySink(capacity: 20_000), store])
            let start = monotonicNanos()
            for batch in batches {
                while pipeline.ingest(batch, ifRoomWithin: 32_768) != .accepted { usleep(1000) }
            }
            pipeline.shutdown()
            return (Double(monotonicNanos() - start) / 1e9, store.storedCount)
        }
    }

    /// `write` (which stores `rows` into a new SQLite file at the path it is given and returns the
    /// seconds its storing took and how many rows it stored) against plain SQLite inserting the same
    /// rows in one transaction, the first run a warm-up: the medians of each in events/s. Both files
    /// are deleted after each run.
    private func againstPlainSQLite(_ name: String, rows: [Envelope], file: String,
                                    _ write: (String) throws -> (seconds: Double, stored: Int)) throws -> BenchmarkResult {
        var subject: [Double] = [], plain: [Double] = []
        for run in 0...runs {
            let path = "\(directory)/\(file)-\(run).sqlite", plainPath = "\(directory)/\(file)-plain-\(run).sqlite"
            let (seconds, stored) = try write(path)
            let start = monotonicNanos()
            try SQLiteBaseline.insert(rows, path: plainPath)
            let plainSeconds = Double(monotonicNanos() - start) / 1e9
            for p in [path, plainPath] {
                for suffix in ["", "-wal", "-shm", "-journal"] { unlink(p + suffix) }
            }
            guard stored == rows.count else { throw BenchError("\(name): the sink stored \(stored) of \(rows.count) rows") }
            if run > 0 {
                subject.append(Double(rows.count) / seconds)
                plain.append(Double(rows.count) / plainSeconds)
            }
        }
        return BenchmarkResult(name: name, value: median(subject), unit: "events/s",
                               baseline: ("plain SQLite, one transaction", median(plain)), target: ">= 0.5x baseline")
    }

    // MARK: read model

    /// `count` events of calls as the engine writes them (fetch.start, cache.miss, request.start,
    /// request.end, fetch.end; every eighth call a preload of three placements), traces interleaved
    /// four at a time, numbered from 1, all of run `bench`.
    func callEvents(_ count: Int) -> [Envelope] {
        var out: [Envelope] = []
        out.reserveCapacity(count + 8)
        var call: UInt64 = 0
        while out.count < count {
            var group: [[Envelope]] = []
            for _ in 0..<4 {
                call += 1
                let trace = TraceID(high: 0xbe, low: call), t = Double(call) * 0.01
                func e(_ name: EventName, _ span: UInt64, _ placement: String?, _ dt: Double, _ attrs: EventAttributes) -> Envelope {
                    Envelope(seq: 0, ts: 1_790_000_000 + t + dt, t: t + dt, run: "bench", trace: trace, span: SpanID(raw: span),
                             name: name, placement: placement, attrs: attrs)
                }
                let placement = "placement_\(call % 16)", d = Double(call % 997) / 1000
                if call % 8 == 0 {
                    group.append([e(.preloadStart, 1, nil, 0, ["call": "preloadFlows", "placements": ["a", "b", "c"]]),
                                  e(.preloadEnd, 1, nil, d, ["call": "preloadFlows", "succeeded": ["a", "b"], "failed": ["c": 2005],
                                                             "duration": .number(d)])])
                } else {
                    group.append([e(.fetchStart, 1, placement, 0, ["call": "getFlow"]), e(.cacheMiss, 1, placement, 0, [:]),
                                  e(.requestStart, 2, placement, 0, ["kind": "targeted", "timeout": 4.5]),
                                  e(.requestEnd, 2, placement, d, ["kind": "targeted", "outcome": "ok", "duration": .number(d)]),
                                  e(.fetchEnd, 1, placement, d, ["call": "getFlow", "source": "network", "duration": .number(d),
                                                                 "targetingLost": false])])
                }
            }
            for i in 0..<5 { for g in group where i < g.count { out.append(g[i]) } }
        }
        for i in out.indices { out[i].seq = UInt64(i + 1) }
        return out
    }

    /// Events folded into calls per second (`CallFold`, the read model's one fold).
    func readModelFold() -> BenchmarkResult {
        let events = callEvents(count(100_000, minimum: 10_000))
        var rates: [Double] = []
        for run in 0...runs {
            let start = monotonicNanos()
            let calls = CallFold.calls(events)
            let seconds = Double(monotonicNanos() - start) / 1e9
            guard !calls.isEmpty else { continue }
            if run > 0 { rates.append(Double(events.count) / seconds) }
        }
        return BenchmarkResult(name: "readmodel.fold", value: median(rates), unit: "events/s", baseline: nil, target: ">= 500,000")
    }

    /// `GET /api/placements?run=` (or `GET /api/calls?run=&limit=50`) as the server answers it, from a
    /// memory sink holding a run of 100,000 events, while the run grows: before each query 100 new
    /// events arrive, so the read model folds them and computes the run's statistics again (the
    /// first query, which folds the whole run, is the warm-up). The baseline, interleaved, is the
    /// path before the read model kept its calls (0.1.0 as of 803e6c9): the run's newest 20,000 events
    /// read, folded and counted on every query.
    func apiQuery(placements: Bool) -> BenchmarkResult {
        let base = count(100_000, minimum: 25_000), step = 100
        let events = callEvents(base + (runs + 1) * step)
        let memory = MemorySink(capacity: events.count, runCapacity: 0)
        memory.consume(Array(events[0..<base]))
        let query = CallQuery()
        var filter = CallFilter()
        filter.run = "bench"
        func answer() -> Int {
            placements ? query.placements(in: memory, filter: filter).placements.count : query.calls(in: memory, filter: filter, limit: 50).matched
        }
        func windowAnswer() -> Int {
            let (window, complete) = query.read(memory, run: filter.run)
            return placements ? CallQuery.placements(in: window, filter: filter, complete: complete, bounds: query.bounds).placements.count
                              : CallQuery.calls(in: window, filter: filter, limit: 50, complete: complete).matched
        }
        var grown: [Double] = [], window: [Double] = []
        for run in 0...runs {
            let offset = base + run * step
            memory.consume(Array(events[offset..<offset + step]))
            var start = monotonicNanos()
            let n = answer()
            let grownSeconds = Double(monotonicNanos() - start) / 1e9
            start = monotonicNanos()
            let m = windowAnswer()
            let windowSeconds = Double(monotonicNanos() - start) / 1e9
            guard n > 0, m > 0 else { continue }
            if run > 0 {
                grown.append(grownSeconds * 1000)
                window.append(windowSeconds * 1000)
            }
        }
        return BenchmarkResult(name: placements ? "api.placements" : "api.calls", value: median(grown), unit: "ms/query",
                               baseline: ("the newest 20,000 events folded per query (803e6c9)", median(window)), target: "<= 1x baseline")
    }

    // MARK: pieces

    func threeSinkPipeline(_ tag: String, capacity: Int = 65536) throws -> EventPipeline {
        let metrics = try MetricsSink(version: flowScopeVersion)
        let memory = MemorySink(capacity: 20_000)
        let path = "\(directory)/\(tag).jsonl"
        let jsonl = try JSONLinesSink(path: path, keep: 0)
        return EventPipeline(run: "bench", sinks: [metrics, memory, jsonl], queueCapacity: capacity)
    }

    /// Runs `subject` and `baseline` alternately, `runs` times each after one warm-up of each, and
    /// returns their median ns per operation, in CPU time of the calling thread (robust to other
    /// processes sharing the cores; time spent blocked is not counted). `between` runs before each
    /// of them (e.g. waits until the pipeline has drained). The baseline does `n * baselineScale`
    /// operations per run: a much cheaper operation needs more of them to last as long as the
    /// subject's run, or one interrupt or frequency step weighs on it far more than on the subject.
    func interleaved(n: Int, baselineScale: Int = 1, between: () -> Void, subject: (Int) throws -> Void,
                     baseline: (Int) -> Void) rethrows -> (subject: Double, baseline: Double) {
        var s: [Double] = [], b: [Double] = []
        for run in 0...runs {
            between()
            var start = threadCPUNanos()
            try subject(n)
            let subjectNanos = threadCPUNanos() - start
            // The subject's own work in the background (sinks draining its events) is over before
            // the baseline runs: it would slow the baseline down and flatter the ratio.
            between()
            start = threadCPUNanos()
            baseline(n * baselineScale)
            let baselineNanos = threadCPUNanos() - start
            if run > 0 {
                s.append(Double(subjectNanos) / Double(n))
                b.append(Double(baselineNanos) / Double(n * baselineScale))
            }
        }
        return (median(s), median(b))
    }
}

/// A benchmark that could not run or did less work than it should.
struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Trace ids for the benchmark's engine: a counter.
private final class TraceCounter {
    // Unchecked exclusivity: used from the benchmark's one thread.
    @exclusivity(unchecked) private var last: UInt64 = 0
    func next() -> TraceID {
        last += 1
        return TraceID(high: 1, low: last)
    }
}

/// The engine's host for the cache-hit benchmark: nothing is sent; finished calls are counted.
private final class BenchHost: EngineHost {
    // Unchecked exclusivity: the engine calls its host from the benchmark's one thread.
    @exclusivity(unchecked) var flows = 0
    func send(_ request: RequestID, _ spec: RequestSpec, origin: CallID) {}
    func cancel(_ request: RequestID) {}
    func schedule(_ timer: TimerID, at: EngineTime) {}
    func unschedule(_ timer: TimerID) {}
    func finished(_ call: CallID, _ outcome: CallOutcome, now: EngineTime) {
        if outcome.flow != nil { flows += 1 }
    }
}

/// Answers every audience request with one flow (FlowClient's first, uncached call).
private struct BenchBackend: FlowBackend {
    let payload: AudiencePayload
    init(flow: Flow) {
        payload = AudiencePayload(placementId: flow.placementId, audienceName: flow.audienceName,
                                  audienceVersionId: flow.audienceVersionId,
                                  variations: [Variation(id: flow.variationId, weight: 100, revision: flow.revision,
                                                         productIds: flow.productIds, remoteConfig: flow.remoteConfig)])
    }
    func send(_ request: RequestSpec) async -> RequestCompletion {
        RequestCompletion(.success(.audience(payload)), bytes: 1_400)
    }
}

/// A typical flow: a few products and a small remote config.
func benchFlow() -> Flow {
    let payload = AudiencePayload(placementId: "main_paywall", audienceName: "All Users", audienceVersionId: "main-all-1",
                                  variations: [Variation(id: "main-a", weight: 100, revision: 3,
                                                         productIds: ["pro.monthly", "pro.yearly"],
                                                         remoteConfig: ["title": "Go Pro", "trialDays": 7])])
    return Flow(payload: payload, variation: payload.variations[0], source: .network, targetingLost: false)
}

/// A typical event: a cache.hit as the engine emits it (its attributes typed: layer, age, audience).
func benchEvent() -> EngineEvent {
    let trace = TraceID(high: 0x4bf9_2f35_77b3_4da6, low: 0xa3ce_929d_0e0e_4736)
    return EngineEvent(name: .cacheHit, t: 4.5, placement: "main_paywall", trace: trace, span: SpanID(trace: trace, index: 0),
                       attrs: .cacheHit(layer: .memory, age: 12.5, fromDefaultAudience: false))
}

/// CPU nanoseconds the calling thread has used.
func threadCPUNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Nanoseconds on the monotonic clock.
func monotonicNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

func median(_ values: [Double]) -> Double {
    guard !values.isEmpty else { return 0 }
    let s = values.sorted()
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}

/// Keeps a value alive so the optimizer cannot remove the work that produced it.
@inline(never)
func blackHole<T>(_ value: T) { withExtendedLifetime(value) {} }
