import FlowEvents
import FlowFetch
import FlowJSON
import Testing

/// Decodes `envelope` as `flowscope replay` and `POST /api/ingest` read it.
private func decoded(_ envelope: Envelope) throws -> Envelope {
    try Envelope(jsonValue: JSON5.parse(envelope.jsonLine))
}

@Suite("Run names")
struct RunNameTests {
    static let long = String(repeating: "r", count: 300)

    @Test("a valid run name is kept; an empty one becomes the default; both bounds are what decoding accepts")
    func validAndEmpty() {
        for name in ["live", "x", "test: \"quoted\"\n", String(repeating: "é", count: 128)] {
            #expect(Envelope.runName(name) == name)
        }
        #expect(Envelope.runName(String(repeating: "a", count: 256)) == String(repeating: "a", count: 256))
        #expect(Envelope.runName("") == "live")
        #expect(Envelope.runName("", empty: "test") == "test")
        #expect(Envelope.runName("", empty: "") == "live")
        #expect(Envelope.runName("", empty: Self.long).utf8.count == 256)
        #expect(Envelope.isValidRun("x") && Envelope.isValidRun(String(repeating: "a", count: 256)))
        #expect(!Envelope.isValidRun("") && !Envelope.isValidRun(String(repeating: "a", count: 257)))
    }

    @Test("a long name is cut on a Character boundary to 256 bytes, with a stable hash suffix that keeps long names apart")
    func longNames() throws {
        let cut = Envelope.runName(Self.long)
        #expect(cut.utf8.count == 256)
        #expect(cut.hasPrefix(String(repeating: "r", count: 239) + "-"))
        #expect(cut.suffix(16).allSatisfy { $0.isHexDigit && !$0.isUppercase })
        #expect(Envelope.runName(Self.long) == cut, "the same name gives the same run")
        #expect(Envelope.runName(cut) == cut, "a run name made valid stays as it is")
        // Names that share their first 300 bytes and differ after the cut.
        let a = Envelope.runName(Self.long + "a"), b = Envelope.runName(Self.long + "b")
        #expect(a != b && a != cut)
        #expect(a.utf8.count == 256 && b.utf8.count == 256)

        // Multi-byte characters: a family emoji (25 bytes, one Character), a decomposed é (3 bytes).
        for unit in ["👨‍👩‍👧‍👦", "e\u{301}", "日本", "a"] {
            let name = String(repeating: unit, count: 40) + String(repeating: "x", count: 200)
            let run = Envelope.runName(name)
            #expect(run.utf8.count <= 256)
            let kept = String(run.dropLast(17))
            #expect(name.hasPrefix(kept), "cut inside a Character: \(kept.suffix(3))")
            #expect(Array(name).starts(with: Array(kept)))
            #expect(kept.utf8.count > 239 - 25, "as much of the name as fits is kept")
        }
        // One Character longer than the budget: the hash alone.
        let zalgo = "a" + String(repeating: "\u{301}", count: 200)
        #expect(zalgo.count == 1)
        #expect(Envelope.runName(zalgo).utf8.count == 16)

        for name in [Self.long, "", String(repeating: "👨‍👩‍👧‍👦", count: 40), zalgo] {
            let envelope = Envelope(seq: 1, ts: 1_796_000_000, t: 0, run: Envelope.runName(name), trace: TraceID(high: 1, low: 1),
                                    span: SpanID(raw: 1), name: .fetchStart, placement: nil, attrs: [:])
            #expect(throws: Never.self) { try decoded(envelope) }
        }
    }

    @Test("every run the pipeline stamps decodes again: its own run, a view's run and an ingested run, empty or too long")
    func pipelineRuns() throws {
        let a = RecordingSink(name: "a")
        let pipeline = EventPipeline(run: "", sinks: [a])
        let longView = pipeline.sink(run: Self.long)
        let emptyView = pipeline.sink(run: "")
        #expect(longView.run == Envelope.runName(Self.long))
        #expect(emptyView.run == "live")
        pipeline.receive(event(0))
        pipeline.receive(contentsOf: [event(1)])
        longView.receive(event(2))
        longView.receive(contentsOf: [event(3)])
        emptyView.receive(event(4))
        pipeline.ingest([Envelope(event(5), seq: 1, ts: 1_700_000_000, run: ""),
                         Envelope(event(6), seq: 2, ts: 1_700_000_000, run: Self.long + "!"),
                         Envelope(event(7), seq: 3, ts: 1_700_000_000, run: "remote")])
        pipeline.shutdown()
        let got = a.envelopes
        #expect(got.map(index) == Array(0...7))
        #expect(got.map(\.run) == ["live", "live", longView.run, longView.run, "live", "live",
                                   Envelope.runName(Self.long + "!"), "remote"])
        for envelope in got { #expect(try decoded(envelope).run == envelope.run) }

        // A view of a pipeline with another run: an empty view name is that run.
        let other = EventPipeline(run: "test:x", sinks: [])
        #expect(other.sink(run: "").run == "test:x")
        other.shutdown()
    }
}
