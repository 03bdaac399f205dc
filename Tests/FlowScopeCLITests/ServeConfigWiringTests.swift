import FlowJSON
import Foundation
import TestSupport
import Testing
@testable import FlowScopeCLI

/// Config keys of the `server` section reach the running stack.
@Suite("flowscope serve honours its config", .ownThread)
struct ServeConfigWiringTests {
    @Test("the token is generated into the state directory with mode 0600 and reused by the next start")
    func generatedToken() throws {
        let first = try StackFixture()
        let path = first.dir + "/state/token"
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let stored = try String(contentsOfFile: path, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(stored == first.token)
        #expect(first.token.utf8.count >= 32)
        first.stop()
        // Same state directory again: same token.
        let config = try FlowScopeConfig.load(path: first.configPath)
        let again = try ServeStack(config: config, overrides: ServeStack.Overrides(port: 0, noDemo: true))
        defer { again.stop() }
        #expect(again.token.value == stored)
    }

    @Test("a configured server.auth.token is the one ingest accepts, and no token file is written")
    func configuredToken() throws {
        let token = "configured-token-0123456789abcdef"
        let fixture = try StackFixture(server: "auth: { token: \"\(token)\" }")
        #expect(fixture.token == token)
        #expect(!FileManager.default.fileExists(atPath: fixture.dir + "/state/token"))
        let body = Events.lines([Events.envelope("cache.miss", placement: "p1")])
        #expect(try fixture.ingest(body, token: token).status == 202)
        #expect(try fixture.ingest(body, token: token + "x").status == 401)
    }

    @Test("server.limits.maxBodyBytes is the ingest body cap (413 past it)")
    func bodyCap() throws {
        let fixture = try StackFixture(server: "limits: { maxBodyBytes: 2000 }")
        let one = Events.lines([Events.envelope("cache.miss", placement: "p1")])
        #expect(try fixture.ingest(one).status == 202)
        let many = Events.lines((0..<20).map { Events.envelope("cache.miss", placement: "p\($0)") })
        try #require(many.utf8.count > 2000)
        let refused = try fixture.ingest(many)
        #expect(refused.status == 413)
        #expect(refused.json["error"]?["status"] == 413)
        #expect(try fixture.getJSON("/api/events")["events"]?.arrayValue?.count == 1)
    }

    @Test("server.limits.ingestQueueLimit bounds an ingest batch: a batch larger than it is refused with 413 naming the key, nothing stored")
    func ingestQueueLimit() throws {
        let fixture = try StackFixture(server: "limits: { ingestQueueLimit: 5 }")
        let five = Events.lines((0..<5).map { Events.envelope("cache.miss", placement: "p\($0)") })
        #expect(try fixture.ingest(five).status == 202)
        let six = Events.lines((0..<6).map { Events.envelope("cache.miss", placement: "q\($0)") })
        let refused = try fixture.ingest(six)
        #expect(refused.status == 413)
        #expect(refused.json["error"]?["message"]?.stringValue?.contains("server.limits.ingestQueueLimit") == true, "\(refused.text)")
        #expect(try fixture.getJSON("/api/events")["events"]?.arrayValue?.count == 5)
        #expect(fixture.stack.pipeline.stats().filter(\.durable).isEmpty, "metrics and memory are not durable")
    }

    @Test("the sinks that keep events beyond the process say they are durable in /api/sinks; metrics, memory and console do not")
    func durableSinks() throws {
        let fixture = try StackFixture(sinks: """
            { type: "metrics" }, { type: "memory" }, { type: "console", enabled: true },
            { type: "sqlite", path: "$DIR/events.sqlite" }, { type: "jsonl", path: "$DIR/events.jsonl" },
            { type: "otlp", endpoint: "http://127.0.0.1:9/v1/traces" }, { type: "exec", command: ["sh", "-c", "cat > /dev/null"] }
            """)
        defer { fixture.stop() }
        let sinks = try fixture.getJSON("/api/sinks")["sinks"]?.arrayValue ?? []
        var durable: [String: Bool] = [:]
        for sink in sinks { durable[sink["type"]?.stringValue ?? ""] = sink["durable"]?.boolValue }
        #expect(durable == ["metrics": false, "memory": false, "console": false, "sqlite": true, "jsonl": true, "otlp": true, "exec": true])
        #expect(sinks.allSatisfy { $0["saturated"] == false })
    }

    @Test("bound beyond loopback, every endpoint but /healthz needs the token")
    func tokenEverywhereOffLoopback() throws {
        let fixture = try StackFixture(server: "bind: \"0.0.0.0\"")
        #expect(fixture.stack.server.config.bind == "0.0.0.0")
        let auth = [("Authorization", "Bearer \(fixture.token)")]
        for path in ["/metrics", "/api/events", "/api/runs", "/api/placements", "/"] {
            let open = try fixture.get(path)
            #expect(open.status == 401, "\(path)")
            #expect(open.header("www-authenticate")?.hasPrefix("Bearer") == true)
        }
        #expect(try fixture.get("/healthz").status == 200)
        #expect(try fixture.get("/metrics", headers: auth).status == 200)
        #expect(try fixture.get("/api/events", headers: auth).status == 200)
    }
}
