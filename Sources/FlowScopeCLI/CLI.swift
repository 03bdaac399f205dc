import FlowEvents
import FlowJSON
#if canImport(Glibc)
import Glibc
#endif

/// The version flowscope reports.
public let flowScopeVersion = "0.1.0"

/// Where a command writes: injectable so tests can read what it printed.
public struct Output: Sendable {
    public var out: @Sendable (String) -> Void
    public var err: @Sendable (String) -> Void
    /// Whether standard output is a terminal (colour and progress bars only then).
    public var isTerminal: Bool
    public init(out: @escaping @Sendable (String) -> Void, err: @escaping @Sendable (String) -> Void, isTerminal: Bool) {
        self.out = out; self.err = err; self.isTerminal = isTerminal
    }

    /// Whether to colour standard output: only on a terminal, and not when `NO_COLOR` holds a
    /// value (no-color.org: an empty `NO_COLOR` does not count), the rule of the console sink too.
    public func usesColor(environment: [String: String]) -> Bool {
        isTerminal && (environment["NO_COLOR"] ?? "").isEmpty
    }

    /// The process's stdout and stderr.
    public static var standard: Output {
        Output(out: { s in writeAll(1, s) }, err: { s in writeAll(2, s) }, isTerminal: isatty(1) == 1)
    }
}

/// A flowscope command.
public struct Command: Sendable {
    public var spec: CommandSpec
    public var run: @Sendable (ParsedArguments, Output) async -> Int32
}

/// Exit statuses: 0 success, 1 failure (a failed expectation or check), 2 bad usage or bad input.
public enum ExitStatus {
    public static let success: Int32 = 0
    public static let failure: Int32 = 1
    public static let usage: Int32 = 2
}

/// Every command, in the order `help` lists them.
public let commands: [Command] = [
    serveCommand, runCommand, simulateCommand, reproduceCommand, fetchCommand, stubBackendCommand, replayCommand, checkConfigCommand,
    initCommand, certCommand, attachEnvCommand, benchCommand, versionCommand, completionCommand,
]

let versionCommand = Command(spec: CommandSpec(name: "version", summary: "Prints the flowscope version.", usage: "version")) { _, io in
    io.out("flowscope \(flowScopeVersion)\n")
    return ExitStatus.success
}

/// The top-level help text.
public var topLevelHelp: String {
    var out = """
    flowscope \(flowScopeVersion): the flow-fetch engine and its test and observability kit.

    Usage: flowscope <command> [options]

    Commands:

    """
    let width = commands.map(\.spec.name.count).max() ?? 0
    for c in commands { out += "  \(c.spec.name.padding(width))  \(c.spec.summary)\n" }
    out += "  \("help".padding(width))  Shows this help, or a command's: flowscope help <command>.\n"
    out += "\nRun `flowscope <command> --help` for a command's options.\n"
    return out
}

extension CommandLine {
    /// Runs the flowscope command line with `arguments` (without the program name); returns the exit status.
    ///
    /// `sinks` adds sink types to the built-in ones (``builtInSinkFactories``), so that a custom
    /// distribution's configs can use them (`"type": "audit"`):
    ///
    /// ```swift
    /// import Foundation
    /// import FlowScopeCLI
    ///
    /// exit(await CommandLine.run(Array(CommandLine.arguments.dropFirst()), sinks: [AuditSinkFactory()]))
    /// ```
    /// A type registered twice is refused (exit status 2).
    public static func run(_ arguments: [String], output: Output = .standard, sinks: [any SinkFactory]) async -> Int32 {
        let registry: SinkRegistry
        do {
            registry = try SinkRegistry(builtInSinkFactories + sinks)
        } catch {
            output.err("flowscope: \(error.message)\n")
            return ExitStatus.usage
        }
        return await SinkRegistry.$current.withValue(registry) { await run(arguments, output: output) }
    }

    /// Runs the flowscope command line with `arguments` (without the program name) and the
    /// built-in sink types; returns the exit status.
    public static func run(_ arguments: [String], output: Output = .standard) async -> Int32 {
        guard let name = arguments.first else {
            output.err(topLevelHelp)
            return ExitStatus.usage
        }
        if name == "--help" || name == "-h" || name == "help" {
            if name == "help", arguments.count > 1 {
                guard let c = commands.first(where: { $0.spec.name == arguments[1] }) else {
                    output.err("flowscope help: unknown command \"\(arguments[1])\"\n")
                    return ExitStatus.usage
                }
                output.out(c.spec.help)
                return ExitStatus.success
            }
            output.out(topLevelHelp)
            return ExitStatus.success
        }
        if name == "--version" { return await versionCommand.run(ParsedArguments(), output) }
        guard let command = commands.first(where: { $0.spec.name == name }) else {
            output.err("flowscope: unknown command \"\(name)\" (see flowscope --help)\n")
            return ExitStatus.usage
        }
        let parsed: ParsedArguments
        do {
            parsed = try command.spec.parse(Array(arguments.dropFirst()))
        } catch {
            output.err(error.message + "\n")
            return ExitStatus.usage
        }
        if parsed.wantsHelp {
            output.out(command.spec.help)
            return ExitStatus.success
        }
        return await command.run(parsed, output)
    }
}

/// Writes all of `text` to a file descriptor, retrying short writes.
func writeAll(_ fd: Int32, _ text: String) {
    var bytes = Array(text.utf8)[...]
    while !bytes.isEmpty {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { return }
        bytes = bytes.dropFirst(n)
    }
}
