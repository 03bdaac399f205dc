import FlowFetch
import FlowJSON
import Testing

/// The stage a `timeout` event names: which deadline cut the call (events-and-metrics.md).
public enum TimeoutStage: String, Sendable, Hashable, CaseIterable {
    /// The targeted-audience request's share of `loadTimeout`.
    case targeted
    /// The default-audience request's deadline.
    case `default`
    /// A preload's deadline for the whole batch.
    case batch
    /// The layout fetch's deadline.
    case layout
}

/// Where a call fell back to (the `to` of a `fallback` event).
public enum FallbackTarget: String, Sendable, Hashable, CaseIterable {
    /// A cached flow (any age).
    case cache
    /// The default audience's flow, with targeting lost.
    case defaultAudience
    /// The bundled fallback file.
    case fallbackFile
}

/// Expectations on what the engine did, checked against the current test's trace. A failing one
/// reports (Issue.record in Swift Testing, the recorder's `onFailure` elsewhere) with the timeline of
/// the call concerned, so the failure says what actually happened.
extension FlowTraceRecorder {
    /// Expects the last call that ended for `placement` to match every given value. Returns whether it did.
    @discardableResult
    public func expectFlow(_ placement: String, outcome: String? = nil, source: FlowSource? = nil, variation: String? = nil,
                           audience: String? = nil, targetingLost: Bool? = nil, errorCode: FlowError.Code? = nil,
                           requests: Int? = nil, sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        let timeline = self.timeline
        guard let call = timeline.lastCall(placement: placement) else {
            return fail("expectFlow \(placement): no call for this placement has ended", timeline, nil, sourceLocation)
        }
        var wrong: [String] = []
        func check<T: Equatable>(_ key: String, _ expected: T?, _ got: T?) {
            guard let expected, expected != got else { return }
            wrong.append("\(key): expected \(expected), got \(got.map { "\($0)" } ?? "nothing")")
        }
        check("outcome", outcome, call.outcome)
        check("source", source, call.source)
        check("variation", variation, call.variation)
        check("audience", audience, call.audience)
        check("targetingLost", targetingLost, call.targetingLost)
        check("errorCode", errorCode?.rawValue, call.errorCode)
        check("requests", requests, call.requests.filter { $0.kind != "asset" }.count)
        guard wrong.isEmpty else {
            return fail("expectFlow \(placement): " + wrong.joined(separator: "; "), timeline, call, sourceLocation)
        }
        return true
    }

    /// Expects a stage deadline to have cut a call for `placement` (a `timeout` event, of `stage`
    /// when given).
    ///
    /// ```swift
    /// expectTimeout("main_paywall", stage: .targeted)
    /// ```
    @discardableResult
    public func expectTimeout(_ placement: String, stage: TimeoutStage? = nil, sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        let timeline = self.timeline
        let hit = timeline.calls.contains { c in
            c.placement == placement
                && c.events.contains { $0.name == .timeout && (stage == nil || $0.attrs["stage"]?.stringValue == stage?.rawValue) }
        }
        return hit || fail("expectTimeout \(placement): no \(stage.map { "\($0.rawValue) " } ?? "")timeout happened",
                           timeline, timeline.lastCall(placement: placement), sourceLocation)
    }

    /// Expects a call for `placement` to have fallen back (to `to` when given).
    ///
    /// ```swift
    /// expectFallback("main_paywall", to: .defaultAudience)
    /// ```
    @discardableResult
    public func expectFallback(_ placement: String, to: FallbackTarget? = nil, sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        let timeline = self.timeline
        let hit = timeline.calls.contains { c in c.placement == placement && c.fallbacks.contains { to == nil || $0 == to?.rawValue } }
        return hit || fail("expectFallback \(placement): no fallback\(to.map { " to \($0.rawValue)" } ?? "") happened",
                           timeline, timeline.lastCall(placement: placement), sourceLocation)
    }

    /// Expects exactly `count` requests in the whole trace (of `kind`, for `placement`, when given).
    @discardableResult
    public func expectRequests(_ count: Int, placement: String? = nil, kind: RequestKind? = nil,
                               sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        let timeline = self.timeline
        let got = timeline.calls.flatMap(\.requests).filter { r in
            (placement == nil || r.placement == placement) && (kind == nil || r.kind == kind?.rawValue)
        }.count
        return got == count || fail("expectRequests: expected \(count) \(kind.map { "\($0.rawValue) " } ?? "")request\(count == 1 ? "" : "s")"
                                    + (placement.map { " for \($0)" } ?? "") + ", got \(got)", timeline, nil, sourceLocation)
    }

    private func fail(_ message: String, _ timeline: FlowTimeline, _ call: FlowTimeline.Call?, _ location: SourceLocation) -> Bool {
        let shown = call.map { c in FlowTimeline(calls: [c]) } ?? timeline
        if !frameworkReportsIssues { noteFailure(message) }
        onFailure(message + "\ntimeline (\(name)):\n" + shown.text(origin: call?.startedAt ?? timeline.calls.first?.startedAt)
                  + reproductionNote(), location)
        return false
    }
}


/// ``FlowTraceRecorder/expectFlow(_:outcome:source:variation:audience:targetingLost:errorCode:requests:sourceLocation:)``
/// on the current test's recorder.
@discardableResult
public func expectFlow(_ placement: String, outcome: String? = nil, source: FlowSource? = nil, variation: String? = nil,
                       audience: String? = nil, targetingLost: Bool? = nil, errorCode: FlowError.Code? = nil,
                       requests: Int? = nil, sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
    guard let r = currentRecorder(sourceLocation) else { return false }
    return r.expectFlow(placement, outcome: outcome, source: source, variation: variation, audience: audience,
                        targetingLost: targetingLost, errorCode: errorCode, requests: requests, sourceLocation: sourceLocation)
}

/// ``FlowTraceRecorder/expectTimeout(_:stage:sourceLocation:)`` on the current test's recorder.
@discardableResult
public func expectTimeout(_ placement: String, stage: TimeoutStage? = nil, sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
    currentRecorder(sourceLocation)?.expectTimeout(placement, stage: stage, sourceLocation: sourceLocation) ?? false
}

/// ``FlowTraceRecorder/expectFallback(_:to:sourceLocation:)`` on the current test's recorder.
@discardableResult
public func expectFallback(_ placement: String, to: FallbackTarget? = nil, sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
    currentRecorder(sourceLocation)?.expectFallback(placement, to: to, sourceLocation: sourceLocation) ?? false
}

/// ``FlowTraceRecorder/expectRequests(_:placement:kind:sourceLocation:)`` on the current test's recorder.
@discardableResult
public func expectRequests(_ count: Int, placement: String? = nil, kind: RequestKind? = nil,
                           sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
    currentRecorder(sourceLocation)?.expectRequests(count, placement: placement, kind: kind, sourceLocation: sourceLocation) ?? false
}

private func currentRecorder(_ location: SourceLocation) -> FlowTraceRecorder? {
    if let r = FlowTrace.current { return r }
    FlowTraceRecorder.defaultFailure("no flow trace in this test: add the .flowTrace trait or wrap the test in withFlowTrace { }", location)
    return nil
}
