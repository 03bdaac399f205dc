import FlowFetch
import FlowJSON
import FlowScopeServer
import FlowScopeStubBackend
import FlowScopeTools
import FlowSim
import Foundation
#if canImport(Glibc)
import Glibc
#endif

let stubBackendCommand = Command(spec: CommandSpec(
    name: "stub-backend", summary: "Serves the backend REST protocol over HTTP(S), applying a scenario's network rules in real time.",
    usage: "stub-backend [--port N] [--tls] [--scenario F]",
    options: [.init("port", value: "N", "the port on 127.0.0.1 (default 8080; 0 picks a free one)"),
              .init("tls", "serve HTTPS with the certificate in .flowscope/tls (created if missing, as `flowscope cert` does)"),
              .init("scenario", value: "F", "serve this scenario's backend and apply its network rules (default: one placement, main_paywall)")],
    details: """
    Routes: GET /v1/placements/{id}/audience (X-Profile-Id), /v1/placements/{id}/audience/default,
    /v1/layouts/{id}?version=N, /v1/profiles/{id}, /assets/... (layout images).
    Network rules apply in real time: latency waits without blocking a thread, "hang" never answers,
    "reset" closes the socket, "http:NNN" answers that status, "malformed" answers 200 with a bad body,
    "drip" sends a 200 body one byte every 0.25 s.
    Runs until interrupted (Ctrl-C). Exit status: 2 for a bad flag or scenario file.
    """
)) { args, io in
    var port = 8080
    if let p = args.value("port") {
        guard let v = Int(p), (0...65_535).contains(v) else {
            io.err("flowscope stub-backend: --port expects a port number 0-65535, got \(p)\n")
            return ExitStatus.usage
        }
        port = v
    }
    let scenario: Scenario
    if let path = args.value("scenario") {
        guard let data = FileManager.default.contents(atPath: path) else {
            io.err("flowscope stub-backend: --scenario \(FlowScopeConfig.absolutePath(path)): \(ServeChecks.whyUnreadable(path))\n")
            return ExitStatus.usage
        }
        do throws(JSONInputError) {
            scenario = try Scenario.decode(String(decoding: data, as: UTF8.self), file: path)
        } catch {
            io.err("flowscope stub-backend: \(error.description)\n")
            return ExitStatus.usage
        }
    } else {
        scenario = defaultStubScenario
    }
    var tls: (certPEM: String, keyPEM: String)?
    if args.flag("tls") {
        do throws(ServerFileError) {
            let material = try TLSMaterial.loadOrCreate()
            tls = (material.certPEM, material.keyPEM)
            io.err("certificate \(material.certPath) (SHA-256 \(material.fingerprint))\n")
        } catch {
            io.err("flowscope stub-backend: --tls: \(error.description)\n")
            return ExitStatus.usage
        }
    }
    StopSignals.install(label: "flowscope stub-backend")  // a Ctrl-C during start-up stops it once started
    let server: StubBackendServer
    do throws(StubBackendError) {
        server = try StubBackendServer(scenario: scenario, port: port, tls: tls)
    } catch {
        io.err("flowscope stub-backend: \(error.message)\n")
        return ExitStatus.usage
    }
    io.out("stub backend for \"\(scenario.name)\" on \(server.baseURL) (placements: \(scenario.backend.keys.sorted().joined(separator: ", ")))\n")
    await StopSignals.first()
    await StopSignals.stop(label: "flowscope stub-backend", timeout: 10, what: "closing connections") { server.stop() }
    return ExitStatus.success
}

/// The backend served without `--scenario`: one placement with a 50/50 default audience, no faults.
let defaultStubScenario = Scenario(
    name: "stub backend", profile: ScenarioProfile(id: "stub"),
    backend: ["main_paywall": PlacementBackend(audiences: [
        AudienceDefinition(name: defaultAudienceName, versionId: "av-all",
                           variations: [Variation(id: "all-A", weight: 50), Variation(id: "all-B", weight: 50)]),
    ])],
    network: NetworkRules(latency: 0.05), steps: [])
