import FlowEvents
import FlowFetch
import FlowJSON

/// Recorded events, folded once (``CallFold``) and indexed, from which any recorded call can be
/// turned back into a scenario that reproduces it in virtual time (``scenario(trace:session:)``).
/// `flowscope reproduce` and `GET /api/calls/{trace}/scenario` both answer with it.
///
/// ```swift
/// let recording = Recording(envelopes)
/// switch recording.scenario(trace: "4bf92f3577b34da6a3ce929d0e0e4736", session: false) {
/// case .success(let reproduced): print(reproduced.text)      // a scenario file `flowscope run` passes
/// case .failure(let refusal): print(refusal.message)          // why this call cannot be reproduced
/// }
/// ```
public struct Recording: Sendable {
    private let traces: [String: Call]
    private let events: [String: [Envelope]]
    private let sessionOf: [String: SessionID]
    private let sessionTraces: [SessionID: [String]]
    private let sessionAttribution: [SessionID: Double]
    /// Per session, the calls that stored a flow, by placement and engine time (whole microseconds).
    private let storedBy: [SessionID: [StoreKey: String]]
    /// Events read.
    public let eventCount: Int
    /// Calls among them (traces with a start or an end event).
    public let callCount: Int
    /// Every finished call's trace id, in the order the calls started.
    public let finishedCalls: [String]

    /// Folds `envelopes` (any order; seq decides).
    public init(_ envelopes: [Envelope]) {
        var sorted = envelopes
        if zip(sorted, sorted.dropFirst()).contains(where: { $0.seq > $1.seq }) { sorted.sort { $0.seq < $1.seq } }
        var fold = CallFold()
        var events: [String: [Envelope]] = [:]
        var sessionOf: [String: SessionID] = [:]
        var sessionTraces: [SessionID: [String]] = [:]
        var sessionAttribution: [SessionID: Double] = [:]
        var storedBy: [SessionID: [StoreKey: String]] = [:]
        for e in sorted {
            fold.add(e)
            let trace = e.trace.hex
            events[trace, default: []].append(e)
            if let s = e.session, sessionOf[trace] == nil {
                sessionOf[trace] = s
                sessionTraces[s, default: []].append(trace)
            }
            if e.name == .cacheStored, let s = e.session, let p = e.placement {
                storedBy[s, default: [:]][StoreKey(placement: p, at: micro(e.t))] = trace
            }
            if e.name == .attributionApplied, e.attrs["source"]?.stringValue == "appleAds", let s = e.session {
                if let known = sessionAttribution[s], known <= e.t { continue }
                sessionAttribution[s] = e.t
            }
        }
        var traces: [String: Call] = [:]
        for c in fold.traces { traces[c.trace] = c }
        let calls = fold.calls
        self.eventCount = envelopes.count
        self.traces = traces
        self.events = events
        self.sessionOf = sessionOf
        self.sessionTraces = sessionTraces
        self.sessionAttribution = sessionAttribution
        self.storedBy = storedBy
        self.callCount = calls.count
        self.finishedCalls = calls.filter(\.finished).sorted { ($0.startT, $0.firstSeq) < ($1.startT, $1.firstSeq) }.map(\.trace)
    }

    /// The call of `trace`, when the recording holds one.
    public func call(_ trace: String) -> Call? { traces[trace.lowercased()].flatMap { $0.isCall ? $0 : nil } }

    /// A scenario that reproduces call `trace` (with `session`: with every call of the same client
    /// session that overlapped it), checked by playing it before it is returned: its `expect` block
    /// holds in virtual time. A call that cannot be reproduced is refused with the reason.
    public func scenario(trace rawTrace: String, session: Bool) -> Result<ReproducedCall, ReproductionRefusal> {
        do throws(ReproductionRefusal) {
            return .success(try reproduce(rawTrace, session: session))
        } catch {
            return .failure(error)
        }
    }

    // MARK: building

