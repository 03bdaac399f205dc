import FlowEvents
import FlowJSON
import FlowScopeServer
import Foundation
import Synchronization
import TestSupport
import Testing
@testable import FlowScopeCLI

/// A `flowscope` process whose output is collected as it comes; killed by a watchdog after `limit` s.
final class RunningFlowScope {
    let process: Process
    private let out: DataBox, err: DataBox
    private let watchdog: DispatchWorkItem

    init(_ binary: String, _ arguments: [String], in directory: String, limit: Double = 60) throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        let stdout = Pipe(), stderr = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        process.standardInput = FileHandle.nullDevice
        let out = DataBox(), err = DataBox()
        self.out = out
        self.err = err
        for (pipe, box) in [(stdout, out), (stderr, err)] {
            pipe.fileHandleForReading.readabilityHandler = { handle in
                let data = handle.availableData
                box.value.withLock { $0.append(data) }
            }
        }
        try process.run()
        let pid = process.processIdentifier
        watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + limit, execute: watchdog)
    }

    var stdout: String { String(decoding: out.value.withLock { $0 }, as: UTF8.self) }
    var stderr: String { String(decoding: err.value.withLock { $0 }, as: UTF8.self) }
    var pid: Int32 { process.processIdentifier }

    /// Waits (up to `seconds`) for the process to end; nil if it is still running.
    func exit(within seconds: Double) async -> (reason: Process.TerminationReason, status: Int32)? {
        guard await poll(seconds, { !process.isRunning }) else { return nil }
        process.waitUntilExit()
        return (process.terminationReason, process.terminationStatus)
    }

    deinit {
        watchdog.cancel()
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}

/// Whether process `pid` has ended: no longer in /proc, or a zombie.
func processEnded(_ pid: Int32) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return true }
    // The state follows the command name in parentheses: "123 (sleep) S ...".
    guard let close = stat.lastIndex(of: ")") else { return true }
    return stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).hasPrefix("Z")
}

/// The built binary, copied alone into a fresh directory as `make install PREFIX=<dir>` would: it must
/// carry everything it serves.
func installedBinary(in dir: String) throws -> String {
    let built = try #require(flowscopeBinary(), "build the flowscope product first (swift build)")
    try FileManager.default.createDirectory(atPath: dir + "/bin", withIntermediateDirectories: true)
    try FileManager.default.copyItem(atPath: built, toPath: dir + "/bin/flowscope")
    return dir + "/bin/flowscope"
}

/// A TCP port on 127.0.0.1 that listens and never accepts: connections complete, nothing is answered.
final class BlackholeListener {
    let fd: Int32
    let port: Int

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.fd = fd
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = 0
        inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr)
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 128) == 0 else { throw ClientError("cannot listen: errno \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        port = Int(UInt16(bigEndian: addr.sin_port))
    }

    deinit { close(fd) }
}

