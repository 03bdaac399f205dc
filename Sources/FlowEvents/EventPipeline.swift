import Dispatch
import FlowFetch
import FlowJSON
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The process-wide event sequence: every envelope stamped by any pipeline in this process gets
/// the next number, so `seq` is strictly increasing across the whole process.
private let processSequence = Atomic<UInt64>(0)

/// Counters for one sink of a pipeline, as `EventPipeline.stats()` reports them.
public struct SinkStats: Sendable, Hashable {
    /// The sink's name (`EventSink.name`).
    public var sink: String
    /// Envelopes waiting in the sink's queue now (not counting a batch being consumed).
    public var queueDepth: Int
    /// The queue's bound; past it the oldest envelopes are dropped.
    public var capacity: Int
    /// Envelopes dropped from this sink's queue because it was full, since the pipeline started.
    public var dropped: UInt64
    /// Envelopes handed to the sink's `consume`, since the pipeline started.
    public var consumed: UInt64
    /// Batches handed to the sink's `consume`.
    public var batches: UInt64

    /// Creates a stats record.
    public init(sink: String, queueDepth: Int, capacity: Int, dropped: UInt64, consumed: UInt64, batches: UInt64) {
        self.sink = sink; self.queueDepth = queueDepth; self.capacity = capacity
        self.dropped = dropped; self.consumed = consumed; self.batches = batches
    }
}

/// A sink with something to release when the pipeline stops (a file to close, a program to end).
/// At `shutdown()`, after its last batch and `flush()`, the pipeline calls `close()` on its drain
/// thread. Sinks that only need `flush()` need not conform.
public protocol ClosingSink: EventSink {
    /// Releases the sink's resources; no `consume` follows.
    func close()
}

/// A sink that wants to see the pipeline's queue depths (the metrics sink's
/// `flowscope_sink_queue_depth` and `flowscope_events_dropped_total`).
///
/// When a pipeline is created, every sink given to it that conforms receives, once, a closure that
/// returns the current stats of every sink of that pipeline. Call it whenever the numbers are
/// needed (e.g. at scrape time); it is cheap (one short lock) and returns `[]` once the pipeline
/// is gone. The closure does not retain the pipeline.
public protocol QueueDepthObserver: AnyObject, Sendable {
    /// Receives the pipeline's stats source. Called once, from `EventPipeline.init`.
    func observeQueueDepth(_ stats: @escaping @Sendable () -> [SinkStats])
}

/// Fans engine events out to sinks without ever making the emitter wait.
///
/// `receive` stamps each event with a process-wide `seq`, the wall-clock time and the run, and
/// appends the envelope to every sink's own bounded queue. Each sink has a dedicated drain thread
/// that takes batches (in seq order) and calls `consume`. When a queue is full the OLDEST envelope
/// of that queue is dropped and counted; the pipeline then tells the other sinks with a
/// `sink.dropped` event (attrs `sink`, `count`), at most once per 100 ms per sink, the remainder
/// being reported after the sink's next batch or at shutdown.
///
/// ```swift
/// let pipeline = EventPipeline(sinks: [memory, jsonl])
/// let client = FlowClient(..., events: pipeline)        // live events, run "live"
/// let testEvents = pipeline.sink(run: "test:checkout")  // same sinks, another run
/// pipeline.shutdown()                                   // drains and flushes everything
/// ```
public final class EventPipeline: EngineEventSink {
    /// Shortest interval between two `sink.dropped` events about the same sink.
    public static let dropReportInterval: Double = 0.1

    private let run: String
    private let lanes: [SinkLane]
    private let state: Mutex<State>
    private let wallClock: @Sendable () -> Double
    private let trace: TraceID
    private let startUptime: UInt64

    private struct State: ~Copyable {
        var closed = false
        var reports: UInt64 = 0
    }