    private func reproduce(_ rawTrace: String, session: Bool) throws(ReproductionRefusal) -> ReproducedCall {
        let trace = rawTrace.lowercased()
        guard trace.utf8.count == 32, trace.allSatisfy(\.isHexDigit) else {
            throw ReproductionRefusal(.unknownTrace, "\(JSONValue.string(rawTrace).jsonText) is not a trace id (expected 32 hex characters, "
                                      + "as in an event's \"trace\")")
        }
        guard let target = traces[trace] else {
            throw ReproductionRefusal(.unknownTrace, "no event of trace \(trace) in the recording (\(eventCount) events, \(callCount) calls)")
        }
        guard target.isCall else {
            let names = Set((events[trace] ?? []).map(\.name.rawValue)).sorted().joined(separator: ", ")
            throw ReproductionRefusal(.notACall, "trace \(trace) is not a call: its \(target.events) event(s) (\(names)) hold no "
                                      + "fetch.start or preload.start (engine activity such as attribution observed or a profile switch)")
        }
        try Self.check(target, trace: trace)
        if target.name == "getFlowConfiguration" {
            guard !session else {
                throw ReproductionRefusal(.unsupportedCall, "call \(trace) (getFlowConfiguration): a layout fetch is reproduced alone "
                                          + "(without --session)")
            }
            return try buildConfiguration(target)
        }
        var included = [target]
        var sessionID: SessionID?
        if session {
            guard let s = sessionOf[trace] else {
                throw ReproductionRefusal(.noSession, "call \(trace)'s events carry no \"session\" field, so the calls of its session "
                                          + "are not known (reproduce it without --session)")
            }
            sessionID = s
            let end = target.endedAt ?? target.endT
            for other in sessionTraces[s] ?? [] where other != trace {
                guard let c = traces[other], c.isCall else { continue }
                let otherEnd = c.endedAt ?? c.endT
                guard c.startT == target.startT || (c.startT < end && otherEnd > target.startT) else { continue }
                // Layout fetches and calls still running touch no flow a call of the scenario reads
                // (an entry one of them stored is handled below): left out.
                if c.name == "getFlowConfiguration" || !c.finished { continue }
                try Self.check(c, trace: other)
                included.append(c)
            }
        } else {
            sessionID = sessionOf[trace]
        }
        try includeStorers(&included, session: sessionID)
        included.sort { ($0.startT, $0.firstSeq) < ($1.startT, $1.firstSeq) }
        return try build(target: target, calls: included, session: sessionID)
    }

    /// Adds to `calls` every call of the session that stored a cache entry one of them found after
    /// the first of them started (a scenario can only seed entries present at its start), until
    /// none is missing.
    private func includeStorers(_ calls: inout [Call], session: SessionID?) throws(ReproductionRefusal) {
        var changed = true
        while changed {
            changed = false
            let t0 = calls.map { micro($0.startT) }.min() ?? 0
            let held = Set(calls.map(\.trace))
            for c in calls {
                for e in events[c.trace] ?? [] where e.name == .cacheHit || e.name == .cacheExpired {
                    guard let p = e.placement ?? c.placement, let age = e.attrs["age"]?.numberValue else { continue }
                    let storedAt = micro(e.t) - micro(age)
                    guard storedAt >= t0 else { continue }
                    let key = StoreKey(placement: p, at: storedAt)
                    guard let s = session, let storer = storedBy[s]?[key] else {
                        throw ReproductionRefusal(.incomplete, "call \(c.trace) found a cache entry for \(p) stored at t = \(Ordered.secondsText(storedAt)) "
                                                  + "by no call the recording names\(session == nil ? " (its events carry no session)" : "")")
                    }
                    guard !held.contains(storer), let call = traces[storer] else { continue }
                    try Self.check(call, trace: storer)
                    calls.append(call)
                    changed = true
                    break
                }
                if changed { break }
            }
        }
    }

    /// Refuses a call that is not finished, incomplete, or of a kind a scenario cannot play.
    private static func check(_ c: Call, trace: String) throws(ReproductionRefusal) {
        let what = "call \(trace) (\(c.name ?? "?")\(c.placement.map { " " + $0 } ?? ""))"
        guard c.finished else {
            throw ReproductionRefusal(.unfinished, "\(what) has no end event: it was still running when the recording ended")
        }
        guard c.hasStart else {
            throw ReproductionRefusal(.incomplete, "\(what) has no start event in the recording (it began before the events read)")
        }
        guard !c.isIncomplete else {
            throw ReproductionRefusal(.incomplete, "\(what) is incomplete: \(c.unpaired) unpaired end event(s)"
                                      + (c.outOfOrder ? ", events out of order" : ""))
        }
        guard let name = c.name, supportedCalls.contains(name) else {
            throw ReproductionRefusal(.unsupportedCall, "\(what): \(c.name ?? "this call") is not reproduced; reproducible: "
                                      + supportedCalls.joined(separator: ", "))
        }
        if let code = c.errorCode?.intValue, code == FlowError.Code.profileWasChanged.rawValue || code == FlowError.Code.operationInterrupted.rawValue {
            throw ReproductionRefusal(.interrupted, "\(what) ended with error \(code) (\(code == 3006 ? "profileWasChanged" : "operationInterrupted")): "
                                      + "an identify, a cancellation or a restart ended it, which its events do not record")
        }
        let kinds: Set<String> = name == "getFlowConfiguration" ? [RequestKind.layout.rawValue, RequestKind.asset.rawValue]
            : [RequestKind.targeted.rawValue, RequestKind.default.rawValue]
        for r in c.requests where !kinds.contains(r.kind) || r.placement == nil {
            throw ReproductionRefusal(.unsupportedCall, "\(what) issued a \(r.kind) request\(r.placement == nil ? " without a placement" : ""), "
                                      + "which a reproduced scenario does not play")
        }
    }

