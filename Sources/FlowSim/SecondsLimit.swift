import FlowJSON

/// The limit on the times and durations FlowSim reads: scenario files (scenario-format.md), the
/// strategy lab's `simulate` config section and `simulate --sweep` (strategy-lab.md).
public enum SecondsLimit {
    /// The largest time or duration an input may give, in seconds: 10^9 (about 31.7 years). Every
    /// time, latency, age, delay and timeout is checked against it, so that sums of them stay far
    /// inside the engine's clock (±2^61 µs) and exact to the microsecond in a Double.
    public static let maxSeconds: Double = 1_000_000_000

    /// ``maxSeconds`` as the errors and docs write it.
    public static let maxText = "1000000000"

    /// A number written in decimal, as a command-line value or part of a config string
    /// (`maxAge:30`): digits with an optional sign, fraction and exponent (`2`, `0.5`, `-1`, `1e3`).
    /// nil for anything else, such as the hexadecimal (`0x10`), `inf` and `nan` that `Double(_:)`
    /// also reads.
    public static func decimal(_ text: some StringProtocol) -> Double? {
        var bytes = Array(text.utf8)[...]
        if bytes.first == UInt8(ascii: "-") { bytes = bytes.dropFirst() }
        func digits() -> Int {
            let n = bytes.prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }.count
            bytes = bytes.dropFirst(n)
            return n
        }
        var count = digits()
        if bytes.first == UInt8(ascii: ".") { bytes = bytes.dropFirst(); count += digits() }
        guard count > 0 else { return nil }
        if bytes.first == UInt8(ascii: "e") || bytes.first == UInt8(ascii: "E") {
            bytes = bytes.dropFirst()
            if bytes.first == UInt8(ascii: "+") || bytes.first == UInt8(ascii: "-") { bytes = bytes.dropFirst() }
            guard digits() > 0 else { return nil }
        }
        guard bytes.isEmpty, let v = Double(String(text)), v.isFinite else { return nil }
        return v
    }
}

extension JSONCursor {
    /// A time or duration: seconds from 0 to ``SecondsLimit/maxSeconds``. Error otherwise, at this
    /// path: `expected a number of seconds from 0 to 1000000000, got a number 1e+308`.
    func seconds() throws(JSONInputError) -> Double {
        let v = try double()
        guard v >= 0, v <= SecondsLimit.maxSeconds else { throw expected("a number of seconds from 0 to \(SecondsLimit.maxText)") }
        return v
    }

    /// A duration > 0, at most ``SecondsLimit/maxSeconds``.
    func positiveSeconds() throws(JSONInputError) -> Double {
        let v = try double()
        guard v > 0, v <= SecondsLimit.maxSeconds else { throw expected("a number of seconds > 0 and <= \(SecondsLimit.maxText)") }
        return v
    }

    /// A duration handed to the engine as the app would (a scenario's `loadTimeout`, `timeout`): at
    /// most ``SecondsLimit/maxSeconds``; a negative one is the engine's to refuse (3001).
    func engineSeconds() throws(JSONInputError) -> Double {
        let v = try double()
        guard v <= SecondsLimit.maxSeconds else {
            throw expected("a number of seconds <= \(SecondsLimit.maxText) (a negative one is passed on, and the engine refuses it with 3001)")
        }
        return v
    }
}
