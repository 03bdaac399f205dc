import Dispatch
import FlowFetch
import FlowJSON
import Foundation
import Synchronization

/// The process-wide event sequence: every envelope stamped by any pipeline in this process gets
/// the next number, so `seq` is strictly increasing across the whole process.
private let processSequence = Atomic<UInt64>(0)

/// One sink of a pipeline as `EventPipeline.stats()` reports it: the pipeline's counters and the
/// sink's own ``SinkHealth``, read at the moment of the call (at scrape time).
public struct SinkStats: Sendable, Hashable {
    /// The sink's name (`EventSink.name`).
    public var sink: String
    /// The sink's type (`EventSink.type`).
    public var type: String
    /// Envelopes waiting in the sink's queue now (not counting a batch being consumed).
    public var queueDepth: Int
    /// The queue's bound; past it the oldest envelopes are dropped.
    public var capacity: Int
    /// Envelopes lost: dropped from the sink's queue because it was full, plus those the sink
    /// reports losing itself (``SinkHealth/dropped``), since the pipeline started.
    public var dropped: UInt64
    /// Envelopes handed to the sink's `consume`, since the pipeline started.
    public var consumed: UInt64
    /// Batches handed to the sink's `consume`.
    public var batches: UInt64
    /// False while the sink is failing (``SinkHealth/up``).
    public var up: Bool
    /// Failed writes, exports and restarts the sink reports (``SinkHealth/errors``).
    public var errors: UInt64
    /// The sink's last failure, if any.
    public var lastError: String?
    /// True while the sink cannot keep up: its queue overflowed (dropped envelopes) or had no room
    /// for an ingest batch within the last ``EventPipeline/saturationWindow`` seconds.
    public var saturated: Bool
    /// Whether the sink is durable (``EventSink/isDurable``): ingest waits for room in its queue.
    public var durable: Bool

    /// Creates a stats record.
    public init(sink: String, type: String? = nil, queueDepth: Int, capacity: Int, dropped: UInt64, consumed: UInt64,
                batches: UInt64, up: Bool = true, errors: UInt64 = 0, lastError: String? = nil,
                saturated: Bool = false, durable: Bool = false) {
        self.sink = sink; self.type = type ?? sink; self.queueDepth = queueDepth; self.capacity = capacity
        self.dropped = dropped; self.consumed = consumed; self.batches = batches
        self.up = up; self.errors = errors; self.lastError = lastError
        self.saturated = saturated; self.durable = durable
    }
}

/// A sink that has not finished, as ``EventPipeline/unfinishedSinks()`` reports it.
public struct SinkDrain: Sendable, Equatable {
    /// The sink's name.
    public var sink: String
    /// Envelopes waiting in its queue.
    public var queued: Int
    /// Envelopes of the batch its `consume` is working on.
    public var inFlight: Int
    /// Creates a record.
    public init(sink: String, queued: Int, inFlight: Int) { self.sink = sink; self.queued = queued; self.inFlight = inFlight }
}

/// What ``EventPipeline/ingest(_:ifRoomWithin:in:)`` did with a batch: all of it or none of it.
public enum IngestOutcome: Sendable, Hashable {
    /// Every envelope was queued for every sink.
    case accepted
    /// Nothing was queued: these sinks' queues had no room for the whole batch. Retry later.
    case refused(sinks: [String])
    /// Nothing was queued: the pipeline is shut down.
    case stopped
}

/// Which sinks' queues must have room for an ingest batch.
public enum IngestRoom: Sendable, Hashable {
    /// Only the durable sinks (``EventSink/isDurable``); the others drop their oldest when full.
    case durableSinks
    /// Every sink.
    case allSinks
}

