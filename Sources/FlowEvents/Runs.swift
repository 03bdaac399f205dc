/// How a run was produced, guessed from its id: `live` or `live:...` is live, `sim:...` or
/// `simulation:...` is a simulation, anything else (`test:...`, a bare test name) is a test.
public enum RunKind: String, Sendable, Hashable {
    case live, test, simulation

    /// The kind of run `id`.
    public init(runID id: String) {
        if id == "live" || id.hasPrefix("live:") { self = .live }
        else if id.hasPrefix("sim:") || id.hasPrefix("simulation:") { self = .simulation }
        else { self = .test }
    }
}

/// A run as an event store counts it over every event it has seen of the run (`GET /api/runs`).
public struct RunSummary: Sendable, Hashable {
    /// The run id (`live`, a test name, a simulation id).
    public var id: String
    /// Live, test or simulation (by the id's prefix, see `RunKind`).
    public var kind: RunKind
    /// Wall-clock time of its first and last event, seconds since 1970.
    public var firstTs: Double
    public var lastTs: Double
    /// Events seen (including ones the store no longer holds).
    public var events: Int
    /// fetch.end events seen: the fetches that ended (one per fetch call).
    public var fetches: Int
    /// fetch.end events carrying an errorCode, plus placements reported failed by preload.end: the
    /// read model's errors (``CallStatistics/errors(of:placement:)``).
    public var errors: Int
    /// Whether it comes from the archive of a layered store (a run from before a restart, or one
    /// the live store forgot).
    public var stored = false

    /// A run's summary.
    public init(id: String, kind: RunKind? = nil, firstTs: Double, lastTs: Double, events: Int, fetches: Int, errors: Int,
                stored: Bool = false) {
        self.id = id; self.kind = kind ?? RunKind(runID: id); self.firstTs = firstTs; self.lastTs = lastTs
        self.events = events; self.fetches = fetches; self.errors = errors; self.stored = stored
    }
}

/// One run in detail as an event store counts it: its summary and its events by name.
public struct RunDetail: Sendable, Hashable {
    /// The run's summary.
    public var summary: RunSummary
    /// Events seen by name (`fetch.end`: 3).
    public var eventsByName: [String: Int]

    /// A run's detail.
    public init(summary: RunSummary, eventsByName: [String: Int]) {
        self.summary = summary; self.eventsByName = eventsByName
    }
}
