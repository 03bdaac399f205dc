import FlowJSON
import Foundation
import Testing
@testable import FlowScopeCLI

@Suite("the flowscope command line")
struct CommandLineTests {
    @Test("--help, -h and help print the command list; no arguments prints it to stderr with status 2")
    func topLevelHelpText() async {
        for args in [["--help"], ["-h"], ["help"]] {
            let result = await flowscope(args)
            #expect(result.status == 0)
            #expect(result.out == topLevelHelp)
            #expect(result.err.isEmpty)
        }
        for command in commands {
            #expect(topLevelHelp.contains("\n  \(command.spec.name) "), "\(command.spec.name) is listed")
        }
        let none = await flowscope([])
        #expect(none.status == 2)
        #expect(none.err == topLevelHelp)
    }

    @Test("colour on a terminal only, and not with NO_COLOR holding a value; an empty NO_COLOR does not count (the console sink's rule)")
    func colourRule() {
        let terminal = Output(out: { _ in }, err: { _ in }, isTerminal: true)
        let pipe = Output(out: { _ in }, err: { _ in }, isTerminal: false)
        #expect(terminal.usesColor(environment: [:]))
        #expect(terminal.usesColor(environment: ["NO_COLOR": ""]))
        #expect(!terminal.usesColor(environment: ["NO_COLOR": "1"]))
        #expect(!pipe.usesColor(environment: [:]))
    }

