/// Which runs `GET /api/runs` lists, in what order, from where.
public struct RunQuery: Sendable, Hashable {
    /// Case-insensitive part of the run id (which holds the test name).
    public var text: String?
    public var kind: RunKind?
    /// Test runs with this status only.
    public var status: TestRunStatus?
    /// Test runs of this invocation only.
    public var invocation: String?
    /// `recent`: most recently active first; `status`: failed, running, skipped, passed, then recent.
    public var order: Order = .recent
    /// Where the previous page ended (its `next`), nil for the first page.
    public var cursor: String?
    public var limit = 100

    public enum Order: String, Sendable, Hashable, CaseIterable { case recent, status }

    /// Everything, newest first, 100 at a time.
    public init() {}

    /// Reads `q`, `kind`, `status`, `invocation`, `order`, `cursor` and `limit` (at most `maxLimit`);
    /// a value it cannot read is an error naming the parameter and what it expects.
    public init(_ query: (String) -> String?, maxLimit: Int) throws(CallQueryError) {
        func value(_ name: String) -> String? { query(name).flatMap { $0.isEmpty ? nil : $0 } }
        text = value("q")
        if let k = value("kind") {
            guard let kind = RunKind(rawValue: k) else { throw CallQueryError("kind", "live, test or simulation", k) }
            self.kind = kind
        }
        if let s = value("status") {
            guard let status = TestRunStatus(rawValue: s) else { throw CallQueryError("status", "running, passed, failed or skipped", s) }
            self.status = status
        }
        invocation = value("invocation")
        if let o = value("order") {
            guard let order = Order(rawValue: o) else { throw CallQueryError("order", "recent or status", o) }
            self.order = order
        }
        cursor = value("cursor")
        if let l = value("limit") {
            guard let v = Int(l), v >= 1 else { throw CallQueryError("limit", "a whole number >= 1", l) }
            limit = min(v, maxLimit)
        }
    }
}

/// One page of runs: each run's summary with its test verdict (test runs with test events).
public struct RunPage: Sendable {
    public struct Row: Sendable {
        public var summary: RunSummary
        public var test: TestRun?
    }
    public var rows: [Row]
    /// The cursor of the next page, nil on the last one.
    public var next: String?
    /// Runs matching the query (over every page).
    public var matched: Int
    /// Runs known.
    public var total: Int
    /// The invocations of this page's test runs, newest first.
    public var invocations: [TestInvocationSummary]

    /// Lists `summaries` (every run a store knows) with the verdicts of `tests`, as `query` asks.
    public init(summaries: [RunSummary], tests: TestRunFold, query: RunQuery) {
        let needle = query.text?.lowercased()
        var matching: [Row] = []
        for summary in summaries {
            if let kind = query.kind, summary.kind != kind { continue }
            if let needle, !summary.id.lowercased().contains(needle) { continue }
            let test = tests.testRun(summary.id)
            if let status = query.status, test?.status != status { continue }
            if let invocation = query.invocation, test?.invocation != invocation { continue }
            matching.append(Row(summary: summary, test: test))
        }
        let rank: (Row) -> Int = { row in
            guard query.order == .status else { return 0 }
            switch row.test?.status { case .failed: return 0; case .running: return 1; case .skipped: return 2; case .passed: return 3; case nil: return 4 }
        }
        // A total order (rank, newest activity, id), so a cursor names a place in it.
        matching.sort { a, b in
            let (ra, rb) = (rank(a), rank(b))
            if ra != rb { return ra < rb }
            if a.summary.lastTs != b.summary.lastTs { return a.summary.lastTs > b.summary.lastTs }
            return a.summary.id < b.summary.id
        }
        var start = 0
        if let cursor = query.cursor.flatMap(Cursor.init(text:)) {
            start = matching.firstIndex { row in
                let r = rank(row)
                if r != cursor.rank { return r > cursor.rank }
                if row.summary.lastTs != cursor.lastTs { return row.summary.lastTs < cursor.lastTs }
                return row.summary.id > cursor.id
            } ?? matching.count
        }
        let end = min(matching.count, start + query.limit)
        rows = Array(matching[start..<end])
        next = end < matching.count ? rows.last.map { Cursor(rank: rank($0), lastTs: $0.summary.lastTs, id: $0.summary.id).text } : nil
        matched = matching.count
        total = summaries.count
        var seen: Set<String> = []
        invocations = rows.compactMap { row in
            guard let id = row.test?.invocation, seen.insert(id).inserted else { return nil }
            return tests.invocation(id)
        }.sorted { ($0.start, $0.id) > ($1.start, $1.id) }
    }

    /// A place in the order: `rank~lastTs~id`, the id last so it may hold any character.
    struct Cursor {
        var rank: Int
        var lastTs: Double
        var id: String
        var text: String { "\(rank)~\(lastTs)~\(id)" }
        init(rank: Int, lastTs: Double, id: String) { self.rank = rank; self.lastTs = lastTs; self.id = id }
        init?(text: String) {
            let parts = text.split(separator: "~", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3, let rank = Int(parts[0]), let lastTs = Double(parts[1]) else { return nil }
            self.init(rank: rank, lastTs: lastTs, id: String(parts[2]))
        }
    }

    /// Whether `text` is a cursor this listing made.
    public static func isCursor(_ text: String) -> Bool { Cursor(text: text) != nil }
}
