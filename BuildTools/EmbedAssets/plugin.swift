import Foundation
import PackagePlugin

/// Compiles the dashboard (web/), the default config (config/flowscope.json5), the demo backend
/// (config/demo/), the example scenarios (config/scenarios/) and the Grafana dashboard
/// (config/grafana/) into the target it is applied to, as one generated Swift file: the files in the
/// repository stay the source, read at build time, with no build step of their own.
@main
struct EmbedAssets: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) async throws -> [Command] {
        let root = context.package.directoryURL
        var files: [(name: String, url: URL)] = []
        for directory in ["web", "config/demo", "config/scenarios", "config/grafana"] {
            files += Self.files(under: root.appending(path: directory), named: directory)
        }
        files.append(("config/flowscope.json5", root.appending(path: "config/flowscope.json5")))
        files.sort { $0.name < $1.name }
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedAssets.swift")
        return [.buildCommand(
            displayName: "Embedding web/ and config/ into \(target.name)",
            executable: try context.tool(named: "AssetEmbedder").url,
            arguments: [output.path] + files.flatMap { [$0.name, $0.url.path] },
            inputFiles: files.map(\.url),
            outputFiles: [output])]
    }

    /// Every regular file below `directory`, except hidden files and READMEs (they document the
    /// directory and are not served), named `<prefix>/<relative path>`.
    static func files(under directory: URL, named prefix: String) -> [(name: String, url: URL)] {
        guard let walker = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: [.isRegularFileKey],
                                                          options: [.skipsHiddenFiles]) else { return [] }
        var out: [(name: String, url: URL)] = []
        let base = directory.standardizedFileURL.path
        for case let url as URL in walker {
            guard (try? url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true,
                  url.lastPathComponent != "README.md" else { continue }
            let relative = String(url.standardizedFileURL.path.dropFirst(base.count + 1))
            out.append(("\(prefix)/\(relative)", url))
        }
        return out
    }
}
