import FlowFetch
import FlowSim
import Foundation
import Synchronization
import TestSupport
import Testing

/// FlowClient over real time: the budgets hold on a real clock (generous margins), and
/// cancellation and profile switches end calls promptly. Exact timing is tested in virtual time.
@Suite("FlowClient in real time", .realTime)
struct FlowClientRealTimeTests {
    static let audiences: [AudienceDefinition] = [
        AudienceDefinition(name: "ASA", versionId: "av-asa", requiresAttribution: "appleAds",
                           variations: [Variation(id: "asa-A", weight: 100)]),
        AudienceDefinition(name: "All Users", versionId: "av-all", requiresAttribution: nil,
                           variations: [Variation(id: "all-A", weight: 50), Variation(id: "all-B", weight: 50)]),
    ]

    static func backend(latency: Double = 0.01, rules: [NetworkRule] = []) -> LiveSandboxBackend {
        LiveSandboxBackend(SandboxBackend(placements: ["main": PlacementBackend(audiences: audiences, layout: nil),
                                                       "onboarding": PlacementBackend(audiences: audiences, layout: nil)],
                                          network: NetworkRules(latency: latency, rules: rules),
                                          profiles: [ScenarioProfile(id: "user-42", attribution: [:])]))
    }

    static func hang(_ kind: RequestKind? = nil) -> NetworkRule {
        var r = NetworkRule()
        r.kind = kind
        r.fail = .hang
        return r
    }

    @Test("getFlow returns the network flow and then serves it from the cache with no request")
    func networkThenCache() async throws {
        let client = FlowClient(profile: Profile(id: "user-42"), backend: Self.backend())
        let first = try await client.getFlow(placementId: "main", loadTimeout: 2)
        #expect(first.source == .network)
        #expect(first.audienceName == "All Users")
        let second = try await client.getFlow(placementId: "main", fetchPolicy: .returnCacheDataElseLoad)
        #expect(second.source == .cache)
        #expect(second.variationId == first.variationId)
    }

    @Test("with every request hanging, getFlow ends within loadTimeout plus a margin, from the fallback file")
    func hangingNetworkIsBounded() async throws {
        let fallback = FallbackFile(placements: ["main": AudiencePayload(placementId: "main", audienceName: "All Users",
                                                                          audienceVersionId: "fb", variations: [Variation(id: "fb-A", weight: 100)])])
        let client = FlowClient(profile: Profile(id: "user-42"), backend: Self.backend(rules: [Self.hang()]),
                                configuration: .init(fallback: fallback))
        let started = ContinuousClock.now
        let flow = try await client.getFlow(placementId: "main", loadTimeout: 1)
        let elapsed = ContinuousClock.now - started
        #expect(flow.source == .fallbackFile)
        #expect(flow.targetingLost)
        #expect(elapsed >= .milliseconds(950))
        #expect(elapsed < .milliseconds(1500), "getFlow took \(elapsed), budget 1 s")
    }

    @Test("cancelling the caller's task ends the call at once with operationInterrupted")
    func cancellation() async throws {
        let client = FlowClient(profile: Profile(id: "user-42"), backend: Self.backend(rules: [Self.hang()]))
        let task = Task { () async throws(FlowError) -> Flow in try await client.getFlow(placementId: "main", loadTimeout: 30) }
        try await Task.sleep(for: .milliseconds(50))
        let started = ContinuousClock.now
        task.cancel()
        let result = await task.result
        #expect(ContinuousClock.now - started < .seconds(1))
        guard case .failure(let error) = result else { Issue.record("expected an error, got \(result)"); return }
        #expect((error as? FlowError)?.code == .operationInterrupted)
    }

