import FlowScopeStubBackend
import FlowScopeTesting
import Foundation
import Paywall
import Testing

/// The story of Fixtures/hanging-targeted.json5: the targeted request hangs, the default audience answers.
let hangingTargeted = """
    { name: "targeted request hangs", profile: { id: "user-42" },
      backend: { placements: { main_paywall: { audiences: [
        { name: "All Users", versionId: "av-all", variations: [ { id: "all-A", weight: 100 } ] } ] } } },
      network: { latency: 0.2, rules: [ { match: { placement: "main_paywall", kind: "targeted" }, fail: "hang" } ] },
      steps: [], expect: [] }
    """

// sample: real-client
@Test(.flowTrace)
func aRealClientOverRealSocketsIsTracedWhenGivenTheTraceSink() async throws {
    let stub = try StubBackendServer(scenario: Scenario.decode(hangingTargeted))   // HTTP on 127.0.0.1, faults in real time
    defer { stub.stop() }
    let client = FlowClient(profile: Profile(id: "user-42"), backend: try HTTPBackend(baseURL: URL(string: stub.baseURL)!),
                            events: FlowTrace.sink)   // without `events:`, the test's trace records nothing
    let flow = try await loadPaywall(client)         // real time: the 2.5 s targeted stage, then the default audience
    #expect(flow.source == .defaultAudience)
    expectTimeout("main_paywall", stage: .targeted)
    expectRequests(2, placement: "main_paywall")
}
// end sample: real-client