    /// Creates a pipeline and starts one drain thread per sink.
    /// - Parameters:
    ///   - run: the run stamped on events given to `receive` (`live` by default).
    ///   - sinks: the sinks, in config order.
    ///   - queueCapacity: each sink's queue bound (envelopes).
    ///   - maxBatch: the most envelopes handed to one `consume` call.
    ///   - wallClock: seconds since 1970, UTC (injectable for tests).
    public init(run: String = "live", sinks: [any EventSink], queueCapacity: Int = 65536, maxBatch: Int = 1024,
                wallClock: @escaping @Sendable () -> Double = WallClock.now) {
        self.run = run
        self.wallClock = wallClock
        self.state = Mutex(State())
        self.startUptime = DispatchTime.now().uptimeNanoseconds
        var rng = SystemRandomNumberGenerator()
        var high: UInt64 = 0, low: UInt64 = 0
        while high == 0 && low == 0 { high = rng.next(); low = rng.next() }
        self.trace = TraceID(high: high, low: low)
        self.lanes = sinks.map { SinkLane(sink: $0, capacity: max(1, queueCapacity), maxBatch: max(1, maxBatch)) }
        // Drain threads hold the pipeline weakly; dropping the pipeline stops them (see deinit).
        for (index, lane) in lanes.enumerated() { lane.start(pipeline: self, index: index) }
        for sink in sinks {
            if let observer = sink as? any QueueDepthObserver {
                observer.observeQueueDepth { [weak self] in self?.stats() ?? [] }
            }
        }
    }

    deinit {
        // A pipeline dropped without `shutdown()`: let each thread drain, flush and end.
        for lane in lanes { lane.stop() }
    }

    // MARK: Emitting

    /// Receives one engine event for this pipeline's run. Never blocks on a sink; a no-op after
    /// `shutdown()`.
    public func receive(_ event: EngineEvent) {
        receive(event, run: run)
    }

    /// Receives one engine event for `run`.
    func receive(_ event: EngineEvent, run: String) {
        let ts = wallClock()
        state.withLock { state in
            guard !state.closed else { return }
            let seq = processSequence.wrappingAdd(1, ordering: .relaxed).newValue
            enqueueLocked(Envelope(event, seq: seq, ts: ts, run: run), except: nil, state: &state)
        }
    }

    /// Puts envelopes that came from elsewhere (another process, `POST /api/ingest`, a replayed
    /// trace) through the pipeline. Each gets a fresh local `seq`; `ts`, `t`, `run`, `trace`,
    /// `span`, name, placement and attrs are kept.
    public func ingest(_ envelopes: [Envelope]) {
        guard !envelopes.isEmpty else { return }
        state.withLock { state in
            guard !state.closed else { return }
            for var envelope in envelopes {
                envelope.seq = processSequence.wrappingAdd(1, ordering: .relaxed).newValue
                enqueueLocked(envelope, except: nil, state: &state)
            }
        }
    }

    /// A view of this pipeline that stamps `run` instead of the pipeline's own run: give it to
    /// the engine of a test run or a simulation so its events reach the same sinks.
    public func sink(run: String) -> PipelineRunSink {
        PipelineRunSink(pipeline: self, run: run)
    }

    /// Must be called with the state lock held. Appends to every lane but `except`.
    private func enqueueLocked(_ envelope: Envelope, except: Int?, state: inout State) {
        for (index, lane) in lanes.enumerated() where index != except {
            if lane.push(envelope) {
                // A drop happened: report it now if the last report is old enough.
                reportDropsLocked(lane: index, force: false, state: &state)
            }
        }
    }

    /// Must be called with the state lock held. Emits a `sink.dropped` event about lane `index`
    /// to the other sinks when it has unreported drops and (unless `force`) the last report is at
    /// least `dropReportInterval` old.
    private func reportDropsLocked(lane index: Int, force: Bool, state: inout State) {
        let now = uptimeSeconds()
        guard let count = lanes[index].takeUnreportedDrops(now: now, force: force, interval: Self.dropReportInterval) else { return }
        state.reports += 1
        let seq = processSequence.wrappingAdd(1, ordering: .relaxed).newValue
        let envelope = Envelope(
            seq: seq, ts: wallClock(), t: now, run: run, trace: trace,
            span: SpanID(trace: trace, index: state.reports), name: .sinkDropped, placement: nil,
            attrs: ["sink": .string(lanes[index].sink.name), "count": .number(Double(count))])
        // Never into the overflowing sink itself: it is already full, and this cannot recurse
        // because reports about the other lanes are rate-limited the same way.
        for (other, lane) in lanes.enumerated() where other != index {
            if lane.push(envelope) { reportDropsLocked(lane: other, force: false, state: &state) }
        }
    }

