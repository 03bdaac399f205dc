import FlowEvents
import FlowJSON
import FlowSim
import FlowTLS
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The repository's config file, which the defaults embedded in the binary are identical to.
let defaultConfigPath = "config/flowscope.json5"

let simulateCommand = Command(spec: CommandSpec(
    name: "simulate", summary: "The strategy lab: compares flow-fetch strategies over simulated sessions.",
    usage: "simulate [--config F] [--sessions N] [--seed N] [--json] [--out DIR] [--threads N] [--state-dir D] [--from SOURCE [--ca FILE] [--token T]] [--sweep NAME=FROM:TO:STEP] [--max-p95 S]",
    options: [.init("config", value: "F", "config file whose `simulate` section gives the population and strategies (default: the built-in one, identical to the repository's \(defaultConfigPath))"),
              .init("sessions", value: "N", "sessions to simulate (default: the config's, 20000)"),
              .init("seed", value: "N", "random seed (default: the config's, 1); same seed, same numbers"),
              .init("json", "print the result as JSON"),
              .init("out", value: "DIR", "also write DIR/simulate.json and DIR/report.html"),
              .init("threads", value: "N", "worker threads (default: every core); the numbers do not depend on it"),
              .init("state-dir", value: "D", "where the run is saved for the dashboard, as D/simulations/ (default: the config's server.stateDir, .flowscope)"),
              .init("from", value: "SOURCE", "fit the population's network to recorded events: a JSON Lines trace, an sqlite sink file (only read), or https://HOST:PORT/api/events (the live run unless the URL has run=)"),
              .init("ca", value: "FILE", "with --from https://...: the PEM CA file that signed the server's certificate"),
              .init("token", value: "T", "with --from https://...: a bearer token to send"),
              .init("sweep", value: "NAME=FROM:TO:STEP", "play each strategy at each value of loadTimeout, timeout, delay or requestTimeout, e.g. loadTimeout=1:10:0.5; FROM and TO are seconds from 0 to 10^9 (requestTimeout: > 0), at most 200 values"),
              .init("max-p95", value: "S", "the time-to-flow p95 bound of the recommendation of --from or --sweep, seconds (default 3)")],
    details: """
    Plays each session through the real engine in virtual time, once per strategy, and prints per
    strategy: targeting correct, time to flow (p50, p95, p99, max), flow sources, requests per session,
    with 95% confidence intervals. With --from, the network is fitted per placement and request kind
    to the recorded request.start/request.end events (timeouts censored at their budget) and the
    attribution delay to attribution.applied; with --from or --sweep, a recommendation per placement
    (highest targeting correct with time-to-flow p95 <= --max-p95). --out DIR must be a directory, or
    creatable, before the run starts. Exit status: 0 on success, 2 on a bad flag (--out included),
    config or source, 1 when the report cannot be written to --out after the run (the run is still
    saved and printed).
    """
), run: runSimulate)

