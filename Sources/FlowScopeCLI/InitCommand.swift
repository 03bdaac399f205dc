import FlowFetch
import FlowJSON
import Foundation

/// `flowscope init [DIR]`: a folder to start from, whose files work where they are written.
let initCommand = Command(spec: CommandSpec(
    name: "init", summary: "Writes a working config, the example scenarios, a prometheus.yml and the Grafana dashboard into a folder.",
    usage: "init [DIR] [--force]", options: [.init("force", "replace files that already exist")], positionals: 0...1,
    details: """
    DIR (default: the working directory) is created if missing. It receives:
      flowscope.json5                  the default config, with server.stateDir ".flowscope": the state
                                       (certificate, token, stores) goes to DIR/.flowscope wherever
                                       serve starts
      prometheus.yml                   scrapes https://localhost:8443/metrics, trusting the certificate
                                       serve creates in DIR/.flowscope/tls
      grafana/flowscope-dashboard.json the Grafana dashboard (import it; its data source is Prometheus)
      scenarios/*.json5                the example scenarios, each a test `flowscope run` plays
    Nothing is replaced without --force: a file that exists is exit 2, naming it, and nothing is written.
    Exit status: 0, or 2 for an existing file, an unwritable DIR or a bad flag.
    """
)) { args, io in
    let directory = args.positionals.first ?? "."
    let files = InitFiles.all()
    if !args.flag("force") {
        let existing = files.map(\.path).filter { FileManager.default.fileExists(atPath: directory + "/" + $0) }
        if let first = existing.first {
            io.err("flowscope init: \(directory)/\(first) exists\(existing.count > 1 ? " (and \(existing.count - 1) more of the files init writes)" : ""); nothing was written (--force replaces them)\n")
            return ExitStatus.usage
        }
    }
    do throws(FileStoreError) {
        for file in files {
            try AtomicFile.makeDirectory(FilePaths.directory(of: directory + "/" + file.path))
            try AtomicFile.write(file.bytes, to: directory + "/" + file.path)
        }
    } catch {
        io.err("flowscope init: \(error.description)\n")
        return ExitStatus.usage
    }
    let scenarios = files.filter { $0.path.hasPrefix("scenarios/") }.count
    let shown = directory == "." ? "" : directory + "/"
    io.out("""
    wrote \(files.count) files into \(directory == "." ? "the working directory" : directory):
      \(shown)flowscope.json5, \(shown)prometheus.yml, \(shown)grafana/flowscope-dashboard.json, \(scenarios) scenarios in \(shown)scenarios/
    next:
      flowscope serve --config \(shown)flowscope.json5            # state in \(shown).flowscope/
      prometheus --config.file=\(shown)prometheus.yml --storage.tsdb.path=\(shown).flowscope/prometheus
      flowscope run \(shown)scenarios/*.json5

    """)
    return ExitStatus.success
}

/// The files `init` writes, relative to its directory.
enum InitFiles {
    static func all() -> [(path: String, bytes: [UInt8])] {
        var files: [(path: String, bytes: [UInt8])] = [
            ("flowscope.json5", Array(config.utf8)),
            ("prometheus.yml", Array(prometheus.utf8)),
            ("grafana/flowscope-dashboard.json", EmbeddedFiles.grafanaDashboard),
        ]
        files += EmbeddedFiles.scenarios.sorted { $0.key < $1.key }.map { ("scenarios/" + $0.key, $0.value) }
        return files
    }

    /// The built-in config with the state directory named, so that it resolves against the file's
    /// folder rather than the working directory.
    static var config: String {
        let defaults = EmbeddedFiles.defaultConfig
        let marker = "  server: {\n"
        guard let range = defaults.range(of: marker) else { return defaults }
        return defaults.replacingCharacters(in: range, with: marker
            + "    stateDir: \".flowscope\", // certificate, token and stores, next to this file (flowscope init)\n")
    }

    /// A scrape config for the server this folder's config starts; its paths resolve against this file's folder.
    static let prometheus = """
    # Prometheus scrape config for `flowscope serve --config flowscope.json5` in this folder
    # (https://localhost:8443/metrics). Prometheus resolves relative paths against this file's folder,
    # so .flowscope/ below is the state directory that config names:
    #   prometheus --config.file=prometheus.yml --storage.tsdb.path=.flowscope/prometheus
    # The certificate is the self-signed one serve creates on first start; trusting it as the CA lets
    # Prometheus verify the server instead of skipping verification.
    global:
      scrape_interval: 15s
      scrape_timeout: 10s

    scrape_configs:
      - job_name: flowscope
        scheme: https
        metrics_path: /metrics
        tls_config:
          ca_file: .flowscope/tls/cert.pem
          server_name: localhost
          min_version: TLS12
        # Reads are open while flowscope is bound to loopback. Bound elsewhere, every endpoint needs
        # the token: uncomment these lines.
        # authorization:
        #   type: Bearer
        #   credentials_file: .flowscope/token
        static_configs:
          - targets: ["localhost:8443"]

    """
}
