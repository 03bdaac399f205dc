import FlowEvents
import FlowFetch
import FlowJSON
import FlowSim

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

/// The routes of `flowscope serve`: the dashboard, /metrics, the JSON API over an event store, the
/// sinks' health, the live event stream, and ingest into the pipeline.
public enum DashboardAPI {
    /// Limits of the API.
    public struct Limits: Sendable {
        /// Most events one GET /api/events answers with.
        public var maxEventsPerPage = 1000
        /// Most envelopes one ingest request may carry.
        public var maxIngestEvents = 10_000
        /// Ingest accepts a batch only while every durable sink's queue would then hold at most this
        /// many envelopes (capped at the pipeline's queue capacity); otherwise it answers 503 with
        /// `Retry-After` and queues nothing of the batch.
        public var ingestQueueLimit = 32_768
        /// Seconds a refused sender is told to wait (`Retry-After`).
        public var ingestRetryAfter = 1
        /// Most runs one GET /api/runs answers with.
        public var maxRunsPerPage = 1000
        /// Most calls one GET /api/calls answers with.
        public var maxCallsPerPage = 1000
        /// Newest events (of the run, when one is asked for) `GET /api/events` with call filters reads at most.
        public var queryWindow = 20_000
        /// Bounds of the read model's cache of calls: calls and placements answer over the whole run,
        /// up to `maxEvents` events of it.
        public var calls = CallCache.Limits()
        /// Placements and sources per placement a placements answer lists (more count under `_other`).
        public var placements = CallStatistics.Bounds()
        public init() {}
    }

