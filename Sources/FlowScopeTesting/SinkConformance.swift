import Dispatch
import FlowEvents
import FlowFetch
import FlowJSON
import Foundation

/// The checks every sink must pass, for sink authors: run it from a test of your sink.
///
/// ```swift
/// @Test func auditSinkConforms() throws {
///     let dir = NSTemporaryDirectory() + "audit-\(UUID())"
///     let failures = SinkConformance.check(name: "audit",
///                                          make: { try AuditSink(name: "audit", path: dir + "/a.log") },
///                                          readBack: { try AuditSink.seqs(in: dir + "/a.log") })
///     #expect(failures.isEmpty, "\(failures)")
/// }
/// ```
///
/// What it checks, on fresh sinks from `make`:
/// - the sink has the name it was given and a non-empty type;
/// - fed through a real ``EventPipeline`` (several runs, garbage attributes: huge and odd strings,
///   deep nesting, unknown placements, every event name), it neither crashes nor reports itself
///   down or failing, and loses nothing: the pipeline's stats count every event consumed and none
///   dropped; with `readBack`, what the sink kept is every event once, in seq order;
/// - `consume` returns promptly (1,000 events within 5 s: far more than any sink should need), so it
///   never holds the pipeline's drain thread on I/O it could do later;
/// - `flush()` and `close()` can be called in that order and `close()` again without effect or
///   crash (the pipeline calls `flush` then `close` once; users may call them too);
/// - `health` can be read from another thread while the sink consumes.
public enum SinkConformance {
    /// Runs every check on sinks made by `make` (called more than once); returns what failed, one
    /// line per problem (empty: the sink conforms). `readBack` returns the seqs the sink's last made
    /// instance stored, in stored order, after it was closed; give it for sinks that keep events.
    public static func check(name: String, make: () throws -> any EventSink,
                             readBack: (() throws -> [UInt64])? = nil) -> [String] {
        var failures: [String] = []
        func fail(_ what: String) { failures.append("\(name): \(what)") }

        // Identity.
        do {
            let sink = try make()
            if sink.name != name { fail("name is \(sink.name.debugDescription), expected \(name.debugDescription)") }
            if sink.type.isEmpty { fail("type is empty") }
            sink.close()
        } catch {
            fail("cannot be made: \(error)")
            return failures
        }

        // A pipeline's worth of events, garbage included; health read concurrently.
        do {
            let sink = try make()
            let pipeline = EventPipeline(run: "conformance", sinks: [sink])
            let events = sample()
            let reader = Thread {
                for _ in 0..<200 { _ = pipeline.stats() }
            }
            reader.start()
            pipeline.receive(contentsOf: Array(events[..<(events.count / 2)]))
            pipeline.sink(run: "conformance:other").receive(contentsOf: Array(events[(events.count / 2)...]))
            if !pipeline.waitUntilDrained(timeout: 30) { fail("did not consume \(events.count) events within 30 s") }
            let stats = pipeline.stats()[0]
            if stats.consumed != UInt64(events.count) { fail("consumed \(stats.consumed) of \(events.count) events") }
            if stats.dropped != 0 { fail("lost \(stats.dropped) events (queue drops plus the sink's own)") }
            if !stats.up || stats.errors != 0 {
                fail("reports itself failing after ordinary events: up \(stats.up), errors \(stats.errors), last \(stats.lastError ?? "none")")
            }
            pipeline.shutdown()
            if let readBack {
                let seqs = try readBack()
                if seqs.count != events.count { fail("kept \(seqs.count) of \(events.count) events") }
                if seqs != seqs.sorted() || Set(seqs).count != seqs.count { fail("kept events out of seq order or twice") }
            }
        } catch {
            fail("threw during the pipeline check: \(error)")
        }

        // consume returns promptly; flush, close, close.
        do {
            let sink = try make()
            let batch = sample().prefix(1000).enumerated().map { i, e in Envelope(e, seq: UInt64(i + 1), ts: 1.0e9 + Double(i), run: "direct") }
            let start = DispatchTime.now().uptimeNanoseconds
            sink.consume(Array(batch))
            let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
            if seconds > 5 { fail("consume of 1,000 events took \(seconds) s; it must never hold the pipeline") }
            sink.flush()
            sink.close()
            sink.close()
            _ = sink.health
        } catch {
            fail("threw during the lifecycle check: \(error)")
        }
        return failures
    }

    /// 2,000 engine events: every event name, several placements (and none), garbage attributes.
    static func sample() -> [EngineEvent] {
        let trace = TraceID(high: 0x4bf9_2f35_77b3_4da6, low: 0xa3ce_929d_0e0e_4736)
        let odd: [JSONValue] = [
            .string(String(repeating: "x", count: 10_000)), .string("quote \" backslash \\ newline \n tab \t nul \u{0}"),
            .string("emoji 👩‍💻 and RTL مرحبا"), .number(-0.0), .number(1e308), .number(-1e-308), .bool(false), .null,
            .array([.array([.array([.object(["deep": .array([.null])])])])]), .object(["": .string(""), "a b": .number(1)]),
        ]
        let names = EventName.allCases
        return (0..<2000).map { i in
            let name = names[i % names.count]
            var attrs: [String: JSONValue] = ["i": .number(Double(i))]
            if i % 3 == 0 { attrs["garbage"] = odd[i % odd.count] }
            if i % 7 == 0 { attrs["source"] = odd[(i / 7) % odd.count] }
            let placement: String? = i % 5 == 0 ? nil : ["main_paywall", "onboarding", "p\"quoted\\", "ünïcødé", ""][i % 5]
            return EngineEvent(name: name, t: Double(i) * 0.001, placement: placement, trace: trace,
                               span: SpanID(trace: trace, index: UInt64(i % 40)), attrs: EventAttributes(attrs))
        }
    }
}
