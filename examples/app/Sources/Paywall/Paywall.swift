import FlowFetch

/// Your app's code, written against `some FlowLoading` (FlowClient conforms).
public func loadPaywall(_ flows: some FlowLoading) async throws -> Flow {
    try await flows.getFlow(placementId: "main_paywall", loadTimeout: 3)
}