/// Fans engine events out to sinks without ever making the emitter wait.
///
/// `receive` stamps each event with a process-wide `seq`, the wall-clock time and the run, and
/// appends the envelope to every sink's own bounded queue. Each sink has a dedicated drain thread
/// that takes everything queued (in seq order), hands it to `consume` in batches of at most
/// `maxBatch`, and comes back for more. When a queue holds `queueCapacity` envelopes the OLDEST
/// one is dropped and counted; the pipeline then tells the other sinks with a `sink.dropped`
/// event (attrs `sink`, `count`), at most once per 100 ms per sink, the remainder being reported
/// after the sink's next batch or at shutdown. (The envelopes a drain thread has already taken
/// and is consuming do not count against the bound.)
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
    /// Seconds a sink stays ``SinkStats/saturated`` after its queue last overflowed or refused an
    /// ingest batch.
    public static let saturationWindow: Double = 5

    private let run: String
    private let hub: Hub
    private let wallClock: @Sendable () -> Double
    private let trace: TraceID
    private let reporter: DropReporter

    /// Creates a pipeline and starts one drain thread per sink.
    /// - Parameters:
    ///   - run: the run stamped on events given to `receive` (`live` by default), made a valid run
    ///     name by ``Envelope/runName(_:empty:)``: an empty name is `live`, a name over 256 UTF-8
    ///     bytes is cut and ends with a hash of the whole name.
    ///   - sinks: the sinks, in config order.
    ///   - queueCapacity: each sink's queue bound (envelopes).
    ///   - maxBatch: the most envelopes handed to one `consume` call.
    ///   - linger: seconds a drain thread waits after waking before it takes the queue, so bursts
    ///     are consumed as batches (events reach sinks at most about this much later).
    ///   - wallClock: seconds since 1970, UTC (injectable for tests).
    public init(run: String = "live", sinks: [any EventSink], queueCapacity: Int = 65536, maxBatch: Int = 1024,
                linger: Double = 0.001, wallClock: @escaping @Sendable () -> Double = WallClock.now) {
        let run = Envelope.runName(run)
        self.run = run
        self.wallClock = wallClock
        var rng = SystemRandomNumberGenerator()
        var high: UInt64 = 0, low: UInt64 = 0
        while high == 0 && low == 0 { high = rng.next(); low = rng.next() }
        self.trace = TraceID(high: high, low: low)
        self.hub = Hub(sinks: sinks, capacity: max(1, queueCapacity), maxBatch: max(1, maxBatch),
                       linger: UInt32(max(0, min(linger, 1)) * 1_000_000))
        // Drain threads hold the hub, not the pipeline: dropping the pipeline stops them (deinit).
        let reporter = DropReporter(run: run, trace: trace, wallClock: wallClock)
        self.reporter = reporter
        for index in sinks.indices {
            let hub = self.hub
            let thread = Thread { hub.drain(lane: index, reporter: reporter) }
            thread.name = "flowscope.sink.\(sinks[index].name)"
            thread.start()
        }
    }

    deinit {
        // A pipeline dropped without `shutdown()`: let each thread drain, flush, close and end.
        hub.stopAll(reporter: nil)
    }

    // MARK: Emitting

    /// Receives one engine event for this pipeline's run. Never blocks on a sink; a no-op after
    /// `shutdown()`.
    public func receive(_ event: EngineEvent) {
        receive(event, run: run)
    }

    /// Receives several engine events at once (one lock, one clock read), in order.
    public func receive(contentsOf events: [EngineEvent]) {
        receive(contentsOf: events, run: run)
    }

    /// Receives one engine event for `run`.
    func receive(_ event: EngineEvent, run: String) {
        hub.enqueue(event, ts: wallClock(), run: run, reporter: reporter)
    }

    /// Receives several engine events for `run`.
    func receive(contentsOf events: [EngineEvent], run: String) {
        guard !events.isEmpty else { return }
        hub.enqueue(contentsOf: events, ts: wallClock(), run: run, reporter: reporter)
    }

    /// Puts envelopes that came from elsewhere (another process, `POST /api/ingest`, a replayed
    /// trace) through the pipeline. Each gets a fresh local `seq`; `ts`, `t`, `trace`, `span`,
    /// name, placement and attrs are kept, and so is `run` when it is a valid run name (decoded
    /// envelopes always have one); any other run is made one as by ``sink(run:)``.
    public func ingest(_ envelopes: [Envelope]) {
        guard !envelopes.isEmpty else { return }
        hub.enqueueAll(envelopes, defaultRun: run, reporter: reporter)
    }

    /// Like ``ingest(_:)``, but all or nothing: queues the batch only when each sink of `room` would
    /// then hold at most `limit` envelopes in its queue (`limit` is capped at the queue capacity);
    /// otherwise queues none of it, marks those sinks saturated and says which they were. Checking
    /// and queueing happen under one lock, so a batch accepted by durable sinks is never dropped
    /// from their queues by another ingest. Never blocks on a sink.
    ///
    /// ```swift
    /// switch pipeline.ingest(batch, ifRoomWithin: 32_768) {
    /// case .accepted: return 202
    /// case .refused, .stopped: return 503   // with Retry-After: the sender tries again later
    /// }
    /// ```
    public func ingest(_ envelopes: [Envelope], ifRoomWithin limit: Int, in room: IngestRoom = .durableSinks) -> IngestOutcome {
        guard !envelopes.isEmpty else { return .accepted }
        return hub.enqueueIfRoom(envelopes, limit: limit, room: room, defaultRun: run, reporter: reporter)
    }

    /// A view of this pipeline that stamps `run` instead of the pipeline's own run: give it to
    /// the engine of a test run or a simulation so its events reach the same sinks. `run` is made
    /// a valid run name by ``Envelope/runName(_:empty:)``: an empty name is the pipeline's own run,
    /// a name over 256 UTF-8 bytes is cut and ends with a hash of the whole name (the view's
    /// ``PipelineRunSink/run`` is the name stamped).
    public func sink(run: String) -> PipelineRunSink {
        PipelineRunSink(pipeline: self, run: Envelope.runName(run, empty: self.run))
    }

    // MARK: Stats

    /// Every sink's counters and health, in the pipeline's sink order. Cheap (one short lock, then
    /// each sink's `health`): call it at scrape time.
    public func stats() -> [SinkStats] { hub.stats() }

    /// Envelopes waiting in the queue of the sink named `sink` (the first with that name); nil if
    /// there is none.
    public func queueDepth(sink: String) -> Int? {
        stats().first { $0.sink == sink }?.queueDepth
    }

    /// Envelopes dropped so far from the queue of the sink named `sink`; nil if there is none.
    public func dropped(sink: String) -> UInt64? {
        stats().first { $0.sink == sink }?.dropped
    }

    /// The sinks, in order.
    public var sinks: [any EventSink] { hub.sinks }

    /// The sinks whose drain thread has not ended yet (during `shutdown()`: those still consuming,
    /// flushing or closing), with what each has not yet consumed. Empty once every sink is closed.
    public func unfinishedSinks() -> [SinkDrain] { hub.unfinished() }

    /// Waits until every queue is empty and no batch is being consumed, or `timeout` seconds pass.
    /// Returns whether everything was drained. Events emitted meanwhile extend the wait.
    @discardableResult
    public func waitUntilDrained(timeout: Double = 10) -> Bool {
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, timeout) * 1e9)
        while true {
            if hub.isIdle { return true }
            if DispatchTime.now().uptimeNanoseconds >= deadline { return false }
            Thread.sleep(forTimeInterval: 0.001)
        }
    }

    // MARK: Stopping

    /// Stops the pipeline without losing anything already received: reports pending drops,
    /// refuses new events, lets every sink consume its whole queue, calls `flush()` on each sink
    /// (then `close()`) and joins the drain threads. Idempotent; after it
    /// `receive` and `ingest` are no-ops. Never call it from inside a sink's `consume` (it waits
    /// for that very thread).
    public func shutdown() {
        hub.stopAll(reporter: reporter)
        hub.join()
    }

    /// Installs handlers for `signals` (SIGTERM and SIGINT by default) that call `shutdown()`
    /// and then `then` (e.g. `exit(0)`), on a thread of their own. The handlers stay for the life
    /// of the process, replacing the signals' default actions. (A classic self-pipe, not Dispatch
    /// signal sources: on Linux those only see a signal when every thread blocks it.)
    public func shutdownOnSignals(_ signals: [Int32] = [SIGTERM, SIGINT], then: @escaping @Sendable () -> Void) {
        // Once: a second signal must not run `then` again (it may resume a continuation).
        let fired = FiredOnce()
        SignalRelay.install(signals) { [self] in
            guard fired.take() else { return }
            shutdown()
            then()
        }
    }
}

