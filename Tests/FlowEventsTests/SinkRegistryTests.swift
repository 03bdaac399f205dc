import FlowEvents
import FlowJSON
import Synchronization
import Testing

final class NamedSink: EventSink {
    let name: String
    let type: String
    let options: [String: JSONValue]
    let closed = Mutex(0)
    init(name: String, type: String, options: [String: JSONValue]) { self.name = name; self.type = type; self.options = options }
    func consume(_ batch: [Envelope]) {}
    func close() { closed.withLock { $0 += 1 } }
}

/// A factory whose options are the raw entry, checked by `check`; counts the sinks it built.
struct TestFactory: SinkFactory {
    let type: String
    var check: @Sendable (SinkContext) throws(JSONInputError) -> Void = { _ throws(JSONInputError) in }
    var refuse: @Sendable (SinkContext) throws(JSONInputError) -> Void = { _ throws(JSONInputError) in }
    let built = Built()

    func options(from context: SinkContext) throws(JSONInputError) -> [String: JSONValue] {
        try check(context)
        return context.options
    }
    func validate(_ options: [String: JSONValue], context: SinkContext) throws(JSONInputError) { try refuse(context) }
    func makeSink(_ options: [String: JSONValue], context: SinkContext) throws -> any EventSink {
        try refuse(context)
        if options["fail"] != nil { throw TestFailure() }
        let sink = NamedSink(name: context.name, type: type, options: options)
        built.append(sink)
        return sink
    }
}

final class Built: Sendable {
    let sinks = Mutex<[NamedSink]>([])
    func withLock<R>(_ body: (inout [NamedSink]) -> R) -> R { sinks.withLock { body(&$0) } }
    func append(_ sink: NamedSink) { sinks.withLock { $0.append(sink) } }
}

struct TestFailure: Error, CustomStringConvertible { var description: String { "no room" } }

@Suite("SinkRegistry")
struct SinkRegistryTests {
    let memory = TestFactory(type: "memory", check: { ctx throws(JSONInputError) in
        try ctx.checkKeys(["capacity", "fail"])
        _ = try ctx.int("capacity", in: 1...Int.max)
    })
    let console = TestFactory(type: "console")

    var registry: SinkRegistry {
        // The two types differ, so registering cannot fail here.
        (try? SinkRegistry([memory, console])) ?? SinkRegistry()
    }

