import Foundation

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
    /// preloadFlowsForDefaultAudience.
    func preloadFlowsForDefaultAudience(placementIds: [String]) async throws(FlowError)
    /// getFlowOrDefault (the attribution race).
    func getFlowOrDefault(placementId: String, timeout: Double) async throws(FlowError) -> Flow
    /// getFlowConfiguration: the flow's layout; images `assetsResolver` maps to a bundled file are never
    /// downloaded.
    func getFlowConfiguration(forFlow flow: Flow, assetsResolver: @escaping @Sendable (String) -> URL?,
                              loadTimeout: Double) async throws(FlowError) -> FlowConfiguration
    /// identify: switches to another profile; calls in flight fail with profileWasChanged (3006).
    func identify(profileId: String) async
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
    /// getFlow with the default loadTimeout.
    public func getFlow(placementId: String, fetchPolicy: FetchPolicy) async throws(FlowError) -> Flow {
        try await getFlow(placementId: placementId, fetchPolicy: fetchPolicy, loadTimeout: Budget.defaultLoadTimeout)
    }
    /// getFlowForDefaultAudience with the default policy.
    public func getFlowForDefaultAudience(placementId: String) async throws(FlowError) -> Flow {
        try await getFlowForDefaultAudience(placementId: placementId, fetchPolicy: .reloadRevalidatingCacheData)
    }
    /// preloadFlows with the default loadTimeout.
    public func preloadFlows(placementIds: [String]) async throws(FlowError) {
        try await preloadFlows(placementIds: placementIds, loadTimeout: Budget.defaultLoadTimeout)
    }
    /// getFlowConfiguration with nothing bundled and the default loadTimeout.
    public func getFlowConfiguration(forFlow flow: Flow) async throws(FlowError) -> FlowConfiguration {
        try await getFlowConfiguration(forFlow: flow, assetsResolver: { _ in nil }, loadTimeout: Budget.defaultLoadTimeout)
    }
    /// getFlowConfiguration with nothing bundled.
    public func getFlowConfiguration(forFlow flow: Flow, loadTimeout: Double) async throws(FlowError) -> FlowConfiguration {
        try await getFlowConfiguration(forFlow: flow, assetsResolver: { _ in nil }, loadTimeout: loadTimeout)
    }
    /// getFlowConfiguration with the default loadTimeout.
    public func getFlowConfiguration(forFlow flow: Flow, assetsResolver: @escaping @Sendable (String) -> URL?) async throws(FlowError) -> FlowConfiguration {
        try await getFlowConfiguration(forFlow: flow, assetsResolver: assetsResolver, loadTimeout: Budget.defaultLoadTimeout)
    }
}

extension FlowClient: FlowLoading {}
