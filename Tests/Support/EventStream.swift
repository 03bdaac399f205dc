import FlowEvents
import FlowFetch
import FlowJSON

/// Random event streams as several engines would send them at once: interleaved runs and traces,
/// fetches and preloads naming several placements, errors, timeouts, and then damaged the way
/// transport damages them: events missing (a start, an end, a request.start), ends repeated, and
/// arrival out of order. Seq numbers are given in arrival order, as the pipeline gives them.
public struct EventStream: Sendable {
    /// The runs the calls belong to.
    public static let runs = ["live", "test:a", "sim:b"]
    /// The placements the calls name.
    public static let placements = ["main", "onboarding", "upsell", "checkout", "settings", "promo"]

    /// The generator; also free for the caller's own draws (batch sizes).
    public var random: SplitMix64
    /// Every event generated so far.
    public var events: [Envelope] = []
    private var trace: UInt64 = 0

    /// A stream seeded with `seed`.
    public init(seed: UInt64) { random = SplitMix64(seed: seed) }

    private mutating func roll(_ n: Int) -> Int { Int(random.next() % UInt64(n)) }

    /// The events of `calls` random calls, each trace's events in order, traces interleaved; with
    /// `damage`, some events missing, repeated or swapped with their neighbour.
    public mutating func generate(calls: Int, damage: Bool = true) -> [Envelope] {
        var traces: [[(EventName, UInt64, String?, Double, EventAttributes)]] = []
        var runOf: [String] = []
        for _ in 0..<calls {
            runOf.append(Self.runs[roll(3)])
            traces.append(roll(4) == 0 ? preload() : fetch())
        }
        // Interleave: take the next event of a random unfinished trace.
        var next = Array(repeating: 0, count: traces.count)
        var open = Array(traces.indices)
        var ordered: [(Int, (EventName, UInt64, String?, Double, EventAttributes))] = []
        while !open.isEmpty {
            let k = roll(min(open.count, 6))
            let i = open[k]
            ordered.append((i, traces[i][next[i]]))
            next[i] += 1
            if next[i] == traces[i].count { open.remove(at: k) }
        }
        // Damage: drop about 3%, repeat about 1%, swap neighbours about 5%.
        var arrived: [(Int, (EventName, UInt64, String?, Double, EventAttributes))] = []
        for item in ordered {
            let r = damage ? roll(100) : 100
            if r < 3 { continue }
            arrived.append(item)
            if r < 4 { arrived.append(item) }
        }
        for i in arrived.indices.dropFirst() where damage && roll(100) < 5 { arrived.swapAt(i - 1, i) }
        for (seq, (i, event)) in arrived.enumerated() {
            let (name, span, placement, t, attrs) = event
            events.append(Envelope(seq: UInt64(seq + 1), ts: 1_800_000_000 + t, t: t, run: runOf[i],
                                   trace: TraceID(high: 0xfeed, low: UInt64(i + 1)), span: SpanID(raw: span), name: name,
                                   placement: placement, attrs: attrs))
        }
        return events
    }

    private mutating func fetch() -> [(EventName, UInt64, String?, Double, EventAttributes)] {
        trace += 1
        let start = Double(trace) * 0.37
        let placement = Self.placements[roll(Self.placements.count)]
        let duration = Double(roll(5000)) / 1000
        var out: [(EventName, UInt64, String?, Double, EventAttributes)] = [
            (.fetchStart, 1, placement, start, ["call": roll(3) == 0 ? "getFlowOrDefault" : "getFlow"]),
            (.cacheMiss, 1, placement, start, [:]),
            (.requestStart, 2, placement, start, ["kind": "targeted", "timeout": 4.5]),
        ]
        let timedOut = roll(5) == 0
        if timedOut {
            out.append((.requestEnd, 2, placement, start + 4.5, ["kind": "targeted", "outcome": "timeout", "duration": 4.5]))
            out.append((.timeout, 1, placement, start + 4.5, ["stage": "targeted"]))
            out.append((.fallback, 1, placement, start + 4.5, ["to": "defaultAudience"]))
        } else {
            out.append((.requestEnd, 2, placement, start + duration, ["kind": "targeted", "outcome": "ok", "duration": .number(duration)]))
        }
        let total = timedOut ? 4.5 + duration / 10 : duration
        var end: EventAttributes = ["call": "getFlow", "duration": .number(total)]
        if roll(8) == 0 {
            end["errorCode"] = .number(Double([2004, 2005][roll(2)]))
        } else {
            end["source"] = .string(timedOut ? "defaultAudience" : ["network", "cache"][roll(2)])
            end["targetingLost"] = .bool(timedOut)
        }
        if roll(10) == 0 { end["duration"] = nil } // the end's duration missing: end minus start
        out.append((.fetchEnd, 1, placement, start + total, end))
        return out
    }

    private mutating func preload() -> [(EventName, UInt64, String?, Double, EventAttributes)] {
        trace += 1
        let start = Double(trace) * 0.37
        var names: [String] = []
        for _ in 0..<(1 + roll(3)) {
            let p = Self.placements[roll(Self.placements.count)]
            if !names.contains(p) { names.append(p) }
        }
        var out: [(EventName, UInt64, String?, Double, EventAttributes)] = [
            (.preloadStart, 1, nil, start, ["call": "preloadFlows", "placements": .array(names.map(JSONValue.string))]),
        ]
        var failed: [String: JSONValue] = [:]
        for (k, p) in names.enumerated() {
            out.append((.requestStart, UInt64(10 + k), p, start, ["kind": "targeted", "timeout": 5]))
            let ok = roll(3) != 0
            out.append((.requestEnd, UInt64(10 + k), p, start + 1, ["kind": "targeted", "outcome": ok ? "ok" : "timeout"]))
            if !ok {
                failed[p] = .number(2005)
                out.append((.timeout, 1, p, start + 1, ["stage": "targeted"]))
            }
        }
        out.append((.preloadEnd, 1, nil, start + 1, ["call": "preloadFlows", "succeeded": .array(names.filter { failed[$0] == nil }.map(JSONValue.string)),
                                                     "failed": .object(failed), "duration": 1]))
        return out
    }
}

