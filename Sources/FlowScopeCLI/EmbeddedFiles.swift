import Foundation

/// The files compiled into flowscope at build time (BuildTools/EmbedAssets, the build-tool plugin): the
/// dashboard (web/), the default config (config/flowscope.json5), the demo backend (config/demo/),
/// the example scenarios (config/scenarios/) and the Grafana dashboard (config/grafana/). An
/// installed binary needs no other file.
enum EmbeddedFiles {
    /// Every embedded file by its path in the repository, decoded on first use.
    static let all: [String: [UInt8]] = {
        var files: [String: [UInt8]] = [:]
        for entry in embeddedAssetTable {
            let text = entry.base64.withUTF8Buffer { String(decoding: $0, as: UTF8.self) }
            // The generator wrote this base64 from the file's bytes: decoding cannot fail.
            files[entry.name] = Data(base64Encoded: text).map { [UInt8]($0) } ?? []
        }
        return files
    }()

    /// The dashboard's files, named relative to web/ (`index.html`, `js/...`).
    static var dashboard: [String: [UInt8]] {
        var out: [String: [UInt8]] = [:]
        for (name, bytes) in all where name.hasPrefix("web/") { out[String(name.dropFirst(4))] = bytes }
        return out
    }

    /// The default config, byte for byte config/flowscope.json5.
    static var defaultConfig: String { text("config/flowscope.json5") }

    /// The demo backend scenario (config/demo/backend.json5), which `serve` plays as demo traffic.
    static var demoScenario: String { text(demoScenarioName) }

    /// The repository path of the embedded demo scenario, as error messages name it.
    static let demoScenarioName = "config/demo/backend.json5"

    /// The example scenarios, by file name (`01-stage-a-timeout-default-audience.json5`, ...).
    static var scenarios: [String: [UInt8]] {
        var out: [String: [UInt8]] = [:]
        for (name, bytes) in all where name.hasPrefix("config/scenarios/") { out[String(name.dropFirst("config/scenarios/".count))] = bytes }
        return out
    }

    /// The Grafana dashboard (config/grafana/flowscope-dashboard.json).
    static var grafanaDashboard: [UInt8] { all["config/grafana/flowscope-dashboard.json"] ?? [] }

    private static func text(_ name: String) -> String { String(decoding: all[name] ?? [], as: UTF8.self) }
}
