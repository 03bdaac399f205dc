@_exported import FlowEvents  // the types of its query results (PlacementSummary, PreloadError)
import FlowFetch
import FlowJSON
import Synchronization

/// Keeps recent events in memory and per-run, per-placement aggregates: what the dashboard API
/// (`/api/events`, `/api/events/stream`, `/api/placements`, `/api/runs`) reads.
///
/// The event ring holds the last `capacity` envelopes of every run; besides it, each of the `keptRuns`
/// most recently active runs keeps its own last `runCapacity` envelopes, so a run's events stay
/// queryable while other runs' newer events fill the shared ring. Aggregates are kept incrementally as
/// events arrive, so they cover every event since start (not only those still in the ring), and
/// are bounded: at most `maxRuns` runs (the least recently active non-live run is forgotten
/// first), `maxPlacements` placements per run (more fold into `_other`), 16 fetch sources per
/// placement (more fold into `_other`) and the last `durationSamples` fetch.end durations per
/// placement for p50/p95. Every method is thread-safe.
public final class MemorySink: EventSink, EventStore {
    /// The type name in the config's `sinks` list.
    public static let type = "memory"

    /// The sink's name in metrics and logs.
    public let name: String
    /// Envelopes kept in the ring.
    public let capacity: Int
    /// Fetch durations kept per placement and run for p50/p95.
    public let durationSamples: Int
    /// Runs kept in the aggregates.
    public let maxRuns: Int
    /// Placements kept per run; more fold into `_other`.
    public let maxPlacements: Int
    /// Envelopes each run keeps of its own, besides the shared ring (0: none).
    public let runCapacity: Int
    /// Runs that keep envelopes of their own (the most recently active ones).
    public let keptRuns: Int

    private let state: Mutex<MemoryState>
    private let subscribers = Mutex<Subscribers>(Subscribers())

    /// Creates a memory sink.
    public init(name: String = "memory", capacity: Int = 10_000, durationSamples: Int = 1024, maxRuns: Int = 256,
                maxPlacements: Int = 200, runCapacity: Int = 2000, keptRuns: Int = 32) {
        self.name = name
        self.capacity = max(1, capacity)
        self.durationSamples = max(1, durationSamples)
        self.maxRuns = max(1, maxRuns)
        self.maxPlacements = max(1, maxPlacements)
        self.runCapacity = max(0, runCapacity)
        self.keptRuns = max(1, keptRuns)
        self.state = Mutex(MemoryState())
    }

    /// `memory`.
    public var type: String { Self.type }

    // MARK: EventSink

    /// Stores the batch, updates the aggregates, then calls every subscriber with the batch.
    public func consume(_ batch: [Envelope]) {
        guard !batch.isEmpty else { return }
        let limits = Limits(capacity: capacity, durationSamples: durationSamples, maxRuns: maxRuns, maxPlacements: maxPlacements,
                            runCapacity: runCapacity, keptRuns: keptRuns)
        state.withLock { state in state.add(batch, limits: limits) }
        let handlers = subscribers.withLock { Array($0.handlers.values) }
        for handler in handlers { handler(batch) }
    }

    // MARK: Queries

    /// Events of the ring, newest last, filtered by run, placement and event name. With `run`, also the
    /// run's own envelopes that the shared ring no longer holds.
    ///
    /// With `since`, the OLDEST `limit` matching events whose seq is greater than `since` (so a
    /// client can page forward or resume a stream); without it, the NEWEST `limit` matching events.
    public func events(since: UInt64? = nil, limit: Int = 100, run: String? = nil, placement: String? = nil,
                       name: String? = nil) -> [Envelope] {
        let limit = max(0, limit)
        guard limit > 0 else { return [] }
        func matches(_ e: Envelope) -> Bool {
            (run == nil || e.run == run) && (placement == nil || e.placement == placement)
                && (name == nil || e.name.rawValue == name)
        }
        return state.withLock { state in
            var out: [Envelope] = []
            // The run's own envelopes older than the shared ring's oldest: the shared ring has the rest.
            let oldestShared = state.ring.first?.seq ?? .max
            let own = run.flatMap { state.runRings[$0] }
            if let since {
                var more = true
                own?.ring.forEach { e in
                    guard e.seq < oldestShared else { return false }
                    if e.seq > since, matches(e) { out.append(e) }
                    more = out.count < limit
                    return more
                }
                guard more else { return out }
                state.ring.forEach { e in
                    guard e.seq > since, out.count < limit, matches(e) else { return out.count < limit }
                    out.append(e)
                    return out.count < limit
                }
                return out
            }
            state.ring.forEachReversed { e in
                if matches(e) { out.append(e) }
                return out.count < limit
            }
            if out.count < limit {
                own?.ring.forEachReversed { e in
                    if e.seq < oldestShared, matches(e) { out.append(e) }
                    return out.count < limit
                }
            }
            return out.reversed()
        }
    }

