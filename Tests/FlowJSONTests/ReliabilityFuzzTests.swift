import TestSupport
import FlowJSON
import Foundation
import Testing

/// The committed fuzz seed corpus (fuzz/corpus/<target>/*), every target's files.
func fuzzCorpus(_ file: String = #filePath) -> [(name: String, bytes: [UInt8])] {
    let root = URL(fileURLWithPath: file).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("fuzz/corpus")
    let fm = FileManager.default
    var out: [(String, [UInt8])] = []
    for target in ((try? fm.contentsOfDirectory(atPath: root.path)) ?? []).sorted() {
        let dir = root.appendingPathComponent(target)
        for name in ((try? fm.contentsOfDirectory(atPath: dir.path)) ?? []).sorted() {
            if let data = fm.contents(atPath: dir.appendingPathComponent(name).path) { out.append(("\(target)/\(name)", Array(data))) }
        }
    }
    return out
}

/// Seeded structure-aware byte mutations, the same kinds libFuzzer applies: flips, inserts of JSON
/// tokens, deletions, duplications, truncations. Deterministic for a seed.
struct ReliabilityMutator {
    var rng: SplitMix64
    static let tokens: [[UInt8]] = ["{", "}", "[", "]", "\"", "'", ":", ",", "\\", "\\u", "\\ud800", "\\x4", "1e400", "-1e400",
                                    "NaN", "Infinity", "-Infinity", "0x", "null", "true", "//", "/*", "*/", "\n", "\u{2028}",
                                    "\u{FEFF}", "9007199254740993", "-0", ".e1", "__proto__", "$"].map { Array($0.utf8) }

    mutating func mutate(_ input: [UInt8]) -> [UInt8] {
        var bytes = input
        for _ in 0..<Int.random(in: 1...4, using: &rng) {
            let at = bytes.isEmpty ? 0 : Int.random(in: 0...bytes.count, using: &rng)
            switch Int.random(in: 0..<7, using: &rng) {
            case 0 where at < bytes.count: bytes[at] ^= UInt8(1) << UInt8.random(in: 0...7, using: &rng)
            case 1: bytes.insert(UInt8.random(in: 0...255, using: &rng), at: at)
            case 2: bytes.insert(contentsOf: Self.tokens.randomElement(using: &rng)!, at: at)
            case 3 where at < bytes.count:
                bytes.removeSubrange(at..<min(bytes.count, at + Int.random(in: 1...16, using: &rng)))
            case 4 where at < bytes.count:
                let end = min(bytes.count, at + Int.random(in: 1...64, using: &rng))
                bytes.insert(contentsOf: bytes[at..<end], at: Int.random(in: 0...bytes.count, using: &rng))
            case 5: bytes = Array(bytes.prefix(at))
            default: bytes.insert(UInt8(ascii: "0") + UInt8.random(in: 0...9, using: &rng), at: at)
            }
        }
        return bytes
    }
}

/// A syntax error must say where: a path from the root, a line and column, and what was wrong.
func expectLocated(_ error: JSONInputError, _ input: String, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(error.path.hasPrefix("$"), "path \(error.path) for \(input)", sourceLocation: sourceLocation)
    #expect(error.line != nil && error.column != nil, "no line/column for \(input): \(error)", sourceLocation: sourceLocation)
    #expect(!error.message.isEmpty, sourceLocation: sourceLocation)
}

@Suite("Reliability: the JSON5 reader under hostile input", .heavy)
struct ReliabilityFuzzTests {
    @Test("the reader survives the committed fuzz corpus and thousands of seeded mutations, errors located, values round-tripping")
    func corpusAndMutations() throws {
        let corpus = fuzzCorpus()
        try #require(corpus.count >= 30, "fuzz/corpus not found")
        var mutator = ReliabilityMutator(rng: SplitMix64(seed: 0x5EED_F00D))
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(3)
        var runs = 0, accepted = 0, failures: [String] = []
        func check(_ bytes: [UInt8], _ label: String) {
            runs += 1
            do {
                let value = try JSON5.parse(bytes: bytes)
                accepted += 1
                let again = try? JSON5.parse(value.jsonText)
                if again != value { failures.append("\(label): round trip changed \(value.jsonText.prefix(80))") }
            } catch {
                if !error.path.hasPrefix("$") || error.line == nil || error.column == nil || error.message.isEmpty {
                    failures.append("\(label): unlocated error \(error)")
                }
            }
        }
        for (name, bytes) in corpus { check(bytes, name) }
        var round = 0
        while runs < 20_000 && clock.now < deadline {
            let (name, seed) = corpus[round % corpus.count]
            check(mutator.mutate(seed), "\(name) mutation \(round)")
            round += 1
        }
        #expect(failures.isEmpty, "\(failures.prefix(5))")
        #expect(runs >= 2_000, "only \(runs) inputs in the time budget")
        #expect(accepted > corpus.count / 3, "the corpus should hold valid documents too")
    }

