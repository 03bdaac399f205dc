import FlowEvents
import FlowFetch
import FlowJSON
import MemorySink
import MetricsSink
import Synchronization

/// Simulation runs saved by `flowscope simulate`, shown in the dashboard next to live and test runs.
public struct SimulationRuns: Sendable {
    /// Every saved run's summary (`{id, kind: "simulation", ...}`).
    public var list: @Sendable () -> [JSONValue]
    /// One run's full summary, by id.
    public var find: @Sendable (String) -> JSONValue?
    public init(list: @escaping @Sendable () -> [JSONValue], find: @escaping @Sendable (String) -> JSONValue?) {
        self.list = list; self.find = find
    }
    /// No saved simulations.
    public static let none = SimulationRuns(list: { [] }, find: { _ in nil })
}

/// The routes of `flowscope serve` (interfaces.md, "HTTPS endpoints"): the dashboard, /metrics, the JSON
/// API over the memory sink, the live event stream, and ingest into the pipeline.
public enum DashboardAPI {
    /// Limits of the API.
    public struct Limits: Sendable {
        /// Most events one GET /api/events answers with.
        public var maxEventsPerPage = 1000
        /// Most envelopes one ingest request may carry.
        public var maxIngestEvents = 10_000
        public init() {}
    }

    /// The router for the dashboard stack. `hub` is fed from the memory sink's subscription
    /// (see ``connectStream(memory:hub:)``); `web` serves the static dashboard.
    public static func router(pipeline: EventPipeline, metrics: MetricsSink, memory: MemorySink, hub: SSEHub,
                              web: StaticFiles?, simulations: SimulationRuns = .none, ingestLimiter: RateLimiter,
                              limits: Limits = Limits()) -> Router {
        var router = Router()
        let exposition = MetricsExposition(registry: metrics.registry)
        router.get("/metrics") { request in
            for stats in pipeline.stats() { metrics.setQueueDepth(sink: stats.sink, depth: stats.queueDepth) }
            let (contentType, format) = MetricsSink.negotiate(accept: request.header("accept"))
            return Response(status: 200, headers: [("Content-Type", contentType), ("Cache-Control", "no-store")],
                            body: exposition.render(format: format))
        }
        router.get("/api/events") { request in
            var since: UInt64?
            if let s = request.query("since"), !s.isEmpty {
                guard let v = UInt64(s) else { return .error(400, "since: expected a sequence number, got \(JSONValue.string(s).jsonText)") }
                since = v
            }
            var limit = 100
            if let l = request.query("limit"), !l.isEmpty {
                guard let v = Int(l), v >= 1 else { return .error(400, "limit: expected a whole number >= 1, got \(JSONValue.string(l).jsonText)") }
                limit = min(v, limits.maxEventsPerPage)
            }
            let events = memory.events(since: since, limit: limit, run: nonEmpty(request.query("run")),
                                       placement: nonEmpty(request.query("placement")), name: nonEmpty(request.query("name")))
            return .jsonText(MemoryJSON.events(events, latestSeq: memory.latestSeq))
        }
        router.get("/api/events/stream") { _ in .eventStream(hub) }
        router.get("/api/placements") { request in
            .json(MemoryJSON.placements(memory.placements(run: nonEmpty(request.query("run"))), run: nonEmpty(request.query("run"))))
        }
        router.get("/api/runs") { _ in
            var runs = MemoryJSON.runs(memory.runs()).objectValue?["runs"]?.arrayValue ?? []
            let live = Set(runs.compactMap { $0["id"]?.stringValue })
            runs += simulations.list().filter { !live.contains($0["id"]?.stringValue ?? "") }
            return .json(["runs": .array(runs)])
        }
        router.get("/api/runs/{id}") { request in
            let id = request.parameter("id") ?? ""
            if let detail = memory.run(id) { return .json(detail.jsonValue) }
            if let simulation = simulations.find(id) { return .json(simulation) }
            return .error(404, "no run \(JSONValue.string(id).jsonText)")
        }
        router.post("/api/ingest", requiresToken: true, rateLimit: ingestLimiter) { request in
            switch Ingest.decode(request.body, maxEvents: limits.maxIngestEvents) {
            case .success(let envelopes):
                pipeline.ingest(envelopes)
                return .json(["accepted": .number(Double(envelopes.count))], status: 202)
            case .failure(let error):
                return .error(error.status, error.message)
            }
        }
        if let web { router.serveStatic(web) }
        return router
    }

