import FlowEvents
import FlowJSON
import FlowScopeServer
import Foundation
#if canImport(Glibc)
import Glibc
#endif

let serveCommand = Command(spec: CommandSpec(
    name: "serve", summary: "Serves the dashboard, /metrics, the JSON API, the live stream and ingest over HTTPS.",
    usage: "serve [--config F] [--state-dir D] [--bind A] [--port N] [--no-demo] [--insecure-http]",
    options: [.init("config", value: "F", "config file (default: the built-in one, identical to the repository's \(defaultConfigPath))"),
              .init("state-dir", value: "D", "state directory: certificate, token, stores (default: the config's, .flowscope)"),
              .init("bind", value: "A", "address to listen on (default: the config's, 127.0.0.1)"),
              .init("port", value: "N", "port (default: the config's, 8443; 0 picks a free one)"),
              .init("no-demo", "do not generate demo traffic"),
              .init("insecure-http", "plain HTTP instead of TLS, for local debugging only")],
    details: """
    On first start, a self-signed certificate (EC P-256; SAN localhost, 127.0.0.1, ::1) and an access
    token are created in the state directory (default .flowscope/, mode 0700; the key and the token
    mode 0600). Bound to loopback, reads are open and ingest needs the token; bound elsewhere, every
    endpoint but GET /healthz needs it.
    Everything it needs is built in (the dashboard, the default config, the demo backend): it runs
    from any directory. It checks what `check-config` checks before creating anything.
    The first SIGINT or SIGTERM stops it cleanly: every sink is drained and flushed, within
    server.shutdownTimeout (default 10 s). A second one exits at once with status 130.
    FLOWSCOPE_DEBUG_HTTP=1 also prints libmicrohttpd's messages about clients that disconnect or fail
    the TLS handshake (an event stream closed, a client that rejects the certificate).
    """
)) { args, io in
    // Flags first: a bad flag is reported before anything in the config.
    var overrides = ServeStack.Overrides()
    if let b = args.value("bind") {
        if let problem = ServerConfig.bindProblem(b) {
            io.err("flowscope serve: --bind: \(problem)\n")
            return ExitStatus.usage
        }
        overrides.bind = b
    }
    if let p = args.value("port") {
        guard let port = Int(p), (0...65535).contains(port) else {
            io.err("flowscope serve: --port expects a port number 0-65535, got \(p)\n")
            return ExitStatus.usage
        }
        overrides.port = port
    }
    if let d = args.value("state-dir") {
        guard !d.isEmpty else {
            io.err("flowscope serve: --state-dir expects a directory\n")
            return ExitStatus.usage
        }
        overrides.stateDir = d
    }
    guard let config = FlowScopeConfig.load(args.value("config"), flag: "--config", command: "serve", io: io) else {
        return ExitStatus.usage
    }
    overrides.noDemo = args.flag("no-demo")
    overrides.insecureHTTP = args.flag("insecure-http")
    overrides.log = { message in io.err("flowscope serve: \(message)\n") }
    overrides.logClientErrors = ProcessInfo.processInfo.environment["FLOWSCOPE_DEBUG_HTTP"] == "1"
    // From here a Ctrl-C during start-up stops the server as soon as it has started.
    StopSignals.install(label: "flowscope serve")
    let stack: ServeStack
    do throws(ServeStack.StartError) {
        stack = try ServeStack(config: config, overrides: overrides)
    } catch {
        io.err("flowscope serve: \(error.description)\n")
        return ExitStatus.usage
    }
    let host = displayHost(bind: stack.server.config.bind)
    let scheme = overrides.insecureHTTP ? "http" : "https"
    io.out("FlowScope \(flowScopeVersion) serving \(scheme)://\(host):\(stack.server.port)/\n")
    if let tls = stack.tls {
        io.out("  certificate \(tls.certPath)\n  SHA-256 fingerprint \(tls.fingerprint)\n")
    } else {
        io.out("  WARNING: plain HTTP (--insecure-http): do not use beyond local debugging\n")
    }
    io.out("  token \(stack.token.path ?? "(from the config)")  (ingest: Authorization: Bearer <token>)\n")
    io.out("  metrics \(scheme)://\(host):\(stack.server.port)/metrics\n")
    if let url = stack.server.browserLoginURL {
        io.out("  open in a browser (logs it in with the token): \(shownLoginURL(url, terminal: io.isTerminal, tokenFile: stack.token.path))\n")
    }
    if let tls = stack.tls {
        // What a test run needs to attach, with absolute paths: it works from any folder.
        let token = stack.token.path.map { "\"$(cat \(shellQuoted(FlowScopeConfig.absolutePath($0))))\"" } ?? "<server.auth.token of the config>"
        let attach = host == "0.0.0.0" || host == "[::]" ? "localhost" : host
        io.out("  attach tests: export FLOWSCOPE_ATTACH=\(scheme)://\(attach):\(stack.server.port) FLOWSCOPE_TOKEN=\(token) "
               + "FLOWSCOPE_CA=\(shellQuoted(FlowScopeConfig.absolutePath(tls.certPath)))\n")
    }
    io.out(stack.demo != nil ? "  demo traffic on (--no-demo to turn it off)\n" : "  demo traffic off\n")
    io.out("Stop with Ctrl-C.\n")
    await StopSignals.first()
    await StopSignals.stop(label: "flowscope serve", timeout: config.server.shutdownTimeout,
                           sinks: { stack.pipeline.unfinishedSinks() }) { stack.stop() }
    io.out("stopped; events flushed\n")
    return ExitStatus.success
}