/// `.realTime`: it runs while no other blocking test does (wall-clock waits, processes).
@Suite("the installed flowscope binary", .realTime)
struct BinaryRunAnywhereRealTimeTests {
    @Test("installed alone, started from an empty directory with no config: serves the dashboard (rendered in Chromium), demo traffic and /metrics")
    func emptyDirectory() async throws {
        let dir = makeTemporaryDirectory("installed")
        defer { removeDirectory(dir) }
        let binary = try installedBinary(in: dir)
        try FileManager.default.createDirectory(atPath: dir + "/work", withIntermediateDirectories: true)
        let serve = try RunningFlowScope(binary, ["serve", "--port", "0"], in: dir + "/work")
        #expect(await poll(20) { serve.stdout.contains("Stop with Ctrl-C.\n") }, "\(serve.stdout) \(serve.stderr)")
        let port = try #require(serve.stdout.firstMatch(of: /serving https:\/\/localhost:(\d+)\//).flatMap { Int($0.1) }, "\(serve.stdout)")
        #expect(serve.stdout.contains("demo traffic on"))

        let page = try TestConnection(port: port).request("GET", "/")
        #expect(page.status == 200)
        #expect(page.body == [UInt8](try Data(contentsOf: URL(fileURLWithPath: packageRoot + "/web/index.html"))))
        #expect(try TestConnection(port: port).request("GET", "/app.js").status == 200)
        #expect(try await poll(20) {
            let events = try JSON5.parse(try TestConnection(port: port).request("GET", "/api/events?name=fetch.end&run=live").text)
            return (events["events"]?.arrayValue?.count ?? 0) >= 2
        }, "demo traffic reaches the dashboard")
        // The embedded dashboard renders in a real browser: placements and charts from the demo traffic.
        let dom = try renderedDashboard(port: port)
        #expect(dom.contains("data-ready=\"true\""), "\(dom.prefix(300))")
        #expect(dom.contains("<tr data-placement="), "placements table rows")
        #expect(dom.contains("<svg class=\"chart"), "charts drawn")
        let metrics = try TestConnection(port: port).request("GET", "/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.text.contains("flowscope_fetch_duration_seconds"), "\(metrics.text.prefix(300))")
        #expect(FileManager.default.fileExists(atPath: dir + "/work/.flowscope/tls/cert.pem"), "state in the working directory")

        kill(serve.pid, SIGINT)
        let end = await serve.exit(within: 15)
        #expect(end?.reason == .exit && end?.status == 0, "\(String(describing: end)) \(serve.stderr)")
        #expect(serve.stdout.contains("stopped; events flushed\n"))
    }

    @Test("cert from a new, empty directory creates .flowscope/tls (and --dir d1/sub its parents), each mode 0700; a --dir below a file is exit 2 naming it")
    func certInAnEmptyDirectory() async throws {
        let binary = try #require(flowscopeBinary(), "build the flowscope product first (swift build)")
        let dir = (makeTemporaryDirectory("certempty") as NSString).standardizingPath
        defer { removeDirectory(dir) }
        func cert(_ arguments: [String]) async throws -> (status: Int32?, out: String, err: String) {
            let run = try RunningFlowScope(binary, ["cert"] + arguments, in: dir)
            let end = await run.exit(within: 30)
            return (end?.status, run.stdout, run.stderr)
        }
        let plain = try await cert([])
        #expect(plain.status == 0, "\(plain.err)")
        #expect(plain.out.hasPrefix("created certificate .flowscope/tls/cert.pem\n"), "\(plain.out)")
        #expect(try mode(dir + "/.flowscope") == 0o700 && mode(dir + "/.flowscope/tls") == 0o700)
        #expect(try mode(dir + "/.flowscope/tls/key.pem") == 0o600)
        #expect(try await cert([]).out.hasPrefix("existing certificate .flowscope/tls/cert.pem\n"))

        let nested = try await cert(["--dir", "d1/sub"])
        #expect(nested.status == 0, "\(nested.err)")
        #expect(FileManager.default.fileExists(atPath: dir + "/d1/sub/cert.pem"))
        #expect(try mode(dir + "/d1") == 0o700 && mode(dir + "/d1/sub") == 0o700)

        try write("x", to: dir + "/afile")
        let blocked = try await cert(["--dir", "afile/sub"])
        #expect(blocked.status == 2)
        #expect(blocked.err == "flowscope cert: \(dir)/afile/sub: cannot be created: \(dir)/afile is not a directory\n")

        // --host: names a new certificate carries; an existing one that lacks a name is an error.
        let named = try await cert(["--dir", "named", "--host", "buildbox.example, 192.0.2.7"])
        #expect(named.status == 0, "\(named.err)")
        let pem = try String(contentsOfFile: dir + "/named/cert.pem", encoding: .utf8)
        #expect(TLSMaterial.certificate(pem, covers: "buildbox.example") && TLSMaterial.certificate(pem, covers: "192.0.2.7"))
        #expect(try await cert(["--dir", "named", "--host", "buildbox.example"]).status == 0)
        let lacking = try await cert(["--dir", "named", "--host", "other.example"])
        #expect(lacking.status == 2 && lacking.err.contains("does not carry other.example; delete named"), "\(lacking.err)")
        let bad = try await cert(["--dir", "bad", "--host", "not a name"])
        #expect(bad.status == 2 && bad.err == "flowscope cert: --host not a name: expected a host name or an IP address\n")
        #expect(!FileManager.default.fileExists(atPath: dir + "/bad"))
    }

    @Test("one-character relative directories are directories like any other: cert --dir x, simulate and serve --state-dir s, never a crash")
    func oneCharacterDirectories() async throws {
        let binary = try #require(flowscopeBinary(), "build the flowscope product first (swift build)")
        let dir = (makeTemporaryDirectory("onechar") as NSString).standardizingPath
        defer { removeDirectory(dir) }
        let cert = try RunningFlowScope(binary, ["cert", "--dir", "x"], in: dir)
        let certEnd = await cert.exit(within: 30)
        #expect(certEnd?.reason == .exit && certEnd?.status == 0, "\(String(describing: certEnd)) \(cert.stderr)")
        #expect(FileManager.default.fileExists(atPath: dir + "/x/cert.pem"))
        #expect(try mode(dir + "/x") == 0o700)

        let simulate = try RunningFlowScope(binary, ["simulate", "--sessions", "20", "--threads", "1", "--state-dir", "s"], in: dir)
        let simulateEnd = await simulate.exit(within: 60)
        #expect(simulateEnd?.reason == .exit && simulateEnd?.status == 0, "\(String(describing: simulateEnd)) \(simulate.stderr)")
        #expect(simulate.stdout.contains("saved as dashboard run "), "\(simulate.stdout)")
        #expect(try mode(dir + "/s") == 0o700)

        let serve = try RunningFlowScope(binary, ["serve", "--state-dir", "t", "--port", "0", "--no-demo"], in: dir)
        #expect(await poll(20) { serve.stdout.contains("Stop with Ctrl-C.\n") || !serve.process.isRunning }, "\(serve.stderr)")
        #expect(FileManager.default.fileExists(atPath: dir + "/t/tls/cert.pem"), "\(serve.stdout) \(serve.stderr)")
        kill(serve.pid, SIGINT)
        let serveEnd = await serve.exit(within: 15)
        #expect(serveEnd?.reason == .exit && serveEnd?.status == 0, "\(String(describing: serveEnd)) \(serve.stderr)")
    }

    @Test("simulate from any directory: the built-in config unless --config; runs saved under server.stateDir (mode 0700) or --state-dir, never replacing one another, listed by serve")
    func simulateStateDirectory() async throws {
        let dir = makeTemporaryDirectory("simstate")
        defer { removeDirectory(dir) }
        let binary = try installedBinary(in: dir)
        func simulate(_ arguments: [String]) async throws -> (out: String, saved: (id: String, in: String)?) {
            let run = try RunningFlowScope(binary, ["simulate", "--sessions", "20", "--threads", "1"] + arguments, in: dir)
            let end = await run.exit(within: 60)
            #expect(end?.reason == .exit && end?.status == 0, "\(arguments): \(run.stderr)")
            let saved = run.stdout.firstMatch(of: /saved as dashboard run (\S+) \((.+)\)\n/).map { (String($0.1), String($0.2)) }
            return (run.stdout, saved)
        }
        // A config/flowscope.json5 in the working directory is not read without --config.
        try FileManager.default.createDirectory(atPath: dir + "/config", withIntermediateDirectories: true)
        try write(#"{ simulate: { strategies: [ { name: "from the working directory", orDefault: { timeout: 3 } } ] } }"#,
                  to: dir + "/config/flowscope.json5")
        let plain = try await simulate([])
        #expect(!plain.out.contains("from the working directory") && plain.out.contains("naive: getFlow at launch"), "\(plain.out)")
        #expect(plain.saved?.in == ".flowscope/simulations", "\(plain.out)")
        #expect(try mode(dir + "/.flowscope") == 0o700)
        let flag = try await simulate(["--state-dir", dir + "/flagged"])
        #expect(flag.saved?.in == dir + "/flagged/simulations", "\(flag.out)")
        #expect(try mode(dir + "/flagged") == 0o700)

        // server.stateDir of the config given, relative to the config file; the same seed twice.
        try FileManager.default.createDirectory(atPath: dir + "/conf", withIntermediateDirectories: true)
        try write(#"{ server: { stateDir: "state" }, simulate: { strategies: [ { name: "from --config", orDefault: { timeout: 3 } } ] } }"#,
                  to: dir + "/conf/c.json5")
        let first = try await simulate(["--config", dir + "/conf/c.json5", "--seed", "5"])
        let second = try await simulate(["--config", dir + "/conf/c.json5", "--seed", "5"])
        #expect(first.out.contains("from --config"), "\(first.out)")
        let ids = [first.saved?.id, second.saved?.id].compactMap { $0 }
        #expect(ids.count == 2 && ids[0] != ids[1], "\(ids)")
        #expect(first.saved.map { standardized($0.in) } == standardized(dir + "/conf/state/simulations"), "\(first.out)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir + "/conf/state/simulations").count == 2)
        #expect(try mode(dir + "/conf/state") == 0o700)

        let serve = try RunningFlowScope(binary, ["serve", "--config", dir + "/conf/c.json5", "--port", "0", "--no-demo"], in: dir)
        #expect(await poll(20) { serve.stdout.contains("Stop with Ctrl-C.\n") }, "\(serve.stdout) \(serve.stderr)")
        let port = try #require(serve.stdout.firstMatch(of: /serving https:\/\/localhost:(\d+)\//).flatMap { Int($0.1) }, "\(serve.stdout)")
        let runs = try JSON5.parse(try TestConnection(port: port).request("GET", "/api/runs").text)["runs"]?.arrayValue ?? []
        let listed = Set(runs.compactMap { $0["id"]?.stringValue })
        #expect(listed.isSuperset(of: ids), "\(listed)")
        kill(serve.pid, SIGINT)
        #expect(await serve.exit(within: 15)?.status == 0)
    }

    @Test("two SIGINTs back to back under a CPU load: serve exits 0 or 130, twenty times out of twenty, never a crash")
    func doubleInterruptServe() async throws {
        let dir = makeTemporaryDirectory("sigint")
        defer { removeDirectory(dir) }
        let binary = try installedBinary(in: dir)
        // A busy process per core, for the whole test: signals and the stop must not depend on idle CPUs.
        let load = try (0..<ProcessInfo.processInfo.activeProcessorCount).map { _ in
            try RunningFlowScope("/bin/sh", ["-c", "while :; do :; done"], in: dir, limit: 120)
        }
        defer { for busy in load { kill(busy.pid, SIGKILL) } }
        var statuses: [Int32] = []
        for round in 0..<20 {
            let serve = try RunningFlowScope(binary, ["serve", "--port", "0", "--state-dir", dir + "/state"], in: dir)
            #expect(await poll(20) { serve.stdout.contains("Stop with Ctrl-C.\n") }, "round \(round): \(serve.stderr)")
            try await Task.sleep(for: .milliseconds(200))  // some demo traffic in flight
            kill(serve.pid, SIGINT)
            kill(serve.pid, SIGINT)
            let end = await serve.exit(within: 15)
            #expect(end?.reason == .exit, "round \(round): \(String(describing: end)) \(serve.stderr)")
            #expect(end?.status == 0 || end?.status == 130, "round \(round): \(String(describing: end)) \(serve.stderr)")
            #expect(!serve.stderr.contains("Fatal error") && !serve.stderr.contains("CONTINUATION MISUSE"), "\(serve.stderr)")
            statuses.append(end?.status ?? -1)
        }
        #expect(statuses.count == 20)
    }

    /// Whether process `pid` has a handler installed for `signal` (SigCgt in /proc/PID/status).
    static func catches(_ pid: Int32, _ signal: Int32) -> Bool {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigCgt:") }),
              let mask = UInt64(line.dropFirst("SigCgt:".count).trimmingCharacters(in: .whitespaces), radix: 16) else { return false }
        return mask & (1 << UInt64(signal - 1)) != 0
    }

    @Test("two SIGINTs during start-up, once the handler is in but before the ready line: serve exits 0 or 130")
    func doubleInterruptDuringStartUp() async throws {
        let dir = makeTemporaryDirectory("sigint-start")
        defer { removeDirectory(dir) }
        let binary = try installedBinary(in: dir)
        for round in 0..<5 {
            // A fresh state directory each round: start-up then creates a certificate and a token.
            let serve = try RunningFlowScope(binary, ["serve", "--port", "0", "--state-dir", "\(dir)/state-\(round)"], in: dir)
            #expect(await poll(20) { Self.catches(serve.pid, SIGINT) || !serve.process.isRunning }, "round \(round): \(serve.stderr)")
            kill(serve.pid, SIGINT)
            kill(serve.pid, SIGINT)
            let end = await serve.exit(within: 15)
            #expect(end?.reason == .exit && (end?.status == 0 || end?.status == 130),
                    "round \(round): \(String(describing: end)) \(serve.stdout) \(serve.stderr)")
        }
    }

    @Test("serve's signal thread takes SIGINT and SIGTERM although the Dispatch thread that made it blocks them")
    func signalThreadOfServeBlocksNoSignal() async throws {
        let dir = makeTemporaryDirectory("sigint-mask")
        defer { removeDirectory(dir) }
        let binary = try installedBinary(in: dir)
        let serve = try RunningFlowScope(binary, ["serve", "--port", "0", "--no-demo", "--state-dir", dir + "/state"], in: dir)
        #expect(await poll(20) { serve.stdout.contains("Stop with Ctrl-C.\n") }, "\(serve.stderr)")
        var masks: [String: UInt64] = [:]  // thread name -> blocked signals
        for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(serve.pid)/task")) ?? [] {
            let base = "/proc/\(serve.pid)/task/\(task)"
            guard let name = try? String(contentsOfFile: base + "/comm", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines),
                  let status = try? String(contentsOfFile: base + "/status", encoding: .utf8),
                  let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigBlk:") }),
                  let mask = UInt64(line.dropFirst("SigBlk:".count).trimmingCharacters(in: .whitespaces), radix: 16) else { continue }
            masks[name + " " + task] = mask
        }
        let relay = masks.filter { $0.key.hasPrefix(SignalRelay.threadName + " ") }
        #expect(relay.count == 1, "one thread named \(SignalRelay.threadName): \(masks)")
        let both: UInt64 = 1 << UInt64(SIGINT - 1) | 1 << UInt64(SIGTERM - 1)
        #expect(relay.values.allSatisfy { $0 & both == 0 }, "the signal thread blocks SIGINT or SIGTERM: \(relay)")
        #expect(masks.values.contains { $0 & both == both }, "some thread blocks both (the case this guards against): \(masks)")
        kill(serve.pid, SIGINT)
        let end = await serve.exit(within: 15)
        #expect(end?.reason == .exit && end?.status == 0, "\(String(describing: end)) \(serve.stderr)")
    }

    @Test("two SIGINTs back to back: stub-backend and replay --serve exit 0 or 130 too")
    func doubleInterruptOthers() async throws {
        let dir = makeTemporaryDirectory("sigint")
        defer { removeDirectory(dir) }
        let binary = try installedBinary(in: dir)
        try write("", to: dir + "/empty.jsonl")
        let runs: [([String], String)] = [
            (["stub-backend", "--port", "0"], "stub backend for"),
            (["replay", dir + "/empty.jsonl", "--serve", "--port", "0"], "Stop with Ctrl-C.\n"),
        ]
        for (arguments, ready) in runs {
            for round in 0..<3 {
                let running = try RunningFlowScope(binary, arguments, in: dir)
                #expect(await poll(20) { running.stdout.contains(ready) }, "\(arguments[0]): \(running.stderr)")
                kill(running.pid, SIGINT)
                kill(running.pid, SIGINT)
                let end = await running.exit(within: 15)
                #expect(end?.reason == .exit && (end?.status == 0 || end?.status == 130),
                        "\(arguments[0]) round \(round): \(String(describing: end)) \(running.stderr)")
            }
            // One SIGTERM alone: a graceful stop, status 0.
            let running = try RunningFlowScope(binary, arguments, in: dir)
            #expect(await poll(20) { running.stdout.contains(ready) })
            kill(running.pid, SIGTERM)
            let end = await running.exit(within: 15)
            #expect(end?.reason == .exit && end?.status == 0, "\(arguments[0]): \(String(describing: end)) \(running.stderr)")
        }
    }

    @Test("a stop that hangs is cut at server.shutdownTimeout with progress on stderr; a second SIGINT during it exits 130 at once; neither leaves an exec sink's program running")
    func boundedShutdown() async throws {
        let dir = makeTemporaryDirectory("shutdown")
        defer { removeDirectory(dir) }
        let binary = try installedBinary(in: dir)
        // An OTLP collector that accepts connections (the kernel's backlog) and never answers: the
        // sink's flush waits its own 60 s for it.
        let collector = try BlackholeListener()
        try write("""
        { server: { stateDir: "state", shutdownTimeout: 2 },
          sinks: [ { type: "metrics" }, { type: "memory" },
                   { type: "otlp", endpoint: "http://127.0.0.1:\(collector.port)/v1/traces", timeout: 60, flushTimeout: 60, flushInterval: 0.2 },
                   // A program that ignores both end of file and SIGTERM: only SIGKILL ends it.
                   { type: "exec", command: ["sh", "-c", "echo $$ > program.pid; trap '' TERM; exec sleep 300"] } ],
          demo: { enabled: true, rate: 50 } }
        """, to: dir + "/flowscope.json5")
        for secondSignal in [false, true] {
            try? FileManager.default.removeItem(atPath: dir + "/program.pid")
            let serve = try RunningFlowScope(binary, ["serve", "--config", dir + "/flowscope.json5", "--port", "0"], in: dir)
            #expect(await poll(20) { serve.stdout.contains("Stop with Ctrl-C.\n") }, "\(serve.stderr)")
            #expect(await poll(10) { (try? String(contentsOfFile: dir + "/program.pid", encoding: .utf8))?.hasSuffix("\n") == true })
            let program = try #require(Int32((try String(contentsOfFile: dir + "/program.pid", encoding: .utf8)).trimmingCharacters(in: .whitespacesAndNewlines)))
            defer { kill(program, SIGKILL) }
            try await Task.sleep(for: .seconds(2))  // enough demo events to fill the pipe
            let start = ContinuousClock.now
            kill(serve.pid, SIGINT)
            if secondSignal {
                #expect(await poll(5) { serve.stderr.contains("stopping: ") }, "\(serve.stderr)")
                kill(serve.pid, SIGINT)
                let end = await serve.exit(within: 5)
                #expect(end?.reason == .exit && end?.status == 130, "\(String(describing: end)) \(serve.stderr)")
                #expect(serve.stderr.contains("second signal: exiting now"))
            } else {
                let end = await serve.exit(within: 15)
                let took = ContinuousClock.now - start
                #expect(end?.reason == .exit && end?.status == 1, "\(String(describing: end)) \(serve.stderr)")
                #expect(took < .seconds(8), "\(took)")
                #expect(serve.stderr.contains("flowscope serve: stopping: draining sinks, 1 s of at most 2 s; waiting for "), "\(serve.stderr)")
                #expect(serve.stderr.contains("still draining sinks after 2 s (server.shutdownTimeout)"), "\(serve.stderr)")
                // The slow sink is named, and what is given up is counted.
                let last = serve.stderr.split(separator: "\n").last { $0.contains("exiting without waiting further") }.map(String.init) ?? ""
                #expect(last.contains("; given up: ") && last.contains("otlp (") && last.contains(" events not written"), "\(serve.stderr)")
                #expect(!last.contains("memory (") && !last.contains("metrics ("), "sinks that had finished are not named: \(last)")
            }
            // Gone (or a zombie waiting for a parent that reaps it): it did not outlive the server.
            #expect(await poll(3) { processEnded(program) }, "exec program \(program) still running, second signal: \(secondSignal)")
        }
    }

    @Test("fetch over TLS against a backend that never answers ends within its load timeout with a JSON result, status 1, no SIGPIPE")
    func fetchHangingTLS() async throws {
        let dir = makeTemporaryDirectory("hang")
        defer { removeDirectory(dir) }
        let binary = try installedBinary(in: dir)
        try write("""
        { name: "hang", profile: { id: "u" },
          backend: { placements: { main_paywall: { audiences: [
            { name: "All Users", versionId: "av", variations: [ { id: "A", weight: 100 } ] } ] } } },
          network: { rules: [ { match: { placement: "main_paywall" }, fail: "hang" } ] },
          steps: [] }
        """, to: dir + "/hang.json5")
        let stub = try RunningFlowScope(binary, ["stub-backend", "--tls", "--port", "0", "--scenario", dir + "/hang.json5"], in: dir)
        #expect(await poll(20) { stub.stdout.contains(" on https://") }, "\(stub.stdout) \(stub.stderr)")
        let url = try #require(stub.stdout.firstMatch(of: /on (https:\/\/[0-9.:]+)/).map { String($0.1) }, "\(stub.stdout)")
        for _ in 0..<3 {
            let start = ContinuousClock.now
            let fetch = try runProcess(binary, ["fetch", "main_paywall", "--backend", url, "--ca", dir + "/.flowscope/tls/cert.pem",
                                                "--load-timeout", "2", "--json"], timeout: 30, currentDirectory: dir)
            let took = ContinuousClock.now - start
            #expect(fetch.status == 1 || fetch.status == 0, "status \(fetch.status): \(fetch.err)")
            #expect(took < .seconds(8), "\(took)")
            let json = try JSON5.parse(fetch.out)
            #expect(json["results"]?.arrayValue?.isEmpty == false, "\(fetch.out)")
        }
        kill(stub.pid, SIGINT)
        let end = await stub.exit(within: 15)
        #expect(end?.reason == .exit && end?.status == 0, "\(String(describing: end)) \(stub.stderr)")
    }
}

