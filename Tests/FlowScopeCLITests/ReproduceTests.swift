import FlowEvents
import FlowFetch
import FlowJSON
import FlowScopeStubBackend
import FlowSim
import Foundation
import SQLiteSink
import Synchronization
import TestSupport
import Testing
@testable import FlowScopeCLI

/// Collects the engine events of a scenario run.
private final class Collected: EngineEventSink {
    let events = Mutex<[EngineEvent]>([])
    func receive(_ event: EngineEvent) { events.withLock { $0.append(event) } }
}

/// A recorded run in virtual time: `sessions` app sessions, each a random scenario (network with
/// hangs, resets, 5xx, 404s and malformed bodies; attribution or none; a cache from earlier sessions;
/// a fallback file or none) whose 7 to 11 calls (every call kind, overlapping ones too) are played by
/// the real engine. Returns the envelopes (seq order, run `recorded`), as a sink would store them.
func recordedRun(sessions: Int, seed: UInt64) -> [Envelope] {
    var rng = SplitMix(seed)
    let placements = ["main_paywall", "onboarding", "settings"]
    var backend: [String: PlacementBackend] = [:]
    for p in placements {
        backend[p] = PlacementBackend(audiences: [
            AudienceDefinition(name: "ASA", versionId: "av-asa-\(p)", requiresAttribution: "appleAds",
                               variations: [Variation(id: "\(p)-asa-A", weight: 50), Variation(id: "\(p)-asa-B", weight: 50)]),
            AudienceDefinition(name: defaultAudienceName, versionId: "av-all-\(p)",
                               variations: [Variation(id: "\(p)-all-A", weight: 30), Variation(id: "\(p)-all-B", weight: 70)]),
        ], layout: LayoutDefinition(id: "layout-\(p)", version: 2, images: 3, customMedia: ["logo"]))
    }
    var envelopes: [Envelope] = []
    var seq: UInt64 = 0
    for s in 0..<sessions {
        var rules: [NetworkRule] = []
        let base = 0.05 + 1.2 * rng.uniform()
        for nth in 1...40 {
            let u = rng.uniform()
            let latency = (base * (0.3 + 2.5 * rng.uniform()) * 1e6).rounded() / 1e6
            if u < 0.10 { rules.append(NetworkRule(nth: nth, fail: .hang)) }
            else if u < 0.17 { rules.append(NetworkRule(nth: nth, latency: latency, fail: .reset)) }
            else if u < 0.23 { rules.append(NetworkRule(nth: nth, latency: latency, fail: .http(503))) }
            else if u < 0.25 { rules.append(NetworkRule(nth: nth, latency: latency, fail: .http(404))) }
            else if u < 0.27 { rules.append(NetworkRule(nth: nth, latency: latency, fail: .malformed)) }
            else if u < 0.33 { rules.append(NetworkRule(nth: nth, latency: latency + 3 + 4 * rng.uniform())) }  // slow: past most budgets
            else { rules.append(NetworkRule(nth: nth, latency: latency)) }
        }
        var cache: [CacheSeed] = []
        for p in placements where rng.uniform() < 0.35 {
            let fromDefault = rng.uniform() < 0.4
            cache.append(CacheSeed(placement: p, variation: fromDefault ? "\(p)-all-B" : "\(p)-asa-A",
                                   audience: fromDefault ? defaultAudienceName : "ASA", age: (2000 * rng.uniform() * 1e3).rounded() / 1e3,
                                   fromDefaultAudience: fromDefault))
        }
        var fallback: [String: FallbackSeed] = [:]
        if rng.uniform() < 0.5 { for p in placements where rng.uniform() < 0.7 { fallback[p] = FallbackSeed(variation: "\(p)-fallback") } }
        let attribution: [String: Double] = rng.uniform() < 0.5 ? ["appleAds": (0.2 + 4 * rng.uniform() * 1e3).rounded() / 1e3] : [:]
        var steps: [Step] = []
        var at = 0.0
        for _ in 0..<(7 + Int(rng.uniform() * 5)) {
            let p = placements[Int(rng.uniform() * 3)]
            let policies: [FetchPolicy?] = [nil, .returnCacheDataElseLoad, .returnCacheDataIfNotExpiredElseLoad(maxAge: 600)]
            let policy = policies[Int(rng.uniform() * 3)]
            let loadTimeout = [0.5, 1, 2, 3, 4, 5][Int(rng.uniform() * 6)]
            let call: Step.Call
            switch rng.uniform() {
            case ..<0.35: call = .getFlow(placement: p, policy: policy, loadTimeout: loadTimeout)
            case ..<0.5: call = .getFlowForDefaultAudience(placement: p, policy: policy)
            case ..<0.62: call = .preloadFlows(placements: Array(placements.prefix(2 + Int(rng.uniform() * 2))), loadTimeout: loadTimeout)
            case ..<0.68: call = .preloadFlowsForDefaultAudience(placements: [p, placements[(placements.firstIndex(of: p)! + 1) % 3]])
            case ..<0.78: call = .getFlowConfiguration(placement: p, loadTimeout: loadTimeout, bundled: rng.uniform() < 0.5 ? ["logo"] : [])
            default: call = .getFlowOrDefault(placement: p, timeout: [0.5, 1, 2, 3][Int(rng.uniform() * 4)])
            }
            steps.append(Step(at: at, call: call))
            at += (rng.uniform() < 0.3 ? 0 : (6 * rng.uniform() * 1e3).rounded() / 1e3)
        }
        let scenario = Scenario(name: "session \(s)", profile: ScenarioProfile(id: "user-\(s % 50)", attribution: attribution),
                                backend: backend, network: NetworkRules(latency: 0.2, rules: rules), cache: cache, fallbackFile: fallback,
                                requestTimeout: [4, 10, 30][Int(rng.uniform() * 3)], steps: steps)
        let collected = Collected()
        _ = ScenarioRunner(scenario, forward: collected, seed: seed &+ UInt64(s) &* 7919).run()
        let start = 1_796_000_000.0 + Double(s) * 60
        for e in collected.events.withLock({ $0 }) {
            seq += 1
            envelopes.append(Envelope(e, seq: seq, ts: start + e.t, run: "recorded"))
        }
    }
    return envelopes
}

