import FlowEvents
import FlowFetch
import FlowJSON
import FlowScopeTools
import Foundation

let replayCommand = Command(spec: CommandSpec(
    name: "replay", summary: "Prints a trace file (JSON Lines of event envelopes) as a timeline, or serves it on the dashboard.",
    usage: "replay TRACE.jsonl [--events] [--serve] [--config F] [--port N]",
    options: [.init("events", "also print every event under its call"),
              .init("serve", "load the trace into the dashboard instead: serves it like `flowscope serve --no-demo`"),
              .init("config", value: "F", "with --serve: config file (default: the built-in one)"),
              .init("port", value: "N", "with --serve: port (default: the config's, 8443)")],
    positionals: 1...1,
    details: "Trace files come from FLOWSCOPE_TRACE_DIR (one per test) or the jsonl sink.\n"
        + "--config and --port need --serve; --events is for the timeline, not --serve.\n"
        + "Exit status: 0 when the file was read, 2 for a bad flag, or when the file cannot be read or a line is not an envelope."
)) { args, io in
    // Flags first: those of one mode are an error in the other, never silently ignored.
    if args.flag("serve") {
        if args.flag("events") {
            io.err("flowscope replay: --events prints the timeline, which --serve does not print; give one or the other\n")
            return ExitStatus.usage
        }
    } else {
        let given = ["config", "port"].filter { args.value($0) != nil }.map { "--" + $0 }
        if !given.isEmpty {
            io.err("flowscope replay: \(given.joined(separator: " and ")) \(given.count == 1 ? "needs" : "need") --serve "
                   + "(\(given.count == 1 ? "it applies" : "they apply") to the dashboard --serve starts)\n")
            return ExitStatus.usage
        }
    }
    let path = args.positionals[0]
    let envelopes: [Envelope]
    switch JSONLinesFile.envelopes(path) {
    case .success(let read):
        envelopes = read
    case .failure(.unreadable(let why)):
        io.err("flowscope replay: \(FlowScopeConfig.absolutePath(path)): \(why)\n")
        return ExitStatus.usage
    case .failure(.badLine(let line, let error)):
        var located = error.inFile("\(path):\(line)")
        located.line = nil
        located.column = nil
        io.err("flowscope replay: \(located.description)\n")
        return ExitStatus.usage
    }
    if args.flag("serve") { return await serveTrace(envelopes, args: args, io: io) }
    var byRun: [(run: String, envelopes: [Envelope])] = []
    for e in envelopes {
        if let k = byRun.firstIndex(where: { $0.run == e.run }) { byRun[k].envelopes.append(e) } else { byRun.append((e.run, [e])) }
    }
    if byRun.isEmpty { io.out("\(path): no events\n") }
    for group in byRun {
        let first = group.envelopes.first.map { ISO8601.format($0.ts) } ?? ""
        io.out("run \(group.run)  (\(group.envelopes.count) events, from \(first))\n")
        io.out(FlowTimeline(envelopes: group.envelopes).text(events: args.flag("events")))
    }
    return ExitStatus.success
}

/// `replay --serve`: a dashboard stack with no demo traffic, holding the trace's events.
private func serveTrace(_ envelopes: [Envelope], args: ParsedArguments, io: Output) async -> Int32 {
    var overrides = ServeStack.Overrides()
    overrides.noDemo = true
    if let p = args.value("port") {
        guard let port = Int(p), (0...65535).contains(port) else {
            io.err("flowscope replay: --port expects a port number 0-65535, got \(p)\n")
            return ExitStatus.usage
        }
        overrides.port = port
    }
    guard var config = FlowScopeConfig.load(args.value("config"), flag: "--config", command: "replay", io: io) else {
        return ExitStatus.usage
    }
    // Only the dashboard's own sinks: replaying must not write the trace again into stores and files.
    config.sinks = [["type": "metrics"], ["type": "memory"]]
    StopSignals.install(label: "flowscope replay")  // a Ctrl-C during start-up stops it once started
    let stack: ServeStack
    do throws(ServeStack.StartError) {
        stack = try ServeStack(config: config, overrides: overrides)
    } catch {
        io.err("flowscope replay: \(error.description)\n")
        return ExitStatus.usage
    }
    let unloaded = await loadTrace(envelopes, into: stack.pipeline, queueCapacity: ServeStack.queueCapacity)
    if unloaded > 0 {
        io.err("flowscope replay: \(unloaded) of \(envelopes.count) events could not be loaded: the sinks did not catch up within 30 s\n")
    }
    let run = envelopes.first?.run ?? "live"
    io.out("serving \(envelopes.count) events of \(args.positionals[0]) at https://localhost:\(stack.server.port)/#run=\(run)\n")
    io.out("Stop with Ctrl-C.\n")
    await StopSignals.first()
    await StopSignals.stop(label: "flowscope replay", timeout: config.server.shutdownTimeout,
                           sinks: { stack.pipeline.unfinishedSinks() }) { stack.stop() }
    return ExitStatus.success
}

/// Puts a trace into `pipeline` in batches of at most 1,000 envelopes, each queued only when every
/// sink's queue has room for all of it (queued at once, a trace longer than a queue would lose its
/// oldest events). A refused batch is offered again after a wait that doubles from 10 ms to 200 ms,
/// for at most `patience` seconds of wall time per batch. Returns how many envelopes were not loaded.
func loadTrace(_ envelopes: [Envelope], into pipeline: EventPipeline, queueCapacity: Int, patience: Double = 30) async -> Int {
    let clock = ContinuousClock()
    var from = 0, backoff = 0.01
    var refusedSince: ContinuousClock.Instant?
    while from < envelopes.count {
        let to = min(from + 1000, envelopes.count)
        switch pipeline.ingest(Array(envelopes[from..<to]), ifRoomWithin: queueCapacity, in: .allSinks) {
        case .accepted:
            from = to
            backoff = 0.01
            refusedSince = nil
        case .refused:
            let since = refusedSince ?? clock.now
            refusedSince = since
            guard clock.now - since < .seconds(patience) else { return envelopes.count - from }
            try? await Task.sleep(for: .seconds(backoff))
            backoff = min(backoff * 2, 0.2)
        case .stopped:
            return envelopes.count - from
        }
    }
    return 0
}
