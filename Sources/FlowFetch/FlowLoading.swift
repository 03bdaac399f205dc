/// The calls an app's loading code makes. ``FlowClient`` conforms (production); the test kit's
/// `VirtualHarness` conforms (tests in virtual time). Write loading code against `some FlowLoading`
/// to test it both ways.
///
/// ```swift
/// func loadPaywall(_ flows: some FlowLoading) async throws -> Flow {
///     try await flows.getFlow(placementId: "main_paywall", loadTimeout: 3)
/// }
/// ```
public protocol FlowLoading: Sendable {
    /// getFlow (docs/fetch-rules.md).
    func getFlow(placementId: String, fetchPolicy: FetchPolicy, loadTimeout: Double) async throws(FlowError) -> Flow
    /// getFlowForDefaultAudience.
    func getFlowForDefaultAudience(placementId: String, fetchPolicy: FetchPolicy) async throws(FlowError) -> Flow
    /// preloadFlows.
    func preloadFlows(placementIds: [String], loadTimeout: Double) async throws(FlowError)
    /// getFlowOrDefault (the attribution race).
    func getFlowOrDefault(placementId: String, timeout: Double) async throws(FlowError) -> Flow
}

extension FlowLoading {
    /// getFlow with the default policy and loadTimeout.
    public func getFlow(placementId: String) async throws(FlowError) -> Flow {
        try await getFlow(placementId: placementId, fetchPolicy: .reloadRevalidatingCacheData, loadTimeout: Budget.defaultLoadTimeout)
    }
    /// getFlow with the default policy.
    public func getFlow(placementId: String, loadTimeout: Double) async throws(FlowError) -> Flow {
        try await getFlow(placementId: placementId, fetchPolicy: .reloadRevalidatingCacheData, loadTimeout: loadTimeout)
    }
}

extension FlowClient: FlowLoading {}
