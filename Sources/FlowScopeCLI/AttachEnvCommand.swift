import FlowScopeServer
import Foundation

/// `flowscope attach-env`: the environment that attaches a test run to this folder's `serve`, as a
/// line a shell (or a CI step) takes as it is, with absolute paths so it works from any folder.
let attachEnvCommand = Command(spec: CommandSpec(
    name: "attach-env", summary: "Prints the environment that attaches test runs to serve: FLOWSCOPE_ATTACH, FLOWSCOPE_TOKEN, FLOWSCOPE_CA.",
    usage: "attach-env [--config F] [--state-dir D] [--port N] [--required]",
    options: [.init("config", value: "F", "the config serve runs with (default: the built-in one)"),
              .init("state-dir", value: "D", "the state directory serve runs with (default: the config's, .flowscope)"),
              .init("port", value: "N", "the port serve listens on (default: the config's, 8443)"),
              .init("required", "also set FLOWSCOPE_ATTACH_REQUIRED=1: a test whose events are not delivered fails (for CI)")],
    details: """
    Prints one line for a POSIX shell, e.g.
      export FLOWSCOPE_ATTACH=https://localhost:8443 FLOWSCOPE_TOKEN="$(cat /home/you/app/.flowscope/token)" FLOWSCOPE_CA=/home/you/app/.flowscope/tls/cert.pem
    Use it as `eval "$(flowscope attach-env)"` in the folder serve runs in; the paths are absolute, so
    the tests may then run anywhere. The token is read from its file when the line runs, so the line
    itself holds no secret (a token configured in server.auth.token is printed as it is).
    Run it after serve has started once: the certificate and the token are created then.
    Exit status: 0, or 2 when the config is invalid or the certificate or the token does not exist yet.
    """
)) { args, io in
    var port: Int?
    if let p = args.value("port") {
        guard let value = Int(p), (1...65535).contains(value) else {
            io.err("flowscope attach-env: --port expects a port number 1-65535, got \(p)\n")
            return ExitStatus.usage
        }
        port = value
    }
    guard let config = FlowScopeConfig.load(args.value("config"), flag: "--config", command: "attach-env", io: io) else {
        return ExitStatus.usage
    }
    let stateDir = FlowScopeConfig.absolutePath(args.value("state-dir") ?? config.server.stateDir)
    let cert = FlowScopeConfig.absolutePath(config.server.tlsCert ?? (config.server.tlsDir ?? stateDir + "/tls") + "/cert.pem")
    guard FileManager.default.isReadableFile(atPath: cert) else {
        io.err("flowscope attach-env: no certificate at \(cert) yet: start `flowscope serve` with this config and state directory once (or run `flowscope cert`)\n")
        return ExitStatus.usage
    }
    let token: String
    if let configured = config.server.token {
        token = shellQuoted(configured)
    } else {
        let file = AuthToken.path(stateDir: stateDir)
        guard FileManager.default.isReadableFile(atPath: file) else {
            io.err("flowscope attach-env: no token at \(file) yet: start `flowscope serve` with this config and state directory once\n")
            return ExitStatus.usage
        }
        token = "\"$(cat \(shellQuoted(file)))\""
    }
    let host = displayHost(bind: config.server.bind == "0.0.0.0" || config.server.bind == "::" ? "127.0.0.1" : config.server.bind)
    var line = "export FLOWSCOPE_ATTACH=https://\(host):\(port ?? config.server.port) FLOWSCOPE_TOKEN=\(token) FLOWSCOPE_CA=\(shellQuoted(cert))"
    if args.flag("required") { line += " FLOWSCOPE_ATTACH_REQUIRED=1" }
    io.out(line + "\n")
    return ExitStatus.success
}

/// `text` as one word of a POSIX shell: as it is when it holds only safe characters, else in single quotes.
func shellQuoted(_ text: String) -> String {
    let safe = !text.isEmpty && text.unicodeScalars.allSatisfy { s in
        s.isASCII && (s.properties.isAlphabetic || ("0"..."9").contains(s) || "/._-+:=@,".unicodeScalars.contains(s))
    }
    return safe ? text : "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
}
