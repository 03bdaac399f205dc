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
        if n.rounded() == n, abs(n) < 1e15 {
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
