import FlowEvents
import FlowFetch
import FlowJSON
import FlowScopeTools
import Foundation

let replayCommand = Command(spec: CommandSpec(
    name: "replay", summary: "Prints a trace file (JSON Lines of event envelopes) as a timeline.",
    usage: "replay TRACE.jsonl [--serve]",
    options: [.init("events", "also print every event under its call"),
              .init("serve", "load the trace into the dashboard (not available yet: needs `flowscope serve`; exits 2)")],
    positionals: 1...1,
    details: "Trace files come from FLOWSCOPE_TRACE_DIR (one per test) or the jsonl sink.\n"
        + "Exit status: 0 when the file was read, 2 when it cannot be read or a line is not an envelope."
)) { args, io in
    let path = args.positionals[0]
    if args.flag("serve") {
        io.err("flowscope replay: --serve is not available in this build yet (it needs the dashboard server); "
               + "run without --serve to print the timeline\n")
        return ExitStatus.usage
    }
    guard let data = FileManager.default.contents(atPath: path) else {
        io.err("flowscope replay: \(path): cannot read the file\n")
        return ExitStatus.usage
    }
    let envelopes: [Envelope]
    do throws(JSONInputError) {
        envelopes = try TraceFile.decode(String(decoding: data, as: UTF8.self), file: path)
    } catch {
        io.err("flowscope replay: \(error.description)\n")
        return ExitStatus.usage
    }
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

/// Reads trace files: one envelope (events-and-metrics.md) per line.
enum TraceFile {
    /// Decodes every non-empty line; an error names the file, the line and the JSON path.
    static func decode(_ text: String, file: String) throws(JSONInputError) -> [Envelope] {
        var out: [Envelope] = []
        for (i, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty else { continue }
            do {
                out.append(try envelope(JSON5.parse(trimmed)))
            } catch {
                var e = error.inFile("\(file):\(i + 1)")
                e.line = nil
                e.column = nil
                throw e
            }
        }
        return out
    }

    static func envelope(_ root: JSONValue) throws(JSONInputError) -> Envelope {
        let o = try JSONCursor(root).object()
        let nameCursor = try o.required("name")
        guard let name = EventName(rawValue: try nameCursor.string()) else { throw nameCursor.error("unknown event name") }
        let traceCursor = try o.required("trace")
        guard let trace = TraceID(hex: try traceCursor.string()) else { throw traceCursor.expected("32 lowercase hex characters") }
        let spanCursor = try o.required("span")
        guard let span = SpanID(hex: try spanCursor.string()) else { throw spanCursor.expected("16 lowercase hex characters") }
        let tsCursor = try o.required("ts")
        guard let ts = ISO8601.parse(try tsCursor.string()) else { throw tsCursor.expected("an ISO 8601 UTC time") }
        let placement = o.optional("placement").flatMap { $0.isNull ? nil : $0 }
        return Envelope(seq: UInt64(max(0, try o.required("seq").int())), ts: ts, t: try o.required("t").double(),
                        run: try o.required("run").string(), trace: trace, span: span, name: name,
                        placement: try placement?.string(), attrs: try o.optional("attrs")?.object().members ?? [:])
    }
}
