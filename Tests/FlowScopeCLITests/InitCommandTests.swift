import FlowJSON
import Foundation
import TestSupport
import Testing
@testable import FlowScopeCLI

/// `flowscope init`: the files it writes work where they are written, as written.
/// `.realTime`: it runs while no other blocking test does (a real serve and a real Prometheus).
@Suite("flowscope init", .realTime)
struct InitCommandRealTimeTests {
    @Test("init writes a config, prometheus.yml, the Grafana dashboard and the scenarios; serve, promtool, Prometheus and run use them as written")
    func initFolderWorksAsWritten() async throws {
        let prometheus = "/usr/bin/prometheus", promtool = "/usr/bin/promtool"
        try #require(FileManager.default.isExecutableFile(atPath: prometheus), "prometheus is missing: apt-get install prometheus")
        let work = makeTemporaryDirectory("init")
        defer { removeDirectory(work) }
        let dir = work + "/paywall-lab"
        let printed = BenchCommandTests.Printed()
        #expect(await CommandLine.run(["init", dir], output: printed.output) == 0, "\(printed.err.withLock { $0 })")
        let scenarios = try FileManager.default.contentsOfDirectory(atPath: dir + "/scenarios").filter { $0.hasSuffix(".json5") }
        #expect(scenarios.count == EmbeddedFiles.scenarios.count && scenarios.count >= 20)
        #expect(!EmbeddedFiles.grafanaDashboard.isEmpty)
        for file in ["flowscope.json5", "prometheus.yml", "grafana/flowscope-dashboard.json"] {
            #expect(FileManager.default.fileExists(atPath: dir + "/" + file), "\(file)")
        }
        #expect(printed.out.withLock { $0 }.contains("flowscope serve --config \(dir)/flowscope.json5"))

        // A second init refuses, naming the file and writing nothing; --force replaces.
        let again = BenchCommandTests.Printed()
        #expect(await CommandLine.run(["init", dir], output: again.output) == 2)
        #expect(again.err.withLock { $0 }.contains("\(dir)/flowscope.json5 exists"), "\(again.err.withLock { $0 })")
        #expect(await CommandLine.run(["init", dir, "--force"], output: BenchCommandTests.Printed().output) == 0)

        // The config checks out, and every scenario passes.
        #expect(await CommandLine.run(["check-config", dir + "/flowscope.json5"], output: BenchCommandTests.Printed().output) == 0)
        let run = BenchCommandTests.Printed()
        #expect(await CommandLine.run(["run"] + scenarios.sorted().map { dir + "/scenarios/" + $0 }, output: run.output) == 0,
                "\(run.out.withLock { $0 }.suffix(2000)) \(run.err.withLock { $0 })")

        // serve started from elsewhere keeps its state next to the config.
        let binary = try installedBinary(in: work + "/install")
        let serve = try RunningFlowScope(binary, ["serve", "--config", dir + "/flowscope.json5", "--port", "0", "--no-demo"], in: work)
        #expect(await poll(20) { serve.stdout.contains("Stop with Ctrl-C.\n") }, "\(serve.stderr)")
        defer { kill(serve.pid, SIGINT) }
        let port = try #require(serve.stdout.firstMatch(of: /serving https:\/\/localhost:(\d+)\//).flatMap { Int($0.1) }, "\(serve.stdout)")
        #expect(FileManager.default.fileExists(atPath: dir + "/.flowscope/tls/cert.pem"), "the state directory is the folder's .flowscope")
        #expect(!FileManager.default.fileExists(atPath: work + "/.flowscope"))

        // promtool accepts prometheus.yml as written (its ca_file now exists).
        let check = try runProcess(promtool, ["check", "config", dir + "/prometheus.yml"])
        #expect(check.status == 0, "\(check.out)\(check.err)")

        // Prometheus scrapes with it: the one change is the port (and a 1 s interval), in a copy beside it.
        var config = try String(contentsOfFile: dir + "/prometheus.yml", encoding: .utf8)
        for (from, to) in [("\"localhost:8443\"", "\"localhost:\(port)\""), ("scrape_interval: 15s", "scrape_interval: 1s"),
                           ("scrape_timeout: 10s", "scrape_timeout: 1s")] {
            try #require(config.contains(from), "prometheus.yml no longer contains \(from)")
            config = config.replacingOccurrences(of: from, with: to)
        }
        try write(config, to: dir + "/prometheus-test.yml")
        let webPort = try freeLoopbackPort()
        let server = try RunningFlowScope(prometheus, ["--config.file=\(dir)/prometheus-test.yml", "--storage.tsdb.path=\(work)/data",
                                                       "--web.listen-address=127.0.0.1:\(webPort)", "--log.level=warn"], in: work)
        defer { kill(server.pid, SIGKILL) }
        var up = ""
        let scraped = await poll(30) {
            let reply = try? TestConnection(port: webPort, tls: false, timeout: 2).request("GET", "/api/v1/query?query=up")
            up = reply?.text ?? up
            return up.contains("\"job\":\"flowscope\"") && up.contains("\"1\"]")
        }
        #expect(scraped, "Prometheus did not scrape flowscope: \(up) \(server.stderr)")
        kill(serve.pid, SIGINT)
        #expect(await serve.exit(within: 15)?.status == 0)
    }
}
