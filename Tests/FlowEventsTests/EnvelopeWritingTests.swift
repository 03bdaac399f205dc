import TestSupport
import FlowEvents
import FlowFetch
import FlowJSON
import Testing

@Suite("Envelope writing")
struct EnvelopeWritingTests {
    @Test("ISO 8601 times are written with six fraction digits, padded, in UTC")
    func iso8601() {
        #expect(ISO8601.format(0) == "1970-01-01T00:00:00.000000Z")
        #expect(ISO8601.format(1_796_206_272.345678) == "2026-12-02T10:11:12.345678Z")
        #expect(ISO8601.format(951_782_400.5) == "2000-02-29T00:00:00.500000Z")
        // Times outside 1970...9999 (which ingest refuses) are clamped, never overflowed.
        #expect(ISO8601.format(-1) == "1970-01-01T00:00:00.000000Z")
        #expect(ISO8601.format(253_402_300_800) == "9999-12-31T23:59:59.999999Z")
        #expect(ISO8601.format(.nan) == "1970-01-01T00:00:00.000000Z")
        for seconds in [0, 1.25, 951_782_400.5, 1_796_206_272.345678, 4_102_444_800] {
            var bytes: [UInt8] = []
            ISO8601.append(seconds, to: &bytes)
            #expect(String(decoding: bytes, as: UTF8.self) == ISO8601.format(seconds))
            #expect(ISO8601.parse(ISO8601.format(seconds)).map { abs($0 - seconds) < 1e-6 } == true)
        }
    }

    @Test("a time on a day its month does not have is refused, leap days only in leap years; a leap second is the next second")
    func impossibleDates() {
        for text in ["2026-02-30T00:00:00Z", "2026-04-31T00:00:00Z", "2026-02-29T00:00:00Z", "1900-02-29T00:00:00Z",
                     "2026-06-31T12:00:00.5Z", "2026-09-31T00:00:00Z", "2026-11-31T00:00:00Z", "2026-00-10T00:00:00Z"] {
            #expect(ISO8601.parse(text) == nil, "\(text)")
        }
        #expect(ISO8601.parse("2028-02-29T00:00:00Z") == 1_835_395_200)
        #expect(ISO8601.parse("2000-02-29T00:00:00Z") == 951_782_400)
        #expect(ISO8601.parse("2026-12-31T00:00:00Z") != nil && ISO8601.parse("2026-04-30T00:00:00Z") != nil)
        #expect(ISO8601.parse("2016-12-31T23:59:60Z") == ISO8601.parse("2017-01-01T00:00:00Z"))
    }

    @Test("an envelope written as bytes is the same line as its jsonLine")
    func bytesMatchLine() {
        let trace = TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e4736")!
        let envelopes = [
            Envelope(seq: 1842, ts: 1_796_206_272.345678, t: 4.5, run: "live", trace: trace, span: SpanID(hex: "00f067aa0ba902b7")!,
                     name: .timeout, placement: "main_paywall", attrs: ["stage": "targeted", "budget": 4.5, "elapsed": 4.5]),
            Envelope(seq: 1, ts: 0, t: 1.0 / 3, run: "test: \"quoted\"\n", trace: trace, span: SpanID(raw: 1),
                     name: .preloadEnd, placement: nil, attrs: ["failed": ["a\u{2028}": 2001], "succeeded": ["x", "y"]]),
        ]
        for envelope in envelopes {
            var bytes: [UInt8] = []
            envelope.appendJSON(to: &bytes)
            #expect(String(decoding: bytes, as: UTF8.self) == envelope.jsonLine)
        }
    }

