import TestSupport
import FlowJSON
import Testing

/// Random documents, and random ways of spelling them in JSON5.
struct DocumentGenerator {
    var rng: SplitMix64

    static let scalars: [Unicode.Scalar] = Array("abcXYZ09 _$-.'\"\\/{}[]:,é€😀𝄞日本".unicodeScalars)
        + ["\n", "\r", "\t", "\u{0}", "\u{1F}", "\u{7F}", "\u{2028}", "\u{2029}", "\u{FEFF}", "\u{A0}", "\u{10FFFF}"]

    mutating func value(depth: Int = 0) -> JSONValue {
        switch Int.random(in: 0..<(depth >= 4 ? 4 : 6), using: &rng) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &rng))
        case 2: return .number(number())
        case 3: return .string(string())
        case 4: return .array((0..<Int.random(in: 0...5, using: &rng)).map { _ in value(depth: depth + 1) })
        default:
            var members: [String: JSONValue] = [:]
            for _ in 0..<Int.random(in: 0...5, using: &rng) { members[key()] = value(depth: depth + 1) }
            return .object(members)
        }
    }

    mutating func number() -> Double {
        switch Int.random(in: 0..<5, using: &rng) {
        case 0: return Double(Int.random(in: -1000...1000, using: &rng))
        case 1: return Double(Int64.random(in: -(1 << 53)...(1 << 53), using: &rng))
        case 2: return Double(Int.random(in: -100_000...100_000, using: &rng)) / 1000
        case 3: return Double.random(in: -1e-300...1e-300, using: &rng)
        default:
            while true {
                let n = Double(bitPattern: rng.next())
                if n.isFinite { return n }
            }
        }
    }

    mutating func string() -> String {
        var s = String.UnicodeScalarView()
        for _ in 0..<Int.random(in: 0...12, using: &rng) { s.append(Self.scalars.randomElement(using: &rng)!) }
        return String(s)
    }

    mutating func key() -> String {
        if Bool.random(using: &rng) { return string() }
        let letters = Array("abcdefghijklmnopqrstuvwxyzABC_$")
        let rest = Array("abcxyz_$0189")
        var k = String(letters.randomElement(using: &rng)!)
        for _ in 0..<Int.random(in: 0...6, using: &rng) { k.append(rest.randomElement(using: &rng)!) }
        return k
    }

    // MARK: JSON5 spelling

    mutating func json5(_ value: JSONValue) -> String {
        var out = ""
        writeJSON5(value, to: &out)
        return out
    }

    mutating func space(_ out: inout String) {
        switch Int.random(in: 0..<12, using: &rng) {
        case 0: out += " "
        case 1: out += "\n  "
        case 2: out += "/* c */"
        case 3: out += " // c\n"
        case 4: out += "\u{A0}\t"
        case 5: out += "\r\n"
        default: break
        }
    }

    mutating func writeJSON5(_ value: JSONValue, to out: inout String) {
        switch value {
        case .null, .bool: JSONWriter.write(value, to: &out)
        case .number(let n): writeNumber(n, to: &out)
        case .string(let s): writeString(s, to: &out)
        case .array(let elements):
            out += "["
            for (i, element) in elements.enumerated() {
                if i > 0 { out += "," }
                space(&out)
                writeJSON5(element, to: &out)
                space(&out)
            }
            if !elements.isEmpty && Bool.random(using: &rng) { out += "," }
            out += "]"
        case .object(let members):
            out += "{"
            for (i, (key, member)) in members.sorted(by: { $0.key < $1.key }).enumerated() {
                if i > 0 { out += "," }
                space(&out)
                let isIdentifier = key.first.map { $0.isLetter || $0 == "_" || $0 == "$" } == true
                    && key.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "$") }
                if isIdentifier && Bool.random(using: &rng) { out += key } else { writeString(key, to: &out) }
                space(&out)
                out += ":"
                space(&out)
                writeJSON5(member, to: &out)
            }
            if !members.isEmpty && Bool.random(using: &rng) { out += "," }
            space(&out)
            out += "}"
        }
    }

    mutating func writeNumber(_ n: Double, to out: inout String) {
        if n.rounded() == n, abs(n) < 9e15, Int.random(in: 0..<3, using: &rng) == 0 {
            let magnitude = String(Int64(abs(n)), radix: 16, uppercase: Bool.random(using: &rng))
            out += (n < 0 ? "-" : Bool.random(using: &rng) ? "+" : "") + "0x" + magnitude
            return
        }
        var text = "\(n)"
        if text.hasSuffix(".0") && Bool.random(using: &rng) { text.removeLast() }  // "5."
        if Bool.random(using: &rng) {  // ".5" for "0.5", but "0." stays: "." alone is no number
            var shorter = text
            if shorter.hasPrefix("0.") { shorter.removeFirst() } else if shorter.hasPrefix("-0.") { shorter.remove(at: shorter.index(after: shorter.startIndex)) }
            if shorter.contains(where: \.isNumber) { text = shorter }
        }
        if !text.hasPrefix("-") && Bool.random(using: &rng) { text = "+" + text }
        out += text
    }

    mutating func writeString(_ s: String, to out: inout String) {
        let quote: Unicode.Scalar = Bool.random(using: &rng) ? "'" : "\""
        out.unicodeScalars.append(quote)
        for scalar in s.unicodeScalars {
            switch scalar {
            case quote, "\\": out += "\\" + String(scalar)
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case _ where scalar.value < 0x20 || Int.random(in: 0..<8, using: &rng) == 0:
                if scalar.value < 0x100 && Bool.random(using: &rng) {
                    out += "\\x" + hex(scalar.value, width: 2)
                } else if scalar.value >= 0x10000 {
                    let v = scalar.value - 0x10000
                    out += "\\u" + hex(0xD800 + (v >> 10), width: 4) + "\\u" + hex(0xDC00 + (v & 0x3FF), width: 4)
                } else {
                    out += "\\u" + hex(scalar.value, width: 4)
                }
            default:
                out.unicodeScalars.append(scalar)
            }
            if Int.random(in: 0..<20, using: &rng) == 0 { out += "\\\n" }  // line continuation: adds nothing
        }
        out.unicodeScalars.append(quote)
    }

    func hex(_ v: UInt32, width: Int) -> String {
        let digits = String(v, radix: 16)
        return String(repeating: "0", count: width - digits.count) + digits
    }

    // MARK: Mutations

    mutating func mutate(_ bytes: [UInt8]) -> [UInt8] {
        var bytes = bytes
        let interesting: [UInt8] = Array("[]{}\"'\\,:/*0ex.-+ \nIN".utf8) + [0x00, 0x80, 0xBF, 0xC3, 0xE2, 0xED, 0xF0, 0xFF]
        for _ in 0..<Int.random(in: 1...3, using: &rng) {
            let index = bytes.isEmpty ? 0 : Int.random(in: 0..<bytes.count, using: &rng)
            let byte = Bool.random(using: &rng)
                ? interesting.randomElement(using: &rng)!
                : UInt8.random(in: 0...255, using: &rng)
            switch Int.random(in: 0..<5, using: &rng) {
            case 0 where !bytes.isEmpty: bytes[index] = byte
            case 1 where !bytes.isEmpty: bytes.remove(at: index)
            case 2: bytes.insert(byte, at: index)
            case 3: bytes.removeSubrange(index...)
            default:
                let end = min(bytes.count, index + Int.random(in: 1...16, using: &rng))
                bytes.insert(contentsOf: bytes[index..<end], at: index)
            }
        }
        return bytes
    }
}

