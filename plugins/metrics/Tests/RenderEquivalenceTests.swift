import MetricsSink
import Testing

/// An independent model of a registry: what was registered and observed, rendered with plain
/// string operations to the text the exposition formats specify.
private struct ModelFamily {
    enum Kind { case counter, gauge, histogram([Double]) }
    var name: String
    var help: String
    var labels: [String]
    var kind: Kind
    var unit: String?
    var counters: [[String]: UInt64] = [:]
    var gauges: [[String]: Double] = [:]
    var histograms: [[String]: (counts: [UInt64], sum: Double)] = [:]

    static func number(_ v: Double) -> String {
        if v.isNaN { return "NaN" }
        if v.isInfinite { return v > 0 ? "+Inf" : "-Inf" }
        if v == v.rounded(), abs(v) < 1e15 { return String(Int64(v)) }
        return "\(v)"
    }

    static func escapeLabel(_ s: String) -> String {
        var r = ""
        for c in s.unicodeScalars {
            switch c {
            case "\\": r += "\\\\"
            case "\"": r += "\\\""
            case "\n": r += "\\n"
            default: r.unicodeScalars.append(c)
            }
        }
        return r
    }

    static func escapeHelp(_ s: String, openMetrics: Bool) -> String {
        var r = ""
        for c in s.unicodeScalars {
            switch c {
            case "\\": r += "\\\\"
            case "\n": r += "\\n"
            case "\"" where openMetrics: r += "\\\""
            default: r.unicodeScalars.append(c)
            }
        }
        return r
    }

    func pairs(_ values: [String], extra: String? = nil) -> String {
        var items = zip(labels, values).map { "\($0)=\"\(Self.escapeLabel($1))\"" }
        if let extra { items.append(extra) }
        return items.isEmpty ? "" : "{" + items.joined(separator: ",") + "}"
    }

    func render(openMetrics: Bool) -> String {
        var familyName = name, sampleName = name, type = ""
        switch kind {
        case .counter:
            type = "counter"
            if openMetrics {
                familyName = name.hasSuffix("_total") ? String(name.dropLast(6)) : name
                sampleName = familyName + "_total"
            }
        case .gauge: type = "gauge"
        case .histogram: type = "histogram"
        }
        var out = "# HELP \(familyName) \(Self.escapeHelp(help, openMetrics: openMetrics))\n# TYPE \(familyName) \(type)\n"
        if openMetrics, let unit { out += "# UNIT \(familyName) \(unit)\n" }
        let before: ([String], [String]) -> Bool = { $0.lexicographicallyPrecedes($1) }
        switch kind {
        case .counter:
            for key in counters.keys.sorted(by: before) { out += "\(sampleName)\(pairs(key)) \(counters[key]!)\n" }
        case .gauge:
            for key in gauges.keys.sorted(by: before) { out += "\(sampleName)\(pairs(key)) \(Self.number(gauges[key]!))\n" }
        case .histogram(let bounds):
            for key in histograms.keys.sorted(by: before) {
                let h = histograms[key]!
                var total: UInt64 = 0
                for (i, c) in h.counts.enumerated() {
                    total &+= c
                    var le = i < bounds.count ? Self.number(bounds[i]) : "+Inf"
                    if openMetrics, i < bounds.count, !le.contains("."), !le.contains("e") { le += ".0" }
                    out += "\(name)_bucket\(pairs(key, extra: "le=\"\(le)\"")) \(total)\n"
                }
                out += "\(name)_sum\(pairs(key)) \(Self.number(h.sum))\n"
                out += "\(name)_count\(pairs(key)) \(total)\n"
            }
        }
        return out
    }
}

@Suite("Render equivalence against an independent reference")
struct RenderEquivalenceTests {
    static let labelPieces = ["a", "b", "", "_other", "x y", "\\", "\"", "\n", "é", "日本", "{", "}", ",", "=", "0", "le"]
    static let specialDoubles: [Double] = [
        0, -0.0, 1, -1, 0.1, 0.5, 2.5, -7.25, 1e-7, 1e-5, 1e-4, 0.001, 123.456, 1e14, 1e15 - 1, 1e15, -1e15,
        1e15 + 0.5, 1e16, 9_007_199_254_740_994, 1e20, 1e21, 1e22, 18_446_744_073_709_551_616, 1.7976931348623157e308,
        Double.leastNonzeroMagnitude, 2.2250738585072014e-308, -2.2250738585072014e-308, 0.30000000000000004, .infinity, -.infinity, .nan,
    ]

    static func labelValue<G: RandomNumberGenerator>(_ g: inout G) -> String {
        (0..<Int.random(in: 0...4, using: &g)).map { _ in labelPieces.randomElement(using: &g)! }.joined()
    }

    static func double<G: RandomNumberGenerator>(_ g: inout G) -> Double {
        switch Int.random(in: 0..<4, using: &g) {
        case 0: specialDoubles.randomElement(using: &g)!
        case 1: Double(Int.random(in: -1_000_000...1_000_000, using: &g))
        case 2: Double.random(in: -1000...1000, using: &g)
        default: Double(bitPattern: UInt64.random(in: 0...UInt64.max, using: &g))
        }
    }