    @Test("in a task cancelled before it asks, a cache hit still returns its flow and a call that must wait ends at once")
    func cancelledBeforeStart() async throws {
        let client = FlowClient(profile: Profile(id: "user-42"), backend: Self.backend(rules: [Self.hang(.targeted)]))
        // Warm the cache for "main" through the default audience (the targeted request hangs).
        _ = try await client.getFlowForDefaultAudience(placementId: "main")
        let gate = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let task = Task { () async -> (hit: Result<Flow, FlowError>, wait: Result<Flow, FlowError>, elapsed: Duration) in
            // Wait here until the test has cancelled this task.
            await withCheckedContinuation { c in gate.withLock { $0 = c } }
            let hit: Result<Flow, FlowError>
            do throws(FlowError) { hit = .success(try await client.getFlow(placementId: "main", fetchPolicy: .returnCacheDataElseLoad)) }
            catch { hit = .failure(error) }
            let started = ContinuousClock.now
            let wait: Result<Flow, FlowError>
            do throws(FlowError) { wait = .success(try await client.getFlow(placementId: "onboarding", loadTimeout: 30)) }
            catch { wait = .failure(error) }
            return (hit, wait, ContinuousClock.now - started)
        }
        while gate.withLock({ $0 == nil }) { try await Task.sleep(for: .milliseconds(5)) }
        task.cancel()
        gate.withLock { $0?.resume(); $0 = nil }
        let (hit, wait, elapsed) = await task.value
        #expect((try? hit.get())?.source == .cache, "the hit ends within its start: nothing to cancel")
        guard case .failure(let error) = wait else { Issue.record("expected an error, got \(wait)"); return }
        #expect(error.code == .operationInterrupted)
        #expect(elapsed < .seconds(5), "ended at once, not at the 30 s loadTimeout (took \(elapsed))")
    }

    @Test("identify ends calls in flight with profileWasChanged")
    func identifyDuringCall() async throws {
        let client = FlowClient(profile: Profile(id: "user-42"), backend: Self.backend(rules: [Self.hang(.targeted)]))
        let task = Task { () async throws(FlowError) -> Flow in try await client.getFlow(placementId: "main", loadTimeout: 30) }
        try await Task.sleep(for: .milliseconds(50))
        client.identify(profileId: "user-43")
        let result = await task.result
        guard case .failure(let error) = result else { Issue.record("expected an error, got \(result)"); return }
        #expect((error as? FlowError)?.code == .profileWasChanged)
        #expect(client.profile.id == "user-43")
    }

    @Test("preloadFlows warms the cache for every placement; a cache-first getFlow then makes no request")
    func preloadThenCache() async throws {
        let client = FlowClient(profile: Profile(id: "user-42"), backend: Self.backend())
        try await client.preloadFlows(placementIds: [" main", "onboarding", "main", ""], loadTimeout: 2)
        let flow = try await client.getFlow(placementId: "onboarding", fetchPolicy: .returnCacheDataElseLoad)
        #expect(flow.source == .cache)
    }

    @Test("getFlowOrDefault returns the targeted flow when attribution arrives before the timer")
    func attributionRace() async throws {
        let client = FlowClient(profile: Profile(id: "user-42", appliedAttributionSources: ["appleAds"]), backend: Self.backend())
        let flow = try await client.getFlowOrDefault(placementId: "main", timeout: 2)
        #expect(flow.source == .network)
    }

    @Test("getFlowOrDefault falls back to the default audience when attribution never comes")
    func attributionTimeout() async throws {
        let client = FlowClient(profile: Profile(id: "user-42"), backend: Self.backend())
        let started = ContinuousClock.now
        let flow = try await client.getFlowOrDefault(placementId: "main", timeout: 0.3)
        #expect(flow.source == .defaultAudience)
        #expect(ContinuousClock.now - started >= .milliseconds(280))
    }

    @Test("invalid arguments throw wrongParam at once")
    func invalidArguments() async {
        let client = FlowClient(profile: Profile(id: "user-42"), backend: Self.backend())
        await #expect(throws: FlowError.self) { try await client.getFlow(placementId: "  ") }
        do {
            _ = try await client.getFlow(placementId: "main", loadTimeout: -1)
            Issue.record("expected wrongParam")
        } catch {
            #expect(error.code == .wrongParam)
        }
    }
}
