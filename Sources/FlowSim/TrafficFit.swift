import FlowEvents
import FlowFetch
import FlowJSON
import Foundation

/// One request as recorded in traffic: a `request.end` event (with its `request.start` when the
/// trace has it).
public struct RecordedRequest: Sendable, Hashable {
    public var placement: String
    /// `targeted`, `default`, `layout`, ...
    public var kind: String
    /// Seconds from the request's start to its end: its latency when it was answered, the time it
    /// was given when it timed out or was cancelled (a lower bound of its latency).
    public var duration: Double
    /// The `outcome` attribute: `ok`, `timeout`, `cancelled`, `http:503`, `reset`, `malformed`, ...
    public var outcome: String

    public init(placement: String, kind: String, duration: Double, outcome: String) {
        self.placement = placement; self.kind = kind; self.duration = duration; self.outcome = outcome
    }

    /// The failure class of the outcome: nil when answered with a flow (`ok`), else `timeout`,
    /// `cancelled`, `transport`, `http5xx`, `http4xx` or `malformed`.
    public var failureClass: String? {
        switch outcome {
        case "ok": return nil
        case "timeout", "cancelled", "malformed": return outcome
        default:
            guard outcome.hasPrefix("http:"), let status = Int(outcome.dropFirst(5)) else { return "transport" }
            // As the engine classifies them: 5xx, 429 and 499 are server errors (they fall back).
            return status >= 500 || status == 429 || status == 499 ? "http5xx" : "http4xx"
        }
    }

    /// Whether the latency is only known to be longer than `duration` (right-censored).
    public var censored: Bool { outcome == "timeout" || outcome == "cancelled" }
}

/// A latency distribution fitted to recorded requests, treating requests that timed out (or were
/// cancelled) as right-censored at the time they were given, never dropping them.
///
/// - The log-normal is the maximum-likelihood fit with censoring (EM on the logs of the durations).
/// - The empirical quantiles are Kaplan-Meier's (nil when censoring hides the quantile).
public struct LatencyFit: Sendable, Hashable {
    /// Requests recorded.
    public var requests: Int
    /// Requests whose latency was observed (an answer: a flow, an HTTP error, a transport error).
    public var answered: Int
    /// Requests that timed out.
    public var timeouts: Int
    /// Requests that were cancelled before an answer (censored like timeouts).
    public var cancelled: Int
    /// Failed requests per class (`transport`, `http5xx`, `http4xx`, `malformed`), timeouts excluded.
    public var failures: [String: Int]
    /// Mean and standard deviation of the log-latency (natural log of seconds); nil when fewer than
    /// two distinct latencies were observed.
    public var mu: Double?
    public var sigma: Double?
    /// Kaplan-Meier median and 95th percentile (nil when the survival curve stays above 1 - q).
    public var kaplanMeierP50: Double?
    public var kaplanMeierP95: Double?

    /// Fits `requests`.
    public init(_ requests: [RecordedRequest]) {
        self.requests = requests.count
        answered = requests.count(where: { !$0.censored })
        timeouts = requests.count(where: { $0.outcome == "timeout" })
        cancelled = requests.count(where: { $0.outcome == "cancelled" })
        var failures: [String: Int] = [:]
        for r in requests { if let c = r.failureClass, c != "timeout", c != "cancelled" { failures[c, default: 0] += 1 } }
        self.failures = failures
        let samples = requests.map { (time: max($0.duration, 1e-6), censored: $0.censored) }
        if let (m, s) = Self.censoredLogNormal(samples) { mu = m; sigma = s }
        let km = KaplanMeier(samples)
        kaplanMeierP50 = km.quantile(0.5)
        kaplanMeierP95 = km.quantile(0.95)
    }

    /// The fitted log-normal's `q` quantile, seconds.
    public func quantile(_ q: Double) -> Double? {
        guard let mu, let sigma else { return nil }
        return exp(mu + sigma * NormalDistribution.inverseCDF(q))
    }

    /// Share of requests that timed out.
    public var timeoutShare: Double { requests > 0 ? Double(timeouts) / Double(requests) : 0 }

    /// The network the simulation plays for these requests: the fitted latency, and transport and 5xx
    /// failures at their rate among answered requests (a failure is only seen when the answer came in
    /// time, so its rate among all requests would undercount it). No hangs: timeouts come from the
    /// latency's tail. nil when the latency could not be fitted.
    public var profile: NetworkProfile? {
        guard let median = quantile(0.5), let p95 = quantile(0.95), answered > 0 else { return nil }
        let n = Double(answered)
        return NetworkProfile(median: median, p95: max(p95, median), hang: 0,
                              reset: Double(failures["transport"] ?? 0) / n, http5xx: Double(failures["http5xx"] ?? 0) / n)
    }