    /// Feeds the SSE hub from the memory sink: every consumed envelope is published with its seq as id.
    /// Returns the subscription (unsubscribe it on stop).
    public static func connectStream(memory: MemorySink, hub: SSEHub) -> SubscriptionToken {
        memory.subscribe { batch in
            for envelope in batch { hub.publish(id: envelope.seq, data: envelope.jsonLine) }
        }
    }

    /// The replay for Last-Event-ID: the events after `seq` still in the memory ring.
    public static func replay(memory: MemorySink, limit: Int = 5000) -> SSEHub.Replay {
        { seq in memory.events(since: seq, limit: limit, run: nil, placement: nil, name: nil).map { ($0.seq, $0.jsonLine) } }
    }

    private static func nonEmpty(_ s: String?) -> String? { s.flatMap { $0.isEmpty ? nil : $0 } }
}

/// Decoding of ingest bodies: a JSON array of envelopes, or JSON Lines (one envelope per line).
public enum Ingest {
    /// Why a body was refused, with the HTTP status to answer.
    public struct Failure: Error, Sendable, Equatable {
        public var status: Int
        public var message: String
    }

    /// Decodes a body into envelopes; nothing is accepted unless everything is valid.
    public static func decode(_ body: [UInt8], maxEvents: Int) -> Result<[Envelope], Failure> {
        let first = body.first { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 }
        guard let first else { return .failure(Failure(status: 400, message: "empty body: expected a JSON array of envelopes or JSON Lines")) }
        do throws(JSONInputError) {
            if first == UInt8(ascii: "[") {
                let value = try JSON5.parse(bytes: body)
                guard (value.arrayValue?.count ?? 0) <= maxEvents else {
                    return .failure(Failure(status: 413, message: "more than \(maxEvents) events in one request"))
                }
                return .success(try Envelope.decodeAll(value))
            }
            var envelopes: [Envelope] = []
            var line = 0
            for slice in body.split(separator: 0x0A, omittingEmptySubsequences: false) {
                line += 1
                guard slice.contains(where: { $0 != 0x20 && $0 != 0x0D && $0 != 0x09 }) else { continue }
                guard envelopes.count < maxEvents else {
                    return .failure(Failure(status: 413, message: "more than \(maxEvents) events in one request"))
                }
                do throws(JSONInputError) {
                    envelopes.append(try Envelope(jsonValue: try JSON5.parse(bytes: slice)))
                } catch {
                    var e = error
                    e.path = "line \(line): " + e.path
                    throw e
                }
            }
            return .success(envelopes)
        } catch {
            return .failure(Failure(status: 400, message: error.description))
        }
    }
}

/// Renders a registry for one scrape, fresh from the live series every time, into a new array.
///
/// The same bytes as `MetricsRegistry.render(format:)` (a test compares them), without its shared
/// buffer: that buffer is locked for the whole render and then copied out, so concurrent scrapes on
/// the server's worker threads waited for each other and paid one more copy of the body.
final class MetricsExposition: Sendable {
    let registry: MetricsRegistry
    /// The size of the last render, to reserve the next one's array at once.
    private let lastSize = Atomic<Int>(4096)

    init(registry: MetricsRegistry) { self.registry = registry }

    func render(format: MetricsSink.Format) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(lastSize.load(ordering: .relaxed) + 1024)
        for family in registry.families { family.write(to: &out, format: format) }
        if format == .openMetrics { out.append(contentsOf: "# EOF\n".utf8) }
        lastSize.store(out.count, ordering: .relaxed)
        return out
    }
}
