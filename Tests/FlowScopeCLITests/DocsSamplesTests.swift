import Foundation
import Testing

/// The code samples of the README, plugins/README.md and docs/getting-started.md are cut from compiled files under examples/
/// (which `make test` builds and tests as outside packages), so they cannot drift.
@Suite("Docs samples")
struct DocsSamplesTests {
    static func swiftBlocks(in file: String) throws -> [String] {
        let text = try String(contentsOfFile: packageRoot + "/" + file, encoding: .utf8)
        var blocks: [String] = []
        var current: [Substring]?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line == "```swift" { current = [] }
            else if current != nil, line == "```" { blocks.append(current!.joined(separator: "\n")); current = nil }
            else if current != nil { current!.append(line) }
        }
        return blocks
    }

    static var exampleSources: [String] {
        let root = packageRoot + "/examples"
        let files = FileManager.default.enumerator(atPath: root)?.compactMap { $0 as? String } ?? []
        return files.filter { $0.hasSuffix(".swift") && !$0.contains(".build/") }
            .compactMap { try? String(contentsOfFile: root + "/" + $0, encoding: .utf8) }
    }

    @Test("every swift block of the README, plugins/README.md and docs/getting-started.md is text of a compiled example",
          arguments: ["README.md", "plugins/README.md", "docs/getting-started.md"])
    func samplesAreExamples(file: String) throws {
        let blocks = try Self.swiftBlocks(in: file)
        #expect(blocks.count >= 2, "\(file) has its samples")
        let sources = Self.exampleSources
        #expect(sources.count >= 6)
        for block in blocks {
            #expect(sources.contains { $0.contains(block) }, "\(file): this sample is in no file under examples/:\n\(block)")
        }
    }
}
