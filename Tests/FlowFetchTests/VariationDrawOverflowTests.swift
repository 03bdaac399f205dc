@testable import FlowFetch
import Testing

/// Weights come from the backend (or a scenario file): a response whose weights add up past Int.max
/// is invalid (2006), never an arithmetic-overflow trap. Found by fuzzing `flowscope fetch` against a
/// hostile backend: 1,100 variations of weight 2^53 - 1 (the largest integer a response may carry)
/// crashed the CLI in `VariationDraw.pick`.
@Suite("VariationDraw: weights that overflow")
struct VariationDrawOverflowTests {
    static func payload(_ weights: [Int]) -> AudiencePayload {
        AudiencePayload(placementId: "p", audienceName: "All Users", audienceVersionId: "av",
                        variations: weights.enumerated().map { Variation(id: "v\($0.offset)", weight: $0.element) })
    }

    @Test("weights whose sum passes Int.max pick nothing", arguments: [
        [Int.max, 1],
        [1, Int.max],
        [Int.max, Int.max, 102],
        Array(repeating: 9_007_199_254_740_991, count: 1_100),
        [50, 50, Int.max],
    ])
    func overflowingWeights(_ weights: [Int]) {
        #expect(VariationDraw.pick(Self.payload(weights), profileId: "user-1") == nil)
    }

    @Test("weights summing to 100 still pick, and a sum over 100 is still refused")
    func validWeights() {
        #expect(VariationDraw.pick(Self.payload([50, 50]), profileId: "user-1") != nil)
        #expect(VariationDraw.pick(Self.payload([100, 0]), profileId: "user-1")?.id == "v0")
        #expect(VariationDraw.pick(Self.payload([60, 50]), profileId: "user-1") == nil)
        #expect(VariationDraw.pick(Self.payload([101]), profileId: "user-1") == nil)
    }
}
