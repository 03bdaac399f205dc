/// The two text formats a scrape can ask for, and how to choose between them.
public enum Exposition {
    /// A wire format for `/metrics`.
    public enum Format: Sendable, Hashable {
        /// Prometheus text format 0.0.4.
        case prometheusText
        /// OpenMetrics 1.0 text (`# EOF` at the end; counters typed by family name without `_total`).
        case openMetrics

        /// The `Content-Type` header value for this format.
        public var contentType: String {
            switch self {
            case .prometheusText: Exposition.prometheusContentType
            case .openMetrics: Exposition.openMetricsContentType
            }
        }
    }

    /// `Content-Type` of Prometheus text format 0.0.4.
    public static let prometheusContentType = "text/plain; version=0.0.4; charset=utf-8"
    /// `Content-Type` of OpenMetrics 1.0.
    public static let openMetricsContentType = "application/openmetrics-text; version=1.0.0; charset=utf-8"

    /// Picks the format for a scrape from its `Accept` header: OpenMetrics when the header lists
    /// `application/openmetrics-text` (with a non-zero `q`), Prometheus text otherwise.
    ///
    ///     Exposition.negotiate(accept: "application/openmetrics-text;version=1.0.0,text/plain;q=0.5")
    ///     // (contentType: "application/openmetrics-text; version=1.0.0; charset=utf-8", format: .openMetrics)
    public static func negotiate(accept: String?) -> (contentType: String, format: Format) {
        guard let accept else { return (prometheusContentType, .prometheusText) }
        for range in accept.split(separator: ",") {
            let parts = range.split(separator: ";")
            guard let type = parts.first,
                  type.trimmingSpaces().lowercased() == "application/openmetrics-text" else { continue }
            var quality = 1.0
            for parameter in parts.dropFirst() {
                let p = parameter.trimmingSpaces().lowercased()
                if p.hasPrefix("q="), let q = Double(p.dropFirst(2)) { quality = q }
            }
            if quality > 0 { return (openMetricsContentType, .openMetrics) }
        }
        return (prometheusContentType, .prometheusText)
    }
}

extension Substring {
    func trimmingSpaces() -> Substring {
        var s = self
        while let c = s.first, c == " " || c == "\t" { s = s.dropFirst() }
        while let c = s.last, c == " " || c == "\t" { s = s.dropLast() }
        return s
    }
}

/// Byte-level writing of the text formats: numbers Prometheus parses, escaping done right.
enum TextOut {
    /// Most bytes `TextCursor.uint` writes (`UInt64.max` has 20 digits).
    static let maxUInt = 20
    /// Most bytes `TextCursor.double` writes (the longest shortest-round-trip form has 24).
    static let maxDouble = 32

    /// Appends what `body` writes straight into `out`'s spare capacity (nothing zero-filled first),
    /// after making sure there are at least `minimum` bytes of it (doubling the capacity if not).
    /// `body` gets a cursor at the end of `out` whose `room` is the spare capacity; it must not
    /// write more than `room`.
    static func append(to out: inout [UInt8], minimum: Int, _ body: (inout TextCursor) -> Void) {
        let needed = out.count + minimum
        if out.capacity < needed { out.reserveCapacity(max(needed, out.capacity * 2)) }
        withoutActuallyEscaping(body) { body in out.append(contentsOf: BoundedText(minimum: minimum, body: body)) }
    }

    /// Appends an unsigned integer in decimal.
    @inline(__always)
    static func uint(_ value: UInt64, to out: inout [UInt8]) {
        if value < 10 { out.append(48 &+ UInt8(truncatingIfNeeded: value)); return }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { tmp in
            var v = value, i = 20
            while v > 0 { i -= 1; tmp[i] = 48 &+ UInt8(truncatingIfNeeded: v % 10); v /= 10 }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: tmp[i..<20]))
        }
    }

    /// Appends a sample value: `+Inf`, `-Inf`, `NaN`, whole numbers without a fraction or exponent,
    /// others in Swift's shortest round-trip form (which Go's ParseFloat reads).
    static func double(_ value: Double, to out: inout [UInt8]) {
        if value.isNaN { out.append(contentsOf: "NaN".utf8); return }
        if value.isInfinite { out.append(contentsOf: (value > 0 ? "+Inf" : "-Inf").utf8); return }
        if value.rounded() == value, abs(value) < 1e15 {
            if value < 0 { out.append(UInt8(ascii: "-")) }
            uint(UInt64(abs(value)), to: &out)
            return
        }
        out.append(contentsOf: value.description.utf8)
    }

    /// The text of a bucket bound for the `le` label; OpenMetrics wants canonical floats (`1.0`).
    static func bound(_ value: Double, format: Exposition.Format) -> String {
        var bytes: [UInt8] = []
        double(value, to: &bytes)
        var text = String(decoding: bytes, as: UTF8.self)
        if format == .openMetrics, value.isFinite, !text.contains("."), !text.contains("e") { text += ".0" }
        return text
    }

    /// Appends a label value escaped for both formats: `\\`, `\"` and `\n`.
    static func labelValue(_ value: String, to out: inout [UInt8]) {
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "\\"))
            case UInt8(ascii: "\""): out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "\""))
            case UInt8(ascii: "\n"): out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "n"))
            default: out.append(byte)
            }
        }
    }

    /// Appends HELP text escaped: `\\` and `\n`; OpenMetrics also escapes `\"`.
    static func help(_ text: String, format: Exposition.Format, to out: inout [UInt8]) {
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "\\"))
            case UInt8(ascii: "\n"): out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "n"))
            case UInt8(ascii: "\"") where format == .openMetrics:
                out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "\""))
            default: out.append(byte)
            }
        }
    }

    /// The inner label text of a series, `a="x",b="y"` (no braces), escaped.
    static func labelPairs(names: [String], values: [String]) -> [UInt8] {
        var out: [UInt8] = []
        for (i, name) in names.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: name.utf8)
            out.append(contentsOf: "=\"".utf8)
            labelValue(values[i], to: &out)
            out.append(UInt8(ascii: "\""))
        }
        return out
    }

    /// Appends `# HELP`, `# TYPE` and (OpenMetrics, when given) `# UNIT` lines.
    static func header(name: String, help: String, type: String, unit: String?, format: Exposition.Format,
                       to out: inout [UInt8]) {
        out.append(contentsOf: "# HELP ".utf8)
        out.append(contentsOf: name.utf8)
        out.append(UInt8(ascii: " "))
        TextOut.help(help, format: format, to: &out)
        out.append(contentsOf: "\n# TYPE ".utf8)
        out.append(contentsOf: name.utf8)
        out.append(UInt8(ascii: " "))
        out.append(contentsOf: type.utf8)
        out.append(UInt8(ascii: "\n"))
        if format == .openMetrics, let unit {
            out.append(contentsOf: "# UNIT ".utf8)
            out.append(contentsOf: name.utf8)
            out.append(UInt8(ascii: " "))
            out.append(contentsOf: unit.utf8)
            out.append(UInt8(ascii: "\n"))
        }
    }
}

