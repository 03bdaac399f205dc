// sample: imports
import FlowScopeTesting
import Foundation
import Paywall
import Testing
// end sample: imports

// sample: test
@Test(.flowTrace)
func paywallFallsBackToTheDefaultAudienceOnAHangingNetwork() async throws {
    let scenario = try Scenario.decode(String(contentsOf: Bundle.module.url(forResource: "Fixtures/hanging-targeted", withExtension: "json5")!,
                                              encoding: .utf8))
    let harness = VirtualHarness(scenario: scenario)       // virtual time: no waiting
    let flow = try await loadPaywall(harness)
    #expect(flow.source == .defaultAudience)
    expectTimeout("main_paywall", stage: .targeted)       // fails with the call's timeline
    expectRequests(2, placement: "main_paywall")
}
// end sample: test