    /// The router for the dashboard stack. `hub` is fed from the store's subscription
    /// (see ``connectStream(store:hub:)``), and its epoch goes with every `GET /api/events` answer
    /// (`{"events": [...], "latestSeq": N, "epoch": "..."}`); `web` serves the static dashboard; `sinks` answers
    /// `GET /api/sinks` and makes `/healthz` say `degraded` while a sink is down.
    public static func router(pipeline: EventPipeline, metrics: any MetricsExposing, store: any EventStore,
                              sinks: SinkStatus, hub: SSEHub, web: StaticFiles?, simulations: SimulationRuns = .none,
                              ingestLimiter: RateLimiter, limits: Limits = Limits()) -> Router {
        var router = Router()
        router.health(downSinks: sinks.down)
        router.get("/metrics") { request in
            let (contentType, body) = metrics.exposition(accept: request.header("accept"))
            return Response(status: 200, headers: [("Content-Type", contentType), ("Cache-Control", "no-store")], body: body)
        }
        router.get("/api/sinks") { _ in .json(sinks.json()) }
        let query = CallQuery(window: limits.queryWindow, bounds: limits.placements, cache: CallCache(limits: limits.calls))
        router.get("/api/events") { request in
            var since: UInt64?
            if let s = request.query("since"), !s.isEmpty {
                guard let v = UInt64(s) else { return .error(400, "since: expected a sequence number, got \(JSONValue.string(s).jsonText)") }
                since = v
            }
            let limit: Int
            switch pageLimit(request, default: 100, max: limits.maxEventsPerPage) {
            case .success(let v): limit = v
            case .failure(let error): return .error(400, error.message)
            }
            let filter: CallFilter
            do throws(CallQueryError) { filter = try CallFilter.parse({ request.query($0) }, now: WallClock.now()) } catch { return .error(400, error.message) }
            let name = nonEmpty(request.query("name"))
            let events = filter.placement == nil && !filter.needsCalls
                ? store.events(since: since, limit: limit, run: filter.run, placement: nil, name: name)
                : query.events(in: store, filter: filter, since: since, limit: limit, name: name)
            // The hub's epoch with the page, so a client sees when seq numbering started again.
            var page = Envelope.pageJSON(events, latestSeq: store.latestSeq)
            page.removeLast()
            page += ",\"epoch\":\"\(hub.epoch)\"}"
            return .jsonText(page)
        }
        router.get("/api/calls") { request in
            let limit: Int
            switch pageLimit(request, default: 50, max: limits.maxCallsPerPage) {
            case .success(let v): limit = v
            case .failure(let error): return .error(400, error.message)
            }
            let filter: CallFilter
            do throws(CallQueryError) { filter = try CallFilter.parse({ request.query($0) }, now: WallClock.now()) } catch { return .error(400, error.message) }
            let result = query.calls(in: store, filter: filter, limit: limit)
            guard case .object(var body) = result.jsonValue else { return .error(500, "calls query gave no object") }
            body["latestSeq"] = store.latestSeq.map { .number(Double($0)) } ?? .null
            body["epoch"] = .string(hub.epoch)
            return .json(.object(body))
        }
        router.get("/api/calls/{trace}/scenario") { request in
            // The scenario that reproduces a stored call (`flowscope reproduce`), from the query window of every run.
            let trace = request.parameter("trace") ?? ""
            let recording = Recording(query.read(store, run: nil).events)
            switch recording.scenario(trace: trace, session: ["1", "true"].contains(request.query("session") ?? "")) {
            case .success(let reproduced):
                return Response(status: 200, headers: [("Content-Type", "application/json; charset=utf-8"), ("Cache-Control", "no-store"),
                                                       ("Content-Disposition", "attachment; filename=\"reproduce-\(trace.prefix(32)).json\"")],
                                body: Array(reproduced.text.utf8))
            case .failure(let refusal):
                let status = refusal.reason == .unknownTrace ? 404 : 422
                return .json(["error": ["status": .number(Double(status)), "message": .string(refusal.message),
                                        "reason": .string(refusal.reason.rawValue)]], status: status)
            }
        }
        router.get("/api/events/stream") { _ in .eventStream(hub) }
        router.get("/api/placements") { request in
            // The read model's statistics over the matching calls: no filter and a filter that
            // excludes nothing answer the same.
            let filter: CallFilter
            do throws(CallQueryError) { filter = try CallFilter.parse({ request.query($0) }, now: WallClock.now()) } catch { return .error(400, error.message) }
            return .json(query.placements(in: store, filter: filter).jsonValue)
        }
        let tests = TestRunIndex(store: store)
        router.get("/api/runs") { request in
            let runQuery: RunQuery
            do throws(CallQueryError) { runQuery = try RunQuery({ request.query($0) }, maxLimit: limits.maxRunsPerPage) } catch {
                return .error(400, error.message)
            }
            if let cursor = runQuery.cursor, !RunPage.isCursor(cursor) {
                return .error(400, "cursor: expected the `next` of a previous answer, got \(JSONValue.string(String(cursor.prefix(80))).jsonText)")
            }
            var summaries = store.runSummaries()
            let known = Set(summaries.map(\.id))
            var simulationFields: [String: [String: JSONValue]] = [:]
            for simulation in simulations.list() {
                guard let id = simulation["id"]?.stringValue, !known.contains(id) else { continue }
                let savedAt = simulation["savedAt"]?.numberValue ?? 0
                summaries.append(RunSummary(id: id, kind: .simulation, firstTs: savedAt, lastTs: savedAt, events: 0, fetches: 0, errors: 0))
                simulationFields[id] = simulation.objectValue?.filter { _, v in
                    switch v { case .array, .object: false; default: true }
                }
            }
            let page = RunPage(summaries: summaries, tests: tests.current, query: runQuery)
            return .json(page.jsonValue(extra: simulationFields))
        }
        router.get("/api/invocations") { request in
            let limit: Int
            switch pageLimit(request, default: 20, max: limits.maxRunsPerPage) {
            case .success(let v): limit = v
            case .failure(let error): return .error(400, error.message)
            }
            let all = tests.current.invocationSummaries
            return .json(["invocations": .array(all.prefix(limit).map(\.jsonValue)), "total": .number(Double(all.count))])
        }
        router.get("/api/runs/{id}") { request in
            let id = request.parameter("id") ?? ""
            if let detail = store.runDetail(id: id) {
                var filter = CallFilter()
                filter.run = id
                return .json(detail.jsonValue(placements: query.placements(in: store, filter: filter)))
            }
            if let simulation = simulations.find(id) { return .json(simulation) }
            return .error(404, "no run \(JSONValue.string(id).jsonText)")
        }
        router.post("/api/ingest", requiresToken: true, rateLimit: ingestLimiter) { request in
            switch Ingest.decode(request.body, maxEvents: limits.maxIngestEvents) {
            case .success(let envelopes):
                guard envelopes.count <= limits.ingestQueueLimit else {
                    return .error(413, "\(envelopes.count) events in one request; at most \(limits.ingestQueueLimit) fit a sink's queue (server.limits.ingestQueueLimit)")
                }
                // All or nothing: a batch is acknowledged only when every durable sink has room for it.
                switch pipeline.ingest(envelopes, ifRoomWithin: limits.ingestQueueLimit) {
                case .accepted:
                    return .json(["accepted": .number(Double(envelopes.count))], status: 202)
                case .refused(let sinks):
                    let which = sinks.count == 1 ? "sink \(sinks[0]) is" : "sinks \(sinks.joined(separator: ", ")) are"
                    return .serviceUnavailable(retryAfter: limits.ingestRetryAfter, "\(which) behind; nothing of this batch was stored")
                case .stopped:
                    return .serviceUnavailable(retryAfter: limits.ingestRetryAfter, "the server is stopping; nothing of this batch was stored")
                }
            case .failure(let error):
                return .error(error.status, error.message)
            }
        }
        if let web { router.serveStatic(web) }
        return router
    }

    /// Feeds the SSE hub from the store: every new envelope is published with its seq as id.
    /// Returns the function that stops the feed (call it on stop).
    public static func connectStream(store: any EventStore, hub: SSEHub) -> @Sendable () -> Void {
        store.follow { batch in
            for envelope in batch { hub.publish(id: envelope.seq, data: envelope.jsonLine) }
        }
    }

    /// The replay for Last-Event-ID: the events after `seq` the store still holds.
    public static func replay(store: any EventStore, limit: Int = 5000) -> SSEHub.Replay {
        { seq in store.events(since: seq, limit: limit, run: nil, placement: nil, name: nil).map { ($0.seq, $0.jsonLine) } }
    }

    private static func nonEmpty(_ s: String?) -> String? { s.flatMap { $0.isEmpty ? nil : $0 } }

    /// `limit=`: a whole number >= 1, capped at `max`; `default` when absent.
    private static func pageLimit(_ request: Request, default value: Int, max: Int) -> Result<Int, CallQueryError> {
        guard let l = request.query("limit"), !l.isEmpty else { return .success(value) }
        guard let v = Int(l), v >= 1 else { return .failure(CallQueryError("limit", "a whole number >= 1", l)) }
        return .success(min(v, max))
    }
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
        // A UTF-8 byte order mark may precede either form (JSON5.parse skips it).
        let first = body.dropFirst(body.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0).first { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 }
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
