import FlowEvents
import FlowJSON
import Foundation
import Synchronization
import TestSupport
import Testing
@testable import FlowScopeCLI

// Two sinks written as a third party writes them: the sink SDK's public API only (FlowEvents), no
// FlowScope sink type. `serve` in a custom distribution (the built-in types plus these factories, as
// `CommandLine.run(_:output:sinks:)` registers them) finds them by capability.

/// An event store of its own: every event in an array. It counts the queries it answers.
final class ListStore: EventSink, EventStore {
    let name: String
    var type: String { "liststore" }
    private let state = Mutex<(events: [Envelope], followers: [Int: @Sendable ([Envelope]) -> Void], next: Int)>(([], [:], 0))
    let queries = Atomic<Int>(0)

    init(name: String) { self.name = name }

    func consume(_ batch: [Envelope]) {
        let followers = state.withLock { state in
            state.events += batch
            return Array(state.followers.values)
        }
        for follower in followers { follower(batch) }
    }

    func events(since: UInt64?, limit: Int, run: String?, placement: String?, name: String?) -> [Envelope] {
        queries.add(1, ordering: .relaxed)
        let matching = state.withLock { $0.events }.filter {
            (since == nil || $0.seq > since!) && (run == nil || $0.run == run) && (placement == nil || $0.placement == placement)
                && (name == nil || $0.name.rawValue == name)
        }
        return Array(since == nil ? matching.suffix(limit) : matching.prefix(limit))
    }

    var latestSeq: UInt64? { state.withLock { $0.events.last?.seq } }

    func runSummaries() -> [RunSummary] {
        queries.add(1, ordering: .relaxed)
        let runs = state.withLock { $0.events }.reduce(into: [String: [Envelope]]()) { $0[$1.run, default: []].append($1) }
        return runs.map { id, events in summary(id, events) }.sorted { $0.lastTs > $1.lastTs }
    }

    func runDetail(id: String) -> RunDetail? {
        queries.add(1, ordering: .relaxed)
        let events = state.withLock { $0.events }.filter { $0.run == id }
        guard !events.isEmpty else { return nil }
        return RunDetail(summary: summary(id, events),
                         eventsByName: events.reduce(into: [:]) { $0[$1.name.rawValue, default: 0] += 1 })
    }

    private func summary(_ id: String, _ events: [Envelope]) -> RunSummary {
        let ends = events.filter { $0.name == .fetchEnd }
        return RunSummary(id: id, firstTs: events.first?.ts ?? 0, lastTs: events.last?.ts ?? 0, events: events.count,
                          fetches: ends.count, errors: ends.filter { $0.attrs["errorCode"] != nil }.count)
    }

    func follow(_ handler: @escaping @Sendable ([Envelope]) -> Void) -> @Sendable () -> Void {
        let token = state.withLock { state in
            state.next += 1
            state.followers[state.next] = handler
            return state.next
        }
        return { [weak self] in _ = self?.state.withLock { $0.followers.removeValue(forKey: token) } }
    }

    struct Factory: SinkFactory {
        let type = "liststore"
        func options(from context: SinkContext) throws(JSONInputError) {}
        func makeSink(_ options: Void, context: SinkContext) -> any EventSink { ListStore(name: context.name) }
    }
}

/// A sink exposing one metric family of its own: events seen, by event name.
final class CountingMetricsSink: EventSink, MetricsExposing {
    let name: String
    let family: String
    var type: String { "counting" }
    private let counts = Mutex<[String: Int]>([:])

    init(name: String, family: String) { self.name = name; self.family = family }

    func consume(_ batch: [Envelope]) {
        counts.withLock { counts in for e in batch { counts[e.name.rawValue, default: 0] += 1 } }
    }

    func exposition(accept: String?) -> (contentType: String, body: [UInt8]) {
        var text = "# HELP \(family) Events this sink saw, by event name.\n# TYPE \(family) counter\n"
        for (event, n) in counts.withLock({ $0 }).sorted(by: { $0.key < $1.key }) { text += "\(family){event=\"\(event)\"} \(n)\n" }
        return ("text/plain; version=0.0.4; charset=utf-8", Array(text.utf8))
    }

