import FlowFetch
import FlowJSON

/// An event as sinks, files and the API see it: the engine's event stamped by the pipeline with a
/// process-wide sequence number, the wall-clock time and the run that produced it.
public struct Envelope: Sendable {
    /// The engine's event, kept whole: stamping it is then one copy of the event.
    public var event: EngineEvent
    /// Per process, strictly increasing.
    public var seq: UInt64
    /// Wall clock, seconds since 1970 (UTC); written as ISO 8601 with microseconds.
    public var ts: Double
    /// What produced it: `live`, a test name, a simulation id.
    public var run: String

    /// Engine clock, seconds (virtual in simulation).
    public var t: Double { get { event.t } set { event.t = newValue } }
    public var trace: TraceID { get { event.trace } set { event.trace = newValue } }
    public var span: SpanID { get { event.span } set { event.span = newValue } }
    public var name: EventName { get { event.name } set { event.name = newValue } }
    public var placement: String? { get { event.placement } set { event.placement = newValue } }
    /// The client session (optional): written as `session`, 16 lowercase hex characters.
    public var session: SessionID? { get { event.session } set { event.session = newValue } }
    /// The profile (optional): its id hashed (16 lowercase hex characters), or plain when the app
    /// opted in (1 to ``ProfileTag/maxPlainBytes`` bytes).
    public var profile: String? { get { event.profile } set { event.profile = newValue } }
    public var attrs: EventAttributes {
        get { event.attrs }
        _modify { yield &event.attrs }
    }

    public init(seq: UInt64, ts: Double, t: Double, run: String, trace: TraceID, span: SpanID,
                name: EventName, placement: String?, attrs: EventAttributes,
                session: SessionID? = nil, profile: String? = nil) {
        self.seq = seq; self.ts = ts; self.run = run
        event = EngineEvent(name: name, t: t, placement: placement, trace: trace, span: span, attrs: attrs,
                            session: session, profile: profile)
    }

    /// Stamps an engine event.
    public init(_ event: EngineEvent, seq: UInt64, ts: Double, run: String) {
        self.seq = seq; self.ts = ts; self.run = run; self.event = event
    }

    /// The envelope as one line of compact JSON (no trailing newline), fields in the spec's order.
    public var jsonLine: String {
        var out = ""
        out.reserveCapacity(256)
        appendJSON(to: &out)
        return out
    }

    /// Appends the envelope as compact JSON to `out`.
    public func appendJSON(to out: inout String) {
        out += "{\"seq\":"
        out += String(seq)
        out += ",\"ts\":\""
        out += ISO8601.format(ts)
        out += "\",\"t\":"
        JSONWriter.writeNumber((t * 1_000_000).rounded() / 1_000_000, to: &out)
        out += ",\"run\":"
        JSONWriter.writeString(run, to: &out)
        out += ",\"trace\":\""
        out += trace.hex
        out += "\",\"span\":\""
        out += span.hex
        if let session {
            out += "\",\"session\":\""
            out += session.hex
        }
        out += "\""
        if let profile {
            out += ",\"profile\":"
            JSONWriter.writeString(profile, to: &out)
        }
        out += ",\"name\":\""
        out += name.rawValue
        out += "\",\"placement\":"
        if let placement { JSONWriter.writeString(placement, to: &out) } else { out += "null" }
        out += ",\"attrs\":"
        attrs.appendJSON(to: &out)
        out += "}"
    }

    /// The envelope as a JSON value.
    public var jsonValue: JSONValue {
        var value: [String: JSONValue] = [
            "seq": .number(Double(seq)), "ts": .string(ISO8601.format(ts)), "t": .number(t), "run": .string(run),
            "trace": .string(trace.hex), "span": .string(span.hex), "name": .string(name.rawValue),
            "placement": placement.map(JSONValue.string) ?? .null, "attrs": attrs.jsonValue,
        ]
        if let session { value["session"] = .string(session.hex) }
        if let profile { value["profile"] = .string(profile) }
        return .object(value)
    }
}

/// UTC timestamps in ISO 8601 with microseconds, e.g. `2026-12-02T10:11:12.345678Z`.
public enum ISO8601 {
    /// The times an envelope may carry: 1970-01-01T00:00:00Z up to 9999-12-31T23:59:59.999999Z.
    public static let validRange: ClosedRange<Double> = 0...253_402_300_799.999_999