    /// The seq of the newest event held, nil when empty.
    public var latestSeq: UInt64? { state.withLock { $0.ring.last?.seq } }

    /// Envelopes in the ring now.
    public var count: Int { state.withLock { $0.ring.count } }

    /// Per-placement aggregates of `run`, or of every run merged when `run` is nil; sorted by
    /// placement. Empty for an unknown run.
    public func placements(run: String? = nil) -> [PlacementSummary] {
        state.withLock { state in
            if let run {
                return state.runs[run].map { $0.placementSummaries() } ?? []
            }
            var merged: [String: PlacementAggregate] = [:]
            for (_, aggregate) in state.runs {
                for (placement, p) in aggregate.placements { merged[placement, default: PlacementAggregate()].merge(p) }
            }
            return merged.keys.sorted().compactMap { key in merged[key]?.summary(placement: key) }
        }
    }

    /// Every run known, most recently active first.
    public func runs() -> [RunSummary] {
        state.withLock { state in
            state.runs.map { $0.value.summary(id: $0.key) }.sorted {
                $0.lastTs != $1.lastTs ? $0.lastTs > $1.lastTs : $0.id < $1.id
            }
        }
    }

    /// One run's summary, placements and event counts by name; nil for an unknown run.
    public func run(_ id: String) -> RunDetail? {
        state.withLock { state in
            guard let aggregate = state.runs[id] else { return nil }
            return RunDetail(summary: aggregate.summary(id: id), placements: aggregate.placementSummaries(),
                             eventsByName: aggregate.eventsByName)
        }
    }

    // MARK: Live stream

    /// Calls `handler` with each batch after it is stored (on the sink's drain thread; keep it
    /// short, e.g. hand the batch to the SSE connections). Returns a token for `unsubscribe`.
    public func subscribe(_ handler: @escaping @Sendable ([Envelope]) -> Void) -> SubscriptionToken {
        subscribers.withLock { s in
            s.next += 1
            s.handlers[s.next] = handler
            return SubscriptionToken(id: s.next)
        }
    }

    /// Stops calling the handler of `token`. After it returns, the handler is not called again
    /// except for a batch already being delivered.
    public func unsubscribe(_ token: SubscriptionToken) {
        _ = subscribers.withLock { $0.handlers.removeValue(forKey: token.id) }
    }

    /// Live subscriptions.
    public var subscriberCount: Int { subscribers.withLock { $0.handlers.count } }

    // MARK: EventStore (what the dashboard API reads)

    /// `{"run": ..., "placements": [...]}`.
    public func placementsJSON(run: String?) -> JSONValue { MemoryJSON.placements(placements(run: run), run: run) }
    /// Each run's summary object.
    public func runsJSON() -> [JSONValue] { runs().map(\.jsonValue) }
    /// One run's detail object.
    public func runJSON(id: String) -> JSONValue? { run(id)?.jsonValue }
    /// Whether the aggregates hold run `id` (it has not been forgotten past `maxRuns`).
    public func holdsRun(_ id: String) -> Bool { state.withLock { $0.runs[id] != nil } }
    /// Subscribes `handler`; the returned function unsubscribes it.
    public func follow(_ handler: @escaping @Sendable ([Envelope]) -> Void) -> @Sendable () -> Void {
        let token = subscribe(handler)
        return { [weak self] in self?.unsubscribe(token) }
    }
}

/// Identifies a subscription of `MemorySink.subscribe`.
public struct SubscriptionToken: Hashable, Sendable {
    /// The subscription's number.
    public let id: UInt64
}

