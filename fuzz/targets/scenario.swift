// Fuzz target: scenario files (`flowscope run FILE`): decode, then play what decodes in virtual time.
import FlowJSON
import FlowSim

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzScenario(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    guard let text = utf8Text(bytes) else { return 0 }
    do throws(JSONInputError) {
        let scenario = try Scenario.decode(text, file: "fuzz.json5")
        // What `flowscope run` does with it: play, then print the timeline and the JSON report.
        let report = ScenarioRunner(scenario).run()
        _ = report.timeline(events: true)
        _ = report.json.jsonText
    } catch {
        checkError(error, bytes)
        guard error.file == "fuzz.json5" else { violated("error does not name the file", bytes) }
    }
    return 0
}
