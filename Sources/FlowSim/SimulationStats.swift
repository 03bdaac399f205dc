import FlowFetch
import Foundation

/// The strategy lab's random numbers: SplitMix64, seeded, with uniform and normal draws.
public struct SimulationRandom: Sendable {
    private var state: UInt64
    private var spare: Double?

    /// A generator seeded with `seed`.
    public init(seed: UInt64) { state = seed }

    /// A generator for stream `index` of `seed`: independent of every other index.
    public init(seed: UInt64, stream index: UInt64) {
        var mix = SimulationRandom(seed: seed ^ (index &* 0xD6E8_FEB8_6659_FD93))
        state = mix.next() ^ index
    }

    /// The next 64 random bits.
    @inline(__always)
    public mutating func next() -> UInt64 {
        state &+= splitMix64Gamma
        return mix64(state)
    }

    /// Uniform in [0, 1).
    @inline(__always)
    public mutating func uniform() -> Double { Double(next() >> 11) * 0x1p-53 }

    /// Standard normal (Box-Muller; the second value of each pair is kept for the next call).
    public mutating func normal() -> Double {
        if let s = spare { spare = nil; return s }
        var u = uniform()
        while u <= 0 { u = uniform() }
        let v = uniform()
        let r = (-2 * log(u)).squareRoot()
        spare = r * sin(2 * .pi * v)
        return r * cos(2 * .pi * v)
    }

    /// True with probability `p`.
    @inline(__always)
    public mutating func chance(_ p: Double) -> Bool { p > 0 && uniform() < p }
}

/// A histogram of durations (seconds) with 0.5% relative resolution from 0.1 ms to about 3 h, plus
/// exact zero, count, sum and max: percentiles with bounded memory, merged by adding counts (so a
/// merge gives the same numbers in any order).
///
/// Its buckets are kept two ways. While few of the buckets from its smallest value's to its largest's
/// hold a value, it keeps only those (sorted, found by binary search): the strategy lab's
/// per-placement histograms, a few hundred values each over thousands of buckets, then cost what
/// they hold. Once half the range is held it keeps the whole range (found by index, empty buckets
/// included), and goes back to the held buckets alone when a far value would leave less than a
/// quarter of it held: never more than four times the memory of the buckets held. Equality and
/// hashing look at the contents only, however they are kept.
public struct DurationHistogram: Sendable, Hashable {
    static let minValue = 1e-4
    static let ratio = 1.005
    static let bucketCount = 3700
    private static let logRatio = log(ratio)

    /// One bucket: its index, how many values fell in it, and the largest of them (quantiles report
    /// observed values). Together, so that adding a value touches one place in memory (16 bytes).
    struct Cell: Sendable, Hashable {
        var bucket: Int32
        var count: UInt32 = 0
        var max: Double = 0
    }
    /// The buckets kept, by increasing index: only those holding a value while `dense` is false,
    /// every bucket from the first to the last once it is true (bucket `i` at `i - first`).
    private var cells: [Cell] = []
    private var dense = false
    /// While dense: the bucket of `cells[0]`.
    private var first = 0
    /// How many buckets hold a value.
    private var held = 0
    /// Below this many buckets held, only those are kept, whatever the range.
    private static let sparseUpTo = 16
    /// Values exactly 0 (or below 0.1 ms).
    public private(set) var zeros: Int = 0
    public private(set) var count: Int = 0
    public private(set) var max: Double = 0
    public private(set) var min: Double = .infinity

    /// An empty histogram.
    public init() {}

    /// Adds one value.
    public mutating func add(_ v: Double) {
        add(v, bucket: Self.bucket(of: v))
    }

    /// Adds one value to this histogram and to `other` (its bucket found once for both).
    mutating func add(_ v: Double, alsoTo other: inout DurationHistogram) {
        let i = Self.bucket(of: v)
        add(v, bucket: i)
        other.add(v, bucket: i)
    }

    /// The bucket of a value, or nil for one counted as zero.
    private static func bucket(of v: Double) -> Int? {
        guard v >= minValue else { return nil }
        return Swift.min(Int(log(v / minValue) / logRatio), bucketCount - 1)
    }

    private mutating func add(_ v: Double, bucket: Int?) {
        count += 1
        if v > max { max = v }
        if v < min { min = v }
        guard let i = bucket else { zeros += 1; return }
        add(Cell(bucket: Int32(i), count: 1, max: v))
    }