    @Test("100,000 levels of nesting are refused at level 257 with a path, quickly and without a stack overflow", arguments: ["[", "{\"a\":", "[{\"k\":"])
    func deepNesting(open: String) throws {
        let text = String(repeating: open, count: 100_000)
        let started = ContinuousClock.now
        let error = #expect(throws: JSONInputError.self) { try JSON5.parse(text) }
        #expect(ContinuousClock.now - started < .seconds(2))
        #expect(error?.message == "nesting deeper than \(JSON5.maxDepth) levels")
        #expect(error?.path.hasPrefix("$") == true)
        #expect(error?.line == 1)
    }

    @Test("NaN, Infinity and numbers beyond a Double are refused with the path of the value",
          arguments: [("{\"a\":[1,NaN]}", "$.a[1]"), ("{\"a\":Infinity}", "$.a"), ("[-Infinity]", "$[0]"),
                      ("{\"big\":1e400}", "$.big"), ("{\"n\":{\"m\":-1e400}}", "$.n.m"), ("[0x" + String(repeating: "F", count: 300) + "]", "$[0]")])
    func nonFinite(text: String, path: String) {
        let error = #expect(throws: JSONInputError.self) { try JSON5.parse(text) }
        #expect(error?.path == path, "\(String(describing: error))")
        if let error { expectLocated(error, text) }
    }

    @Test("a 5 MB string reads in bounded time; the same string unterminated is an error at its start")
    func hugeString() throws {
        let big = String(repeating: "x", count: 5 << 20)
        let started = ContinuousClock.now
        let value = try JSON5.parse("{\"s\":\"" + big + "\"}")
        #expect(value["s"]?.stringValue?.utf8.count == 5 << 20)
        let escaped = try JSON5.parse("[\"" + String(repeating: "\\u00e9", count: 1 << 20) + "\"]")
        #expect(escaped.arrayValue?.first?.stringValue?.unicodeScalars.count == 1 << 20)
        let error = #expect(throws: JSONInputError.self) { try JSON5.parse("{\"s\":\"" + big) }
        #expect(error?.path == "$.s")
        #expect(ContinuousClock.now - started < .seconds(10))
    }

    @Test("empty, blank and comment-only documents are errors at $")
    func empty() {
        for text in ["", "   \n\t", "// nothing\n", "/* open comment", "\u{FEFF}"] {
            let error = #expect(throws: JSONInputError.self) { try JSON5.parse(text) }
            #expect(error?.path == "$", "\(text.debugDescription)")
            if let error { expectLocated(error, text) }
        }
    }

    @Test("seeded binary garbage never crashes the reader and every error is located")
    func binaryGarbage() {
        var rng = SplitMix64(seed: 42)
        for _ in 0..<2_000 {
            let bytes = (0..<Int.random(in: 1...512, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            do {
                _ = try JSON5.parse(bytes: bytes)
            } catch {
                expectLocated(error, "\(bytes.prefix(16))")
            }
        }
    }

    @Test("invalid UTF-8 in keys, strings and between tokens is an error naming where it is")
    func invalidUTF8() {
        let cases: [([UInt8], String)] = [
            (Array("{\"a\":\"".utf8) + [0xC3, 0x28] + Array("\"}".utf8), "$.a"),
            (Array("{\"".utf8) + [0xFF] + Array("\":1}".utf8), "$"),
            (Array("[1,".utf8) + [0xED, 0xA0, 0x80] + Array("]".utf8), "$[1]"),
            (Array("[\"".utf8) + [0xF4, 0x90, 0x80, 0x80] + Array("\"]".utf8), "$[0]"),
        ]
        for (bytes, path) in cases {
            let error = #expect(throws: JSONInputError.self) { try JSON5.parse(bytes: bytes) }
            #expect(error?.path == path, "\(String(describing: error))")
        }
    }

    @Test("wide documents (100,000 members, 100,000 elements) read in bounded time")
    func wide() throws {
        let started = ContinuousClock.now
        let members = (0..<100_000).map { "\"k\($0)\":\($0)" }.joined(separator: ",")
        #expect(try JSON5.parse("{" + members + "}").objectValue?.count == 100_000)
        let elements = String(repeating: "[],", count: 100_000)
        #expect(try JSON5.parse("[" + elements + "]").arrayValue?.count == 100_000)
        let duplicate = #expect(throws: JSONInputError.self) { try JSON5.parse("{" + members + ",\"k5\":0}") }
        #expect(duplicate?.path == "$.k5")
        #expect(ContinuousClock.now - started < .seconds(10))
    }
}
