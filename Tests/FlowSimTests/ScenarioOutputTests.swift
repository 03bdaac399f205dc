import Foundation
import Testing
@testable import FlowFetch
@testable import FlowSim
import FlowJSON

@Suite("flowscope run --json shape (scenario-format.md)")
struct ScenarioOutputTests {
    static let example = """
    {
      name: "shape", profile: { id: "user-42" },
      backend: { placements: { main_paywall: { audiences: [
        { name: "All Users", versionId: "av-all", variations: [ { id: "all-A", weight: 50 }, { id: "all-B", weight: 50 } ] } ] } } },
      network: { latency: 0.2, rules: [
        { match: { placement: "main_paywall", kind: "targeted" }, fail: "hang" },
        { match: { placement: "gone" }, fail: "http:404" } ] },
      steps: [
        { at: 0, call: "getFlow", placement: "main_paywall", loadTimeout: 5 },
        { at: 10, call: "preloadFlows", placements: ["gone", "main_paywall"], loadTimeout: 2 },
      ],
      expect: [ { step: 0, source: "defaultAudience", completedAt: 4.7 } ],
    }
    """

    func run() throws -> JSONValue {
        ScenarioRunner(try Scenario.decode(Self.example, file: "shape.json5")).run().json
    }

    @Test("results carry step, call, placement, outcome, source, variation, audience, targetingLost, times, requests, error")
    func results() throws {
        let json = try run()
        #expect(json["name"] == "shape")
        #expect(json["file"] == "shape.json5")
        let results = try #require(json["results"]?.arrayValue)
        #expect(results.count == 2)
        let r0 = results[0]
        #expect(r0["step"] == 0)
        #expect(r0["call"] == "getFlow")
        #expect(r0["placement"] == "main_paywall")
        #expect(r0["outcome"] == "success")
        #expect(r0["source"] == "defaultAudience")
        #expect(r0["variation"] == "all-B")
        #expect(r0["audience"] == "All Users")
        #expect(r0["targetingLost"] == .bool(true))
        #expect(r0["startedAt"] == 0)
        #expect(r0["completedAt"] == 4.7)
        #expect(r0["requests"] == 2)
        #expect(r0["error"] == .null)
    }

    @Test("a preload error has code, name and preloadErrors with each placement's own code")
    func preloadError() throws {
        let r1 = try #require(try run()["results"]?.arrayValue?[1])
        #expect(r1["outcome"] == "error")
        #expect(absent(r1["source"]))
        let error = try #require(r1["error"])
        #expect(error["code"] == 2005)
        #expect(error["name"] == "networkFailed")
        // gone: 404 (2003, not eligible); main_paywall: targeted hangs to 11.5, default answers at 11.7.
        #expect(error["preloadErrors"]?["gone"]?["code"] == 2003)
        #expect(error["preloadErrors"]?["gone"]?["name"] == "badRequest")
        #expect(error["preloadErrors"]?.objectValue?.count == 1)
        #expect(r1["completedAt"] == 11.7)
        #expect(r1["requests"] == 3)
    }

    @Test("getFlow errors carry no preloadErrors")
    func noPreloadErrorsOnGetFlow() throws {
        let text = Self.example.replacingOccurrences(of: "placement: \"main_paywall\", loadTimeout: 5", with: "placement: \"gone\", loadTimeout: 5")
        let json = ScenarioRunner(try Scenario.decode(text)).run().json
        let error = try #require(json["results"]?[index: 0]?["error"])
        #expect(error["code"] == 2003)
        #expect(absent(error["preloadErrors"]))
    }