/// How a run was produced, guessed from its id: `live` or `live:...` is live, `sim:...` or
/// `simulation:...` is a simulation, anything else (`test:...`, a bare test name) is a test.
public enum RunKind: String, Sendable, Hashable {
    case live, test, simulation

    /// The kind of run `id`.
    public init(runID id: String) {
        if id == "live" || id.hasPrefix("live:") { self = .live }
        else if id.hasPrefix("sim:") || id.hasPrefix("simulation:") { self = .simulation }
        else { self = .test }
    }
}

/// A run as `GET /api/runs` lists it.
public struct RunSummary: Sendable, Hashable {
    /// The run id (`live`, a test name, a simulation id).
    public var id: String
    /// Live, test or simulation (by the id's prefix, see `RunKind`).
    public var kind: RunKind
    /// Wall-clock time of its first and last event, seconds since 1970.
    public var firstTs: Double
    public var lastTs: Double
    /// Events seen (including ones no longer in the ring).
    public var events: Int
    /// fetch.end events seen.
    public var fetches: Int
    /// fetch.end events carrying an errorCode, plus placements reported failed by preload.end.
    public var errors: Int

    /// The JSON object of `/api/runs`: `{"id","kind","firstTs","lastTs","events","fetches","errors"}`
    /// with timestamps as ISO 8601 strings.
    public var jsonValue: JSONValue {
        ["id": .string(id), "kind": .string(kind.rawValue), "firstTs": .string(ISO8601.format(firstTs)),
         "lastTs": .string(ISO8601.format(lastTs)), "events": .number(Double(events)),
         "fetches": .number(Double(fetches)), "errors": .number(Double(errors))]
    }
}

/// One run in detail, as `GET /api/runs/{id}` answers.
public struct RunDetail: Sendable, Hashable {
    /// The run's summary.
    public var summary: RunSummary
    /// Its placements, sorted by placement.
    public var placements: [PlacementSummary]
    /// Events seen by name.
    public var eventsByName: [String: Int]

    /// `{"run": <RunSummary>, "placements": [<PlacementSummary>], "eventsByName": {"fetch.end": 3}}`.
    public var jsonValue: JSONValue {
        ["run": summary.jsonValue, "placements": .array(placements.map(\.jsonValue)),
         "eventsByName": .object(eventsByName.mapValues { .number(Double($0)) })]
    }
}

/// JSON bodies for the dashboard API, built from `MemorySink` query results.
public enum MemoryJSON {
    /// `GET /api/placements?run=`: `{"run":"live"|null,"placements":[<PlacementSummary>...]}`.
    public static func placements(_ placements: [PlacementSummary], run: String?) -> JSONValue {
        ["run": run.map(JSONValue.string) ?? .null, "placements": .array(placements.map(\.jsonValue))]
    }

    /// `GET /api/runs`: `{"runs":[<RunSummary>...]}`.
    public static func runs(_ runs: [RunSummary]) -> JSONValue {
        ["runs": .array(runs.map(\.jsonValue))]
    }
}

// MARK: - State

private struct Limits {
    var capacity: Int
    var durationSamples: Int
    var maxRuns: Int
    var maxPlacements: Int
    var runCapacity: Int
    var keptRuns: Int
}

/// A run's own envelopes and when it was last active (the seq of its newest envelope).
private struct RunRing {
    var ring = Ring()
    var lastSeq: UInt64 = 0
}

private struct Subscribers {
    var next: UInt64 = 0
    var handlers: [UInt64: @Sendable ([Envelope]) -> Void] = [:]
}

private struct MemoryState: ~Copyable {
    var ring = Ring()
    var runs: [String: RunAggregate] = [:]
    var runRings: [String: RunRing] = [:]

