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

    private let run: String
    private let hub: Hub
    private let wallClock: @Sendable () -> Double
    private let trace: TraceID
    private let reporter: DropReporter

    /// Creates a pipeline and starts one drain thread per sink.
    /// - Parameters:
    ///   - run: the run stamped on events given to `receive` (`live` by default).
    ///   - sinks: the sinks, in config order.
    ///   - queueCapacity: each sink's queue bound (envelopes).
    ///   - maxBatch: the most envelopes handed to one `consume` call.
    ///   - linger: seconds a drain thread waits after waking before it takes the queue, so bursts
    ///     are consumed as batches (events reach sinks at most about this much later).
    ///   - wallClock: seconds since 1970, UTC (injectable for tests).
    public init(run: String = "live", sinks: [any EventSink], queueCapacity: Int = 65536, maxBatch: Int = 1024,
                linger: Double = 0.001, wallClock: @escaping @Sendable () -> Double = WallClock.now) {
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
        for sink in sinks {
            if let observer = sink as? any QueueDepthObserver {
                observer.observeQueueDepth { [weak self] in self?.stats() ?? [] }
            }
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

    /// Receives one engine event for `run`.
    func receive(_ event: EngineEvent, run: String) {
        let ts = wallClock()
        hub.enqueue(reporter: reporter) { Envelope(event, seq: $0, ts: ts, run: run) }
    }

    /// Puts envelopes that came from elsewhere (another process, `POST /api/ingest`, a replayed
    /// trace) through the pipeline. Each gets a fresh local `seq`; `ts`, `t`, `run`, `trace`,
    /// `span`, name, placement and attrs are kept.
    public func ingest(_ envelopes: [Envelope]) {
        guard !envelopes.isEmpty else { return }
        hub.enqueueAll(envelopes, reporter: reporter)
    }

    /// A view of this pipeline that stamps `run` instead of the pipeline's own run: give it to
    /// the engine of a test run or a simulation so its events reach the same sinks.
    public func sink(run: String) -> PipelineRunSink {
        PipelineRunSink(pipeline: self, run: run)
    }

    // MARK: Stats

    /// Every sink's counters, in the pipeline's sink order.
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

    /// Waits until every queue is empty and no batch is being consumed, or `timeout` seconds pass.
    /// Returns whether everything was drained. Events emitted meanwhile extend the wait.
    @discardableResult
    public func waitUntilDrained(timeout: Double = 10) -> Bool {
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, timeout) * 1e9)
        while true {
            if hub.isIdle { return true }
            if DispatchTime.now().uptimeNanoseconds >= deadline { return false }
            usleep(1000)
        }
    }

    // MARK: Stopping

    /// Stops the pipeline without losing anything already received: reports pending drops,
    /// refuses new events, lets every sink consume its whole queue, calls `flush()` on each sink
    /// (then `close()` on each `ClosingSink`) and joins the drain threads. Idempotent; after it
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
        SignalRelay.install(signals) { [self] in
            shutdown()
            then()
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

// MARK: - Queues and drain threads

/// What a `sink.dropped` event is stamped with.
private struct DropReporter: Sendable {
    var run: String
    var trace: TraceID
    var wallClock: @Sendable () -> Double
}

/// One sink's queue: `items[head...]` are waiting, oldest first.
private struct LaneQueue {
    var items: [Envelope] = []
    var head = 0
    var waiting = false
    var stopping = false
    var consuming = false
    var dropped: UInt64 = 0
    var unreported: UInt64 = 0
    var lastReport = -Double.infinity
    var consumed: UInt64 = 0
    var batches: UInt64 = 0

    var depth: Int { items.count - head }

    /// Appends; at capacity the oldest is dropped (and compacted away now and then).
    /// Returns true when something was dropped.
    mutating func push(_ envelope: Envelope, capacity: Int) -> Bool {
        items.append(envelope)
        guard items.count - head > capacity else { return false }
        head += 1
        dropped += 1
        unreported += 1
        if head >= max(1, capacity / 2) {
            items.removeFirst(head)
            head = 0
        }
        return true
    }
}

/// The shared state of a pipeline: every lane's queue under one lock (one acquisition per event),
/// plus a semaphore per drain thread to wake it and one to say it has finished.
private final class Hub: Sendable {
    let sinks: [any EventSink]
    let capacity: Int
    let maxBatch: Int
    let linger: UInt32
    let state: Mutex<HubState>
    let wakes: [DispatchSemaphore]
    let dones: [DispatchSemaphore]
    let startUptime = DispatchTime.now().uptimeNanoseconds

    struct HubState: ~Copyable {
        var closed = false
        var reports: UInt64 = 0
        var lanes: [LaneQueue]
    }

    init(sinks: [any EventSink], capacity: Int, maxBatch: Int, linger: UInt32) {
        self.sinks = sinks
        self.capacity = capacity
        self.maxBatch = maxBatch
        self.linger = linger
        self.state = Mutex(HubState(lanes: Array(repeating: LaneQueue(), count: sinks.count)))
        self.wakes = sinks.map { _ in DispatchSemaphore(value: 0) }
        self.dones = sinks.map { _ in DispatchSemaphore(value: 0) }
    }

    func uptime() -> Double { Double(DispatchTime.now().uptimeNanoseconds &- startUptime) / 1e9 }

    /// Stamps one envelope (`make` gets the seq) and appends it to every lane.
    func enqueue(reporter: DropReporter, _ make: (UInt64) -> Envelope) {
        let wake = state.withLock { state -> [Int] in
            guard !state.closed else { return [] }
            let seq = processSequence.wrappingAdd(1, ordering: .relaxed).newValue
            var wake: [Int] = []
            push(make(seq), except: nil, state: &state, reporter: reporter, wake: &wake)
            return wake
        }
        for index in wake { wakes[index].signal() }
    }

    /// Renumbers and appends envelopes from elsewhere.
    func enqueueAll(_ envelopes: [Envelope], reporter: DropReporter) {
        let wake = state.withLock { state -> [Int] in
            guard !state.closed else { return [] }
            var wake: [Int] = []
            for var envelope in envelopes {
                envelope.seq = processSequence.wrappingAdd(1, ordering: .relaxed).newValue
                push(envelope, except: nil, state: &state, reporter: reporter, wake: &wake)
            }
            return wake
        }
        for index in wake { wakes[index].signal() }
    }

    /// With the lock held: appends to every lane but `except`; notes the lanes to wake.
    private func push(_ envelope: Envelope, except: Int?, state: inout HubState, reporter: DropReporter, wake: inout [Int]) {
        for index in state.lanes.indices where index != except {
            let dropped = state.lanes[index].push(envelope, capacity: capacity)
            if state.lanes[index].waiting {
                state.lanes[index].waiting = false
                wake.append(index)
            }
            if dropped { report(lane: index, force: false, state: &state, reporter: reporter, wake: &wake) }
        }
    }

    /// With the lock held: emits a `sink.dropped` event about lane `index` to the other lanes
    /// when it has unreported drops and (unless `force`) its last report is old enough. Reports
    /// about the other lanes are rate-limited the same way, so this never storms.
    private func report(lane index: Int, force: Bool, state: inout HubState, reporter: DropReporter, wake: inout [Int]) {
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
        state.withLock { state in
            state.lanes.indices.map { i in
                let lane = state.lanes[i]
                return SinkStats(sink: sinks[i].name, queueDepth: lane.depth, capacity: capacity, dropped: lane.dropped,
                                 consumed: lane.consumed, batches: lane.batches)
            }
        }
    }

    var isIdle: Bool { state.withLock { $0.lanes.allSatisfy { $0.depth == 0 && !$0.consuming } } }

    /// Refuses new events and tells every drain thread to finish; with a reporter, pending drop
    /// reports go out first.
    func stopAll(reporter: DropReporter?) {
        let wake = state.withLock { state -> [Int] in
            guard !state.closed else { return [] }
            var wake: [Int] = []
            if let reporter {
                for index in state.lanes.indices { report(lane: index, force: true, state: &state, reporter: reporter, wake: &wake) }
            }
            state.closed = true
            for index in state.lanes.indices {
                state.lanes[index].stopping = true
                if state.lanes[index].waiting { state.lanes[index].waiting = false; wake.append(index) }
            }
            return wake
        }
        for index in wake { wakes[index].signal() }
    }

    /// Waits for every drain thread to finish (any number of callers).
    func join() {
        for done in dones {
            done.wait()
            done.signal()
        }
    }

    /// The drain thread of lane `index`: take everything queued (an O(1) swap under the lock),
    /// consume it in batches outside the lock, repeat; at stop, drain, flush, close. The counters
    /// of a consumed batch are recorded at the next take, so each cycle locks once.
    func drain(lane index: Int, reporter: DropReporter) {
        let sink = sinks[index]
        var taken: [Envelope] = []
        var consumed: UInt64 = 0, batches: UInt64 = 0
        while true {
            var wake: [Int] = []
            let (start, finished) = state.withLock { state -> (Int, Bool) in
                if batches > 0 {
                    state.lanes[index].consuming = false
                    state.lanes[index].consumed += consumed
                    state.lanes[index].batches += batches
                    if !state.closed { report(lane: index, force: false, state: &state, reporter: reporter, wake: &wake) }
                }
                if state.lanes[index].depth == 0 {
                    state.lanes[index].items.removeAll(keepingCapacity: true)
                    state.lanes[index].head = 0
                    if state.lanes[index].stopping { return (0, true) }
                    state.lanes[index].waiting = true
                    return (-1, false)
                }
                swap(&state.lanes[index].items, &taken)
                let start = state.lanes[index].head
                state.lanes[index].head = 0
                state.lanes[index].consuming = true
                return (start, false)
            }
            for other in wake { wakes[other].signal() }
            consumed = 0
            batches = 0
            if finished { break }
            if start < 0 {
                wakes[index].wait()
                // Linger a moment so a burst becomes one batch: one wake-up per burst instead of
                // one per event (a futex round trip per event would cost the emitter far more).
                if linger > 0 { usleep(linger) }
                continue
            }
            var from = start
            while from < taken.count {
                let to = min(from + maxBatch, taken.count)
                sink.consume(from == 0 && to == taken.count ? taken : Array(taken[from..<to]))
                batches += 1
                from = to
            }
            consumed = UInt64(taken.count - start)
            let small = consumed < UInt64(maxBatch)
            // Keep the buffer for the next swap unless a burst made it large.
            taken.removeAll(keepingCapacity: taken.capacity <= 16_384)
            // Keeping up easily: let the next batch gather instead of taking the lock per event.
            if small && linger > 0 { usleep(linger) }
        }
        sink.flush()
        if let closing = sink as? any ClosingSink { closing.close() }
        dones[index].signal()
    }
}
