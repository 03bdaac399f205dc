import FlowJSON

/// getFlowConfiguration as a pure state machine (docs/fetch-rules.md, getFlowConfiguration).
///
/// Lookup order: layout cache (id + version) -> the fallback file's layout -> network with deadline
/// start + A. Once the layout is known, images the assets resolver maps to bundled files are reported
/// (`asset.bundled`) and the others are prefetched in the background; the call never waits for them.
public struct LayoutMachine: FetchMachine {
    public let flow: Flow
    /// T in engine time, clamped, converted once from the caller's seconds.
    public let loadTimeout: EngineTime
    public let requestedLoadTimeout: Double?
    /// The app's assets resolver: whether a custom media id maps to a bundled file.
    public let isBundled: @Sendable (String) -> Bool
    public let fallbackLayout: Layout?
    public let profileId: String

    private enum Stage: Sendable { case idle, fetching, done }
    private var stage = Stage.idle
    private var startedAt = EngineTime.zero
    private static let request = 0, deadline = 1

    /// Validates and builds the machine; throws wrongParam (3001) for a bad loadTimeout or a flow with no layout.
    public init(flow: Flow, loadTimeout: Double, isBundled: @escaping @Sendable (String) -> Bool = { _ in false }, fallback: FallbackFile?,
                profileId: String) throws(FlowError) {
        guard let clamped = Budget.loadTimeout(loadTimeout) else {
            throw FlowError(.wrongParam, "loadTimeout must be a finite number >= 0, got \(loadTimeout)")
        }
        guard let ref = flow.layout else {
            throw FlowError(.wrongParam, "flow for \(flow.placementId) has no layout")
        }
        self.flow = flow
        self.loadTimeout = clamped
        self.requestedLoadTimeout = clamped != EngineTime(seconds: loadTimeout) ? loadTimeout : nil
        self.isBundled = isBundled
        self.fallbackLayout = fallback?.layouts[ref.id]
        self.profileId = profileId
    }

    private var ref: LayoutRef { flow.layout ?? LayoutRef(id: "", version: 0) }
    private var refAttrs: EventAttributes { ["layoutId": .string(ref.id), "version": .number(Double(ref.version))] }

