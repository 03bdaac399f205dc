/// A JSON document as a value: what the JSON5 reader produces and the writer prints.
///
/// Objects are unordered; the writer prints their keys sorted so output is stable.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .number(Double(value)) }
    public init(floatLiteral value: Double) { self = .number(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
    public init(nilLiteral: ()) { self = .null }
}

extension JSONValue {
    /// The string, if this is a string.
    public var stringValue: String? { if case .string(let s) = self { s } else { nil } }
    /// The number, if this is a number.
    public var numberValue: Double? { if case .number(let n) = self { n } else { nil } }
    /// The boolean, if this is a boolean.
    public var boolValue: Bool? { if case .bool(let b) = self { b } else { nil } }
    /// The elements, if this is an array.
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { a } else { nil } }
    /// The members, if this is an object.
    public var objectValue: [String: JSONValue]? { if case .object(let o) = self { o } else { nil } }
    /// The number as an exact integer, if it is one.
    public var intValue: Int? {
        guard case .number(let n) = self, n.rounded() == n, abs(n) < 9.007_199_254_740_992e15 else { return nil }
        return Int(n)
    }
    /// Member lookup; nil when this is not an object or has no such key.
    public subscript(key: String) -> JSONValue? { objectValue?[key] }

    /// Compact JSON text with object keys sorted.
    public var jsonText: String {
        var out = ""
        JSONWriter.write(self, to: &out)
        return out
    }
}

/// Writes JSON text. Numbers that are whole print without a fraction; others print in their
/// shortest round-tripping form. Non-finite numbers, which JSON cannot carry, print as null.
public enum JSONWriter {
    /// Appends `value` as compact JSON to `out`.
    public static func write(_ value: JSONValue, to out: inout String) {
        switch value {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .number(let n): writeNumber(n, to: &out)
        case .string(let s): writeString(s, to: &out)
        case .array(let items):
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += "," }
                write(item, to: &out)
            }
            out += "]"
        case .object(let members):
            out += "{"
            var first = true
            for (key, member) in members.sorted(by: { $0.key < $1.key }) {
                if !first { out += "," }
                first = false
                writeString(key, to: &out)
                out += ":"
                write(member, to: &out)
            }
            out += "}"
        }
    }

    /// Appends a number: whole values without a fraction, others shortest round-trip, non-finite as null.
    public static func writeNumber(_ n: Double, to out: inout String) {
        guard n.isFinite else { out += "null"; return }
        if n.rounded() == n, abs(n) <= 9_007_199_254_740_992 {  // whole and exact (2^53): integer digits
            out += String(Int64(n))
        } else {
            out += "\(n)"
        }
    }

    /// Appends a quoted, escaped JSON string.
    public static func writeString(_ s: String, to out: inout String) {
        // Fast path: most strings need no escaping; append them whole (one copy of their UTF-8).
        let plain = s.utf8.withContiguousStorageIfAvailable { bytes in
            for b in bytes where b < 0x20 || b == 0x22 || b == 0x5C || b == 0xE2 { return false }
            return true
        }
        if plain == true {
            out += "\""
            out += s
            out += "\""
            return
        }
        out += "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{08}": out += "\\b"
            case "\u{0C}": out += "\\f"
            case let c where c.value < 0x20 || c.value == 0x2028 || c.value == 0x2029:
                let hex = String(c.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }
}

extension JSONWriter {
    /// Appends `value` as compact JSON to a byte buffer: the same text as ``write(_:to:)-(_,String)``,
    /// without the cost of growing a `String`.
    public static func write(_ value: JSONValue, to out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .number(let n): writeNumber(n, to: &out)
        case .string(let s): writeString(s, to: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                write(item, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            var first = true
            for (key, member) in members.sorted(by: { $0.key < $1.key }) {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                writeString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                write(member, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Appends a number to a byte buffer, as ``writeNumber(_:to:)-(_,String)`` writes it.
    public static func writeNumber(_ n: Double, to out: inout [UInt8]) {
        guard n.isFinite else { out.append(contentsOf: "null".utf8); return }
        if n.rounded() == n, abs(n) <= 9_007_199_254_740_992 {  // whole and exact (2^53): integer digits
            writeInteger(Int64(n), to: &out)
        } else {
            out.append(contentsOf: n.description.utf8)
        }
    }

    /// Appends an integer's decimal digits.
    public static func writeInteger(_ v: Int64, to out: inout [UInt8]) {
        if v < 0 { out.append(UInt8(ascii: "-")) }
        var m = v.magnitude
        if m < 10 { out.append(UInt8(48 + m)); return }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { buf in
            var i = 20
            while m > 0 { i -= 1; buf[i] = UInt8(48 + m % 10); m /= 10 }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: buf[i...]))
        }
    }

    /// Appends a quoted, escaped JSON string to a byte buffer, as ``writeString(_:to:)-(_,String)`` does.
    public static func writeString(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        let done: Void? = s.utf8.withContiguousStorageIfAvailable { appendEscaped($0, to: &out) }
        if done == nil { appendEscaped(Array(s.utf8), to: &out) }
        out.append(UInt8(ascii: "\""))
    }

    private static func appendEscaped(_ bytes: some Collection<UInt8>, to out: inout [UInt8]) {
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        var pending = bytes.startIndex  // start of the run not yet appended
        var i = bytes.startIndex
        while i != bytes.endIndex {
            let b = bytes[i]
            var escape: [UInt8]?
            var width = 1
            switch b {
            case 0x22: escape = [0x5C, 0x22]
            case 0x5C: escape = [0x5C, 0x5C]
            case 0x0A: escape = [0x5C, UInt8(ascii: "n")]
            case 0x0D: escape = [0x5C, UInt8(ascii: "r")]
            case 0x09: escape = [0x5C, UInt8(ascii: "t")]
            case 0x08: escape = [0x5C, UInt8(ascii: "b")]
            case 0x0C: escape = [0x5C, UInt8(ascii: "f")]
            case 0..<0x20:
                escape = Array("\\u00".utf8) + [hex[Int(b >> 4)], hex[Int(b & 0xF)]]
            case 0xE2:
                // U+2028 and U+2029 (E2 80 A8 / E2 80 A9) are escaped so the text is valid JavaScript too.
                let j = bytes.index(after: i)
                if j != bytes.endIndex, bytes[j] == 0x80 {
                    let k = bytes.index(after: j)
                    if k != bytes.endIndex, bytes[k] == 0xA8 || bytes[k] == 0xA9 {
                        escape = Array((bytes[k] == 0xA8 ? "\\u2028" : "\\u2029").utf8)
                        width = 3
                    }
                }
            default: break
            }
            if let escape {
                out.append(contentsOf: bytes[pending..<i])
                out.append(contentsOf: escape)
                i = bytes.index(i, offsetBy: width)
                pending = i
            } else {
                i = bytes.index(after: i)
            }
        }
        out.append(contentsOf: bytes[pending..<bytes.endIndex])
    }
}