    @Test("every command answers --help and help <command> with its usage and options")
    func commandHelp() async {
        #expect(Set(commands.map(\.spec.name)).isSuperset(of: ["serve", "run", "simulate", "reproduce", "cert", "check-config", "version"]))
        for command in commands {
            let viaFlag = await flowscope(command.spec.name, "--help")
            #expect(viaFlag.status == 0, "\(command.spec.name)")
            #expect(viaFlag.out.contains("Usage: flowscope \(command.spec.usage)\n"), "\(viaFlag.out)")
            #expect(viaFlag.out.hasPrefix(command.spec.summary))
            for option in command.spec.options {
                #expect(viaFlag.out.contains("--\(option.name)"), "\(command.spec.name) --\(option.name)")
            }
            let viaHelp = await flowscope("help", command.spec.name)
            #expect(viaHelp.status == 0)
            #expect(viaHelp.out == viaFlag.out)
            let short = await flowscope(command.spec.name, "-h")
            #expect(short.out == viaFlag.out)
        }
        let serveHelp = await flowscope("serve", "--help")
        for flag in ["--config F", "--bind A", "--port N", "--no-demo"] { #expect(serveHelp.out.contains(flag)) }
        let unknown = await flowscope("help", "bogus")
        #expect(unknown.status == 2)
        #expect(unknown.err == "flowscope help: unknown command \"bogus\"\n")
    }

    @Test("each command's usage line names every option it lists, as docs/cli.md's synopsis does")
    func usageNamesEveryOption() {
        for command in commands {
            for option in command.spec.options {
                #expect(command.spec.usage.contains("--\(option.name)"), "usage of \(command.spec.name) lacks --\(option.name): \(command.spec.usage)")
            }
        }
    }

    @Test("version and --version print the version")
    func version() async {
        for args in [["version"], ["--version"]] {
            let result = await flowscope(args)
            #expect(result.status == 0)
            #expect(result.out == "flowscope \(flowScopeVersion)\n")
        }
    }

    @Test("an unknown command, an unknown flag or a missing value exits 2 with one line naming it")
    func usageErrors() async {
        let unknownCommand = await flowscope("bogus")
        #expect(unknownCommand.status == 2)
        #expect(unknownCommand.err == "flowscope: unknown command \"bogus\" (see flowscope --help)\n")
        #expect(unknownCommand.out.isEmpty)
        let noFile = await flowscope("run")
        #expect(noFile.status == 2)
        #expect(noFile.err.hasPrefix("flowscope run: expected at least 1 argument, got 0 (usage: flowscope run FILE..."), "\(noFile.err)")

        for command in commands {
            let name = command.spec.name
            let flag = await flowscope(name, "--no-such-flag")
            #expect(flag.status == 2, "\(name)")
            #expect(flag.err == "flowscope \(name): unknown option --no-such-flag (see flowscope \(name) --help)\n", "\(flag.err)")
            #expect(flag.out.isEmpty)
            for option in command.spec.options where option.value != nil {
                let missing = await flowscope(name, "--\(option.name)")
                #expect(missing.status == 2)
                #expect(missing.err == "flowscope \(name): --\(option.name) needs a value \(option.value ?? "")\n", "\(missing.err)")
            }
            for option in command.spec.options where option.value == nil {
                let valued = await flowscope(name, "--\(option.name)=x")
                #expect(valued.status == 2)
                #expect(valued.err == "flowscope \(name): --\(option.name) takes no value\n")
            }
        }
        let badPort = await flowscope("serve", "--port", "http", "--config", packageRoot + "/config/flowscope.json5")
        #expect(badPort.status == 2)
        #expect(badPort.err == "flowscope serve: --port expects a port number 0-65535, got http\n")
        // A bad --bind is reported before the config is read or the state directory is created.
        let stateDir = makeTemporaryDirectory("bind") + "/state"
        let badBind = await flowscope("serve", "--bind", "999.1.1.1", "--state-dir", stateDir, "--config", "/nonexistent.json5")
        #expect(badBind.status == 2)
        #expect(badBind.err == "flowscope serve: --bind: expected an IPv4 or IPv6 address or localhost, got \"999.1.1.1\"\n")
        let mapped = await flowscope("serve", "--bind", "::FFFF:10.1.2.3", "--state-dir", stateDir, "--config", "/nonexistent.json5")
        #expect(mapped.status == 2)
        #expect(mapped.err == "flowscope serve: --bind: \"::FFFF:10.1.2.3\" is an IPv4 address in IPv6 form, which an IPv6-only socket cannot listen on; write 10.1.2.3\n")
        #expect(!FileManager.default.fileExists(atPath: stateDir))
        let twoFiles = await flowscope("check-config", "a.json5", "b.json5")
        #expect(twoFiles.status == 2)
        #expect(twoFiles.err.hasPrefix("flowscope check-config: expected at most 1 argument, got 2"))
        #expect(twoFiles.err.filter { $0 == "\n" }.count == 1)
    }

    @Test("run FILE --json prints the scenario result object and exits 0 when every expectation holds")
    func runJSON() async throws {
        let file = packageRoot + "/config/scenarios/02-stage-a-success.json5"
        let result = await flowscope("run", file, "--json")
        #expect(result.status == 0, "\(result.err)")
        let json = try JSON5.parse(result.out)
        let keys = Set((json.objectValue ?? [:]).keys)
        #expect(keys == ["name", "file", "results", "requests", "events", "expectations"])
        #expect(json["file"] == .string(file))
        #expect(json["expectations"] == ["passed": 3, "failed": 0, "failures": []])
        let results = json["results"]?.arrayValue ?? []
        #expect(results.count == 3)
        #expect(results.first?["source"] == "network")
        #expect(results.first?["variation"] == "all-B")
        #expect(results.last?["source"] == "cache")
        for r in results {
            let resultKeys = Set((r.objectValue ?? [:]).keys)
            #expect(resultKeys.isSuperset(of: [
                "step", "call", "placement", "outcome", "source", "variation", "audience", "targetingLost",
                "startedAt", "completedAt", "requests", "error"]))
        }
        #expect(json["requests"]?.arrayValue?.count == 2)
        #expect(json["requests"]?.arrayValue?.first?["kind"] == "targeted")
        let names = json["events"]?.arrayValue?.compactMap { $0["name"]?.stringValue } ?? []
        #expect(names.first == "fetch.start")
        #expect(names.filter { $0 == "fetch.end" }.count == 3)

        // Two files: an array of two objects.
        let two = await flowscope("run", file, packageRoot + "/config/scenarios/01-stage-a-timeout-default-audience.json5", "--json")
        #expect(two.status == 0)
        #expect((try JSON5.parse(two.out)).arrayValue?.count == 2)
        // Without --json: the readable timeline.
        let text = await flowscope("run", file)
        #expect(text.status == 0)
        #expect(text.out.contains("getFlow main_paywall"))
    }

    @Test("run exits 1 when an expectation fails and 2 naming file and JSON path when a file is invalid")
    func runFailures() async throws {
        let dir = makeTemporaryDirectory("run")
        defer { removeDirectory(dir) }
        let original = try String(contentsOfFile: packageRoot + "/config/scenarios/02-stage-a-success.json5", encoding: .utf8)
        let wrongVariation = original.replacingOccurrences(of: #""variation": "all-B""#, with: #""variation": "all-A""#)
        try #require(wrongVariation != original)
        try write(wrongVariation, to: dir + "/wrong.json5")
        let failed = await flowscope("run", dir + "/wrong.json5", "--json")
        #expect(failed.status == 1)
        let json = try JSON5.parse(failed.out)
        #expect(json["expectations"]?["failed"] == 1)
        #expect(json["expectations"]?["passed"] == 2)
        #expect(json["expectations"]?["failures"]?.arrayValue?.count == 1)

        let invalid = original.replacingOccurrences(of: #""latency": 0.2"#, with: #""latency": "slow""#)
        try #require(invalid != original)
        try write(invalid, to: dir + "/invalid.json5")
        let bad = await flowscope("run", dir + "/invalid.json5", "--json")
        #expect(bad.status == 2)
        #expect(bad.out.isEmpty)
        #expect(bad.err.hasPrefix("flowscope run: \(dir)/invalid.json5: $.network.latency"), "\(bad.err)")
        #expect(bad.err.filter { $0 == "\n" }.count == 1)

        let missing = await flowscope("run", dir + "/none.json5")
        #expect(missing.status == 2)
        #expect(missing.err == "flowscope run: \(dir)/none.json5: not found\n")
    }

    @Test("serve prints a usable URL host: localhost for 127.0.0.1, IPv6 addresses in brackets")
    func serveURLHost() {
        #expect(displayHost(bind: "127.0.0.1") == "localhost")
        #expect(displayHost(bind: "::1") == "[::1]")
        #expect(displayHost(bind: "0.0.0.0") == "0.0.0.0")
        #expect(URL(string: "https://\(displayHost(bind: "::1")):8443/metrics")?.port == 8443)
    }
}
