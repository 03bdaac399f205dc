import Synchronization

/// A metric that cannot be defined or registered: a bad name, bad buckets, or a name already taken.
public struct MetricsError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong, naming the metric (and the existing family for a duplicate).
    public var message: String
    /// For a duplicate registration: the name of the family already registered.
    public var existing: String?

    /// An error with its message and, for a duplicate, the existing family's name.
    public init(_ message: String, existing: String? = nil) {
        self.message = message
        self.existing = existing
    }

    /// The message.
    public var description: String { message }
}

/// A set of metric families rendered together, sorted by name, in Prometheus text or OpenMetrics.
///
///     let registry = MetricsRegistry()
///     let hits = try registry.register(CounterFamily(name: "app_hits_total", help: "Hits.", labelNames: ["page"]))
///     hits.labels("home").inc()
///     let body = registry.render(format: .prometheusText)
public final class MetricsRegistry: Sendable {
    struct Entry {
        var family: any MetricFamily
        /// Every name the family writes in either format (family and sample names).
        var names: Set<String>
    }

    let entries = Mutex<[Entry]>([])
    /// The render buffer of `withRendered`, reused from one call to the next.
    let buffer = Mutex<[UInt8]>([])
    /// Work run before every render (values read at scrape time).
    let collectors = Mutex<[@Sendable () -> Void]>([])
    /// The size of the last render, to reserve the next one's array at once.
    let lastSize = Atomic<Int>(4096)
    /// The last render per format with the values it was rendered from (see `render(format:)`).
    let lastRender = Mutex<[Exposition.Format: Rendered]>([:])

    struct Rendered {
        /// Every family's `snapshot` while the body was rendered.
        var state: [UInt64]
        var body: [UInt8]
    }

    /// An empty registry.
    public init() {}

    /// Registers `family` and returns it. A family whose name (or one of its sample names, e.g.
    /// `x_count` of a histogram `x`, or `x` for a counter `x_total` in OpenMetrics) collides with a
    /// registered family is refused with an error naming the existing family.
    @discardableResult
    public func register<F: MetricFamily>(_ family: F) throws(MetricsError) -> F {
        let names = Self.names(of: family)
        try entries.withLock { (list: inout [Entry]) throws(MetricsError) in
            if let clash = list.first(where: { !$0.names.isDisjoint(with: names) }) {
                let existing = clash.family
                let what = existing.name == family.name ? "is already registered" : "collides with the registered family"
                throw MetricsError(
                    "metric family \"\(family.name)\" \(what) \(existing.kind.rawValue) \"\(existing.name)\" (help: \"\(existing.help)\")",
                    existing: existing.name)
            }
            var lo = 0, hi = list.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if list[mid].family.name < family.name { lo = mid + 1 } else { hi = mid }
            }
            list.insert(Entry(family: family, names: names), at: lo)
        }
        return family
    }

    /// Defines and registers a counter family.
    public func counter(_ name: String, help: String, labels: [String] = [], unit: String? = nil,
                        valueLimits: [String: Int] = [:]) throws(MetricsError) -> CounterFamily {
        try register(CounterFamily(name: name, help: help, labelNames: labels, unit: unit, valueLimits: valueLimits))
    }

    /// Defines and registers a gauge family.
    public func gauge(_ name: String, help: String, labels: [String] = [], unit: String? = nil,
                      valueLimits: [String: Int] = [:]) throws(MetricsError) -> GaugeFamily {
        try register(GaugeFamily(name: name, help: help, labelNames: labels, unit: unit, valueLimits: valueLimits))
    }

    /// Defines and registers a histogram family.
    public func histogram(_ name: String, help: String, labels: [String] = [],
                          buckets: [Double] = HistogramFamily.defaultSecondsBuckets, unit: String? = nil,
                          valueLimits: [String: Int] = [:]) throws(MetricsError) -> HistogramFamily {
        try register(HistogramFamily(name: name, help: help, labelNames: labels, buckets: buckets, unit: unit,
                                     valueLimits: valueLimits))
    }

    /// The registered families, sorted by name.
    public var families: [any MetricFamily] { entries.withLock { $0.map(\.family) } }

    /// Registers `collect` to run before every render: it updates series from values kept
    /// elsewhere (another component's counters), so they are read at scrape time, never pushed.
    public func collectBeforeRender(_ collect: @escaping @Sendable () -> Void) {
        collectors.withLock { $0.append(collect) }
    }

    /// Every family and series in `format`, as bytes. The collectors run on every call; when no
    /// family's values changed since the last render in `format` (every family's `snapshot` equal),
    /// that render's bytes are returned again, shared, not copied; otherwise the body is rendered
    /// anew (concurrent scrapes render side by side, never waiting for each other).
    public func render(format: Exposition.Format = .prometheusText) -> [UInt8] {
        runCollectors()
        let families = self.families
        let before = Self.snapshot(families)
        if let before, let last = lastRender.withLock({ $0[format] }), last.state == before { return last.body }
        var out: [UInt8] = []
        out.reserveCapacity(lastSize.load(ordering: .relaxed) + 1024)
        write(families, to: &out, format: format)
        lastSize.store(out.count, ordering: .relaxed)
        // Kept only if nothing changed while rendering, so the bytes are exactly those values.
        if let before, Self.snapshot(families) == before {
            lastRender.withLock { $0[format] = Rendered(state: before, body: out) }
        }
        return out
    }

    /// Every family's values in order, or nil when a family cannot give them.
    static func snapshot(_ families: [any MetricFamily]) -> [UInt64]? {
        var state: [UInt64] = []
        state.reserveCapacity(1024)
        for family in families {
            state.append(UInt64(UInt(bitPattern: ObjectIdentifier(family))))  // which family, by identity
            guard family.snapshot(into: &state) else { return nil }
        }
        return state
    }

    private func runCollectors() {
        for collect in collectors.withLock({ $0 }) { collect() }
    }

    /// Appends `families` in their order (the registry's: by name), and `# EOF` in OpenMetrics.
    private func write(_ families: [any MetricFamily], to out: inout [UInt8], format: Exposition.Format) {
        for family in families { family.write(to: &out, format: format) }
        if format == .openMetrics { out.append(contentsOf: "# EOF\n".utf8) }
    }

    /// Every family and series in `format`, as a string.
    public func renderText(format: Exposition.Format = .prometheusText) -> String {
        withRendered(format: format) { String(decoding: $0, as: UTF8.self) }
    }

    /// Renders into the registry's reused buffer and calls `body` with the bytes, without copying.
    /// The bytes are valid only inside `body`; do not render this registry again from inside it.
    public func withRendered<R: Sendable>(format: Exposition.Format, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        buffer.withLock { out in
            out.removeAll(keepingCapacity: true)
            if out.capacity < 4096 { out.reserveCapacity(4096) }
            runCollectors()
            write(families, to: &out, format: format)
            return out.withUnsafeBufferPointer(body)
        }
    }

    static func names(of family: any MetricFamily) -> Set<String> {
        let name = family.name
        switch family.kind {
        case .counter:
            let base = name.hasSuffix("_total") ? String(name.dropLast(6)) : name
            return [name, base, base + "_total", base + "_created"]
        case .gauge:
            return [name]
        case .histogram:
            return [name, name + "_bucket", name + "_sum", name + "_count", name + "_created"]
        }
    }
}
