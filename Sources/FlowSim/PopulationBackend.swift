import FlowFetch

extension Population {
    /// The backend of the strategy lab's sessions, as a scenario that demo traffic can play: for every
    /// placement of the population, an "Apple Ads" audience for users with Apple Ads attribution
    /// (`<id>-asa-1`, variations `<id>-asa-a` and `<id>-asa-b`, 50/50) and the "All Users" default
    /// audience (`<id>-all-1`, variations `<id>-all-a` and `<id>-all-b`, 50/50), the audiences
    /// `SessionWorld` (Simulation.swift) answers with. With `fallbackFile`, the fallback file holds one
    /// flow per placement (variation `<id>-fallback`), as the simulated app's does. No layouts.
    public var demoScenario: Scenario {
        var backend: [String: PlacementBackend] = [:]
        var fallback: [String: FallbackSeed] = [:]
        for need in placements {
            let id = need.id
            backend[id] = PlacementBackend(audiences: [
                AudienceDefinition(name: SessionWorld.targetedAudience, versionId: "\(id)-asa-1", requiresAttribution: "appleAds",
                                   variations: [Variation(id: "\(id)-asa-a", weight: 50, revision: 1),
                                                Variation(id: "\(id)-asa-b", weight: 50, revision: 1)]),
                AudienceDefinition(name: defaultAudienceName, versionId: "\(id)-all-1",
                                   variations: [Variation(id: "\(id)-all-a", weight: 50, revision: 1),
                                                Variation(id: "\(id)-all-b", weight: 50, revision: 1)]),
            ])
            if fallbackFile { fallback[id] = FallbackSeed(variation: "\(id)-fallback") }
        }
        return Scenario(name: "demo population", profile: ScenarioProfile(id: "demo"), backend: backend, fallbackFile: fallback,
                        steps: [])
    }
}