    /// Appends `format(seconds)` to a byte buffer.
    public static func append(_ seconds: Double, to out: inout [UInt8]) {
        let f = fields(seconds)
        guard (0...9999).contains(f.y) else { out.append(contentsOf: format(seconds).utf8); return }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 27) { buf in
            fill(buf, f)
            out.append(contentsOf: UnsafeBufferPointer(buf))
        }
    }

    /// Formats seconds since 1970 as ISO 8601 UTC with six fractional digits.
    public static func format(_ seconds: Double) -> String {
        let f = fields(seconds)
        if (0...9999).contains(f.y) {
            // Fast path: fixed-width digits straight into the string's storage.
            return String(unsafeUninitializedCapacity: 27) { buf in
                fill(buf, f)
                return 27
            }
        }
        func pad(_ v: Int64, _ width: Int) -> String {
            let s = String(v)
            return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
        }
        let secs = f.secs
        return "\(pad(f.y, 4))-\(pad(f.m, 2))-\(pad(f.d, 2))T\(pad(secs / 3600, 2)):\(pad(secs / 60 % 60, 2)):\(pad(secs % 60, 2)).\(pad(f.frac, 6))Z"
    }

    /// Microseconds since 1970 of a time clamped into `validRange` (NaN to 0): a time outside it
    /// would overflow the Int64 conversion.
    static func micros(_ seconds: Double) -> Int64 {
        let clamped = seconds.isNaN ? 0 : min(max(seconds, validRange.lowerBound), validRange.upperBound)
        // Not negative, so truncating is rounding down.
        return min(Int64(clamped * 1_000_000), 253_402_300_799_999_999)
    }

    /// Civil date, seconds of the day and microseconds of a time, clamped into `validRange`.
    private static func fields(_ seconds: Double) -> (y: Int64, m: Int64, d: Int64, secs: Int64, frac: Int64) {
        fields(micros: micros(seconds))
    }

    /// Civil date, seconds of the day and microseconds of `micros` (from `micros(_:)`).
    static func fields(micros: Int64) -> (y: Int64, m: Int64, d: Int64, secs: Int64, frac: Int64) {
        var days = micros >= 0 ? micros / 86_400_000_000 : (micros - 86_399_999_999) / 86_400_000_000
        let inDay = micros - days * 86_400_000_000
        // Civil-from-days (Howard Hinnant).
        days += 719_468
        let era = (days >= 0 ? days : days - 146_096) / 146_097
        let doe = days - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        let y = yoe + era * 400 + (m <= 2 ? 1 : 0)
        return (y, m, d, inDay / 1_000_000, inDay % 1_000_000)
    }

    /// Writes the 27 bytes of a time whose year has four digits.
    static func fill(_ buf: UnsafeMutableBufferPointer<UInt8>, _ f: (y: Int64, m: Int64, d: Int64, secs: Int64, frac: Int64)) {
        func put(_ v: Int64, _ at: Int, _ width: Int) {
            var v = v
            for i in stride(from: at + width - 1, through: at, by: -1) { buf[i] = UInt8(48 + v % 10); v /= 10 }
        }
        put(f.y, 0, 4); buf[4] = 45; put(f.m, 5, 2); buf[7] = 45; put(f.d, 8, 2); buf[10] = 84
        put(f.secs / 3600, 11, 2); buf[13] = 58; put(f.secs / 60 % 60, 14, 2); buf[16] = 58; put(f.secs % 60, 17, 2)
        buf[19] = 46; put(f.frac, 20, 6); buf[26] = 90
    }

    /// Days in `month` (1-12) of `year`, in the proleptic Gregorian calendar.
    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Parses what `format` writes (fraction optional, 0-9 digits); nil for anything else, such as a
    /// day the month does not have (`2026-02-30`). A leap second (`:60`) is the next second's start.
    public static func parse(_ text: String) -> Double? {
        let u = Array(text.utf8)
        guard u.count >= 20, u.last == UInt8(ascii: "Z"), u[4] == UInt8(ascii: "-"), u[7] == UInt8(ascii: "-"),
              u[10] == UInt8(ascii: "T"), u[13] == UInt8(ascii: ":"), u[16] == UInt8(ascii: ":") else { return nil }
        func num(_ r: Range<Int>) -> Int64? {
            var v: Int64 = 0
            for i in r { let c = u[i]; guard c >= 48, c <= 57 else { return nil }; v = v * 10 + Int64(c - 48) }
            return v
        }
        guard let y = num(0..<4), let m = num(5..<7), let d = num(8..<10), let hh = num(11..<13),
              let mm = num(14..<16), let ss = num(17..<19), (1...12).contains(m), (1...31).contains(d),
              d <= daysIn(month: m, year: y), hh < 24, mm < 60, ss < 61 else { return nil }
        var frac = 0.0
        if u.count > 20 {
            guard u[19] == UInt8(ascii: "."), u.count - 21 <= 9, u.count - 21 >= 1, let f = num(20..<(u.count - 1)) else { return nil }
            var scale = 1.0
            for _ in 0..<(u.count - 21) { scale *= 10 }
            frac = Double(f) / scale
        } else if u.count != 20 { return nil }
        let yy = m <= 2 ? y - 1 : y
        let era = (yy >= 0 ? yy : yy - 399) / 400
        let yoe = yy - era * 400
        let doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        return Double(days * 86400 + hh * 3600 + mm * 60 + ss) + frac
    }
}
