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

    // MARK: Reading options, with errors naming their JSON path (FlowJSON's cursor style)

    /// The options as a FlowJSON object cursor at `path`, for plugins that read with cursors.
    public var cursor: JSONObjectCursor { JSONObjectCursor(path: path, members: options) }

    /// The JSON path of option `key`, e.g. `$.sinks[2].rotateBytes`.
    public func path(of key: String) -> String { JSONPath.appending(key: key, to: path) }

    /// Rejects any option not in `allowed`:
    /// `$.sinks[2].colour: unknown key "colour" (expected one of: color, stream)`.
    public func checkKeys(_ allowed: Set<String>) throws(JSONInputError) {
        try cursor.rejectUnknownKeys(allowed: allowed)
    }

    /// A string option, nil when absent.
    public func string(_ key: String) throws(JSONInputError) -> String? {
        try cursor.optional(key)?.string()
    }

    /// A string option that must be one of `choices`; nil when absent.
    public func choice(_ key: String, _ choices: [String]) throws(JSONInputError) -> String? {
        guard let option = cursor.optional(key) else { return nil }
        let list = choices.map { JSONValue.string($0).jsonText }.joined(separator: ", ")
        guard let s = option.value.stringValue, choices.contains(s) else { throw option.expected("one of \(list)") }
        return s
    }

    /// An integer option within `range`; nil when absent.
    public func int(_ key: String, in range: ClosedRange<Int> = Int.min...Int.max) throws(JSONInputError) -> Int? {
        guard let option = cursor.optional(key) else { return nil }
        guard let n = option.value.intValue, range.contains(n) else {
            let what: String
            if range.lowerBound == 1 && range.upperBound == Int.max { what = "a positive integer" }
            else if range.lowerBound == 0 && range.upperBound == Int.max { what = "a non-negative integer" }
            else if range.upperBound == Int.max { what = "an integer >= \(range.lowerBound)" }
            else if range.lowerBound == Int.min { what = "an integer" }
            else { what = "an integer in \(range.lowerBound)...\(range.upperBound)" }
            throw option.expected(what)
        }
        return n
    }

    /// A number option within `range`; nil when absent.
    public func number(_ key: String, in range: ClosedRange<Double> = -Double.greatestFiniteMagnitude...Double.greatestFiniteMagnitude) throws(JSONInputError) -> Double? {
        guard let option = cursor.optional(key) else { return nil }
        guard let n = option.value.numberValue, range.contains(n) else {
            throw option.expected(range.lowerBound == -Double.greatestFiniteMagnitude ? "a number" : "a number in \(range.lowerBound)...\(range.upperBound)")
        }
        return n
    }

    /// A boolean option; nil when absent.
    public func bool(_ key: String) throws(JSONInputError) -> Bool? {
        try cursor.optional(key)?.bool()
    }

    /// An array-of-strings option; nil when absent. `nonEmpty` rejects `[]`.
    public func strings(_ key: String, nonEmpty: Bool = false) throws(JSONInputError) -> [String]? {
        guard let option = cursor.optional(key) else { return nil }
        guard let items = option.value.arrayValue, !(nonEmpty && items.isEmpty) else {
            throw option.expected(nonEmpty ? "a non-empty array of strings" : "an array of strings")
        }
        var out: [String] = []
        for item in try option.array() { out.append(try item.string()) }
        return out
    }

    /// An error at option `key` when it is required and absent:
    /// `$.sinks[3]: missing required key "command" (expected an argv array)`.
    public func missing(_ key: String, _ expected: String) -> JSONInputError {
        JSONInputError(path: path, message: "missing required key \(JSONValue.string(key).jsonText) (expected \(expected))")
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

    /// Checks a sink's options without building it (no files opened, no program started).
    public typealias Validator = @Sendable (SinkContext) throws -> Void

    private var factories: [String: Factory] = [:]
    private var validators: [String: Validator] = [:]

    /// An empty registry.
    public init() {}

    /// Registers (or replaces) the factory for `type`. Give `validate` when building the sink has side
    /// effects (files, processes), so `validateSinks` can check its options without them.
    public mutating func register(_ type: String, validate: Validator? = nil, _ make: @escaping Factory) {
        factories[type] = make
        validators[type] = validate
    }

    /// Checks every entry of a config's `sinks` list (enabled or not) without side effects: through the
    /// type's validator, or by building it when the type has none (its building has no side effects).
    public func validateSinks(_ value: JSONValue?, path: String = "$.sinks", stateDirectory: String, version: String) throws {
        guard let value else { return }
        for entry in try JSONCursor(value, path: path).array() {
            let object = try entry.object()
            let type = try object.required("type").string()
            _ = try object.optional("enabled")?.bool()
            var options = object.members
            options["type"] = nil
            options["enabled"] = nil
            let context = SinkContext(options: options, path: entry.path, stateDirectory: stateDirectory, version: version)
            if let validate = validators[type] {
                try validate(context)
            } else {
                let sink = try make(type: type, context: context)
                (sink as? ClosingSink)?.close()
            }
        }
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
        var sinks: [any EventSink] = []
        for entry in try JSONCursor(value, path: path).array() {
            let object = try entry.object()
            let type = try object.required("type").string()
            let enabled = try object.optional("enabled")?.bool() ?? true
            guard factories[type] != nil else {
                _ = try make(type: type, context: SinkContext(path: entry.path))
                continue
            }
            guard enabled else { continue }
            var options = object.members
            options["type"] = nil
            options["enabled"] = nil
            let context = SinkContext(options: options, path: entry.path, stateDirectory: stateDirectory, version: version)
            sinks.append(try make(type: type, context: context))
        }
        return sinks
    }
}
