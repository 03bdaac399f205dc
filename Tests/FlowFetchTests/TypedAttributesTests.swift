@testable import FlowFetch
import FlowJSON
import Testing

/// The typed attribute sets of fetch.start, cache.hit and fetch.end must be indistinguishable from
/// the same attributes built as a list: same names, values, order, JSON, equality and hash.
@Suite("Typed event attributes")
struct TypedAttributesTests {
    /// Each typed set with the list it stands for (in the order the engine used to set them).
    static let cases: [(typed: EventAttributes, list: EventAttributes)] = [
        (.fetchStart(call: .getFlow, policy: .returnCacheDataElseLoad, loadTimeout: 5),
         ["call": "getFlow", "policy": "returnCacheDataElseLoad", "loadTimeout": 5]),
        (.fetchStart(call: .getFlowForDefaultAudience, policy: .returnCacheDataIfNotExpiredElseLoad(maxAge: 60), loadTimeout: nil),
         ["call": "getFlowForDefaultAudience", "policy": "returnCacheDataIfNotExpiredElseLoad(60)", "loadTimeout": .null]),
        (.cacheHit(layer: .memory, age: 1.25, fromDefaultAudience: false),
         ["layer": "memory", "age": 1.25, "audience": "targeted"]),
        (.cacheHit(layer: .disk, age: 0, fromDefaultAudience: true),
         ["layer": "disk", "age": 0, "audience": "default"]),
        (.fetchEndFlow(call: .getFlowOrDefault, duration: 0.5, source: .defaultAudience, variation: "a-variation-id-longer-than-15",
                       audience: "All Users", targetingLost: true),
         ["call": "getFlowOrDefault", "duration": 0.5, "source": "defaultAudience",
          "variation": "a-variation-id-longer-than-15", "audience": "All Users", "targetingLost": true]),
    ]

    @Test("read like the list they stand for", arguments: 0..<cases.count)
    func readsLikeTheList(_ index: Int) {
        let (typed, list) = Self.cases[index]
        #expect(typed == list && list == typed)
        #expect(typed.hashValue == list.hashValue)
        #expect(typed.description == list.description)
        #expect(typed.count == list.count && !typed.isEmpty)
        #expect(typed.keys == list.keys)
        #expect(Array(typed).map(\.key) == Array(list).map(\.key))
        #expect(Array(typed).map(\.value) == Array(list).map(\.value))
        #expect(typed.sortedByName.map(\.key) == list.sortedByName.map(\.key))
        #expect(typed.sortedByName.map(\.value) == list.sortedByName.map(\.value))
        #expect(typed.dictionary == list.dictionary)
        for key in list.keys { #expect(typed[key] == list[key], "\(key)") }
        #expect(typed["missing"] == nil)
        var typedJSON = "", listJSON = ""
        typed.appendJSON(to: &typedJSON)
        list.appendJSON(to: &listJSON)
        #expect(typedJSON == listJSON)
    }

    @Test("change like the list they stand for", arguments: 0..<cases.count)
    func changesLikeTheList(_ index: Int) {
        let (typed, list) = Self.cases[index]
        let first = list.keys[0], last = list.keys[list.count - 1]
        var a = typed, b = list
        a[first] = "changed"
        b[first] = "changed"
        #expect(a == b && a.keys == b.keys)
        a[last] = nil
        b[last] = nil
        #expect(a == b && a.keys == b.keys && a.count == list.count - 1)
        a.append("extra", 1)
        b.append("extra", 1)
        #expect(a == b && a.description == b.description)
        // The original is untouched.
        #expect(typed == list)
    }

    @Test("differ when a value differs")
    func differences() {
        let hit = EventAttributes.cacheHit(layer: .memory, age: 1, fromDefaultAudience: false)
        #expect(hit != .cacheHit(layer: .memory, age: 2, fromDefaultAudience: false))
        #expect(hit != .cacheHit(layer: .disk, age: 1, fromDefaultAudience: false))
        #expect(hit != ["layer": "memory", "age": 1, "audience": "default"])
        #expect(hit != ["layer": "memory", "age": 1])
    }

    @Test("the engine's fetch.end of a flow is typed and of an error is a list, with the same names as before")
    func fetchEndShapes() {
        let flow = Flow(payload: AudiencePayload(placementId: "p", audienceName: "All Users", audienceVersionId: "v",
                                                 variations: [Variation(id: "a", weight: 100)]),
                        variation: Variation(id: "a", weight: 100), source: .cache, targetingLost: false)
        let ok = fetchEndAttrs(call: .getFlow, .flow(flow), duration: 0.0000004)
        #expect(ok == ["call": "getFlow", "duration": 0, "source": "cache", "variation": "a", "audience": "All Users",
                       "targetingLost": false])
        let failed = fetchEndAttrs(call: .getFlow, .failed(FlowError(.networkFailed, "x")), duration: 1.5)
        #expect(failed == ["call": "getFlow", "duration": 1.5, "errorCode": .number(Double(FlowError.Code.networkFailed.rawValue))])
    }
}
