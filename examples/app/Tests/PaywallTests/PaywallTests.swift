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

/// Fails on purpose, and only when PAYWALL_DEMO_FAILURE=1: scripts/examples.sh runs it so to show
/// a failing test's verdict in `GET /api/runs` and its timeline in the test output. Skipped otherwise.
@Test(.flowTrace, .enabled(if: ProcessInfo.processInfo.environment["PAYWALL_DEMO_FAILURE"] == "1"))
func aTestThatFailsOnPurpose() async throws {
    let scenario = try Scenario.decode(String(contentsOf: Bundle.module.url(forResource: "Fixtures/hanging-targeted", withExtension: "json5")!,
                                              encoding: .utf8))
    let flow = try await loadPaywall(VirtualHarness(scenario: scenario))
    #expect(flow.source == .network)   // a plain #expect: its failure prints the timeline of the test's calls too
}
