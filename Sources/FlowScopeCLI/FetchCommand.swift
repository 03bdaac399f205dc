import FlowFetch
import FlowJSON
import FlowScopeTools
import FlowSim
import FlowTLS
import Synchronization
import Foundation

let fetchCommand = Command(spec: CommandSpec(
    name: "fetch", summary: "Runs one getFlow against a real backend over HTTP(S) and prints the result and its timeline.",
    usage: "fetch PLACEMENT --backend URL [--profile ID] [--policy P] [--load-timeout T] [--cache-dir D] [--ca F] [--json]",
    options: [.init("backend", value: "URL", "the REST backend, e.g. http://127.0.0.1:8080 (required)"),
              .init("profile", value: "ID", "the profile id sent as X-Profile-Id (default: flowscope-cli)"),
              .init("policy", value: "P", "reloadRevalidatingCacheData (default), returnCacheDataElseLoad or maxAge:SECONDS"),
              .init("load-timeout", value: "T", "getFlow's loadTimeout in seconds (default 5)"),
              .init("cache-dir", value: "D", "keep the flow, layout and asset caches in D (default: memory only)"),
              .init("ca", value: "F", "trust only the PEM CA (or self-signed certificate) F for an https backend"),
              .init("json", "print one JSON object shaped like `flowscope run --json` output, with the call's requests and events")],
    positionals: 1...1,
    details: "Exit status: 0 when getFlow returns a flow, 1 when it throws, 2 for bad usage."
)) { args, io in
    func usage(_ message: String) -> Int32 {
        io.err("flowscope fetch: \(message)\n")
        return ExitStatus.usage
    }
    let placement = args.positionals[0]
    guard let backendText = args.value("backend") else { return usage("--backend URL is required (e.g. --backend http://127.0.0.1:8080)") }
    guard let url = URL(string: backendText), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
          url.host?.isEmpty == false else {
        return usage("--backend \(backendText): expected http://host[:port] or https://host[:port]")
    }
    let policy: FetchPolicy
    switch FetchPolicyArgument.parse(args.value("policy")) {
    case .success(let p): policy = p
    case .failure(let e): return usage(e.message)
    }
    var loadTimeout = Budget.defaultLoadTimeout
    if let t = args.value("load-timeout") {
        guard let v = SecondsLimit.decimal(t), v >= 0, v <= SecondsLimit.maxSeconds else {
            return usage("--load-timeout \(t): expected a number of seconds from 0 to \(SecondsLimit.maxText)")
        }
        loadTimeout = v
    }
    let profileId = args.value("profile") ?? "flowscope-cli"
    guard !profileId.isEmpty else { return usage("--profile: expected a non-empty profile id") }
    // It travels in a header field: a control character would be dropped or cut there, silently.
    guard !profileId.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
        return usage("--profile: expected a profile id without control characters (it is sent in the X-Profile-Id header)")
    }

    var disk: FlowDiskStore = InMemoryDiskStore()
    var layouts: LayoutStore = InMemoryLayoutStore()
    var assets: AssetDiskCache?
    if let dir = args.value("cache-dir") {
        // An empty value would put the caches at /flows, /layouts and /assets.
        guard !dir.isEmpty else { return usage("--cache-dir: expected a directory, got an empty value") }
        do throws(FileStoreError) {
            disk = try FileFlowStore(directory: dir + "/flows")
            layouts = try FileLayoutStore(directory: dir + "/layouts")
            assets = try AssetDiskCache(directory: dir + "/assets")
        } catch {
            return usage("--cache-dir: \(error)")
        }
    }
    if let ca = args.value("ca"), let problem = ServeChecks.fileProblem(ca) {
        return usage("--ca \(FlowScopeConfig.absolutePath(ca)): \(problem)")
    }
    let backend: HTTPBackend
    // --ca: OpenSSL trusts the CA, since URLSession on Linux cannot (the same on every platform).
    if args.value("ca") != nil { TLSTransport.install() }
    do throws(HTTPBackendError) {
        backend = try HTTPBackend(baseURL: url, caFile: args.value("ca"), assets: assets)
    } catch {
        return usage(error.caFile.map { "--ca \($0): \(error.problem)" } ?? error.message)
    }

    let log = EventLog()
    let client = FlowClient(profile: Profile(id: profileId), backend: backend, disk: disk, layouts: layouts, events: log)
    let result: Result<Flow, FlowError>
    do throws(FlowError) {
        result = .success(try await client.getFlow(placementId: placement, fetchPolicy: policy, loadTimeout: loadTimeout))
    } catch {
        result = .failure(error)
    }
    let timeline = FlowTimeline(events: log.events)
    let message: String
    switch result {
    case .success: message = ""
    case .failure(let error): message = FetchErrorText.message(for: error, events: log.events, caFile: args.value("ca"))
    }
    if args.flag("json") {
        var o = timeline.json()
        o["name"] = .string("fetch \(placement)")
        o["backend"] = .string(url.absoluteString)
        o["profile"] = .string(profileId)
        if case .failure(let error) = result, case .array(var results) = o["results"], !results.isEmpty,
           case .object(var first) = results[0] {
            first["error"] = ["code": .number(Double(error.code.rawValue)), "name": .string(error.code.name), "message": .string(message)]
            results[0] = .object(first)
            o["results"] = .array(results)
        }
        io.out(JSONValue.object(o).jsonText + "\n")
    } else {
        switch result {
        case .success(let flow):
            io.out("\(placement): \(flow.source.rawValue) \(flow.variationId) (\(flow.audienceName))"
                   + (flow.targetingLost ? " targetingLost" : "") + "\n")
        case .failure(let error):
            io.out("\(placement): error \(error.code.rawValue) \(error.code.name): \(message)\n")
        }
        io.out(timeline.text())
    }
    if case .success = result { return ExitStatus.success }
    return ExitStatus.failure
}

