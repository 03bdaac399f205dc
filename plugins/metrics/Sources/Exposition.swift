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