    @Test("requests and events each carry the step that caused them; request outcomes use the spec's strings")
    func requestsAndEvents() throws {
        let json = try run()
        let requests = try #require(json["requests"]?.arrayValue)
        #expect(requests.count == 5)
        let r0 = requests[0]
        #expect(r0["step"] == 0)
        #expect(r0["placement"] == "main_paywall")
        #expect(r0["kind"] == "targeted")
        #expect(r0["issuedAt"] == 0)
        #expect(r0["endedAt"] == 4.5)
        #expect(r0["outcome"] == "timeout")
        #expect(requests[1]["kind"] == "default")
        #expect(requests[1]["outcome"] == "ok")
        #expect(requests[1]["endedAt"] == 4.7)
        let outcomes = Set(requests.compactMap { $0["outcome"]?.stringValue })
        #expect(outcomes == ["timeout", "ok", "http:404"])
        #expect(requests.allSatisfy { $0["step"]?.numberValue != nil })
        let events = try #require(json["events"]?.arrayValue)
        #expect(events.first?["name"] == "fetch.start")
        #expect(events.first?["t"] == 0)
        #expect(events.first?["placement"] == "main_paywall")
        #expect(events.first?["attrs"]?.objectValue != nil)
        #expect(events.allSatisfy { $0["step"]?.numberValue != nil })
        #expect(events.contains { $0["step"] == 1 && $0["name"] == "preload.end" })
        let exp = try #require(json["expectations"])
        #expect(exp["passed"] == 1)
        #expect(exp["failed"] == 0)
        #expect(exp["failures"] == .array([]))
    }

    @Test("a failed expectation is listed with step, key, expected and actual")
    func failedExpectation() throws {
        let text = Self.example.replacingOccurrences(of: "completedAt: 4.7", with: "completedAt: 4.6")
        let report = ScenarioRunner(try Scenario.decode(text)).run()
        #expect(!report.succeeded)
        let f = try #require(report.json["expectations"]?["failures"]?[index: 0])
        #expect(f["step"] == 0)
        #expect(f["key"] == "completedAt")
        #expect(f["expected"] == 4.6)
        #expect(f["actual"] == 4.7)
    }

    @Test("the timeline has a PASS line per expectation that held and a FAIL line per key that did not, in file order")
    func timelineVerdicts() throws {
        let text = Self.example.replacingOccurrences(
            of: "expect: [ { step: 0, source: \"defaultAudience\", completedAt: 4.7 } ]",
            with: "expect: [ { step: 0, source: \"network\", completedAt: 4.6 }, { step: 1, outcome: \"error\" } ]")
        try #require(text != Self.example)
        let timeline = ScenarioRunner(try Scenario.decode(text)).run().timeline(events: false)
        let verdicts = timeline.split(separator: "\n").filter { $0.hasPrefix("  PASS") || $0.hasPrefix("  FAIL") || $0.contains(" passed, ") }
        #expect(verdicts == [
            "  FAIL step 0 source: expected \"network\", got \"defaultAudience\"  ($.expect[0])",
            "  FAIL step 0 completedAt: expected 4.6, got 4.7  ($.expect[0])",
            "  PASS step 1  ($.expect[1])",
            "  1 passed, 1 failed",
        ])
    }
}

@Suite("Invalid scenario files")
struct InvalidScenarioTests {
    static let base = ScenarioOutputTests.example

    func error(_ text: String) -> JSONInputError? {
        do { _ = try Scenario.decode(text, file: "bad.json5"); return nil } catch { return error }
    }

    func check(_ from: String, _ to: String, path: String, mentions: String) {
        let text = Self.base.replacingOccurrences(of: from, with: to)
        #expect(text != Self.base, "replacement \(from) did not apply")
        let e = error(text)
        #expect(e?.file == "bad.json5")
        #expect(e?.path == path)
        #expect(e?.description.hasPrefix("bad.json5: \(path)") == true)
        #expect(e?.message.contains(mentions) == true, "\(e?.message ?? "no error")")
    }

    @Test("an unknown key is named with its path")
    func unknownKey() {
        check("at: 10, call", "at: 10, colour: 1, call", path: "$.steps[1].colour", mentions: "unknown")
    }