/// The host part of the URL `serve` prints: `localhost` for 127.0.0.1, brackets around IPv6 addresses.
func displayHost(bind: String) -> String {
    if bind == "127.0.0.1" { return "localhost" }
    return bind.contains(":") ? "[\(bind)]" : bind
}

let certCommand = Command(spec: CommandSpec(
    name: "cert", summary: "Creates (or shows) the self-signed TLS certificate and prints its SHA-256 fingerprint.",
    usage: "cert [--dir D] [--host H[,H...]]", options: [
        .init("dir", value: "D", "directory of cert.pem and key.pem (default .flowscope/tls)"),
        .init("host", value: "H", "host names or IP addresses a new certificate also carries (SAN), comma-separated"),
    ],
    details: """
    D and its missing parents are created mode 0700; the key is mode 0600. A new certificate carries
    localhost, 127.0.0.1 and ::1, and the --host names (serve adds its bind address, or the host name
    for 0.0.0.0, by itself); an existing one is shown as it is: to change its names, delete D first.

    Exit status: 0, or 2 when the directory or the files cannot be used (for example half a pair),
    or a --host is not a host name or IP address or is missing from the existing certificate.
    """
)) { args, io in
    let dir = args.value("dir") ?? ".flowscope/tls"
    guard !dir.isEmpty else {
        io.err("flowscope cert: --dir expects a directory\n")
        return ExitStatus.usage
    }
    let hosts = (args.value("host") ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    if let bad = hosts.first(where: { sanEntry($0) == nil }) {
        io.err("flowscope cert: --host \(bad): expected a host name or an IP address\n")
        return ExitStatus.usage
    }
    // The directory and its missing parents (the state directory, by default) are made mode 0700.
    if let problem = PrivateDirectory.create(dir) {
        io.err("flowscope cert: \(problem)\n")
        return ExitStatus.usage
    }
    do throws(ServerFileError) {
        let existed = FileManager.default.fileExists(atPath: dir + "/cert.pem")
        let tls = try TLSMaterial.loadOrCreate(tlsDirectory: dir, hosts: hosts)
        io.out("\(existed ? "existing" : "created") certificate \(tls.certPath)\nkey \(tls.keyPath) (mode 0600)\nSHA-256 fingerprint \(tls.fingerprint)\n")
        if existed, let missing = hosts.first(where: { !TLSMaterial.certificate(tls.certPEM, covers: $0) }) {
            io.err("flowscope cert: the existing certificate does not carry \(missing); delete \(dir) to create one that does\n")
            return ExitStatus.usage
        }
        return ExitStatus.success
    } catch {
        io.err("flowscope cert: \(error.description)\n")
        return ExitStatus.usage
    }
}

/// The login URL as `serve` prints it. It carries the token: whole on a terminal only, so the token
/// never goes into a log that a service manager or container runtime keeps; elsewhere the token's
/// place names its file.
func shownLoginURL(_ url: String, terminal: Bool, tokenFile: String?) -> String {
    guard !terminal else { return url }
    return url.split(separator: "?", maxSplits: 1)[0] + "?token=<the token in \(tokenFile ?? "the config")>"
}
