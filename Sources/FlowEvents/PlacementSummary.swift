import FlowJSON

/// The last preload failure of a placement.
public struct PreloadError: Sendable, Hashable {
    /// The error code as preload.end reported it (a number or a string).
    public var code: JSONValue
    /// Wall-clock time of the preload.end event.
    public var ts: Double
    /// Seq of the preload.end event.
    public var seq: UInt64

    /// Creates a preload error record.
    public init(code: JSONValue, ts: Double, seq: UInt64) { self.code = code; self.ts = ts; self.seq = seq }
}

/// Aggregates of one placement, as `GET /api/placements` lists them, whichever store counted them
/// (the memory sink, the sqlite sink, a call query).
public struct PlacementSummary: Sendable, Hashable {
    /// The placement id (`_other` for placements past the limit).
    public var placement: String
    /// Calls that named the placement (a call query counts them; the sinks do not).
    public var calls: Int?
    /// fetch.end events.
    public var fetches: Int
    /// Successful fetch.end events by source (`network`, `cache`, `defaultAudience`, `fallbackFile`).
    public var sources: [String: Int]
    /// fetch.end events carrying an errorCode.
    public var errors: Int
    /// fetch.end events with targetingLost true.
    public var targetingLost: Int
    /// timeout events.
    public var timeouts: Int
    /// Median and 95th percentile (nearest rank) of the kept fetch.end durations, seconds.
    public var p50: Double?
    public var p95: Double?
    /// Durations the percentiles are computed from.
    public var samples: Int
    /// The last failure reported for this placement by preload.end's `failed` map.
    public var lastPreloadError: PreloadError?

    /// A summary whose percentiles are those of `durations` (in any order).
    public init(placement: String, calls: Int? = nil, fetches: Int, sources: [String: Int], errors: Int,
                targetingLost: Int, timeouts: Int, durations: [Double], lastPreloadError: PreloadError?) {
        let sorted = durations.sorted()
        self.placement = placement; self.calls = calls; self.fetches = fetches; self.sources = sources
        self.errors = errors; self.targetingLost = targetingLost; self.timeouts = timeouts
        p50 = Self.nearestRank(sorted, 0.5)
        p95 = Self.nearestRank(sorted, 0.95)
        samples = sorted.count
        self.lastPreloadError = lastPreloadError
    }

    /// The smallest of `sorted` with at least `q` of the values at or below it; nil when empty.
    public static func nearestRank(_ sorted: [Double], _ q: Double) -> Double? {
        guard !sorted.isEmpty else { return nil }
        return sorted[min(max(Int((q * Double(sorted.count)).rounded(.up)) - 1, 0), sorted.count - 1)]
    }

    /// `{"placement",("calls",)"fetches","sources":{...},"errors","targetingLost","timeouts",
    /// "duration":{"p50","p95","samples"},"lastPreloadError":{"code","ts","seq"}|null}`;
    /// p50/p95 are null without samples, `calls` only when counted.
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = [
            "placement": .string(placement), "fetches": .number(Double(fetches)),
            "sources": .object(sources.mapValues { .number(Double($0)) }), "errors": .number(Double(errors)),
            "targetingLost": .number(Double(targetingLost)), "timeouts": .number(Double(timeouts)),
            "duration": ["p50": p50.map(JSONValue.number) ?? .null, "p95": p95.map(JSONValue.number) ?? .null,
                         "samples": .number(Double(samples))],
            "lastPreloadError": lastPreloadError.map {
                ["code": $0.code, "ts": .string(ISO8601.format($0.ts)), "seq": .number(Double($0.seq))]
            } ?? .null,
        ]
        if let calls { object["calls"] = .number(Double(calls)) }
        return .object(object)
    }
}