    @Test("a placement id with spaces around it, which the engine's trimmed calls could never match, is named with its path")
    func untrimmedPlacementKeys() {
        check("placements: { main_paywall: {", "placements: { \" main_paywall\": {",
              path: #"$.backend.placements[" main_paywall"]"#, mentions: "without spaces")
        check("network: {", "fallbackFile: { \"p \": { variation: \"v\" } }, network: {",
              path: #"$.fallbackFile["p "]"#, mentions: "without spaces")
        check("network: {", "cache: [ { placement: \" p\", variation: \"v\" } ], network: {",
              path: "$.cache[0].placement", mentions: "without spaces")
    }

    @Test("a wrong type is named with its path")
    func wrongType() {
        check("latency: 0.2,", "latency: \"fast\",", path: "$.network.latency", mentions: "number")
    }

    @Test("a bad fetchPolicy lists the policies")
    func badPolicy() {
        check("loadTimeout: 5 }", "loadTimeout: 5, fetchPolicy: \"cacheFirst\" }", path: "$.steps[0].fetchPolicy",
              mentions: "returnCacheDataElseLoad")
    }

    @Test("a bad fail string lists the failures")
    func badFail() {
        check("fail: \"hang\"", "fail: \"explode\"", path: "$.network.rules[0].fail", mentions: "http:NNN")
        for odd in ["http:0200", "http:+200", "http:200 "] {
            check("fail: \"hang\"", "fail: \"\(odd)\"", path: "$.network.rules[0].fail", mentions: "http:NNN")
        }
        for interim in ["http:100", "http:101", "http:199"] {
            check("fail: \"hang\"", "fail: \"\(interim)\"", path: "$.network.rules[0].fail", mentions: "expected http:200 to http:599")
        }
    }

    @Test("seconds given as text are decimal only: no hexadecimal, inf or nan as Double(_:) reads them")
    func decimalSeconds() {
        for (text, value) in [("2", 2.0), ("0.5", 0.5), (".5", 0.5), ("5.", 5), ("-1", -1), ("1e3", 1000), ("2.5E-1", 0.25)] {
            #expect(SecondsLimit.decimal(text) == value, "\(text)")
        }
        for text in ["", "-", ".", "0x10", "0X1p3", "inf", "nan", "infinity", "+1", "1e", "1e+", " 1", "1 ", "1e400", "١"] {
            #expect(SecondsLimit.decimal(text) == nil, "\(text)")
        }
    }

    @Test("nth 0 is rejected: nth is 1-based")
    func nthZero() {
        check("kind: \"targeted\" }", "kind: \"targeted\", nth: 0 }", path: "$.network.rules[0].match.nth", mentions: "1-based")
    }

    @Test("an expectation naming a step that does not exist is rejected")
    func stepOutOfRange() {
        check("{ step: 0, source", "{ step: 2, source", path: "$.expect[0].step", mentions: "0..<2")
    }

    @Test("a layout's images and imageBytes beyond their limits are refused with the path and the range")
    func layoutLimits() {
        let layout = "{ name: \"All Users\", versionId: \"av-all\", variations: [ { id: \"all-A\", weight: 50 }, { id: \"all-B\", weight: 50 } ] } ] } } },"
        for (key, value, limit) in [("images", "10001", "10000"), ("imageBytes", "9000000000000000", "100000000")] {
            check(layout, layout.replacingOccurrences(of: "] } } },", with: "], layout: { id: \"L\", version: 1, \(key): \(value) } } } },"),
                  path: "$.backend.placements.main_paywall.layout.\(key)", mentions: "an integer from 0 to \(limit)")
        }
    }

    @Test("a cancel step that names itself is refused: it can only cancel another step")
    func cancelItself() {
        check("{ at: 10, call: \"preloadFlows\", placements: [\"gone\", \"main_paywall\"], loadTimeout: 2 }",
              "{ at: 10, call: \"cancel\", step: 1 }", path: "$.steps[1].step", mentions: "another step")
    }

    @Test("a JSON syntax error names the file and the line")
    func syntax() {
        let e = error("{ name: \"x\", steps: [ }")
        #expect(e?.file == "bad.json5")
        #expect(e?.line != nil)
    }
}

extension JSONValue {
    subscript(index index: Int) -> JSONValue? {
        guard let a = arrayValue, a.indices.contains(index) else { return nil }
        return a[index]
    }
}

/// True when a key is missing (not the same as a JSON null).
func absent(_ v: JSONValue?) -> Bool { if case .none = v { true } else { false } }
