import Synchronization

/// A token bucket per client key (the remote IP): `burst` requests at once, refilled at `ratePerSecond`.
///
/// The table of clients is bounded (`maxClients`); when full, buckets that have refilled completely
/// (idle clients) are forgotten first, then the oldest half.
public final class RateLimiter: Sendable {
    /// The outcome of `take(key:)`.
    public enum Decision: Sendable, Equatable {
        /// Go ahead.
        case allowed
        /// Refused; a token will be available after this many seconds.
        case limited(retryAfter: Double)
    }

    private struct Bucket {
        var tokens: Double
        var updated: Double
    }

    private struct State {
        var buckets: [String: Bucket] = [:]
    }

    /// Tokens added per second.
    public let ratePerSecond: Double
    /// Bucket size: requests allowed in a burst.
    public let burst: Double
    /// Most client keys remembered at once.
    public let maxClients: Int
    private let now: @Sendable () -> Double
    private let state = Mutex(State())

    /// A limiter; `now` returns monotonic seconds (injectable for tests).
    public init(ratePerSecond: Double, burst: Int, maxClients: Int = 10_000,
                now: @escaping @Sendable () -> Double = RateLimiter.monotonicSeconds) {
        self.ratePerSecond = max(ratePerSecond, 1e-9)
        self.burst = Double(max(burst, 1))
        self.maxClients = max(maxClients, 1)
        self.now = now
    }

    /// Takes one token for `key` if there is one.
    public func take(key: String) -> Decision {
        let t = now()
        return state.withLock { state in
            var bucket = state.buckets[key] ?? Bucket(tokens: burst, updated: t)
            bucket.tokens = min(burst, bucket.tokens + max(0, t - bucket.updated) * ratePerSecond)
            bucket.updated = t
            let decision: Decision
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                decision = .allowed
            } else {
                decision = .limited(retryAfter: (1 - bucket.tokens) / ratePerSecond)
            }
            if state.buckets[key] == nil && state.buckets.count >= maxClients { evict(&state, at: t) }
            state.buckets[key] = bucket
            return decision
        }
    }

    /// How many client keys are remembered.
    public var trackedClients: Int { state.withLock { $0.buckets.count } }

    private func evict(_ state: inout State, at t: Double) {
        state.buckets = state.buckets.filter { $0.value.tokens + (t - $0.value.updated) * ratePerSecond < burst }
        if state.buckets.count >= maxClients {
            let oldest = state.buckets.sorted { $0.value.updated < $1.value.updated }.prefix(state.buckets.count / 2 + 1)
            for (key, _) in oldest { state.buckets[key] = nil }
        }
    }

    /// Seconds on the monotonic clock.
    public static func monotonicSeconds() -> Double {
        let d = ContinuousClock.now - epoch
        return Double(d.components.seconds) + Double(d.components.attoseconds) * 1e-18
    }

    private static let epoch = ContinuousClock.now
}