/// True for the first `take()` only.
final class FiredOnce: Sendable {
    private let fired = Atomic<Bool>(false)
    func take() -> Bool { !fired.exchange(true, ordering: .acquiringAndReleasing) }
}

/// A view of an `EventPipeline` that stamps another run (a test name, a simulation id).
public struct PipelineRunSink: EngineEventSink {
    /// The pipeline events go to.
    public let pipeline: EventPipeline
    /// The run stamped on every event: the name given to ``EventPipeline/sink(run:)``, made valid.
    public let run: String

    /// Receives one engine event for `run`. Never blocks on a sink.
    public func receive(_ event: EngineEvent) {
        pipeline.receive(event, run: run)
    }

    /// Receives several engine events for `run`, in order. Never blocks on a sink.
    public func receive(contentsOf events: [EngineEvent]) {
        pipeline.receive(contentsOf: events, run: run)
    }
}

/// Wall-clock time.
public enum WallClock {
    /// Seconds since 1970, UTC, with sub-microsecond resolution.
    @Sendable public static func now() -> Double {
        SystemClocks.wallSeconds()
    }
}

// MARK: - Queues and drain threads

/// What a `sink.dropped` event is stamped with.
private struct DropReporter: Sendable {
    var run: String
    var trace: TraceID
    var wallClock: @Sendable () -> Double
}

