import FlowJSON

/// What a sink factory gets: the sink's options and where they came from.
public struct SinkContext: Sendable {
    /// The sink's config object minus `type` and `enabled`.
    public var options: [String: JSONValue]
    /// JSON path of the sink's entry in the config, e.g. `$.sinks[2]`.
    public var path: String
    /// The state directory (default `.flowscope/`): where sinks keep files unless told otherwise.
    public var stateDirectory: String
    /// FlowScope's version string (for the exec hello line, build info, ...).
    public var version: String

    /// Creates a context.
    public init(options: [String: JSONValue] = [:], path: String = "$", stateDirectory: String = ".flowscope",
                version: String = "0.0.0") {
        self.options = options; self.path = path; self.stateDirectory = stateDirectory; self.version = version
    }

    // MARK: Reading options, with errors naming their JSON path

    /// The JSON path of option `key`, e.g. `$.sinks[2].rotateBytes`.
    public func path(of key: String) -> String { path + "." + key }

    /// Rejects any option not in `allowed`: `$.sinks[2].colour: unknown option (expected one of: color, stream)`.
    public func checkKeys(_ allowed: Set<String>) throws(JSONInputError) {
        for key in options.keys.sorted() where !allowed.contains(key) {
            throw JSONInputError(path: path(of: key),
                                 message: "unknown option (expected one of: \(allowed.sorted().joined(separator: ", ")))")
        }
    }

    /// A string option, nil when absent.
    public func string(_ key: String) throws(JSONInputError) -> String? {
        guard let value = options[key] else { return nil }
        guard let s = value.stringValue else { throw mismatch(key, "a string", value) }
        return s
    }

    /// A string option that must be one of `choices`; nil when absent.
    public func choice(_ key: String, _ choices: [String]) throws(JSONInputError) -> String? {
        guard let s = try string(key) else { return nil }
        guard choices.contains(s) else {
            throw JSONInputError(path: path(of: key),
                                 message: "expected one of \(choices.map { "\"\($0)\"" }.joined(separator: ", ")), got \(quoted(.string(s)))")
        }
        return s
    }

    /// An integer option within `range`; nil when absent.
    public func int(_ key: String, in range: ClosedRange<Int> = Int.min...Int.max) throws(JSONInputError) -> Int? {
        guard let value = options[key] else { return nil }
        guard let n = value.intValue, range.contains(n) else {
            let what: String
            if range.lowerBound == 1 && range.upperBound == Int.max { what = "a positive integer" }
            else if range.lowerBound == 0 && range.upperBound == Int.max { what = "a non-negative integer" }
            else if range.upperBound == Int.max { what = "an integer >= \(range.lowerBound)" }
            else { what = "an integer in \(range.lowerBound)...\(range.upperBound)" }
            throw mismatch(key, what, value)
        }
        return n
    }

    /// A number option within `range`; nil when absent.
    public func number(_ key: String, in range: ClosedRange<Double> = -Double.greatestFiniteMagnitude...Double.greatestFiniteMagnitude) throws(JSONInputError) -> Double? {
        guard let value = options[key] else { return nil }
        guard let n = value.numberValue, range.contains(n) else {
            throw mismatch(key, "a number in \(range.lowerBound)...\(range.upperBound)", value)
        }
        return n
    }

    /// A boolean option; nil when absent.
    public func bool(_ key: String) throws(JSONInputError) -> Bool? {
        guard let value = options[key] else { return nil }
        guard let b = value.boolValue else { throw mismatch(key, "true or false", value) }
        return b
    }

    /// An array-of-strings option; nil when absent. `nonEmpty` rejects `[]`.
    public func strings(_ key: String, nonEmpty: Bool = false) throws(JSONInputError) -> [String]? {
        guard let value = options[key] else { return nil }
        guard let items = value.arrayValue else {
            throw mismatch(key, nonEmpty ? "a non-empty array of strings" : "an array of strings", value)
        }
        if nonEmpty && items.isEmpty {
            throw JSONInputError(path: path(of: key), message: "expected a non-empty array of strings, got []")
        }
        var out: [String] = []
        for (i, item) in items.enumerated() {
            guard let s = item.stringValue else {
                throw JSONInputError(path: path(of: key) + "[\(i)]", message: "expected a string, got \(quoted(item))")
            }
            out.append(s)
        }
        return out
    }

    /// An error at option `key` when it is required and absent.
    public func missing(_ key: String, _ expected: String) -> JSONInputError {
        JSONInputError(path: path(of: key), message: "required option is missing (expected \(expected))")
    }

    private func mismatch(_ key: String, _ expected: String, _ got: JSONValue) -> JSONInputError {
        JSONInputError(path: path(of: key), message: "expected \(expected), got \(quoted(got))")
    }

    private func quoted(_ value: JSONValue) -> String {
        let text = value.jsonText
        return text.count > 60 ? String(text.prefix(57)) + "..." : text
    }
}

