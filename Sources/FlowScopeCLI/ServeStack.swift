import FlowEvents
import FlowFetch
import FlowJSON
import FlowScopeServer
import FlowSim
import Foundation
import MemorySink
import MetricsSink
import SQLiteSink

/// Everything `flowscope serve` runs: sinks from the config, the pipeline, the HTTPS server with the
/// dashboard API, the live stream, and demo traffic. Tests start it in-process on port 0.
final class ServeStack: Sendable {
    /// Each sink's queue bound in envelopes (the pipeline's default); `server.limits.ingestQueueLimit` is at most this.
    static let queueCapacity = 65_536
    let server: HTTPSServer
    let pipeline: EventPipeline
    let metrics: MetricsSink
    let memory: MemorySink
    /// What the dashboard API reads: the memory sink, layered over the first sqlite sink when the
    /// config has one (runs it stored before a restart, or that memory forgot, stay viewable).
    let store: any EventStore
    let hub: SSEHub
    let token: AuthToken
    let tls: TLSMaterial?
    let demo: DemoTraffic?
    private let unfollow: @Sendable () -> Void

    /// What to override from the command line.
    struct Overrides: Sendable {
        var bind: String?
        var port: Int?
        /// `--state-dir`: replaces `server.stateDir`.
        var stateDir: String?
        var noDemo = false
        var insecureHTTP = false
        var log: @Sendable (String) -> Void = { _ in }
        /// `FLOWSCOPE_DEBUG_HTTP=1`: `log` also gets libmicrohttpd's messages about clients that
        /// disconnect or fail the TLS handshake.
        var logClientErrors = false
    }

    /// A problem that stops the server from starting: one line to print.
    struct StartError: Error, CustomStringConvertible {
        var description: String
    }

    init(config: FlowScopeConfig, overrides: Overrides) throws(StartError) {
        // Everything check-config checks, before anything is created.
        let checked = try ServeChecks(config: config, overrides: overrides)
        let stateDir = checked.stateDir
        if let problem = PrivateDirectory.create(stateDir) { throw StartError(description: problem) }
        // server.tls.dir may be nested anywhere: it and its missing parents are made like the state directory.
        if case .generated(let directory) = checked.tls, let problem = PrivateDirectory.create(directory) {
            throw StartError(description: problem)
        }
        do throws(ServerFileError) {
            switch checked.tls {
            case .none: tls = nil
            case .configured(let cert, let key): tls = try TLSMaterial.load(certPath: cert, keyPath: key)
            case .generated(let directory):
                tls = try TLSMaterial.loadOrCreate(tlsDirectory: directory, hosts: TLSMaterial.hosts(forBind: overrides.bind ?? config.server.bind))
            }
            if let configured = config.server.token {
                token = try AuthToken(configured: configured)
            } else {
                token = try AuthToken.loadOrCreate(stateDir: stateDir)
            }
        } catch {
            throw StartError(description: error.description)
        }

        // The configured web root (checked: it has an index.html), else the embedded dashboard.
        let web = checked.web

        let configured: [any EventSink]
        do {
            configured = try SinkRegistry.current.makeSinks(config.sinks, stateDirectory: stateDir, version: flowScopeVersion,
                                                            configDirectory: config.directory)
        } catch {
            throw StartError(description: "\(config.file ?? "config"): \(error)")
        }
        var sinks: [any EventSink] = []
        for planned in Self.sinkPlan(config.sinks) {
            switch planned {
            case .configured(let index, _): sinks.append(configured[index])
            case .addedMetrics:
                do { sinks.append(try MetricsSink(version: flowScopeVersion)) } catch {
                    for sink in configured { sink.close() }
                    throw StartError(description: error.message)
                }
            case .addedMemory: sinks.append(MemorySink())
            }
        }
        guard let metrics = sinks.lazy.compactMap({ $0 as? MetricsSink }).first,
              let memory = sinks.lazy.compactMap({ $0 as? MemorySink }).first else {
            for sink in sinks { sink.close() }
            throw StartError(description: "\(config.file ?? "config"): $.sinks: the metrics and memory sinks the dashboard reads are missing")
        }
        self.metrics = metrics
        self.memory = memory
        pipeline = EventPipeline(run: "live", sinks: sinks, queueCapacity: Self.queueCapacity)
        metrics.collectSinkStats(from: pipeline)
        // The first sqlite sink is the archive: the runs memory does not hold are read from it, and
        // the epoch it writes with every row is the one the dashboard sees.
        let archive = sinks.lazy.compactMap({ $0 as? SQLiteSink }).first
        if let archive {
            store = LayeredEventStore(primary: memory, archive: archive)
        } else {
            store = memory
        }
        hub = SSEHub(epoch: archive?.epoch, replay: DashboardAPI.replay(store: memory))
        unfollow = DashboardAPI.connectStream(store: memory, hub: hub)

        let pipeline = self.pipeline
        var apiLimits = DashboardAPI.Limits()
        apiLimits.ingestQueueLimit = config.server.ingestQueueLimit
        let router = DashboardAPI.router(
            pipeline: pipeline, metrics: metrics, store: store, sinks: SinkStatus { [weak pipeline] in pipeline?.stats() ?? [] },
            hub: hub, web: web,
            simulations: SimulationStore(directory: stateDir + "/simulations").runs,
            ingestLimiter: RateLimiter(ratePerSecond: config.server.ingestRatePerSecond, burst: config.server.ingestBurst),
            limits: apiLimits)
        let limits = ServerLimits(maxConnections: config.server.maxConnections, maxConnectionsPerIP: config.server.maxConnectionsPerIP,
                                  maxHeaderBytes: config.server.maxHeaderBytes, maxBodyBytes: config.server.maxBodyBytes,
                                  connectionTimeoutSeconds: config.server.connectionTimeout)
        let serverConfig = ServerConfig(bind: overrides.bind ?? config.server.bind, port: overrides.port ?? config.server.port,
                                        tls: tls, insecureHTTP: overrides.insecureHTTP, token: token, limits: limits,
                                        log: overrides.log, logClientErrors: overrides.logClientErrors)
        if let scenario = checked.demo, let cacheDir = checked.cacheDir {
            // The engine section configures the sessions' clients; the returning users' caches live
            // under the cache directory, where the next start finds them.
            let engine = DemoTraffic.Engine(requestTimeout: config.engine.requestTimeout, fallback: checked.fallback,
                                            cacheDirectory: cacheDir, cacheMaxBytes: config.engine.cacheMaxBytes)
            do throws(FileStoreError) {
                if let population = checked.population {
                    demo = try DemoTraffic(population: population, sessionsPerSecond: config.demo.rate, events: pipeline.sink(run: "live"),
                                           engine: engine)
                } else {
                    demo = try DemoTraffic(scenario: scenario, sessionsPerSecond: config.demo.rate, events: pipeline.sink(run: "live"),
                                           engine: engine)
                }
            } catch {
                pipeline.shutdown()
                throw StartError(description: "\(config.file ?? FlowScopeConfig.embeddedName): $.engine.cacheDir: \(error.description)")
            }
        } else {
            demo = nil
        }
        do {
            server = try HTTPSServer(config: serverConfig, router: router)
            try server.start()
        } catch {
            pipeline.shutdown()
            throw StartError(description: "cannot start the server on \(serverConfig.bind):\(serverConfig.port): \(error.message)")
        }

        demo?.start()
    }