    /// Called by a lane's drain thread after each batch: reports that lane's pending drops.
    fileprivate func afterBatch(lane index: Int) {
        state.withLock { state in
            guard !state.closed else { return }
            reportDropsLocked(lane: index, force: false, state: &state)
        }
    }

    private func uptimeSeconds() -> Double {
        Double(DispatchTime.now().uptimeNanoseconds &- startUptime) / 1e9
    }

    // MARK: Stats

    /// Every sink's counters, in the pipeline's sink order.
    public func stats() -> [SinkStats] {
        lanes.map { $0.stats() }
    }

    /// Envelopes waiting in the queue of the sink named `sink` (the first with that name); nil if
    /// there is none.
    public func queueDepth(sink: String) -> Int? {
        lanes.first { $0.sink.name == sink }?.stats().queueDepth
    }

    /// Envelopes dropped so far from the queue of the sink named `sink`; nil if there is none.
    public func dropped(sink: String) -> UInt64? {
        lanes.first { $0.sink.name == sink }?.stats().dropped
    }

    /// The sinks, in order.
    public var sinks: [any EventSink] { lanes.map(\.sink) }

    /// Waits until every queue is empty and no batch is being consumed, or `timeout` seconds pass.
    /// Returns whether everything was drained. Events emitted meanwhile extend the wait.
    @discardableResult
    public func waitUntilDrained(timeout: Double = 10) -> Bool {
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, timeout) * 1e9)
        while true {
            if lanes.allSatisfy({ $0.isIdle }) { return true }
            if DispatchTime.now().uptimeNanoseconds >= deadline { return false }
            usleep(1000)
        }
    }

    // MARK: Stopping

    /// Stops the pipeline without losing anything already received: reports pending drops,
    /// refuses new events, lets every sink consume its whole queue, calls `flush()` on each sink
    /// (then `close()` on each `ClosingSink`) and joins the drain threads. Idempotent; after it `receive` and `ingest` are no-ops.
    public func shutdown() {
        let first = state.withLock { state -> Bool in
            guard !state.closed else { return false }
            for index in lanes.indices { reportDropsLocked(lane: index, force: true, state: &state) }
            state.closed = true
            return true
        }
        if first { for lane in lanes { lane.stop() } }
        for lane in lanes { lane.join() }
    }

    /// Installs SIGTERM and SIGINT handlers (Dispatch signal sources) that call `shutdown()` and
    /// then `then` (e.g. `exit(0)`). The default actions of both signals are disabled for the
    /// life of the process; the sources live until the process exits.
    public func shutdownOnSignals(then: @escaping @Sendable () -> Void) {
        let queue = DispatchQueue(label: "flowscope.pipeline.signals")
        for signalNumber in [SIGTERM, SIGINT] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: queue)
            // The handler holds its own source, so the source lives until the process exits.
            source.setEventHandler { [self, source] in
                _ = source
                shutdown()
                then()
            }
            source.resume()
        }
    }
}

/// A view of an `EventPipeline` that stamps another run (a test name, a simulation id).
public struct PipelineRunSink: EngineEventSink {
    /// The pipeline events go to.
    public let pipeline: EventPipeline
    /// The run stamped on every event.
    public let run: String

    /// Receives one engine event for `run`. Never blocks on a sink.
    public func receive(_ event: EngineEvent) {
        pipeline.receive(event, run: run)
    }
}

/// Wall-clock time.
public enum WallClock {
    /// Seconds since 1970, UTC, with sub-microsecond resolution.
    @Sendable public static func now() -> Double {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
    }
}

// MARK: - One sink's queue and drain thread

