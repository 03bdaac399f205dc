import Synchronization

/// What a metric family measures, as written on its `# TYPE` line.
public enum MetricKind: String, Sendable {
    /// Only goes up.
    case counter
    /// Goes up and down.
    case gauge
    /// Observations counted into buckets, with their sum and count.
    case histogram
}

/// A family of series sharing a name, help text and label names; the registry renders it.
public protocol MetricFamily: AnyObject, Sendable {
    /// The `# TYPE`.
    var kind: MetricKind { get }
    /// Name, help, labels, unit and label value limits.
    var descriptor: FamilyDescriptor { get }
    /// Number of series.
    var seriesCount: Int { get }
    /// Appends the family (HELP, TYPE, every series) in `format` to `out`.
    func write(to out: inout [UInt8], format: Exposition.Format)
    /// Appends the series count and every value `write` would write to `state`, so the registry can
    /// reuse its last render while no value changed; returns false if the family cannot say (it is
    /// then rendered on every scrape). The default returns false.
    func snapshot(into state: inout [UInt64]) -> Bool
}

extension MetricFamily {
    /// Cannot say: the registry renders on every scrape.
    public func snapshot(into state: inout [UInt64]) -> Bool { false }
}

/// A counter: one atomic add per increment, no lock.
public final class Counter: Sendable {
    @usableFromInline let storage = Atomic<UInt64>(0)

    init() {}

    /// Adds one.
    @inlinable public func inc() { storage.wrappingAdd(1, ordering: .relaxed) }
    /// Adds `amount`.
    @inlinable public func add(_ amount: UInt64) { storage.wrappingAdd(amount, ordering: .relaxed) }
    /// Sets the counter to a cumulative count kept elsewhere (read at scrape time), never lower.
    func mirror(_ total: UInt64) {
        var old = storage.load(ordering: .relaxed)
        while old < total {
            let (done, seen) = storage.compareExchange(expected: old, desired: total, ordering: .relaxed)
            if done { return }
            old = seen
        }
    }
    /// The current count.
    public var value: UInt64 { storage.load(ordering: .relaxed) }
}

/// A gauge: a value that goes up and down, stored as the bit pattern of a `Double`.
public final class Gauge: Sendable {
    @usableFromInline let bits = Atomic<UInt64>(0)

    init() {}

    /// Sets the value.
    @inlinable public func set(_ value: Double) { bits.store(value.bitPattern, ordering: .relaxed) }
    /// Adds `delta` (may be negative).
    public func add(_ delta: Double) {
        var old = bits.load(ordering: .relaxed)
        while true {
            let (done, seen) = bits.weakCompareExchange(
                expected: old, desired: (Double(bitPattern: old) + delta).bitPattern,
                successOrdering: .relaxed, failureOrdering: .relaxed)
            if done { return }
            old = seen
        }
    }
    /// The current value.
    public var value: Double { Double(bitPattern: bits.load(ordering: .relaxed)) }
}

/// One atomic count; the histogram keeps one per bucket.
@usableFromInline
final class AtomicCount: Sendable {
    @usableFromInline let value = Atomic<UInt64>(0)
    init() {}
}

/// A histogram series: per-bucket atomic counts and an atomic sum, no lock on observe.
public final class Histogram: Sendable {
    /// Bucket upper bounds, increasing, without `+Inf`.
    public let upperBounds: [Double]
    /// Non-cumulative counts; the last one is the `+Inf` bucket.
    let counts: [AtomicCount]
    let sumBits = Atomic<UInt64>(0)

    init(upperBounds: [Double]) {
        self.upperBounds = upperBounds
        counts = (0...upperBounds.count).map { _ in AtomicCount() }
    }

    /// Records one observation (NaN lands only in `+Inf` and makes the sum NaN, as in client_golang).
    public func observe(_ value: Double) {
        var i = 0
        let n = upperBounds.count
        if n > 16 {
            var hi = n
            while i < hi {
                let mid = (i + hi) / 2
                if value <= upperBounds[mid] { hi = mid } else { i = mid + 1 }
            }
        } else {
            while i < n, !(value <= upperBounds[i]) { i += 1 }
        }
        counts[i].value.wrappingAdd(1, ordering: .relaxed)
        var old = sumBits.load(ordering: .relaxed)
        while true {
            let (done, seen) = sumBits.weakCompareExchange(
                expected: old, desired: (Double(bitPattern: old) + value).bitPattern,
                successOrdering: .relaxed, failureOrdering: .relaxed)
            if done { return }
            old = seen
        }
    }

