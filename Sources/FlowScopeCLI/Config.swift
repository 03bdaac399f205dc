import ConsoleSink
import ExecSink
import FlowEvents
import FlowJSON
import FlowScopeServer
import FlowSim
import Foundation
import JSONLinesSink
import MemorySink
import MetricsSink
import OTLPSink
import SQLiteSink

/// config/flowscope.json5, checked: every key known, every value of the right type, each error
/// naming the file and the JSON path.
struct FlowScopeConfig: Sendable {
    struct Server: Sendable {
        var bind = "127.0.0.1"
        var port = 8443
        var stateDir = ".flowscope"
        var tlsCert: String?
        var tlsKey: String?
        var tlsDir: String?
        var token: String?
        var webRoot: String?
        var maxConnections = 512
        var maxConnectionsPerIP = 32
        var maxHeaderBytes = 32 * 1024
        var maxBodyBytes = 1 << 20
        var connectionTimeout = 30
        var ingestRatePerSecond = 50.0
        var ingestBurst = 100
        /// Ingest accepts a batch only while every durable sink's queue would then hold at most this many events.
        var ingestQueueLimit = 32_768
        /// Seconds a graceful stop (first SIGINT or SIGTERM) may take before flowscope exits anyway.
        var shutdownTimeout = 10.0
    }
    struct Demo: Sendable {
        var enabled = true
        /// A backend scenario file; nil plays the embedded demo backend (config/demo/backend.json5).
        var scenario: String?
        /// Sessions drawn from a population (the shape of `simulate.population`) instead of a scenario.
        var population: Population?
        var rate = 2.0
    }
    struct Engine: Sendable {
        var requestTimeout = 30.0
        /// The demo's returning users' caches; nil is `<state directory>/cache`.
        var cacheDir: String?
        var cacheMaxBytes = 20 * 1024 * 1024
        var fallbackFile: String?
    }

    /// The config file read, or nil for the embedded default config.
    var file: String?
    /// The absolute directory relative paths resolve against (the config file's); nil for the
    /// embedded default config. Sinks get it as `SinkContext.configDirectory`.
    var directory: String?
    var server = Server()
    /// The `sinks` list as written (built through the sink registry).
    var sinks: JSONValue = [["type": "metrics"], ["type": "memory"]]
    var demo = Demo()
    var engine = Engine()
    var simulate = SimulationConfig.standard

    /// How error messages name the embedded default config.
    static let embeddedName = "(built-in config/flowscope.json5)"

    /// Reads and checks a config file; nil reads the embedded default (identical to the repository's
    /// config/flowscope.json5). Relative paths in a file resolve against the file's directory; in the
    /// embedded default, against the working directory.
    static func load(path: String?) throws(JSONInputError) -> FlowScopeConfig {
        guard let path else {
            do throws(JSONInputError) {
                return try decode(JSONCursor(try JSON5.parse(EmbeddedFiles.defaultConfig)))
            } catch {
                throw error.inFile(embeddedName)
            }
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw JSONInputError(file: absolutePath(path), path: "$", message: ServeChecks.whyUnreadable(path))
        }
        guard let text = String(bytes: data, encoding: .utf8) else {
            throw JSONInputError(file: path, path: "$", message: "the file is not UTF-8 text")
        }
        do throws(JSONInputError) {
            let base = FilePaths.directory(of: absolutePath(path))
            var config = try decode(JSONCursor(try JSON5.parse(text)), base: base)
            config.file = path
            return config
        } catch {
            throw error.inFile(path)
        }
    }

