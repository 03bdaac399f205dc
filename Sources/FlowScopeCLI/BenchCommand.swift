import FlowJSON
import Foundation
#if canImport(Glibc)
import Glibc
#endif

let benchCommand = Command(spec: CommandSpec(
    name: "bench", summary: "Runs the performance benchmarks (engine, pipeline, metrics, simulator, SQLite).",
    usage: "bench [--json] [--quick] [--only NAMES]",
    options: [.init("json", "print {\"benchmarks\": [{name, value, unit, baseline, ratio}]}"),
              .init("quick", "fewer runs and less work per run (under 30 s; noisier numbers)"),
              .init("only", value: "NAMES", "comma-separated names or prefixes to run (e.g. pipeline,sim.calls)")],
    details: """
    Each benchmark warms up, runs several times and reports the median; a baseline (a Mutex-guarded
    Dictionary lookup, an Atomic<Int> add, plain SQLite) is measured in the same run. Build with
    `swift build -c release` first: a debug build is many times slower. BENCHMARKS.md explains the
    method and the numbers. Exit status: 0 when every benchmark ran, 1 when one could not, 2 for a bad
    flag or an --only entry that names no benchmark (an empty one included).
    """
), run: runBench)

/// `flowscope bench`: runs the suite and prints a table or the JSON of docs/cli.md (bench).
func runBench(_ args: ParsedArguments, _ io: Output) async -> Int32 {
    let json = args.flag("json")
    let only = args.value("only").map { $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) } ?? []
    // Checked before anything runs: a misspelt entry is an error, not an empty table, and an empty
    // one (--only "", "a,,b", a trailing comma) is an error, not "every benchmark".
    if only.contains(where: \.isEmpty) {
        io.err("flowscope bench: --only \"\(args.value("only") ?? "")\": an empty name; expected comma-separated names or prefixes (benchmarks: "
               + BenchmarkSuite.names.joined(separator: ", ") + ")\n")
        return ExitStatus.usage
    }
    if let unknown = only.first(where: { entry in !BenchmarkSuite.names.contains { $0.hasPrefix(entry) } }) {
        io.err("flowscope bench: --only \(unknown): no benchmark is named or starts with it (benchmarks: "
               + BenchmarkSuite.names.joined(separator: ", ") + ")\n")
        return ExitStatus.usage
    }
    let directory = NSTemporaryDirectory() + "flowscope-bench-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    do {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    } catch {
        io.err("flowscope bench: cannot create \(directory): \(error.localizedDescription)\n")
        return ExitStatus.failure
    }
    defer { try? FileManager.default.removeItem(atPath: directory) }
    #if DEBUG
    if !json { io.err("flowscope bench: this is a debug build; numbers are not representative (swift build -c release)\n") }
    #endif
    let suite = BenchmarkSuite(quick: args.flag("quick"), directory: directory)
    let results: [BenchmarkResult]
    do {
        results = try await suite.run(only: only) { name in
            if !json && io.isTerminal { io.err("running \(name)...\n") }
        }
    } catch {
        io.err("flowscope bench: \(error)\n")
        return ExitStatus.failure
    }
    if json {
        let doc: JSONValue = ["benchmarks": .array(results.map(\.json))]
        io.out(doc.jsonText + "\n")
    } else {
        io.out(benchTable(results))
    }
    return ExitStatus.success
}

/// The results as an aligned table with baselines, ratios and targets.
func benchTable(_ results: [BenchmarkResult]) -> String {
    func number(_ v: Double) -> String {
        if v >= 100_000 { return String(format: "%.0f", v) }
        if v >= 100 { return String(format: "%.1f", v) }
        return String(format: "%.2f", v)
    }
    let rows = results.map { r in
        [r.name, number(r.value), r.unit, r.baseline.map { "\(number($0.value)) (\($0.name))" } ?? "-",
         r.ratio.map { String(format: "%.2fx", $0) } ?? "-", r.target]
    }
    let header = ["benchmark", "value", "unit", "baseline", "ratio", "target"]
    let widths = header.indices.map { i in max(header[i].count, rows.map { $0[i].count }.max() ?? 0) }
    func line(_ cells: [String]) -> String {
        cells.indices.map { i in i == cells.count - 1 ? cells[i] : cells[i].padding(widths[i]) }.joined(separator: "  ") + "\n"
    }
    return line(header) + rows.map(line).joined()
}
