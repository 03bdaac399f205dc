import TestSupport
import FlowJSON
import Testing

/// The error `JSON5.parse` throws for `text`, or nil when it parses.
func parseFailure(_ text: String) -> JSONInputError? {
    do {
        _ = try JSON5.parse(text)
        return nil
    } catch {
        return error
    }
}

/// The error `JSON5.parse(bytes:)` throws for `bytes`, or nil when they parse.
func parseFailure(bytes: [UInt8]) -> JSONInputError? {
    do {
        _ = try JSON5.parse(bytes: bytes)
        return nil
    } catch {
        return error
    }
}

func expectFailure(
    _ text: String, path: String, line: Int, column: Int, message: String,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    let expected = JSONInputError(path: path, line: line, column: column, message: message)
    #expect(parseFailure(text) == expected, sourceLocation: sourceLocation)
}

@Suite("JSON5 reader: accepted documents")
struct JSON5AcceptanceTests {
    @Test("strict JSON with every kind of value parses to the matching JSONValue")
    func strictJSON() throws {
        let value = try JSON5.parse(#"{"a": [1, -2.5, 3e2, true, false, null], "b": {"c": "d"}, "e": ""}"#)
        #expect(value == ["a": [1, -2.5, 300, true, false, nil], "b": ["c": "d"], "e": ""])
    }

    @Test("top-level scalars are documents too")
    func scalars() throws {
        #expect(try JSON5.parse("42") == 42)
        #expect(try JSON5.parse(" 'x' ") == "x")
        #expect(try JSON5.parse("null") == .null)
        #expect(try JSON5.parse("true") == true)
    }

    @Test("line and block comments are skipped wherever white space may appear")
    func comments() throws {
        let text = """
            // leading comment
            /* block */ { /* before key */ "a" /* before colon */ : /* before value */ 1 // after value
              , b: [ /* empty-ish */ 2 /* x */, 3 ] /* trailing */ }
            // last line without newline
            """
        #expect(try JSON5.parse(text) == ["a": 1, "b": [2, 3]])
        #expect(try JSON5.parse("/**/1/***/") == 1)
    }

    @Test("trailing commas are accepted in arrays and objects")
    func trailingCommas() throws {
        #expect(try JSON5.parse("[1, 2, ]") == [1, 2])
        #expect(try JSON5.parse("{a: 1, b: [3,],}") == ["a": 1, "b": [3]])
    }

    @Test("unquoted keys may be any ECMAScript identifier name")
    func identifierKeys() throws {
        let value = try JSON5.parse(#"{ $id: 1, _x9: 2, café: 3, ünïcødé: 4, \u0061b: 5, null: 6, true: 7, Infinity: 8 }"#)
        #expect(value == ["$id": 1, "_x9": 2, "café": 3, "ünïcødé": 4, "ab": 5, "null": 6, "true": 7, "Infinity": 8])
    }

    @Test("single-quoted strings may hold double quotes and escaped single quotes")
    func singleQuotes() throws {
        #expect(try JSON5.parse(#"'say "hi"'"#) == #"say "hi""#)
        #expect(try JSON5.parse(#"'it\'s'"#) == "it's")
        #expect(try JSON5.parse(#"{'k': "it's"}"#) == ["k": "it's"])
    }

    @Test("hex numbers, signs and bare decimal points are read as JSON5 numbers")
    func json5Numbers() throws {
        #expect(try JSON5.parse("[0xFF, 0Xab, -0x10, +0x1]") == [255, 171, -16, 1])
        #expect(try JSON5.parse("[.5, 5., +1, -.25e1, +.5E+1, 1e-2]") == [0.5, 5, 1, -2.5, 5, 0.01])
    }

    @Test("decimal numbers match the standard library's correctly rounded conversion")
    func numberPrecision() throws {
        let cases = [
            "0.1", "0.3", "2.2250738585072014e-308", "1.7976931348623157e308", "5e-324", "4.9e-324",
            "123456789012345678901234567890", "9007199254740993", "0.000001234567890123456789",
            "1e22", "1e23", "3.141592653589793238462643383279", "1e-400", "100000000000000000000000",
        ]
        for text in cases {
            #expect(try JSON5.parse(text) == .number(Double(text)!), "\(text)")
            #expect(try JSON5.parse("-" + text) == .number(-Double(text)!), "-\(text)")
        }
        guard case .number(let negativeZero) = try JSON5.parse("-0") else { Issue.record("not a number"); return }
        #expect(negativeZero == 0 && negativeZero.sign == .minus)
    }

    @Test("random decimal texts parse to exactly what Double(String) gives")
    func randomNumberTexts() throws {
        var rng = SplitMix64(seed: 7)
        for _ in 0..<5000 {
            var text = String(rng.next() % 10_000_000_000_000_000_000)
            text = String(text.prefix(Int(rng.next() % 20) + 1))
            if rng.next() % 2 == 0 {
                let cut = Int(rng.next() % UInt64(text.count))
                text.insert(".", at: text.index(text.startIndex, offsetBy: cut))
                if text.first == "." { text = "0" + text }
            }
            if text.count > 1 && text.first == "0" && !text.dropFirst().hasPrefix(".") { text.removeFirst() }
            if rng.next() % 2 == 0 { text += "e" + String(Int(rng.next() % 700) - 350) }
            let expected = Double(text)!
            if expected.isFinite {
                #expect(try JSON5.parse(text) == .number(expected), "\(text)")
            } else {
                #expect(parseFailure(text)?.message == "number out of range", "\(text)")
            }
        }
    }

    @Test("every string escape, surrogate pairs and line continuations decode")
    func escapes() throws {
        #expect(try JSON5.parse(#""\"\\\/\b\f\n\r\t\v\0""#) == "\"\\/\u{8}\u{C}\n\r\t\u{B}\u{0}")
        #expect(try JSON5.parse(#""\x41\xe9\u00e9\u20AC""#) == "Aéé€")
        #expect(try JSON5.parse(#""\uD83D\uDE00 \ud834\udd1e""#) == "😀 𝄞")
        #expect(try JSON5.parse("'a\\\nb\\\r\nc\\\rd\\\u{2028}e\\\u{2029}f'") == "abcdef")
        #expect(try JSON5.parse(#"'\a\q\é'"#) == "aqé")
        #expect(try JSON5.parse("\"tab\there \u{2028} ok\"") == "tab\there \u{2028} ok")
        #expect(try JSON5.parse("\"raw é 😀 text\"") == "raw é 😀 text")
    }

    @Test("Unicode white space and a byte order mark are skipped")
    func unicodeSpace() throws {
        #expect(try JSON5.parse("\u{FEFF}\u{A0}[1,\u{2028}\u{2003}2\u{3000}]\u{2029}") == [1, 2])
        #expect(try JSON5.parse(bytes: [0xEF, 0xBB, 0xBF] + Array("{\"a\":1}".utf8)) == ["a": 1])
    }

    @Test("bytes from any collection parse like the same text")
    func byteCollections() throws {
        let text = "{a: [1, 'two'], b: null}"
        let expected = try JSON5.parse(text)
        #expect(try JSON5.parse(bytes: Array(text.utf8)) == expected)
        #expect(try JSON5.parse(bytes: text.utf8) == expected)
        #expect(try JSON5.parse(bytes: ArraySlice(Array(("xx" + text).utf8)).dropFirst(2)) == expected)
    }

    @Test("a 5 MB string parses, with and without escapes")
    func hugeString() throws {
        let plain = String(repeating: "abcdéfgh😀", count: 400_000)
        #expect(plain.utf8.count > 5_000_000)
        #expect(try JSON5.parse("[\"" + plain + "\"]") == [.string(plain)])
        let escaped = String(repeating: "ab\\n\\u00e9", count: 600_000)
        let decoded = String(repeating: "ab\né", count: 600_000)
        #expect(try JSON5.parse("'" + escaped + "'") == .string(decoded))
    }

    @Test("256 levels of nesting are allowed")
    func maximumDepth() throws {
        let arrays = String(repeating: "[", count: 256) + String(repeating: "]", count: 256)
        var expected: JSONValue = []
        for _ in 1..<256 { expected = [expected] }
        #expect(try JSON5.parse(arrays) == expected)
        let objects = String(repeating: "{a:", count: 255) + "{}" + String(repeating: "}", count: 255)
        #expect(try JSON5.parse(objects) != .null)
    }

    @Test("writing a parsed document gives its canonical form")
    func roundTripCanonical() throws {
        let cases: [(String, String)] = [
            ("{ b: 2, a: [1, 2.5, -0.125,], /* c */ c: 'x' }", #"{"a":[1,2.5,-0.125],"b":2,"c":"x"}"#),
            ("[0x10, 1e3, .5, 5., +7, 1e21]", "[16,1000,0.5,5,7,1e+21]"),
            (#"'tab\t nl\n quote" back\\ \u0001 \u2028'"#, #""tab\t nl\n quote\" back\\ \u0001 \u2028""#),
            ("{\"é\": {\"\": []}, \"a b\": {}}", #"{"a b":{},"é":{"":[]}}"#),
            ("[null, true, false]", "[null,true,false]"),
        ]
        for (input, canonical) in cases {
            let value = try JSON5.parse(input)
            #expect(value.jsonText == canonical, "\(input)")
            #expect(try JSON5.parse(value.jsonText) == value, "\(input)")
        }
    }
}

@Suite("JSON5 reader: errors")
struct JSON5ErrorTests {
    @Test("a missing comma between members names the member, line and column")
    func missingComma() {
        expectFailure(#"{"a":1 "b":2}"#, path: "$.a", line: 1, column: 8,
                      message: #"expected ',' or '}' after object member, found '"'"#)
        expectFailure("[1 2]", path: "$[0]", line: 1, column: 4,
                      message: "expected ',' or ']' after array element, found '2'")
        expectFailure(#"{"a" 1}"#, path: "$.a", line: 1, column: 6, message: "expected ':' after object key, found '1'")
        expectFailure("{steps: [{fetchPolicy: 'x',}, {a: 1 b: 2}]}", path: "$.steps[1].a", line: 1, column: 37,
                      message: "expected ',' or '}' after object member, found 'b'")
    }

    @Test("errors deep in a multi-line document carry the full path and position")
    func nestedPosition() {
        let text = """
            {
              // the steps
              "steps": [
                {"x": 1},
                {"fetch policy": tru}
              ]
            }
            """
        expectFailure(text, path: #"$.steps[1]["fetch policy"]"#, line: 5, column: 22,
                      message: "expected a value, found 'tru'")
        expectFailure("{\r\n a: 1,\r\n b: @}", path: "$.b", line: 3, column: 5, message: "expected a value, found '@'")
    }

    @Test("columns count Unicode scalars, not bytes")
    func columnsInScalars() {
        expectFailure("{\"é😀\": x}", path: #"$["é😀"]"#, line: 1, column: 8, message: "expected a value, found 'x'")
    }

    @Test("an unterminated string is reported at its opening quote")
    func unterminatedString() {
        expectFailure(#"{"a": "abc"#, path: "$.a", line: 1, column: 7, message: "unterminated string")
        expectFailure("[\n'abc\n']", path: "$[0]", line: 2, column: 1, message: "unterminated string")
        expectFailure(#"["abc\"#, path: "$[0]", line: 1, column: 2, message: "unterminated string")
        expectFailure(#"{"ab"#, path: "$", line: 1, column: 2, message: "unterminated string")
    }

    @Test("input that stops early says so and what was expected")
    func unexpectedEnd() {
        expectFailure("[1, 2", path: "$[1]", line: 1, column: 6,
                      message: "unexpected end of input (expected ',' or ']' after array element)")
        expectFailure("{", path: "$", line: 1, column: 2, message: "unexpected end of input (expected an object key or '}')")
        expectFailure("{a:", path: "$.a", line: 1, column: 4, message: "unexpected end of input (expected a value)")
        expectFailure("[1,", path: "$[1]", line: 1, column: 4, message: "unexpected end of input (expected a value)")
        expectFailure("-", path: "$", line: 1, column: 2, message: "unexpected end of input (expected a digit)")
    }

    @Test("a duplicate key is an error at the second occurrence")
    func duplicateKey() {
        expectFailure(#"{"x": 1, "x": 2}"#, path: "$.x", line: 1, column: 10, message: #"duplicate key "x""#)
        expectFailure("{o: {x: 1, 'x': 2}}", path: "$.o.x", line: 1, column: 12, message: #"duplicate key "x""#)
    }

    @Test("an empty document is an error, even with comments")
    func emptyDocument() {
        expectFailure("", path: "$", line: 1, column: 1, message: "empty document")
        expectFailure("  // only a comment\n /* and another */ ", path: "$", line: 2, column: 20, message: "empty document")
        #expect(parseFailure(bytes: [])?.message == "empty document")
    }

    @Test("NaN and Infinity are read but rejected as non-finite")
    func nonFinite() {
        expectFailure("{a: NaN}", path: "$.a", line: 1, column: 5, message: "expected a finite number, found 'NaN'")
        expectFailure("[1, -Infinity]", path: "$[1]", line: 1, column: 5,
                      message: "expected a finite number, found '-Infinity'")
        expectFailure("+Infinity", path: "$", line: 1, column: 1, message: "expected a finite number, found '+Infinity'")
        expectFailure("Infinity", path: "$", line: 1, column: 1, message: "expected a finite number, found 'Infinity'")
    }

    @Test("numbers beyond Double's range are rejected")
    func outOfRange() {
        expectFailure("{big: 1e400}", path: "$.big", line: 1, column: 7, message: "number out of range")
        expectFailure("[-1e400]", path: "$[0]", line: 1, column: 2, message: "number out of range")
        expectFailure("0x" + String(repeating: "F", count: 300), path: "$", line: 1, column: 1, message: "number out of range")
        expectFailure("1" + String(repeating: "0", count: 400), path: "$", line: 1, column: 1, message: "number out of range")
    }

    @Test("malformed numbers are rejected")
    func badNumbers() {
        expectFailure("[01]", path: "$[0]", line: 1, column: 2, message: "invalid number: leading zeros are not allowed")
        expectFailure("[1e]", path: "$[0]", line: 1, column: 4, message: "expected a digit in the exponent, found ']'")
        expectFailure("[0x]", path: "$[0]", line: 1, column: 4, message: "expected a hex digit after '0x', found ']'")
        expectFailure("[.]", path: "$[0]", line: 1, column: 3, message: "expected a digit, found ']'")
        expectFailure("[-x]", path: "$[0]", line: 1, column: 3, message: "expected a digit, found 'x'")
        expectFailure("[5s]", path: "$[0]", line: 1, column: 3, message: "expected ',' or ']' after array element, found 's'")
    }

    @Test("bad escapes are rejected with the escape's position")
    func badEscapes() {
        expectFailure(#"["a\1"]"#, path: "$[0]", line: 1, column: 4, message: #"invalid escape '\1'"#)
        expectFailure(#"["\01"]"#, path: "$[0]", line: 1, column: 3, message: "invalid escape: octal escapes are not allowed")
        expectFailure(#"["\x4"]"#, path: "$[0]", line: 1, column: 3, message: #"invalid escape: expected two hex digits after '\x'"#)
        expectFailure(#"["\u12"]"#, path: "$[0]", line: 1, column: 3, message: #"invalid escape: expected four hex digits after '\u'"#)
        expectFailure(#"["\uD800"]"#, path: "$[0]", line: 1, column: 3, message: #"invalid escape: unpaired surrogate \uD800"#)
        expectFailure(#"["\uD800\u0041"]"#, path: "$[0]", line: 1, column: 3, message: #"invalid escape: unpaired surrogate \uD800"#)
        expectFailure(#"["x\uDC00"]"#, path: "$[0]", line: 1, column: 4, message: #"invalid escape: unpaired surrogate \uDC00"#)
        expectFailure(#"{\u0030a: 1}"#, path: "$", line: 1, column: 2, message: "invalid escape in unquoted key")
    }

    @Test("content after the document, bad keys and unterminated comments are rejected")
    func otherSyntax() {
        expectFailure("{} x", path: "$", line: 1, column: 4, message: "expected end of input after the document, found 'x'")
        expectFailure("[1] ]", path: "$", line: 1, column: 5, message: "expected end of input after the document, found ']'")
        expectFailure("{1: 2}", path: "$", line: 1, column: 2, message: "expected an object key or '}', found '1'")
        expectFailure("{a-b: 2}", path: "$.a", line: 1, column: 3, message: "expected ':' after object key, found '-'")
        expectFailure("[1, /* open", path: "$", line: 1, column: 5, message: "unterminated comment")
        expectFailure("[,]", path: "$[0]", line: 1, column: 2, message: "expected a value, found ','")
        expectFailure("[1,,]", path: "$[1]", line: 1, column: 4, message: "expected a value, found ','")
        expectFailure("{a:1,,}", path: "$", line: 1, column: 6, message: "expected an object key or '}', found ','")
        expectFailure("[undefined]", path: "$[0]", line: 1, column: 2, message: "expected a value, found 'undefined'")
        expectFailure("\u{1}", path: "$", line: 1, column: 1, message: "expected a value, found U+0001")
        expectFailure("[1 /", path: "$[0]", line: 1, column: 4, message: "expected ',' or ']' after array element, found '/'")
    }

    @Test("invalid UTF-8 is reported where it occurs")
    func invalidUTF8() {
        func failure(_ bytes: [UInt8]) -> JSONInputError? { parseFailure(bytes: bytes) }
        #expect(failure([0x22, 0xFF, 0x22]) == JSONInputError(path: "$", line: 1, column: 2, message: "invalid UTF-8 (byte 0xFF)"))
        // Overlong encoding of '/', an encoded surrogate, a sequence cut short, a stray continuation byte.
        for bad: [UInt8] in [[0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xE2, 0x82], [0x80], [0xF5, 0x80, 0x80, 0x80]] {
            let inString = failure(Array("[\"ok".utf8) + bad + Array("\"]".utf8))
            #expect(inString?.message.hasPrefix("invalid UTF-8") == true, "\(bad)")
            #expect(inString?.column == 5, "\(bad)")
            #expect(inString?.path == "$[0]", "\(bad)")
            #expect(failure(Array("{k: 1, ".utf8) + bad + Array(": 2}".utf8))?.message.hasPrefix("invalid UTF-8") == true)
            #expect(failure(Array("[1] // ".utf8) + bad)?.message.hasPrefix("invalid UTF-8") == true)
            #expect(failure(Array("/* ".utf8) + bad + Array(" */ 1".utf8))?.message.hasPrefix("invalid UTF-8") == true)
            #expect(failure(Array("[\"\\".utf8) + bad + Array("\"]".utf8))?.message.hasPrefix("invalid UTF-8") == true)
            #expect(failure(bad)?.message.hasPrefix("invalid UTF-8") == true)
        }
    }

    @Test("binary garbage is rejected with an error, never a crash")
    func binaryGarbage() {
        var rng = SplitMix64(seed: 42)
        for length in [1, 2, 7, 64, 1000, 100_000] {
            let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            let error = parseFailure(bytes: bytes)
            // Random bytes could in principle form a document; these seeds do not.
            #expect(error != nil, "length \(length)")
            #expect((error?.line ?? 0) >= 1)
        }
        #expect(parseFailure(bytes: [0x00])?.message == "expected a value, found U+0000")
        #expect(parseFailure(bytes: [0xFF, 0xFE, 0x00, 0x7B])?.message == "invalid UTF-8 (byte 0xFF)")
    }

    @Test("100,000 nested brackets or braces fail cleanly at the depth limit")
    func hostileNesting() {
        let arrays = parseFailure(String(repeating: "[", count: 100_000))
        #expect(arrays == JSONInputError(path: "$" + String(repeating: "[0]", count: 256), line: 1, column: 257,
                                         message: "nesting deeper than 256 levels"))
        let objects = parseFailure(String(repeating: "{\"a\":", count: 100_000))
        #expect(objects == JSONInputError(path: "$" + String(repeating: ".a", count: 256), line: 1, column: 256 * 5 + 1,
                                          message: "nesting deeper than 256 levels"))
        #expect(parseFailure(String(repeating: "{", count: 100_000))?.message == "expected an object key or '}', found '{'")
        let mixed = parseFailure(String(repeating: "[{a:", count: 50_000))
        #expect(mixed?.message == "nesting deeper than 256 levels")
        #expect(parseFailure(String(repeating: "[", count: 257) + String(repeating: "]", count: 257))?.message
            == "nesting deeper than 256 levels")
    }

    @Test("the error description shows file, path, position and message on one line")
    func description() {
        let error = parseFailure("{a: 1,\n b: 'x\n}")?.inFile("config/flowscope.json5")
        #expect(error?.description == "config/flowscope.json5: $.b (line 2, column 5): unterminated string")
    }
}