@Suite("JSON5 reader: properties over random documents", .heavy)
struct JSON5PropertyTests {
    @Test("random documents written by JSONWriter parse back to the same value")
    func writerRoundTrip() throws {
        var generator = DocumentGenerator(rng: SplitMix64(seed: 1))
        for _ in 0..<3000 {
            let value = generator.value()
            let text = value.jsonText
            let parsed = try JSON5.parse(text)
            #expect(parsed == value, "\(text)")
            #expect(parsed.jsonText == text)
        }
    }

    @Test("random documents spelled with JSON5 features parse back to the same value")
    func json5RoundTrip() throws {
        var generator = DocumentGenerator(rng: SplitMix64(seed: 2))
        for _ in 0..<3000 {
            let value = generator.value()
            let text = generator.json5(value)
            #expect(try JSON5.parse(text) == value, "\(text)")
            #expect(try JSON5.parse(bytes: Array(text.utf8)) == value, "\(text)")
        }
    }

    @Test("random byte mutations of valid documents give a value or a well-formed error, never a crash")
    func mutations() throws {
        var generator = DocumentGenerator(rng: SplitMix64(seed: 3))
        var failures = 0
        for i in 0..<4000 {
            let value = generator.value()
            let text = i % 2 == 0 ? value.jsonText : generator.json5(value)
            let bytes = generator.mutate(Array(text.utf8))
            do {
                let parsed = try JSON5.parse(bytes: bytes)
                // Whatever was accepted must itself be a valid document.
                #expect(try JSON5.parse(parsed.jsonText) == parsed)
            } catch {
                failures += 1
                let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).count
                    + bytes.filter { $0 == UInt8(ascii: "\r") }.count
                #expect(error.path.hasPrefix("$"), "\(error)")
                #expect((1...lines).contains(error.line ?? 0), "\(error)")
                #expect((error.column ?? 0) >= 1 && (error.column ?? 0) <= bytes.count + 1, "\(error)")
                #expect(!error.message.isEmpty)
            }
        }
        // Most mutations break the document; if none did, the mutations are not reaching the reader.
        #expect(failures > 2000)
    }
}
