@_exported import FlowEvents  // the types of its query results (RunSummary, RunDetail)
import FlowFetch
import FlowJSON
import Synchronization

/// Keeps recent events in memory and per-run totals: what the dashboard API (`/api/events`,
/// `/api/events/stream`, `/api/calls`, `/api/placements`, `/api/runs`) reads.
///
/// The event ring holds the last `capacity` envelopes of every run; besides it, each of the `keptRuns`
/// most recently active runs keeps its own last `runCapacity` envelopes, so a run's events stay
/// queryable while other runs' newer events fill the shared ring. Run totals (events, fetches,
/// errors, events by name) are kept incrementally as events arrive, so they cover every event since
/// start (not only those still held), for at most `maxRuns` runs (the least recently active non-live
/// run is forgotten first). Calls and placement statistics are the read model's (`CallQuery`), over
/// the events held. Every method is thread-safe.
public final class MemorySink: EventSink, EventStore {
    /// The type name in the config's `sinks` list.
    public static let type = "memory"

    /// The sink's name in metrics and logs.
    public let name: String
    /// Envelopes kept in the ring.
    public let capacity: Int
    /// Runs kept in the aggregates.
    public let maxRuns: Int
    /// Envelopes each run keeps of its own, besides the shared ring (0: none).
    public let runCapacity: Int
    /// Runs that keep envelopes of their own (the most recently active ones).
    public let keptRuns: Int

    private let state: Mutex<MemoryState>
    private let subscribers = Mutex<Subscribers>(Subscribers())

