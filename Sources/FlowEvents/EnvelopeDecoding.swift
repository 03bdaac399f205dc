import FlowFetch
import FlowJSON

extension Envelope {
    /// The most UTF-8 bytes a run name may have (the fewest is 1): decoding refuses any other.
    public static let maxRunBytes = 256

    /// Whether `run` is a run name decoding accepts: 1 to ``maxRunBytes`` UTF-8 bytes.
    public static func isValidRun(_ run: String) -> Bool {
        !run.isEmpty && run.utf8.count <= maxRunBytes
    }

    /// `name` made a valid run name (1 to ``maxRunBytes`` UTF-8 bytes), the same way everywhere
    /// runs are stamped (``EventPipeline``, the test kit):
    ///
    /// - a valid name is returned unchanged;
    /// - an empty name becomes `empty` (itself made valid; `live` when it is empty too);
    /// - a longer name is cut on a `Character` boundary and ends with `-` and the first 16 hex
    ///   digits of the SHA-256 of the whole name, 256 bytes at most: the same name always gives the
    ///   same run, and two long names that differ anywhere give different runs.
    ///
    /// ```swift
    /// Envelope.runName("checkout")                         // "checkout"
    /// Envelope.runName("")                                 // "live"
    /// Envelope.runName(String(repeating: "r", count: 300)) // 239 "r", "-", 16 hex digits
    /// ```
    public static func runName(_ name: String, empty: String = "live") -> String {
        if name.isEmpty { return empty.isEmpty ? "live" : runName(empty) }
        guard name.utf8.count > maxRunBytes else { return name }
        let suffix = "-" + String(Digest.hex(Digest.sha256(Array(name.utf8))).prefix(16))
        let budget = maxRunBytes - suffix.utf8.count
        var end = name.startIndex, used = 0
        for character in name {
            let size = character.utf8.count
            guard used + size <= budget else { break }
            used += size
            end = name.index(after: end)
        }
        // A single Character longer than the budget (a long run of combining marks): the hash alone.
        return end == name.startIndex ? String(suffix.dropFirst()) : String(name[..<end]) + suffix
    }

    /// The fields an envelope object may have.
    public static let jsonKeys: Set<String> = ["seq", "ts", "t", "run", "trace", "span", "session", "profile", "name", "placement", "attrs"]

