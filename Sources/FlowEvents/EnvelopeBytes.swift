import FlowFetch
import FlowJSON

/// Writes envelopes as JSON lines, byte for byte the text of `Envelope.jsonLine`, straight into
/// memory the caller owns (a file buffer, a socket buffer). Keeps the date text of the last
/// second it wrote, so a run of events in the same second formats its timestamp in a few stores.
///
///     var writer = EnvelopeLineWriter()
///     if let n = writer.write(envelope, to: buffer + used, capacity: free) { used += n }
///     else { /* grow the buffer and write again */ }
public struct EnvelopeLineWriter: Sendable {
    /// The second whose text `datePrefix` holds; -1 for none.
    private var dateSecond: Int64 = -1
    /// `YYYY-MM-DDTHH:MM:SS.` of `dateSecond`, as stored in memory.
    private var datePrefix: (UInt64, UInt64, UInt32) = (0, 0, 0)

    /// A writer with nothing cached.
    public init() {}

    /// Writes the bytes of `envelope.jsonLine` (no newline) at `start`, using at most `capacity`
    /// bytes.
    /// - Returns: the number of bytes written, or nil when the line needs more than `capacity`
    ///   bytes (what was written at `start` is then meaningless).
    public mutating func write(_ envelope: borrowing Envelope, to start: UnsafeMutablePointer<UInt8>, capacity: Int) -> Int? {
        var out = ByteCursor(start, capacity: capacity)
        // The fixed part: seq (<= 20 digits), the timestamp (27 bytes) and the ids (48 hex digits)
        // with their field names fit in 160 bytes, checked once.
        guard out.room(160) else { return nil }
        out.literal(#"{"seq":"#)
        out.unsignedUnchecked(envelope.seq)
        out.literal(#","ts":""#)
        timestamp(envelope.ts, to: &out)
        out.literal(#"","t":"#)
        out.number(ByteCursor.roundedHalfAway(envelope.t * 1_000_000) / 1_000_000)
        out.literal(#","run":"#)
        out.string(envelope.run)
        guard out.room(80) else { return nil }
        out.literal(#","trace":""#)
        out.hexUnchecked(envelope.trace.high)
        out.hexUnchecked(envelope.trace.low)
        out.literal(#"","span":""#)
        out.hexUnchecked(envelope.span.raw)
        if let session = envelope.session {
            out.literal(#"","session":""#)
            guard out.room(17) else { return nil }
            out.hexUnchecked(session.raw)
        }
        out.byte(UInt8(ascii: "\""))
        if let profile = envelope.profile {
            out.literal(#","profile":"#)
            out.string(profile)
        }
        guard out.room(40) else { return nil }
        out.literal(#","name":""#)
        out.raw(envelope.name.rawValue)
        out.literal(#"","placement":"#)
        if let placement = envelope.placement { out.string(placement) } else { out.literal("null") }
        out.literal(#","attrs":"#)
        out.attributes(envelope.attrs)
        out.byte(UInt8(ascii: "}"))
        return out.failed ? nil : start.distance(to: out.p)
    }

    /// Writes `ISO8601.format(seconds)`: the date and time of day from the cache when the second
    /// is the last one written, then the six fraction digits.
    private mutating func timestamp(_ seconds: Double, to out: inout ByteCursor) {
        let micros = ISO8601.micros(seconds)
        let second = micros / 1_000_000
        if second != dateSecond {
            let f = ISO8601.fields(micros: second * 1_000_000)
            guard (0...9999).contains(f.y) else {
                // Unreachable: `micros` clamps into years 1970...9999. Kept exact all the same.
                dateSecond = -1
                out.raw(ISO8601.format(seconds))
                return
            }
            datePrefix = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 27) { buf in
                ISO8601.fill(buf, f)
                let raw = UnsafeRawPointer(buf.baseAddress!)
                return (raw.loadUnaligned(as: UInt64.self), raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self),
                        raw.loadUnaligned(fromByteOffset: 16, as: UInt32.self))
            }
            dateSecond = second
        }
        // The caller checked room for the whole timestamp.
        let raw = UnsafeMutableRawPointer(out.p)
        raw.storeBytes(of: datePrefix.0, as: UInt64.self)
        raw.storeBytes(of: datePrefix.1, toByteOffset: 8, as: UInt64.self)
        raw.storeBytes(of: datePrefix.2, toByteOffset: 16, as: UInt32.self)
        out.p += 20
        let fraction = UInt64(micros - second * 1_000_000)
        ByteCursor.sixDigits(fraction, at: out.p)
        out.p[6] = UInt8(ascii: "Z")
        out.p += 7
    }
}

extension Envelope {
    /// Appends the envelope as compact JSON to a byte buffer: the same text as
    /// ``appendJSON(to:)-(String)``, for sinks that write bytes (files, sockets). Allocates nothing
    /// for a line up to 1 KiB but what `out` needs to grow.
    public func appendJSON(to out: inout [UInt8]) {
        var writer = EnvelopeLineWriter()
        var capacity = 1024
        while true {
            let written: Bool = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { buf in
                guard let base = buf.baseAddress, let n = writer.write(self, to: base, capacity: capacity) else { return false }
                out.append(contentsOf: UnsafeBufferPointer(start: base, count: n))
                return true
            }
            if written { return }
            capacity *= 4
        }
    }
}

/// A write position in caller-owned memory. Every write checks the room left (the `Unchecked`
/// ones rely on an earlier `room` check); once one does not fit, `failed` is set and the caller
/// discards what was written. Fast paths for the usual envelope; anything else (strings that need
/// escaping, numbers without a short exact form, large objects) is written by `JSONWriter` and
/// copied, so the text is always exactly `JSONWriter`'s.
struct ByteCursor {
    var p: UnsafeMutablePointer<UInt8>
    let end: UnsafeMutablePointer<UInt8>
    var failed = false

    /// Two ASCII digits per value 0...99.
    private static let pairs: StaticString = """
        0001020304050607080910111213141516171819202122232425262728293031323334353637383940414243444546474849\
        5051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899
        """

    init(_ start: UnsafeMutablePointer<UInt8>, capacity: Int) {
        p = start
        end = start + max(0, capacity)
    }

    /// Whether `n` more bytes fit; sets `failed` when they do not.
    @inline(__always)
    mutating func room(_ n: Int) -> Bool {
        if p.distance(to: end) >= n { return true }
        failed = true
        return false
    }

    @inline(__always)
    mutating func byte(_ b: UInt8) {
        guard room(1) else { return }
        p.pointee = b
        p += 1
    }

    /// A literal's bytes.
    @inline(__always)
    mutating func literal(_ text: StaticString) {
        let n = text.utf8CodeUnitCount
        guard room(n) else { return }
        p.update(from: text.utf8Start, count: n)
        p += n
    }

    @inline(__always)
    mutating func bytes(_ source: UnsafePointer<UInt8>, _ count: Int) {
        guard room(count) else { return }
        p.update(from: source, count: count)
        p += count
    }

    /// A string's UTF-8 as it is (no quotes, no escaping).
    mutating func raw(_ s: String) {
        let done: Void? = s.utf8.withContiguousStorageIfAvailable { u in
            if let base = u.baseAddress { bytes(base, u.count) }
        }
        if done == nil { for b in s.utf8 { byte(b) } }
    }

    /// What `JSONWriter` writes for something without a fast path, copied in.
    mutating func viaWriter(_ write: (inout [UInt8]) -> Void) {
        var text: [UInt8] = []
        write(&text)
        text.withUnsafeBufferPointer { if let base = $0.baseAddress { bytes(base, $0.count) } }
    }

    // MARK: strings

    /// A quoted JSON string: copied whole when no byte needs escaping, else as `JSONWriter` writes it.
    mutating func string(_ s: String) {
        let done: Bool? = s.utf8.withContiguousStorageIfAvailable { u in
            let n = u.count
            guard room(n + 2) else { return true }
            guard Self.copyUnescaped(u, to: p + 1) else { return false }
            p[0] = UInt8(ascii: "\"")
            p[n + 1] = UInt8(ascii: "\"")
            p += n + 2
            return true
        }
        if done != true { viaWriter { JSONWriter.writeString(s, to: &$0) } }
    }

    /// Copies `u` to `to` (room checked by the caller) and tells whether no byte needs escaping:
    /// none is a control character, `"`, `\` or 0xE2 (the lead byte of U+2028 and U+2029, which
    /// `JSONWriter` escapes). Eight bytes at a time, without a call to `memcpy`.
    @inline(__always)
    static func copyUnescaped(_ u: UnsafeBufferPointer<UInt8>, to: UnsafeMutablePointer<UInt8>) -> Bool {
        guard let base = u.baseAddress else { return true }
        let from = UnsafeRawPointer(base), out = UnsafeMutableRawPointer(to)
        let n = u.count
        if n >= 8 {
            var i = 0
            var found: UInt64 = 0
            while i + 8 <= n {
                let word = from.loadUnaligned(fromByteOffset: i, as: UInt64.self)
                out.storeBytes(of: word, toByteOffset: i, as: UInt64.self)
                found |= hits(word)
                i += 8
            }
            if i < n {
                // The last, partial word: the last eight bytes, overlapping ones already done.
                let word = from.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self)
                out.storeBytes(of: word, toByteOffset: n - 8, as: UInt64.self)
                found |= hits(word)
            }
            return found == 0
        }
        // Fewer than eight bytes: at most three loads gathered into one word, the rest of it
        // filled with "a" (which needs no escape).
        var word: UInt64 = 0
        var at = 0
        var shift: UInt64 = 0
        if n & 4 != 0 {
            let part = from.loadUnaligned(as: UInt32.self)
            out.storeBytes(of: part, as: UInt32.self)
            word = UInt64(part); at = 4; shift = 32
        }
        if n & 2 != 0 {
            let part = from.loadUnaligned(fromByteOffset: at, as: UInt16.self)
            out.storeBytes(of: part, toByteOffset: at, as: UInt16.self)
            word |= UInt64(part) << shift; at += 2; shift += 16
        }
        if n & 1 != 0 {
            let part = base[at]
            to[at] = part
            word |= UInt64(part) << shift; shift += 8
        }
        return hits(word | 0x6161_6161_6161_6161 << shift) == 0
    }

    /// Not zero when a byte of `x` is below 0x20 or equals 0x22, 0x5C or 0xE2 (exact as a yes/no).
    @inline(__always)
    private static func hits(_ x: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        @inline(__always) func zeroByte(_ v: UInt64) -> UInt64 { (v &- ones) & ~v & highs }
        let below = (x &- ones &* 0x20) & ~x & highs
        return below | zeroByte(x ^ (ones &* 0x22)) | zeroByte(x ^ (ones &* 0x5C)) | zeroByte(x ^ (ones &* 0xE2))
    }

    // MARK: numbers

    /// The decimal digits of `v`; the caller checked room for 20 bytes.
    @inline(__always)
    mutating func unsignedUnchecked(_ v: UInt64) {
        var digits = 1
        var bound: UInt64 = 10
        while digits < 20, v >= bound { digits += 1; bound = bound &* 10 }
        var q = v
        var at = p + digits
        Self.pairs.withUTF8Buffer { table in
            let t = table.baseAddress!
            while q >= 100 {
                let r = Int(q % 100) * 2
                q /= 100
                at -= 2
                at[0] = t[r]; at[1] = t[r + 1]
            }
            if q >= 10 {
                let r = Int(q) * 2
                at -= 2
                at[0] = t[r]; at[1] = t[r + 1]
            } else {
                at -= 1
                at[0] = UInt8(48 + q)
            }
        }
        p += digits
    }

    /// Exactly six digits of `v` (< 1,000,000) at `at`.
    @inline(__always)
    static func sixDigits(_ v: UInt64, at: UnsafeMutablePointer<UInt8>) {
        pairs.withUTF8Buffer { table in
            let t = table.baseAddress!
            let a = Int(v / 10_000) * 2, b = Int(v / 100 % 100) * 2, c = Int(v % 100) * 2
            at[0] = t[a]; at[1] = t[a + 1]; at[2] = t[b]; at[3] = t[b + 1]; at[4] = t[c]; at[5] = t[c + 1]
        }
    }

    /// A number as `JSONWriter.writeNumber` writes it. Fast path for the usual value (a magnitude
    /// in 1e-4..<1e9 with at most six decimals): digits written directly. Such a value is
    /// `k / 10^6` correctly rounded, and below 1e9 doubles are closer together than 1e-6, so `k`
    /// with its trailing zeros trimmed is exactly the shortest round-trip text `description`
    /// gives. Whole numbers below 1e15 are written as integers, as `JSONWriter` does; everything
    /// else goes through `JSONWriter`.
    mutating func number(_ n: Double) {
        guard room(32) else { return }
        let magnitude = abs(n)
        // `n.rounded() == n` without a call into libm: below 2^52 a double is whole exactly when
        // truncating it changes nothing; at or above, every finite double is whole.
        let whole = magnitude < 4_503_599_627_370_496 ? Double(Int64(n)) == n : !n.isNaN
        if !whole, magnitude >= 1e-4, magnitude < 1e9 {
            let scaled = Self.roundedHalfAway(magnitude * 1_000_000)
            if scaled / 1_000_000 == magnitude {
                let k = UInt64(scaled)
                if n < 0 { p.pointee = UInt8(ascii: "-"); p += 1 }
                unsignedUnchecked(k / 1_000_000)
                p.pointee = UInt8(ascii: ".")
                Self.sixDigits(k % 1_000_000, at: p + 1)
                // Trailing zeros trimmed; the fraction is not zero (n is not whole).
                var digits = 6
                while p[digits] == UInt8(ascii: "0") { digits -= 1 }
                p += 1 + digits
                return
            }
        }
        if whole, magnitude < 1e15 {
            // Int64(n) as JSONWriter.writeInteger writes it: -0.0 is "0".
            if n < 0 { p.pointee = UInt8(ascii: "-"); p += 1 }
            unsignedUnchecked(UInt64(magnitude))
            return
        }
        viaWriter { JSONWriter.writeNumber(n, to: &$0) }
    }

    /// `x.rounded()` (to nearest, halves away from zero) without a call into libm, except that
    /// a result of zero may have the other sign (no writer here prints the sign of zero).
    @inline(__always)
    static func roundedHalfAway(_ x: Double) -> Double {
        guard abs(x) < 4_503_599_627_370_496 else { return x.rounded() }  // whole already, or not finite
        let truncated = Double(Int64(x))
        let fraction = x - truncated  // exact
        if fraction >= 0.5 { return truncated + 1 }
        if fraction <= -0.5 { return truncated - 1 }
        return truncated
    }

    // MARK: hex

    /// The 16 lowercase hex digits of `v`; the caller checked room.
    @inline(__always)
    mutating func hexUnchecked(_ v: UInt64) {
        let raw = UnsafeMutableRawPointer(p)
        raw.storeBytes(of: Self.hexDigits(UInt32(truncatingIfNeeded: v >> 32)).bigEndian, as: UInt64.self)
        (raw + 8).storeBytes(of: Self.hexDigits(UInt32(truncatingIfNeeded: v)).bigEndian, as: UInt64.self)
        p += 16
    }

    /// The 8 hex digits of `v` as ASCII bytes in a word, the first digit in the most significant byte.
    @inline(__always)
    static func hexDigits(_ v: UInt32) -> UInt64 {
        var x = UInt64(v)
        // Spread the nibbles one per byte: nibble k (from the least significant) into byte k.
        x = (x & 0xFFFF_0000) << 16 | x & 0xFFFF
        x = (x & 0x0000_FF00_0000_FF00) << 8 | x & 0x0000_00FF_0000_00FF
        x = (x & 0x00F0_00F0_00F0_00F0) << 4 | x & 0x000F_000F_000F_000F
        // "0"...."9" is 0x30 + d; "a"..."f" is 0x30 + d + 0x27.
        let letters = ((x &+ 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101
        return x &+ 0x3030_3030_3030_3030 &+ letters &* 0x27
    }

    // MARK: values

    /// A JSON value as `JSONWriter.write` writes it (objects with sorted keys).
    mutating func value(_ value: JSONValue) {
        switch value {
        case .string(let s): string(s)
        case .number(let n): number(n)
        case .bool(let b): if b { literal("true") } else { literal("false") }
        case .null: literal("null")
        case .object(let members): object(members)
        case .array(let items):
            byte(UInt8(ascii: "["))
            var first = true
            for item in items {
                if !first { byte(UInt8(ascii: ",")) }
                first = false
                self.value(item)
            }
            byte(UInt8(ascii: "]"))
        }
    }

    /// An object with its keys in ascending order (`JSONWriter`'s order). Up to 16 members are
    /// sorted as dictionary indices in a stack buffer; larger objects go through `JSONWriter`.
    mutating func object(_ members: [String: JSONValue]) {
        let n = members.count
        guard n <= 16 else { viaWriter { JSONWriter.write(.object(members), to: &$0) }; return }
        byte(UInt8(ascii: "{"))
        withUnsafeTemporaryAllocation(of: Dictionary<String, JSONValue>.Index.self, capacity: max(n, 1)) { order in
            order.initialize(repeating: members.startIndex)
            defer { order.deinitialize() }
            var count = 0
            var i = members.startIndex
            while i != members.endIndex {
                // Insertion sort: attribute objects are small.
                let key = members[i].key
                var at = count
                while at > 0, key < members[order[at - 1]].key {
                    order[at] = order[at - 1]
                    at -= 1
                }
                order[at] = i
                count += 1
                members.formIndex(after: &i)
            }
            for k in 0..<count {
                if k > 0 { byte(UInt8(ascii: ",")) }
                let member = members[order[k]]
                string(member.key)
                byte(UInt8(ascii: ":"))
                value(member.value)
            }
        }
        byte(UInt8(ascii: "}"))
    }

    /// Event attributes as an object with sorted keys.
    mutating func attributes(_ attrs: EventAttributes) {
        byte(UInt8(ascii: "{"))
        var first = true
        attrs.forEachSorted { key, member in
            if !first { byte(UInt8(ascii: ",")) }
            first = false
            string(key)
            byte(UInt8(ascii: ":"))
            value(member)
        }
        byte(UInt8(ascii: "}"))
    }
}
