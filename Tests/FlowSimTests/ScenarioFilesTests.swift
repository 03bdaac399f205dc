import Foundation
import Testing
@testable import FlowFetch
@testable import FlowSim
import FlowJSON

/// The package root, found from this file's path (Tests/FlowSimTests/<file>).
func packageRoot(_ file: String = #filePath) -> URL {
    URL(fileURLWithPath: file).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
}

/// Every scenario file in config/scenarios, sorted by name, decoded.
func scenarioFiles() throws -> [(path: String, scenario: Scenario)] {
    let dir = packageRoot().appendingPathComponent("config/scenarios")
    let names = try FileManager.default.contentsOfDirectory(atPath: dir.path)
        .filter { $0.hasSuffix(".json5") || $0.hasSuffix(".json") }.sorted()
    return try names.map { name in
        let path = dir.appendingPathComponent(name).path
        let text = try String(contentsOfFile: path, encoding: .utf8)
        return (path, try Scenario.decode(text, file: path))
    }
}

@Suite("Scenario files in config/scenarios")
struct ScenarioFilesTests {
    @Test("every scenario file plays with all its expectations holding, and there are at least 15 files")
    func allFilesPass() throws {
        let files = try scenarioFiles()
        #expect(files.count >= 15)
        var expectations = 0
        for (path, scenario) in files {
            let report = ScenarioRunner(scenario).run()
            #expect(!scenario.expect.isEmpty, "\(path) pins nothing")
            #expect(report.failures.isEmpty, "\(path): \(report.failures.map { "step \($0.step) \($0.key): expected \($0.expected.jsonText), got \($0.actual.jsonText)" })")
            #expect(report.passed == scenario.expect.count)
            for r in report.results { #expect(r.outcome != nil, "\(path) step \(r.step) never ended") }
            expectations += report.passed
        }
        #expect(expectations >= 80)
    }

    @Test("the engine emits exactly the engine event names across the scenarios, and no other")
    func eventNames() throws {
        var seen = Set<EventName>()
        for (_, scenario) in try scenarioFiles() {
            for e in ScenarioRunner(scenario).run().events { seen.insert(e.event.name) }
        }
        // cache.evicted needs more than the 20 MiB cap in entries, which no file can reasonably hold:
        // a scenario value with two 11 MiB remote configs covers it.
        for e in ScenarioRunner(evictionScenario()).run().events { seen.insert(e.event.name) }
        let missing = Set(EventName.engineNames).subtracting(seen).map(\.rawValue).sorted()
        #expect(missing.isEmpty, "never emitted: \(missing)")
        #expect(seen == Set(EventName.engineNames))
        #expect(!seen.contains(.sinkDropped))
    }

    @Test("a restart keeps disk entries: the next hit comes from the disk layer, then from memory")
    func restartHitsDisk() throws {
        let (_, scenario) = try #require(try scenarioFiles().first { $0.path.hasSuffix("18-restart-keeps-disk.json5") })
        let report = ScenarioRunner(scenario).run()
        let hits = report.events.filter { $0.event.name == .cacheHit }
        #expect(hits.map { $0.step } == [3])
        #expect(hits.first?.event.attrs["layer"] == "disk")
    }

    @Test("a corrupt entry is reported as cache.corrupt and never served")
    func corruptReported() throws {
        let (_, scenario) = try #require(try scenarioFiles().first { $0.path.hasSuffix("19-corrupt-cache-entry.json5") })
        let report = ScenarioRunner(scenario).run()
        let corrupt = report.events.filter { $0.event.name == .cacheCorrupt }
        #expect(corrupt.map(\.event.placement) == ["main_paywall", "settings", "onboarding"])
        #expect(!report.events.contains { $0.event.name == .cacheHit })
    }

    @Test("getFlowOrDefault delivers once: attribution.timeout when the timer wins, nothing after")
    func orDefaultSingleDelivery() throws {
        let (_, scenario) = try #require(try scenarioFiles().first { $0.path.hasSuffix("15-or-default-timer-first.json5") })
        let report = ScenarioRunner(scenario).run()
        let ends = report.events.filter { $0.event.name == .fetchEnd && $0.step == 0 }
        #expect(ends.count == 1)
        #expect(report.events.contains { $0.event.name == .attributionTimeout && $0.step == 0 && $0.event.t == 2 })
    }
}

/// A scenario whose two stored flows exceed the 20 MiB cache cap, so the first is evicted.
func evictionScenario() -> Scenario {
    let big: [String: JSONValue] = ["blob": .string(String(repeating: "x", count: 11 * 1024 * 1024))]
    func placement(_ v: String) -> PlacementBackend {
        PlacementBackend(audiences: [AudienceDefinition(name: "All Users", versionId: "av-\(v)", requiresAttribution: nil,
                                                        variations: [Variation(id: v, weight: 100, remoteConfig: big)])],
                         layout: nil)
    }
    return Scenario(name: "eviction", file: nil, profile: ScenarioProfile(id: "user-42", attribution: [:]),
                    backend: ["a": placement("a-A"), "b": placement("b-A")],
                    network: NetworkRules(latency: 0.1, rules: []), cache: [], fallbackFile: [:], requestTimeout: 30,
                    steps: [Step(at: 0, call: .getFlow(placement: "a", policy: nil, loadTimeout: nil)),
                            Step(at: 1, call: .getFlow(placement: "b", policy: nil, loadTimeout: nil))],
                    expect: [])
}