    /// The calls a reproduced scenario plays.
    public static let supportedCalls = ["getFlow", "getFlowForDefaultAudience", "getFlowOrDefault", "preloadFlows",
                                        "preloadFlowsForDefaultAudience", "getFlowConfiguration"]

    private func startEvent(_ c: Call) -> Envelope? {
        (events[c.trace] ?? []).first { $0.name == .fetchStart || $0.name == .preloadStart }
    }

    private func build(target: Call, calls: [Call], session: SessionID?) throws(ReproductionRefusal) -> ReproducedCall {
        let t0 = micro(calls.map(\.startT).min() ?? target.startT)
        func rel(_ t: Double) -> Int64 { micro(t) - t0 }
        var placementOrder: [String] = []
        func note(_ p: String) { if !placementOrder.contains(p) { placementOrder.append(p) } }

        // Steps: each call with its parameters, at its time.
        var steps: [Ordered] = []
        for c in calls {
            guard let start = startEvent(c) else { throw ReproductionRefusal(.incomplete, "call \(c.trace) has no start event") }
            let a = start.attrs
            var step: [(String, Ordered)] = [("at", .seconds(rel(c.startT))), ("call", .string(c.name ?? ""))]
            switch c.name ?? "" {
            case "getFlow", "getFlowForDefaultAudience", "getFlowOrDefault":
                guard let p = c.placement else { throw ReproductionRefusal(.incomplete, "call \(c.trace) names no placement") }
                note(p)
                step.append(("placement", .string(p)))
                if c.name == "getFlowOrDefault" {
                    guard let timeout = a["timeout"]?.numberValue else {
                        throw ReproductionRefusal(.incomplete, "call \(c.trace): fetch.start has no timeout (getFlowOrDefault's race timer)")
                    }
                    step.append(("timeout", .seconds(micro(timeout))))
                } else {
                    let policy = try Self.policy(a["policy"], trace: c.trace)
                    if let policy { step.append(("fetchPolicy", policy)) }
                    if c.name == "getFlow", let t = a["loadTimeout"]?.numberValue { step.append(("loadTimeout", .seconds(micro(t)))) }
                }
            default:
                let placements = (a["placements"]?.arrayValue ?? []).compactMap(\.stringValue)
                placements.forEach(note)
                step.append(("placements", .array(placements.map(Ordered.string))))
                if c.name == "preloadFlows", let t = a["loadTimeout"]?.numberValue { step.append(("loadTimeout", .seconds(micro(t)))) }
            }
            for r in c.requests { if let p = r.placement { note(p) } }
            steps.append(.object(step))
        }

        // The network: each request's latency and outcome, as the nth request of its placement and kind.
        let rules = try Self.networkRules(calls)

        // The cache: per placement, the entry its first read found (kind, age at the scenario's start).
        var readsByPlacement: [String: (envelope: Envelope, call: Call)] = [:]
        for c in calls {
            for e in events[c.trace] ?? [] where [.cacheHit, .cacheMiss, .cacheExpired, .cacheCorrupt].contains(e.name) {
                guard let p = e.placement ?? c.placement else { continue }
                if let seen = readsByPlacement[p], seen.envelope.seq <= e.seq { continue }
                readsByPlacement[p] = (e, c)
            }
        }
        // When (engine time, whole microseconds) the entry a call returned from the cache was stored.
        func returnedStoredAt(_ c: Call) -> Int64? {
            guard c.source == "cache", let p = c.placement else { return nil }
            guard let hit = (events[c.trace] ?? []).last(where: { $0.name == .cacheHit && ($0.placement ?? p) == p }),
                  let age = hit.attrs["age"]?.numberValue else { return nil }
            return micro(hit.t) - micro(age)
        }
        var cache: [Ordered] = []
        for p in placementOrder {
            guard let (e, _) = readsByPlacement[p], e.name != .cacheMiss else { continue }
            var entry: [(String, Ordered)] = [("placement", .string(p))]
            if e.name == .cacheCorrupt {
                entry += [("variation", .string("unrecorded")), ("corrupt", .bool(true))]
            } else {
                guard let recorded = e.attrs["age"]?.numberValue else { continue }
                let age = micro(recorded) - rel(e.t)
                // An entry stored after the scenario's start is stored by one of its own calls.
                guard age > 0 else { continue }
                // A call that returned this very entry says what it holds.
                let returned = calls.first { $0.placement == p && returnedStoredAt($0) == micro(e.t) - micro(recorded) }
                let fromDefault = returned.map(\.targetingLost) ?? (e.attrs["audience"]?.stringValue == "default")
                entry += [("variation", .string(returned?.variation ?? "unrecorded")),
                          ("audience", .string(returned?.audience ?? defaultAudienceName)),
                          ("age", .seconds(age)), ("fromDefaultAudience", .bool(fromDefault))]
            }
            cache.append(.object(entry))
        }

        // The backend: per placement, what a targeted and a default-audience request answered.
        var targetedAudience: [String: (name: String, variation: String)] = [:]
        var targetedAllUsers: Set<String> = []
        var allUsersVariation: [String: String] = [:]
        var fallback: [String: String] = [:]
        func conflict(_ p: String, _ what: String) -> ReproductionRefusal {
            ReproductionRefusal(.conflict, "placement \(p): \(what), which one scenario backend cannot answer")
        }
        for c in calls where !c.isError && c.kind == .fetch {
            guard let p = c.placement, let v = c.variation, let audience = c.audience, let source = c.source else { continue }
            var targeted: Bool?
            switch source {
            case "network": targeted = true
            case "defaultAudience": targeted = false
            case "cache" where (returnedStoredAt(c) ?? Int64.min) >= t0: targeted = !c.targetingLost
            case "fallbackFile":
                if let other = fallback[p], other != v { throw conflict(p, "the fallback file gave \(other) and \(v)") }
                fallback[p] = v
            default: break
            }
            guard let targeted else { continue }
            if !targeted || audience == defaultAudienceName {
                if let other = allUsersVariation[p], other != v { throw conflict(p, "All Users answered \(other) and \(v)") }
                allUsersVariation[p] = v
                if targeted { targetedAllUsers.insert(p) }
            } else {
                if let other = targetedAudience[p], other.name != audience || other.variation != v {
                    throw conflict(p, "targeted requests answered \(other.name)/\(other.variation) and \(audience)/\(v)")
                }
                targetedAudience[p] = (audience, v)
            }
        }

        // Attribution: when the session's profile got appleAds, or when getFlowOrDefault's attribution path began.
        var attributionAt: Double?
        if let s = session, let t = sessionAttribution[s] { attributionAt = t }
        if attributionAt == nil {
            for c in calls where c.name == "getFlowOrDefault" {
                if let r = c.requests.first(where: { $0.kind == RequestKind.targeted.rawValue }) { attributionAt = r.issuedAt; break }
            }
        }
        let end = calls.compactMap(\.endedAt).max() ?? target.endT
        if let a = attributionAt, micro(a) > micro(end) { attributionAt = nil }
        let needsAttribution = calls.contains { $0.name == "getFlowOrDefault" }
            || targetedAudience.keys.contains { targetedAllUsers.contains($0) }
        var backend: [(String, Ordered)] = []
        for p in placementOrder {
            var audiences: [Ordered] = []
            if let (name, v) = targetedAudience[p] {
                var a: [(String, Ordered)] = [("name", .string(name)), ("versionId", .string(Self.versionId(name)))]
                if targetedAllUsers.contains(p) {
                    guard attributionAt != nil else {
                        throw conflict(p, "targeted requests answered \(name) and All Users while the recording shows no attribution")
                    }
                    a.append(("when", .object([("attribution", .string("appleAds"))])))
                }
                a.append(("variations", .array([.object([("id", .string(v)), ("weight", .number(100))])])))
                audiences.append(.object(a))
            }
            audiences.append(.object([("name", .string(defaultAudienceName)), ("versionId", .string(Self.versionId(defaultAudienceName))),
                                      ("variations", .array([.object([("id", .string(allUsersVariation[p] ?? "unrecorded")),
                                                                      ("weight", .number(100))])]))]))
            backend.append((p, .object([("audiences", .array(audiences))])))
        }

        // The client's requestTimeout: the budget of a default-audience request that had no loadTimeout.
        var requestTimeout: Int64?
        for c in calls where ["getFlowForDefaultAudience", "preloadFlowsForDefaultAudience", "getFlowOrDefault"].contains(c.name ?? "") {
            for r in c.requests where r.kind == RequestKind.default.rawValue && micro(r.issuedAt) == micro(c.startT) {
                guard let b = r.budget, b > 0 else { continue }
                if let known = requestTimeout, known != micro(b) {
                    throw ReproductionRefusal(.conflict, "the session's requests had requestTimeout \(Ordered.secondsText(known)) and \(b)")
                }
                requestTimeout = micro(b)
            }
        }

        // Expectations: what each call returned.
        var expect: [Ordered] = []
        var targetStep = 0
        for (i, c) in calls.enumerated() {
            if c.trace == target.trace { targetStep = i }
            var e: [(String, Ordered)] = [("step", .number(Double(i))), ("outcome", .string(c.isError ? "error" : "success"))]
            if c.isError {
                e.append(("errorCode", .number(Double(c.errorCode?.intValue ?? FlowError.Code.networkFailed.rawValue))))
                if !c.failed.isEmpty {
                    e.append(("preloadErrors", .object(c.failed.keys.sorted().map { ($0, .number(Double(c.failed[$0]?.intValue ?? 0))) })))
                }
            } else if c.kind == .fetch {
                e += [("source", .string(c.source ?? "")), ("variation", .string(c.variation ?? "")),
                      ("audience", .string(c.audience ?? "")), ("targetingLost", .bool(c.targetingLost))]
            }
            let duration = micro(c.duration ?? 0)
            e.append(("completedAt", .milliseconds(rel(c.startT) + duration)))
            e.append(("requests", .number(Double(c.requests.filter { $0.kind != RequestKind.asset.rawValue }.count))))
            expect.append(.object(e))
        }

        var profile: [(String, Ordered)] = [("id", .string("reproduced-user"))]
        if let a = attributionAt, needsAttribution {
            profile.append(("attribution", .object([("appleAds", .object([("appliesAt", .seconds(max(0, rel(a))))]))])))
        }
        let label = "\(target.name ?? "call") \(target.placement ?? target.placements.joined(separator: ","))"
        let description = "Reproduces call \(target.trace) (\(label)) of run \(JSONValue.string(target.run).jsonText)"
            + (session.map { ", session \($0.hex)" } ?? "")
            + (calls.count > 1 ? ", with the \(calls.count - 1) other call(s) of its session that overlapped it or stored a cache entry it found" : "")
            + ". Times count from the first call's start; every request answers after its recorded latency with its recorded "
            + "outcome (a request cut by a deadline or cancelled never answers), and a request the recording does not have never answers."
        var file: [(String, Ordered)] = [
            ("name", .string("reproduce \(label) (trace \(target.trace))")),
            ("description", .string(description)),
            ("profile", .object(profile)),
            ("backend", .object([("placements", .object(backend))])),
            ("network", .object([("latency", .number(0)), ("rules", .array(rules))])),
        ]
        if !cache.isEmpty { file.append(("cache", .array(cache))) }
        if !fallback.isEmpty {
            file.append(("fallbackFile", .object(fallback.keys.sorted().map { ($0, .object([("variation", .string(fallback[$0] ?? ""))])) })))
        }
        if let requestTimeout { file.append(("client", .object([("requestTimeout", .seconds(requestTimeout))]))) }
        file += [("steps", .array(steps)), ("expect", .array(expect))]

        return try Self.played(file, steps: calls, target: target, targetStep: targetStep, targetAt: rel(target.startT))
    }