    /// Stores a batch: each envelope into the ring, and into its run's aggregate, looked up once
    /// per stretch of consecutive events of the same run (not once per event).
    mutating func add(_ batch: [Envelope], limits: Limits) {
        var i = 0
        while i < batch.count {
            let run = batch[i].run
            var end = i + 1
            while end < batch.count, batch[end].run == run { end += 1 }
            if runs[run] == nil {
                if runs.count >= limits.maxRuns, let oldest = runs.filter({ $0.key != "live" }).min(by: { $0.value.lastTs < $1.value.lastTs })?.key {
                    runs.removeValue(forKey: oldest)
                }
                runs[run] = RunAggregate(firstTs: batch[i].ts)
            }
            runs[run]!.add(batch[i..<end], limits: limits)
            for k in i..<end { ring.append(batch[k], capacity: limits.capacity) }
            if limits.runCapacity > 0 {
                if runRings[run] == nil, runRings.count >= limits.keptRuns,
                   let quietest = runRings.min(by: { $0.value.lastSeq < $1.value.lastSeq })?.key {
                    runRings.removeValue(forKey: quietest)
                }
                for k in i..<end { runRings[run, default: RunRing()].ring.append(batch[k], capacity: limits.runCapacity) }
                runRings[run]!.lastSeq = batch[end - 1].seq
            }
            i = end
        }
    }
}

/// A ring that grows up to its capacity, then overwrites its oldest element.
private struct Ring {
    private var storage: [Envelope] = []
    private var head = 0

    var count: Int { storage.count }
    var first: Envelope? { storage.isEmpty ? nil : storage[head] }
    var last: Envelope? { storage.isEmpty ? nil : storage[(head + storage.count - 1) % storage.count] }

    mutating func append(_ e: Envelope, capacity: Int) {
        if storage.count < capacity { storage.append(e); return }
        storage[head] = e
        head = (head + 1) % storage.count
    }

    /// Oldest first, while `body` returns true.
    func forEach(_ body: (Envelope) -> Bool) {
        for i in 0..<storage.count where !body(storage[(head + i) % storage.count]) { return }
    }

    /// Newest first, while `body` returns true.
    func forEachReversed(_ body: (Envelope) -> Bool) {
        for i in stride(from: storage.count - 1, through: 0, by: -1) where !body(storage[(head + i) % storage.count]) { return }
    }
}

private struct RunAggregate {
    var firstTs: Double
    var lastTs = 0.0
    var events = 0
    var fetches = 0
    var errors = 0
    /// Events by name (counted by the enum: no string hashing per event).
    var names: [EventName: Int] = [:]
    var placements: [String: PlacementAggregate] = [:]

    init(firstTs: Double) { self.firstTs = firstTs; self.lastTs = firstTs }

    /// Adds consecutive events of this run; counts by name are summed over runs of the same name
    /// before they touch the dictionary.
    mutating func add(_ stretch: ArraySlice<Envelope>, limits: Limits) {
        var pending: (name: EventName, count: Int)?
        for e in stretch {
            if let p = pending, p.name == e.name {
                pending = (p.name, p.count + 1)
            } else {
                if let p = pending { names[p.name, default: 0] += p.count }
                pending = (e.name, 1)
            }
            add(e, limits: limits)
        }
        if let p = pending { names[p.name, default: 0] += p.count }
    }

    /// Everything but the count by name.
    private mutating func add(_ e: Envelope, limits: Limits) {
        events += 1
        firstTs = min(firstTs, e.ts)
        lastTs = max(lastTs, e.ts)
        switch e.name {
        case .fetchEnd:
            fetches += 1
            let failed = e.attrs["errorCode"].map { $0 != .null } ?? false
            if failed { errors += 1 }
            let key = placementKey(e.placement ?? "_none", limits: limits)
            placements[key, default: PlacementAggregate()].addFetch(e, failed: failed, samples: limits.durationSamples)
        case .timeout:
            let key = placementKey(e.placement ?? "_none", limits: limits)
            placements[key, default: PlacementAggregate()].timeouts += 1
        case .preloadEnd:
            guard let failed = e.attrs["failed"]?.objectValue else { break }
            for placement in failed.keys.sorted() {
                errors += 1
                let key = placementKey(placement, limits: limits)
                placements[key, default: PlacementAggregate()].lastPreloadError =
                    PreloadError(code: failed[placement] ?? .null, ts: e.ts, seq: e.seq)
            }
        default:
            break
        }
    }

    /// Events seen by name, keyed by the name as written.
    var eventsByName: [String: Int] {
        Dictionary(uniqueKeysWithValues: names.map { ($0.key.rawValue, $0.value) })
    }

    func placementKey(_ placement: String, limits: Limits) -> String {
        placements[placement] != nil || placements.count < limits.maxPlacements ? placement : "_other"
    }