    /// Maximum likelihood of a normal on the logs with right-censored values (EM: each censored
    /// log-time is replaced by its expectation beyond the censoring point given the current fit).
    static func censoredLogNormal(_ samples: [(time: Double, censored: Bool)]) -> (mu: Double, sigma: Double)? {
        let logs = samples.map { (y: log($0.time), censored: $0.censored) }
        let observed = logs.filter { !$0.censored }.map(\.y)
        guard observed.count >= 2, let lo = observed.min(), let hi = observed.max(), hi > lo else { return nil }
        let n = Double(logs.count)
        var mu = observed.reduce(0, +) / Double(observed.count)
        var sigma = (observed.reduce(0) { $0 + ($1 - mu) * ($1 - mu) } / Double(observed.count)).squareRoot()
        sigma = max(sigma, 1e-3)
        for _ in 0..<2_000 {
            var sum = 0.0, sumSquares = 0.0
            for s in logs {
                if s.censored {
                    let z = (s.y - mu) / sigma
                    let lambda = NormalDistribution.hazard(z)
                    // E[Y | Y > c] and E[Y^2 | Y > c] for Y ~ N(mu, sigma^2).
                    sum += mu + sigma * lambda
                    sumSquares += mu * mu + 2 * mu * sigma * lambda + sigma * sigma * (1 + z * lambda)
                } else {
                    sum += s.y
                    sumSquares += s.y * s.y
                }
            }
            let newMu = sum / n
            let newSigma = max((sumSquares / n - newMu * newMu).squareRoot(), 1e-3)
            let done = abs(newMu - mu) < 1e-10 && abs(newSigma - sigma) < 1e-10
            mu = newMu
            sigma = newSigma
            if done { break }
        }
        guard mu.isFinite, sigma.isFinite else { return nil }
        return (mu, sigma)
    }
}

/// The Kaplan-Meier (product-limit) estimate of a survival curve from right-censored times.
struct KaplanMeier {
    /// (time, survival just after it) at each time with an observed event, in time order.
    private(set) var steps: [(time: Double, survival: Double)] = []

    init(_ samples: [(time: Double, censored: Bool)]) {
        // Events before censorings at equal times (the usual convention).
        let sorted = samples.sorted { $0.time != $1.time ? $0.time < $1.time : (!$0.censored && $1.censored) }
        var atRisk = sorted.count
        var survival = 1.0
        var i = 0
        while i < sorted.count {
            let t = sorted[i].time
            var events = 0, leaving = 0
            while i < sorted.count, sorted[i].time == t {
                if !sorted[i].censored { events += 1 }
                leaving += 1
                i += 1
            }
            if events > 0 {
                survival *= 1 - Double(events) / Double(atRisk)
                steps.append((t, survival))
            }
            atRisk -= leaving
        }
    }

    /// The smallest time at which the survival is at most 1 - q; nil when it never gets there.
    func quantile(_ q: Double) -> Double? {
        steps.first { $0.survival <= 1 - q + 1e-12 }?.time
    }
}

/// The standard normal distribution's functions the fits need.
enum NormalDistribution {
    /// P(Z > z).
    static func survival(_ z: Double) -> Double { 0.5 * erfc(z / 2.0.squareRoot()) }

    /// density(z) / P(Z > z) (the inverse Mills ratio), stable far in the tail.
    static func hazard(_ z: Double) -> Double {
        if z > 8 { return z + 1 / z }  // asymptotic: the ratio below loses precision there
        return exp(-0.5 * z * z) / (2 * Double.pi).squareRoot() / survival(z)
    }

    /// The `p` quantile (Acklam's rational approximation, refined by one Newton step).
    static func inverseCDF(_ p: Double) -> Double {
        if p <= 0 { return -.infinity }
        if p >= 1 { return .infinity }
        let a = [-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
                 -3.066479806614716e+01, 2.506628277459239e+00]
        let b = [-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
                 -1.328068155288572e+01]
        let c = [-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
                 4.374664141464968e+00, 2.938163982698783e+00]
        let d = [7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00]
        var x: Double
        if p < 0.02425 {
            let q = (-2 * log(p)).squareRoot()
            x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
        } else if p <= 1 - 0.02425 {
            let q = p - 0.5, r = q * q
            x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q
                / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
        } else {
            let q = (-2 * log(1 - p)).squareRoot()
            x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
        }
        let e = 0.5 * erfc(-x / 2.0.squareRoot()) - p
        let u = e * (2 * Double.pi).squareRoot() * exp(x * x / 2)
        x -= u / (1 + x * u / 2)
        return x
    }
}

