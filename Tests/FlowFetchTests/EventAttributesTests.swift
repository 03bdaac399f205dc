import FlowFetch
import FlowJSON
import Testing

@Suite("Event attributes")
struct EventAttributesTests {
    @Test("reads, replaces and removes by name; keeps the order they were set in")
    func subscriptSemantics() {
        var attrs: EventAttributes = ["layer": "memory", "age": 1.5]
        #expect(attrs["layer"] == "memory")
        #expect(attrs["missing"] == nil)
        attrs["age"] = 2
        attrs["audience"] = "targeted"
        #expect(attrs.keys == ["layer", "age", "audience"])
        #expect(attrs["age"] == 2)
        attrs["layer"] = nil
        #expect(attrs.keys == ["age", "audience"])
        #expect(attrs.count == 2 && !attrs.isEmpty)
        attrs["nothing"] = nil
        #expect(attrs.count == 2)
    }

    @Test("compare and hash as a set of pairs, whatever the order")
    func equalityIgnoresOrder() {
        var ab = EventAttributes(minimumCapacity: 2)
        ab["a"] = 1
        ab["b"] = "x"
        let ba: EventAttributes = ["b": "x", "a": 1]
        #expect(ab == ba)
        #expect(ab.hashValue == ba.hashValue)
        #expect(ab != ["a": 1, "b": "y"])
        #expect(ab != ["a": 1])
        #expect(ab == EventAttributes(["a": 1, "b": "x"]))
        #expect(Set([ab, ba]).count == 1)
    }

    @Test("write as a JSON object with sorted keys")
    func jsonIsSorted() {
        let attrs: EventAttributes = ["z": 1, "a": ["n": true], "m": .null]
        #expect(attrs.description == #"{"a":{"n":true},"m":null,"z":1}"#)
        #expect(attrs.sortedByName.map(\.key) == ["a", "m", "z"])
        #expect(attrs.dictionary == ["z": 1, "a": ["n": true], "m": .null])
        #expect(Array(attrs).map(\.key) == ["z", "a", "m"])
    }
}
