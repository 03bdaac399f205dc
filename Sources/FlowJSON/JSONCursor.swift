/// Builds the JSON paths used in error messages: `$`, `$.steps[3].fetchPolicy`,
/// `$.placements["main paywall"]`.
public enum JSONPath {
    /// The path of the document root, `$`.
    public static let root = "$"

    /// `path` extended by an object member: `.key` when the key is an identifier
    /// (ASCII letters, digits and `_`, not starting with a digit), `["key"]` otherwise.
    public static func appending(key: String, to path: String) -> String {
        if isIdentifier(key) { return path + "." + key }
        var out = path + "["
        JSONWriter.writeString(key, to: &out)
        return out + "]"
    }

    /// `path` extended by an array index: `path[3]`.
    public static func appending(index: Int, to path: String) -> String {
        path + "[" + String(index) + "]"
    }

    private static func isIdentifier(_ key: String) -> Bool {
        guard let first = key.utf8.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else { return false }
        return key.utf8.allSatisfy { b in
            (b | 0x20) &- UInt8(ascii: "a") < 26 || b &- UInt8(ascii: "0") < 10 || b == UInt8(ascii: "_")
        }
    }
}

/// A value being decoded, with its path, so every error says where it is and what was found.
///
/// ```swift
/// let root = try JSON5.parse(text)
/// let scenario = try JSONCursor(root).object()
/// try scenario.rejectUnknownKeys(allowed: ["name", "steps"])
/// let name = try scenario.required("name").nonEmptyString()
/// for step in try scenario.required("steps").array() { ... }   // step.path == "$.steps[0]", ...
/// ```
public struct JSONCursor: Sendable, Hashable {
    /// The value at this position.
    public let value: JSONValue
    /// Its path from the document root, e.g. `$.steps[3].fetchPolicy`.
    public let path: String

    /// A cursor on `value`, which sits at `path` (the root by default).
    public init(_ value: JSONValue, path: String = JSONPath.root) {
        self.value = value
        self.path = path
    }

    /// True when the value is `null`.
    public var isNull: Bool { value == .null }

    /// The members of an object. Error otherwise: `expected an object, got a string "x"`.
    public func object() throws(JSONInputError) -> JSONObjectCursor {
        guard case .object(let members) = value else { throw expected("an object") }
        return JSONObjectCursor(path: path, members: members)
    }

    /// The elements of an array, each with its own path (`$.a[0]`, `$.a[1]`, ...).
    public func array() throws(JSONInputError) -> [JSONCursor] {
        guard case .array(let elements) = value else { throw expected("an array") }
        return elements.enumerated().map { index, element in
            JSONCursor(element, path: JSONPath.appending(index: index, to: path))
        }
    }

    /// The string. Error otherwise: `expected a string, got a number 5`.
    public func string() throws(JSONInputError) -> String {
        guard case .string(let s) = value else { throw expected("a string") }
        return s
    }

    /// The string, which must contain something other than white space; returned as written.
    public func nonEmptyString() throws(JSONInputError) -> String {
        guard case .string(let s) = value, !s.allSatisfy(\.isWhitespace) else { throw expected("a non-empty string") }
        return s
    }

    /// The number, which must be finite. Error otherwise: `expected a number, got a string "5s"`.
    public func double() throws(JSONInputError) -> Double {
        guard case .number(let n) = value, n.isFinite else {
            throw expected(value.numberValue == nil ? "a number" : "a finite number")
        }
        return n
    }

    /// The number as an exact integer (magnitude below 2^53). Error otherwise: `expected an integer, got a number 2.5`.
    public func int() throws(JSONInputError) -> Int {
        guard case .number(let n) = value else { throw expected("an integer") }
        guard n.rounded() == n, n.isFinite else { throw expected("an integer") }
        guard let i = value.intValue else {
            throw expected("an integer between -9007199254740991 and 9007199254740991")
        }
        return i
    }