/// One sink's view of the shared log: it has consumed (or dropped) everything before `cursor`.
private struct Lane {
    /// Log index of the next envelope this sink has not yet taken.
    var cursor: UInt64 = 0
    /// Log indices at or after `cursor` that are not for this sink (reports about its own drops), ascending.
    var excluded: [UInt64] = []
    var waiting = false
    var stopping = false
    var consuming = false
    /// Envelopes of the batch being consumed (0 when none).
    var inFlight = 0
    /// The drain thread has flushed and closed the sink and ended.
    var finished = false
    var dropped: UInt64 = 0
    var unreported: UInt64 = 0
    var lastReport = -Double.infinity
    /// Uptime of the last overflow (a drop) or refused ingest batch.
    var lastOverflow = -Double.infinity
    var consumed: UInt64 = 0
    var batches: UInt64 = 0

    /// Envelopes waiting for this sink when the log holds `total`.
    func depth(total: UInt64) -> Int { Int(total - cursor) - excluded.count }

    /// Drops the oldest envelope waiting for this sink.
    mutating func dropOldest() {
        while let first = excluded.first, first == cursor { excluded.removeFirst(); cursor += 1 }
        cursor += 1
        while let first = excluded.first, first == cursor { excluded.removeFirst(); cursor += 1 }
        dropped += 1
        unreported += 1
    }
}

/// A run of the log that no longer grows, shared by every sink that has not yet taken it.
private struct Segment {
    var base: UInt64
    var items: [Envelope]
}

/// The shared state of a pipeline: one log of envelopes for all sinks (each envelope is stored
/// once and the same immutable arrays are handed to every sink, so the emitter copies an event
/// once whatever the number of sinks), a cursor per sink, all under one lock (one acquisition per
/// event); plus a semaphore per drain thread to wake it and one to say it has finished.
///
/// Memory is bounded: a segment is freed once every sink has taken it, and a sink never has more
/// than `capacity` envelopes waiting (past that its oldest are dropped), so the log holds at most
/// `capacity` envelopes plus the batches being consumed.
private final class Hub: Sendable {
    let sinks: [any EventSink]
    /// Per lane: whether its sink is durable (read once at start).
    let durable: [Bool]
    let capacity: Int
    let maxBatch: Int
    let linger: UInt32
    /// Envelopes per segment: a segment is handed to `consume` whole (no copy), so at most `maxBatch`.
    let segmentSize: Int
    /// Emptied segment buffers kept for reuse.
    static let spareLimit = 16
    let state: Mutex<HubState>
    let wakes: [DispatchSemaphore]
    let dones: [DispatchSemaphore]
    let startUptime = DispatchTime.now().uptimeNanoseconds

    struct HubState: ~Copyable {
        var closed = false
        var reports: UInt64 = 0
        var lanes: [Lane]
        /// Sealed segments, oldest first.
        var segments: [Segment] = []
        /// The segment being filled (sealed at `segmentSize`); its first envelope has log index `openBase`.
        var open: [Envelope] = []
        var openBase: UInt64 = 0
        /// Emptied segment buffers kept for reuse, so filling the log neither allocates nor faults in pages.
        var spare: [[Envelope]] = []
        /// Log indices handed out so far.
        var total: UInt64 { openBase + UInt64(open.count) }
    }

