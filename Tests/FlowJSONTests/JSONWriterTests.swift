import TestSupport
import FlowJSON
import Testing

@Suite("JSON writer")
struct JSONWriterTests {
    static let tricky: [String] = [
        "", "plain", "main_paywall", "quote \" and backslash \\", "line\nbreak\r\ttab", "\u{08}\u{0C}\u{01}\u{1F}",
        "caf\u{E9} \u{1F600}", "dash \u{2014} and separators \u{2028}\u{2029}", "\u{E2}\u{80}", "x\u{2028}", "\u{7F}",
        String(repeating: "long plain text ", count: 20),
    ]

    @Test("the byte writer writes exactly the text the string writer writes")
    func bytesMatchString() {
        var rng = SplitMix64(seed: 42)
        var values: [JSONValue] = Self.tricky.map(JSONValue.string)
        values += [0, -1, 1.5, 1e15, 1e16, -0.25, .number(.nan), .number(.infinity), 123_456_789_012, true, false, nil]
        for _ in 0..<300 { values.append(Self.random(&rng, depth: 3)) }
        for value in values {
            var text = ""
            JSONWriter.write(value, to: &text)
            var bytes: [UInt8] = []
            JSONWriter.write(value, to: &bytes)
            #expect(String(decoding: bytes, as: UTF8.self) == text)
        }
    }

    @Test("strings are escaped as JSON requires, plain strings written as they are")
    func escaping() {
        #expect(JSONValue.string("a\"b\\c\nd\u{01}\u{2028}").jsonText == #""a\"b\\c\nd\u0001\u2028""#)
        #expect(JSONValue.string("caf\u{E9}").jsonText == "\"caf\u{E9}\"")
        #expect(JSONValue.object(["b": 1, "a": "x"]).jsonText == #"{"a":"x","b":1}"#)
    }

    @Test("whole numbers up to 2^53 (every integer a Double holds exactly) are written as integers, larger ones as doubles")
    func wholeNumbers() {
        #expect(JSONValue.number(1e15).jsonText == "1000000000000000")
        #expect(JSONValue.number(9_007_199_254_740_991).jsonText == "9007199254740991")
        #expect(JSONValue.number(-9_007_199_254_740_992).jsonText == "-9007199254740992")
        #expect(JSONValue.number(1e16).jsonText == "1e+16")
        #expect(JSONValue.number(2.5).jsonText == "2.5")
    }

    static func random(_ rng: inout SplitMix64, depth: Int) -> JSONValue {
        switch rng.next() % (depth > 0 ? 6 : 4) {
        case 0: return .number(Double(Int64(bitPattern: rng.next()) % 1_000_000) / Double(1 + rng.next() % 4))
        case 1: return .bool(rng.next() % 2 == 0)
        case 2: return .null
        case 3:
            let alphabet = Array("ab\"\\\n\u{01}\u{E9}\u{2028}\u{2014}z ")
            return .string(String((0..<(rng.next() % 8)).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] }))
        case 4: return .array((0..<(rng.next() % 4)).map { _ in random(&rng, depth: depth - 1) })
        default:
            var o: [String: JSONValue] = [:]
            for i in 0..<(rng.next() % 4) { o["k\(i)\(rng.next() % 3 == 0 ? "\"" : "")"] = random(&rng, depth: depth - 1) }
            return .object(o)
        }
    }
}

