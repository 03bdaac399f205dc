import FlowJSON
import FlowSim
import Foundation

let runCommand = Command(spec: CommandSpec(
    name: "run", summary: "Plays scenario files in virtual time and checks their expectations.",
    usage: "run FILE... [--json] [--events]",
    options: [.init("json", "print one JSON object per file (an array for several files)"),
              .init("events", "also print every engine event in the timeline")],
    positionals: 1...Int.max,
    details: "Exit status: 0 when every expectation holds, 1 when one fails, 2 when a file is invalid."
)) { args, io in
    var scenarios: [Scenario] = []
    for path in args.positionals {
        guard let data = FileManager.default.contents(atPath: path) else {
            io.err("flowscope run: \(FlowScopeConfig.absolutePath(path)): \(ServeChecks.whyUnreadable(path))\n")
            return ExitStatus.usage
        }
        guard let text = String(bytes: data, encoding: .utf8) else {
            io.err("flowscope run: \(path): $: the file is not UTF-8 text\n")
            return ExitStatus.usage
        }
        do throws(JSONInputError) {
            scenarios.append(try Scenario.decode(text, file: path))
        } catch {
            io.err("flowscope run: \(error.description)\n")
            return ExitStatus.usage
        }
    }
    let reports = scenarios.map { ScenarioRunner($0).run() }
    if args.flag("json") {
        let json: JSONValue = reports.count == 1 ? reports[0].json : .array(reports.map(\.json))
        io.out(json.jsonText + "\n")
    } else {
        for r in reports { io.out(r.timeline(events: args.flag("events")) + "\n") }
    }
    return reports.allSatisfy(\.succeeded) ? ExitStatus.success : ExitStatus.failure
}