    /// getFlowConfiguration: a getFlow served from a seeded cache entry gives the flow (its layout
    /// reference), then the call fetches the layout (network or fallback file) at the same instant.
    private func buildConfiguration(_ c: Call) throws(ReproductionRefusal) -> ReproducedCall {
        let evs = events[c.trace] ?? []
        guard let p = c.placement, let start = startEvent(c) else {
            throw ReproductionRefusal(.incomplete, "call \(c.trace) (getFlowConfiguration) names no placement")
        }
        guard let miss = evs.first(where: { $0.name == .layoutCacheMiss }), let id = miss.attrs["layoutId"]?.stringValue,
              let version = miss.attrs["version"]?.intValue else {
            throw ReproductionRefusal(.unsupportedCall, "call \(c.trace) (getFlowConfiguration \(p)): its layout came from the layout cache, "
                                      + "which a scenario cannot seed (a scenario starts with an empty layout cache)")
        }
        let bundled = evs.filter { $0.name == .assetBundled }.compactMap { $0.attrs["mediaId"]?.stringValue }
        let downloads = evs.first { $0.name == .assetsPrefetchStart }?.attrs["count"]?.intValue ?? 0
        let variation = c.variation ?? "unrecorded", audience = c.audience ?? defaultAudienceName
        var audiences: [Ordered] = []
        if audience != defaultAudienceName {
            audiences.append(.object([("name", .string(audience)), ("versionId", .string(Self.versionId(audience))),
                                      ("variations", .array([.object([("id", .string(variation)), ("weight", .number(100))])]))]))
        }
        audiences.append(.object([("name", .string(defaultAudienceName)), ("versionId", .string(Self.versionId(defaultAudienceName))),
                                  ("variations", .array([.object([("id", .string(audience == defaultAudienceName ? variation : "unrecorded")),
                                                                  ("weight", .number(100))])]))]))
        var layout: [(String, Ordered)] = [("id", .string(id)), ("version", .number(Double(version))),
                                           ("images", .number(Double(downloads + bundled.count)))]
        if !bundled.isEmpty { layout.append(("customMedia", .array(bundled.map(Ordered.string)))) }
        var step: [(String, Ordered)] = [("at", .number(0)), ("call", .string("getFlowConfiguration")), ("placement", .string(p))]
        if let t = start.attrs["loadTimeout"]?.numberValue { step.append(("loadTimeout", .seconds(micro(t)))) }
        if !bundled.isEmpty { step.append(("bundled", .array(bundled.map(Ordered.string)))) }
        var expect: [(String, Ordered)] = [("step", .number(1)), ("outcome", .string(c.isError ? "error" : "success"))]
        if let code = c.errorCode?.intValue {
            expect.append(("errorCode", .number(Double(code))))
        } else {
            expect += [("source", .string(c.source ?? "")), ("variation", .string(variation)), ("audience", .string(audience)),
                       ("targetingLost", .bool(c.targetingLost))]
        }
        expect += [("completedAt", .milliseconds(micro(c.duration ?? 0))),
                   ("requests", .number(Double(c.requests.filter { $0.kind != RequestKind.asset.rawValue }.count)))]
        var file: [(String, Ordered)] = [
            ("name", .string("reproduce getFlowConfiguration \(p) (trace \(c.trace))")),
            ("description", .string("Reproduces call \(c.trace) (getFlowConfiguration \(p)) of run \(JSONValue.string(c.run).jsonText). Step 0 "
                                    + "only gives it the flow (from a cache entry, no request); the layout request answers after its "
                                    + "recorded latency with its recorded outcome, and a request the recording does not have never answers.")),
            ("profile", .object([("id", .string("reproduced-user"))])),
            ("backend", .object([("placements", .object([(p, .object([("audiences", .array(audiences)), ("layout", .object(layout))]))]))])),
            ("network", .object([("latency", .number(0)), ("rules", .array(try Self.networkRules([c])))])),
            ("cache", .array([.object([("placement", .string(p)), ("variation", .string(variation)), ("audience", .string(audience)),
                                       ("age", .number(1)), ("fromDefaultAudience", .bool(c.targetingLost))])])),
        ]
        if c.source == "fallbackFile" {
            file.append(("fallbackFile", .object([(p, .object([("variation", .string(variation)), ("layout", .bool(true))]))])))
        }
        file += [("steps", .array([.object([("at", .number(0)), ("call", .string("getFlow")), ("placement", .string(p)),
                                            ("fetchPolicy", .string("returnCacheDataElseLoad"))]), .object(step)])),
                 ("expect", .array([.object(expect)]))]
        return try Self.played(file, steps: [nil, c], target: c, targetStep: 1, targetAt: 0)
    }

