import FlowJSON
import Foundation

/// What a sink factory gets: the sink's options and where they came from.
public struct SinkContext: Sendable {
    /// The sink's name: its config entry's `name`, else its type.
    public var name: String
    /// The sink's config object minus `type`, `name` and `enabled`.
    public var options: [String: JSONValue]
    /// JSON path of the sink's entry in the config, e.g. `$.sinks[2]`.
    public var path: String
    /// The state directory (default `.flowscope/`): where sinks keep files unless told otherwise.
    public var stateDirectory: String
    /// FlowScope's version string (for the exec hello line, build info, ...).
    public var version: String
    /// The absolute directory of the config file the entry was read from; nil when there is none
    /// (`flowscope` without `--config`, a context made in code). ``filePath(_:)`` resolves relative
    /// paths against it.
    public var configDirectory: String?

    /// Creates a context.
    public init(name: String = "", options: [String: JSONValue] = [:], path: String = "$",
                stateDirectory: String = ".flowscope", version: String = "0.0.0", configDirectory: String? = nil) {
        self.name = name; self.options = options; self.path = path; self.stateDirectory = stateDirectory
        self.version = version; self.configDirectory = configDirectory
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

    /// A file path option, nil when absent. A relative path is resolved against the config file's
    /// directory (``configDirectory``), as every path in a config is, so the config works from any
    /// working directory; without a config file it stays relative to the working directory. An
    /// empty string is an error: `$.sinks[2].file: expected a non-empty path, got an empty string`.
    public func filePath(_ key: String) throws(JSONInputError) -> String? {
        guard let option = cursor.optional(key) else { return nil }
        let path = try option.string()
        guard !path.isEmpty else { throw option.expected("a non-empty path") }
        guard let configDirectory, !path.hasPrefix("/") else { return path }
        return ((configDirectory as NSString).appendingPathComponent(path) as NSString).standardizingPath
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

/// How a sink type is configured and built: the one path every sink takes, built-in or not.
///
/// A factory carries the type name used in configs, reads its options (the one place their
/// defaults live: `options(from:)` of an empty object gives the defaults), checks them without side
/// effects, and builds the sink.
///
/// ```swift
/// struct AuditSinkFactory: SinkFactory {
///     struct Options: Sendable { var path: String }
///     let type = "audit"
///     func options(from context: SinkContext) throws(JSONInputError) -> Options {
///         try context.checkKeys(["path"])
///         return Options(path: try context.filePath("path") ?? context.stateDirectory + "/audit.log")
///     }
///     func makeSink(_ options: Options, context: SinkContext) throws -> any EventSink {
///         try AuditSink(name: context.name, path: options.path)
///     }
/// }
/// ```
public protocol SinkFactory: Sendable {
    /// The sink's options, parsed and defaulted.
    associatedtype Options: Sendable
    /// The type name in a config's `sinks` list (`"type": "jsonl"`).
    var type: String { get }
    /// Reads and checks the options of a config entry; errors name the option's JSON path.
    /// Opens nothing, starts nothing.
    func options(from context: SinkContext) throws(JSONInputError) -> Options
    /// Checks what parsing cannot (a directory that must exist, a command on the PATH) without side
    /// effects. Default: nothing more.
    func validate(_ options: Options, context: SinkContext) throws(JSONInputError)
    /// The files the sink writes and the programs it starts, which `check-config` and `serve` check
    /// before any sink is built (see ``SinkRequirements``). Default: none.
    func requirements(_ options: Options, context: SinkContext) -> SinkRequirements
    /// Builds the sink (it may open files, start programs). Errors are reported at the entry's path.
    func makeSink(_ options: Options, context: SinkContext) throws -> any EventSink
}

extension SinkFactory {
    /// Nothing to check beyond parsing.
    public func validate(_ options: Options, context: SinkContext) throws(JSONInputError) {}
    /// No files, no programs.
    public func requirements(_ options: Options, context: SinkContext) -> SinkRequirements { SinkRequirements() }
}

/// A sink type that could not be registered.
public struct SinkRegistryError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong, naming the type.
    public var message: String
    /// An error with its message.
    public init(message: String) { self.message = message }
    /// The message.
    public var description: String { message }
}

/// Sink factories by type name (`metrics`, `memory`, `jsonl`, ...): the server and the CLI build
/// the sinks of a config through it, and a custom distribution adds its own factories.
///
/// ```swift
/// var registry = SinkRegistry()
/// try registry.register(MemorySink.Factory())
/// let sinks = try registry.makeSinks(config["sinks"], stateDirectory: ".flowscope", version: "1.0.0")
/// ```
public struct SinkRegistry: Sendable {
    /// A factory with its options type erased.
    private struct Entry: Sendable {
        var validate: @Sendable (SinkContext) throws(JSONInputError) -> Void
        var requirements: @Sendable (SinkContext) throws(JSONInputError) -> SinkRequirements
        var make: @Sendable (SinkContext) throws -> any EventSink
    }

    private var entries: [String: Entry] = [:]

    /// An empty registry.
    public init() {}

    /// A registry of `factories`; throws if two register the same type.
    public init(_ factories: [any SinkFactory]) throws(SinkRegistryError) {
        for factory in factories { try register(factory) }
    }

    /// Registers `factory` under its type. A type registered already is an error, so one type
    /// never silently replaces another.
    public mutating func register(_ factory: some SinkFactory) throws(SinkRegistryError) {
        let type = factory.type
        guard !type.isEmpty else { throw SinkRegistryError(message: "a sink factory has an empty type name") }
        guard entries[type] == nil else {
            throw SinkRegistryError(message: "sink type \(JSONValue.string(type).jsonText) is already registered")
        }
        entries[type] = Entry(
            validate: { context throws(JSONInputError) in try factory.validate(try factory.options(from: context), context: context) },
            requirements: { context throws(JSONInputError) in factory.requirements(try factory.options(from: context), context: context) },
            make: { context in
                let options = try factory.options(from: context)
                do {
                    return try factory.makeSink(options, context: context)
                } catch let error as JSONInputError {
                    throw error
                } catch {
                    throw JSONInputError(path: context.path, message: "cannot create the \(type) sink: \(error)")
                }
            })
    }

    /// The registered type names, sorted.
    public var types: [String] { entries.keys.sorted() }

    /// Builds one sink of `type`. An unknown type throws at `<context.path>.type`:
    /// `unknown sink type "x" (expected one of: console, exec, jsonl, memory)`.
    public func make(type: String, context: SinkContext) throws -> any EventSink {
        var context = context
        if context.name.isEmpty { context.name = type }
        return try entry(type, path: context.path).make(context)
    }

    /// Checks every entry of a config's `sinks` list (enabled or not) without side effects: types
    /// known, names unique, options valid. `configDirectory`: the config file's directory, given to
    /// every ``SinkContext`` (nil: no config file).
    public func validateSinks(_ value: JSONValue?, path: String = "$.sinks", stateDirectory: String,
                              version: String, configDirectory: String? = nil) throws(JSONInputError) {
        for item in try entries(value, path: path, stateDirectory: stateDirectory, version: version,
                                configDirectory: configDirectory) {
            try entry(item.type, path: item.context.path).validate(item.context)
        }
    }

    /// What every enabled entry of a config's `sinks` list needs (``SinkRequirements``), with the
    /// entry's JSON path (`$.sinks[2]`), in order. Opens nothing.
    public func requirements(_ value: JSONValue?, path: String = "$.sinks", stateDirectory: String,
                             version: String, configDirectory: String? = nil) throws(JSONInputError) -> [(path: String, requirements: SinkRequirements)] {
        var out: [(path: String, requirements: SinkRequirements)] = []
        for item in try entries(value, path: path, stateDirectory: stateDirectory, version: version,
                                configDirectory: configDirectory) where item.enabled {
            out.append((item.context.path, try entry(item.type, path: item.context.path).requirements(item.context)))
        }
        return out
    }

    /// Builds every enabled sink of a config's `sinks` list (`[{ "type": ..., "name": ...,
    /// ...options, "enabled": true }]`), in order. `enabled` defaults to true, `name` to the type;
    /// a disabled entry is still checked. `value` nil means no sinks. Sinks built before an
    /// error are closed. `configDirectory`: the config file's directory, given to every
    /// ``SinkContext`` (nil: no config file).
    public func makeSinks(_ value: JSONValue?, path: String = "$.sinks", stateDirectory: String,
                          version: String, configDirectory: String? = nil) throws -> [any EventSink] {
        let items = try entries(value, path: path, stateDirectory: stateDirectory, version: version,
                                configDirectory: configDirectory)
        for item in items where !item.enabled { try entry(item.type, path: item.context.path).validate(item.context) }
        var sinks: [any EventSink] = []
        for item in items where item.enabled {
            do {
                sinks.append(try entry(item.type, path: item.context.path).make(item.context))
            } catch {
                for sink in sinks { sink.close() }
                throw error
            }
        }
        return sinks
    }

    private func entry(_ type: String, path: String) throws(JSONInputError) -> Entry {
        guard let entry = entries[type] else {
            throw JSONInputError(path: path + ".type",
                                 message: "unknown sink type \(JSONValue.string(type).jsonText) (expected one of: \(types.joined(separator: ", ")))")
        }
        return entry
    }

    /// The entries of a `sinks` list with their contexts; checks types and unique names.
    private func entries(_ value: JSONValue?, path: String, stateDirectory: String, version: String,
                         configDirectory: String?) throws(JSONInputError) -> [(type: String, enabled: Bool, context: SinkContext)] {
        guard let value else { return [] }
        var out: [(type: String, enabled: Bool, context: SinkContext)] = []
        var named: [String: String] = [:]
        for item in try JSONCursor(value, path: path).array() {
            let object = try item.object()
            let type = try object.required("type").string()
            _ = try entry(type, path: item.path)
            let enabled = try object.optional("enabled")?.bool() ?? true
            var name = type
            if let option = object.optional("name") {
                name = try option.string()
                guard !name.isEmpty else { throw option.expected("a non-empty sink name") }
            }
            if let other = named[name] {
                throw JSONInputError(path: JSONPath.appending(key: "name", to: item.path),
                                     message: "sink name \(JSONValue.string(name).jsonText) is already used by \(other) (give each sink of a type a different \"name\")")
            }
            named[name] = item.path
            var options = object.members
            options["type"] = nil
            options["enabled"] = nil
            options["name"] = nil
            out.append((type, enabled, SinkContext(name: name, options: options, path: item.path,
                                                   stateDirectory: stateDirectory, version: version,
                                                   configDirectory: configDirectory)))
        }
        return out
    }
}