    /// Creates a memory sink.
    public init(name: String = "memory", capacity: Int = 10_000, maxRuns: Int = 256, runCapacity: Int = 2000,
                keptRuns: Int = 32) {
        self.name = name
        self.capacity = max(1, capacity)
        self.maxRuns = max(1, maxRuns)
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
        let limits = Limits(capacity: capacity, maxRuns: maxRuns, runCapacity: runCapacity, keptRuns: keptRuns)
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
                own?.ring.forEach(after: since) { e in
                    guard e.seq < oldestShared else { return false }
                    if e.seq > since, matches(e) { out.append(e) }
                    more = out.count < limit
                    return more
                }
                guard more else { return out }
                state.ring.forEach(after: since) { e in
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

    /// Every run known, most recently active first.
    public func runs() -> [RunSummary] {
        state.withLock { state in
            state.runs.map { $0.value.summary(id: $0.key) }.sorted {
                $0.lastTs != $1.lastTs ? $0.lastTs > $1.lastTs : $0.id < $1.id
            }
        }
    }

    /// One run's summary and event counts by name; nil for an unknown run.
    public func run(_ id: String) -> RunDetail? {
        state.withLock { state in
            guard let aggregate = state.runs[id] else { return nil }
            return RunDetail(summary: aggregate.summary(id: id), eventsByName: aggregate.eventsByName)
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

    /// Every run known, most recently active first (`runs()`).
    public func runSummaries() -> [RunSummary] { runs() }
    /// One run's summary and events by name (`run(_:)`).
    public func runDetail(id: String) -> RunDetail? { run(id) }
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

// MARK: - State

private struct Limits {
    var capacity: Int
    var maxRuns: Int
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
            runs[run]!.add(batch[i..<end])
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
    /// Whether every envelope was appended with a greater seq than the one before (as a pipeline
    /// delivers them): then a seq is found by binary search.
    private var ascending = true

    var count: Int { storage.count }
    var first: Envelope? { storage.isEmpty ? nil : storage[head] }
    var last: Envelope? { storage.isEmpty ? nil : storage[(head + storage.count - 1) % storage.count] }

    mutating func append(_ e: Envelope, capacity: Int) {
        if let last, e.seq <= last.seq { ascending = false }
        if storage.count < capacity { storage.append(e); return }
        storage[head] = e
        head = (head + 1) % storage.count
    }

    /// Oldest first, while `body` returns true.
    func forEach(_ body: (Envelope) -> Bool) {
        for i in 0..<storage.count where !body(storage[(head + i) % storage.count]) { return }
    }

    /// Oldest first, while `body` returns true, from the first envelope whose seq is greater than
    /// `since`, found by binary search when the ring is in seq order (else from the oldest: the
    /// caller still checks each seq).
    func forEach(after since: UInt64, _ body: (Envelope) -> Bool) {
        var low = 0
        if ascending {
            var high = storage.count
            while low < high {
                let mid = (low + high) / 2
                if storage[(head + mid) % storage.count].seq <= since { low = mid + 1 } else { high = mid }
            }
        }
        for i in low..<storage.count where !body(storage[(head + i) % storage.count]) { return }
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

    init(firstTs: Double) { self.firstTs = firstTs; self.lastTs = firstTs }

    /// Adds consecutive events of this run; counts by name are summed over runs of the same name
    /// before they touch the dictionary.
    mutating func add(_ stretch: ArraySlice<Envelope>) {
        var pending: (name: EventName, count: Int)?
        for e in stretch {
            if let p = pending, p.name == e.name {
                pending = (p.name, p.count + 1)
            } else {
                if let p = pending { names[p.name, default: 0] += p.count }
                pending = (e.name, 1)
            }
            add(e)
        }
        if let p = pending { names[p.name, default: 0] += p.count }
    }

    /// Everything but the count by name: fetches and errors as the read model counts them
    /// (``CallStatistics/errors(of:placement:)``): a fetch.end with an errorCode, each placement
    /// a preload.end reports failed.
    private mutating func add(_ e: Envelope) {
        events += 1
        firstTs = min(firstTs, e.ts)
        lastTs = max(lastTs, e.ts)
        switch e.name {
        case .fetchEnd:
            fetches += 1
            if let code = e.attrs["errorCode"], code != .null { errors += 1 }
        case .preloadEnd:
            errors += e.attrs["failed"]?.objectValue?.count ?? 0
        default:
            break
        }
    }

    /// Events seen by name, keyed by the name as written.
    var eventsByName: [String: Int] {
        Dictionary(uniqueKeysWithValues: names.map { ($0.key.rawValue, $0.value) })
    }

    func summary(id: String) -> RunSummary {
        RunSummary(id: id, kind: RunKind(runID: id), firstTs: firstTs, lastTs: lastTs, events: events, fetches: fetches,
                   errors: errors)
    }

}

extension MemorySink {
    /// The `memory` sink type. Options: `capacity` (events kept, default 10000), `maxRuns` (default
    /// 256), `runCapacity` (events each run keeps of its own, default 2000) and `keptRuns` (runs
    /// that keep them, default 32).
    public struct Factory: SinkFactory {
        /// The options of a `memory` entry.
        public struct Options: Sendable, Equatable {
            public var capacity = 10_000
            public var maxRuns = 256
            public var runCapacity = 2000
            public var keptRuns = 32
        }

        /// `memory`.
        public let type = MemorySink.type

        /// The factory.
        public init() {}

        /// Reads `capacity`, `maxRuns`, `runCapacity` and `keptRuns`.
        public func options(from context: SinkContext) throws(JSONInputError) -> Options {
            try context.checkKeys(["capacity", "maxRuns", "runCapacity", "keptRuns"])
            var o = Options()
            o.capacity = try context.int("capacity", in: 1...10_000_000) ?? o.capacity
            o.maxRuns = try context.int("maxRuns", in: 1...100_000) ?? o.maxRuns
            o.runCapacity = try context.int("runCapacity", in: 0...10_000_000) ?? o.runCapacity
            o.keptRuns = try context.int("keptRuns", in: 1...100_000) ?? o.keptRuns
            return o
        }

        /// A memory sink named after its entry.
        public func makeSink(_ options: Options, context: SinkContext) -> any EventSink {
            MemorySink(name: context.name, capacity: options.capacity, maxRuns: options.maxRuns, runCapacity: options.runCapacity,
                       keptRuns: options.keptRuns)
        }
    }
}