    /// The scenario `file` (its description second, its expect block last), played before it is
    /// handed out: the engine in virtual time must return what was recorded. `steps[i]` is the
    /// recorded call of step i (nil: a step that only prepares one).
    private static func played(_ file: [(String, Ordered)], steps: [Call?], target: Call, targetStep: Int,
                               targetAt: Int64) throws(ReproductionRefusal) -> ReproducedCall {
        var file = file
        var text = Ordered.object(file).text
        var scenario = try Self.decode(text)
        var report = ScenarioRunner(scenario).run()
        if !report.succeeded {
            // Real-time recordings: a deadline's timer fires a little late, so a call cut by one took a
            // little longer than the engine's exact deadline. Up to `timerSlack`, the scenario states the
            // engine's time and says so.
            let slack = report.failures.allSatisfy { f in
                f.key == "completedAt" && abs((f.expected.numberValue ?? 0) - (f.actual.numberValue ?? .infinity)) <= Self.timerSlack
            }
            guard slack else {
                let f = report.failures[0]
                throw ReproductionRefusal(.differs, "call \((steps[f.step] ?? target).trace): in virtual time the engine's \(f.key) is "
                                          + "\(f.actual.jsonText) where the recording has \(f.expected.jsonText), so the recording is not "
                                          + "reproduced (events missing, or a behaviour the scenario does not model)")
            }
            guard case .array(var fixed) = file[file.count - 1].1, case .string(var description) = file[1].1 else {
                throw ReproductionRefusal(.differs, "call \(target.trace): the scenario does not pass in virtual time")
            }
            var notes: [String] = []
            for f in report.failures {
                guard case .object(var fields) = fixed[f.expectation] else { continue }
                if let k = fields.firstIndex(where: { $0.0 == "completedAt" }) { fields[k].1 = .number(f.actual.numberValue ?? 0) }
                fixed[f.expectation] = .object(fields)
                notes.append("step \(f.step) completed at \(f.expected.jsonText) s in the recording and at \(f.actual.jsonText) s in virtual time")
            }
            description += " Deadlines fire late in real time: " + notes.joined(separator: "; ") + "."
            file[1].1 = .string(description)
            file[file.count - 1].1 = .array(fixed)
            text = Ordered.object(file).text
            scenario = try Self.decode(text)
            report = ScenarioRunner(scenario).run()
            guard report.succeeded else {
                throw ReproductionRefusal(.differs, "call \(target.trace): the scenario does not pass in virtual time")
            }
        }
        let recorded = micro(target.duration ?? 0)
        let reproduced = report.results[targetStep].completedAt.map { micro($0) - targetAt } ?? recorded
        return ReproducedCall(text: text, scenario: scenario, step: targetStep, calls: steps.compactMap { $0 },
                              recordedDuration: Double(recorded) / 1e6, reproducedDuration: Double(reproduced) / 1e6)
    }