/// The dashboard's DOM after its scripts ran, from headless Chromium (installed by `make test`).
func renderedDashboard(port: Int) throws -> String {
    let candidates: [String] = ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"]
    let chromium = candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    guard let chromium else { throw ClientError("chromium not found: `apt-get install chromium` (make test installs it)") }
    let profile = makeTemporaryDirectory("chromium")
    defer { removeDirectory(profile) }
    let result = try runProcess(chromium, [
        "--headless", "--no-sandbox", "--disable-gpu", "--ignore-certificate-errors", "--user-data-dir=\(profile)",
        "--no-first-run", "--virtual-time-budget=5000", "--window-size=1400,1000", "--dump-dom",
        "https://127.0.0.1:\(port)/?stream=off",
    ], timeout: 90)
    guard result.status == 0 else { throw ClientError("chromium exited with \(result.status): \(result.err.suffix(300))") }
    return result.out
}

/// `path` without `//` or `.` components.
private func standardized(_ path: String) -> String { URL(fileURLWithPath: path).standardizedFileURL.path }

/// The permission bits of a file or directory.
private func mode(_ path: String) throws -> Int {
    let attributes = try FileManager.default.attributesOfItem(atPath: path)
    return (attributes[.posixPermissions] as? Int ?? -1) & 0o777
}

@Suite("stop progress", .ownThread)
struct StopProgressTests {
    @Test("the stop names each unfinished sink with what it has not written, and counts what a cut stop gives up")
    func progressNamesSinks() {
        let drains = [SinkDrain(sink: "otlp", queued: 0, inFlight: 0), SinkDrain(sink: "sqlite", queued: 12_345, inFlight: 500)]
        #expect(StopSignals.waitingFor(drains) == "otlp (flushing), sqlite (12,345 events queued, 500 being written)")
        #expect(StopSignals.abandoned(drains)
                == "otlp (flushing), sqlite (12,345 events queued, 500 being written); 12,845 events not written, and what the flushing sinks still held")
        #expect(StopSignals.abandoned([SinkDrain(sink: "jsonl", queued: 7, inFlight: 0)]) == "jsonl (7 events queued); 7 events not written")
        #expect(StopSignals.abandoned([]) == "nothing (every sink had finished)")
    }
}
