import FlowFetch
import Synchronization
import Testing

/// One log shared by a host and a sink, so the test sees what the engine did in which order.
private final class Log: Sendable {
    let lines = Mutex<[String]>([])
    func add(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

private final class LoggingHost: EngineHost {
    let log: Log
    var sent: [RequestID] = []
    init(_ log: Log) { self.log = log }
    func send(_ request: RequestID, _ spec: RequestSpec, origin: CallID) { sent.append(request); log.add("host.send") }
    func cancel(_ request: RequestID) { log.add("host.cancel") }
    func schedule(_ timer: TimerID, at: EngineTime) { log.add("host.schedule") }
    func unschedule(_ timer: TimerID) { log.add("host.unschedule") }
    func finished(_ call: CallID, _ outcome: CallOutcome, now: EngineTime) { log.add("host.finished") }
}

/// Counts hand-overs: the engine passes the events of one input in one call.
private final class LoggingSink: EngineEventSink {
    let log: Log
    let handOvers = Atomic<Int>(0)
    init(log: Log) { self.log = log }
    func receive(_ event: EngineEvent) { log.add(event.name.rawValue) }
    func receive(contentsOf events: [EngineEvent]) {
        handOvers.add(1, ordering: .relaxed)
        for event in events { log.add(event.name.rawValue) }
    }
}

@Suite("Engine event order")
struct EngineEventOrderTests {
    private func engine(_ log: Log, _ sink: LoggingSink) -> (FlowEngine, LoggingHost) {
        let host = LoggingHost(log)
        var n: UInt64 = 0
        let engine = FlowEngine(profile: Profile(id: "user-1"), flowCache: FlowCache(disk: InMemoryDiskStore()),
                                layouts: InMemoryLayoutStore(), host: host, events: sink,
                                traceIDs: { n += 1; return TraceID(high: 1, low: n) })
        return (engine, host)
    }

    private static let payload = AudiencePayload(placementId: "main", audienceName: "All Users", audienceVersionId: "av-1",
                                                 variations: [Variation(id: "A", weight: 100)])

    @Test("every event reaches the sink before the host hears of what follows it; a cache hit is one hand-over")
    func eventsBeforeHostCalls() throws {
        let log = Log()
        let sink = LoggingSink(log: log)
        let (engine, host) = engine(log, sink)
        _ = try engine.getFlow(placement: "main", policy: .returnCacheDataElseLoad, loadTimeout: 5, now: 0)
        let started = log.all
        let send = try #require(started.firstIndex(of: "host.send"))
        #expect(started[..<send].contains("fetch.start") && started[..<send].contains("request.start"))
        engine.response(try #require(host.sent.first), RequestCompletion(.success(.audience(Self.payload))), now: 0.2)
        let all = log.all
        let finished = try #require(all.lastIndex(of: "host.finished"))
        #expect(all[..<finished].contains("fetch.end") && all[..<finished].contains("request.end"))
        #expect(!all[finished...].contains("fetch.end"))

        // Now a cache hit: its three events in one hand-over, before the host hears the call ended.
        let before = sink.handOvers.load(ordering: .relaxed)
        let count = log.all.count
        _ = try engine.getFlow(placement: "main", policy: .returnCacheDataElseLoad, loadTimeout: 5, now: 1)
        #expect(Array(log.all[count...]) == ["fetch.start", "cache.hit", "fetch.end", "host.finished"])
        #expect(sink.handOvers.load(ordering: .relaxed) == before + 1)
    }

    @Test("events of an input with no host call still reach the sink before the input returns")
    func eventsWithoutHostCalls() {
        let log = Log()
        let (engine, host) = engine(log, LoggingSink(log: log))
        defer { withExtendedLifetime(host) {} }  // the engine holds its host unowned
        engine.applyAttribution("appleAds", now: 1)
        #expect(log.all == ["attribution.applied"])
        _ = engine.identify("user-2", now: 2)
        #expect(log.all.contains("profile.changed"))
    }
}
