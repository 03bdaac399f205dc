/// A command's options, for parsing and for `--help`.
public struct CommandSpec: Sendable {
    /// One option: `--name` with or without a value.
    public struct Option: Sendable {
        public var name: String
        public var value: String?
        public var help: String
        public init(_ name: String, value: String? = nil, _ help: String) { self.name = name; self.value = value; self.help = help }
    }
    public var name: String
    public var summary: String
    public var usage: String
    public var options: [Option]
    public var positionals: ClosedRange<Int>
    public var details: String

    public init(name: String, summary: String, usage: String, options: [Option] = [], positionals: ClosedRange<Int> = 0...0,
                details: String = "") {
        self.name = name; self.summary = summary; self.usage = usage; self.options = options
        self.positionals = positionals; self.details = details
    }

    /// The `--help` text.
    public var help: String {
        var out = "\(summary)\n\nUsage: flowscope \(usage)\n"
        if !options.isEmpty {
            out += "\nOptions:\n"
            let rows = options.map { ("--\($0.name)" + ($0.value.map { " \($0)" } ?? ""), $0.help) }
                + [("--help", "show this help")]
            let width = rows.map(\.0.count).max() ?? 0
            for (flag, help) in rows { out += "  \(flag.padding(width))  \(help)\n" }
        }
        if !details.isEmpty { out += "\n\(details)\n" }
        return out
    }
}

/// Parsed command-line arguments.
public struct ParsedArguments: Sendable, Equatable {
    public var positionals: [String] = []
    public var values: [String: String] = [:]
    public var flags: Set<String> = []
    /// Whether `--help` (or `-h`) was given.
    public var wantsHelp = false

    /// The value of `--name`, if given.
    public func value(_ name: String) -> String? { values[name] }
    /// Whether the flag `--name` was given.
    public func flag(_ name: String) -> Bool { flags.contains(name) }
}

/// A usage error: says what is wrong and points at `--help`. Exit status 2.
public struct UsageError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

extension CommandSpec {
    /// Parses `arguments` (after the command name). Accepts `--name value`, `--name=value`, flags,
    /// and `--` to end options.
    public func parse(_ arguments: [String]) throws(UsageError) -> ParsedArguments {
        var parsed = ParsedArguments()
        var i = 0
        var optionsEnded = false
        let byName = Dictionary(options.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        while i < arguments.count {
            let arg = arguments[i]
            i += 1
            if optionsEnded || !arg.hasPrefix("-") || arg == "-" {
                parsed.positionals.append(arg)
                continue
            }
            if arg == "--" { optionsEnded = true; continue }
            if arg == "--help" || arg == "-h" { parsed.wantsHelp = true; continue }
            var name = String(arg.drop(while: { $0 == "-" }))
            var inline: String?
            if let eq = name.firstIndex(of: "=") {
                inline = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            guard let option = byName[name] else {
                throw UsageError("flowscope \(self.name): unknown option \(arg.split(separator: "=").first ?? "") (see flowscope \(self.name) --help)")
            }
            if let placeholder = option.value {
                if let inline {
                    parsed.values[name] = inline
                } else {
                    guard i < arguments.count else {
                        throw UsageError("flowscope \(self.name): --\(name) needs a value \(placeholder)")
                    }
                    parsed.values[name] = arguments[i]
                    i += 1
                }
            } else {
                guard inline == nil else { throw UsageError("flowscope \(self.name): --\(name) takes no value") }
                parsed.flags.insert(name)
            }
        }
        if !parsed.wantsHelp && !positionals.contains(parsed.positionals.count) {
            let (low, high) = (positionals.lowerBound, positionals.upperBound)
            let (want, count) = low == high ? ("\(low)", low)
                : high == Int.max ? ("at least \(low)", low)
                : low == 0 ? ("at most \(high)", high)
                : ("\(low) to \(high)", high)
            throw UsageError("flowscope \(self.name): expected \(want) argument\(count == 1 ? "" : "s"), got \(parsed.positionals.count) (usage: flowscope \(usage))")
        }
        return parsed
    }
}

extension String {
    func padding(_ width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
}