    /// Each request of `calls` in the order issued, as the nth request of its placement and kind:
    /// its recorded latency and outcome; then a rule that makes any other request hang.
    private static func networkRules(_ calls: [Call]) throws(ReproductionRefusal) -> [Ordered] {
        var ordered: [(at: Int64, call: Int, index: Int, request: Call.Request)] = []
        for (ci, c) in calls.enumerated() {
            for (ri, r) in c.requests.enumerated() { ordered.append((micro(r.issuedAt), ci, ri, r)) }
        }
        ordered.sort { ($0.at, $0.call, $0.index) < ($1.at, $1.call, $1.index) }
        var counts: [String: Int] = [:]
        var rules: [Ordered] = []
        for (_, _, _, r) in ordered {
            let p = r.placement ?? ""
            let key = p + "\u{0}" + r.kind
            counts[key, default: 0] += 1
            var rule: [(String, Ordered)] = [("match", .object([("placement", .string(p)), ("kind", .string(r.kind)),
                                                                ("nth", .number(Double(counts[key] ?? 1)))]))]
            let latency = r.endedAt.map { micro($0) - micro(r.issuedAt) } ?? 0
            switch r.outcome {
            case "ok"?: rule.append(("latency", .seconds(latency)))
            case "timeout"?, "cancelled"?, nil: rule.append(("fail", .string("hang")))
            case "reset"?, "malformed"?: rule += [("latency", .seconds(latency)), ("fail", .string(r.outcome ?? ""))]
            case let o? where o.hasPrefix("http:"): rule += [("latency", .seconds(latency)), ("fail", .string(o))]
            case let o?:
                throw ReproductionRefusal(.unsupportedCall, "a \(r.kind) request ended with outcome \(o), which a "
                                          + "scenario's network cannot play")
            }
            rules.append(.object(rule))
        }
        // A request the recording does not have never answers (last rule: it matches every request).
        rules.append(.object([("fail", .string("hang"))]))

        return rules
    }

