import FlowJSON

/// An event's attributes: a handful of named JSON values (events-and-metrics.md lists them per event).
///
/// Kept as a short list of pairs rather than a dictionary: building one costs one allocation and no
/// hashing, and reading one of a few keys is a short scan. The attributes of the events every call
/// emits (fetch.start, cache.hit, fetch.end with a flow) are kept typed and inline instead, with
/// no allocation at all: the same names and values, made into JSON only when read. Written as a
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

    /// The attributes: a list of pairs, or one of the fixed sets the hot path emits.
    ///
    /// Keep the payloads in this order: with fetchEndFlow's texts first (to pack it into 43 bytes)
    /// Swift 6.3.1 built code that crashed constructing a fetchStart, in debug and release builds
    /// alike (`TypedAttributesTests` caught it at once).
    private enum Storage: Sendable {
        /// The pairs as set. The same element type a literal's variadic list has, so a literal
        /// adopts that list's storage instead of copying it.
        case list([(String, JSONValue)])
        /// fetch.start: call, policy, loadTimeout.
        case fetchStart(call: FetchCallName, policy: FetchPolicy, loadTimeout: Double?)
        /// cache.hit: layer, age, audience.
        case cacheHit(layer: CacheLayer, age: Double, fromDefaultAudience: Bool)
        /// fetch.end of a call that returned a flow: call, duration, source, variation, audience,
        /// targetingLost.
        case fetchEndFlow(call: FetchCallName, duration: Double, source: FlowSource, variation: String,
                          audience: String, targetingLost: Bool)
    }

    private var storage: Storage

    /// No attributes.
    public init() { storage = .list([]) }

    /// The attributes of a dictionary.
    public init(_ dictionary: [String: JSONValue]) {
        storage = .list(dictionary.map { ($0.key, $0.value) })
    }

    /// Room for `capacity` attributes before the storage grows.
    public init(minimumCapacity capacity: Int) {
        var pairs: [(String, JSONValue)] = []
        pairs.reserveCapacity(capacity)
        storage = .list(pairs)
    }

    /// A literal. Its keys must be distinct, as in a dictionary literal.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        storage = .list(elements)
        assert(Set(elements.map(\.0)).count == elements.count, "duplicate attribute names in \(elements.map(\.0))")
    }

    /// fetch.start's attributes (`loadTimeout` null when the call has none).
    public static func fetchStart(call: FetchCallName, policy: FetchPolicy, loadTimeout: Double?) -> EventAttributes {
        EventAttributes(storage: .fetchStart(call: call, policy: policy, loadTimeout: loadTimeout))
    }

    /// cache.hit's attributes (age in seconds, as reported).
    public static func cacheHit(layer: CacheLayer, age: Double, fromDefaultAudience: Bool) -> EventAttributes {
        EventAttributes(storage: .cacheHit(layer: layer, age: age, fromDefaultAudience: fromDefaultAudience))
    }

    /// fetch.end's attributes for a call that returned a flow (duration in seconds, as reported).
    public static func fetchEndFlow(call: FetchCallName, duration: Double, source: FlowSource, variation: String,
                                    audience: String, targetingLost: Bool) -> EventAttributes {
        EventAttributes(storage: .fetchEndFlow(call: call, duration: duration, source: source, variation: variation,
                                               audience: audience, targetingLost: targetingLost))
    }

    private init(storage: Storage) { self.storage = storage }

    /// The pairs as set, for any storage.
    private var pairs: [(String, JSONValue)] {
        switch storage {
        case .list(let pairs): return pairs
        default:
            var pairs: [(String, JSONValue)] = []
            forEachSet { pairs.append(($0, $1)) }
            return pairs
        }
    }

    /// Turns a fixed set into a list before it is changed.
    private mutating func withList<R>(_ body: (inout [(String, JSONValue)]) -> R) -> R {
        var list = pairs
        storage = .list([])  // so `list` is the only reference and changes in place
        defer { storage = .list(list) }
        return body(&list)
    }

    /// Calls `body` with each attribute in the order it was set.
    private func forEachSet(_ body: (String, JSONValue) -> Void) {
        switch storage {
        case .list(let pairs):
            for p in pairs { body(p.0, p.1) }
        case .fetchStart(let call, let policy, let loadTimeout):
            body("call", .string(call.rawValue))
            body("policy", .string(policy.description))
            body("loadTimeout", loadTimeout.map(JSONValue.number) ?? .null)
        case .cacheHit(let layer, let age, let fromDefault):
            body("layer", .string(layer.rawValue))
            body("age", .number(age))
            body("audience", .string(fromDefault ? "default" : "targeted"))
        case .fetchEndFlow(let call, let duration, let source, let variation, let audience, let lost):
            body("call", .string(call.rawValue))
            body("duration", .number(duration))
            body("source", .string(source.rawValue))
            body("variation", .string(variation))
            body("audience", .string(audience))
            body("targetingLost", .bool(lost))
        }
    }

    /// Adds an attribute whose name is not there yet (no search for an existing one).
    public mutating func append(_ key: String, _ value: JSONValue) {
        assert(self[key] == nil, "attribute \(key) is already set")
        withList { $0.append((key, value)) }
    }

    /// The value of `key`; setting nil removes it.
    public subscript(key: String) -> JSONValue? {
        get {
            switch storage {
            case .list(let pairs):
                for p in pairs where p.0 == key { return p.1 }
                return nil
            case .fetchStart(let call, let policy, let loadTimeout):
                switch key {
                case "call": return .string(call.rawValue)
                case "policy": return .string(policy.description)
                case "loadTimeout": return loadTimeout.map(JSONValue.number) ?? .null
                default: return nil
                }
            case .cacheHit(let layer, let age, let fromDefault):
                switch key {
                case "layer": return .string(layer.rawValue)
                case "age": return .number(age)
                case "audience": return .string(fromDefault ? "default" : "targeted")
                default: return nil
                }
            case .fetchEndFlow(let call, let duration, let source, let variation, let audience, let lost):
                switch key {
                case "call": return .string(call.rawValue)
                case "duration": return .number(duration)
                case "source": return .string(source.rawValue)
                case "variation": return .string(variation)
                case "audience": return .string(audience)
                case "targetingLost": return .bool(lost)
                default: return nil
                }
            }
        }
        set {
            withList { pairs in
                if let i = pairs.firstIndex(where: { $0.0 == key }) {
                    if let newValue { pairs[i].1 = newValue } else { pairs.remove(at: i) }
                } else if let newValue {
                    pairs.append((key, newValue))
                }
            }
        }
    }

    /// How many attributes there are.
    public var count: Int {
        switch storage {
        case .list(let pairs): pairs.count
        case .fetchStart, .cacheHit: 3
        case .fetchEndFlow: 6
        }
    }
    /// Whether there are none.
    public var isEmpty: Bool { count == 0 }
    /// The names, in the order they were set.
    public var keys: [String] { pairs.map(\.0) }
    /// The attributes as a dictionary.
    public var dictionary: [String: JSONValue] {
        var d = [String: JSONValue](minimumCapacity: count)
        forEachSet { d[$0] = $1 }
        return d
    }
    /// The attributes as a JSON object.
    public var jsonValue: JSONValue { .object(dictionary) }

    /// The attributes sorted by name (the order they are written in).
    public var sortedByName: [Element] {
        var sorted: [Element] = []
        forEachSorted { sorted.append((key: $0, value: $1)) }
        return sorted
    }

    /// Calls `body` with each attribute in ascending name order (the order they are written in),
    /// without allocating for up to 16 attributes.
    public func forEachSorted(_ body: (String, JSONValue) -> Void) {
        switch storage {
        case .list(let pairs):
            Self.forEachSorted(pairs, body)
        case .fetchStart(let call, let policy, let loadTimeout):
            body("call", .string(call.rawValue))
            body("loadTimeout", loadTimeout.map(JSONValue.number) ?? .null)
            body("policy", .string(policy.description))
        case .cacheHit(let layer, let age, let fromDefault):
            body("age", .number(age))
            body("audience", .string(fromDefault ? "default" : "targeted"))
            body("layer", .string(layer.rawValue))
        case .fetchEndFlow(let call, let duration, let source, let variation, let audience, let lost):
            body("audience", .string(audience))
            body("call", .string(call.rawValue))
            body("duration", .number(duration))
            body("source", .string(source.rawValue))
            body("targetingLost", .bool(lost))
            body("variation", .string(variation))
        }
    }

    private static func forEachSorted(_ pairs: [(String, JSONValue)], _ body: (String, JSONValue) -> Void) {
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
    public func makeIterator() -> Iterator { Iterator(pairs: pairs) }

    /// Iterates the attributes in the order they were set.
    public struct Iterator: IteratorProtocol {
        fileprivate let pairs: [(String, JSONValue)]
        fileprivate var index = 0

        public mutating func next() -> Element? {
            guard index < pairs.count else { return nil }
            defer { index += 1 }
            return (key: pairs[index].0, value: pairs[index].1)
        }
    }

    /// The same names with the same values, in any order.
    public static func == (a: EventAttributes, b: EventAttributes) -> Bool {
        guard a.count == b.count else { return false }
        var same = true
        a.forEachSet { key, value in
            if same, b[key] != value { same = false }
        }
        return same
    }

    /// Hashes the pairs independently of their order.
    public func hash(into hasher: inout Hasher) {
        var combined = 0
        forEachSet { key, value in
            var h = Hasher()
            h.combine(key)
            h.combine(value)
            combined ^= h.finalize()
        }
        hasher.combine(count)
        hasher.combine(combined)
    }

    /// Compact JSON, keys sorted.
    public var description: String { jsonValue.jsonText }
}

/// The calls whose fetch.start and fetch.end can carry typed attributes (their `call` attribute).
public enum FetchCallName: String, Sendable {
    case getFlow, getFlowForDefaultAudience, getFlowOrDefault, getFlowConfiguration
}