    init(sinks: [any EventSink], capacity: Int, maxBatch: Int, linger: UInt32) {
        self.sinks = sinks
        self.durable = sinks.map(\.isDurable)
        self.capacity = capacity
        self.maxBatch = maxBatch
        self.linger = linger
        self.segmentSize = min(maxBatch, 1024)
        var initial = HubState(lanes: Array(repeating: Lane(), count: sinks.count))
        initial.open.reserveCapacity(segmentSize)
        self.state = Mutex(initial)
        self.wakes = sinks.map { _ in DispatchSemaphore(value: 0) }
        self.dones = sinks.map { _ in DispatchSemaphore(value: 0) }
    }

    func uptime() -> Double { Double(DispatchTime.now().uptimeNanoseconds &- startUptime) / 1e9 }

    /// Stamps one engine event and appends it for every lane; the lock is held for the append and
    /// the lane checks. (Swift 6.3's optimiser still builds each envelope, copies it and destroys
    /// the original before moving it into the segment, whichever way the append is written: plain,
    /// `consume`, or `_copyContents` initialising the array's free capacity. BENCHMARKS.md.)
    func enqueue(_ event: EngineEvent, ts: Double, run: String, reporter: DropReporter) {
        var wake = WakeList()
        state.withLock { state in
            guard !state.closed else { return }
            let seq = processSequence.wrappingAdd(1, ordering: .relaxed).newValue
            state.open.append(Envelope(event, seq: seq, ts: ts, run: run))
            admit(except: nil, state: &state, reporter: reporter, wake: &wake)
        }
        wake.signal(wakes)
    }

    /// Stamps several engine events (one wall-clock time, consecutive seqs) and appends them in order.
    func enqueue(contentsOf events: [EngineEvent], ts: Double, run: String, reporter: DropReporter) {
        var wake = WakeList()
        state.withLock { state in
            guard !state.closed else { return }
            var seq = processSequence.wrappingAdd(UInt64(events.count), ordering: .relaxed).newValue - UInt64(events.count)
            for event in events {
                seq += 1
                state.open.append(Envelope(event, seq: seq, ts: ts, run: run))
                if state.open.count >= segmentSize { seal(&state) }
            }
            admitGroup(state: &state, reporter: reporter, wake: &wake)
        }
        wake.signal(wakes)
    }

    /// Renumbers and appends envelopes from elsewhere when each lane of `room` has space for all of
    /// them within `limit`; else appends nothing and notes those lanes as overflowing.
    func enqueueIfRoom(_ envelopes: [Envelope], limit: Int, room: IngestRoom, defaultRun: String, reporter: DropReporter) -> IngestOutcome {
        let bound = min(max(0, limit), capacity)
        var wake = WakeList()
        let outcome = state.withLock { state -> IngestOutcome in
            guard !state.closed else { return .stopped }
            let total = state.total
            var full: [Int] = []
            for lane in state.lanes.indices where room == .allSinks || durable[lane] {
                if state.lanes[lane].depth(total: total) + envelopes.count > bound { full.append(lane) }
            }
            guard full.isEmpty else {
                let now = uptime()
                for lane in full { state.lanes[lane].lastOverflow = now }
                return .refused(sinks: full.map { sinks[$0].name })
            }
            for var envelope in envelopes {
                envelope.seq = processSequence.wrappingAdd(1, ordering: .relaxed).newValue
                if !Envelope.isValidRun(envelope.run) { envelope.run = Envelope.runName(envelope.run, empty: defaultRun) }
                push(envelope, except: nil, state: &state, reporter: reporter, wake: &wake)
            }
            return .accepted
        }
        wake.signal(wakes)
        return outcome
    }