    /// `path` made absolute against the working directory (or kept when already absolute).
    static func absolutePath(_ path: String) -> String {
        path.hasPrefix("/") ? path : (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(path)
    }

    /// Decodes a config. `base`: the directory relative paths resolve against (the config file's);
    /// nil keeps them relative to the working directory.
    static func decode(_ root: JSONCursor, base: String? = nil) throws(JSONInputError) -> FlowScopeConfig {
        func resolve(_ path: String) -> String {
            guard let base, !path.hasPrefix("/") else { return path }
            return ((base as NSString).appendingPathComponent(path) as NSString).standardizingPath
        }
        var config = FlowScopeConfig()
        config.directory = base
        let o = try root.object()
        try o.rejectUnknownKeys(allowed: ["server", "sinks", "demo", "engine", "simulate"])
        if let s = o.optional("server") {
            let so = try s.object()
            try so.rejectUnknownKeys(allowed: ["bind", "port", "stateDir", "tls", "auth", "limits", "webRoot", "shutdownTimeout"])
            if let v = so.optional("bind") {
                let bind = try v.nonEmptyString()
                if let problem = ServerConfig.bindProblem(bind) { throw v.error(problem) }
                config.server.bind = bind
            }
            if let v = so.optional("port") { config.server.port = try int(v, 0...65535) }
            if let v = so.optional("stateDir") { config.server.stateDir = resolve(try v.nonEmptyString()) }
            if let v = so.optional("webRoot") { config.server.webRoot = resolve(try v.nonEmptyString()) }
            if let v = so.optional("shutdownTimeout") {
                config.server.shutdownTimeout = try positive(v)
                guard config.server.shutdownTimeout <= 3600 else { throw v.expected("a number of seconds > 0 and <= 3600") }
            }
            if let t = so.optional("tls") {
                let to = try t.object()
                try to.rejectUnknownKeys(allowed: ["cert", "key", "dir"])
                config.server.tlsCert = (try to.optional("cert")?.nonEmptyString()).map(resolve)
                config.server.tlsKey = (try to.optional("key")?.nonEmptyString()).map(resolve)
                config.server.tlsDir = (try to.optional("dir")?.nonEmptyString()).map(resolve)
                if (config.server.tlsCert == nil) != (config.server.tlsKey == nil) {
                    throw t.error("give both \"cert\" and \"key\", or neither (a certificate is then generated)")
                }
            }
            if let a = so.optional("auth") {
                let ao = try a.object()
                try ao.rejectUnknownKeys(allowed: ["token"])
                if let v = ao.optional("token") {
                    let token = try v.nonEmptyString()
                    guard token.utf8.count >= 16 else { throw v.expected("a token of at least 16 characters") }
                    config.server.token = token
                }
            }
            if let l = so.optional("limits") {
                let lo = try l.object()
                try lo.rejectUnknownKeys(allowed: ["maxConnections", "maxConnectionsPerIP", "maxHeaderBytes", "maxBodyBytes",
                                                   "connectionTimeout", "ingestRatePerSecond", "ingestBurst", "ingestQueueLimit"])
                if let v = lo.optional("maxConnections") { config.server.maxConnections = try int(v, 1...100_000) }
                if let v = lo.optional("maxConnectionsPerIP") { config.server.maxConnectionsPerIP = try int(v, 1...100_000) }
                if let v = lo.optional("maxHeaderBytes") { config.server.maxHeaderBytes = try int(v, 4096...(1 << 20)) }
                if let v = lo.optional("maxBodyBytes") { config.server.maxBodyBytes = try int(v, 1...(64 << 20)) }
                if let v = lo.optional("connectionTimeout") { config.server.connectionTimeout = try int(v, 1...3600) }
                if let v = lo.optional("ingestRatePerSecond") { config.server.ingestRatePerSecond = try positive(v) }
                if let v = lo.optional("ingestBurst") { config.server.ingestBurst = try int(v, 1...1_000_000) }
                // At most the sinks' queue capacity: a batch that cannot fit a queue could never be accepted.
                if let v = lo.optional("ingestQueueLimit") { config.server.ingestQueueLimit = try int(v, 1...ServeStack.queueCapacity) }
            }
        }
        if let s = o.optional("sinks") {
            // A sink's relative `path` option is relative to the config file too.
            config.sinks = .array(try s.array().map { entry -> JSONValue in
                guard case .object(var options) = entry.value, let path = options["path"]?.stringValue, !path.isEmpty else { return entry.value }
                options["path"] = .string(resolve(path))
                return .object(options)
            })
        }
        if let d = o.optional("demo") {
            let dobj = try d.object()
            try dobj.rejectUnknownKeys(allowed: ["enabled", "scenario", "population", "rate"])
            if let v = dobj.optional("enabled") { config.demo.enabled = try v.bool() }
            if dobj.optional("scenario") != nil, dobj.optional("population") != nil {
                throw d.error("give \"scenario\" (a backend scenario file) or \"population\" (sessions drawn from a population), not both")
            }
            if let v = dobj.optional("scenario") { config.demo.scenario = resolve(try v.nonEmptyString()) }
            if let v = dobj.optional("population") { config.demo.population = try SimulationConfig.decodePopulation(v) }
            if let v = dobj.optional("rate") { config.demo.rate = try positive(v) }
        }
        if let e = o.optional("engine") {
            let eo = try e.object()
            try eo.rejectUnknownKeys(allowed: ["requestTimeout", "cacheDir", "cacheMaxBytes", "fallbackFile"])
            if let v = eo.optional("requestTimeout") { config.engine.requestTimeout = try positive(v) }
            if let v = eo.optional("cacheDir") { config.engine.cacheDir = resolve(try v.nonEmptyString()) }
            if let v = eo.optional("cacheMaxBytes") { config.engine.cacheMaxBytes = try int(v, 1...Int.max) }
            if let v = eo.optional("fallbackFile") { config.engine.fallbackFile = resolve(try v.nonEmptyString()) }
        }
        if let s = o.optional("simulate") { config.simulate = try SimulationConfig.decode(s) }
        try SinkRegistry.current.validateSinks(config.sinks, stateDirectory: config.server.stateDir, version: flowScopeVersion,
                                               configDirectory: base)
        return config
    }

    private static func int(_ c: JSONCursor, _ range: ClosedRange<Int>) throws(JSONInputError) -> Int {
        let v = try c.int()
        guard range.contains(v) else { throw c.expected("a whole number from \(range.lowerBound) to \(range.upperBound)") }
        return v
    }

    private static func positive(_ c: JSONCursor) throws(JSONInputError) -> Double {
        let v = try c.double()
        guard v > 0 else { throw c.expected("a number > 0") }
        return v
    }
}

extension FlowScopeConfig {
    /// The config a command starts from: the file at `path` (checked first: not found, a directory,
    /// not readable, with its resolved path and the `flag` that named it) or, for nil, the built-in
    /// one. Nil after printing the one line that says what is wrong.
    static func load(_ path: String?, flag: String?, command: String, io: Output) -> FlowScopeConfig? {
        if let path, let problem = ServeChecks.fileProblem(path) {
            io.err("flowscope \(command): \(flag.map { $0 + " " } ?? "")\(absolutePath(path)): \(problem)\n")
            return nil
        }
        do throws(JSONInputError) {
            return try load(path: path)
        } catch {
            io.err("flowscope \(command): \(error.description)\n")
            return nil
        }
    }
}

/// Every built-in sink type: what `flowscope` registers before a distribution's own.
public let builtInSinkFactories: [any SinkFactory] = [
    MetricsSink.Factory(), MemorySink.Factory(), SQLiteSink.Factory(), JSONLinesSink.Factory(), OTLPSink.Factory(),
    ExecSink.Factory(), ConsoleSink.Factory(),
]

extension SinkRegistry {
    /// The sink types of the command line running now: the built-in ones, plus a distribution's
    /// (see `CommandLine.run(_:output:sinks:)`).
    @TaskLocal static var current: SinkRegistry = {
        // The built-in types have distinct names, so this cannot fail.
        (try? SinkRegistry(builtInSinkFactories)) ?? SinkRegistry()
    }()
}

let checkConfigCommand = Command(spec: CommandSpec(
    name: "check-config", summary: "Runs every check serve makes before it starts, without starting or creating anything.",
    usage: "check-config [F]", positionals: 0...1,
    details: """
    F defaults to the built-in config (identical to the repository's \(defaultConfigPath)). Checked: every
    key and value, and what serve checks before it binds: the files it reads exist and are readable,
    a configured certificate and key are PEM and match, the directories it writes are writable or can
    be created, the demo scenario and the engine's fallback file parse, every sink's options are
    valid. When it says ok, serve starts. It prints the sinks serve runs: the config's enabled ones,
    with the metrics and memory sinks serve adds when the config enables none.
    Exit status: 0 when valid, 2 with one line naming the file, the key and what is wrong.
    """
)) { args, io in
    let path = args.positionals.first
    guard let config = FlowScopeConfig.load(path, flag: nil, command: "check-config", io: io) else { return ExitStatus.usage }
    do throws(ServeStack.StartError) {
        _ = try ServeChecks(config: config, overrides: ServeStack.Overrides())
    } catch {
        io.err("flowscope check-config: \(error.description)\n")
        return ExitStatus.usage
    }
    // The sinks serve will run (those it adds for the dashboard included), then those the config
    // lists with `enabled: false`.
    let on = ServeStack.sinkPlan(config.sinks).map(\.type)
    let off = (config.sinks.arrayValue ?? []).filter { $0["enabled"]?.boolValue == false }.compactMap { $0["type"]?.stringValue }
    let disabled = off.isEmpty ? "" : "; disabled: \(off.joined(separator: ", "))"
    io.out("\(path ?? FlowScopeConfig.embeddedName): ok (sinks: \(on.joined(separator: ", "))\(disabled); \(config.simulate.strategies.count) strategies)\n")
    return ExitStatus.success
}
