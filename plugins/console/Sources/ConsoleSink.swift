import FlowEvents
import FlowFetch
import FlowJSON
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Prints events as a readable timeline, one line per event:
///
/// ```
///   4.500s  main_paywall  timeout  budget=4.5 elapsed=4.5 stage=targeted
///   0.012s  [test:checkout]  main_paywall  fetch.end  source=cache ...
/// ```
/// Time is the engine clock `t`; the run is shown in brackets unless it is `live`; placement is
/// `-` when absent; attributes follow sorted by key. Colour (event names by kind, dim times) is
/// used only when `color` allows it, see `ConsoleSink.usesColor`.
public final class ConsoleSink: EventSink {
    /// The type name in the config's `sinks` list.
    public static let type = "console"

    /// When to colour the output.
    public enum ColorMode: String, Sendable, CaseIterable {
        /// Colour when writing to a terminal and NO_COLOR is not set (the default).
        case auto
        /// Always colour (even with NO_COLOR set: an explicit choice wins).
        case always
        /// Never colour.
        case never
    }

    /// Where the lines go.
    public enum Stream: String, Sendable, CaseIterable {
        case stdout, stderr
        var fileDescriptor: Int32 { self == .stdout ? 1 : 2 }
    }

    /// The sink's name in metrics and logs.
    public let name: String
    /// Whether lines carry ANSI colour codes (decided once, at creation).
    public let colored: Bool
    private let writer: @Sendable (String) -> Void

    /// A console sink writing through `writer` (one call per batch, lines ending in `\n`).
    /// - Parameters:
    ///   - isTerminal: whether the destination is a terminal (for `auto`).
    ///   - environment: the process environment (for NO_COLOR).
    public init(name: String = "console", color: ColorMode = .auto, isTerminal: Bool,
                environment: [String: String] = ProcessInfo.processInfo.environment,
                writer: @escaping @Sendable (String) -> Void) {
        self.name = name
        self.colored = Self.usesColor(color, isTerminal: isTerminal, environment: environment)
        self.writer = writer
    }

    /// A console sink writing to standard output or standard error.
    public convenience init(name: String = "console", color: ColorMode = .auto, stream: Stream = .stdout) {
        self.init(name: name, color: color, fileDescriptor: stream.fileDescriptor)
    }

    /// A console sink writing to an open file descriptor (not closed by the sink); `auto` colour
    /// asks `isatty` about it.
    public convenience init(name: String = "console", color: ColorMode = .auto, fileDescriptor fd: Int32,
                            environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.init(name: name, color: color, isTerminal: isatty(fd) == 1, environment: environment) { text in
            var text = text
            text.withUTF8 { bytes in
                guard let base = bytes.baseAddress else { return }
                var offset = 0
                while offset < bytes.count {
                    let n = write(fd, base + offset, bytes.count - offset)
                    if n < 0 { if errno == EINTR { continue } else { return } }
                    offset += n
                }
            }
        }
    }

    /// The colour rule: `never` -> no; `always` -> yes; `auto` -> only on a terminal and only
    /// when NO_COLOR is unset or empty (no-color.org).
    public static func usesColor(_ mode: ColorMode, isTerminal: Bool, environment: [String: String]) -> Bool {
        switch mode {
        case .never: false
        case .always: true
        case .auto: isTerminal && (environment["NO_COLOR"] ?? "").isEmpty
        }
    }

    /// `console`.
    public var type: String { Self.type }

    /// Writes the batch's lines in one call.
    public func consume(_ batch: [Envelope]) {
        var out = ""
        out.reserveCapacity(batch.count * 96)
        for envelope in batch { Self.appendLine(envelope, colored: colored, to: &out) }
        writer(out)
    }

    /// Nothing is buffered.
    public func flush() {}

    /// One timeline line for `envelope`, with its trailing newline.
    public static func line(_ envelope: Envelope, colored: Bool = false) -> String {
        var out = ""
        appendLine(envelope, colored: colored, to: &out)
        return out
    }

    private static func appendLine(_ e: Envelope, colored: Bool, to out: inout String) {
        let time = formatSeconds(e.t) + "s"
        out += String(repeating: " ", count: max(0, 8 - time.count))
        out += colored ? "\u{1B}[2m" + time + "\u{1B}[0m" : time
        if e.run != "live" { out += "  [" + e.run + "]" }
        out += "  " + (e.placement ?? "-") + "  "
        if colored, let code = colorCode(e) { out += "\u{1B}[" + code + "m" + e.name.rawValue + "\u{1B}[0m" } else { out += e.name.rawValue }
        for (i, key) in e.attrs.keys.sorted().enumerated() {
            out += i == 0 ? "  " : " "
            out += key + "=" + formatValue(e.attrs[key] ?? .null)
        }
        out += "\n"
    }

    /// Red for failures, yellow for degradations, green for successful fetches, cyan for starts.
    private static func colorCode(_ e: Envelope) -> String? {
        switch e.name {
        case .fetchEnd: (e.attrs["errorCode"].map { $0 != .null } ?? false) ? "31" : "32"
        case .timeout, .cacheCorrupt, .sinkDropped, .attributionTimeout: "31"
        case .fallback, .cacheExpired, .paramClamped: "33"
        case .fetchStart, .preloadStart: "36"
        default: nil
        }
    }

    private static func formatValue(_ value: JSONValue) -> String {
        switch value {
        case .string(let s):
            let plain = !s.isEmpty && s.unicodeScalars.allSatisfy { $0.value > 0x20 && $0 != "\"" && $0 != "=" && $0.value != 0x7F }
            return plain ? s : value.jsonText
        case .number(let n): return formatNumber(n)
        default: return value.jsonText
        }
    }

    private static func formatNumber(_ n: Double) -> String {
        var s = ""
        JSONWriter.writeNumber((n * 1_000_000).rounded() / 1_000_000, to: &s)
        return s
    }

    /// Seconds with three decimals.
    private static func formatSeconds(_ t: Double) -> String {
        guard t.isFinite else { return "?" }
        let millis = Int64((t * 1000).rounded())
        let sign = millis < 0 ? "-" : ""
        let a = abs(millis)
        let frac = String(a % 1000)
        return sign + String(a / 1000) + "." + String(repeating: "0", count: 3 - frac.count) + frac
    }
}

extension ConsoleSink {
    /// The `console` sink type. Options: `color` (`auto`, `always`, `never`; default `auto`),
    /// `stream` (`stdout` or `stderr`; default `stdout`).
    public struct Factory: SinkFactory {
        /// The options of a `console` entry.
        public struct Options: Sendable, Equatable {
            public var color = ColorMode.auto
            public var stream = Stream.stdout
        }

        /// `console`.
        public let type = ConsoleSink.type

        /// The factory.
        public init() {}

        /// Reads `color` and `stream`.
        public func options(from context: SinkContext) throws(JSONInputError) -> Options {
            try context.checkKeys(["color", "stream"])
            var o = Options()
            o.color = try context.choice("color", ColorMode.allCases.map(\.rawValue)).flatMap(ColorMode.init(rawValue:)) ?? o.color
            o.stream = try context.choice("stream", Stream.allCases.map(\.rawValue)).flatMap(Stream.init(rawValue:)) ?? o.stream
            return o
        }

        /// A console sink on the chosen stream.
        public func makeSink(_ options: Options, context: SinkContext) -> any EventSink {
            ConsoleSink(name: context.name, color: options.color, stream: options.stream)
        }
    }
}
