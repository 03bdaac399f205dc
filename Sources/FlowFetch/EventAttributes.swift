import FlowJSON

/// An event's attributes: a handful of named JSON values (events-and-metrics.md lists them per event).
///
/// Kept as a short list of pairs rather than a dictionary: building one on the engine's hot path
/// costs one allocation and no hashing, and reading one of a few keys is a short scan. Written as a
/// JSON object with sorted keys; compared as a set of pairs, whatever their order.
///
/// ```swift
/// var attrs: EventAttributes = ["layer": "memory", "age": 1.5]
/// attrs["audience"] = "targeted"
/// attrs["layer"]?.stringValue  // "memory"
/// ```
public struct EventAttributes: Sendable, Hashable, ExpressibleByDictionaryLiteral, Sequence, CustomStringConvertible {
    /// One attribute.
    public typealias Element = (key: String, value: JSONValue)
    /// The pairs as set. The same element type a literal's variadic list has, so a literal adopts
    /// that list's storage instead of copying it.
    private var pairs: [(String, JSONValue)] = []

    /// No attributes.
    public init() {}

    /// The attributes of a dictionary.
    public init(_ dictionary: [String: JSONValue]) {
        pairs = dictionary.map { ($0.key, $0.value) }
    }

    /// Room for `capacity` attributes before the storage grows.
    public init(minimumCapacity capacity: Int) { pairs.reserveCapacity(capacity) }

    /// A literal. Its keys must be distinct, as in a dictionary literal.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        pairs = elements
        assert(Set(pairs.map(\.0)).count == pairs.count, "duplicate attribute names in \(pairs.map(\.0))")
    }

    /// Adds an attribute whose name is not there yet (no search for an existing one).
    public mutating func append(_ key: String, _ value: JSONValue) {
        assert(self[key] == nil, "attribute \(key) is already set")
        pairs.append((key, value))
    }

    /// The value of `key`; setting nil removes it.
    public subscript(key: String) -> JSONValue? {
        get {
            for p in pairs where p.0 == key { return p.1 }
            return nil
        }
        set {
            if let i = pairs.firstIndex(where: { $0.0 == key }) {
                if let newValue { pairs[i].1 = newValue } else { pairs.remove(at: i) }
            } else if let newValue {
                pairs.append((key, newValue))
            }
        }
    }

    /// How many attributes there are.
    public var count: Int { pairs.count }
    /// Whether there are none.
    public var isEmpty: Bool { pairs.isEmpty }
    /// The names, in the order they were set.
    public var keys: [String] { pairs.map(\.0) }
    /// The attributes as a dictionary.
    public var dictionary: [String: JSONValue] {
        var d = [String: JSONValue](minimumCapacity: pairs.count)
        for p in pairs { d[p.0] = p.1 }
        return d
    }
    /// The attributes as a JSON object.
    public var jsonValue: JSONValue { .object(dictionary) }

    /// The attributes sorted by name (the order they are written in).
    public var sortedByName: [Element] {
        pairs.sorted { $0.0 < $1.0 }.map { (key: $0.0, value: $0.1) }
    }

    /// Calls `body` with each attribute in ascending name order (the order they are written in),
    /// without allocating for up to 16 attributes.
    public func forEachSorted(_ body: (String, JSONValue) -> Void) {
        let n = pairs.count
        guard n <= 16 else {
            for p in pairs.sorted(by: { $0.0 < $1.0 }) { body(p.0, p.1) }
            return
        }
        withUnsafeTemporaryAllocation(of: Int.self, capacity: Swift.max(n, 1)) { order in
            // Insertion sort of indices: attribute lists are short.
            for i in 0..<n {
                var at = i
                while at > 0, pairs[i].0 < pairs[order[at - 1]].0 {
                    order[at] = order[at - 1]
                    at -= 1
                }
                order[at] = i
            }
            for k in 0..<n { body(pairs[order[k]].0, pairs[order[k]].1) }
        }
    }

    /// Appends the attributes as a compact JSON object, keys sorted (as `JSONWriter` writes objects).
    public func appendJSON(to out: inout String) {
        out += "{"
        var first = true
        forEachSorted { key, value in
            if !first { out += "," }
            first = false
            JSONWriter.writeString(key, to: &out)
            out += ":"
            JSONWriter.write(value, to: &out)
        }
        out += "}"
    }

    /// Attributes in the order they were set.
    public func makeIterator() -> some IteratorProtocol<Element> {
        pairs.lazy.map { (key: $0.0, value: $0.1) }.makeIterator()
    }

    /// The same names with the same values, in any order.
    public static func == (a: EventAttributes, b: EventAttributes) -> Bool {
        a.count == b.count && a.pairs.allSatisfy { b[$0.0] == $0.1 }
    }

    /// Hashes the pairs independently of their order.
    public func hash(into hasher: inout Hasher) {
        var combined = 0
        for p in pairs {
            var h = Hasher()
            h.combine(p.0)
            h.combine(p.1)
            combined ^= h.finalize()
        }
        hasher.combine(count)
        hasher.combine(combined)
    }

    /// Compact JSON, keys sorted.
    public var description: String { jsonValue.jsonText }
}
