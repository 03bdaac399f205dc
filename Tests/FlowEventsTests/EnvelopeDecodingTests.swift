import FlowEvents
import FlowFetch
import FlowJSON
import Testing

@Suite("Envelope decoding")
struct EnvelopeDecodingTests {
    let sample = Envelope(seq: 1842, ts: 1_796_206_272.345678, t: 4.5, run: "live",
                          trace: TraceID(hex: "4bf92f3577b34da6a3ce929d0e0e4736")!, span: SpanID(hex: "00f067aa0ba902b7")!,
                          name: .timeout, placement: "main_paywall", attrs: ["stage": "targeted", "budget": 4.5, "elapsed": 4.5])

    @Test("an envelope's own JSON reads back to the same envelope")
    func roundTrip() throws {
        let back = try Envelope(jsonValue: sample.jsonValue)
        #expect(back.jsonLine == sample.jsonLine)
        #expect(back.seq == 1842 && back.trace == sample.trace && back.span == sample.span && back.name == .timeout)
        #expect(abs(back.ts - sample.ts) < 1e-6)
    }

    @Test("session and profile read back as written, and an envelope without them reads back without them")
    func sessionRoundTrip() throws {
        var withBoth = sample
        withBoth.session = SessionID(hex: "0123456789abcdef")
        withBoth.profile = "a1b2c3d4e5f60718"
        let back = try Envelope(jsonValue: JSON5.parse(withBoth.jsonLine))
        #expect(back.session == SessionID(raw: 0x0123_4567_89ab_cdef))
        #expect(back.profile == "a1b2c3d4e5f60718")
        #expect(back.jsonLine == withBoth.jsonLine)
        let without = try Envelope(jsonValue: JSON5.parse(sample.jsonLine))
        #expect(without.session == nil && without.profile == nil)
        #expect(without.jsonLine == sample.jsonLine)
        var plain = sample
        plain.profile = "user-42"
        #expect(try Envelope(jsonValue: plain.jsonValue).profile == "user-42")
    }

    @Test("a bad session or profile is refused, naming $.session or $.profile")
    func badSessionAndProfile() {
        func message(_ key: String, _ value: JSONValue) -> String? {
            var object = sample.jsonValue.objectValue ?? [:]
            object[key] = value
            do { _ = try Envelope(jsonValue: .object(object)) } catch { return error.description }
            return nil
        }
        for bad: JSONValue in ["0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0", "0000000000000000", "xyz", 12, .null] {
            #expect(message("session", bad)?.hasPrefix("$.session: expected 16 lowercase hex characters, not all zero") == true, "\(bad)")
        }
        for bad: JSONValue in ["", .string(String(repeating: "p", count: ProfileTag.maxPlainBytes + 1)), 42, .null, ["a"]] {
            #expect(message("profile", bad)?.hasPrefix("$.profile: expected a profile id of 1 to 128 bytes") == true, "\(bad)")
        }
        #expect(message("session", "00000000000000ff") == nil)
        #expect(message("profile", .string(String(repeating: "p", count: ProfileTag.maxPlainBytes))) == nil)
    }

    @Test("bad fields are errors naming their path")
    func errors() {
        func message(_ edit: (inout [String: JSONValue]) -> Void) -> String? {
            var object = sample.jsonValue.objectValue ?? [:]
            edit(&object)
            do { _ = try Envelope.decodeAll([.object(object)]) } catch { return error.description }
            return nil
        }
        #expect(message { $0["trace"] = "4BF92F3577B34DA6A3CE929D0E0E4736" } == "$[0].trace: expected 32 lowercase hex characters, not all zero")
        #expect(message { $0["span"] = "0000000000000000" } == "$[0].span: expected 16 lowercase hex characters, not all zero")
        #expect(message { $0["name"] = "fetch.begin" } == "$[0].name: unknown event name \"fetch.begin\"")
        #expect(message { $0["ts"] = "yesterday" }?.hasPrefix("$[0].ts: expected an ISO 8601 UTC time") == true)
        #expect(message { $0["run"] = nil } == "$[0].run: required key is missing")
        #expect(message { $0["extra"] = 1 }?.hasPrefix("$[0].extra: unknown key") == true)
        #expect(message { $0["attrs"] = [1] } == "$[0].attrs: expected an object, got [1]")
        #expect(message { $0["seq"] = -1 } == "$[0].seq: expected a non-negative integer, got -1")
        #expect(message { $0["placement"] = .null } == nil)
        #expect(message { $0["seq"] = nil; $0["attrs"] = nil } == nil)
    }
}
