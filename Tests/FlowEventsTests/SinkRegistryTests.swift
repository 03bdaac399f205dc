import FlowEvents
import FlowJSON
import Testing

final class NamedSink: EventSink {
    let name: String
    let options: [String: JSONValue]
    init(name: String, options: [String: JSONValue]) { self.name = name; self.options = options }
    func consume(_ batch: [Envelope]) {}
    func flush() {}
}

@Suite("SinkRegistry")
struct SinkRegistryTests {
    var registry: SinkRegistry {
        var r = SinkRegistry()
        r.register("memory") { ctx in
            try ctx.checkKeys(["capacity"])
            _ = try ctx.int("capacity", in: 1...Int.max)
            return NamedSink(name: "memory", options: ctx.options)
        }
        r.register("console") { ctx in NamedSink(name: "console", options: ctx.options) }
        return r
    }

    @Test("an unknown type names its path and the known types")
    func unknownType() {
        #expect(throws: JSONInputError(path: "$.sinks[2].type", message: "unknown sink type \"x\" (expected one of: console, memory)")) {
            _ = try registry.make(type: "x", context: SinkContext(path: "$.sinks[2]"))
        }
    }

    @Test("makeSinks builds enabled sinks in order with options minus type and enabled")
    func makeSinks() throws {
        let config: JSONValue = [
            ["type": "console", "color": "never"],
            ["type": "memory", "enabled": false],
            ["type": "memory", "capacity": 5, "enabled": true],
        ]
        let sinks = try registry.makeSinks(config, stateDirectory: ".state", version: "1.2.3")
        #expect(sinks.map(\.name) == ["console", "memory"])
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
        #expect(error([["type": "console"], ["type": "memory", "capcity": 1]]) == "$.sinks[1].capcity: unknown key \"capcity\" (expected one of: capacity)")
        #expect(error([["type": "memory", "enabled": "yes"]]) == "$.sinks[0].enabled: expected true or false, got a string \"yes\"")
        #expect(error([["type": "nope", "enabled": false]]) == "$.sinks[0].type: unknown sink type \"nope\" (expected one of: console, memory)")
        #expect(error(["type": "memory"])?.hasPrefix("$.sinks: expected an array") == true)
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