    func summary(id: String) -> RunSummary {
        RunSummary(id: id, kind: RunKind(runID: id), firstTs: firstTs, lastTs: lastTs, events: events, fetches: fetches,
                   errors: errors)
    }

    func placementSummaries() -> [PlacementSummary] {
        placements.keys.sorted().compactMap { key in placements[key]?.summary(placement: key) }
    }
}

private struct PlacementAggregate {
    var fetches = 0
    var sources: [String: Int] = [:]
    var errors = 0
    var targetingLost = 0
    var timeouts = 0
    /// The last `samples` durations, as a ring.
    var durations: [Double] = []
    var durationHead = 0
    var lastPreloadError: PreloadError?

    mutating func addFetch(_ e: Envelope, failed: Bool, samples: Int) {
        fetches += 1
        if failed {
            errors += 1
        } else if let source = e.attrs["source"]?.stringValue {
            let key = sources[source] != nil || sources.count < 16 ? source : "_other"
            sources[key, default: 0] += 1
        }
        if e.attrs["targetingLost"]?.boolValue == true { targetingLost += 1 }
        if let duration = e.attrs["duration"]?.numberValue, duration.isFinite {
            if durations.count < samples {
                durations.append(duration)
            } else {
                durations[durationHead] = duration
                durationHead = (durationHead + 1) % durations.count
            }
        }
    }

    mutating func merge(_ other: PlacementAggregate) {
        fetches += other.fetches
        for (k, v) in other.sources { sources[k, default: 0] += v }
        errors += other.errors
        targetingLost += other.targetingLost
        timeouts += other.timeouts
        durations += other.durations
        if let o = other.lastPreloadError, o.seq > (lastPreloadError?.seq ?? 0) { lastPreloadError = o }
    }

    func summary(placement: String) -> PlacementSummary {
        PlacementSummary(placement: placement, fetches: fetches, sources: sources, errors: errors, targetingLost: targetingLost,
                         timeouts: timeouts, durations: durations, lastPreloadError: lastPreloadError)
    }

}

extension MemorySink {
    /// The `memory` sink type. Options: `capacity` (events kept, default 10000), `durationSamples`
    /// (default 1024), `maxRuns` (default 256), `maxPlacements` (default 200), `runCapacity` (events each
    /// run keeps of its own, default 2000) and `keptRuns` (runs that keep them, default 32).
    public struct Factory: SinkFactory {
        /// The options of a `memory` entry.
        public struct Options: Sendable, Equatable {
            public var capacity = 10_000
            public var durationSamples = 1024
            public var maxRuns = 256
            public var maxPlacements = 200
            public var runCapacity = 2000
            public var keptRuns = 32
        }

        /// `memory`.
        public let type = MemorySink.type

        /// The factory.
        public init() {}

        /// Reads `capacity`, `durationSamples`, `maxRuns`, `maxPlacements`, `runCapacity` and `keptRuns`.
        public func options(from context: SinkContext) throws(JSONInputError) -> Options {
            try context.checkKeys(["capacity", "durationSamples", "maxRuns", "maxPlacements", "runCapacity", "keptRuns"])
            var o = Options()
            o.capacity = try context.int("capacity", in: 1...10_000_000) ?? o.capacity
            o.durationSamples = try context.int("durationSamples", in: 1...1_000_000) ?? o.durationSamples
            o.maxRuns = try context.int("maxRuns", in: 1...100_000) ?? o.maxRuns
            o.maxPlacements = try context.int("maxPlacements", in: 1...100_000) ?? o.maxPlacements
            o.runCapacity = try context.int("runCapacity", in: 0...10_000_000) ?? o.runCapacity
            o.keptRuns = try context.int("keptRuns", in: 1...100_000) ?? o.keptRuns
            return o
        }

        /// A memory sink named after its entry.
        public func makeSink(_ options: Options, context: SinkContext) -> any EventSink {
            MemorySink(name: context.name, capacity: options.capacity, durationSamples: options.durationSamples,
                       maxRuns: options.maxRuns, maxPlacements: options.maxPlacements, runCapacity: options.runCapacity,
                       keptRuns: options.keptRuns)
        }
    }
}