/// splitmix64, for the recorded run's choices.
struct SplitMix {
    var state: UInt64
    init(_ seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func uniform() -> Double { Double(next() >> 11) * 0x1p-53 }
}

/// What reproducing every finished call of a recording gave.
struct ReproductionTally {
    var reproduced = 0
    var refused: [ReproductionRefusal.Reason: Int] = [:]
    var refusalExamples: [ReproductionRefusal.Reason: String] = [:]
    var mismatches: [String] = []
    var sources: [String: Int] = [:]
    var calls: [String: Int] = [:]
    var timeouts = 0, fallbacks = 0, preloadErrors = 0, targetingLost = 0
    var scenarios: [(call: Call, reproduced: ReproducedCall)] = []
}

/// Reproduces every finished call of `recording` and plays each scenario again (decoded from its
/// text, as `flowscope run` reads it), comparing the result with the recording itself.
func reproduceAll(_ recording: Recording, session: Bool = false, every stride: Int = 1, keep: Bool = false) -> ReproductionTally {
    var tally = ReproductionTally()
    for (i, trace) in recording.finishedCalls.enumerated() where i % stride == 0 {
        guard let call = recording.call(trace) else { continue }
        switch recording.scenario(trace: trace, session: session) {
        case .failure(let refusal):
            tally.refused[refusal.reason, default: 0] += 1
            tally.refusalExamples[refusal.reason] = refusal.message
        case .success(let r):
            tally.reproduced += 1
            if keep { tally.scenarios.append((call, r)) }
            tally.calls[call.name ?? "?", default: 0] += 1
            tally.sources[call.isError ? "error" : (call.source ?? "preload"), default: 0] += 1
            if !call.timeouts.isEmpty { tally.timeouts += 1 }
            if !call.fallbacks.isEmpty { tally.fallbacks += 1 }
            if !call.failed.isEmpty { tally.preloadErrors += 1 }
            if call.targetingLost { tally.targetingLost += 1 }
            let problems = compare(call, with: r)
            if !problems.isEmpty { tally.mismatches.append("\(trace): \(problems.joined(separator: "; "))") }
        }
    }
    return tally
}

/// How the scenario's run differs from the recorded call: same source, variation, audience,
/// targeting lost, error, preload errors and request count; duration within 1 ms.
func compare(_ call: Call, with r: ReproducedCall, durationTolerance: Double = 0.0011) -> [String] {
    guard let scenario = try? Scenario.decode(r.text) else { return ["the scenario text does not decode"] }
    let report = ScenarioRunner(scenario).run()
    var problems: [String] = []
    if !report.succeeded { problems.append("expectations fail: \(report.failures.map { "\($0.key) \($0.actual.jsonText)" })") }
    let result = report.json["results"]?.arrayValue?[r.step] ?? .null
    func check(_ key: String, _ expected: JSONValue, _ actual: JSONValue?) {
        if expected != (actual ?? .null) { problems.append("\(key): recorded \(expected.jsonText), reproduced \((actual ?? .null).jsonText)") }
    }
    check("outcome", .string(call.isError ? "error" : "success"), result["outcome"])
    if call.kind == .fetch, !call.isError {
        check("source", call.source.map(JSONValue.string) ?? .null, result["source"])
        check("variation", call.variation.map(JSONValue.string) ?? .null, result["variation"])
        check("audience", call.audience.map(JSONValue.string) ?? .null, result["audience"])
        check("targetingLost", .bool(call.targetingLost), result["targetingLost"])
    }
    check("error", call.errorCode ?? (call.failed.isEmpty ? .null : .number(2005)), result["error"]?["code"])
    var preload: [String: JSONValue] = [:]
    for (k, v) in result["error"]?["preloadErrors"]?.objectValue ?? [:] { preload[k] = v["code"] ?? .null }
    check("preloadErrors", .object(call.failed), .object(preload))
    check("requests", .number(Double(call.requests.filter { $0.kind != "asset" }.count)), result["requests"])
    let started = result["startedAt"]?.numberValue ?? 0, completed = result["completedAt"]?.numberValue ?? -1
    if let d = call.duration, abs((completed - started) - d) > durationTolerance {
        problems.append("duration: recorded \(d), reproduced \(completed - started)")
    }
    return problems
}

@Suite("flowscope reproduce", .serialized, .heavy)
struct ReproduceTests {
    static let recorded = recordedRun(sessions: 260, seed: 34)