    @Test("registering a type twice is an error naming the type")
    func duplicateType() throws {
        var r = SinkRegistry()
        try r.register(TestFactory(type: "jsonl"))
        #expect(throws: SinkRegistryError(message: "sink type \"jsonl\" is already registered")) {
            try r.register(TestFactory(type: "jsonl"))
        }
        #expect(throws: SinkRegistryError.self) { _ = try SinkRegistry([TestFactory(type: "a"), TestFactory(type: "a")]) }
        #expect(r.types == ["jsonl"])
    }

    @Test("validation parses and checks every entry, enabled or not, and builds nothing")
    func validateBuildsNothing() throws {
        let config: JSONValue = [["type": "memory", "capacity": 5], ["type": "console", "enabled": false]]
        try registry.validateSinks(config, stateDirectory: ".", version: "1")
        #expect(memory.built.withLock { $0.isEmpty } && console.built.withLock { $0.isEmpty })
        let refusing = TestFactory(type: "exec", refuse: { ctx throws(JSONInputError) in
            throw JSONInputError(path: ctx.path(of: "command"), message: "not found")
        })
        let r = try SinkRegistry([refusing])
        #expect(throws: JSONInputError(path: "$.sinks[0].command", message: "not found")) {
            try r.validateSinks([["type": "exec", "enabled": false]], stateDirectory: ".", version: "1")
        }
    }

    @Test("names default to the type, may be set with name, and must be unique")
    func names() throws {
        let sinks = try registry.makeSinks([["type": "memory"], ["type": "memory", "name": "memory-2"]], stateDirectory: ".", version: "1")
        #expect(sinks.map(\.name) == ["memory", "memory-2"])
        #expect(sinks.map(\.type) == ["memory", "memory"])
        #expect(throws: JSONInputError(path: "$.sinks[1].name",
                                       message: "sink name \"memory\" is already used by $.sinks[0] (give each sink of a type a different \"name\")")) {
            _ = try registry.makeSinks([["type": "memory"], ["type": "memory"]], stateDirectory: ".", version: "1")
        }
        #expect(throws: JSONInputError.self) { _ = try registry.makeSinks([["type": "memory", "name": ""]], stateDirectory: ".", version: "1") }
    }

    @Test("a sink that cannot be built is reported at its entry, and the sinks built before it are closed")
    func failedBuildClosesOthers() throws {
        #expect(throws: JSONInputError(path: "$.sinks[1]", message: "cannot create the memory sink: no room")) {
            _ = try registry.makeSinks([["type": "console"], ["type": "memory", "fail": true]], stateDirectory: ".", version: "1")
        }
        let built = console.built.withLock { $0 }
        #expect(built.count == 1 && built[0].closed.withLock { $0 } == 1)
    }

    @Test("an unknown type names its path and the known types")
    func unknownType() {
        #expect(throws: JSONInputError(path: "$.sinks[2].type", message: "unknown sink type \"x\" (expected one of: console, memory)")) {
            _ = try registry.make(type: "x", context: SinkContext(path: "$.sinks[2]"))
        }
    }

    @Test("makeSinks builds enabled sinks in order with options minus type, name and enabled")
    func makeSinks() throws {
        let config: JSONValue = [
            ["type": "console", "color": "never"],
            ["type": "memory", "enabled": false],
            ["type": "memory", "capacity": 5, "enabled": true, "name": "m"],
        ]
        let sinks = try registry.makeSinks(config, stateDirectory: ".state", version: "1.2.3")
        #expect(sinks.map(\.name) == ["console", "m"])
        #expect((sinks[0] as? NamedSink)?.options == ["color": "never"])
        #expect((sinks[1] as? NamedSink)?.options == ["capacity": 5])
    }

    @Test("bad entries and bad options are errors naming their JSON path")
    func badEntries() {
        func error(_ config: JSONValue) -> String? {
            do { _ = try registry.makeSinks(config, stateDirectory: ".", version: "1") } catch let e as JSONInputError {
                return e.description
            } catch { return "other" }
            return nil
        }
        #expect(error([["color": "x"]]) == "$.sinks[0]: missing required key \"type\"")
        #expect(error([["type": "memory", "capacity": "10MB"]]) == "$.sinks[0].capacity: expected a positive integer, got a string \"10MB\"")
        #expect(error([["type": "console"], ["type": "memory", "capcity": 1]]) == "$.sinks[1].capcity: unknown key \"capcity\" (expected one of: capacity, fail)")
        #expect(error([["type": "memory", "enabled": "yes"]]) == "$.sinks[0].enabled: expected true or false, got a string \"yes\"")
        #expect(error([["type": "nope", "enabled": false]]) == "$.sinks[0].type: unknown sink type \"nope\" (expected one of: console, memory)")
        #expect(error(["type": "memory"])?.hasPrefix("$.sinks: expected an array") == true)
    }

    @Test("filePath resolves a relative path against the config file's directory, and only then")
    func filePath() throws {
        let options: [String: JSONValue] = ["file": "logs/../audit.log", "absolute": "/var/log/a.log", "empty": "", "number": 3]
        let fromFile = SinkContext(options: options, path: "$.sinks[1]", configDirectory: "/etc/flowscope")
        #expect(try fromFile.filePath("file") == "/etc/flowscope/audit.log")
        #expect(try fromFile.filePath("absolute") == "/var/log/a.log")
        #expect(try fromFile.filePath("missing") == nil)
        #expect(throws: JSONInputError(path: "$.sinks[1].empty", message: "expected a non-empty path, got an empty string")) {
            try fromFile.filePath("empty")
        }
        #expect(throws: JSONInputError.self) { try fromFile.filePath("number") }
        // Without a config file (built-in config, a context made in code): relative to the working directory.
        #expect(try SinkContext(options: options).filePath("file") == "logs/../audit.log")
    }

    @Test("validateSinks and makeSinks give every context the config file's directory")
    func configDirectoryReachesContexts() throws {
        final class Seen: Sendable { let directories = Mutex<[String?]>([]) }
        let seen = Seen()
        let recording = TestFactory(type: "audit", check: { ctx throws(JSONInputError) in
            seen.directories.withLock { $0.append(ctx.configDirectory) }
        })
        let r = try SinkRegistry([recording])
        try r.validateSinks([["type": "audit", "enabled": false]], stateDirectory: ".", version: "1", configDirectory: "/etc/flowscope")
        _ = try r.makeSinks([["type": "audit"]], stateDirectory: ".", version: "1", configDirectory: "/srv/conf")
        _ = try r.makeSinks([["type": "audit"]], stateDirectory: ".", version: "1")
        #expect(seen.directories.withLock { $0 } == ["/etc/flowscope", "/srv/conf", nil])
    }

    @Test("option readers check types and ranges")
    func readers() throws {
        let ctx = SinkContext(options: ["a": ["x", 1], "b": "sometimes", "c": [], "d": 1.5], path: "$.sinks[0]")
        #expect(throws: JSONInputError(path: "$.sinks[0].a[1]", message: "expected a string, got a number 1")) { try ctx.strings("a") }
        #expect(throws: JSONInputError(path: "$.sinks[0].b", message: "expected one of \"never\", \"batch\", got a string \"sometimes\"")) {
            try ctx.choice("b", ["never", "batch"])
        }
        #expect(throws: JSONInputError.self) { try ctx.strings("c", nonEmpty: true) }
        #expect(throws: JSONInputError.self) { try ctx.int("d") }
        #expect(try ctx.number("d") == 1.5)
        #expect(try ctx.string("missing") == nil)
    }
}
