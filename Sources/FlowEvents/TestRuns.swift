import FlowFetch
import FlowJSON

/// What a test run came to, from the test kit's `test.start` and `test.end` events.
public enum TestRunStatus: String, Sendable, Hashable, CaseIterable {
    /// Started, not ended (still running, or its process died).
    case running
    case passed, failed, skipped
}

/// One traced test of one invocation, as its `test.start`/`test.end` events tell it.
public struct TestRun: Sendable, Hashable {
    /// The run id (`test:<invocation>:<name>`).
    public var run: String
    /// The test's name (`Suite.test`).
    public var test: String
    /// The invocation it ran in.
    public var invocation: String
    public var status: TestRunStatus
    /// Wall clock of its start, seconds since 1970.
    public var start: Double
    /// Seconds from start to end, nil while running.
    public var duration: Double?
    /// The first failures it reported (at most 5, each at most 1,000 bytes: the whole list is in
    /// its `test.end` event).
    public var failures: [String]
    /// How many failures it had (can exceed `failures.count`).
    public var failureCount: Int
    /// `swift-testing`, `xctest` or `none`.
    public var framework: String?
}

/// One invocation (a `swift test` run) with its tests' counts.
public struct TestInvocationSummary: Sendable, Hashable {
    public var id: String
    /// Wall clock of its start, seconds since 1970.
    public var start: Double
    /// Wall clock of its newest test event.
    public var lastTs: Double
    public var host: String?
    public var revision: String?
    public var passed = 0, failed = 0, skipped = 0, running = 0
    /// Every test run of it.
    public var tests: Int { passed + failed + skipped + running }
}

/// The read model of test runs: folds `test.start` and `test.end` envelopes (in any order, any
/// number of times: a repeated event changes nothing) into test runs and invocations.
public struct TestRunFold: Sendable {
    private var runs: [String: TestRun] = [:]
    private var invocations: [String: TestInvocationSummary] = [:]

    /// An empty fold.
    public init() {}

    /// Whether `envelope` is one the fold reads.
    public static func reads(_ envelope: Envelope) -> Bool { envelope.name == .testStart || envelope.name == .testEnd }

    /// Adds one envelope; any other than `test.start`/`test.end` is ignored.
    public mutating func add(_ e: Envelope) {
        guard Self.reads(e) else { return }
        let a = e.event.attrs
        let invocationID = a["invocation"]?.stringValue ?? "unknown"
        var run = runs[e.run] ?? TestRun(run: e.run, test: a["test"]?.stringValue ?? e.run, invocation: invocationID,
                                         status: .running, start: e.ts, duration: nil, failures: [], failureCount: 0)
        let before = run.status
        if e.name == .testStart {
            run.start = min(run.start, e.ts)
            run.framework = a["framework"]?.stringValue ?? run.framework
        } else {
            run.status = a["status"]?.stringValue.flatMap(TestRunStatus.init(rawValue:)).flatMap { $0 == .running ? nil : $0 } ?? .failed
            run.duration = a["duration"]?.numberValue.map { max(0, $0) }
            let failures = a["failures"]?.arrayValue?.compactMap(\.stringValue) ?? []
            run.failures = failures.prefix(5).map { $0.utf8.count <= 1000 ? $0 : String($0.prefix(990)) + " [cut]" }
            run.failureCount = max(failures.count, Int(a["failureCount"]?.numberValue ?? 0))
            if run.start > e.ts { run.start = e.ts - (run.duration ?? 0) }
        }
        let known = runs[e.run] != nil
        runs[e.run] = run
        var invocation = invocations[invocationID]
            ?? TestInvocationSummary(id: invocationID, start: a["invocationStart"]?.numberValue ?? e.ts, lastTs: e.ts)
        if let start = a["invocationStart"]?.numberValue { invocation.start = min(invocation.start, start) }
        invocation.lastTs = max(invocation.lastTs, e.ts)
        invocation.host = a["host"]?.stringValue ?? invocation.host
        invocation.revision = a["revision"]?.stringValue ?? invocation.revision
        if known { invocation[count: before] -= 1 }
        invocation[count: run.status] += 1
        invocations[invocationID] = invocation
    }

    /// The test run `run`, nil when no test event named it.
    public func testRun(_ run: String) -> TestRun? { runs[run] }

    /// Every test run.
    public var testRuns: Dictionary<String, TestRun>.Values { runs.values }

    /// Every invocation, newest (latest start) first.
    public var invocationSummaries: [TestInvocationSummary] {
        invocations.values.sorted { ($0.start, $0.id) > ($1.start, $1.id) }
    }

    /// Invocation `id`, nil when unknown.
    public func invocation(_ id: String) -> TestInvocationSummary? { invocations[id] }
}

extension TestInvocationSummary {
    fileprivate subscript(count status: TestRunStatus) -> Int {
        get {
            switch status { case .running: running; case .passed: passed; case .failed: failed; case .skipped: skipped }
        }
        set {
            switch status {
            case .running: running = newValue
            case .passed: passed = newValue
            case .failed: failed = newValue
            case .skipped: skipped = newValue
            }
        }
    }
}