    /// Cumulative counts per bucket, the last being `+Inf` (equal to `count`).
    public var cumulativeCounts: [UInt64] {
        var total: UInt64 = 0
        return counts.map { total &+= $0.value.load(ordering: .relaxed); return total }
    }
    /// Number of observations.
    public var count: UInt64 { counts.reduce(0) { $0 &+ $1.value.load(ordering: .relaxed) } }
    /// Sum of observations.
    public var sum: Double { Double(bitPattern: sumBits.load(ordering: .relaxed)) }
}

/// The label value that stands for every value beyond a label's limit of distinct values.
public let otherLabelValue = "_other"

/// What a family writes the same at every scrape, encoded once per format when it is created.
struct FamilyText: Sendable {
    /// The `# HELP`, `# TYPE` (and OpenMetrics `# UNIT`) lines.
    var header: [UInt8]
    /// The sample name: `name`, `name_total` or, for a histogram, `name_bucket`.
    var sample: [UInt8]
    /// A histogram's `name_sum` and `name_count`.
    var sum: [UInt8] = []
    var count: [UInt8] = []
    /// A histogram's `le="..."} ` per bucket, `+Inf` last, and the longest of them.
    var le: [[UInt8]] = []
    var leMax = 0

    init(name: String, help: String, type: String, unit: String?, format: Exposition.Format, sample: String) {
        var header: [UInt8] = []
        TextOut.header(name: name, help: help, type: type, unit: unit, format: format, to: &header)
        self.header = header
        self.sample = Array(sample.utf8)
    }

    /// Texts for both formats.
    static func pair(_ make: (Exposition.Format) -> FamilyText) -> [FamilyText] {
        [make(.prometheusText), make(.openMetrics)]
    }
}

extension Exposition.Format {
    /// Index into a family's `FamilyText` pair.
    var textIndex: Int { self == .openMetrics ? 1 : 0 }
}

/// The series of one family, found by label values under a lock, kept sorted for rendering.
final class SeriesTable<Child: AnyObject & Sendable>: Sendable {
    /// One series with its label text encoded once, when the series is created.
    struct Row {
        var values: [String]
        /// The table's sample name then `{a="x",b="y"} ` (or ` ` without labels): a line up to its value.
        var line: [UInt8]
        /// For a histogram, `name_bucket{a="x",b="y",` (or `name_bucket{`): a bucket line up to `le`.
        var open: [UInt8]
        var child: Child
    }

    struct State {
        var children: [[String]: Child] = [:]
        var rows: [Row] = []
        /// Distinct values seen per capped label (same order as `caps`).
        var seen: [Set<String>]
    }

    let labelNames: [String]
    /// Capped labels: position in `labelNames` and limit of distinct values.
    let caps: [(index: Int, limit: Int)]
    let state: Mutex<State>

    /// The sample name each row's `line` starts with (empty for a histogram).
    let sample: [UInt8]
    /// The `name_bucket` each row's `open` starts with, or nil (no `open`) for other kinds.
    let bucket: [UInt8]?

    init(_ descriptor: FamilyDescriptor, sample: [UInt8], bucket: [UInt8]? = nil) {
        self.sample = sample
        self.bucket = bucket
        labelNames = descriptor.labelNames
        caps = descriptor.caps
        state = Mutex(State(seen: Array(repeating: [], count: descriptor.caps.count)))
    }