    /// A sink `serve` runs: one of the config's enabled entries, or one it adds for the dashboard.
    enum PlannedSink: Sendable, Equatable {
        /// The config's enabled entry number `index` (counting enabled entries only), of `type`.
        case configured(index: Int, type: String)
        /// A metrics sink added because the config enables none (/metrics and the dashboard read it).
        case addedMetrics
        /// A memory sink added because the config enables none (the dashboard API reads it).
        case addedMemory

        /// The sink's type, as the config names it.
        var type: String {
            switch self {
            case .configured(_, let type): return type
            case .addedMetrics: return "metrics"
            case .addedMemory: return "memory"
            }
        }
    }

    /// The sinks `serve` runs, in order: the config's enabled entries (`enabled` not false), with a
    /// metrics sink put first and a memory sink second when the config enables none of that type.
    /// `serve` builds exactly these; `check-config` prints their types.
    static func sinkPlan(_ sinks: JSONValue) -> [PlannedSink] {
        let enabled = (sinks.arrayValue ?? []).filter { $0["enabled"]?.boolValue != false }
        var plan = enabled.enumerated().map { PlannedSink.configured(index: $0.offset, type: $0.element["type"]?.stringValue ?? "") }
        if !plan.contains(where: { $0.type == "metrics" }) { plan.insert(.addedMetrics, at: 0) }
        if !plan.contains(where: { $0.type == "memory" }) { plan.insert(.addedMemory, at: min(1, plan.count)) }
        return plan
    }

    /// Stops demo traffic and the server, then drains every sink (nothing recorded is lost).
    func stop() {
        demo?.stop()
        unfollow()
        hub.closeAll()
        server.stop()
        pipeline.shutdown()
    }

}

/// Simulation results saved by `flowscope simulate` into the state directory, one JSON file per run.
struct SimulationStore: Sendable {
    let directory: String

    /// Saves a run summary as `<directory>/<id>.json`.
    func save(id: String, summary: JSONValue) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try Data(summary.jsonText.utf8).write(to: URL(fileURLWithPath: file(of: id)), options: .atomic)
    }

    /// `id`, or `id-2`, `id-3`, ... when a run is already saved under it (two runs in the same second
    /// with the same seed), so that a run never replaces another.
    func unusedID(_ id: String) -> String {
        var candidate = id, n = 1
        while FileManager.default.fileExists(atPath: file(of: candidate)) {
            n += 1
            candidate = "\(id)-\(n)"
        }
        return candidate
    }

    private func file(of id: String) -> String {
        let safe = String(id.map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == ":" || $0 == "_" ? $0 : "_" })
        return "\(directory)/\(safe).json"
    }

    /// The saved runs, newest first (at most 50 are listed).
    var runs: SimulationRuns {
        let directory = self.directory
        @Sendable func load(_ file: String) -> JSONValue? {
            guard let data = FileManager.default.contents(atPath: "\(directory)/\(file)"), data.count < 16 << 20 else { return nil }
            return try? JSON5.parse(bytes: [UInt8](data))
        }
        return SimulationRuns(
            list: {
                let files = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.hasSuffix(".json") }
                // Newest first: by the time the file was written, then by name (ids start with their time).
                let written = { (file: String) -> Date in
                    let attributes = try? FileManager.default.attributesOfItem(atPath: "\(directory)/\(file)")
                    return attributes?[.modificationDate] as? Date ?? .distantPast
                }
                let newestFirst = files.map { (file: $0, at: written($0)) }
                    .sorted { $0.at != $1.at ? $0.at > $1.at : $0.file > $1.file }.map(\.file)
                return newestFirst.prefix(50).compactMap { file -> JSONValue? in
                    guard case .object(var o)? = load(file) else { return nil }
                    o["strategies"] = nil
                    o["kind"] = "simulation"
                    o["savedAt"] = .number(written(file).timeIntervalSince1970)
                    return .object(o)
                }
            },
            find: { id in
                let files = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
                for file in files where file.hasSuffix(".json") {
                    if let run = load(file), run["id"]?.stringValue == id { return run }
                }
                return nil
            })
    }
}
