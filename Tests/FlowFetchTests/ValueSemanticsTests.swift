import FlowFetch
import FlowJSON
import Testing

/// AudiencePayload, Variation and Flow keep their fields in shared boxes; they must still behave as
/// plain values: a copy never sees a change made to another, and equality and hashing follow the fields.
@Suite("Value semantics of the boxed model types")
struct ValueSemanticsTests {
    let variation = Variation(id: "v-a", weight: 50, revision: 2, productIds: ["p1"], remoteConfig: ["k": .number(1)],
                              layout: LayoutRef(id: "L", version: 1))

    @Test("setting a field of a variation changes that copy only")
    func variationCopies() {
        var copy = variation
        copy.id = "v-b"; copy.weight = 10; copy.revision = 3; copy.productIds = ["p2"]
        copy.remoteConfig = ["k": .number(2)]; copy.layout = nil
        #expect(variation.id == "v-a" && variation.weight == 50 && variation.revision == 2 && variation.productIds == ["p1"])
        #expect(variation.remoteConfig == ["k": .number(1)] && variation.layout == LayoutRef(id: "L", version: 1))
        #expect(copy.id == "v-b" && copy.weight == 10 && copy.revision == 3 && copy.productIds == ["p2"])
        #expect(copy.remoteConfig == ["k": .number(2)] && copy.layout == nil)
        #expect(copy != variation)
    }

    @Test("variations built apart with the same fields are equal and hash alike; any field tells them apart")
    func variationEquality() {
        let twin = Variation(id: "v-a", weight: 50, revision: 2, productIds: ["p1"], remoteConfig: ["k": .number(1)],
                             layout: LayoutRef(id: "L", version: 1))
        #expect(twin == variation && Set([twin, variation]).count == 1)
        var other = twin
        other.weight = 51
        #expect(other != variation && Set([other, variation]).count == 2)
    }

    @Test("setting a field of a payload changes that copy only; equality follows the fields")
    func payloadCopies() {
        let payload = AudiencePayload(placementId: "main", audienceName: "All Users", audienceVersionId: "av1", variations: [variation])
        var copy = payload
        copy.placementId = "other"; copy.audienceName = "Apple Ads"; copy.audienceVersionId = "av2"
        copy.variations[0].weight = 100
        #expect(payload.placementId == "main" && payload.audienceName == "All Users" && payload.audienceVersionId == "av1")
        #expect(payload.variations == [variation] && payload.variations[0].weight == 50)
        #expect(copy.placementId == "other" && copy.audienceName == "Apple Ads" && copy.audienceVersionId == "av2")
        #expect(copy.variations[0].weight == 100)
        let twin = AudiencePayload(placementId: "main", audienceName: "All Users", audienceVersionId: "av1", variations: [variation])
        #expect(twin == payload && Set([twin, payload]).count == 1 && copy != payload)
    }

    @Test("a flow made from a payload equals the same flow built field by field")
    func flowFromPayload() {
        let payload = AudiencePayload(placementId: "main", audienceName: "All Users", audienceVersionId: "av1", variations: [variation])
        let drawn = Flow(payload: payload, variation: variation, source: .network, targetingLost: false)
        let built = Flow(placementId: "main", variationId: "v-a", audienceName: "All Users", audienceVersionId: "av1",
                         revision: 2, productIds: ["p1"], remoteConfig: ["k": .number(1)], layout: LayoutRef(id: "L", version: 1),
                         source: .network, targetingLost: false)
        #expect(drawn == built && Set([drawn, built]).count == 1)
    }
}