    public mutating func start(now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {
        guard stage == .idle else { return }
        startedAt = now
        if let requested = requestedLoadTimeout {
            emit(.paramClamped, ["name": "loadTimeout", "from": .number(requested), "to": seconds(loadTimeout)], &actions)
        }
        emit(.fetchStart, ["call": "getFlowConfiguration", "policy": .null, "loadTimeout": seconds(loadTimeout)], &actions)
        if let layout = cache.readLayout(ref) {
            emit(.layoutCacheHit, refAttrs, &actions)
            return found(layout, source: .cache, now: now, &actions)
        }
        emit(.layoutCacheMiss, refAttrs, &actions)
        if let layout = fallbackLayout {
            return found(layout, source: .fallbackFile, now: now, &actions)
        }
        stage = .fetching
        let budget = Budget.stageA(loadTimeout)
        actions.append(.emit(.requestStart, placement: flow.placementId, span: Self.request + 1,
                             attrs: ["kind": "layout", "timeout": seconds(budget)]))
        actions.append(.send(tag: Self.request, RequestSpec(kind: .layout, placement: flow.placementId, layout: ref,
                                                             profileId: profileId, timeout: budget.seconds)))
        actions.append(.setTimer(tag: Self.deadline, at: now + budget))
    }

    public mutating func response(tag: Int, _ completion: RequestCompletion, now: EngineTime, cache: some CacheView,
                                  actions: inout [MachineAction]) {
        guard tag == Self.request, stage == .fetching else { return }
        actions.append(.clearTimer(tag: Self.deadline))
        var result = completion.result
        if case .success(let body) = result, case .layout(let layout) = body {
            requestEnd(.success(body), bytes: completion.bytes, now: now, &actions)
            actions.append(.storeLayout(layout))
            return found(layout, source: .network, now: now, &actions)
        }
        if case .success = result { result = .failure(.malformed(reason: "unexpected response body")) }
        requestEnd(result, bytes: completion.bytes, now: now, &actions)
        if case .failure(let f) = result { finish(.failed(f.flowError), now: now, &actions) }
    }

    public mutating func timer(tag: Int, now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {
        guard tag == Self.deadline, stage == .fetching else { return }
        actions.append(.cancel(tag: Self.request))
        requestEnd(.failure(.timeout), bytes: 0, now: now, &actions)
        emit(.timeout, ["stage": "layout", "budget": seconds(Budget.stageA(loadTimeout)), "elapsed": seconds(now - startedAt)], &actions)
        finish(.failed(RequestFailure.timeout.flowError), now: now, &actions)
    }

    public mutating func abort(_ error: FlowError, now: EngineTime, actions: inout [MachineAction]) {
        guard stage != .done else { return }
        if stage == .fetching {
            actions.append(.cancel(tag: Self.request))
            actions.append(.clearTimer(tag: Self.deadline))
            requestEnd(.failure(.cancelled), bytes: 0, now: now, &actions)
        }
        finish(.failed(error), now: now, &actions)
    }

    private mutating func found(_ layout: Layout, source: FlowSource, now: EngineTime, _ actions: inout [MachineAction]) {
        var downloads: [String] = []
        for image in layout.images {
            if let media = image.customMediaId, isBundled(media) {
                emit(.assetBundled, ["mediaId": .string(media)], &actions)
            } else {
                downloads.append(image.url)
            }
        }
        if !downloads.isEmpty { actions.append(.prefetchAssets(urls: downloads)) }
        finish(.configuration(FlowConfiguration(flow: flow, layout: layout, source: source)), now: now, &actions)
    }

    private func requestEnd(_ result: RequestResult, bytes: Int, now: EngineTime, _ actions: inout [MachineAction]) {
        var attrs: EventAttributes = ["kind": "layout", "duration": seconds(now - startedAt), "bytes": .number(Double(bytes))]
        switch result {
        case .success: attrs["outcome"] = "ok"; attrs["status"] = 200
        case .failure(let f):
            attrs["outcome"] = .string(f.outcome)
            if case .http(let s) = f { attrs["status"] = .number(Double(s)) }
        }
        actions.append(.emit(.requestEnd, placement: flow.placementId, span: Self.request + 1, attrs: attrs))
    }

    private mutating func finish(_ outcome: CallOutcome, now: EngineTime, _ actions: inout [MachineAction]) {
        stage = .done
        emit(.fetchEnd, fetchEndAttrs(call: .getFlowConfiguration, outcome, duration: now - startedAt), &actions)
        actions.append(.finish(outcome))
    }

    private func emit(_ name: EventName, _ attrs: EventAttributes, _ actions: inout [MachineAction]) {
        actions.append(.emit(name, placement: flow.placementId, span: 0, attrs: attrs))
    }
}

/// Background image prefetch after a layout is known. It reports by events only
/// (`assets.prefetch.start` / `assets.prefetch.end`); nothing waits for it and nothing fails with it.
public struct AssetPrefetchMachine: FetchMachine {
    public let placement: String
    public let urls: [String]
    public let requestTimeout: EngineTime
    public let profileId: String
    private var pending: Set<Int> = []
    private var bytes = 0
    private var failed = 0
    private var startedAt = EngineTime.zero
    private var done = false
    private var timerTag: Int { urls.count }

    public init(placement: String, urls: [String], requestTimeout: EngineTime, profileId: String) {
        self.placement = placement; self.urls = urls; self.requestTimeout = requestTimeout; self.profileId = profileId
    }

    public mutating func start(now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {
        startedAt = now
        emit(.assetsPrefetchStart, ["count": .number(Double(urls.count))], &actions)
        for (tag, url) in urls.enumerated() {
            pending.insert(tag)
            actions.append(.emit(.requestStart, placement: placement, span: tag + 1,
                                 attrs: ["kind": "asset", "timeout": seconds(requestTimeout)]))
            actions.append(.send(tag: tag, RequestSpec(kind: .asset, placement: placement, assetURL: url,
                                                       profileId: profileId, timeout: requestTimeout.seconds)))
        }
        actions.append(.setTimer(tag: timerTag, at: now + requestTimeout))
        if urls.isEmpty { end(now: now, &actions) }
    }

    public mutating func response(tag: Int, _ completion: RequestCompletion, now: EngineTime, cache: some CacheView,
                                  actions: inout [MachineAction]) {
        guard pending.remove(tag) != nil else { return }
        var attrs: EventAttributes = ["kind": "asset", "duration": seconds(now - startedAt),
                                          "bytes": .number(Double(completion.bytes))]
        switch completion.result {
        case .success(let body):
            attrs["outcome"] = "ok"
            // Sizes come from the driver (a scenario file, a stub): the total saturates, never traps.
            let n = if case .asset(let n) = body { n } else { completion.bytes }
            let (sum, overflow) = bytes.addingReportingOverflow(max(0, n))
            bytes = overflow ? .max : sum
        case .failure(let f):
            attrs["outcome"] = .string(f.outcome)
            failed += 1
        }
        actions.append(.emit(.requestEnd, placement: placement, span: tag + 1, attrs: attrs))
        if pending.isEmpty {
            actions.append(.clearTimer(tag: timerTag))
            end(now: now, &actions)
        }
    }

    public mutating func timer(tag: Int, now: EngineTime, cache: some CacheView, actions: inout [MachineAction]) {
        guard tag == timerTag, !done else { return }
        cutPending(.timeout, now: now, &actions)
        end(now: now, &actions)
    }

    public mutating func abort(_ error: FlowError, now: EngineTime, actions: inout [MachineAction]) {
        guard !done else { return }
        actions.append(.clearTimer(tag: timerTag))
        cutPending(.cancelled, now: now, &actions)
        end(now: now, &actions)
    }

    private mutating func cutPending(_ failure: RequestFailure, now: EngineTime, _ actions: inout [MachineAction]) {
        for tag in pending.sorted() {
            actions.append(.cancel(tag: tag))
            actions.append(.emit(.requestEnd, placement: placement, span: tag + 1,
                                 attrs: ["kind": "asset", "outcome": .string(failure.outcome), "duration": seconds(now - startedAt),
                                         "bytes": 0]))
            failed += 1
        }
        pending.removeAll()
    }

    private mutating func end(now: EngineTime, _ actions: inout [MachineAction]) {
        done = true
        emit(.assetsPrefetchEnd, ["count": .number(Double(urls.count)), "bytes": .number(Double(bytes)),
                                  "failed": .number(Double(failed)), "duration": seconds(now - startedAt)], &actions)
        actions.append(.finish(.done))
    }

    private func emit(_ name: EventName, _ attrs: EventAttributes, _ actions: inout [MachineAction]) {
        actions.append(.emit(name, placement: placement, span: 0, attrs: attrs))
    }
}
