import FlowJSON
import FlowScopeServer
import Foundation
import TestSupport
import Testing
@testable import FlowScopeCLI

@Suite("check-config runs serve's start-up checks", .ownThread)
struct ServeChecksTests {
    /// A bad config: what to prepare in the directory, the config text (`$DIR` is the directory) and
    /// the error after `<config file>: `.
    struct Case: Sendable {
        var name: String
        var prepare: @Sendable (String) throws -> Void = { _ in }
        var config: String
        var error: String
    }

    static let pair = try! TLSMaterial.generateSelfSigned()
    static let otherPair = try! TLSMaterial.generateSelfSigned()

    static let cases: [Case] = [
        Case(name: "missing certificate, named relative to the config file",
             config: #"{ server: { tls: { cert: "nope.pem", key: "key.pem" } } }"#,
             error: "$.server.tls.cert: $DIR/nope.pem: not found"),
        Case(name: "missing key",
             prepare: { try write(ServeChecksTests.pair.certPEM, to: $0 + "/cert.pem") },
             config: #"{ server: { tls: { cert: "cert.pem", key: "$DIR/missing-key.pem" } } }"#,
             error: "$.server.tls.key: $DIR/missing-key.pem: not found"),
        Case(name: "certificate is a directory",
             prepare: { try FileManager.default.createDirectory(atPath: $0 + "/cert.pem", withIntermediateDirectories: true) },
             config: #"{ server: { tls: { cert: "cert.pem", key: "key.pem" } } }"#,
             error: "$.server.tls.cert: $DIR/cert.pem: is a directory, expected a file"),
        Case(name: "certificate not PEM",
             prepare: { try write("hello", to: $0 + "/cert.pem"); try write(ServeChecksTests.pair.keyPEM, to: $0 + "/key.pem") },
             config: #"{ server: { tls: { cert: "cert.pem", key: "key.pem" } } }"#,
             error: "$.server.tls.cert: $DIR/cert.pem: expected a PEM certificate"),
        Case(name: "key of another certificate",
             prepare: { try write(ServeChecksTests.pair.certPEM, to: $0 + "/cert.pem"); try write(ServeChecksTests.otherPair.keyPEM, to: $0 + "/key.pem") },
             config: #"{ server: { tls: { cert: "cert.pem", key: "key.pem" } } }"#,
             error: "$.server.tls.key: $DIR/key.pem: private key does not match the certificate"),
        Case(name: "half a generated pair",
             prepare: { try FileManager.default.createDirectory(atPath: $0 + "/certs", withIntermediateDirectories: true)
                        try write(ServeChecksTests.pair.certPEM, to: $0 + "/certs/cert.pem") },
             config: #"{ server: { tls: { dir: "certs" } } }"#,
             error: "$.server.tls.dir: $DIR/certs/key.pem: not found while its pair exists"),
        Case(name: "state directory below a file",
             prepare: { try write("x", to: $0 + "/file") },
             config: #"{ server: { stateDir: "file/state" } }"#,
             error: "$.server.stateDir: $DIR/file/state: cannot be created: $DIR/file is not a directory"),
        Case(name: "state directory is a file",
             prepare: { try write("x", to: $0 + "/file") },
             config: #"{ server: { stateDir: "file" } }"#,
             error: "$.server.stateDir: $DIR/file: not a directory"),
        Case(name: "bad token file in the state directory",
             prepare: { try FileManager.default.createDirectory(atPath: $0 + "/st", withIntermediateDirectories: true)
                        try write("short", to: $0 + "/st/token") },
             config: #"{ server: { stateDir: "st" } }"#,
             error: "$.server.stateDir: $DIR/st/token: expected a token"),
        Case(name: "web root without index.html",
             prepare: { try FileManager.default.createDirectory(atPath: $0 + "/web", withIntermediateDirectories: true) },
             config: #"{ server: { webRoot: "web" } }"#,
             error: "$.server.webRoot: $DIR/web: has no index.html, so GET / would have nothing to serve"),
        Case(name: "missing web root",
             config: #"{ server: { webRoot: "none" } }"#,
             error: "$.server.webRoot: $DIR/none: not found"),
        Case(name: "web root is a file",
             prepare: { try write("x", to: $0 + "/file") },
             config: #"{ server: { webRoot: "file" } }"#,
             error: "$.server.webRoot: $DIR/file: not a directory"),
        Case(name: "missing demo scenario",
             config: #"{ demo: { scenario: "none.json5" } }"#,
             error: "$.demo.scenario: $DIR/none.json5: not found"),
        Case(name: "demo scenario that does not parse",
             prepare: { try write(#"{ name: "x", bogus: 1 }"#, to: $0 + "/backend.json5") },
             config: #"{ demo: { scenario: "backend.json5" } }"#,
             error: "$.demo.scenario: $DIR/backend.json5: $"),
        Case(name: "certificate directory below a file",
             prepare: { try write("x", to: $0 + "/file") },
             config: #"{ server: { tls: { dir: "file/x/tls" } } }"#,
             error: "$.server.tls.dir: $DIR/file/x/tls: cannot be created: $DIR/file is not a directory"),
        Case(name: "demo cache directory below a file",
             prepare: { try write("x", to: $0 + "/file") },
             config: #"{ engine: { cacheDir: "file/cache" } }"#,
             error: "$.engine.cacheDir: $DIR/file/cache: cannot be created: $DIR/file is not a directory"),
        Case(name: "demo cache directory is a file",
             prepare: { try write("x", to: $0 + "/cache") },
             config: #"{ engine: { cacheDir: "cache" } }"#,
             error: "$.engine.cacheDir: $DIR/cache: not a directory"),
        Case(name: "missing engine fallback file",
             config: #"{ engine: { fallbackFile: "fb.json" } }"#,
             error: "$.engine.fallbackFile: $DIR/fb.json: not found"),
        Case(name: "engine fallback file is a directory",
             prepare: { try FileManager.default.createDirectory(atPath: $0 + "/fb.json", withIntermediateDirectories: true) },
             config: #"{ engine: { fallbackFile: "fb.json" } }"#,
             error: "$.engine.fallbackFile: $DIR/fb.json: is a directory, expected a file"),
        Case(name: "engine fallback file of another format version",
             prepare: { try write(#"{ "formatVersion": 2, "placements": {} }"#, to: $0 + "/fb.json") },
             config: #"{ engine: { fallbackFile: "fb.json" } }"#,
             error: "$.engine.fallbackFile: $DIR/fb.json: $.formatVersion: unsupported formatVersion 2"),
        Case(name: "sink file below a file",
             prepare: { try write("x", to: $0 + "/file") },
             config: #"{ sinks: [ { type: "metrics" }, { type: "jsonl", path: "file/events.jsonl" } ] }"#,
             error: "$.sinks[1].path: $DIR/file/events.jsonl: directory $DIR/file: not a directory"),
        Case(name: "otlp output file below a file, named relative to the config file",
             prepare: { try write("x", to: $0 + "/file") },
             config: #"{ sinks: [ { type: "metrics" }, { type: "otlp", file: "file/otlp.jsonl" } ] }"#,
             error: "$.sinks[1].file: $DIR/file/otlp.jsonl: directory $DIR/file: not a directory"),
        Case(name: "a sink writing into the config file",
             config: #"{ sinks: [ { type: "metrics" }, { type: "jsonl", path: "flowscope.json5" } ] }"#,
             error: "$.sinks[1].path: $DIR/flowscope.json5: already written by the config file (give each sink a file of its own)"),
        Case(name: "two sinks on one file, one of them by default",
             config: #"{ sinks: [ { type: "jsonl" }, { type: "jsonl", name: "second", path: "state/./events.jsonl" } ] }"#,
             error: "$.sinks[1].path: $DIR/state/events.jsonl: already written by $.sinks[0].path (give each sink a file of its own)"),
        Case(name: "an otlp file and a jsonl path on one file",
             config: #"{ sinks: [ { type: "otlp", file: "out.jsonl" }, { type: "jsonl", path: "$DIR/out.jsonl" } ] }"#,
             error: "$.sinks[1].path: $DIR/out.jsonl: already written by $.sinks[0].file (give each sink a file of its own)"),
        Case(name: "jsonl path is a directory",
             config: #"{ sinks: [ { type: "jsonl", path: "." } ] }"#,
             error: "$.sinks[0].path: $DIR: is a directory, expected a file"),
        Case(name: "sqlite path is a device",
             config: #"{ sinks: [ { type: "sqlite", path: "/dev/null" } ] }"#,
             error: "$.sinks[0].path: /dev/null: not a regular file, expected an SQLite database file"),
        Case(name: "sqlite path is a file of another kind",
             prepare: { try write("id,name\n1,a\n", to: $0 + "/events.csv") },
             config: #"{ sinks: [ { type: "sqlite", path: "events.csv" } ] }"#,
             error: "$.sinks[0].path: $DIR/events.csv: not an SQLite database (its first bytes are not SQLite's header)"),
        Case(name: "exec program not on PATH",
             config: #"{ sinks: [ { type: "metrics" }, { type: "exec", command: ["flowscope-no-such-program", "-v"] } ] }"#,
             error: "$.sinks[1].command[0]: flowscope-no-such-program: not found in PATH"),
        Case(name: "exec program path that is not executable",
             prepare: { try write("#!/bin/sh\n", to: $0 + "/summary.sh") },
             config: #"{ sinks: [ { type: "exec", command: ["$DIR/summary.sh"] } ] }"#,
             error: "$.sinks[0].command[0]: $DIR/summary.sh: not executable"),
    ]

    @Test("every config serve refuses, check-config refuses with the same line naming the file, the key and the resolved path; nothing is created")
    func sameRefusals() async throws {
        for c in Self.cases {
            let dir = (makeTemporaryDirectory("checks") as NSString).standardizingPath
            defer { removeDirectory(dir) }
            try c.prepare(dir)
            var text = c.config.replacingOccurrences(of: "$DIR", with: dir)
            if !text.contains("stateDir") { text = text.replacingOccurrences(of: "{ server: {", with: #"{ server: { stateDir: "state","#) }
            if !text.contains("stateDir") { text = #"{ server: { stateDir: "state" }, "# + text.dropFirst() }
            let path = dir + "/flowscope.json5"
            try write(text, to: path)
            let expected = "\(path): " + c.error.replacingOccurrences(of: "$DIR", with: dir)

            let check = await flowscope("check-config", path)
            #expect(check.status == 2, "\(c.name): \(check.out)")
            #expect(check.err.hasPrefix("flowscope check-config: " + expected), "\(c.name): \(check.err)")
            #expect(check.err.filter { $0 == "\n" }.count == 1, "\(c.name): one line")

            let config = try FlowScopeConfig.load(path: path)
            do {
                let stack = try ServeStack(config: config, overrides: ServeStack.Overrides(port: 0))
                stack.stop()
                Issue.record("\(c.name): serve started")
            } catch {
                #expect("flowscope check-config: \(error.description)\n" == check.err, "\(c.name): serve and check-config differ")
            }
            #expect(!FileManager.default.fileExists(atPath: dir + "/state"), "\(c.name): the state directory was created")
        }
    }

    @Test("a config that check-config passes, serve starts; check-config creates nothing")
    func okMeansStarts() async throws {
        let dir = (makeTemporaryDirectory("checks") as NSString).standardizingPath
        defer { removeDirectory(dir) }
        try write(Self.pair.certPEM, to: dir + "/cert.pem")
        try write(Self.pair.keyPEM, to: dir + "/key.pem")
        try FileManager.default.createDirectory(atPath: dir + "/web", withIntermediateDirectories: true)
        try write("<!doctype html><title>mine</title>", to: dir + "/web/index.html")
        let path = dir + "/flowscope.json5"
        try write(#"{ server: { stateDir: "state", tls: { cert: "cert.pem", key: "key.pem" }, webRoot: "web" }, demo: { enabled: true } }"#, to: path)
        let check = await flowscope("check-config", path)
        #expect(check.status == 0, "\(check.err)")
        #expect(check.out.hasPrefix("\(path): ok"))
        #expect(!FileManager.default.fileExists(atPath: dir + "/state"))
        let stack = try ServeStack(config: try FlowScopeConfig.load(path: path), overrides: ServeStack.Overrides(port: 0))
        defer { stack.stop() }
        #expect(FileManager.default.fileExists(atPath: dir + "/state/token"))
        #expect(stack.tls?.certPEM == Self.pair.certPEM)
        #expect(try TestConnection(port: stack.server.port).request("GET", "/").text == "<!doctype html><title>mine</title>")
    }

    @Test("a nested server.tls.dir whose parents do not exist: check-config says ok, serve creates them mode 0700 and the certificate in it")
    func nestedCertificateDirectory() async throws {
        let dir = (makeTemporaryDirectory("checks") as NSString).standardizingPath
        defer { removeDirectory(dir) }
        let path = dir + "/flowscope.json5"
        try write(#"{ server: { stateDir: "a/b/state", tls: { dir: "x/y/tls" } }, demo: { enabled: false } }"#, to: path)
        let check = await flowscope("check-config", path)
        #expect(check.status == 0, "\(check.err)")
        #expect(!FileManager.default.fileExists(atPath: dir + "/a") && !FileManager.default.fileExists(atPath: dir + "/x"))
        let stack = try ServeStack(config: try FlowScopeConfig.load(path: path), overrides: ServeStack.Overrides(port: 0))
        defer { stack.stop() }
        #expect(stack.tls?.certPath == dir + "/x/y/tls/cert.pem")
        for made in ["/a", "/a/b", "/a/b/state", "/x", "/x/y", "/x/y/tls"] {
            #expect(StateModes.mode(dir + made) == 0o700, "\(made)")
        }
        #expect(StateModes.mode(dir + "/x/y/tls/key.pem") == 0o600)
    }

    @Test("an engine fallback file that exists and parses passes check-config, and serve starts with it")
    func goodFallbackFile() async throws {
        let dir = (makeTemporaryDirectory("checks") as NSString).standardizingPath
        defer { removeDirectory(dir) }
        try write(#"{ "formatVersion": 1, "placements": {} }"#, to: dir + "/fb.json")
        let path = dir + "/flowscope.json5"
        try write(#"{ server: { stateDir: "state" }, engine: { fallbackFile: "fb.json" }, demo: { enabled: false } }"#, to: path)
        let check = await flowscope("check-config", path)
        #expect(check.status == 0 && check.out.hasPrefix("\(path): ok"), "\(check.err)")
        let stack = try ServeStack(config: try FlowScopeConfig.load(path: path), overrides: ServeStack.Overrides(port: 0))
        stack.stop()
    }

    @Test("check-config lists exactly the sinks serve runs, the metrics and memory sinks it adds included, in serve's order")
    func sinksListedAreTheSinksServeRuns() async throws {
        let configs: [(sinks: String, listed: String)] = [
            (#"[ { type: "jsonl" }, { type: "sqlite" } ]"#, "metrics, memory, jsonl, sqlite"),
            (#"[ { type: "jsonl" }, { type: "memory" } ]"#, "metrics, jsonl, memory"),
            (#"[ { type: "memory" }, { type: "metrics" } ]"#, "memory, metrics"),
            (#"[ { type: "metrics", enabled: false }, { type: "jsonl" } ]"#, "metrics, memory, jsonl; disabled: metrics"),
            (#"[]"#, "metrics, memory"),
        ]
        for c in configs {
            let dir = (makeTemporaryDirectory("checks") as NSString).standardizingPath
            defer { removeDirectory(dir) }
            let path = dir + "/flowscope.json5"
            try write(#"{ server: { stateDir: "state" }, sinks: \#(c.sinks), demo: { enabled: false } }"#, to: path)
            let check = await flowscope("check-config", path)
            #expect(check.out == "\(path): ok (sinks: \(c.listed); 7 strategies)\n", "\(c.sinks): \(check.err)")
            let stack = try ServeStack(config: try FlowScopeConfig.load(path: path), overrides: ServeStack.Overrides(port: 0))
            let running = stack.pipeline.stats().map(\.type)
            stack.stop()
            let listed = c.listed.split(separator: ";")[0].split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            #expect(running == listed, "\(c.sinks)")
        }
    }

    @Test("a bad flag is reported before a bad or missing config; a missing --config is 'not found' with its resolved path")
    func flagsFirst() async throws {
        let dir = (makeTemporaryDirectory("checks") as NSString).standardizingPath
        defer { removeDirectory(dir) }
        let badPort = await flowscope("serve", "--config", dir + "/missing.json5", "--port", "http")
        #expect(badPort.status == 2)
        #expect(badPort.err == "flowscope serve: --port expects a port number 0-65535, got http\n")
        let missing = await flowscope("serve", "--config", dir + "/missing.json5", "--port", "0")
        #expect(missing.status == 2)
        #expect(missing.err == "flowscope serve: --config \(dir)/missing.json5: not found\n")
        #expect(missing.out.isEmpty)
        let check = await flowscope("check-config", dir + "/missing.json5")
        #expect(check.err == "flowscope check-config: \(dir)/missing.json5: not found\n")
        let ca = await flowscope("fetch", "main_paywall", "--backend", "https://127.0.0.1:1", "--ca", dir + "/none.pem")
        #expect(ca.err == "flowscope fetch: --ca \(dir)/none.pem: not found\n")
        let replay = await flowscope("replay", dir + "/none.jsonl")
        #expect(replay.err == "flowscope replay: \(dir)/none.jsonl: not found\n")
        try write("x", to: dir + "/file")
        let stateDir = await flowscope("serve", "--state-dir", dir + "/file", "--port", "0", "--no-demo")
        #expect(stateDir.status == 2)
        #expect(stateDir.err == "flowscope serve: --state-dir \(dir)/file: not a directory\n")
    }

    @Test("relative paths in a config file resolve against the file's directory, not the working directory")
    func relativePaths() throws {
        let dir = (makeTemporaryDirectory("checks") as NSString).standardizingPath
        defer { removeDirectory(dir) }
        try write("""
        { server: { stateDir: "state", webRoot: "../web", tls: { cert: "tls/c.pem", key: "/abs/k.pem" } },
          sinks: [ { type: "metrics" }, { type: "jsonl", path: "out/events.jsonl" }, { type: "sqlite", path: "/abs/e.sqlite" } ],
          demo: { scenario: "demo/backend.json5" }, engine: { fallbackFile: "fallback.json" } }
        """, to: dir + "/flowscope.json5")
        let config = try FlowScopeConfig.load(path: dir + "/flowscope.json5")
        let parent = (dir as NSString).deletingLastPathComponent
        #expect(config.server.stateDir == dir + "/state")
        #expect(config.server.webRoot == parent + "/web")
        #expect(config.server.tlsCert == dir + "/tls/c.pem")
        #expect(config.server.tlsKey == "/abs/k.pem")
        #expect(config.sinks[1]?["path"]?.stringValue == dir + "/out/events.jsonl")
        #expect(config.sinks[2]?["path"]?.stringValue == "/abs/e.sqlite")
        #expect(config.demo.scenario == dir + "/demo/backend.json5")
        #expect(config.engine.fallbackFile == dir + "/fallback.json")
        // With no state directory set, it stays .flowscope in the working directory.
        try write("{}", to: dir + "/empty.json5")
        #expect(try FlowScopeConfig.load(path: dir + "/empty.json5").server.stateDir == ".flowscope")
    }

    @Test("the built-in config, demo backend and dashboard are byte for byte the repository's files")
    func embeddedIdentical() async throws {
        let file = try String(contentsOfFile: packageRoot + "/config/flowscope.json5", encoding: .utf8)
        #expect(EmbeddedFiles.defaultConfig == file)
        #expect(EmbeddedFiles.demoScenario == (try String(contentsOfFile: packageRoot + "/config/demo/backend.json5", encoding: .utf8)))
        let web = packageRoot + "/web"
        let files = try #require(FileManager.default.enumerator(atPath: web)).compactMap { $0 as? String }.filter {
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: web + "/" + $0, isDirectory: &isDirectory) && !isDirectory.boolValue
                && !$0.hasSuffix("README.md") && !$0.split(separator: "/").contains { $0.hasPrefix(".") }
        }
        #expect(!files.isEmpty)
        #expect(Set(EmbeddedFiles.dashboard.keys) == Set(files))
        for name in files {
            #expect(EmbeddedFiles.dashboard[name] == [UInt8](try Data(contentsOf: URL(fileURLWithPath: web + "/" + name))), "\(name)")
        }

        // With no config file, the built-in one is used: it decodes to what the repository's file does.
        let builtIn = try FlowScopeConfig.load(path: nil)
        let shipped = try FlowScopeConfig.load(path: packageRoot + "/config/flowscope.json5")
        #expect(builtIn.file == nil)
        #expect(builtIn.sinks == shipped.sinks)
        #expect(builtIn.server.stateDir == ".flowscope" && shipped.server.stateDir == ".flowscope")
        #expect(builtIn.demo.scenario == nil && shipped.demo.scenario == nil, "the demo backend is the embedded one")
        #expect(builtIn.server.shutdownTimeout == 10)
        let check = await flowscope("check-config")
        #expect(check.status == 0, "\(check.err)")
        #expect(check.out.hasPrefix("(built-in config/flowscope.json5): ok (sinks: metrics, memory, sqlite, jsonl; disabled: otlp, console"))
    }
}

@Suite("flowscope completion and make install", .ownThread)
struct CompletionTests {
    /// What bash completes for the words typed so far.
    func bashComplete(_ words: [String]) throws -> [String] {
        let dir = makeTemporaryDirectory("completion")
        defer { removeDirectory(dir) }
        try write(CompletionScript.bash(commands), to: dir + "/flowscope.bash")
        let quoted = words.map { "'\($0)'" }.joined(separator: " ")
        let script = "source \(dir)/flowscope.bash; COMP_WORDS=(\(quoted)); COMP_CWORD=\(words.count - 1); _flowscope; printf '%s\\n' \"${COMPREPLY[@]}\""
        let result = try runProcess("/bin/bash", ["--norc", "-c", script], currentDirectory: dir)
        #expect(result.status == 0, "\(result.err)")
        return result.out.split(separator: "\n").map(String.init)
    }

    @Test("bash completes command names and each command's flags")
    func bash() throws {
        #expect(try bashComplete(["flowscope", "se"]) == ["serve"])
        #expect(try bashComplete(["flowscope", "c"]).sorted() == ["cert", "check-config", "completion"])
        #expect(try bashComplete(["flowscope", "serve", "--st"]) == ["--state-dir"])
        #expect(try bashComplete(["flowscope", "fetch", "--lo"]) == ["--load-timeout"])
        #expect(try bashComplete(["flowscope", "completion", "z"]) == ["zsh"])
    }

    @Test("the zsh and fish scripts name every command and flag, and an unknown shell is a usage error")
    func zshAndFish() async throws {
        for shell in ["bash", "zsh", "fish"] {
            let result = await flowscope("completion", shell)
            #expect(result.status == 0)
            for c in commands {
                #expect(result.out.contains(c.spec.name), "\(shell): \(c.spec.name)")
                for o in c.spec.options { #expect(result.out.contains(shell == "fish" ? "-l \(o.name)" : "--\(o.name)"), "\(shell): --\(o.name)") }
            }
        }
        #expect(await flowscope("completion", "zsh").out.hasPrefix("#compdef flowscope\n"))
        let bad = await flowscope("completion", "tcsh")
        #expect(bad.status == 2)
        #expect(bad.err == "flowscope completion: unknown shell tcsh: expected bash, zsh or fish\n")
    }

    @Test("make install PREFIX=D installs the release binary alone as D/bin/flowscope; make uninstall removes it")
    func makeInstall() throws {
        let install = try runProcess("/usr/bin/make", ["--no-print-directory", "-n", "install", "PREFIX=/opt/fs"], currentDirectory: packageRoot)
        #expect(install.status == 0, "\(install.err)")
        #expect(install.out.contains("swift build -c release"))
        #expect(install.out.contains(#"install -m 0755 .build/release/flowscope "/opt/fs/bin/flowscope""#), "\(install.out)")
        #expect(install.out.components(separatedBy: "install -m").count == 2, "one file installed")
        let uninstall = try runProcess("/usr/bin/make", ["--no-print-directory", "-n", "uninstall", "PREFIX=/opt/fs"], currentDirectory: packageRoot)
        #expect(uninstall.out == "rm -f \"/opt/fs/bin/flowscope\"\n")
    }
}

/// Permission bits, for the modes of created directories.
enum StateModes {
    static func mode(_ path: String) -> Int? {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.posixPermissions] as? Int).map { $0 & 0o777 }
    }
}

@Suite("serve's login URL", .ownThread)
struct ShownLoginURLTests {
    @Test("the token is printed in the login URL only on a terminal; elsewhere its file is named instead")
    func tokenOnlyOnATerminal() {
        let url = "https://buildbox:8443/?token=3f9c0a"
        #expect(shownLoginURL(url, terminal: true, tokenFile: ".flowscope/token") == url)
        let logged = shownLoginURL(url, terminal: false, tokenFile: ".flowscope/token")
        #expect(logged == "https://buildbox:8443/?token=<the token in .flowscope/token>")
        #expect(!logged.contains("3f9c0a"))
        #expect(shownLoginURL(url, terminal: false, tokenFile: nil) == "https://buildbox:8443/?token=<the token in the config>")
    }
}
