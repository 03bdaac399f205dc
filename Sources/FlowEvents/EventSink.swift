import Synchronization

/// A consumer of events: metrics, stores, files, traces. The one contract every sink follows,
/// built-in or not.
///
/// An ``EventPipeline`` feeds each sink from its own bounded queue on its own thread, so a slow
/// sink never slows the engine or another sink. Its lifecycle, all on that thread:
/// `consume` (any number of times, events in seq order) → `flush` → `close` (once, at shutdown).
/// `health` is read from any thread, at scrape time.
///
/// ```swift
/// final class CountingSink: EventSink {
///     let name = "counting"
///     private let seen = Atomic<Int>(0)
///     func consume(_ batch: [Envelope]) { seen.add(batch.count, ordering: .relaxed) }
/// }
/// ```
///
/// A sink must not call back into the engine or the pipeline that feeds it.
public protocol EventSink: AnyObject, Sendable {
    /// The sink's name in metrics, `/api/sinks` and logs: unique within a pipeline
    /// (`metrics`, `jsonl`, or the `name` of its config entry).
    var name: String { get }
    /// The sink's type (`jsonl`, `otlp`, ...). Defaults to `name`.
    var type: String { get }
    /// Consumes a batch of events, in seq order. Called from one thread at a time.
    func consume(_ batch: [Envelope])
    /// Consumes everything the pipeline took from the sink's queue at once: `batches` in seq
    /// order, each at most the pipeline's `maxBatch` envelopes. The default calls `consume(_:)`
    /// for each batch; a sink with a fixed cost per call (an fsync, a transaction) may override it
    /// to pay that cost once for all of them. Called from one thread at a time.
    func consume(batches: [[Envelope]])
    /// Makes everything consumed so far durable (files flushed, transactions committed, spans
    /// sent). Called on shutdown after the last batch, and may be called at other times.
    /// Default: nothing.
    func flush()
    /// Delivers what is still open and releases the sink's resources (files, programs,
    /// connections); no `consume` follows. Called once at shutdown after `flush()`; calling it
    /// again does nothing. Default: nothing.
    func close()
    /// The sink's own view of its health: failed writes or exports, events it lost after the
    /// pipeline handed them over. Read at scrape time from any thread; keep it cheap.
    /// Default: always up, no errors.
    var health: SinkHealth { get }
    /// True for a sink that keeps events beyond the process: a file, a database, an export, a
    /// program. `POST /api/ingest` accepts a batch only when every durable sink's queue has room
    /// for all of it (see ``EventPipeline/ingest(_:ifRoomWithin:in:)``), so what it acknowledges
    /// is stored. Default: false (metrics, memory, console).
    var isDurable: Bool { get }
}

extension EventSink {
    /// The sink's name.
    public var type: String { name }

    /// Calls `consume(_:)` for each batch, in order.
    public func consume(batches: [[Envelope]]) {
        for batch in batches { consume(batch) }
    }

    /// Nothing to make durable.
    public func flush() {}

    /// Nothing to release.
    public func close() {}

    /// Always up, no errors.
    public var health: SinkHealth { SinkHealth() }

    /// Not durable.
    public var isDurable: Bool { false }
}

/// What a sink says of itself (see ``EventSink/health``).
public struct SinkHealth: Sendable, Hashable {
    /// False while the sink is failing: its last write or export failed.
    public var up: Bool
    /// Failed writes, exports and program restarts so far.
    public var errors: UInt64
    /// The last failure, if any (kept after the sink recovers).
    public var lastError: String?
    /// Events the sink lost after the pipeline handed them over (a buffer of its own that was
    /// full, an export given up on). The pipeline adds its own queue's drops to these.
    public var dropped: UInt64

    /// A health record; by default up, with nothing failed or lost.
    public init(up: Bool = true, errors: UInt64 = 0, lastError: String? = nil, dropped: UInt64 = 0) {
        self.up = up; self.errors = errors; self.lastError = lastError; self.dropped = dropped
    }
}

/// A sink's health, kept up to date by the sink from any thread.
///
/// ```swift
/// let health = SinkHealthRecorder()
/// do { try write(lines); health.succeeded() } catch { health.failed("\(path): \(error)") }
/// public var health: SinkHealth { self.health.current }
/// ```
public final class SinkHealthRecorder: Sendable {
    private let state = Mutex(SinkHealth())

    /// A recorder for a sink that is up.
    public init() {}

    /// The last operation worked: the sink is up (errors and the last error are kept).
    public func succeeded() {
        state.withLock { $0.up = true }
    }

    /// An operation failed: counts it, keeps `message`, and marks the sink down until the next success.
    public func failed(_ message: String) {
        state.withLock {
            $0.up = false
            $0.errors += 1
            $0.lastError = message
        }
    }

    /// The sink lost `count` events it had accepted.
    public func dropped(_ count: Int) {
        guard count > 0 else { return }
        state.withLock { $0.dropped += UInt64(count) }
    }

    /// The health now.
    public var current: SinkHealth { state.withLock { $0 } }
}