/// The message of fetch's error line: the call's own, except for a TLS failure, which says what
/// happened and what to do about it.
enum FetchErrorText {
    static func message(for error: FlowError, events: [EngineEvent], caFile: String?) -> String {
        let lastOutcome = events.last { $0.name == .requestEnd }?.attrs["outcome"]?.stringValue
        guard error.code == .networkFailed, lastOutcome == "tls" else { return error.message }
        if let caFile {
            return "the server's certificate was not trusted by --ca \(caFile) (TLS); "
                + "pass the certificate the server presents, or the CA that signed it"
        }
        return "the server's certificate was not trusted (TLS); pass --ca FILE with the server's certificate "
            + "or its CA, e.g. .flowscope/tls/cert.pem for a FlowScope server or stub backend"
    }
}

/// `--policy` values: `reloadRevalidatingCacheData`, `returnCacheDataElseLoad`, `maxAge:SECONDS`.
enum FetchPolicyArgument {
    static func parse(_ text: String?) -> Result<FetchPolicy, UsageError> {
        guard let text else { return .success(.reloadRevalidatingCacheData) }
        switch text {
        case "reloadRevalidatingCacheData": return .success(.reloadRevalidatingCacheData)
        case "returnCacheDataElseLoad": return .success(.returnCacheDataElseLoad)
        default:
            if text.hasPrefix("maxAge:"), let v = SecondsLimit.decimal(text.dropFirst(7)), v >= 0, v <= SecondsLimit.maxSeconds {
                return .success(.returnCacheDataIfNotExpiredElseLoad(maxAge: v))
            }
            return .failure(UsageError("--policy \(text): expected reloadRevalidatingCacheData, returnCacheDataElseLoad or maxAge:SECONDS (0 to \(SecondsLimit.maxText))"))
        }
    }
}

/// The events of one fetch, in order.
final class EventLog: EngineEventSink {
    private let storage = Mutex<[EngineEvent]>([])
    func receive(_ event: EngineEvent) { storage.withLock { $0.append(event) } }
    var events: [EngineEvent] { storage.withLock { $0 } }
}