/// A write position in reserved memory, and the end of that memory.
struct TextCursor {
    var position: UnsafeMutablePointer<UInt8>
    let end: UnsafeMutablePointer<UInt8>

    /// Bytes left before `end`.
    @inline(__always)
    var room: Int { end - position }

    @inline(__always)
    mutating func byte(_ value: UInt8) {
        position.initialize(to: value)
        position += 1
    }

    @inline(__always)
    mutating func copy(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let base = bytes.baseAddress else { return }
        position.initialize(from: base, count: bytes.count)
        position += bytes.count
    }

    @inline(__always)
    mutating func copy(_ bytes: [UInt8]) {
        bytes.withUnsafeBufferPointer { copy($0) }
    }

    /// Writes an unsigned integer in decimal (at most `TextOut.maxUInt` bytes).
    @inline(__always)
    mutating func uint(_ value: UInt64) {
        if value < 10 { byte(48 &+ UInt8(truncatingIfNeeded: value)); return }
        var digits = 2
        var limit: UInt64 = 100
        while digits < 20, value >= limit { digits += 1; limit &*= 10 }
        var v = value
        var i = digits
        while i > 0 {
            i -= 1
            let q = v / 10
            position[i] = 48 &+ UInt8(truncatingIfNeeded: v &- q &* 10)
            v = q
        }
        position += digits
    }

    /// Writes a sample value as `TextOut.double` does (at most `TextOut.maxDouble` bytes).
    mutating func double(_ value: Double) {
        if value.rounded() == value, abs(value) < 1e15 {
            if value < 0 { byte(UInt8(ascii: "-")) }
            uint(UInt64(abs(value)))
            return
        }
        if value.isNaN { copy(TextOut.nan); return }
        if value.isInfinite { copy(value > 0 ? TextOut.plusInf : TextOut.minusInf); return }
        var text = value.description
        text.withUTF8 { copy($0) }
    }
}

/// The non-finite sample values, as `TextOut.double` writes them.
extension TextOut {
    static let nan = Array("NaN".utf8)
    static let plusInf = Array("+Inf".utf8)
    static let minusInf = Array("-Inf".utf8)
}

/// The bytes a render writes, as a sequence `Array.append(contentsOf:)` copies by handing over its
/// spare capacity (`_copyContents`): the render writes in place, nothing is zero-filled first.
struct BoundedText: Sequence {
    let minimum: Int
    let body: (inout TextCursor) -> Void

    func makeIterator() -> IndexingIterator<[UInt8]> {
        // Only reached if the array offered less than `minimum` bytes of spare capacity: render to a copy.
        let bytes = [UInt8](unsafeUninitializedCapacity: minimum) { buffer, count in
            guard let base = buffer.baseAddress else { count = 0; return }
            var cursor = TextCursor(position: base, end: base + buffer.count)
            body(&cursor)
            count = cursor.position - base
        }
        return bytes.makeIterator()
    }

    var underestimatedCount: Int { 0 }

    func _copyContents(initializing buffer: UnsafeMutableBufferPointer<UInt8>)
        -> (IndexingIterator<[UInt8]>, UnsafeMutableBufferPointer<UInt8>.Index) {
        guard buffer.count >= minimum, let base = buffer.baseAddress else { return (makeIterator(), buffer.startIndex) }
        var cursor = TextCursor(position: base, end: base + buffer.count)
        body(&cursor)
        return ([UInt8]().makeIterator(), cursor.position - base)
    }
}