    @Test("Random registries (escaped label values, counters, gauges, histograms) render exactly the reference bytes", arguments: 0..<6)
    func randomRegistries(seed: Int) throws {
        var g = SeededGenerator(seed: UInt64(seed) &* 0x9E37_79B9_7F4A_7C15 &+ 1)
        let registry = MetricsRegistry()
        var models: [ModelFamily] = []
        var counters: [CounterFamily] = [], gauges: [GaugeFamily] = [], histograms: [HistogramFamily] = []
        for f in 0..<Int.random(in: 3...9, using: &g) {
            let labels = Array(["path", "code", "kind", "zone"].shuffled(using: &g).prefix(Int.random(in: 0...3, using: &g)))
            let help = "Help \(f) " + Self.labelValue(&g)
            switch f % 3 {
            case 0:
                let name = Bool.random(using: &g) ? "c\(f)_total" : "c\(f)_bytes"
                let unit: String? = name.hasSuffix("_bytes") ? "bytes" : nil
                counters.append(try registry.counter(name, help: help, labels: labels, unit: unit))
                models.append(ModelFamily(name: name, help: help, labels: labels, kind: .counter, unit: unit))
            case 1:
                gauges.append(try registry.gauge("g\(f)", help: help, labels: labels))
                models.append(ModelFamily(name: "g\(f)", help: help, labels: labels, kind: .gauge))
            default:
                var bounds = Set<Double>()
                for _ in 0..<Int.random(in: 1...20, using: &g) {
                    bounds.insert([0.005, 0.1, 1, 2.5, 10, 1e-7, 1e20, 123_456_789, -3, 0.3]
                        .randomElement(using: &g)! * Double(Int.random(in: 1...3, using: &g)))
                }
                let sorted = bounds.sorted()
                histograms.append(try registry.histogram("h\(f)_seconds", help: help, labels: labels, buckets: sorted, unit: "seconds"))
                models.append(ModelFamily(name: "h\(f)_seconds", help: help, labels: labels, kind: .histogram(sorted), unit: "seconds"))
            }
            if labels.isEmpty {
                switch models[models.count - 1].kind {
                case .counter: models[models.count - 1].counters[[]] = 0
                case .gauge: models[models.count - 1].gauges[[]] = 0
                case .histogram(let b): models[models.count - 1].histograms[[]] = (Array(repeating: 0, count: b.count + 1), 0)
                }
            }
        }
        var ci = 0, gi = 0, hi = 0
        for m in models.indices {
            let family = models[m]
            let ops = Int.random(in: 0...400, using: &g)
            for _ in 0..<ops {
                let values = family.labels.map { _ in Self.labelValue(&g) }
                switch family.kind {
                case .counter:
                    let amount = Bool.random(using: &g) ? UInt64.random(in: 0...10, using: &g) : UInt64.random(in: 0...UInt64.max, using: &g)
                    counters[ci].labels(values).add(amount)
                    models[m].counters[values, default: 0] &+= amount
                case .gauge:
                    let v = Self.double(&g)
                    gauges[gi].labels(values).set(v)
                    models[m].gauges[values] = v
                case .histogram(let bounds):
                    let h = histograms[hi].labels(values)
                    var state = models[m].histograms[values] ?? (Array(repeating: 0, count: bounds.count + 1), 0)
                    for _ in 0..<Int.random(in: 0...5, using: &g) {
                        let v = Self.double(&g)
                        h.observe(v)
                        state.counts[bounds.firstIndex { v <= $0 } ?? bounds.count] += 1
                        state.sum += v
                    }
                    models[m].histograms[values] = state
                }
            }
            switch family.kind {
            case .counter: ci += 1
            case .gauge: gi += 1
            case .histogram: hi += 1
            }
        }
        let ordered = models.sorted { $0.name < $1.name }
        let prometheus = ordered.map { $0.render(openMetrics: false) }.joined()
        let openMetrics = ordered.map { $0.render(openMetrics: true) }.joined() + "# EOF\n"
        #expect(registry.renderText(format: .prometheusText) == prometheus)
        #expect(registry.renderText(format: .openMetrics) == openMetrics)
        // Twice through the reused buffer, and family by family into a fresh small array (the server's path).
        #expect(registry.render(format: .prometheusText) == Array(prometheus.utf8))
        var out: [UInt8] = [1, 2, 3]
        for family in registry.families { family.write(to: &out, format: .prometheusText) }
        #expect(out == [1, 2, 3] + Array(prometheus.utf8))
    }

    @Test("Every special double renders as the reference writes it: integers, exponent forms, +Inf, -Inf, NaN")
    func specialValues() throws {
        let registry = MetricsRegistry()
        let gauge = try registry.gauge("g", help: "g", labels: ["i"])
        var expected = "# HELP g g\n# TYPE g gauge\n"
        let values = Self.specialDoubles + Self.specialDoubles.map { -$0 } + (0..<64).map { Double(sign: .plus, exponent: $0, significand: 1) - 1 }
        let keys = values.indices.map { fourDigits($0) }
        for (k, v) in zip(keys, values) { gauge.labels(k).set(v) }
        for (k, v) in zip(keys, values).sorted(by: { $0.0 < $1.0 }) { expected += "g{i=\"\(k)\"} \(ModelFamily.number(v))\n" }
        #expect(registry.renderText() == expected)
    }
}

/// `n` as four zero-padded digits, so keys sort as numbers.
private func fourDigits(_ n: Int) -> String {
    let s = "\(n)"
    return String(repeating: "0", count: max(0, 4 - s.count)) + s
}

/// SplitMix64: reproducible random numbers for a seed.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
