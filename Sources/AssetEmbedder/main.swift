import Foundation

// Writes a Swift file holding files' bytes: `AssetEmbedder OUTPUT NAME PATH [NAME PATH ...]`.
// Each file becomes a base64 `StaticString` (a string literal type-checks in constant time, where a
// `[UInt8]` literal of a few hundred KB takes minutes), decoded by `EmbeddedFiles` at first use.

let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count % 2 == 1 else {
    FileHandle.standardError.write(Data("usage: AssetEmbedder OUTPUT [NAME PATH]...\n".utf8))
    exit(2)
}
var source = """
// Generated at build time by the EmbedAssets plugin from the repository's files. Do not edit.

/// The embedded files: repository-relative name and base64 contents.
let embeddedAssetTable: [(name: String, base64: StaticString)] = [

"""
for pair in stride(from: 1, to: arguments.count, by: 2) {
    let name = arguments[pair], path = arguments[pair + 1]
    guard let data = FileManager.default.contents(atPath: path) else {
        FileHandle.standardError.write(Data("AssetEmbedder: \(path): not found\n".utf8))
        exit(1)
    }
    let escapedName = name.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
    source += "    (\"\(escapedName)\", \"\(data.base64EncodedString())\"),\n"
}
source += "]\n"
do {
    let output = URL(fileURLWithPath: arguments[0])
    // Rewrite only when the text changed, so an unchanged input does not recompile the target.
    if (try? String(contentsOf: output, encoding: .utf8)) != source {
        try source.write(to: output, atomically: true, encoding: .utf8)
    }
} catch {
    FileHandle.standardError.write(Data("AssetEmbedder: \(arguments[0]): \(error.localizedDescription)\n".utf8))
    exit(1)
}
