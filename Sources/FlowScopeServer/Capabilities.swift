import FlowEvents
import FlowJSON

/// The sinks of the pipeline as `GET /api/sinks` and `/healthz` report them.
public struct SinkStatus: Sendable {
    /// Every sink's stats, read at the moment of the call.
    public var stats: @Sendable () -> [SinkStats]

    /// A status from a stats function (usually `pipeline.stats`).
    public init(stats: @escaping @Sendable () -> [SinkStats]) { self.stats = stats }

    /// `{"sinks": [{"name", "type", "up", "saturated", "durable", "consumed", "dropped", "errors", "lastError",
    /// "queueDepth", "capacity"}]}`.
    public func json() -> JSONValue {
        ["sinks": .array(stats().map { s in
            ["name": .string(s.sink), "type": .string(s.type), "up": .bool(s.up),
             "saturated": .bool(s.saturated), "durable": .bool(s.durable),
             "consumed": .number(Double(s.consumed)), "dropped": .number(Double(s.dropped)),
             "errors": .number(Double(s.errors)), "lastError": s.lastError.map(JSONValue.string) ?? .null,
             "queueDepth": .number(Double(s.queueDepth)), "capacity": .number(Double(s.capacity))]
        })]
    }

    /// The names of the sinks that are down.
    public func down() -> [String] { stats().filter { !$0.up }.map(\.sink) }
}