/// Recorded traffic fitted per placement and request kind: what `flowscope simulate --from` plays.
///
/// ```swift
/// let fit = TrafficFit(envelopes: events)
/// let population = fit.population(from: .standard)
/// ```
public struct TrafficFit: Sendable {
    /// Fewest recorded requests a placement needs for its own fit and a recommendation.
    public static let minimumRequests = 30

    /// Requests by placement, then kind.
    public var requests: [String: [String: [RecordedRequest]]] = [:]
    /// Fits by placement, then kind (`targeted`, `default`, `layout`, ...).
    public var fits: [String: [String: LatencyFit]] = [:]
    /// Per placement, its flow requests (targeted and default) pooled.
    public var placementFits: [String: LatencyFit] = [:]
    /// Every flow request of every placement pooled.
    public var overall: LatencyFit
    /// `after` of every attribution.applied event (seconds from activation to the attribution).
    public var attributionDelays: [Double]
    /// Events read.
    public var events: Int
    /// request.start events that have no request.end in the source (still in flight when it was
    /// recorded): left out, their outcome is unknown.
    public var unfinished: Int

    /// Fits the requests of `envelopes` as the read model folds them (``CallFold``: request.start
    /// and request.end paired by trace and span), in the order their request.end came, and the
    /// attribution.applied delays.
    public init(envelopes: [Envelope]) {
        var fold = CallFold()
        var delays: [Double] = []
        for (i, e) in envelopes.enumerated() {
            // Numbered in the order given: a file's seqs may repeat (several processes wrote it).
            fold.add(e.event, seq: UInt64(i), ts: e.ts, run: e.run)
            if e.name == .attributionApplied, e.attrs["source"]?.stringValue ?? "appleAds" == "appleAds",
               let after = e.attrs["after"]?.numberValue, after.isFinite, after > 0 {
                delays.append(after)
            }
        }
        var recorded: [(order: UInt64, request: RecordedRequest)] = []
        var unfinished = 0
        for call in fold.traces {
            for r in call.requests {
                guard let placement = r.placement else { continue }
                guard let order = r.endSeq else {
                    unfinished += 1
                    continue
                }
                guard !r.kind.isEmpty, let duration = r.reportedDuration, let outcome = r.outcome else { continue }
                recorded.append((order, RecordedRequest(placement: placement, kind: r.kind, duration: duration, outcome: outcome)))
            }
        }
        self.init(requests: recorded.sorted { $0.order < $1.order }.map(\.request), attributionDelays: delays)
        events = envelopes.count
        self.unfinished = unfinished
    }

    /// Fits `requests` (and the attribution delays, if any).
    public init(requests recorded: [RecordedRequest], attributionDelays: [Double] = []) {
        var byPlacement: [String: [String: [RecordedRequest]]] = [:]
        for r in recorded { byPlacement[r.placement, default: [:]][r.kind, default: []].append(r) }
        requests = byPlacement
        var flowRequests: [RecordedRequest] = []
        for (placement, kinds) in byPlacement {
            fits[placement] = kinds.mapValues(LatencyFit.init)
            let flows = (kinds["targeted"] ?? []) + (kinds["default"] ?? [])
            if !flows.isEmpty { placementFits[placement] = LatencyFit(flows) }
            flowRequests += flows
        }
        overall = LatencyFit(flowRequests)
        self.attributionDelays = attributionDelays
        events = recorded.count
        unfinished = 0
    }

    /// Placements with flow requests (targeted or default), sorted.
    public var placements: [String] { placementFits.keys.sorted() }

    /// Whether `placement` has enough recorded flow requests for its own fit and a recommendation.
    public func hasEnoughData(_ placement: String) -> Bool {
        (placementFits[placement]?.requests ?? 0) >= Self.minimumRequests && placementFits[placement]?.profile != nil
    }

    /// The fitted attribution delay (log-normal), when there are enough attribution.applied events.
    public var attributionDelay: Distribution? {
        guard attributionDelays.count >= Self.minimumRequests else { return nil }
        let fit = LatencyFit(attributionDelays.map { RecordedRequest(placement: "", kind: "", duration: $0, outcome: "ok") })
        guard let m = fit.quantile(0.5), let p = fit.quantile(0.95) else { return nil }
        return .logNormal(median: m, p95: max(p, m))
    }

