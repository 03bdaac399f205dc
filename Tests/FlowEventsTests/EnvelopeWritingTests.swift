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
}