    /// Adds a bucket's count and maximum to the bucket of the same index.
    private mutating func add(_ cell: Cell) {
        let i = Int(cell.bucket)
        if dense {
            if i < first || i >= first + cells.count {
                // Outside the range: the range is kept only while a quarter of it is held.
                let span = Swift.max(first + cells.count, i + 1) - Swift.min(first, i)
                if (held + 1) * 4 < span { makeSparse() } else { cover(i) }
            }
        }
        if dense {
            let k = i - first
            if cells[k].count == 0 { held += 1 }
            cells[k].count &+= cell.count
            if cell.max > cells[k].max { cells[k].max = cell.max }
            return
        }
        var lo = 0, hi = cells.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if Int(cells[mid].bucket) < i { lo = mid + 1 } else { hi = mid }
        }
        if lo < cells.count, Int(cells[lo].bucket) == i {
            cells[lo].count &+= cell.count
            if cell.max > cells[lo].max { cells[lo].max = cell.max }
            return
        }
        cells.insert(cell, at: lo)
        held += 1
        let span = Int(cells[cells.count - 1].bucket) - Int(cells[0].bucket) + 1
        if held >= Self.sparseUpTo, held * 2 >= span { makeDense(span: span) }
    }

    /// Switches to keeping every bucket of the range.
    private mutating func makeDense(span: Int) {
        let first = Int(cells[0].bucket)
        var all = (0..<span).map { Cell(bucket: Int32(first + $0)) }
        for cell in cells { all[Int(cell.bucket) - first] = cell }
        cells = all
        self.first = first
        dense = true
    }

    /// Switches to keeping only the buckets held.
    private mutating func makeSparse() {
        cells = Array(heldCells)
        dense = false
    }

    /// Grows the range of a dense histogram to include bucket `i`.
    private mutating func cover(_ i: Int) {
        let last = first + cells.count - 1
        if i < first {
            cells.insert(contentsOf: (i..<first).map { Cell(bucket: Int32($0)) }, at: 0)
            first = i
        } else if i > last {
            cells.append(contentsOf: (last + 1...i).map { Cell(bucket: Int32($0)) })
        }
    }

    /// How many buckets are kept, and whether the whole range is (for tests of the storage).
    var storage: (buckets: Int, dense: Bool) { (cells.count, dense) }

    /// The buckets holding a value, by increasing index.
    private var heldCells: some Sequence<Cell> { cells.lazy.filter { $0.count > 0 } }

    /// Adds every value of another histogram.
    public mutating func merge(_ other: DurationHistogram) {
        count += other.count
        zeros += other.zeros
        max = Swift.max(max, other.max)
        min = Swift.min(min, other.min)
        for cell in other.heldCells { add(cell) }
    }

    public static func == (a: DurationHistogram, b: DurationHistogram) -> Bool {
        a.count == b.count && a.zeros == b.zeros && a.max == b.max && a.min == b.min && a.heldCells.elementsEqual(b.heldCells)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(count)
        hasher.combine(zeros)
        for cell in heldCells { hasher.combine(cell) }
    }

    /// The value of rank `k` (1-based, nearest rank), to the bucket's resolution: the largest value
    /// seen in its bucket (an observed value at most 0.5% above the exact one).
    public func value(rank k: Int) -> Double {
        guard count > 0 else { return 0 }
        let k = Swift.max(1, Swift.min(k, count))
        if k <= zeros { return Swift.max(min, 0) > Self.minValue ? 0 : Swift.max(min, 0) }
        var seen = zeros
        for cell in heldCells {
            seen += Int(cell.count)
            if seen >= k { return cell.max }
        }
        return max
    }

    /// The `q` quantile (0...1) by nearest rank.
    public func quantile(_ q: Double) -> Double {
        value(rank: Int((q * Double(count)).rounded(.up)))
    }

    /// A 95% confidence interval of the `q` quantile from the order statistics (binomial, normal
    /// approximation): the values at ranks `n q ± 1.96 sqrt(n q (1 - q))`.
    public func quantileInterval(_ q: Double) -> (low: Double, high: Double) {
        let n = Double(count)
        let half = 1.96 * (n * q * (1 - q)).squareRoot()
        let lo = Int((n * q - half).rounded(.down))
        let hi = Int((n * q + half).rounded(.up)) + 1
        return (value(rank: lo), value(rank: hi))
    }
}

/// Confidence intervals used by reports.
public enum Confidence {
    /// The 95% Wilson score interval of a share `k / n`.
    public static func wilson(_ k: Int, _ n: Int) -> (low: Double, high: Double) {
        guard n > 0 else { return (0, 1) }
        let z = 1.96, nn = Double(n), p = Double(k) / nn
        let denom = 1 + z * z / nn
        let centre = (p + z * z / (2 * nn)) / denom
        let half = z * (p * (1 - p) / nn + z * z / (4 * nn * nn)).squareRoot() / denom
        return (Swift.max(0, centre - half), Swift.min(1, centre + half))
    }

    /// The 95% normal-approximation interval of a mean from a count, a sum and a sum of squares.
    public static func mean(count n: Int, sum: Double, sumOfSquares: Double) -> (mean: Double, low: Double, high: Double) {
        guard n > 0 else { return (0, 0, 0) }
        let nn = Double(n), m = sum / nn
        let variance = n > 1 ? Swift.max(0, (sumOfSquares - nn * m * m) / (nn - 1)) : 0
        let half = 1.96 * (variance / nn).squareRoot()
        return (m, m - half, m + half)
    }
}