    /// How much later than the engine's exact time a real-time call may have ended (a deadline's
    /// timer firing late) and still be reproduced, seconds.
    public static let timerSlack = 0.05

    private static func decode(_ text: String) throws(ReproductionRefusal) -> Scenario {
        do throws(JSONInputError) {
            return try Scenario.decode(text)
        } catch {
            throw ReproductionRefusal(.conflict, "the recorded values do not make a valid scenario: \(error.description)")
        }
    }

    private static func policy(_ value: JSONValue?, trace: String) throws(ReproductionRefusal) -> Ordered? {
        guard let text = value?.stringValue else { return nil }
        switch text {
        case "reloadRevalidatingCacheData": return nil
        case "returnCacheDataElseLoad": return .string(text)
        default:
            let prefix = "returnCacheDataIfNotExpiredElseLoad("
            guard text.hasPrefix(prefix), text.hasSuffix(")"), let maxAge = Double(text.dropFirst(prefix.count).dropLast()) else {
                throw ReproductionRefusal(.incomplete, "call \(trace): fetch.start's policy \(JSONValue.string(text).jsonText) is not one the engine has")
            }
            return .object([("returnCacheDataIfNotExpiredElseLoad", .object([("maxAge", .seconds(micro(maxAge)))]))])
        }
    }

    private static func versionId(_ audience: String) -> String {
        "av-" + String(audience.lowercased().map { $0.isLetter || $0.isNumber ? $0 : "-" })
    }
}