    /// Renumbers and appends envelopes from elsewhere.
    func enqueueAll(_ envelopes: [Envelope], defaultRun: String, reporter: DropReporter) {
        var wake = WakeList()
        state.withLock { state in
            guard !state.closed else { return }
            for var envelope in envelopes {
                envelope.seq = processSequence.wrappingAdd(1, ordering: .relaxed).newValue
                if !Envelope.isValidRun(envelope.run) { envelope.run = Envelope.runName(envelope.run, empty: defaultRun) }
                push(envelope, except: nil, state: &state, reporter: reporter, wake: &wake)
            }
        }
        wake.signal(wakes)
    }

    /// With the lock held: appends to the log for every lane but `except`; notes the lanes to wake.
    private func push(_ envelope: Envelope, except: Int?, state: inout HubState, reporter: DropReporter, wake: inout WakeList) {
        state.open.append(envelope)
        admit(except: except, state: &state, reporter: reporter, wake: &wake)
    }

    /// With the lock held, after one envelope was appended to the open segment: makes room for it
    /// in every lane but `except` (dropping that lane's oldest when full), notes the lanes to wake,
    /// and seals the open segment when it is full.
    private func admit(except: Int?, state: inout HubState, reporter: DropReporter, wake: inout WakeList) {
        let total = state.total
        let index = total - 1
        if state.open.count >= segmentSize { seal(&state) }
        for lane in state.lanes.indices {
            if lane == except {
                state.lanes[lane].excluded.append(index)
                continue
            }
            check(lane: lane, total: total, state: &state, reporter: reporter, wake: &wake)
        }
    }

    /// With the lock held, after envelopes for every lane were appended (and full segments sealed):
    /// the lane checks of `admit`, once per lane for the whole group.
    private func admitGroup(state: inout HubState, reporter: DropReporter, wake: inout WakeList) {
        let total = state.total
        for lane in state.lanes.indices {
            check(lane: lane, total: total, state: &state, reporter: reporter, wake: &wake)
        }
    }

    /// With the lock held: drops lane `lane`'s oldest envelopes while it holds more than `capacity`
    /// (reporting the drops), and notes it for a wake-up if its drain thread waits.
    private func check(lane: Int, total: UInt64, state: inout HubState, reporter: DropReporter, wake: inout WakeList) {
        var dropped = false
        while state.lanes[lane].depth(total: total) > capacity {
            state.lanes[lane].dropOldest()
            dropped = true
        }
        if state.lanes[lane].waiting {
            state.lanes[lane].waiting = false
            wake.add(lane)
        }
        if dropped { state.lanes[lane].lastOverflow = uptime() }
        if dropped { report(lane: lane, force: false, state: &state, reporter: reporter, wake: &wake) }
    }

    /// With the lock held: emits a `sink.dropped` event about lane `index` to the other lanes
    /// when it has unreported drops and (unless `force`) its last report is old enough. Reports
    /// about the other lanes are rate-limited the same way, so this never storms.
    private func report(lane index: Int, force: Bool, state: inout HubState, reporter: DropReporter, wake: inout WakeList) {
        let now = uptime()
        let count = state.lanes[index].unreported
        guard count > 0, force || now - state.lanes[index].lastReport >= EventPipeline.dropReportInterval else { return }
        state.lanes[index].unreported = 0
        state.lanes[index].lastReport = now
        state.reports += 1
        let envelope = Envelope(
            seq: processSequence.wrappingAdd(1, ordering: .relaxed).newValue, ts: reporter.wallClock(), t: now,
            run: reporter.run, trace: reporter.trace, span: SpanID(trace: reporter.trace, index: state.reports),
            name: .sinkDropped, placement: nil,
            attrs: ["sink": .string(sinks[index].name), "count": .number(Double(count))])
        // Never into the overflowing sink itself: its queue is the one that is full.
        push(envelope, except: index, state: &state, reporter: reporter, wake: &wake)
    }

    func stats() -> [SinkStats] {
        let lanes = state.withLock { state in
            let total = state.total
            return state.lanes.map { (depth: $0.depth(total: total), dropped: $0.dropped, consumed: $0.consumed, batches: $0.batches,
                                      lastOverflow: $0.lastOverflow) }
        }
        let now = uptime()
        // The sinks' own health is read outside the hub's lock: a sink's lock never nests in it.
        return sinks.indices.map { i in
            let sink = sinks[i], lane = lanes[i], health = sink.health
            return SinkStats(sink: sink.name, type: sink.type, queueDepth: lane.depth, capacity: capacity,
                             dropped: lane.dropped &+ health.dropped, consumed: lane.consumed, batches: lane.batches,
                             up: health.up, errors: health.errors, lastError: health.lastError,
                             saturated: now - lane.lastOverflow < EventPipeline.saturationWindow, durable: durable[i])
        }
    }

