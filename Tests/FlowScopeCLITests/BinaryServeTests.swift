import TestSupport
import FlowJSON
import Foundation
import Testing
@testable import FlowScopeCLI

/// The built `flowscope` executable (beside the test bundle, or in .build/debug).
func flowscopeBinary() -> String? {
    let beside = URL(fileURLWithPath: CommandLine.arguments.first ?? "").deletingLastPathComponent().appendingPathComponent("flowscope").path
    return [beside, packageRoot + "/.build/debug/flowscope"].first { FileManager.default.isExecutableFile(atPath: $0) }
}

/// `.realTime`: it runs while no other blocking test does (its watchdog and waits are wall-clock
/// bounds).
@Suite("the flowscope executable", .realTime)
struct BinaryServeRealTimeTests {
    @Test("flowscope serve as a process: prints its URL and fingerprint, answers over TLS, stops cleanly on SIGTERM with its jsonl flushed")
    func serveProcess() async throws {
        let binary = try #require(flowscopeBinary(), "build the flowscope product first (swift build)")
        let dir = makeTemporaryDirectory("binary")
        defer { removeDirectory(dir) }
        try write("""
        { server: { port: 0, stateDir: "\(dir)/state" },
          sinks: [ { type: "metrics" }, { type: "memory" }, { type: "jsonl", path: "\(dir)/events.jsonl" } ],
          demo: { enabled: false } }
        """, to: dir + "/flowscope.json5")

        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["serve", "--config", dir + "/flowscope.json5", "--port", "0"]
        process.currentDirectoryURL = URL(fileURLWithPath: dir)
        let stdout = Pipe(), stderr = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        let printed = DataBox()
        stdout.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            printed.value.withLock { $0.append(data) }
        }
        try process.run()
        let pid = process.processIdentifier
        let watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + 30, execute: watchdog)
        defer {
            watchdog.cancel()
            if process.isRunning { kill(pid, SIGKILL) }
            process.waitUntilExit()
            stdout.fileHandleForReading.readabilityHandler = nil
        }
        func output() -> String { String(decoding: printed.value.withLock { $0 }, as: UTF8.self) }

        #expect(await poll(15) { output().contains("Stop with Ctrl-C.\n") }, "\(output())")
        let text = output()
        let port = try #require(text.firstMatch(of: /serving https:\/\/localhost:(\d+)\//).flatMap { Int($0.1) }, "\(text)")
        #expect(text.contains("  certificate \(dir)/state/tls/cert.pem\n"))
        #expect(text.contains("demo traffic off"))
        let fingerprint = try #require(text.firstMatch(of: /SHA-256 fingerprint ([0-9A-F:]{95})/).map { String($0.1) })

        let connection: TestConnection
        do {
            connection = try TestConnection(port: port)
        } catch {
            let state = process.isRunning ? "running" : "exited with \(process.terminationStatus) (\(process.terminationReason == .uncaughtSignal ? "signal" : "exit"))"
            Issue.record("\(error); flowscope serve \(state); printed: \(output())")
            throw error
        }
        #expect(connection.peerFingerprint == fingerprint)
        #expect(try connection.request("GET", "/healthz").status == 200)
        let token = try String(contentsOfFile: dir + "/state/token", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let events = (0..<50).map { Events.envelope("cache.miss", placement: "p1", t: Double($0)) }
        let ingest = try TestConnection(port: port).request("POST", "/api/ingest", headers: [("Authorization", "Bearer \(token)")],
                                                          body: Array(Events.lines(events).utf8))
        #expect(ingest.status == 202)

        kill(pid, SIGTERM)
        #expect(await poll(10) { !process.isRunning })
        process.waitUntilExit()
        #expect(process.terminationReason == .exit)
        #expect(process.terminationStatus == 0)
        #expect(await poll(2) { output().contains("stopped; events flushed\n") }, "\(output())")
        let lines = try String(contentsOfFile: dir + "/events.jsonl", encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 50)
        let errText = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(errText.isEmpty, "\(errText)")
    }

    @Test("flowscope check-config as a process: exit 0 on the shipped config, 2 with one stderr line on a bad one")
    func checkConfigProcess() throws {
        let binary = try #require(flowscopeBinary(), "build the flowscope product first (swift build)")
        let good = try runProcess(binary, ["check-config", "config/flowscope.json5"], currentDirectory: packageRoot)
        #expect(good.status == 0)
        #expect(good.out.hasPrefix("config/flowscope.json5: ok"))
        let dir = makeTemporaryDirectory("binary")
        defer { removeDirectory(dir) }
        try write(#"{ sinks: [ { type: "metrics" }, { type: "nope" } ] }"#, to: dir + "/bad.json5")
        let bad = try runProcess(binary, ["check-config", dir + "/bad.json5"])
        #expect(bad.status == 2)
        #expect(bad.out.isEmpty)
        #expect(bad.err.hasPrefix("flowscope check-config: \(dir)/bad.json5: $.sinks[1].type: unknown sink type \"nope\""), "\(bad.err)")
        #expect(bad.err.filter { $0 == "\n" }.count == 1)
        let usage = try runProcess(binary, ["serve", "--bogus"])
        #expect(usage.status == 2)
        #expect(usage.err == "flowscope serve: unknown option --bogus (see flowscope serve --help)\n")
    }
}
