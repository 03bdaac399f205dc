import TestSupport
import FlowJSON
import Foundation
import Testing
@testable import FlowScopeCLI

@Suite("check-config, serve's config errors, and cert", .ownThread)
struct ConfigCommandTests {
    @Test("the shipped config/flowscope.json5 is valid")
    func shippedConfig() async throws {
        let path = packageRoot + "/config/flowscope.json5"
        let result = await flowscope("check-config", path)
        #expect(result.status == 0, "\(result.err)")
        #expect(result.out == "\(path): ok (sinks: metrics, memory, sqlite, jsonl; disabled: otlp, console; 7 strategies)\n")
        #expect(result.err.isEmpty)
        let config = try FlowScopeConfig.load(path: path)
        #expect(config.server.bind == "127.0.0.1")
        #expect(config.server.port == 8443)
        #expect(config.demo.enabled)
    }

    /// (config text, the one error line after `<file>: `).
    static let badConfigs: [(String, String)] = [
        (#"{ nope: 1 }"#, #"$.nope: unknown key "nope""#),
        (#"{ server: { port: "8443" } }"#, #"$.server.port: expected an integer, got a string "8443""#),
        (#"{ server: { port: 70000 } }"#, #"$.server.port: expected a whole number from 0 to 65535"#),
        (#"{ demo: { enabled: "yes" } }"#, #"$.demo.enabled: expected"#),
        (#"{ sinks: [ { type: "metrics" }, { type: "bogus" } ] }"#, #"$.sinks[1].type: unknown sink type "bogus""#),
        (#"{ sinks: [ { type: "memory", capacity: "lots" } ] }"#, #"$.sinks[0].capacity: expected"#),
        (#"{ sinks: [ { type: "jsonl", unknownOption: 1 } ] }"#, #"$.sinks[0].unknownOption: unknown key"#),
        (#"{ sinks: { type: "metrics" } }"#, #"$.sinks: expected"#),
        (#"{ server: { tls: { cert: "cert.pem" } } }"#, #"$.server.tls: give both "cert" and "key""#),
        (#"{ simulate: { strategies: [ { name: "x", bogus: {} } ] } }"#, #"$.simulate.strategies[0].bogus: unknown key "bogus""#),
        (#"{ simulate: { strategies: [ { name: "x", atPaywall: { loadTimeout: "five" } } ] } }"#, #"$.simulate.strategies[0].atPaywall.loadTimeout: expected"#),
        (#"{ server: "#, #"$.server (line 1, column 11): unexpected end of input"#),
        (#"{ server: { shutdownTimeout: 0 } }"#, #"$.server.shutdownTimeout: expected a number > 0"#),
        (#"{ server: { limits: { ingestQueueLimit: 65537 } } }"#, #"$.server.limits.ingestQueueLimit: expected a whole number from 1 to 65536"#),
        (#"{ server: { bind: "999.1.1.1" } }"#, #"$.server.bind: expected an IPv4 or IPv6 address or localhost"#),
        (#"{ server: { bind: "example.com" } }"#, #"$.server.bind: expected an IPv4 or IPv6 address or localhost"#),
        (#"{ server: { bind: "::ffff:127.0.0.1" } }"#, #"$.server.bind: "::ffff:127.0.0.1" is an IPv4 address in IPv6 form, which an IPv6-only socket cannot listen on; write 127.0.0.1"#),
    ]

    @Test("bad configs exit 2 with one line naming the file and the JSON path, from check-config and from serve alike")
    func badConfigs() async throws {
        let dir = makeTemporaryDirectory("config")
        defer { removeDirectory(dir) }
        for (i, (text, expected)) in Self.badConfigs.enumerated() {
            let path = "\(dir)/bad-\(i).json5"
            try write(text, to: path)
            let check = await flowscope("check-config", path)
            #expect(check.status == 2, "\(text)")
            #expect(check.out.isEmpty)
            #expect(check.err.hasPrefix("flowscope check-config: \(path): \(expected)"), "\(text) -> \(check.err)")
            #expect(check.err.filter { $0 == "\n" }.count == 1, "one line: \(check.err)")

            let serve = await flowscope("serve", "--config", path, "--port", "0", "--no-demo")
            #expect(serve.status == 2)
            #expect(serve.err == check.err.replacingOccurrences(of: "flowscope check-config:", with: "flowscope serve:"))
            #expect(serve.out.isEmpty, "nothing starts on an invalid config")
        }
        let missing = await flowscope("check-config", dir + "/missing.json5")
        #expect(missing.status == 2)
        #expect(missing.err == "flowscope check-config: \(dir)/missing.json5: not found\n")
    }

    @Test("a configured certificate or key that is missing, not PEM, or not a pair is a clear error at start (exit 2)")
    func badCertificates() async throws {
        let dir = (makeTemporaryDirectory("tls") as NSString).standardizingPath
        defer { removeDirectory(dir) }
        #expect(await flowscope("cert", "--dir", dir + "/a").status == 0)
        #expect(await flowscope("cert", "--dir", dir + "/b").status == 0)
        try write("not a certificate\n", to: dir + "/garbage.pem")
        let cases: [(cert: String, key: String, message: String)] = [
            (dir + "/none.pem", dir + "/a/key.pem", "$.server.tls.cert: \(dir)/none.pem: not found"),
            (dir + "/a/cert.pem", dir + "/none.pem", "$.server.tls.key: \(dir)/none.pem: not found"),
            (dir + "/garbage.pem", dir + "/a/key.pem", "$.server.tls.cert: \(dir)/garbage.pem: expected a PEM certificate"),
            (dir + "/a/cert.pem", dir + "/garbage.pem", "$.server.tls.key: \(dir)/garbage.pem: expected a PEM private key"),
            (dir + "/a/cert.pem", dir + "/b/key.pem", "$.server.tls.key: \(dir)/b/key.pem: private key does not match the certificate \(dir)/a/cert.pem"),
        ]
        for (i, c) in cases.enumerated() {
            let config = "\(dir)/config-\(i).json5"
            try write("""
            { server: { port: 0, stateDir: "\(dir)/state", tls: { cert: "\(c.cert)", key: "\(c.key)" } }, demo: { enabled: false } }
            """, to: config)
            let check = await flowscope("check-config", config)
            #expect(check.status == 2, "check-config refuses what serve refuses")
            #expect(check.err.hasPrefix("flowscope check-config: \(config): \(c.message)"), "\(check.err)")
            let serve = await flowscope("serve", "--config", config, "--no-demo")
            #expect(serve.status == 2)
            #expect(serve.err.hasPrefix("flowscope serve: \(config): \(c.message)"), "\(serve.err)")
            #expect(serve.err.filter { $0 == "\n" }.count == 1)
            #expect(serve.out.isEmpty)
        }
    }

    @Test("cert --dir creates a certificate and a 0600 key, prints the fingerprint, and a second run reuses it; serve presents it")
    func certCommand() async throws {
        let dir = makeTemporaryDirectory("cert")
        defer { removeDirectory(dir) }
        let tlsDir = dir + "/tls"
        func fingerprint(_ out: String) -> String? {
            out.split(separator: "\n").first { $0.hasPrefix("SHA-256 fingerprint ") }.map { String($0.dropFirst(20)) }
        }
        let first = await flowscope("cert", "--dir", tlsDir)
        #expect(first.status == 0, "\(first.err)")
        #expect(first.out.hasPrefix("created certificate \(tlsDir)/cert.pem\n"))
        let printed = try #require(fingerprint(first.out))
        #expect(printed.range(of: #"^([0-9A-F]{2}:){31}[0-9A-F]{2}$"#, options: .regularExpression) != nil, "\(printed)")
        let mode = try FileManager.default.attributesOfItem(atPath: tlsDir + "/key.pem")[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let certText = try String(contentsOfFile: tlsDir + "/cert.pem", encoding: .utf8)
        #expect(certText.hasPrefix("-----BEGIN CERTIFICATE-----"))

        let second = await flowscope("cert", "--dir", tlsDir)
        #expect(second.status == 0)
        #expect(second.out.hasPrefix("existing certificate \(tlsDir)/cert.pem\n"))
        #expect(fingerprint(second.out) == printed)
        #expect(try String(contentsOfFile: tlsDir + "/cert.pem", encoding: .utf8) == certText)

        // The server configured with that directory presents exactly that certificate.
        let fixture = try StackFixture(server: "tls: { dir: \"\(tlsDir)\" }")
        #expect(try fixture.connect().peerFingerprint == printed)

        let unwritable = await flowscope("cert", "--dir", "/proc/flowscope-no/tls")
        #expect(unwritable.status == 2)
        #expect(unwritable.err.hasPrefix("flowscope cert: /proc/flowscope-no/tls"), "\(unwritable.err)")
    }
}

@Suite("serve start-up failures", .ownThread)
struct ServeStartFailureTests {
    func config(_ text: String, in dir: String) throws -> FlowScopeConfig {
        try write(text, to: dir + "/flowscope.json5")
        return try FlowScopeConfig.load(path: dir + "/flowscope.json5")
    }

    /// Starts a stack that must fail; stops it if it did not.
    func startError(_ config: FlowScopeConfig, _ overrides: ServeStack.Overrides) -> String? {
        do {
            let stack = try ServeStack(config: config, overrides: overrides)
            stack.stop()
            return nil
        } catch {
            return error.description
        }
    }

    @Test("a port already in use is one clear error naming the address")
    func portInUse() throws {
        let running = try StackFixture()
        let dir = makeTemporaryDirectory("start")
        defer { removeDirectory(dir) }
        let config = try config(#"{ server: { stateDir: "\#(dir)/state" }, demo: { enabled: false } }"#, in: dir)
        let message = startError(config, ServeStack.Overrides(port: running.port, noDemo: true))
        #expect(message?.hasPrefix("cannot start the server on 127.0.0.1:\(running.port): ") == true, "\(message ?? "started")")
        #expect(try running.get("/healthz").status == 200, "the running server is untouched")
    }

    @Test("a configured web root that is missing or not a directory is a start error naming server.webRoot")
    func badWebRoot() throws {
        let dir = makeTemporaryDirectory("start")
        defer { removeDirectory(dir) }
        try write("x", to: dir + "/file")
        for (root, problem) in [(dir + "/none", "not found"), (dir + "/file", "not a directory")] {
            let config = try config(#"{ server: { port: 0, stateDir: "\#(dir)/state", webRoot: "\#(root)" }, demo: { enabled: false } }"#, in: dir)
            let message = startError(config, ServeStack.Overrides(port: 0, noDemo: true))
            #expect(message == "\(dir)/flowscope.json5: $.server.webRoot: \(root): \(problem)", "\(message ?? "started")")
        }
    }

    @Test("a missing demo scenario file is a start error naming demo.scenario and the file")
    func missingDemoScenario() throws {
        let dir = makeTemporaryDirectory("start")
        defer { removeDirectory(dir) }
        let config = try config(#"{ server: { port: 0, stateDir: "\#(dir)/state" }, demo: { enabled: true, scenario: "\#(dir)/none.json5" } }"#, in: dir)
        let message = startError(config, ServeStack.Overrides(port: 0))
        #expect(message == "\(dir)/flowscope.json5: $.demo.scenario: \(dir)/none.json5: not found", "\(message ?? "started")")
        // --no-demo starts it regardless.
        #expect(startError(config, ServeStack.Overrides(port: 0, noDemo: true)) == nil)
    }
}

/// Demo traffic runs on the cooperative pool in real time: `.realTime`, so no blocking or CPU-heavy
/// test runs beside it.
@Suite("serve demo traffic", .realTime)
struct DemoTrafficRealTimeTests {
    func config(_ text: String, in dir: String) throws -> FlowScopeConfig {
        try write(text, to: dir + "/flowscope.json5")
        return try FlowScopeConfig.load(path: dir + "/flowscope.json5")
    }

    @Test("the shipped demo scenario starts demo traffic that reaches /api/events and /metrics")
    func demoTraffic() async throws {
        let dir = makeTemporaryDirectory("demo")
        defer { removeDirectory(dir) }
        let config = try config("""
        { server: { port: 0, stateDir: "\(dir)/state" },
          demo: { enabled: true, scenario: "\(packageRoot)/config/demo/backend.json5", rate: 50 } }
        """, in: dir)
        let stack = try ServeStack(config: config, overrides: ServeStack.Overrides(port: 0))
        defer { stack.stop() }
        #expect(stack.demo != nil)
        // Requests from threads of their own (getText): blocking a thread of the cooperative pool,
        // which the demo sessions run on, could stall them on a 2-core machine.
        #expect(try await poll(20) {
            let events = try JSON5.parse(try await getText(stack, "/api/events?name=fetch.end&run=live"))
            return (events["events"]?.arrayValue?.count ?? 0) >= 3
        })
        let metrics = try await getText(stack, "/metrics")
        #expect(samples(metrics, "flowscope_fetches_total").contains { $0.contains("placement=") })
    }
}
