/// An instant on the engine's clock, or a span between two instants, in whole microseconds.
///
/// Every age, budget, deadline and comparison in the engine is computed on this integer, so no rule
/// depends on binary floating-point rounding: an entry stored at 0.1 and read at 0.3 is exactly
/// 0.2 old. Seconds are converted once on the way in (``init(seconds:)``, rounding to the nearest
/// microsecond) and once on the way out (``seconds``).
///
/// ```swift
/// let age = EngineTime(seconds: 0.3) - EngineTime(seconds: 0.1)
/// age >= EngineTime(seconds: 0.2)  // true
/// ```
public struct EngineTime: Sendable, Hashable, Comparable, AdditiveArithmetic, CustomStringConvertible {
    /// Whole microseconds, within ±2^61.
    public let microseconds: Int64

    /// Times are kept within ±2^61 µs (about 73,000 years): every way to make one (from
    /// microseconds, from seconds, by adding or subtracting two) saturates at these bounds, so no
    /// input, however large, can overflow the engine's arithmetic.
    public static let max = EngineTime(microseconds: 1 << 61)
    public static let min = EngineTime(microseconds: -(1 << 61))
    public static let zero = EngineTime(microseconds: 0)

    @inlinable
    public init(microseconds: Int64) {
        self.microseconds = Swift.min(Swift.max(microseconds, -(1 << 61)), 1 << 61)
    }

    /// `seconds` rounded to the nearest microsecond (halves away from zero). Values beyond the
    /// bounds (infinities included) saturate; NaN is zero (callers validate their inputs first).
    @inlinable
    public init(seconds: Double) {
        let us = (seconds * 1_000_000).rounded()
        if us.isNaN {
            microseconds = 0
        } else if us >= 0x1p61 {
            microseconds = 1 << 61
        } else if us <= -0x1p61 {
            microseconds = -(1 << 61)
        } else {
            microseconds = Int64(us)
        }
    }

    /// The same time in seconds: the double nearest to the exact decimal value.
    @inlinable
    public var seconds: Double { Double(microseconds) / 1_000_000 }

    @inlinable
    public static func seconds(_ s: Double) -> EngineTime { EngineTime(seconds: s) }

    @inlinable
    public static func < (a: EngineTime, b: EngineTime) -> Bool { a.microseconds < b.microseconds }
    @inlinable
    public static func + (a: EngineTime, b: EngineTime) -> EngineTime { EngineTime(microseconds: a.microseconds + b.microseconds) }
    @inlinable
    public static func - (a: EngineTime, b: EngineTime) -> EngineTime { EngineTime(microseconds: a.microseconds - b.microseconds) }

    public var description: String { "\(seconds)s" }
}

/// A literal is seconds, converted like ``EngineTime/init(seconds:)``: `EngineTime = 0.1` is 100,000 µs.
extension EngineTime: ExpressibleByFloatLiteral, ExpressibleByIntegerLiteral {
    @inlinable
    public init(floatLiteral value: Double) { self.init(seconds: value) }
    @inlinable
    public init(integerLiteral value: Int64) { self.init(seconds: Double(value)) }
}