    func unfinished() -> [SinkDrain] {
        state.withLock { state in
            let total = state.total
            return state.lanes.indices.filter { !state.lanes[$0].finished }.map { i in
                SinkDrain(sink: sinks[i].name, queued: state.lanes[i].depth(total: total), inFlight: state.lanes[i].inFlight)
            }
        }
    }

    var isIdle: Bool {
        state.withLock { state in
            let total = state.total
            return state.lanes.allSatisfy { $0.depth(total: total) == 0 && !$0.consuming }
        }
    }

    /// Refuses new events and tells every drain thread to finish; with a reporter, pending drop
    /// reports go out first.
    func stopAll(reporter: DropReporter?) {
        var wake = WakeList()
        state.withLock { state in
            guard !state.closed else { return }
            if let reporter {
                for index in state.lanes.indices { report(lane: index, force: true, state: &state, reporter: reporter, wake: &wake) }
            }
            state.closed = true
            for index in state.lanes.indices {
                state.lanes[index].stopping = true
                if state.lanes[index].waiting { state.lanes[index].waiting = false; wake.add(index) }
            }
        }
        wake.signal(wakes)
    }

    /// Waits for every drain thread to finish (any number of callers).
    func join() {
        for done in dones {
            done.wait()
            done.signal()
        }
    }

    /// What a drain thread takes under the lock.
    private enum Take {
        /// Shared segments (or filtered copies) with the offset this lane starts at in each.
        case batches([(items: [Envelope], lower: Int)], count: Int)
        case wait
        case finished
    }

    /// With the lock held: everything lane `index` has not taken, as slices of the shared segments
    /// (no envelope is copied unless some must be left out for this lane); frees the segments
    /// every lane has taken into `freed` (released after the lock).
    private func take(lane index: Int, state: inout HubState, freed: inout [Segment]) -> Take {
        let total = state.total
        if state.lanes[index].depth(total: total) == 0 {
            state.lanes[index].cursor = total
            state.lanes[index].excluded.removeAll()
            collect(&state, freed: &freed)
            if state.lanes[index].stopping { return .finished }
            state.lanes[index].waiting = true
            return .wait
        }
        if !state.open.isEmpty { seal(&state) }
        let from = state.lanes[index].cursor
        let excluded = state.lanes[index].excluded
        var chunks: [(items: [Envelope], lower: Int)] = []
        var count = 0
        for segment in state.segments {
            let end = segment.base + UInt64(segment.items.count)
            guard end > from else { continue }
            var chunk = (items: segment.items, lower: Int(max(from, segment.base) - segment.base))
            if !excluded.isEmpty, excluded.contains(where: { $0 >= segment.base && $0 < end }) {
                var kept: [Envelope] = []
                for offset in chunk.lower..<segment.items.count where !excluded.contains(segment.base + UInt64(offset)) {
                    kept.append(segment.items[offset])
                }
                chunk = (kept, 0)
            }
            if chunk.items.count > chunk.lower {
                count += chunk.items.count - chunk.lower
                chunks.append(chunk)
            }
        }
        state.lanes[index].cursor = total
        state.lanes[index].excluded.removeAll()
        state.lanes[index].consuming = true
        state.lanes[index].inFlight = count
        collect(&state, freed: &freed)
        return .batches(chunks, count: count)
    }

    /// With the lock held: moves the open segment to the sealed ones and opens a new one, from a
    /// spare buffer when there is one.
    private func seal(_ state: inout HubState) {
        let count = state.open.count
        let fresh = state.spare.popLast() ?? {
            var buffer: [Envelope] = []
            buffer.reserveCapacity(segmentSize)
            return buffer
        }()
        state.segments.append(Segment(base: state.openBase, items: state.open))
        state.open = fresh
        state.openBase += UInt64(count)
    }