    /// The child for `values`, folding capped labels beyond their limit into `_other`, creating it if new.
    func child(_ values: [String], make: () -> Child) -> Child {
        precondition(values.count == labelNames.count,
                     "expected \(labelNames.count) label values (\(labelNames)), got \(values.count)")
        return state.withLock { s in
            if let c = s.children[values] { return c }
            var key = values
            for (n, cap) in caps.enumerated() {
                let v = key[cap.index]
                if v == otherLabelValue || s.seen[n].contains(v) { continue }
                if s.seen[n].count < cap.limit { s.seen[n].insert(v) } else { key[cap.index] = otherLabelValue }
            }
            if key != values, let c = s.children[key] { return c }
            let c = make()
            s.children[key] = c
            var lo = 0, hi = s.rows.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if s.rows[mid].values.lexicographicallyPrecedes(key) { lo = mid + 1 } else { hi = mid }
            }
            let pairs = TextOut.labelPairs(names: labelNames, values: key)
            let line = sample + (pairs.isEmpty ? [UInt8(ascii: " ")] : [UInt8(ascii: "{")] + pairs + Array("} ".utf8))
            let open = bucket.map { $0 + (pairs.isEmpty ? [UInt8(ascii: "{")] : [UInt8(ascii: "{")] + pairs + [UInt8(ascii: ",")]) } ?? []
            s.rows.insert(Row(values: key, line: line, open: open, child: c), at: lo)
            return c
        }
    }

    /// Number of series.
    var count: Int { state.withLock { $0.rows.count } }

    /// Calls `body` under the lock with the series in label-value order.
    /// The rows are lent in place, not copied (no retain/release of their arrays per row).
    /// Each family writes its rows with its own copy of the chunked loop: one shared method taking a
    /// per-row closure measured 2.5x slower (the closures were not inlined through `TextOut.append`).
    func withRows(_ body: (UnsafeBufferPointer<Row>) -> Void) {
        state.withLock { s in s.rows.withUnsafeBufferPointer { body($0) } }
    }

    /// Appends the number of series, then what `values` appends for each series, in render order
    /// (a family's `snapshot`).
    func snapshot(into out: inout [UInt64], _ values: (Child, inout [UInt64]) -> Void) {
        withRows { rows in
            out.append(UInt64(rows.count))
            for i in rows.indices { values(rows[i].child, &out) }
        }
    }
}

/// What every family kind shares: name, help, label names, unit and label value limits, validated.
public struct FamilyDescriptor: Sendable {
    /// The metric name (counters end in `_total` in Prometheus text format).
    public let name: String
    /// The `# HELP` text.
    public let help: String
    /// Label names, in order.
    public let labelNames: [String]
    /// Base unit written as `# UNIT` in OpenMetrics, or nil.
    public let unit: String?
    /// Limit of distinct values per capped label; values beyond it fold into `_other`.
    public let valueLimits: [String: Int]
    /// Capped labels as positions in `labelNames`, with their limits.
    let caps: [(index: Int, limit: Int)]

    init(name: String, help: String, labelNames: [String], unit: String?, valueLimits: [String: Int],
         reserved: Set<String>) throws(MetricsError) {
        guard Self.isMetricName(name) else {
            throw MetricsError("invalid metric name \"\(name)\": expected [a-zA-Z_:][a-zA-Z0-9_:]*")
        }
        var seen = Set<String>()
        for label in labelNames {
            guard Self.isLabelName(label), !label.hasPrefix("__") else {
                throw MetricsError("metric \(name): invalid label name \"\(label)\": expected [a-zA-Z_][a-zA-Z0-9_]* not starting with __")
            }
            guard !reserved.contains(label) else { throw MetricsError("metric \(name): label name \"\(label)\" is reserved") }
            guard seen.insert(label).inserted else { throw MetricsError("metric \(name): duplicate label name \"\(label)\"") }
        }
        var caps: [(index: Int, limit: Int)] = []
        for (label, limit) in valueLimits.sorted(by: { $0.key < $1.key }) {
            guard let index = labelNames.firstIndex(of: label) else {
                throw MetricsError("metric \(name): value limit for \"\(label)\", which is not one of its labels \(labelNames)")
            }
            guard limit >= 1 else { throw MetricsError("metric \(name): value limit for \"\(label)\" must be >= 1, got \(limit)") }
            caps.append((index, limit))
        }
        if let unit {
            guard Self.isLabelName(unit) else { throw MetricsError("metric \(name): invalid unit \"\(unit)\"") }
        }
        self.name = name
        self.help = help
        self.labelNames = labelNames
        self.unit = unit
        self.valueLimits = valueLimits
        self.caps = caps
    }

    static func isMetricName(_ s: String) -> Bool {
        guard let first = s.utf8.first, !(48...57).contains(first) else { return false }
        return s.utf8.allSatisfy { isNameByte($0) || $0 == UInt8(ascii: ":") }
    }

    static func isLabelName(_ s: String) -> Bool {
        guard let first = s.utf8.first, !(48...57).contains(first) else { return false }
        return s.utf8.allSatisfy(isNameByte)
    }

