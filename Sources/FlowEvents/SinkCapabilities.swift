import FlowJSON

/// A sink that serves metrics: what `GET /metrics` renders at scrape time. The `metrics` sink is one;
/// `serve` adds the families of every configured sink that conforms, built-in or not.
public protocol MetricsExposing: Sendable {
    /// Renders for a scrape whose `Accept` header is `accept` (Prometheus text, or OpenMetrics when
    /// asked for): the content type and the body. Without `accept` (nil), Prometheus text.
    func exposition(accept: String?) -> (contentType: String, body: [UInt8])
    /// The metric family names it exposes (`flowscope_fetches_total`): two sinks exposing one name
    /// are refused at start-up. Default: the names of the `# TYPE` lines of `exposition(accept: nil)`.
    var metricFamilyNames: Set<String> { get }
}

extension MetricsExposing {
    /// The names of the `# TYPE` lines of the Prometheus text exposition.
    public var metricFamilyNames: Set<String> {
        let body = exposition(accept: nil).body
        var names: Set<String> = []
        for line in body.split(separator: UInt8(ascii: "\n")) where line.starts(with: Array("# TYPE ".utf8)) {
            let rest = line.dropFirst(7)
            if let name = rest.split(separator: UInt8(ascii: " "), maxSplits: 1).first { names.insert(String(decoding: name, as: UTF8.self)) }
        }
        return names
    }
}

/// A sink that reports the pipeline's sink stats in its own output (the `metrics` sink's
/// `flowscope_sink_*` families): `serve` hands it the pipeline's stats, read at each scrape.
public protocol SinkStatsCollecting: Sendable {
    /// Reads `stats` whenever the sink renders (scrape time).
    func collectSinkStats(_ stats: @escaping @Sendable () -> [SinkStats])
}

/// An event store the dashboard API can query: recent events, the runs it has seen, and a feed of
/// new events. The `memory` sink is one, the `sqlite` sink another; `LayeredEventStore` reads one
/// over the other. Calls and their statistics are not a store's: ``CallQuery`` folds the events a
/// store answers, the same way for every store.
public protocol EventStore: Sendable {
    /// Events newest last, filtered (nil: any). With `since`, the oldest `limit` events after it;
    /// without, the newest `limit`.
    func events(since: UInt64?, limit: Int, run: String?, placement: String?, name: String?) -> [Envelope]
    /// The newest seq held, nil when empty.
    var latestSeq: UInt64? { get }
    /// Every run known, most recently active first.
    func runSummaries() -> [RunSummary]
    /// One run's summary and events by name, nil when unknown.
    func runDetail(id: String) -> RunDetail?
    /// Calls `handler` with every batch of new events, in seq order, until the returned function
    /// is called.
    func follow(_ handler: @escaping @Sendable ([Envelope]) -> Void) -> @Sendable () -> Void
    /// Whether the store knows run `id` (by default: `runDetail(id:)` is not nil).
    func holdsRun(_ id: String) -> Bool
    /// The epoch of the store's seq numbering: a store that numbers events across restarts (a
    /// database) names the numbering it writes with, and the dashboard sees it with every page of
    /// events. Default: nil (the server makes one up per process).
    var seqEpoch: String? { get }
}

extension EventStore {
    /// `runDetail(id:) != nil`; stores with a cheaper lookup implement their own.
    public func holdsRun(_ id: String) -> Bool { runDetail(id: id) != nil }
    /// No epoch of its own.
    public var seqEpoch: String? { nil }
}

extension Envelope {
    /// A page of events as `GET /api/events` answers it: `{"events":[<envelope>...],"latestSeq":N|null}`,
    /// compact, oldest first.
    public static func pageJSON(_ envelopes: [Envelope], latestSeq: UInt64?) -> String {
        var out = "{\"events\":["
        out.reserveCapacity(64 + envelopes.count * 256)
        for (i, envelope) in envelopes.enumerated() {
            if i > 0 { out += "," }
            envelope.appendJSON(to: &out)
        }
        out += "],\"latestSeq\":"
        out += latestSeq.map { String($0) } ?? "null"
        out += "}"
        return out
    }
}
