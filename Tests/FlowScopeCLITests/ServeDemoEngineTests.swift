import FlowJSON
import Foundation
import TestSupport
import Testing
@testable import FlowScopeCLI

/// The live events named `name` (at most the newest 1000).
func liveEvents(_ stack: ServeStack, _ name: String) async throws -> [JSONValue] {
    try JSON5.parse(try await getText(stack, "/api/events?name=\(name)&run=live&limit=1000"))["events"]?.arrayValue ?? []
}

/// The config's `engine` section as serve's demo sessions use it. Demo traffic runs in real time on
/// the cooperative pool: `.realTime`, so no blocking or CPU-heavy test runs beside it.
@Suite("serve demo traffic uses the engine section", .realTime)
struct DemoEngineRealTimeTests {
    func config(_ text: String, in dir: String) throws -> FlowScopeConfig {
        try write(text, to: dir + "/flowscope.json5")
        return try FlowScopeConfig.load(path: dir + "/flowscope.json5")
    }

    /// The `.entry` files of the flow cache under `directory` (one directory per profile).
    func entryFiles(_ directory: String) -> [String] {
        let files = FileManager.default.enumerator(atPath: directory)?.allObjects as? [String] ?? []
        return files.filter { $0.hasSuffix(".entry") }
    }

    @Test("returning users' flows and layouts are cached under engine.cacheDir (relative to the config file); a restarted serve serves cache hits from them")
    func cacheSurvivesRestart() async throws {
        let dir = (makeTemporaryDirectory("demo-cache") as NSString).standardizingPath
        defer { removeDirectory(dir) }
        let config = try config("""
        { server: { port: 0, stateDir: "state" }, engine: { cacheDir: "cache" },
          demo: { scenario: "\(packageRoot)/config/demo/backend.json5", rate: 60 } }
        """, in: dir)
        let first = try ServeStack(config: config, overrides: ServeStack.Overrides(port: 0))
        func profiles() -> [String] { (try? FileManager.default.contentsOfDirectory(atPath: dir + "/cache/flows")) ?? [] }
        // Most of the 40 returning users have cached flows.
        let stored = await poll(20) { profiles().count >= 20 }
        first.stop()
        #expect(stored, "flow cache files under \(dir)/cache/flows: \(entryFiles(dir + "/cache/flows"))")
        // Only the pool of returning users is on disk (one directory per profile, at most 40).
        #expect(profiles().count <= 40, "\(profiles().count) profiles on disk")
        #expect(entryFiles(dir + "/cache/flows").count >= 20)
        #expect(FileManager.default.fileExists(atPath: dir + "/cache/layouts"))
        #expect(!FileManager.default.fileExists(atPath: dir + "/state/cache"), "the configured cacheDir replaces <stateDir>/cache")

        // A new start whose requests without a loadTimeout fail at once (getFlowOrDefault's fetch,
        // the default-audience calls), so those calls read the cache, and store nothing new: a cache
        // hit whose entry is older than the start came from the files.
        try await Task.sleep(for: .milliseconds(300))
        let restartedAt = Date().timeIntervalSince1970
        let second = try ServeStack(config: try self.config("""
        { server: { port: 0, stateDir: "state" }, engine: { cacheDir: "cache", requestTimeout: 0.001 },
          demo: { scenario: "\(packageRoot)/config/demo/backend.json5", rate: 60 } }
        """, in: dir), overrides: ServeStack.Overrides(port: 0))
        defer { second.stop() }
        let fromEarlierRun = try await poll(20) {
            try await liveEvents(second, "cache.hit").contains(where: { (event: JSONValue) -> Bool in
                guard let t = event["t"]?.numberValue, let age = event["attrs"]?["age"]?.numberValue else { return false }
                return event["attrs"]?["layer"]?.stringValue == "disk" && t - age < restartedAt
            })
        }
        #expect(fromEarlierRun, "no cache hit from an entry stored before the restart")
    }