/// `flowscope simulate`: runs the lab and prints the table or the JSON.
func runSimulate(_ args: ParsedArguments, _ io: Output) async -> Int32 {
    func usage(_ message: String) -> Int32 {
        io.err("flowscope simulate: \(message)\n")
        return ExitStatus.usage
    }
    var sessions: Int?
    var threads = ProcessInfo.processInfo.activeProcessorCount
    for flag in ["sessions", "threads"] {
        guard let text = args.value(flag) else { continue }
        guard let v = Int(text), v >= 1 else { return usage("--\(flag) expects a positive integer, got \(text)") }
        if flag == "sessions" { sessions = v } else { threads = v }
    }
    var seed: UInt64?
    if let text = args.value("seed") {
        guard let v = UInt64(text) else { return usage("--seed expects a non-negative integer, got \(text)") }
        seed = v
    }
    // --out is checked before the run, so that a run is never thrown away for want of a place.
    if let dir = args.value("out"), let problem = outProblem(dir) { return usage(problem) }
    guard let file = FlowScopeConfig.load(args.value("config"), flag: "--config", command: "simulate", io: io) else {
        return ExitStatus.usage
    }
    let config = file.simulate
    if let d = args.value("state-dir"), d.isEmpty { return usage("--state-dir expects a directory") }
    let stateDir = args.value("state-dir") ?? file.server.stateDir

    var sweep: SweepParameter?
    if let text = args.value("sweep") {
        switch SweepParameter.parse(text) {
        case .success(let s): sweep = s
        case .failure(let e): return usage("--sweep: \(e.message)")
        }
    }
    var maxP95 = 3.0
    if let text = args.value("max-p95") {
        guard let v = SecondsLimit.decimal(text), v > 0 else { return usage("--max-p95 expects a number of seconds > 0, got \(text)") }
        // Only a run with a recommendation reads the bound: anywhere else the flag would do nothing.
        guard args.value("from") != nil || sweep != nil else {
            return usage("--max-p95 bounds the recommendation of --from or --sweep, and neither is given")
        }
        maxP95 = v
    }
    for flag in ["ca", "token"] where args.value(flag) != nil && args.value("from") == nil {
        return usage("--\(flag) applies to --from https://..., which is not given")
    }
    var fit: TrafficFit?
    if let from = args.value("from") {
        let source: TrafficSource
        switch TrafficSource.parse(from) {
        case .success(let s): source = s
        case .failure(let e): return usage(e.message)
        }
        if let ca = args.value("ca"), let problem = ServeChecks.fileProblem(ca) ?? TLSTransport.certificateProblem(ca) {
            return usage("--ca \(FlowScopeConfig.absolutePath(ca)): \(problem)")
        }
        switch await source.read(caFile: args.value("ca"), token: args.value("token")) {
        case .success(let envelopes):
            let f = TrafficFit(envelopes: envelopes)
            guard f.overall.requests > 0 else {
                return usage("--from \(from): no flow requests to fit (\(envelopes.count) events, none a request.end of a "
                             + "targeted or default request with a placement)")
            }
            fit = f
        case .failure(let e): return usage(e.message)
        }
    }

    let json = args.flag("json")
    let bar: ProgressBar? = !json && io.isTerminal && isatty(2) == 1 ? ProgressBar(output: io) : nil
    var report: (@Sendable (Int, Int) -> Void)?
    if let bar { report = { done, total in bar.update(done, total) } }
    let lab = StrategyLab.run(config: config, fit: fit, sweep: sweep, maxP95: maxP95, sessions: sessions, seed: seed,
                              threads: threads, progress: report)
    bar?.finish()
    if let fit, json { for w in fit.warnings { io.err("flowscope simulate: warning: \(w)\n") } }

    // The report's files, named as the user wrote the directory ("report" and "report/" alike).
    // A failure to write them now (the disk full, the directory removed during the run) still
    // saves and prints the run, then exits 1.
    let out = args.value("out").map { dir in (dir, dir.hasSuffix("/") ? dir : dir + "/") }
    var outFailure: String?
    if let (dir, prefix) = out {
        do {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            try Data((lab.json.jsonText + "\n").utf8).write(to: URL(fileURLWithPath: prefix + "simulate.json"))
            try Data(lab.html().utf8).write(to: URL(fileURLWithPath: prefix + "report.html"))
        } catch {
            outFailure = "--out \(FlowScopeConfig.absolutePath(dir)): cannot write the report: \(error.localizedDescription)"
        }
    }
    // Every run is kept in the state directory, where `flowscope serve` lists it as a dashboard run.
    let store = SimulationStore(directory: stateDir + "/simulations")
    let runID = store.unusedID("sim:\(ISO8601.format(Date().timeIntervalSince1970).prefix(19))-seed\(seed ?? config.seed)")
    var saved = false
    if let problem = PrivateDirectory.create(stateDir) {
        io.err("flowscope simulate: warning: cannot save the run for the dashboard: \(problem)\n")
    } else {
        do {
            try store.save(id: runID, summary: lab.runSummary(id: runID))
            saved = true
        } catch {
            io.err("flowscope simulate: warning: \(store.directory): cannot save the run for the dashboard: \(error.localizedDescription)\n")
        }
    }
    if json {
        io.out(lab.json.jsonText + "\n")
    } else {
        let color = io.usesColor(environment: ProcessInfo.processInfo.environment)
        io.out(lab.table(color: color))
        if let (_, prefix) = out, outFailure == nil { io.out("wrote \(prefix)simulate.json and \(prefix)report.html\n") }
        if saved { io.out("saved as dashboard run \(runID) (\(store.directory))\n") }
    }
    if let outFailure {
        io.err("flowscope simulate: \(outFailure)\n")
        return ExitStatus.failure
    }
    return ExitStatus.success
}

/// What keeps `dir` from taking `simulate --out`'s two files, or nil: it must be a writable
/// directory or one that can be created, and `simulate.json` and `report.html` in it, when present,
/// files that can be replaced.
func outProblem(_ dir: String) -> String? {
    guard !dir.isEmpty else { return "--out expects a directory (for simulate.json and report.html)" }
    let shown = FlowScopeConfig.absolutePath(dir)
    if let problem = ServeChecks.directoryProblem(dir) {
        return "--out \(shown): \(problem); expected a directory for simulate.json and report.html"
    }
    for name in ["simulate.json", "report.html"] {
        let file = (dir as NSString).appendingPathComponent(name)
        var st = stat()
        guard lstat(file, &st) == 0 else { continue }
        if (st.st_mode & S_IFMT) == S_IFDIR {
            return "--out \(shown): \(name) is a directory; expected a file to replace or none"
        }
    }
    return nil
}

/// A progress bar on stderr: done/total, rate and ETA, redrawn at most ten times a second.
final class ProgressBar: Sendable {
    private let output: Output
    private let started = ContinuousClock.now
    private let lastDraw = Mutex<ContinuousClock.Instant?>(nil)

    init(output: Output) { self.output = output }

    func update(_ done: Int, _ total: Int) {
        let now = ContinuousClock.now
        let draw = lastDraw.withLock { last -> Bool in
            if let l = last, now - l < .milliseconds(100), done < total { return false }
            last = now
            return true
        }
        guard draw, total > 0 else { return }
        let elapsed = Double((now - started).components.attoseconds) * 1e-18 + Double((now - started).components.seconds)
        let rate = elapsed > 0 ? Double(done) / elapsed : 0
        let eta = rate > 0 ? Double(total - done) / rate : 0
        let width = 30
        let filled = Int(Double(width) * Double(done) / Double(total))
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        output.err("\r[\(bar)] \(done)/\(total) sessions  \(Int(rate))/s  ETA \(Int(eta.rounded()))s ")
    }

    func finish() { output.err("\r\u{1B}[2K") }
}