    static func isNameByte(_ b: UInt8) -> Bool {
        (65...90).contains(b) || (97...122).contains(b) || (48...57).contains(b) || b == UInt8(ascii: "_")
    }
}

/// The members every family kind forwards to its descriptor.
extension MetricFamily {
    /// Label names, in order.
    public var labelNames: [String] { descriptor.labelNames }
    /// Limit of distinct values per capped label; values beyond it fold into `_other`.
    public var valueLimits: [String: Int] { descriptor.valueLimits }
    /// The metric name as written in Prometheus text format (counters end in `_total`).
    public var name: String { descriptor.name }
    /// The `# HELP` text.
    public var help: String { descriptor.help }
    /// The base unit (`seconds`, `bytes`), written as `# UNIT` in OpenMetrics; nil for none.
    public var unit: String? { descriptor.unit }
}

/// A counter family: `family.labels("main_paywall", "hit").inc()`.
public final class CounterFamily: MetricFamily {
    /// Name, help, label names, unit and label value limits.
    public let descriptor: FamilyDescriptor
    /// The family name in OpenMetrics (the name without `_total`).
    public let openMetricsName: String
    /// Header and sample name, Prometheus text then OpenMetrics.
    let texts: [FamilyText]
    let table: SeriesTable<Counter>

    /// A counter family; in Prometheus text its samples are named `name`, in OpenMetrics the
    /// family is `name` without `_total` and samples are `<that>_total`.
    public init(name: String, help: String, labelNames: [String] = [], unit: String? = nil,
                valueLimits: [String: Int] = [:]) throws(MetricsError) {
        descriptor = try FamilyDescriptor(name: name, help: help, labelNames: labelNames, unit: unit,
                                          valueLimits: valueLimits, reserved: [])
        openMetricsName = name.hasSuffix("_total") ? String(name.dropLast(6)) : name
        if let unit, !openMetricsName.hasSuffix("_" + unit) {
            throw MetricsError("metric \(name): unit \"\(unit)\" must be the suffix of the name (before _total)")
        }
        let omName = openMetricsName
        texts = FamilyText.pair { format in
            format == .openMetrics
                ? FamilyText(name: omName, help: help, type: "counter", unit: unit, format: format, sample: omName + "_total")
                : FamilyText(name: name, help: help, type: "counter", unit: unit, format: format, sample: name)
        }
        table = SeriesTable(descriptor, sample: Array(name.utf8))
        if labelNames.isEmpty { _ = labels() }
    }

    /// Always `.counter`.
    public var kind: MetricKind { .counter }
    /// Number of series (label value combinations) so far.
    public var seriesCount: Int { table.count }

    /// The counter for these label values (in `labelNames` order); look it up once, then increment it lock-free.
    public func labels(_ values: String...) -> Counter { labels(values) }
    /// The counter for these label values (in `labelNames` order).
    public func labels(_ values: [String]) -> Counter { table.child(values, make: Counter.init) }

    /// Appends the series count and every counter's value.
    public func snapshot(into state: inout [UInt64]) -> Bool {
        table.snapshot(into: &state) { counter, out in out.append(counter.storage.load(ordering: .relaxed)) }
        return true
    }

    /// Appends HELP, TYPE and every series, sorted by label values, in `format`.
    public func write(to out: inout [UInt8], format: Exposition.Format) {
        let texts = self.texts[format.textIndex]
        // Rows' lines start with the Prometheus sample name; OpenMetrics may write another one instead.
        let same = texts.sample == table.sample
        let sample = same ? [] : texts.sample, skip = same ? 0 : table.sample.count
        let fixed = sample.count + TextOut.maxUInt + 1
        table.withRows { rows in
            // In chunks that fit the spare capacity, checked per row; the array grows only between chunks.
            var next = 0, headerDone = false
            repeat {
                let first = next < rows.count ? rows[next].line.count + fixed : 0
                TextOut.append(to: &out, minimum: (headerDone ? 0 : texts.header.count) + first) { text in
                    if !headerDone { text.copy(texts.header); headerDone = true }
                    sample.withUnsafeBufferPointer { sample in
                        var i = next
                        while i < rows.count, text.room >= rows[i].line.count + fixed {
                            if skip == 0 {
                                text.copy(rows[i].line)
                            } else {
                                text.copy(sample)
                                rows[i].line.withUnsafeBufferPointer { text.copy(UnsafeBufferPointer(rebasing: $0[skip...])) }
                            }
                            text.uint(rows[i].child.storage.load(ordering: .relaxed))
                            text.byte(UInt8(ascii: "\n"))
                            i += 1
                        }
                        next = i
                    }
                }
            } while next < rows.count
        }
    }
}

