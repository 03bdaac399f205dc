import FlowEvents
import FlowJSON
import FlowSim
import FlowTLS
import Foundation

let reproduceCommand = Command(spec: CommandSpec(
    name: "reproduce", summary: "Turns a recorded call into a scenario that reproduces it in virtual time.",
    usage: "reproduce SOURCE --call TRACE [--session] [--out FILE] [--ca FILE] [--token T]",
    options: [.init("call", value: "TRACE", "the call's trace id (32 hex characters, the \"trace\" of its events)"),
              .init("session", "also play every call of the same client session that overlapped it"),
              .init("out", value: "FILE", "write the scenario to FILE (default: print it)"),
              .init("ca", value: "FILE", "with SOURCE https://...: the PEM CA file that signed the server's certificate"),
              .init("token", value: "T", "with SOURCE https://...: a bearer token to send")],
    positionals: 1...1,
    details: """
    SOURCE is a JSON Lines trace, an sqlite sink file (only read), or https://HOST:PORT/api/events
    (every run unless the URL has run=). The scenario holds the call and its parameters, the cache
    entries it found (kind, age), when attribution arrived, each request's latency and outcome, and
    the fallback-file entry it used; its expect block states what the call returned, to the
    millisecond. It is played before it is written: `flowscope run FILE` passes while the engine
    behaves as recorded. Exit status: 0 written, 2 on a bad flag or source, or a call that cannot
    be reproduced (the reason is printed).
    """
)) { args, io in
    func usage(_ message: String) -> Int32 {
        io.err("flowscope reproduce: \(message)\n")
        return ExitStatus.usage
    }
    guard let trace = args.value("call") else { return usage("--call TRACE is required (the trace id of the call to reproduce)") }
    let from = args.positionals[0]
    let source: TrafficSource
    switch TrafficSource.parse(from, label: "SOURCE") {
    case .success(let s): source = s
    case .failure(let e): return usage(e.message)
    }
    for flag in ["ca", "token"] where args.value(flag) != nil {
        guard case .server = source else { return usage("--\(flag) applies to SOURCE https://..., and \(from) is a file") }
    }
    if let ca = args.value("ca"), let problem = ServeChecks.fileProblem(ca) ?? TLSTransport.certificateProblem(ca) {
        return usage("--ca \(FlowScopeConfig.absolutePath(ca)): \(problem)")
    }
    if let out = args.value("out") {
        if out.isEmpty { return usage("--out expects a file") }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: out, isDirectory: &isDirectory), isDirectory.boolValue {
            return usage("--out \(FlowScopeConfig.absolutePath(out)): is a directory (expected a file to write)")
        }
    }
    let envelopes: [Envelope]
    switch await source.read(caFile: args.value("ca"), token: args.value("token"), label: "SOURCE", defaultRun: nil) {
    case .success(let e): envelopes = e
    case .failure(let e): return usage(e.message)
    }
    let recording = Recording(envelopes)
    let reproduced: ReproducedCall
    switch recording.scenario(trace: trace, session: args.flag("session")) {
    case .success(let r): reproduced = r
    case .failure(let refusal): return usage("--call \(trace): cannot be reproduced: \(refusal.message)")
    }
    guard let out = args.value("out") else {
        io.out(reproduced.text)
        return ExitStatus.success
    }
    do {
        try Data(reproduced.text.utf8).write(to: URL(fileURLWithPath: out), options: .atomic)
    } catch {
        return usage("--out \(FlowScopeConfig.absolutePath(out)): cannot write the scenario: \(error.localizedDescription)")
    }
    io.err("flowscope reproduce: wrote \(out) (\(reproduced.calls.count) call\(reproduced.calls.count == 1 ? "" : "s")); "
           + "check it with: flowscope run \(out)\n")
    return ExitStatus.success
}