    /// Reads an envelope object as `jsonLine` writes it (events-and-metrics.md), e.g. one line of
    /// a trace file or one element of a `POST /api/ingest` body.
    ///
    /// Required: `ts` (ISO 8601 UTC string, or seconds since 1970), `t`, `run`, `trace`, `span`,
    /// `name` (one of the spec's event names). Optional: `seq` (default 0; the pipeline renumbers
    /// ingested events anyway), `session` (16 lowercase hex characters, not all zero), `profile`
    /// (a string of 1 to ``ProfileTag/maxPlainBytes`` bytes: the hashed id is 16 lowercase hex
    /// characters, a plain one any such string), `placement` (string or null), `attrs` (object). Any other key is
    /// an error. Errors name the path, e.g. `$[3].trace: expected 32 lowercase hex characters`.
    public init(jsonValue value: JSONValue, path: String = "$") throws(JSONInputError) {
        guard let object = value.objectValue else {
            throw JSONInputError(path: path, message: "expected an event object, got \(Self.preview(value))")
        }
        for key in object.keys.sorted() where !Self.jsonKeys.contains(key) {
            throw JSONInputError(path: "\(path).\(key)",
                                 message: "unknown key (expected: \(Self.jsonKeys.sorted().joined(separator: ", ")))")
        }
        func required(_ key: String) throws(JSONInputError) -> JSONValue {
            guard let v = object[key] else { throw JSONInputError(path: "\(path).\(key)", message: "required key is missing") }
            return v
        }
        func string(_ key: String) throws(JSONInputError) -> String {
            let v = try required(key)
            guard let s = v.stringValue else { throw JSONInputError(path: "\(path).\(key)", message: "expected a string, got \(Self.preview(v))") }
            return s
        }
        var seq: UInt64 = 0
        if let v = object["seq"] {
            guard let n = v.numberValue, n >= 0, n.rounded() == n, n < 9.007_199_254_740_992e15 else {
                throw JSONInputError(path: "\(path).seq", message: "expected a non-negative integer, got \(Self.preview(v))")
            }
            seq = UInt64(n)
        }
        let tsValue = try required("ts")
        let ts: Double
        if let s = tsValue.stringValue, let parsed = ISO8601.parse(s) {
            ts = parsed
        } else if let n = tsValue.numberValue, n.isFinite {
            ts = n
        } else {
            throw JSONInputError(path: "\(path).ts", message: "expected an ISO 8601 UTC time like \"2026-12-02T10:11:12.345678Z\", got \(Self.preview(tsValue))")
        }
        // Sinks turn ts into integer microseconds and nanoseconds: keep it where those fit.
        guard ISO8601.validRange.contains(ts) else {
            throw JSONInputError(path: "\(path).ts", message: "expected a time from 1970 to 9999, got \(Self.preview(tsValue))")
        }
        let tValue = try required("t")
        guard let t = tValue.numberValue, t.isFinite else {
            throw JSONInputError(path: "\(path).t", message: "expected a number of seconds, got \(Self.preview(tValue))")
        }
        let run = try string("run")
        guard Self.isValidRun(run) else {
            throw JSONInputError(path: "\(path).run", message: "expected a run name of 1 to \(Self.maxRunBytes) bytes")
        }
        // The spec's ids are lowercase: parse, then insist the text is exactly what we would write.
        let traceText = try string("trace"), spanText = try string("span")
        guard let trace = TraceID(hex: traceText), trace.hex == traceText else {
            throw JSONInputError(path: "\(path).trace", message: "expected 32 lowercase hex characters, not all zero")
        }
        guard let span = SpanID(hex: spanText), span.hex == spanText else {
            throw JSONInputError(path: "\(path).span", message: "expected 16 lowercase hex characters, not all zero")
        }
        var session: SessionID?
        if let v = object["session"] {
            guard let text = v.stringValue, let id = SessionID(hex: text), id.hex == text else {
                throw JSONInputError(path: "\(path).session", message: "expected 16 lowercase hex characters, not all zero, got \(Self.preview(v))")
            }
            session = id
        }
        var profile: String?
        if let v = object["profile"] {
            guard let text = v.stringValue, !text.isEmpty, text.utf8.count <= ProfileTag.maxPlainBytes else {
                throw JSONInputError(path: "\(path).profile",
                                     message: "expected a profile id of 1 to \(ProfileTag.maxPlainBytes) bytes (16 lowercase hex characters when hashed), got \(Self.preview(v))")
            }
            profile = text
        }
        let nameText = try string("name")
        guard let name = EventName(rawValue: nameText) else {
            throw JSONInputError(path: "\(path).name", message: "unknown event name \(JSONValue.string(nameText).jsonText)")
        }
        var placement: String?
        switch object["placement"] {
        case nil, .null?: placement = nil
        case .string(let s)?: placement = s
        case let other?: throw JSONInputError(path: "\(path).placement", message: "expected a string or null, got \(Self.preview(other))")
        }
        var attrs: [String: JSONValue] = [:]
        if let v = object["attrs"] {
            guard let o = v.objectValue else {
                throw JSONInputError(path: "\(path).attrs", message: "expected an object, got \(Self.preview(v))")
            }
            attrs = o
        }
        self.init(seq: seq, ts: ts, t: t, run: run, trace: trace, span: span, name: name, placement: placement, attrs: EventAttributes(attrs),
                  session: session, profile: profile)
    }

    /// Reads a list of envelope objects (a `POST /api/ingest` JSON array); errors name `$[i]...`.
    public static func decodeAll(_ value: JSONValue, path: String = "$") throws(JSONInputError) -> [Envelope] {
        guard let items = value.arrayValue else {
            throw JSONInputError(path: path, message: "expected an array of events, got \(preview(value))")
        }
        var out: [Envelope] = []
        out.reserveCapacity(items.count)
        for (i, item) in items.enumerated() { out.append(try Envelope(jsonValue: item, path: "\(path)[\(i)]")) }
        return out
    }

    private static func preview(_ value: JSONValue) -> String {
        let text = value.jsonText
        return text.count > 60 ? String(text.prefix(57)) + "..." : text
    }
}
