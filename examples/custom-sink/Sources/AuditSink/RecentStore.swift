import FlowEvents
import Synchronization

// sample: store
/// The newest `capacity` events in memory, answering the dashboard: as an `EventStore` it backs
/// `/api/events`, `/api/calls`, `/api/placements`, `/api/runs` and the live stream in place of the
/// built-in `memory` sink. Runs are counted over every event seen, also those it no longer holds.
public final class RecentStore: EventSink, EventStore {
    public let name: String
    public var type: String { "recent" }
    private let capacity: Int
    private let state = Mutex(State())

    private struct State {
        var events: [Envelope] = []
        var runs: [String: RunDetail] = [:]
        var followers: [Int: @Sendable ([Envelope]) -> Void] = [:]
        var nextFollower = 0
    }

    public init(name: String = "recent", capacity: Int) {
        self.name = name
        self.capacity = max(1, capacity)
    }

    public func consume(_ batch: [Envelope]) {
        let followers = state.withLock { state in
            state.events += batch
            if state.events.count > capacity { state.events.removeFirst(state.events.count - capacity) }
            for e in batch { Self.count(e, into: &state.runs) }
            return Array(state.followers.values)
        }
        for follower in followers { follower(batch) }
    }

    /// The run's summary and events by name, updated by one event.
    private static func count(_ e: Envelope, into runs: inout [String: RunDetail]) {
        var run = runs[e.run] ?? RunDetail(summary: RunSummary(id: e.run, firstTs: e.ts, lastTs: e.ts, events: 0, fetches: 0, errors: 0),
                                           eventsByName: [:])
        run.summary.firstTs = min(run.summary.firstTs, e.ts)
        run.summary.lastTs = max(run.summary.lastTs, e.ts)
        run.summary.events += 1
        run.eventsByName[e.name.rawValue, default: 0] += 1
        if e.name == .fetchEnd {
            run.summary.fetches += 1
            if e.attrs["errorCode"] != nil { run.summary.errors += 1 }
        }
        if e.name == .preloadEnd, case .object(let failed)? = e.attrs["failed"] { run.summary.errors += failed.count }
        runs[e.run] = run
    }

    public func events(since: UInt64?, limit: Int, run: String?, placement: String?, name: String?) -> [Envelope] {
        let held = state.withLock { $0.events }
        let matching = held.filter { e in
            (since.map { e.seq > $0 } ?? true) && (run == nil || e.run == run)
                && (placement == nil || e.placement == placement) && (name == nil || e.name.rawValue == name)
        }
        return Array(since == nil ? matching.suffix(max(0, limit)) : matching.prefix(max(0, limit)))
    }

    public var latestSeq: UInt64? { state.withLock { $0.events.last?.seq } }

    public func runSummaries() -> [RunSummary] {
        state.withLock { $0.runs.values.map(\.summary) }.sorted { $0.lastTs > $1.lastTs }
    }

    public func runDetail(id: String) -> RunDetail? { state.withLock { $0.runs[id] } }

    public func follow(_ handler: @escaping @Sendable ([Envelope]) -> Void) -> @Sendable () -> Void {
        let token = state.withLock { state in
            state.nextFollower += 1
            state.followers[state.nextFollower] = handler
            return state.nextFollower
        }
        return { [weak self] in _ = self?.state.withLock { $0.followers.removeValue(forKey: token) } }
    }
}

/// `{ type: "recent", capacity: 20000 }` in a `sinks` list (capacity: events held, default 20,000).
public struct RecentStoreFactory: SinkFactory {
    public let type = "recent"
    public init() {}

    public func options(from context: SinkContext) throws(JSONInputError) -> Int {
        try context.checkKeys(["capacity"])
        return try context.int("capacity", in: 1...10_000_000) ?? 20_000
    }

    public func makeSink(_ capacity: Int, context: SinkContext) -> any EventSink {
        RecentStore(name: context.name, capacity: capacity)
    }
}
// end sample: store
