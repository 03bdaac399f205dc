import Foundation
import FlowFetch
import FlowScopeTesting
import FlowSim
import Testing

/// An app's loading code, written against FlowLoading so it runs on FlowClient and on the harness.
func loadPaywall(flows: some FlowLoading) async -> String {
    do {
        let flow = try await flows.getFlow(placementId: "main", loadTimeout: 5)
        return "\(flow.source.rawValue):\(flow.variationId)"
    } catch {
        return "error \(error.code.rawValue)"
    }
}

@Suite("Virtual-time harness", .flowTrace)
struct VirtualHarnessTests {
    static let text = """
    {
      "name": "targeted hangs, default answers",
      "profile": { "id": "user-42" },
      "backend": { "placements": { "main": { "audiences": [
          { "name": "All Users", "versionId": "av-all", "variations": [ { "id": "all-A", "weight": 50 }, { "id": "all-B", "weight": 50 } ] } ] } } },
      "network": { "latency": 0.2, "rules": [ { "match": { "kind": "targeted" }, "fail": "hang" } ] },
      "steps": [ { "at": 0, "call": "getFlow", "placement": "main", "loadTimeout": 5 } ]
    }
    """

    @Test("a traced test's events, from the harness or from a FlowClient, carry a session: the test's for the harness, the client's own for the client")
    func sessions() async throws {
        let recorder = try #require(FlowTrace.current)
        let scenario = try Scenario.decode(Self.text, file: "inline")
        _ = await loadPaywall(flows: VirtualHarness(scenario: scenario))
        let fromHarness = recorder.envelopes.filter { $0.name != .testStart }
        #expect(!fromHarness.isEmpty)
        #expect(fromHarness.allSatisfy { $0.session == recorder.session && $0.profile == ProfileTag.hashed("user-42") })

        let recorded = FlowTraceRecorder(name: "sessions-inner", environment: [:])
        let client = FlowClient(profile: Profile(id: "u1"), backend: SessionTestBackend(), events: FlowTraceSink(recorder: recorded))
        _ = try? await client.getFlow(placementId: "main", loadTimeout: 30)
        recorded.record(EngineEvent(name: .cacheMiss, t: 0, placement: nil, trace: TraceID(high: 1, low: 1), span: SpanID(raw: 1)))
        let sessions = recorded.envelopes.filter { $0.name != .testStart }.map(\.session)
        #expect(sessions.count >= 2)
        #expect(sessions.dropLast().allSatisfy { $0 == client.session })
        #expect(sessions.last == recorded.session)
        #expect(client.session != recorded.session)
    }

    @Test("the app's own loading code runs against a scenario in virtual time, with the scenario runner's answer")
    func appCodeInVirtualTime() async throws {
        let scenario = try Scenario.decode(Self.text, file: "inline")
        let harness = VirtualHarness(scenario: scenario)
        // The harness has no clock: 4.7 virtual seconds pass without any real waiting.
        let shown = await loadPaywall(flows: harness)
        #expect(abs(await harness.now - 4.7) < 1e-9)

        let report = ScenarioRunner(scenario).run()
        let expected = report.results[0].outcome?.flow
        #expect(shown == "defaultAudience:\(expected?.variationId ?? "?")")
        expectFlow("main", source: .defaultAudience, requests: 2)
        expectTimeout("main", stage: .targeted)
    }

    @Test("advance lets virtual time pass between calls; a later call starts at the new time")
    func advance() async throws {
        let harness = VirtualHarness(scenario: try Scenario.decode(Self.text, file: "inline"))
        _ = try await harness.getFlow(placementId: "main", fetchPolicy: .reloadRevalidatingCacheData, loadTimeout: 1)
        #expect(abs(await harness.now - 0.7) < 1e-9, "stage A cut at 0.5, default audience answered 0.2 s later")
        await harness.advance(by: 60)
        #expect(abs(await harness.now - 60.7) < 1e-9)
        let cached = try await harness.getFlow(placementId: "main", fetchPolicy: .returnCacheDataElseLoad, loadTimeout: 1)
        #expect(cached.source == .cache)
        #expect(abs(await harness.now - 60.7) < 1e-9)
        expectFlow("main", source: .cache, requests: 0)
    }

    @Test("two harnesses give their calls different trace ids, so a server folding calls by trace keeps two tests' calls (or two runs of one test) apart")
    func traceIdsDifferBetweenHarnesses() async throws {
        let scenario = try Scenario.decode(Self.text, file: "inline")
        let first = Collected(), second = Collected()
        _ = await loadPaywall(flows: VirtualHarness(scenario: scenario, events: first))
        _ = await loadPaywall(flows: VirtualHarness(scenario: scenario, events: second))
        let a = Set(first.events.map(\.trace)), b = Set(second.events.map(\.trace))
        #expect(a.count == 1 && b.count == 1)
        #expect(a.isDisjoint(with: b))
    }
}

/// Keeps the events a harness emits.
private struct Collected: EngineEventSink {
    let kept = Shared<[EngineEvent]>([])
    func receive(_ event: EngineEvent) { kept.withLock { $0.append(event) } }
    var events: [EngineEvent] { kept.withLock { $0 } }
}

/// Layout code written against FlowLoading: a flow, then its layout with the app's bundled media.
func showPaywall(flows: some FlowLoading, bundled: Set<String>) async throws(FlowError) -> FlowConfiguration {
    let flow = try await flows.getFlow(placementId: "main", loadTimeout: 5)
    return try await flows.getFlowConfiguration(forFlow: flow, assetsResolver: { id in
        bundled.contains(id) ? URL(fileURLWithPath: "/app/\(id).png") : nil
    }, loadTimeout: 5)
}

@Suite("Layout code against FlowLoading")
struct FlowLoadingLayoutTests {
    static let text = """
    {
      "name": "a layout with bundled media",
      "profile": { "id": "user-42" },
      "backend": { "placements": { "main": {
          "audiences": [ { "name": "All Users", "versionId": "av-all", "variations": [ { "id": "all-A", "weight": 100 } ] } ],
          "layout": { "id": "L1", "version": 3, "images": 4, "customMedia": ["hero", "badge"] } } } },
      "network": { "latency": 0.1 },
      "steps": []
    }
    """

    @Test("getFlowConfiguration with an assets resolver is part of FlowLoading: the harness runs it, bundled images are not downloaded")
    func layoutThroughTheProtocol() async throws {
        let events = Collected()
        let harness = VirtualHarness(scenario: try Scenario.decode(Self.text, file: "inline"), events: events)
        let shown = try await showPaywall(flows: harness, bundled: ["hero"])
        #expect(shown.layout.id == "L1" && shown.layout.version == 3)
        #expect(shown.source == .network)
        #expect(events.events.filter { $0.name == .assetBundled }.count == 1, "hero is bundled; badge and the two plain images are not")
        await harness.identify(profileId: "user-43")
        let other = try await harness.getFlowForDefaultAudience(placementId: "main")
        #expect(other.variationId == "all-A")
        try await harness.preloadFlowsForDefaultAudience(placementIds: ["main"])
    }
}

/// A backend that fails every request at once (its events are all the session test needs).
private struct SessionTestBackend: FlowBackend {
    func send(_ request: RequestSpec) async -> RequestCompletion { RequestCompletion(.failure(.http(status: 503))) }
}