/// A gauge family: `family.labels("memory").set(3)`.
public final class GaugeFamily: MetricFamily {
    /// Name, help, label names, unit and label value limits.
    public let descriptor: FamilyDescriptor
    /// Header and sample name, Prometheus text then OpenMetrics.
    let texts: [FamilyText]
    let table: SeriesTable<Gauge>

    /// A gauge family.
    public init(name: String, help: String, labelNames: [String] = [], unit: String? = nil,
                valueLimits: [String: Int] = [:]) throws(MetricsError) {
        descriptor = try FamilyDescriptor(name: name, help: help, labelNames: labelNames, unit: unit,
                                          valueLimits: valueLimits, reserved: [])
        if let unit, !name.hasSuffix("_" + unit) { throw MetricsError("metric \(name): unit \"\(unit)\" must be the suffix of the name") }
        texts = FamilyText.pair { FamilyText(name: name, help: help, type: "gauge", unit: unit, format: $0, sample: name) }
        table = SeriesTable(descriptor, sample: Array(name.utf8))
        if labelNames.isEmpty { _ = labels() }
    }

    /// Always `.gauge`.
    public var kind: MetricKind { .gauge }
    /// Number of series (label value combinations) so far.
    public var seriesCount: Int { table.count }

    /// The gauge for these label values (in `labelNames` order).
    public func labels(_ values: String...) -> Gauge { labels(values) }
    /// The gauge for these label values (in `labelNames` order).
    public func labels(_ values: [String]) -> Gauge { table.child(values, make: Gauge.init) }

    /// Appends the series count and every gauge's value (its bits).
    public func snapshot(into state: inout [UInt64]) -> Bool {
        table.snapshot(into: &state) { gauge, out in out.append(gauge.bits.load(ordering: .relaxed)) }
        return true
    }

    /// Appends HELP, TYPE and every series, sorted by label values, in `format`.
    public func write(to out: inout [UInt8], format: Exposition.Format) {
        let texts = self.texts[format.textIndex]
        let fixed = TextOut.maxDouble + 1
        table.withRows { rows in
            // In chunks that fit the spare capacity, checked per row; the array grows only between chunks.
            var next = 0, headerDone = false
            repeat {
                let first = next < rows.count ? rows[next].line.count + fixed : 0
                TextOut.append(to: &out, minimum: (headerDone ? 0 : texts.header.count) + first) { text in
                    if !headerDone { text.copy(texts.header); headerDone = true }
                    var i = next
                    while i < rows.count, text.room >= rows[i].line.count + fixed {
                        text.copy(rows[i].line)
                        text.double(Double(bitPattern: rows[i].child.bits.load(ordering: .relaxed)))
                        text.byte(UInt8(ascii: "\n"))
                        i += 1
                    }
                    next = i
                }
            } while next < rows.count
        }
    }
}

/// A histogram family with fixed buckets: `family.labels("targeted").observe(0.042)`.
public final class HistogramFamily: MetricFamily {
    /// Name, help, label names, unit and label value limits.
    public let descriptor: FamilyDescriptor
    /// Bucket upper bounds, increasing, without `+Inf`.
    public let buckets: [Double]
    /// Header, sample names and `le="..."} ` texts, Prometheus text then OpenMetrics.
    let texts: [FamilyText]
    let table: SeriesTable<Histogram>

