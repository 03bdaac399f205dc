import Foundation
import Testing
@testable import FlowFetch
@testable import FlowSim
import FlowJSON
import Synchronization

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
        // Scenario 24 reaches cache.evicted through client.cacheMaxBytes; a direct engine run checks it too.
        #expect(seen.contains(.cacheEvicted))
        let eviction = evictionEvents()
        #expect(eviction.filter { $0.name == .cacheEvicted }.map(\.placement) == ["a", "b"])  // ~650-byte entries, 1000-byte cap
        for e in eviction { seen.insert(e.name) }
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

    @Test("a scenario run has one session per engine start, the same on every run of the file; a restart starts another")
    func sessionsPerStart() throws {
        let (_, scenario) = try #require(try scenarioFiles().first { $0.path.hasSuffix("18-restart-keeps-disk.json5") })
        let report = ScenarioRunner(scenario).run()
        let sessions = report.events.map(\.event.session)
        #expect(!sessions.contains(nil))
        // Sessions in order of first appearance: one before the restart, one after.
        var distinct: [SessionID?] = []
        for s in sessions where distinct.last != s { distinct.append(s) }
        #expect(distinct.count == 2)
        #expect(ScenarioRunner(scenario).run().events.map(\.event.session) == sessions)
        #expect(report.events.allSatisfy { $0.event.profile == ProfileTag.hashed(scenario.profile.id) })
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

/// Drives a FlowEngine by hand: requests are answered when the test says so.
final class ManualHost: EngineHost {
    var sent: [(RequestID, RequestSpec)] = []
    var outcomes: [CallID: CallOutcome] = [:]
    func send(_ request: RequestID, _ spec: RequestSpec, origin: CallID) { sent.append((request, spec)) }
    func cancel(_ request: RequestID) {}
    func schedule(_ timer: TimerID, at: EngineTime) {}
    func unschedule(_ timer: TimerID) {}
    func finished(_ call: CallID, _ outcome: CallOutcome, now: EngineTime) { outcomes[call] = outcome }
}

/// Collects engine events.
final class EventList: EngineEventSink {
    let events = Mutex<[EngineEvent]>([])
    func receive(_ event: EngineEvent) { events.withLock { $0.append(event) } }
}

/// cache.evicted needs entries beyond the disk cap. The scenario runner's disk layer has the default
/// 20 MiB cap and the scenario format has no key to change it, so no scenario file can reach it at a
/// reasonable size; this runs the same engine over a 1 KB disk layer instead.
func evictionEvents() -> [EngineEvent] {
    let host = ManualHost()
    let sink = EventList()
    var ids = SeededIDs(seed: 7)
    let engine = FlowEngine(profile: Profile(id: "user-42"), flowCache: FlowCache(disk: InMemoryDiskStore(maxBytes: 1000)),
                            layouts: InMemoryLayoutStore(), host: host, events: sink,
                            traceIDs: { TraceID(high: ids.next() | 1, low: ids.next()) })
    for (i, p) in ["a", "b", "c"].enumerated() {
        _ = try? engine.getFlow(placement: p, now: EngineTime(seconds: Double(i)))
        let payload = AudiencePayload(placementId: p, audienceName: "All Users", audienceVersionId: "av",
                                      variations: [Variation(id: "\(p)-A", weight: 100, remoteConfig: ["pad": .string(String(repeating: "x", count: 300))])])
        if let (rid, _) = host.sent.last { engine.response(rid, RequestCompletion(.success(.audience(payload))), now: EngineTime(seconds: Double(i)) + 0.1) }
    }
    return sink.events.withLock { $0 }
}

@Suite("Event attribution to steps")
struct EventStepTests {
    @Test("attribution.applied observed through identify's profile fetch carries the identify step")
    func attributionAppliedStep() throws {
        let (_, scenario) = try #require(try scenarioFiles().first { $0.path.hasSuffix("22-identify-attribution-from-backend.json5") })
        let report = ScenarioRunner(scenario).run()
        let applied = try #require(report.events.first { $0.event.name == .attributionApplied })
        #expect(applied.event.t == 1.2)
        #expect(applied.step == 0)
    }

    @Test("a corrupt entry found while storing a default-audience result is reported (cache.corrupt)")
    func corruptFoundByWrite() throws {
        let (_, scenario) = try #require(try scenarioFiles().first { $0.path.hasSuffix("23-corrupt-entry-overwritten.json5") })
        let report = ScenarioRunner(scenario).run()
        let corrupt = report.events.filter { $0.event.name == .cacheCorrupt }
        #expect(corrupt.map(\.step) == [0])
        #expect(corrupt.first?.event.t == 0.2)
    }
}

@Suite("Event attributes (events-and-metrics.md)")
struct EventAttributeTests {
    /// The attributes each event must carry (optional ones left out).
    static let required: [EventName: Set<String>] = [
        .fetchStart: ["call", "policy", "loadTimeout"], .fetchEnd: ["call", "duration"],
        .cacheHit: ["layer", "age", "audience"], .cacheMiss: [], .cacheExpired: ["age", "maxAge"],
        .cacheStored: ["audience", "bytes"], .cacheCorrupt: ["key", "reason"], .cacheEvicted: ["key", "bytes"],
        .requestStart: ["kind", "timeout"], .requestEnd: ["kind", "outcome", "duration", "bytes"],
        .timeout: ["stage", "budget", "elapsed"], .fallback: ["to", "reason"],
        .preloadStart: ["placements", "loadTimeout"], .preloadEnd: ["succeeded", "failed", "duration"],
        .layoutCacheHit: ["layoutId", "version"], .layoutCacheMiss: ["layoutId", "version"], .layoutStored: ["layoutId", "version"],
        .assetsPrefetchStart: ["count"], .assetsPrefetchEnd: ["count", "bytes", "failed", "duration"],
        .assetBundled: ["mediaId"], .attributionApplied: ["source", "after"], .attributionTimeout: ["after"],
        .paramClamped: ["name", "from", "to"], .profileChanged: ["from", "to"],
    ]

    @Test("the events the metrics count by placement name one, a preload's batch timeouts included, so only ingested events count under placement=\"\"")
    func placementOfCountedEvents() throws {
        var events = evictionEvents()
        for (_, scenario) in try scenarioFiles() { events += ScenarioRunner(scenario).run().events.map(\.event) }
        let counted: Set<EventName> = [.fetchEnd, .cacheHit, .cacheMiss, .cacheExpired, .timeout, .fallback]
        for e in events where counted.contains(e.name) {
            #expect(e.placement != nil, "\(e.name.rawValue) \(e.attrs) has no placement")
        }
        #expect(events.contains { $0.name == .timeout && $0.attrs["stage"]?.stringValue == "batch" }, "a batch timeout is played")
    }

    @Test("every event of every scenario carries its attributes, with the values the spec lists")
    func attributes() throws {
        var events = evictionEvents()
        for (_, scenario) in try scenarioFiles() { events += ScenarioRunner(scenario).run().events.map(\.event) }
        for e in events {
            let missing = (Self.required[e.name] ?? []).subtracting(e.attrs.keys)
            #expect(missing.isEmpty, "\(e.name.rawValue) lacks \(missing.sorted())")
            switch e.name {
            case .fetchEnd:
                let keys: Set<String> = e.attrs["errorCode"] != nil ? ["errorCode"] : ["source", "variation", "audience", "targetingLost"]
                #expect(keys.isSubset(of: e.attrs.keys), "fetch.end lacks \(keys.subtracting(e.attrs.keys).sorted())")
            case .requestStart, .requestEnd:
                #expect(["targeted", "default", "layout", "asset", "profile"].contains(e.attrs["kind"]?.stringValue ?? ""))
            case .timeout:
                #expect(["targeted", "default", "batch", "layout"].contains(e.attrs["stage"]?.stringValue ?? ""))
            case .fallback:
                #expect(["cache", "defaultAudience", "fallbackFile"].contains(e.attrs["to"]?.stringValue ?? ""))
                #expect(["timeout", "transport", "server", "client", "decoding"].contains(e.attrs["reason"]?.stringValue ?? ""))
            case .cacheHit:
                #expect(["memory", "disk"].contains(e.attrs["layer"]?.stringValue ?? ""))
            default:
                break
            }
        }
        #expect(events.count > 500)
    }
}

@Suite("Scenario times and durations")
struct ScenarioTimeLimitTests {
    /// A scenario with one step, `step` and `extra` spliced into it.
    func scenario(step: String = #""at": 0, "call": "getFlow", "placement": "p""#, _ extra: String = "") -> String {
        #"{ \#(extra) "steps": [ { \#(step) } ], "expect": [ { "step": 0 } ] }"#
    }

    @Test("every time and duration beyond 10^9 s is an error naming its JSON path and the allowed range; 10^9 itself is accepted")
    func beyondTheLimit() throws {
        let huge = "1e308", over = "1000000001"
        let cases: [(text: String, path: String, range: String)] = [
            (scenario(step: #""at": \#(huge), "call": "restart""#), "$.steps[0].at", "from 0 to 1000000000"),
            (scenario(step: #""at": \#(over), "call": "restart""#), "$.steps[0].at", "from 0 to 1000000000"),
            (scenario(#""network": { "latency": \#(huge) },"#), "$.network.latency", "from 0 to 1000000000"),
            (scenario(#""network": { "rules": [ { "latency": \#(huge) } ] },"#), "$.network.rules[0].latency", "from 0 to 1000000000"),
            (scenario(#""cache": [ { "placement": "p", "variation": "v", "age": \#(huge) } ],"#), "$.cache[0].age", "from 0 to 1000000000"),
            (scenario(#""profile": { "id": "u", "attribution": { "appleAds": { "appliesAt": \#(huge) } } },"#),
             "$.profile.attribution.appleAds.appliesAt", "from 0 to 1000000000"),
            (scenario(#""client": { "requestTimeout": \#(huge) },"#), "$.client.requestTimeout", "> 0 and <= 1000000000"),
            (scenario(step: #""at": 0, "call": "getFlow", "placement": "p", "loadTimeout": \#(huge)"#), "$.steps[0].loadTimeout", "<= 1000000000"),
            (scenario(step: #""at": 0, "call": "getFlowOrDefault", "placement": "p", "timeout": \#(huge)"#), "$.steps[0].timeout", "<= 1000000000"),
            (scenario(step: #""at": 0, "call": "getFlow", "placement": "p", "fetchPolicy": { "returnCacheDataIfNotExpiredElseLoad": { "maxAge": \#(huge) } }"#),
             "$.steps[0].fetchPolicy.returnCacheDataIfNotExpiredElseLoad.maxAge", "from 0 to 1000000000"),
            (#"{ "steps": [ { "at": 0, "call": "restart" } ], "expect": [ { "step": 0, "completedAt": \#(huge) } ] }"#,
             "$.expect[0].completedAt", "from 0 to 1000000000"),
            (scenario(step: #""at": 0, "call": "identify", "profile": { "id": "v", "attribution": { "appleAds": { "appliesAt": \#(huge) } } }"#),
             "$.steps[0].profile.attribution.appleAds.appliesAt", "from 0 to 1000000000"),
        ]
        for c in cases {
            do {
                _ = try Scenario.decode(c.text, file: "s.json5")
                Issue.record("accepted: \(c.text)")
            } catch {
                #expect(error.description.hasPrefix("s.json5: \(c.path): expected a number of seconds \(c.range)"), "\(c.text) -> \(error.description)")
            }
        }
        // At the limit: accepted, and played with finite times.
        let limit = try Scenario.decode(scenario(step: #""at": 1000000000, "call": "getFlow", "placement": "p", "loadTimeout": 1000000000"#,
                                                 #""network": { "latency": 1000000000 }, "cache": [ { "placement": "p", "variation": "v", "age": 1000000000 } ],"#))
        #expect(limit.steps[0].at == 1_000_000_000)
        // A negative loadTimeout stays the engine's to refuse (3001), as docs/scenario-format.md says.
        let negative = try Scenario.decode(scenario(step: #""at": 0, "call": "getFlow", "placement": "p", "loadTimeout": -1"#))
        #expect(negative.steps.count == 1)
    }
}