    @Test("every finished call of a recorded run of over 2,000 calls, read from a JSON Lines file and from an sqlite file, gives a scenario that flowscope run passes with the recorded result")
    func everyRecordedCallIsReproducedFromJSONLinesAndSQLite() async throws {
        let dir = makeTemporaryDirectory("reproduce")
        defer { removeDirectory(dir) }
        try write(Self.recorded.map(\.jsonLine).joined(separator: "\n") + "\n", to: dir + "/trace.jsonl")
        let sink = try SQLiteSink(path: dir + "/events.db")
        for chunk in stride(from: 0, to: Self.recorded.count, by: 5000) {
            sink.consume(Array(Self.recorded[chunk..<min(chunk + 5000, Self.recorded.count)]))
        }
        sink.close()

        // The same reader `flowscope reproduce` uses; both files give back every event as recorded.
        var read: [[Envelope]] = []
        for source in [dir + "/trace.jsonl", dir + "/events.db"] {
            guard case .success(let parsed) = TrafficSource.parse(source, label: "SOURCE"),
                  case .success(let envelopes) = await parsed.read(caFile: nil, token: nil, label: "SOURCE", defaultRun: nil) else {
                Issue.record("\(source) not read"); return
            }
            #expect(envelopes.map(\.jsonLine) == Self.recorded.map(\.jsonLine), "\(source)")
            read.append(envelopes)
        }
        // Every call from the JSON Lines file; every 8th from the sqlite file (the same events, checked above).
        for (envelopes, stride) in zip(read, [1, 8]) {
            let recording = Recording(envelopes)
            #expect(recording.finishedCalls.count >= 2_000, "\(recording.finishedCalls.count) calls")
            let tally = reproduceAll(recording, every: stride)
            print("reproduce \(stride == 1 ? "jsonl" : "sqlite"): \(recording.finishedCalls.count) finished calls, every \(stride): "
                  + "\(tally.reproduced) reproduced, refused \(tally.refused.map { "\($0.key.rawValue): \($0.value)" }.sorted()); "
                  + "calls \(tally.calls.sorted { $0.key < $1.key }); sources \(tally.sources.sorted { $0.key < $1.key }); "
                  + "timeouts \(tally.timeouts), fallbacks \(tally.fallbacks), preload errors \(tally.preloadErrors), "
                  + "targeting lost \(tally.targetingLost)")
            #expect(tally.mismatches.isEmpty, "\(tally.mismatches.prefix(5))")
            // The recording holds no identify, cancel or restart: the only refusals are layout fetches served from the
            // layout cache (a scenario starts with an empty one), and they are the minority of layout fetches.
            #expect(Set(tally.refused.keys).isSubset(of: [.unsupportedCall]), "\(tally.refusalExamples)")
            #expect(tally.refusalExamples[.unsupportedCall].map { $0.contains("layout cache") } ?? true)
            let refused = tally.refused.values.reduce(0, +)
            #expect(tally.reproduced + refused == (recording.finishedCalls.count + stride - 1) / stride)
            #expect(refused * 2 < (tally.calls["getFlowConfiguration"] ?? 0), "\(refused) layout fetches refused")
            guard stride == 1 else { continue }
            // Every source, timeouts, fallbacks, preload errors, targeting lost, getFlowOrDefault both ways.
            for s in ["network", "cache", "defaultAudience", "fallbackFile", "error", "preload"] { #expect((tally.sources[s] ?? 0) >= 20, "\(s)") }
            for c in Recording.supportedCalls { #expect((tally.calls[c] ?? 0) >= 50, "\(c)") }
            #expect(tally.timeouts >= 100 && tally.fallbacks >= 100 && tally.preloadErrors >= 20 && tally.targetingLost >= 100)
            let orDefault = recording.finishedCalls.compactMap(recording.call).filter { $0.name == "getFlowOrDefault" }
            #expect(orDefault.filter { $0.attribution != "timeout" && $0.source == "network" }.count >= 20, "attribution path won")
            #expect(orDefault.filter { $0.attribution == "timeout" && $0.source == "defaultAudience" }.count >= 20, "timer won")
        }
    }

    @Test("with --session, the calls of the same session that overlapped the call are played with it, and the scenario passes")
    func sessionScenariosPass() {
        let recording = Recording(Self.recorded)
        let tally = reproduceAll(recording, session: true, every: 8, keep: true)
        print("reproduce --session: \(tally.reproduced) reproduced, refused \(tally.refused.map { "\($0.key.rawValue): \($0.value)" }.sorted())")
        #expect(tally.mismatches.isEmpty, "\(tally.mismatches.prefix(5))")
        #expect(tally.reproduced >= 250, "\(tally.refusalExamples)")
        // Refusals are named: only layout fetches (reproduced alone) and recorded answers one scenario backend cannot give.
        #expect(Set(tally.refused.keys).isSubset(of: [.unsupportedCall, .conflict]), "\(tally.refusalExamples)")
        #expect((tally.refused[.conflict] ?? 0) * 20 <= tally.reproduced, "\(tally.refusalExamples)")
        #expect(tally.scenarios.contains { $0.reproduced.calls.count >= 3 }, "no scenario played overlapping calls")
    }

    @Test("a changed expectation or a stage-A budget moved by 0.25 s makes reproduced scenarios fail: the expectations are real")
    func mutatedScenariosFail() throws {
        let recording = Recording(Self.recorded)
        let tally = reproduceAll(recording, every: 5, keep: true)
        var variationChanged = 0, variationFailed = 0, budgetMoved = 0, budgetFailed = 0
        for (call, r) in tally.scenarios {
            if call.kind == .fetch, !call.isError, let e = r.scenario.expect.firstIndex(where: { $0.step == r.step }) {
                var s = r.scenario
                s.expect[e].variation = (call.variation ?? "") + "-other"
                variationChanged += 1
                if !ScenarioRunner(s).run().succeeded { variationFailed += 1 }
            }
            // A getFlow that a stage-A deadline cut (its targeted request hung or was too slow).
            if call.name == "getFlow", call.timeouts.contains(where: { $0.stage == "targeted" }),
               case .getFlow(let p, let policy, let t?) = r.scenario.steps[r.step].call {
                var s = r.scenario
                s.steps[r.step].call = .getFlow(placement: p, policy: policy, loadTimeout: t + 0.25)
                budgetMoved += 1
                if !ScenarioRunner(s).run().succeeded { budgetFailed += 1 }
            }
        }
        print("mutations: variation changed \(variationChanged), failed \(variationFailed); stage A moved \(budgetMoved), failed \(budgetFailed)")
        #expect(variationChanged >= 150 && variationFailed == variationChanged)
        #expect(budgetMoved >= 20 && budgetFailed == budgetMoved)
    }

    @Test("a call that ended a few milliseconds after its deadline (a real-time timer firing late) is reproduced with the engine's time and a note; 80 ms late is refused")
    func lateTimersAreReproducedUpToTheSlack() throws {
        let recording = Recording(Self.recorded)
        // A getFlowOrDefault whose timer won with the default result already there: it ends exactly at its timeout.
        let call = try #require(recording.finishedCalls.compactMap(recording.call).first { c in
            c.name == "getFlowOrDefault" && c.attribution == "timeout" && c.source == "defaultAudience" && c.requests.count == 1
                && c.requests[0].endedAt.map { $0 < c.endedAt ?? 0 } == true
        })
        let duration = try #require(call.duration)
        for (late, accepted) in [(0.003, true), (0.08, false)] {
            let shifted = Self.recorded.map { e -> Envelope in
                guard e.trace.hex == call.trace, e.name == .fetchEnd else { return e }
                var e = e
                e.t += late
                e.attrs["duration"] = .number(duration + late)
                return e
            }
            let result = Recording(shifted).scenario(trace: call.trace, session: false)
            switch result {
            case .success(let r):
                #expect(accepted, "\(late) s late was reproduced")
                #expect(r.text.contains("completed at \(JSONValue.number(((duration + late) * 1000).rounded() / 1000).jsonText) s in the recording "
                                        + "and at \(JSONValue.number(duration).jsonText) s in virtual time"), "\(r.text)")
                #expect(abs(r.reproducedDuration - duration) < 1e-6 && abs(r.recordedDuration - duration - late) < 1e-6)
                #expect(ScenarioRunner(r.scenario).run().succeeded)
            case .failure(let refusal):
                #expect(!accepted, "\(refusal.message)")
                #expect(refusal.reason == .differs && refusal.message.contains("completedAt"), "\(refusal.message)")
            }
        }
    }

    @Test("flowscope reproduce writes a file flowscope run passes, prints it without --out, and flowscope run fails once an expectation is changed")
    func commandLineRoundTrip() async throws {
        let dir = makeTemporaryDirectory("reproduce-cli")
        defer { removeDirectory(dir) }
        let sample = Array(Self.recorded.prefix(400))
        try write(sample.map(\.jsonLine).joined(separator: "\n") + "\n", to: dir + "/trace.jsonl")
        let recording = Recording(sample)
        let fallbackCall = try #require(recording.finishedCalls.first { recording.call($0)?.source == "fallbackFile" }
            ?? recording.finishedCalls.first)
        let made = await flowscope("reproduce", dir + "/trace.jsonl", "--call", fallbackCall, "--out", dir + "/s.json")
        #expect(made.status == 0, "\(made.err)")
        #expect(made.err.contains("flowscope run \(dir)/s.json"))
        let run = await flowscope("run", dir + "/s.json", "--json")
        #expect(run.status == 0, "\(run.out)")
        let printed = await flowscope("reproduce", dir + "/trace.jsonl", "--call", fallbackCall.uppercased())
        #expect(printed.status == 0)
        let written = try String(contentsOfFile: dir + "/s.json", encoding: .utf8)
        #expect(printed.out == written)
        let changed = printed.out.replacingOccurrences(of: #""requests": "#, with: #""requests": 1"#)
        try write(changed, to: dir + "/changed.json")
        let failing = await flowscope("run", dir + "/changed.json")
        #expect(failing.status == 1, "\(failing.out)")
        #expect(failing.out.contains("FAIL"))
        let session = await flowscope("reproduce", dir + "/trace.jsonl", "--call", fallbackCall, "--session")
        #expect(session.status == 0, "\(session.err)")
    }

    @Test("bad input exits 2 naming what is wrong: an unknown trace, a trace that is not a call, a truncated file, a missing --call or file, --token for a file")
    func badInputExitsTwo() async throws {
        let dir = makeTemporaryDirectory("reproduce-bad")
        defer { removeDirectory(dir) }
        let sample = Array(Self.recorded.prefix(400))
        let lines = sample.map(\.jsonLine)
        try write(lines.joined(separator: "\n") + "\n", to: dir + "/trace.jsonl")
        let unknown = await flowscope("reproduce", dir + "/trace.jsonl", "--call", String(repeating: "ab", count: 16))
        #expect(unknown.status == 2)
        #expect(unknown.err.contains("no event of trace abababababababababababababababab in the recording (400 events"), "\(unknown.err)")
        let notHex = await flowscope("reproduce", dir + "/trace.jsonl", "--call", "main_paywall")
        #expect(notHex.status == 2 && notHex.err.contains("is not a trace id (expected 32 hex characters"), "\(notHex.err)")
        // Attribution observed outside any call: a trace of its own that is not a call.
        let activity = try #require(sample.first { $0.name == .attributionApplied }).trace.hex
        let notCall = await flowscope("reproduce", dir + "/trace.jsonl", "--call", activity)
        #expect(notCall.status == 2 && notCall.err.contains("trace \(activity) is not a call: its 1 event(s) (attribution.applied)"), "\(notCall.err)")
        // Truncated in the middle of a line, and cut before a call's end.
        let cut = lines.joined(separator: "\n")
        try write(String(cut.prefix(cut.utf8.count / 2)), to: dir + "/truncated.jsonl")
        let truncated = await flowscope("reproduce", dir + "/truncated.jsonl", "--call", activity)
        #expect(truncated.status == 2 && truncated.err.contains("truncated.jsonl: line "), "\(truncated.err)")
        let recording = Recording(sample)
        let trace = try #require(recording.finishedCalls.first)
        let call = try #require(recording.call(trace))
        let endSeq = try #require(call.endSeq)
        try write(sample.filter { $0.seq < endSeq }.map(\.jsonLine).joined(separator: "\n") + "\n", to: dir + "/cut.jsonl")
        let unfinished = await flowscope("reproduce", dir + "/cut.jsonl", "--call", trace)
        #expect(unfinished.status == 2 && unfinished.err.contains("has no end event: it was still running when the recording ended"), "\(unfinished.err)")
        let missing = await flowscope("reproduce", dir + "/trace.jsonl")
        #expect(missing.status == 2 && missing.err.contains("--call TRACE is required"), "\(missing.err)")
        let noFile = await flowscope("reproduce", dir + "/none.jsonl", "--call", trace)
        #expect(noFile.status == 2 && noFile.err.contains("SOURCE \(dir)/none.jsonl: not found"), "\(noFile.err)")
        let token = await flowscope("reproduce", dir + "/trace.jsonl", "--call", trace, "--token", "x")
        #expect(token.status == 2 && token.err.contains("--token applies to SOURCE https://"), "\(token.err)")
    }

    @Test("absurd recorded values (times of 1e300 s, negative or huge ages and budgets) are refused with a reason, never a crash")
    func absurdValuesAreRefused() throws {
        let sample = Array(Self.recorded.prefix(3000))
        let recording = Recording(sample)
        let calls = recording.finishedCalls.prefix(45).compactMap(recording.call)
        var refused = 0, reproduced = 0
        for (i, call) in calls.enumerated() {
            let value: Double = [1e300, -1e300, 1e15, -7, 9.3e12][i % 5]
            let broken = sample.map { e -> Envelope in
                guard e.trace.hex == call.trace else { return e }
                var e = e
                switch i % 3 {
                case 0: if e.name == .fetchEnd || e.name == .preloadEnd { e.t = value }
                case 1: for key in ["age", "duration", "timeout", "loadTimeout"] where e.attrs[key] != nil { e.attrs[key] = .number(value) }
                default: if e.name == .requestEnd { e.t = value }
                }
                return e
            }
            switch Recording(broken).scenario(trace: call.trace, session: i % 2 == 0) {
            case .success: reproduced += 1
            case .failure(let refusal):
                refused += 1
                #expect(!refusal.message.isEmpty)
            }
        }
        print("absurd values: \(refused) refused, \(reproduced) reproduced (a value the call did not depend on)")
        #expect(refused >= 30)
    }

    @Test("a server that refuses the token makes reproduce exit 2 naming the URL and the server's answer; the right token reads its events")
    func wrongTokenExitsTwo() async throws {
        let sample = Array(Self.recorded.prefix(300))
        // Answers /api/events like a server that asks every reader for its token: every event after `since`.
        let server = try LoopbackServer { request in
            guard request.headers["authorization"] == "Bearer right" else {
                return .respond(status: 401, body: Array(#"{"error":{"message":"missing or invalid bearer token","status":401}}"#.utf8))
            }
            let since = URLComponents(string: request.target)?.queryItems?.first { $0.name == "since" }?.value.flatMap { UInt64($0) } ?? 0
            let page = Envelope.pageJSON(sample.filter { $0.seq > since }, latestSeq: sample.last?.seq)
            return .respond(status: 200, body: Array(page.utf8))
        }
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.port)/api/events"
        let trace = try #require(Recording(sample).finishedCalls.first)
        let wrong = await flowscope("reproduce", url, "--call", trace, "--token", "wrong")
        #expect(wrong.status == 2)
        #expect(wrong.err.contains("SOURCE \(url)?since=0&limit=1000: HTTP 401: {\"error\":{\"message\":\"missing or invalid bearer token\""), "\(wrong.err)")
        let right = await flowscope("reproduce", url, "--call", trace, "--token", "right")
        #expect(right.status == 0, "\(right.err)")
        #expect(right.out == (try Recording(sample).scenario(trace: trace, session: false).get().text))
    }

    @Test("a server answers GET /api/calls/{trace}/scenario with the same file, 404 for an unknown trace and 422 with the reason for a call it cannot reproduce; reproduce reads its /api/events over HTTPS")
    func serverEndpointAndEventsOverHTTPS() async throws {
        let stack = try StackFixture(sinks: #"{ type: "memory", capacity: 20000 }"#)
        defer { stack.stop() }
        let sample = Array(Self.recorded.prefix(1500))
        let reply = try stack.ingest(sample.map(\.jsonLine).joined(separator: "\n") + "\n")
        #expect(reply.status == 202, "\(reply.text)")
        let recording = Recording(sample)
        let traces = Array(recording.finishedCalls.prefix(12))
        #expect(traces.count == 12)
        for trace in traces {
            let expected = try #require(try? recording.scenario(trace: trace, session: false).get())
            let answer = try stack.get("/api/calls/\(trace)/scenario")
            #expect(answer.status == 200, "\(answer.text)")
            #expect(answer.text == expected.text)
        }
        let withSession = try stack.get("/api/calls/\(traces[0])/scenario?session=1")
        let sessionText = try recording.scenario(trace: traces[0], session: true).get().text
        #expect(withSession.status == 200 && withSession.text == sessionText)
        let unknown = try stack.get("/api/calls/\(String(repeating: "0f", count: 16))/scenario")
        #expect(unknown.status == 404)
        let unknownMessage = try JSON5.parse(unknown.text)["error"]?["message"]?.stringValue ?? ""
        #expect(unknownMessage.contains("no event of trace"), "\(unknown.text)")
        let activity = try #require(sample.first { $0.name == .attributionApplied }).trace.hex
        let notCall = try stack.get("/api/calls/\(activity)/scenario")
        #expect(notCall.status == 422)
        let reason = try JSON5.parse(notCall.text)["error"]?["reason"]?.stringValue
        #expect(reason == "notACall", "\(notCall.text)")

        let dir = makeTemporaryDirectory("reproduce-https")
        defer { removeDirectory(dir) }
        let url = "https://127.0.0.1:\(stack.port)/api/events"
        let viaServer = await flowscope("reproduce", url, "--ca", stack.dir + "/state/tls/cert.pem", "--call", traces[1], "--out", dir + "/s.json")
        #expect(viaServer.status == 0, "\(viaServer.err)")
        let fromServer = try? String(contentsOfFile: dir + "/s.json", encoding: .utf8)
        let fromRecording = try recording.scenario(trace: traces[1], session: false).get().text
        #expect(fromServer == fromRecording)
        let run = await flowscope("run", dir + "/s.json")
        #expect(run.status == 0, "\(run.out)")
    }
}

/// Real time on real sockets: `.realTime` runs it with no other traited test beside it and the pool quiet, so timers fire on time.
@Suite("flowscope reproduce of real-time calls", .realTime)
struct ReproduceRealTimeTests {
    @Test("calls of a real FlowClient against the stub backend on real sockets, with hangs, 503s, resets and malformed bodies, are reproduced: same result, duration within the timer slack")
    func realSocketCallsAreReproduced() async throws {
        var rules: [String] = []
        let fates = ["", "hang", "http:503", "", "reset", "malformed", "", "hang", "http:404", "", "http:503", "", "", "reset", ""]
        for (i, fate) in fates.enumerated() {
            rules.append(#"{ "match": { "nth": \#(i + 1) }, "latency": \#(0.02 + 0.01 * Double(i % 4))\#(fate.isEmpty ? "" : #", "fail": "\#(fate)""#) }"#)
        }
        let scenario = try Scenario.decode("""
        { "name": "faults", "profile": { "id": "user-42" },
          "backend": { "placements": {
            "main": { "audiences": [ { "name": "All Users", "versionId": "av-all", "variations": [ { "id": "all-A", "weight": 100 } ] } ] },
            "second": { "audiences": [ { "name": "All Users", "versionId": "av-2", "variations": [ { "id": "two-A", "weight": 100 } ] } ] } } },
          "network": { "latency": 0.03, "rules": [ \(rules.joined(separator: ", ")) ] }, "steps": [] }
        """)
        let stub = try StubBackendServer(scenario: scenario)
        defer { stub.stop() }
        let collected = Collected()
        let fallback = FallbackFile(placements: ["main": AudiencePayload(placementId: "main", audienceName: "All Users", audienceVersionId: "fallback",
                                                                       variations: [Variation(id: "fb-A", weight: 100)])])
        let client = FlowClient(profile: Profile(id: "user-42"), backend: try HTTPBackend(baseURL: URL(string: stub.baseURL)!),
                                configuration: .init(requestTimeout: 2, fallback: fallback), events: collected)
        for i in 0..<5 {
            _ = try? await client.getFlow(placementId: i % 2 == 0 ? "main" : "second", loadTimeout: 1)
            try? await client.preloadFlows(placementIds: ["main", "second"], loadTimeout: 1)
            _ = try? await client.getFlowForDefaultAudience(placementId: "second")
            _ = try? await client.getFlowOrDefault(placementId: "main", timeout: 0.2)
            _ = try? await client.getFlow(placementId: "main", fetchPolicy: .returnCacheDataElseLoad, loadTimeout: 1)
        }
        var seq: UInt64 = 0
        let envelopes = collected.events.withLock { $0 }.map { e -> Envelope in
            seq += 1
            return Envelope(e, seq: seq, ts: 1_796_000_000 + Double(seq) * 0.001, run: "real-sockets")
        }
        let recording = Recording(envelopes)
        #expect(recording.finishedCalls.count == 25)
        var reproduced = 0, exact = 0, refusedLate = 0
        var outcomes: Set<String> = []
        for trace in recording.finishedCalls {
            let call = try #require(recording.call(trace))
            for r in call.requests { outcomes.insert(r.outcome ?? "open") }
            switch recording.scenario(trace: trace, session: false) {
            case .failure(let refusal):
                // On a loaded machine a deadline's timer may fire more than the slack late, or a response be handled
                // after its deadline passed: refused as a difference from virtual time, never for another reason.
                refusedLate += 1
                #expect(refusal.reason == .differs, "\(refusal.message)")
            case .success(let r):
                reproduced += 1
                let problems = compare(call, with: r, durationTolerance: Recording.timerSlack + 0.001)
                #expect(problems.isEmpty, "\(trace): \(problems)")
                if abs(r.recordedDuration - r.reproducedDuration) <= 0.001 { exact += 1 }
            }
        }
        print("reproduce real sockets: \(recording.finishedCalls.count) calls, \(reproduced) reproduced, \(exact) within 1 ms; request outcomes \(outcomes.sorted())")
        #expect(reproduced + refusedLate == 25 && refusedLate <= 5, "\(refusedLate) refused")
        // Which fault each request meets depends on how many requests came before it, and so (on a loaded machine) on timing.
        #expect(outcomes.isSuperset(of: ["ok", "timeout"]) && outcomes.intersection(["http:503", "http:404", "reset", "malformed"]).count >= 2,
                "\(outcomes)")
    }
}