    /// The boolean. Error otherwise: `expected true or false, got a string "yes"`.
    public func bool() throws(JSONInputError) -> Bool {
        guard case .bool(let b) = value else { throw expected("true or false") }
        return b
    }

    /// An error at this path with `message`, for checks the cursor does not make itself.
    public func error(_ message: String) -> JSONInputError {
        JSONInputError(path: path, message: message)
    }

    /// An error at this path saying what was expected and what was found:
    /// `expected("a duration like \"5s\"")` gives `expected a duration like "5s", got a number 5`.
    public func expected(_ what: String) -> JSONInputError {
        error("expected \(what), got \(value.briefDescription)")
    }
}

/// The members of an object being decoded, with the object's path.
public struct JSONObjectCursor: Sendable, Hashable {
    /// The object's path, e.g. `$.steps[3]`.
    public let path: String
    /// The object's members.
    public let members: [String: JSONValue]

    /// An object cursor on `members`, which sit at `path`.
    public init(path: String = JSONPath.root, members: [String: JSONValue]) {
        self.path = path
        self.members = members
    }

    /// The member `key`. Error when absent: `missing required key "x"` at the object's path.
    public func required(_ key: String) throws(JSONInputError) -> JSONCursor {
        guard let value = members[key] else {
            var quoted = ""
            JSONWriter.writeString(key, to: &quoted)
            throw JSONInputError(path: path, message: "missing required key \(quoted)")
        }
        return JSONCursor(value, path: JSONPath.appending(key: key, to: path))
    }

    /// The member `key`, or nil when absent (a `null` member is present: check `isNull`).
    public func optional(_ key: String) -> JSONCursor? {
        members[key].map { JSONCursor($0, path: JSONPath.appending(key: key, to: path)) }
    }

    /// Fails on the first key (in sorted order) not in `allowed`, at that key's path:
    /// `unknown key "x" (expected one of: a, b, c)`.
    public func rejectUnknownKeys(allowed: Set<String>) throws(JSONInputError) {
        guard let unknown = members.keys.filter({ !allowed.contains($0) }).min() else { return }
        var quoted = ""
        JSONWriter.writeString(unknown, to: &quoted)
        let expectation = allowed.isEmpty ? "no keys are allowed here" : "expected one of: " + allowed.sorted().joined(separator: ", ")
        throw JSONInputError(path: JSONPath.appending(key: unknown, to: path),
                             message: "unknown key \(quoted) (\(expectation))")
    }

    /// Every member with its cursor, sorted by key.
    public var entries: [(key: String, cursor: JSONCursor)] {
        members.sorted { $0.key < $1.key }.map { member in
            (member.key, JSONCursor(member.value, path: JSONPath.appending(key: member.key, to: path)))
        }
    }
}

extension JSONValue {
    /// What this value is, for error messages: `a string "5s"` (at most 40 characters shown),
    /// `an empty string`, `a number 2.5`, `true`, `null`, `an array of 3 elements`, `an object with keys a, b`.
    public var briefDescription: String {
        switch self {
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .number(let n):
            guard n.isFinite else { return "a number \(n)" }
            var out = "a number "
            JSONWriter.writeNumber(n, to: &out)
            return out
        case .string(let s):
            if s.isEmpty { return "an empty string" }
            let limit = 40
            var out = s.allSatisfy(\.isWhitespace) ? "a blank string " : "a string "
            if s.count > limit {
                JSONWriter.writeString(String(s.prefix(limit)), to: &out)
                return out + "… (\(s.count) characters)"
            }
            JSONWriter.writeString(s, to: &out)
            return out
        case .array(let elements):
            switch elements.count {
            case 0: return "an empty array"
            case 1: return "an array of 1 element"
            default: return "an array of \(elements.count) elements"
            }
        case .object(let members):
            if members.isEmpty { return "an empty object" }
            let keys = members.keys.sorted()
            let shown = keys.prefix(5).joined(separator: ", ")
            return "an object with keys " + shown + (keys.count > 5 ? ", …" : "")
        }
    }
}
