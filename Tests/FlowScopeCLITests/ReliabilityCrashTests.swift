import FlowEvents
import FlowFetch
import Foundation
import SQLiteSink
import Synchronization
import TestSupport
import Testing

// Crash safety of the event store: `flowscope serve` (the built binary, with demo traffic writing
// into the sqlite sink) is killed with SIGKILL at random moments, again and again. Every next start
// must come up, the file must pass SQLite's integrity check, no committed event may be lost, and
// every stored row must read back as a valid envelope.

private let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// Runs the sqlite3 tool on `db`; returns its standard output.
private func sqlite3(_ db: String, _ sql: String) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
    process.arguments = [db, sql]
    let out = Pipe()
    process.standardOutput = out
    process.standardError = Pipe()
    try process.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
}

/// Collects a child's output as it comes, so the test can wait for a line.
private final class OutputCollector: Sendable {
    private let text = Mutex("")
    init(_ pipe: Pipe) {
        pipe.fileHandleForReading.readabilityHandler = { [self] handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil; return }
            self.text.withLock { $0 += String(decoding: data, as: UTF8.self) }
        }
    }
    var current: String { text.withLock { $0 } }
}

@Suite("Reliability: crash safety of the event store under kill -9", .serialized, .heavy)
struct ReliabilityCrashTests {
    @Test("serve killed with SIGKILL at random points 12 times: every restart comes up, the store stays intact, no committed event is lost")
    func killNine() throws {
        let binary = root.appendingPathComponent(".build/debug/flowscope").path
        try #require(FileManager.default.isExecutableFile(atPath: binary), "build the flowscope binary first")
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/sqlite3"), "the sqlite3 tool is needed (scripts/setup.sh installs it)")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("flowscope-kill9-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let db = dir + "/events.db"
        let config = """
        {
          server: { port: 0, stateDir: "\(dir)/state" },
          sinks: [ { type: "metrics" }, { type: "memory" }, { type: "sqlite", path: "\(db)", batchSize: 20 } ],
          demo: { enabled: true, scenario: "\(root.path)/config/demo/backend.json5", rate: 200 },
        }
        """
        try config.write(toFile: dir + "/flowscope.json5", atomically: true, encoding: .utf8)

        var rng = SystemRandomNumberGenerator()
        var previousCount = 0
        var counts: [Int] = []
        for round in 0..<12 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = ["serve", "--config", dir + "/flowscope.json5"]
            process.currentDirectoryURL = URL(fileURLWithPath: dir)
            let out = Pipe(), err = Pipe()
            process.standardOutput = out
            process.standardError = err
            let stdout = OutputCollector(out), stderr = OutputCollector(err)
            try process.run()
            let deadline = ContinuousClock.now + .seconds(20)
            while !stdout.current.contains("Stop with Ctrl-C") && process.isRunning && ContinuousClock.now < deadline { usleep(10_000) }
            let started = stdout.current.contains("Stop with Ctrl-C")
            #expect(started, "round \(round): serve did not start: \(stderr.current.prefix(500))")
            // Let demo traffic write for a random while, then kill without warning.
            usleep(UInt32.random(in: 50_000...700_000, using: &rng))
            let alive = process.isRunning
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            #expect(alive, "round \(round): serve exited on its own: \(stderr.current.prefix(500))")
            #expect(process.terminationReason == .uncaughtSignal && process.terminationStatus == SIGKILL,
                    "round \(round): ended by \(process.terminationReason) \(process.terminationStatus)")
            guard started else { break }
            #expect(try sqlite3(db, "PRAGMA integrity_check;") == "ok", "round \(round)")
            let count = Int(try sqlite3(db, "SELECT count(*) FROM events;")) ?? -1
            #expect(count >= previousCount, "round \(round): \(count) events after \(previousCount)")
            // The runs table is written in the same transactions: its total is the rows' count.
            let totals = try sqlite3(db, "SELECT coalesce(sum(events), 0) FROM runs;")
            #expect(totals == String(count), "round \(round): runs table says \(totals) events, the table holds \(count)")
            previousCount = count
            counts.append(count)
        }
        print("reliability.killNine: events stored after each kill: \(counts)")
        #expect(previousCount > 0, "demo traffic wrote nothing")
        // Every stored row reads back as a valid envelope through the sink itself.
        let sink = try SQLiteSink(path: db)
        let events = try sink.storedEvents(limit: 100_000).map(\.envelope)
        #expect(events.count == previousCount)
        #expect(events.allSatisfy { $0.run == "live" && ISO8601.validRange.contains($0.ts) })
    }

    @Test("fetch killed with SIGKILL at random points while it writes the flow cache, 40 times: every next start comes up and serves only whole entries")
    func killNineCacheWrites() throws {
        let binary = root.appendingPathComponent(".build/debug/flowscope").path
        try #require(FileManager.default.isExecutableFile(atPath: binary), "build the flowscope binary first")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("flowscope-kill9-cache-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // Each placement answers with a variation named after it and a remote config large enough
        // (about 64 KiB) that writing the entry takes a while: kills land before, during and after it.
        let padding = String(repeating: "x", count: 64 * 1024)
        let server = try LoopbackServer { r in
            let parts = r.target.split(separator: "/")
            guard parts.count >= 4, parts[1] == "placements" else { return .respond(status: 404, body: []) }
            let p = String(parts[2])
            let body = #"{"placementId":"\#(p)","audience":{"name":"All Users","versionId":"av"},"variations":[{"id":"v-\#(p)","weight":100,"remoteConfig":{"pad":"\#(padding)"}}],"createdAt":0}"#
            return .respond(status: 200, body: Array(body.utf8))
        }
        defer { server.stop() }
        let placements = (0..<6).map { "p\($0)" }
        var rng = SystemRandomNumberGenerator()
        var killed = 0, finished = 0, served = 0, corrupt = 0, midWrite = 0
        // How long a whole run takes here and now (it varies with the machine's load): kills are
        // drawn across that span, which grows after kills in a row and follows finished runs.
        var runSeconds = 0.1, killsInARow = 0
        for round in 0..<40 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = ["fetch", placements[round % placements.count], "--backend", server.baseURL.absoluteString,
                                 "--profile", "u1", "--cache-dir", dir, "--load-timeout", "5"]
            process.standardOutput = Pipe()
            process.standardError = Pipe()
            let launched = ContinuousClock.now
            try process.run()
            usleep(UInt32(Double.random(in: 0.02...1.1, using: &rng) * runSeconds * 1_000_000))
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
            if process.terminationReason == .uncaughtSignal {
                killed += 1
                killsInARow += 1
                if killsInARow >= 3 { runSeconds *= 1.5; killsInARow = 0 }
            } else {
                finished += 1
                killsInARow = 0
                runSeconds = (runSeconds + (ContinuousClock.now - launched).seconds) / 2
            }
            #expect(process.terminationReason == .uncaughtSignal || process.terminationStatus == 0,
                    "round \(round): fetch failed with \(process.terminationStatus)")

            // A temporary file left behind means the kill landed inside a write.
            let profiles = (try? FileManager.default.contentsOfDirectory(atPath: dir + "/flows")) ?? []
            if profiles.contains(where: { p in
                ((try? FileManager.default.contentsOfDirectory(atPath: dir + "/flows/" + p)) ?? []).contains { $0.hasPrefix(".tmp-") }
            }) { midWrite += 1 }
            // The next start: the store opens, and every entry either reads whole or is reported corrupt.
            let cache = FlowCache(disk: try FileFlowStore(directory: dir + "/flows"))
            for p in placements {
                switch cache.read(CacheKey(profileId: "u1", placementId: p)) {
                case .hit(let entry, _):
                    served += 1
                    #expect(entry.flow.variationId == "v-\(p)" && entry.flow.remoteConfig["pad"]?.stringValue?.count == padding.count,
                            "round \(round): \(p) served a wrong entry")
                case .corrupt(let key, let reason):
                    corrupt += 1
                    Issue.record("round \(round): \(key) corrupt after a kill (\(reason)); an atomic write never leaves one")
                case .miss:
                    break
                }
            }
        }
        print("reliability.killNineCache: \(killed) runs killed (\(midWrite) inside a write), \(finished) finished; \(served) whole entries read back, \(corrupt) corrupt")
        #expect(killed >= 5 && finished >= 3, "kills should land both during and after runs: \(killed) killed, \(finished) finished")
        #expect(served > 0)
    }

    @Test("what a kill leaves in the flow cache directory (a half-written temp file, truncated, flipped or empty entries) is cleaned or reported corrupt on the next start, never served")
    func tornCacheWrites() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("flowscope-torn-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let keys = (0..<6).map { CacheKey(profileId: "user-42", placementId: "p\($0)") }
        do {
            let cache = FlowCache(disk: try FileFlowStore(directory: dir))
            for (i, key) in keys.enumerated() {
                let flow = Flow(placementId: key.placementId, variationId: "v\(i)", audienceName: "All Users", audienceVersionId: "av",
                                revision: i, productIds: ["p"], remoteConfig: ["i": .number(Double(i))], layout: nil,
                                source: .network, targetingLost: false)
                #expect(cache.write(key, CachedFlow(flow: flow, storedAt: EngineTime(seconds: Double(i)), fromDefaultAudience: false), keepTargeted: false).stored)
            }
        }
        let store = try FileFlowStore(directory: dir)
        let paths = keys.map { store.path(for: $0) }
        let profileDir = URL(fileURLWithPath: paths[0]).deletingLastPathComponent().path
        // A write cut short before its rename, and the damage a crash or a disk can leave in place.
        _ = FileManager.default.createFile(atPath: profileDir + "/.tmp-1f2e3d", contents: Data("flowscope-cache-1 ab".utf8))
        let whole = try Data(contentsOf: URL(fileURLWithPath: paths[1]))
        try whole.prefix(whole.count / 2).write(to: URL(fileURLWithPath: paths[1]))
        var second = try Data(contentsOf: URL(fileURLWithPath: paths[2]))
        second[second.count - 3] ^= 0x01
        try second.write(to: URL(fileURLWithPath: paths[2]))
        try Data().write(to: URL(fileURLWithPath: paths[3]))
        try Data((0..<300).map { UInt8(truncatingIfNeeded: $0 &* 31) }).write(to: URL(fileURLWithPath: paths[4]))

        // The next start.
        let cache = FlowCache(disk: try FileFlowStore(directory: dir))
        #expect(!FileManager.default.fileExists(atPath: profileDir + "/.tmp-1f2e3d"), "the cut-short temp file is removed at start")
        var outcomes: [String] = []
        for (i, key) in keys.enumerated() {
            switch cache.read(key) {
            case .hit(let entry, _):
                outcomes.append("hit")
                #expect([0, 5].contains(i), "damaged entry \(i) was served")
                #expect(entry.flow.variationId == "v\(i)" && entry.flow.revision == i)
            case .corrupt:
                outcomes.append("corrupt")
                #expect(!FileManager.default.fileExists(atPath: paths[i]), "a corrupt entry is deleted")
            case .miss:
                outcomes.append("miss")
            }
        }
        #expect(outcomes == ["hit", "corrupt", "corrupt", "corrupt", "corrupt", "hit"], "\(outcomes)")
    }
}

private extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) * 1e-18 }
}