    @Test("without engine.cacheDir the cache is <stateDir>/cache, and --state-dir moves it")
    func defaultCacheDirFollowsStateDir() async throws {
        let dir = (makeTemporaryDirectory("demo-cache") as NSString).standardizingPath
        defer { removeDirectory(dir) }
        let config = try config("""
        { server: { port: 0, stateDir: "state" }, demo: { scenario: "\(packageRoot)/config/demo/backend.json5", rate: 60 } }
        """, in: dir)
        let stack = try ServeStack(config: config, overrides: ServeStack.Overrides(port: 0, stateDir: dir + "/other"))
        let stored = await poll(20) { entryFiles(dir + "/other/cache/flows").count >= 1 }
        stack.stop()
        #expect(stored)
        #expect(!FileManager.default.fileExists(atPath: dir + "/state"))
    }

    @Test("engine.requestTimeout is the demo clients' request limit")
    func requestTimeout() async throws {
        let dir = makeTemporaryDirectory("demo-timeout")
        defer { removeDirectory(dir) }
        let config = try config("""
        { server: { port: 0, stateDir: "\(dir)/state" }, engine: { requestTimeout: 0.25 },
          demo: { scenario: "\(packageRoot)/config/demo/backend.json5", rate: 60 } }
        """, in: dir)
        let stack = try ServeStack(config: config, overrides: ServeStack.Overrides(port: 0))
        defer { stack.stop() }
        // A request with no loadTimeout (getFlowForDefaultAudience) has requestTimeout as its limit.
        #expect(try await poll(20) {
            try await liveEvents(stack, "request.start").contains(where: { (e: JSONValue) in e["attrs"]?["timeout"]?.numberValue == 0.25 })
        })
    }

    @Test("engine.fallbackFile replaces the demo scenario's fallback flows")
    func fallbackFile() async throws {
        let dir = (makeTemporaryDirectory("demo-fallback") as NSString).standardizingPath
        defer { removeDirectory(dir) }
        try write("""
        { "formatVersion": 1, "placements": { "main_paywall": { "placementId": "main_paywall",
            "audience": { "name": "All Users", "versionId": "fb-1" },
            "variations": [ { "id": "from-engine-fallback", "weight": 100 } ] } } }
        """, to: dir + "/fallback.json")
        // Requests time out at once, so calls end on the fallback file.
        let config = try config("""
        { server: { port: 0, stateDir: "state" }, engine: { requestTimeout: 0.001, fallbackFile: "fallback.json" },
          demo: { scenario: "\(packageRoot)/config/demo/backend.json5", rate: 60 } }
        """, in: dir)
        let stack = try ServeStack(config: config, overrides: ServeStack.Overrides(port: 0))
        defer { stack.stop() }
        func variations() async throws -> [String] {
            try await liveEvents(stack, "fetch.end").compactMap { $0["attrs"]?["variation"]?.stringValue }
        }
        #expect(try await poll(20) { try await variations().contains("from-engine-fallback") })
        let served = try await variations()
        #expect(!served.contains("paywall-fallback"), "the scenario's fallback flow was served")
    }
}

/// `demo.population`: demo sessions drawn from a population, against the population's backend.
@Suite("serve demo traffic from a population", .realTime)
struct DemoPopulationRealTimeTests {
    func config(_ text: String, in dir: String) throws -> FlowScopeConfig {
        try write(text, to: dir + "/flowscope.json5")
        return try FlowScopeConfig.load(path: dir + "/flowscope.json5")
    }

    /// The live fetch.end events (at most the newest 1000).
    func fetchEnds(_ stack: ServeStack) async throws -> [JSONValue] { try await liveEvents(stack, "fetch.end") }

    @Test("a demo.population config produces live events for the population's placements, from its Apple Ads audience for attributed users")
    func livePlacements() async throws {
        let dir = makeTemporaryDirectory("demo-population")
        defer { removeDirectory(dir) }
        let config = try config("""
        { server: { port: 0, stateDir: "\(dir)/state" },
          demo: { rate: 60, population: {
            profiles: { fast: { median: 0.01, p95: 0.03 } }, networks: { fast: 1 },
            attribution: { share: 1, delay: 0 }, returning: { share: 0 },
            placements: [ { id: "pop_launch", at: 0 }, { id: "pop_later", at: 0.2, sessions: "new" } ] } } }
        """, in: dir)
        let stack = try ServeStack(config: config, overrides: ServeStack.Overrides(port: 0))
        defer { stack.stop() }
        func seen() async throws -> Set<String> {
            Set(try await fetchEnds(stack).compactMap { e -> String? in
                guard let p = e["placement"]?.stringValue, let a = e["attrs"]?["audience"]?.stringValue else { return nil }
                return "\(p) \(a)"
            })
        }
        let both = try await poll(20) { try await seen().isSuperset(of: ["pop_launch Apple Ads", "pop_later Apple Ads"]) }
        let placements = try await seen()
        #expect(both, "\(placements)")
        // Only the population's placements: none of the embedded demo backend's.
        #expect(placements.allSatisfy { $0.hasPrefix("pop_") }, "\(placements)")
    }