/// One sink's bounded queue and the thread draining it.
private final class SinkLane: Sendable {
    let sink: any EventSink
    private let capacity: Int
    private let maxBatch: Int
    private let queue: Mutex<LaneState>
    private let wake = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)

    struct LaneState: ~Copyable {
        var ring: EnvelopeRing
        var waiting = false
        var stopping = false
        var consuming = false
        var dropped: UInt64 = 0
        var unreported: UInt64 = 0
        var lastReport = -Double.infinity
        var consumed: UInt64 = 0
        var batches: UInt64 = 0
    }

    init(sink: any EventSink, capacity: Int, maxBatch: Int) {
        self.sink = sink
        self.capacity = capacity
        self.maxBatch = maxBatch
        self.queue = Mutex(LaneState(ring: EnvelopeRing(capacity: capacity)))
    }

    func start(pipeline: EventPipeline, index: Int) {
        let afterBatch: @Sendable () -> Void = { [weak pipeline] in pipeline?.afterBatch(lane: index) }
        let thread = Thread { [self] in drain(afterBatch: afterBatch) }
        thread.name = "flowscope.sink.\(sink.name)"
        thread.start()
    }

    /// Appends; returns true when the oldest envelope was dropped to make room.
    func push(_ envelope: Envelope) -> Bool {
        let (dropped, signal) = queue.withLock { state -> (Bool, Bool) in
            let dropped = state.ring.append(envelope)
            if dropped { state.dropped += 1; state.unreported += 1 }
            let signal = state.waiting
            state.waiting = false
            return (dropped, signal)
        }
        if signal { wake.signal() }
        return dropped
    }

    func takeUnreportedDrops(now: Double, force: Bool, interval: Double) -> UInt64? {
        queue.withLock { state in
            guard state.unreported > 0, force || now - state.lastReport >= interval else { return nil }
            let count = state.unreported
            state.unreported = 0
            state.lastReport = now
            return count
        }
    }

    func stats() -> SinkStats {
        queue.withLock { state in
            SinkStats(sink: sink.name, queueDepth: state.ring.count, capacity: capacity, dropped: state.dropped,
                      consumed: state.consumed, batches: state.batches)
        }
    }

    var isIdle: Bool { queue.withLock { $0.ring.count == 0 && !$0.consuming } }

    func stop() {
        let signal = queue.withLock { state -> Bool in
            state.stopping = true
            let signal = state.waiting
            state.waiting = false
            return signal
        }
        if signal { wake.signal() }
    }

    /// Waits for the drain thread to finish (any number of callers).
    func join() {
        done.wait()
        done.signal()
    }

    private func drain(afterBatch: @Sendable () -> Void) {
        while true {
            let (batch, finished) = queue.withLock { state -> ([Envelope], Bool) in
                let batch = state.ring.take(max: maxBatch)
                if batch.isEmpty {
                    if state.stopping { return ([], true) }
                    state.waiting = true
                } else {
                    state.consuming = true
                }
                return (batch, false)
            }
            if finished { break }
            if batch.isEmpty { wake.wait(); continue }
            sink.consume(batch)
            queue.withLock { state in
                state.consuming = false
                state.consumed += UInt64(batch.count)
                state.batches += 1
            }
            afterBatch()
        }
        sink.flush()
        if let closing = sink as? any ClosingSink { closing.close() }
        done.signal()
    }
}

/// A bounded FIFO of envelopes that grows lazily up to its capacity and then overwrites its
/// oldest element.
struct EnvelopeRing: ~Copyable {
    private var storage: [Envelope?] = []
    private var head = 0
    private(set) var count = 0
    let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    /// Appends `envelope`; returns true when the oldest element was dropped to make room.
    mutating func append(_ envelope: Envelope) -> Bool {
        if count < storage.count {
            storage[(head + count) % storage.count] = envelope
            count += 1
            return false
        }
        if storage.count < capacity {
            // Full but still allowed to grow: unroll into a larger linear buffer.
            if head != 0 {
                storage = Array(storage[head...] + storage[..<head])
                head = 0
            }
            let grown = min(capacity, max(16, storage.count * 2))
            storage.reserveCapacity(grown)
            storage.append(envelope)
            storage.append(contentsOf: repeatElement(nil, count: grown - storage.count))
            count += 1
            return false
        }
        // At capacity: overwrite the oldest.
        storage[head] = envelope
        head = (head + 1) % storage.count
        return true
    }

    /// Removes and returns up to `max` of the oldest elements, oldest first.
    mutating func take(max: Int) -> [Envelope] {
        let n = Swift.min(max, count)
        guard n > 0 else { return [] }
        var out: [Envelope] = []
        out.reserveCapacity(n)
        for _ in 0..<n {
            if let envelope = storage[head] { out.append(envelope) }
            storage[head] = nil
            head = (head + 1) % storage.count
        }
        count -= n
        if count == 0 { head = 0 }
        return out
    }
}