    /// With the lock held: moves the segments every lane has passed into `freed`.
    private func collect(_ state: inout HubState, freed: inout [Segment]) {
        guard let oldest = state.lanes.map(\.cursor).min() else { return }
        var drop = 0
        while drop < state.segments.count, state.segments[drop].base + UInt64(state.segments[drop].items.count) <= oldest { drop += 1 }
        guard drop > 0 else { return }
        freed.append(contentsOf: state.segments[..<drop])
        state.segments.removeFirst(drop)
    }

    /// The drain thread of lane `index`: take everything queued (slices of the shared log, under
    /// the lock), consume it in batches outside the lock, repeat; at stop, drain, flush, close.
    /// The counters of a consumed batch are recorded at the next take, so each cycle locks once.
    func drain(lane index: Int, reporter: DropReporter) {
        let sink = sinks[index]
        var consumed: UInt64 = 0, batches: UInt64 = 0
        var spares: [[Envelope]] = []
        while true {
            var wake = WakeList()
            var freed: [Segment] = []
            var taken: Take? = state.withLock { state -> Take in
                while state.spare.count < Self.spareLimit, let buffer = spares.popLast() { state.spare.append(buffer) }
                if batches > 0 {
                    state.lanes[index].consuming = false
                    state.lanes[index].inFlight = 0
                    state.lanes[index].consumed += consumed
                    state.lanes[index].batches += batches
                    if !state.closed { report(lane: index, force: false, state: &state, reporter: reporter, wake: &wake) }
                }
                return take(lane: index, state: &state, freed: &freed)
            }
            wake.signal(wakes)
            spares.removeAll()
            // Envelopes every sink has seen are released outside the lock, once this lane no longer
            // holds them; the emptied buffers go back to the hub at the next take.
            func recycle() {
                while var segment = freed.popLast() {
                    segment.items.removeAll(keepingCapacity: true)
                    if spares.count < Self.spareLimit, segment.items.capacity >= segmentSize { spares.append(segment.items) }
                }
            }
            consumed = 0
            batches = 0
            switch taken! {
            case .finished:
                sink.flush()
                sink.close()
                state.withLock { $0.lanes[index].finished = true }
                dones[index].signal()
                return
            case .wait:
                recycle()
                wakes[index].wait()
                // Linger a moment so a burst becomes one batch: one wake-up per burst instead of
                // one per event (a futex round trip per event would cost the emitter far more).
                if linger > 0 { Thread.sleep(forTimeInterval: Double(linger) / 1e6) }
            case .batches(let chunks, let count):
                var list: [[Envelope]] = []
                list.reserveCapacity(chunks.count)
                for chunk in chunks {
                    var from = chunk.lower
                    while from < chunk.items.count {
                        let to = min(from + maxBatch, chunk.items.count)
                        // A whole segment is handed over as the shared array itself (no copy).
                        list.append(from == 0 && to == chunk.items.count ? chunk.items : Array(chunk.items[from..<to]))
                        from = to
                    }
                }
                batches += UInt64(list.count)
                // Everything taken goes to the sink in one call (one fsync for the jsonl sink).
                sink.consume(batches: list)
                consumed = UInt64(count)
            }
            // The taken segments are no longer referenced here: the freed ones can be emptied for reuse.
            taken = nil
            recycle()
            // Keeping up easily: let the next batch gather instead of taking the lock per event.
            if batches > 0 && consumed < UInt64(maxBatch) && linger > 0 { Thread.sleep(forTimeInterval: Double(linger) / 1e6) }
        }
    }
}

/// Lanes to wake once the lock is released (no allocation for up to four lanes).
private struct WakeList {
    private var first: (Int, Int, Int, Int) = (-1, -1, -1, -1)
    private var count = 0
    private var more: [Int] = []

    mutating func add(_ lane: Int) {
        switch count {
        case 0: first.0 = lane
        case 1: first.1 = lane
        case 2: first.2 = lane
        case 3: first.3 = lane
        default: more.append(lane)
        }
        count += 1
    }

    func signal(_ semaphores: [DispatchSemaphore]) {
        if count > 0 { semaphores[first.0].signal() }
        if count > 1 { semaphores[first.1].signal() }
        if count > 2 { semaphores[first.2].signal() }
        if count > 3 { semaphores[first.3].signal() }
        for lane in more { semaphores[lane].signal() }
    }
}
