import FlowJSON
import FlowScopeTools
import FlowFetch
import Testing

@Suite("FlowTimeline: calls and engine-level activity")
struct FlowTimelineTests {
    static let call = TraceID(high: 1, low: 1), attribution = TraceID(high: 1, low: 2), orphan = TraceID(high: 1, low: 3)

    static func event(_ name: EventName, _ t: Double, _ trace: TraceID, span: UInt64 = 1, placement: String? = nil,
                      _ attrs: EventAttributes = [:]) -> EngineEvent {
        EngineEvent(name: name, t: t, placement: placement, trace: trace, span: SpanID(raw: span), attrs: attrs)
    }

    /// A getFlow, an attribution observed on its own (no fetch), and the request of a trace whose call event is missing.
    static let events = [
        event(.fetchStart, 0, call, placement: "main", ["call": "getFlow"]),
        event(.attributionApplied, 0.5, attribution, ["source": "appleAds", "after": 0.5]),
        event(.fetchEnd, 1, call, placement: "main", ["call": "getFlow", "source": "network", "variation": "v-A", "audience": "All"]),
        event(.requestStart, 2, orphan, span: 2, placement: "promo", ["kind": "targeted"]),
    ]

    @Test("a trace with fetch.* or preload.* is a call; attribution.applied alone, or requests alone, are not")
    func isCall() {
        let timeline = FlowTimeline(events: Self.events)
        #expect(timeline.calls.map(\.isCall) == [true, false, false])
        #expect(timeline.lastCall()?.trace == Self.call)
    }

    @Test("text: activity is a line at its time without `never` or `pending`; requests without a call event say so")
    func text() {
        let text = FlowTimeline(events: Self.events).text(events: false)
        #expect(text == """
              0.000s -> 1.000s  getFlow main  network v-A (All)  (0 requests)
              0.500s  attribution.applied  after=0.5 source="appleAds"
              2.000s  requests of trace \(Self.orphan.hex), which has no call event
                    2.000s -> never  targeted promo  open

            """, "\(text)")
    }

    @Test("text: a failed preload says networkFailed and each failing placement's code; its events name their placement")
    func preloadText() {
        let preload = TraceID(high: 2, low: 1)
        let events = [
            Self.event(.preloadStart, 0, preload, ["call": "preloadFlows", "placements": ["main", "promo"]]),
            Self.event(.requestStart, 0, preload, span: 2, placement: "main", ["kind": "targeted"]),
            Self.event(.requestStart, 0, preload, span: 3, placement: "promo", ["kind": "targeted"]),
            Self.event(.requestEnd, 0.2, preload, span: 2, placement: "main", ["kind": "targeted", "outcome": "ok"]),
            Self.event(.requestEnd, 0.2, preload, span: 3, placement: "promo", ["kind": "targeted", "outcome": "http:404"]),
            Self.event(.preloadEnd, 0.2, preload, ["call": "preloadFlows", "succeeded": ["main"], "failed": .object(["promo": 2003])]),
        ]
        let text = FlowTimeline(events: events).text()
        #expect(text == """
              0.000s -> 0.200s  preloadFlows  error 2005 networkFailed (promo 2003)  (2 requests)
                    0.000s -> 0.200s  targeted main  ok
                    0.000s -> 0.200s  targeted promo  http:404
                      0.000s preload.start  call="preloadFlows" placements=["main","promo"]
                      0.000s request.start main  kind="targeted"
                      0.000s request.start promo  kind="targeted"
                      0.200s request.end main  kind="targeted" outcome="ok"
                      0.200s request.end promo  kind="targeted" outcome="http:404"
                      0.200s preload.end  call="preloadFlows" failed={"promo":2003} succeeded=["main"]

            """, "\(text)")
        // A getFlow's events all share its placement: not repeated.
        #expect(FlowTimeline(events: Self.events).text().contains("          0.000s fetch.start  call=\"getFlow\"\n"))
    }

    @Test("json: only calls are results, numbered among themselves; activity's events and requests have step null")
    func json() {
        let o = FlowTimeline(events: Self.events).json()
        let results = o["results"]?.arrayValue ?? []
        #expect(results.count == 1)
        #expect(results.first?["step"] == .number(0) && results.first?["call"] == .string("getFlow"))
        let steps = (o["events"]?.arrayValue ?? []).map { $0["step"] ?? .string("missing") }
        #expect(steps == [.number(0), .number(0), .null, .null], "\(steps)")
        #expect((o["requests"]?.arrayValue ?? []).map { $0["step"] } == [.null])
    }

    /// A trace file's `t` is any finite number: `flowscope replay` trapped (Double to Int) printing a
    /// request whose time was 1e300 or 2^64 seconds after the first call's.
    @Test("text: times too far apart for an Int are printed as numbers, not a trap", arguments: [1e300, 18446744073709551616.0, -1e300])
    func hugeTimes(_ far: Double) {
        let events = [
            Self.event(.fetchStart, 0, Self.call, placement: "main", ["call": "getFlow"]),
            Self.event(.requestStart, 0, Self.call, span: 2, placement: "main", ["kind": "targeted"]),
            Self.event(.requestEnd, far, Self.call, span: 2, placement: "main", ["kind": "targeted", "outcome": "ok"]),
            Self.event(.fetchEnd, far, Self.call, placement: "main", ["call": "getFlow", "source": "network", "variation": "v-A"]),
        ]
        let text = FlowTimeline(events: events).text(events: true)
        #expect(text.contains("\(far)s"), "\(text)")
    }
}