    @Test("the population's network shares and fallbackFile: every request a 5xx, so calls end on the fallback flow of each placement")
    func networkFailuresAndFallback() async throws {
        let dir = makeTemporaryDirectory("demo-population")
        defer { removeDirectory(dir) }
        let config = try config("""
        { server: { port: 0, stateDir: "\(dir)/state" },
          demo: { rate: 60, population: {
            profiles: { broken: { median: 0.01, p95: 0.02, http5xx: 1 } }, networks: { broken: 1 },
            attribution: { share: 0 }, returning: { share: 0 }, fallbackFile: true,
            placements: [ { id: "pop_a", at: 0 } ] } } }
        """, in: dir)
        let stack = try ServeStack(config: config, overrides: ServeStack.Overrides(port: 0))
        defer { stack.stop() }
        #expect(try await poll(20) {
            try await fetchEnds(stack).contains(where: { (e: JSONValue) in
                e["attrs"]?["variation"]?.stringValue == "pop_a-fallback" && e["attrs"]?["source"]?.stringValue == "fallbackFile"
            })
        })
        let ends = try await fetchEnds(stack)
        #expect(!ends.contains(where: { (e: JSONValue) in e["attrs"]?["source"]?.stringValue == "network" }),
                "a request got through a network whose every request fails")
    }

    @Test("bad demo.population input, or scenario with population, is exit 2 naming the JSON path, from check-config and serve")
    func badPopulation() async throws {
        let dir = (makeTemporaryDirectory("demo-population") as NSString).standardizingPath
        defer { removeDirectory(dir) }
        let cases: [(config: String, error: String)] = [
            (#"{ demo: { population: { placements: [ { id: "a", at: -1 } ] } } }"#, "$.demo.population.placements[0].at: "),
            (#"{ demo: { population: { networks: { moon: 1 } } } }"#, "$.demo.population.networks.moon: unknown network profile"),
            (#"{ demo: { population: { bogus: 1 } } }"#, "$.demo.population"),
            (#"{ demo: { population: { attribution: { share: 2 } } } }"#, "$.demo.population.attribution.share: "),
            (#"{ demo: { scenario: "x.json5", population: {} } }"#,
             #"$.demo: give "scenario" (a backend scenario file) or "population" (sessions drawn from a population), not both"#),
        ]
        let path = dir + "/flowscope.json5"
        for c in cases {
            try write(c.config, to: path)
            for command in [["check-config", path], ["serve", "--config", path, "--port", "0", "--state-dir", dir + "/state"]] {
                let run = await flowscope(command)
                #expect(run.status == 2, "\(c.config) \(command[0]): \(run.out)")
                #expect(run.err.hasPrefix("flowscope \(command[0]): \(path): \(c.error)"), "\(c.config) \(command[0]): \(run.err)")
            }
        }
        #expect(!FileManager.default.fileExists(atPath: dir + "/state"))
    }

    @Test("with demo traffic off, a demo.population is checked but no population traffic runs")
    func populationWithDemoOff() async throws {
        let dir = makeTemporaryDirectory("demo-population")
        defer { removeDirectory(dir) }
        let config = try config("""
        { server: { port: 0, stateDir: "\(dir)/state" }, demo: { enabled: false, population: { placements: [ { id: "p", at: 0 } ] } } }
        """, in: dir)
        let check = await flowscope("check-config", dir + "/flowscope.json5")
        #expect(check.status == 0, "\(check.err)")
        let stack = try ServeStack(config: config, overrides: ServeStack.Overrides(port: 0))
        defer { stack.stop() }
        #expect(stack.demo == nil)
    }
}