/// A flow stored for a placement at an engine time (whole microseconds).
private struct StoreKey: Hashable, Sendable {
    var placement: String
    var at: Int64
}

/// Engine seconds as whole microseconds, the engine's own unit (fetch-semantics.md, "Time is exact").
/// A recorded value is any finite number: held within ±10^12 s, so that sums and differences of a
/// few of them never overflow (the scenario's decoding then refuses what is out of its range).
private func micro(_ seconds: Double) -> Int64 {
    Int64((min(max(seconds, -1e12), 1e12) * 1_000_000).rounded())
}

/// A reproduced call: the scenario file and what it holds.
public struct ReproducedCall: Sendable {
    /// The scenario file (JSON, keys in the order scenario-format.md shows them).
    public var text: String
    /// The file, decoded.
    public var scenario: Scenario
    /// The step of the call asked for.
    public var step: Int
    /// The recorded calls the scenario plays, in step order.
    public var calls: [Call]
    /// The call's duration as recorded and as the engine takes in virtual time, seconds (they differ
    /// only for a real-time recording whose deadline fired late, by at most `Recording.timerSlack`).
    public var recordedDuration: Double
    public var reproducedDuration: Double
}

/// Why a recorded call cannot be reproduced.
public struct ReproductionRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    /// The kind of reason.
    public enum Reason: String, Sendable, CaseIterable {
        /// The trace is not in the recording (or not a trace id).
        case unknownTrace
        /// The trace holds events but no call (attribution observed, a profile switch).
        case notACall
        /// The call has no end event.
        case unfinished
        /// Its start is missing, or events are unpaired or out of order.
        case incomplete
        /// A call a scenario does not play (getFlowConfiguration), or a request it cannot.
        case unsupportedCall
        /// Ended by an identify, a cancellation or a restart (3006, 9000).
        case interrupted
        /// `--session` for events without a session field.
        case noSession
        /// The recorded answers contradict each other for one scenario backend.
        case conflict
        /// Played in virtual time, the engine does not return what was recorded.
        case differs
    }

    public var reason: Reason
    /// One line naming the call and what is wrong.
    public var message: String

    public init(_ reason: Reason, _ message: String) { self.reason = reason; self.message = message }
    public var description: String { message }
}

/// A JSON value whose object keys keep their order, written as a readable scenario file.
indirect enum Ordered: Sendable {
    case string(String)
    case number(Double)
    case bool(Bool)
    case array([Ordered])
    case object([(String, Ordered)])

    /// Whole microseconds as seconds.
    static func seconds(_ us: Int64) -> Ordered { .number(Double(us) / 1_000_000) }
    /// Whole microseconds as seconds rounded to the millisecond.
    static func milliseconds(_ us: Int64) -> Ordered { .number((Double(us) / 1000).rounded() / 1000) }
    static func secondsText(_ us: Int64) -> String { JSONValue.number(Double(us) / 1_000_000).jsonText }

    /// The file: top-level keys and each list item on a line of their own.
    var text: String {
        guard case .object(let members) = self else { return compact + "\n" }
        var out = "{\n"
        for (i, (key, value)) in members.enumerated() {
            out += "  " + JSONValue.string(key).jsonText + ": "
            switch value {
            case .array(let items) where !items.isEmpty:
                out += "[\n" + items.map { "    " + $0.compact }.joined(separator: ",\n") + "\n  ]"
            case .object(let inner) where key == "backend" || key == "network":
                out += "{\n" + inner.map { k, v in
                    if case .array(let items) = v, !items.isEmpty {
                        return "    " + JSONValue.string(k).jsonText + ": [\n" + items.map { "      " + $0.compact }.joined(separator: ",\n") + "\n    ]"
                    }
                    if case .object(let ps) = v, !ps.isEmpty {
                        return "    " + JSONValue.string(k).jsonText + ": {\n"
                            + ps.map { "      " + JSONValue.string($0.0).jsonText + ": " + $0.1.compact }.joined(separator: ",\n") + "\n    }"
                    }
                    return "    " + JSONValue.string(k).jsonText + ": " + v.compact
                }.joined(separator: ",\n") + "\n  }"
            default:
                out += value.compact
            }
            out += i == members.count - 1 ? "\n" : ",\n"
        }
        return out + "}\n"
    }

    var compact: String {
        switch self {
        case .string(let s): return JSONValue.string(s).jsonText
        case .number(let n): return JSONValue.number(n).jsonText
        case .bool(let b): return b ? "true" : "false"
        case .array(let items): return "[" + items.map(\.compact).joined(separator: ", ") + "]"
        case .object(let members):
            return "{ " + members.map { JSONValue.string($0.0).jsonText + ": " + $0.1.compact }.joined(separator: ", ") + " }"
        }
    }
}