/// Sink factories by type name (`metrics`, `memory`, `jsonl`, ...): the server and the CLI build
/// the sinks of a config through it.
///
/// ```swift
/// var registry = SinkRegistry()
/// MemorySink.register(in: &registry)
/// let sinks = try registry.makeSinks(config["sinks"], stateDirectory: ".flowscope", version: "1.0.0")
/// ```
public struct SinkRegistry: Sendable {
    /// Builds a sink from its context; throws `JSONInputError` naming the option at fault.
    public typealias Factory = @Sendable (SinkContext) throws -> any EventSink

    private var factories: [String: Factory] = [:]

    /// An empty registry.
    public init() {}

    /// Registers (or replaces) the factory for `type`.
    public mutating func register(_ type: String, _ make: @escaping Factory) {
        factories[type] = make
    }

    /// The registered type names, sorted.
    public var types: [String] { factories.keys.sorted() }

    /// Builds one sink of `type`. An unknown type throws at `<context.path>.type`:
    /// `unknown sink type "x" (expected one of: console, exec, jsonl, memory)`.
    public func make(type: String, context: SinkContext) throws -> any EventSink {
        guard let factory = factories[type] else {
            throw JSONInputError(path: context.path + ".type",
                                 message: "unknown sink type \(JSONValue.string(type).jsonText) (expected one of: \(types.joined(separator: ", ")))")
        }
        return try factory(context)
    }

    /// Builds every enabled sink of a config's `sinks` list (`[{ "type": ..., ...options,
    /// "enabled": true }]`), in order. `enabled` defaults to true; a disabled entry is still
    /// checked for its `type`. `value` nil means no sinks.
    public func makeSinks(_ value: JSONValue?, path: String = "$.sinks", stateDirectory: String,
                          version: String) throws -> [any EventSink] {
        guard let value else { return [] }
        guard let entries = value.arrayValue else {
            throw JSONInputError(path: path, message: "expected an array of sink objects, got \(value.jsonText.prefix(60))")
        }
        var sinks: [any EventSink] = []
        for (i, entry) in entries.enumerated() {
            let entryPath = "\(path)[\(i)]"
            guard var options = entry.objectValue else {
                throw JSONInputError(path: entryPath, message: "expected a sink object like {\"type\": \"memory\"}, got \(entry.jsonText.prefix(60))")
            }
            guard let typeValue = options.removeValue(forKey: "type") else {
                throw JSONInputError(path: entryPath + ".type",
                                     message: "required key is missing (expected one of: \(types.joined(separator: ", ")))")
            }
            guard let type = typeValue.stringValue else {
                throw JSONInputError(path: entryPath + ".type", message: "expected a string, got \(typeValue.jsonText.prefix(60))")
            }
            var enabled = true
            if let enabledValue = options.removeValue(forKey: "enabled") {
                guard let b = enabledValue.boolValue else {
                    throw JSONInputError(path: entryPath + ".enabled", message: "expected true or false, got \(enabledValue.jsonText.prefix(60))")
                }
                enabled = b
            }
            guard factories[type] != nil else {
                _ = try make(type: type, context: SinkContext(path: entryPath))
                continue
            }
            guard enabled else { continue }
            let context = SinkContext(options: options, path: entryPath, stateDirectory: stateDirectory, version: version)
            sinks.append(try make(type: type, context: context))
        }
        return sinks
    }
}