    /// What a user should know before trusting the fit: placements and kinds with too few requests,
    /// requests left out.
    public var warnings: [String] {
        var out: [String] = []
        for placement in placements {
            let n = placementFits[placement]?.requests ?? 0
            if n < Self.minimumRequests {
                out.append("placement \(placement): \(n) recorded flow request\(n == 1 ? "" : "s"), at least \(Self.minimumRequests) "
                           + "are needed to fit it; played with every placement's requests pooled, no recommendation")
            } else if placementFits[placement]?.profile == nil {
                out.append("placement \(placement): fewer than 2 distinct answered latencies among \(n) requests; "
                           + "played with every placement's requests pooled, no recommendation")
            } else {
                for kind in ["targeted", "default"] {
                    let k = fits[placement]?[kind]?.requests ?? 0
                    if k > 0, k < Self.minimumRequests {
                        out.append("placement \(placement), \(kind) requests: \(k) recorded, at least \(Self.minimumRequests) "
                                   + "are needed to fit them on their own; played with the placement's requests pooled")
                    }
                }
            }
        }
        if !attributionDelays.isEmpty, attributionDelays.count < Self.minimumRequests {
            out.append("attribution: \(attributionDelays.count) attribution.applied event\(attributionDelays.count == 1 ? "" : "s"), "
                       + "at least \(Self.minimumRequests) are needed to fit the delay; the config's delay is played")
        }
        if unfinished > 0 {
            out.append("\(unfinished) request\(unfinished == 1 ? "" : "s") started but never ended in the source (left out)")
        }
        return out
    }

    /// `base` with its network replaced by the fit: every placement's targeted and default requests
    /// on their own fitted network (the placement's pooled fit when a kind has too few requests;
    /// every placement pooled when the placement has too few), the attribution delay when fitted.
    /// Placements come from the recording: those `base` lists keep their timing and share; others
    /// are needed at launch in every session.
    public func population(from base: Population) -> Population {
        var p = base
        let pooled = overall.profile ?? NetworkProfile.builtIn["lte"]!
        p.profiles = ["recorded": pooled]
        p.networks = [("recorded", 1)]
        var needs: [PlacementNeed] = []
        for need in base.placements where placementFits[need.id] != nil { needs.append(need) }
        for id in placements where !needs.contains(where: { $0.id == id }) { needs.append(PlacementNeed(id: id, at: .fixed(0))) }
        p.placements = needs
        p.requestNetworks = [:]
        for id in placements where hasEnoughData(id) {
            guard let placementProfile = placementFits[id]?.profile else { continue }
            var kinds: [String: NetworkProfile] = [:]
            for kind in ["targeted", "default"] {
                if let fit = fits[id]?[kind], fit.requests >= Self.minimumRequests, let profile = fit.profile {
                    kinds[kind] = profile
                } else {
                    kinds[kind] = placementProfile
                }
            }
            p.requestNetworks[id] = kinds
        }
        if let delay = attributionDelay { p.attributionDelay = delay }
        return p
    }

    /// The `fitted` object of `simulate --json`: per placement and kind `requests`, `p50`, `p95`
    /// (the fitted log-normal), `timeoutShare`, `failureShares` (shares of requests per class), and
    /// extra keys: `timeoutShareCI` (95% Wilson), `censored`, `kaplanMeier` ({p50, p95}, null where
    /// censoring hides it), `enough` (whether it has its own fit).
    public var json: JSONValue {
        var out: [String: JSONValue] = [:]
        for (placement, kinds) in fits {
            var o: [String: JSONValue] = [:]
            for (kind, fit) in kinds {
                var failureShares: [String: JSONValue] = [:]
                for (c, k) in fit.failures where k > 0 { failureShares[c] = .number(round6(Double(k) / Double(fit.requests))) }
                if fit.cancelled > 0 { failureShares["cancelled"] = .number(round6(Double(fit.cancelled) / Double(fit.requests))) }
                let ci = Confidence.wilson(fit.timeouts, fit.requests)
                o[kind] = [
                    "requests": .number(Double(fit.requests)),
                    "p50": fit.quantile(0.5).map { JSONValue.number(round6($0)) } ?? .null,
                    "p95": fit.quantile(0.95).map { JSONValue.number(round6($0)) } ?? .null,
                    "timeoutShare": .number(round6(fit.timeoutShare)),
                    "timeoutShareCI": [.number(round6(ci.low)), .number(round6(ci.high))],
                    "failureShares": .object(failureShares),
                    "censored": .number(Double(fit.timeouts + fit.cancelled)),
                    "kaplanMeier": ["p50": fit.kaplanMeierP50.map { JSONValue.number(round6($0)) } ?? .null,
                                    "p95": fit.kaplanMeierP95.map { JSONValue.number(round6($0)) } ?? .null],
                    "enough": .bool(fit.requests >= Self.minimumRequests && fit.profile != nil),
                ]
            }
            out[placement] = .object(o)
        }
        return .object(out)
    }

    /// The fitted attribution delay for `--json` (`fittedAttribution`): events, median, p95.
    public var attributionJSON: JSONValue {
        var o: [String: JSONValue] = ["events": .number(Double(attributionDelays.count))]
        if case .logNormal(let m, let p)? = attributionDelay { o["median"] = .number(round6(m)); o["p95"] = .number(round6(p)) }
        return .object(o)
    }
}