    struct Factory: SinkFactory {
        let type = "counting"
        func options(from context: SinkContext) throws(JSONInputError) -> String {
            try context.checkKeys(["family"])
            return try context.string("family") ?? "audit_events_total"
        }
        func makeSink(_ family: String, context: SinkContext) -> any EventSink { CountingMetricsSink(name: context.name, family: family) }
    }
}

@Suite("serve finds its parts by capability: outside sinks back the dashboard API and /metrics", .ownThread)
struct OutsideSinksTests {
    static let factories: [any SinkFactory] = [ListStore.Factory(), CountingMetricsSink.Factory()]
    static let events: [JSONValue] = [
        Events.envelope("fetch.start", placement: "p1", run: "outside", t: 1, attrs: ["call": "getFlow"]),
        Events.fetchEnd("p1", source: "network", duration: 0.25, run: "outside"),
        Events.fetchEnd("p2", source: "fallbackFile", duration: 2, run: "outside", errorCode: "timeout"),
    ]

    @Test("an outside event store answers the dashboard API; an outside sink's family joins /metrics, which promtool accepts")
    func outsideSinksBackTheServer() async throws {
        let fixture = try StackFixture(sinks: #"{ type: "metrics" }, { type: "liststore" }, { type: "counting", name: "audit" }"#,
                                       factories: Self.factories)
        let check = await CommandLine.run(["check-config", fixture.configPath], output: CapturedOutput().output, sinks: Self.factories)
        #expect(check == 0)
        let store = try #require(fixture.stack.live as? ListStore, "the outside store is the live store")
        try #require(fixture.ingest(Events.lines(Self.events)).status == 202)

        let before = store.queries.load(ordering: .relaxed)
        let runs = try fixture.getJSON("/api/runs")["runs"]?.arrayValue ?? []
        #expect(runs.first { $0["id"]?.stringValue == "outside" }?["fetches"]?.intValue == 2)
        let calls = try fixture.getJSON("/api/calls?run=outside")["calls"]?.arrayValue ?? []
        #expect(calls.count == 3, "two ended calls and one still open: \(calls)")
        let placements = try fixture.getJSON("/api/placements?run=outside")["placements"]?.arrayValue ?? []
        #expect(Set(placements.compactMap { $0["placement"]?.stringValue }) == ["p1", "p2"])
        let detail = try fixture.getJSON("/api/runs/outside")
        #expect(detail["eventsByName"]?["fetch.end"]?.intValue == 2, "\(detail)")
        #expect(store.queries.load(ordering: .relaxed) >= before + 4, "every answer read the outside store")

        let text = try fixture.get("/metrics").text
        #expect(text.contains("audit_events_total{event=\"fetch.end\"} 2\n"), "\(text)")
        #expect(text.contains("flowscope_fetches_total{"), "the metrics sink's families are still there")
        #expect(text.contains("flowscope_sink_up{sink=\"audit\"} 1"), "the outside sinks are in the sink stats")
        let promtool = try runProcess("/usr/bin/promtool", ["check", "metrics"], input: Data(text.utf8))
        #expect(promtool.status == 0 && promtool.out.isEmpty && promtool.err.isEmpty, "\(promtool.out)\(promtool.err)")

        // Asked for OpenMetrics, the metrics sink speaks it and the outside sink does not: both answer
        // Prometheus text, so the body stays one format.
        let open = try fixture.get("/metrics", headers: [("Accept", "application/openmetrics-text;version=1.0.0")])
        #expect(open.header("content-type")?.hasPrefix("text/plain") == true)
        #expect(open.text.contains("audit_events_total{event=\"fetch.end\"} 2\n") && !open.text.contains("# EOF"))
    }

    @Test("two sinks exposing one metric family: serve refuses to start, naming the family and both sinks")
    func familyCollision() throws {
        #expect {
            _ = try StackFixture(sinks: #"{ type: "counting", name: "first" }, { type: "counting", name: "second" }"#,
                                 factories: Self.factories)
        } throws: { error in
            "\(error)".contains(#"$.sinks: metric family "audit_events_total" is exposed by both sink "first" and sink "second""#)
        }
        #expect {
            _ = try StackFixture(sinks: #"{ type: "metrics" }, { type: "counting", family: "flowscope_fetches_total" }"#,
                                 factories: Self.factories)
        } throws: { error in
            "\(error)".contains(#"metric family "flowscope_fetches_total" is exposed by both sink "metrics" and sink "counting""#)
        }
    }
}
