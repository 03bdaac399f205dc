/// The timing rules of docs/fetch-rules.md as pure functions.
public enum Budget {
    /// loadTimeout when none is given.
    public static let defaultLoadTimeout = 5.0
    /// Per-request limit for requests with no loadTimeout, when the client configures none.
    public static let defaultRequestTimeout = 30.0

    /// The smallest loadTimeout: a smaller one is raised to it.
    public static let minimumLoadTimeout = EngineTime(microseconds: 1_000_000)
    /// Stage A keeps this much of T for stage B, and never gets less than it; stage B's least timeout.
    public static let reserve = EngineTime(microseconds: 500_000)
    /// The longest default-audience request after stage A.
    public static let stageBCap = EngineTime(microseconds: 60_000_000)

    /// Whether a duration in seconds is usable: finite and not negative.
    public static func isValidDuration(_ seconds: Double) -> Bool { seconds.isFinite && seconds >= 0 }

    /// The loadTimeout to use, in seconds: ``loadTimeout(_:)`` (the engine's rule) in seconds.
    public static func clampLoadTimeout(_ t: Double) -> Double? { loadTimeout(t)?.seconds }

    /// The loadTimeout to use, converted once to engine time: nil for an invalid one (not finite, or
    /// negative), else at least 1 s.
    public static func loadTimeout(_ seconds: Double) -> EngineTime? {
        guard isValidDuration(seconds) else { return nil }
        return max(EngineTime(seconds: seconds), minimumLoadTimeout)
    }

    /// Stage-A budget: `max(T - 0.5, 0.5)`.
    @inline(__always)
    public static func stageA(_ t: EngineTime) -> EngineTime { max(t - reserve, reserve) }

    /// Default-audience request timeout after stage A: `min(max(T - elapsed, 0.5), 60)`.
    @inline(__always)
    public static func stageB(_ t: EngineTime, elapsed: EngineTime) -> EngineTime { min(max(t - elapsed, reserve), stageBCap) }

    /// A placement id trimmed of whitespace; nil when nothing is left.
    public static func normalizePlacement(_ id: String) -> String? {
        let trimmed = id.trimmingWhitespace()
        return trimmed.isEmpty ? nil : trimmed
    }

    /// Placement ids trimmed, empty ones dropped, duplicates dropped keeping first-seen order.
    public static func normalizePlacements(_ ids: [String]) -> [String] {
        var out: [String] = []
        if ids.count <= 8 {
            // A few ids: duplicates found by comparing, no hashing.
            out.reserveCapacity(ids.count)
            for id in ids {
                if let p = normalizePlacement(id), !out.contains(p) { out.append(p) }
            }
            return out
        }
        var seen = Set<String>()
        for id in ids {
            if let p = normalizePlacement(id), seen.insert(p).inserted { out.append(p) }
        }
        return out
    }
}

extension String {
    /// The string without leading and trailing Unicode whitespace.
    func trimmingWhitespace() -> String {
        // Most ids begin and end with a visible ASCII character: nothing to trim, no Unicode tables.
        if let first = utf8.first, let last = utf8.last, (0x21...0x7E).contains(first), (0x21...0x7E).contains(last) {
            return self
        }
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
              let last = scalars.lastIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        return String(scalars[first...last])
    }
}