    @Test("session and profile are written after span only when present; without them the line is the one written before they existed")
    func sessionAndProfileKeys() {
        var envelope = Envelope(seq: 7, ts: 1_796_206_272.5, t: 1.5, run: "live",
                                trace: TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e4736")!, span: SpanID(hex: "00f067aa0ba902b7")!,
                                name: .cacheMiss, placement: nil, attrs: [:])
        let before = #"{"seq":7,"ts":"2026-12-02T10:11:12.500000Z","t":1.5,"run":"live","trace":"4bf92f3577b34da6a3ce929d0e0e4736","span":"00f067aa0ba902b7","name":"cache.miss","placement":null,"attrs":{}}"#
        #expect(envelope.jsonLine == before)
        envelope.session = SessionID(hex: "0123456789abcdef")
        envelope.profile = "a1b2c3d4e5f60718"
        let after = #"{"seq":7,"ts":"2026-12-02T10:11:12.500000Z","t":1.5,"run":"live","trace":"4bf92f3577b34da6a3ce929d0e0e4736","span":"00f067aa0ba902b7","session":"0123456789abcdef","profile":"a1b2c3d4e5f60718","name":"cache.miss","placement":null,"attrs":{}}"#
        #expect(envelope.jsonLine == after)
        var bytes: [UInt8] = []
        envelope.appendJSON(to: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == after)
        envelope.session = nil
        envelope.profile = "plain \"id\""
        #expect(envelope.jsonLine.contains(#""span":"00f067aa0ba902b7","profile":"plain \"id\"","name""#))
        bytes = []
        envelope.appendJSON(to: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == envelope.jsonLine)
        #expect(envelope.jsonValue.objectValue?["session"] == nil)
    }

    @Test("random envelopes (escapes, unicode, 0-20 attributes, nested values) write the same bytes as their jsonLine")
    func randomBytesMatchLine() {
        var rng = SplitMix64(seed: 7)
        let pieces = ["a", "main_paywall", "é", "\"", "\\", "\n", "\u{01}", "\u{2028}", "\u{2029}", "\u{E2}x", "日本", "🙂", " ", "z9", "_"]
        func text() -> String { (0..<Int(rng.next() % 5)).map { _ in pieces[Int(rng.next() % UInt64(pieces.count))] }.joined() }
        func value(depth: Int) -> JSONValue {
            switch rng.next() % (depth > 1 ? 4 : 6) {
            case 0: return .string(text())
            case 1:
                let fixed: [Double] = [0, -1, 12.5, 1.0 / 3, 1e300, -0.0, .nan, .infinity, 4.5e15, 123_456, 0.1, 0.30000000000000004,
                                       1e-4, 9.999e-5, 999_999_999.999999, 1e9 + 0.5, -0.000123, 2.675, 1.005]
                switch rng.next() % 4 {
                case 0: return .number(fixed[Int(rng.next() % UInt64(fixed.count))])
                // Decimals with up to 7 places and random magnitudes, and arbitrary doubles.
                case 1: return .number(Double(Int64(bitPattern: rng.next()) % 10_000_000_000) / [1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7][Int(rng.next() % 8)])
                case 2: return .number(Double(bitPattern: rng.next()))
                default: return .number(Double(rng.next() % 1_000_000) * 1e-6 * [1, 1e-3, 1e3, 1e6][Int(rng.next() % 4)])
                }
            case 2: return .bool(rng.next() % 2 == 0)
            case 3: return .null
            case 4: return .array((0..<Int(rng.next() % 3)).map { _ in value(depth: depth + 1) })
            default: return .object(Dictionary((0..<Int(rng.next() % 3)).map { _ in (text(), value(depth: depth + 1)) }, uniquingKeysWith: { a, _ in a }))
            }
        }
        let names = EventName.allCases
        for i in 0..<5000 {
            let count = Int(rng.next() % 21)
            let attrs = Dictionary((0..<count).map { _ in (text(), value(depth: 0)) }, uniquingKeysWith: { a, _ in a })
            let envelope = Envelope(seq: rng.next() >> 1, ts: Double(rng.next() % 4_000_000_000) + 0.25, t: Double(i) / 7,
                                    run: text(), trace: TraceID(high: rng.next(), low: rng.next()), span: SpanID(raw: rng.next()),
                                    name: names[Int(rng.next() % UInt64(names.count))],
                                    placement: rng.next() % 4 == 0 ? nil : text(), attrs: EventAttributes(attrs),
                                    session: rng.next() % 2 == 0 ? nil : SessionID(raw: rng.next() | 1),
                                    profile: rng.next() % 3 == 0 ? nil : text())
            var bytes: [UInt8] = [1, 2]
            envelope.appendJSON(to: &bytes)
            #expect(Array(bytes.dropFirst(2)) == Array(envelope.jsonLine.utf8), "envelope \(i)")
        }
    }
}