    /// Default buckets for durations in seconds, 5 ms to 60 s.
    public static let defaultSecondsBuckets: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]

    /// A histogram family. `buckets` must be finite and strictly increasing; a trailing `+Inf` is implied.
    public init(name: String, help: String, labelNames: [String] = [], buckets: [Double] = defaultSecondsBuckets,
                unit: String? = nil, valueLimits: [String: Int] = [:]) throws(MetricsError) {
        descriptor = try FamilyDescriptor(name: name, help: help, labelNames: labelNames, unit: unit,
                                          valueLimits: valueLimits, reserved: ["le"])
        if let unit, !name.hasSuffix("_" + unit) { throw MetricsError("metric \(name): unit \"\(unit)\" must be the suffix of the name") }
        var bounds = buckets
        if bounds.last == .infinity { bounds.removeLast() }
        for (i, b) in bounds.enumerated() {
            guard b.isFinite else { throw MetricsError("metric \(name): bucket \(i) is \(b); expected a finite number") }
            if i > 0, !(b > bounds[i - 1]) {
                throw MetricsError("metric \(name): buckets must be strictly increasing; bucket \(i) (\(b)) follows \(bounds[i - 1])")
            }
        }
        self.buckets = bounds
        texts = FamilyText.pair { format in
            var text = FamilyText(name: name, help: help, type: "histogram", unit: unit, format: format, sample: name + "_bucket")
            text.sum = Array((name + "_sum").utf8)
            text.count = Array((name + "_count").utf8)
            text.le = (bounds + [.infinity]).map { Array("le=\"\(TextOut.bound($0, format: format))\"} ".utf8) }
            text.leMax = text.le.reduce(0) { max($0, $1.count) }
            return text
        }
        table = SeriesTable(descriptor, sample: [], bucket: Array((name + "_bucket").utf8))
        if labelNames.isEmpty { _ = labels() }
    }

    /// Always `.histogram`.
    public var kind: MetricKind { .histogram }
    /// Number of series (label value combinations) so far.
    public var seriesCount: Int { table.count }

    /// The histogram for these label values (in `labelNames` order).
    public func labels(_ values: String...) -> Histogram { labels(values) }
    /// The histogram for these label values (in `labelNames` order).
    public func labels(_ values: [String]) -> Histogram {
        let bounds = buckets
        return table.child(values) { Histogram(upperBounds: bounds) }
    }

    /// Appends the series count and every histogram's bucket counts and sum.
    public func snapshot(into state: inout [UInt64]) -> Bool {
        table.snapshot(into: &state) { histogram, out in
            for count in histogram.counts { out.append(count.value.load(ordering: .relaxed)) }
            out.append(histogram.sumBits.load(ordering: .relaxed))
        }
        return true
    }

    /// Appends HELP, TYPE and every series, sorted by label values, in `format`.
    public func write(to out: inout [UInt8], format: Exposition.Format) {
        let texts = self.texts[format.textIndex]
        let le = texts.le, leMax = texts.leMax
        let sumName = texts.sum, countName = texts.count
        table.withRows { rows in
            // Per series: each bucket line is `name_bucket{labels,`, `le="..."} `, a count; then _sum and _count.
            let fixed = le.count * (leMax + TextOut.maxUInt + 1)
                + sumName.count + countName.count + 2 * (TextOut.maxDouble + 1)
            func most(_ row: borrowing SeriesTable<Histogram>.Row) -> Int { fixed + le.count * row.open.count + 2 * row.line.count }
            // In chunks that fit the spare capacity, checked per series; the array grows only between chunks.
            var next = 0, headerDone = false
            repeat {
                let first = next < rows.count ? most(rows[next]) : 0
                TextOut.append(to: &out, minimum: (headerDone ? 0 : texts.header.count) + first) { text in
                    if !headerDone { text.copy(texts.header); headerDone = true }
                    var i = next
                    while i < rows.count, text.room >= most(rows[i]) {
                        let row = rows.baseAddress.unsafelyUnwrapped + i
                        var total: UInt64 = 0
                        row.pointee.open.withUnsafeBufferPointer { open in
                            let counts = row.pointee.child.counts
                            for b in counts.indices {
                                total &+= counts[b].value.load(ordering: .relaxed)
                                text.copy(open)
                                text.copy(le[b])
                                text.uint(total)
                                text.byte(UInt8(ascii: "\n"))
                            }
                        }
                        text.copy(sumName)
                        text.copy(row.pointee.line)
                        text.double(Double(bitPattern: row.pointee.child.sumBits.load(ordering: .relaxed)))
                        text.byte(UInt8(ascii: "\n"))
                        text.copy(countName)
                        text.copy(row.pointee.line)
                        text.uint(total)
                        text.byte(UInt8(ascii: "\n"))
                        i += 1
                    }
                    next = i
                }
            } while next < rows.count
        }
    }
}
