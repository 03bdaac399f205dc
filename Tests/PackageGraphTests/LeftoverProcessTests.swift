import Foundation
import TestSupport
import Testing

/// `make test` ends with scripts/leftover-processes.sh: any process still carrying the run's
/// FLOWSCOPE_TEST_RUN id once the suite is over is ended, and the run fails.
@Suite("Leftover processes", .ownThread)
struct LeftoverProcessTests {
    /// Runs the script for `id`; its exit status and what it printed.
    static func check(_ id: String) throws -> (status: Int32, output: String) {
        try runProgram("/usr/bin/env", ["bash", PackageGraphTests.packageRoot + "/scripts/leftover-processes.sh", id])
    }

    @Test("a process left with the run's id fails the check, is named and is ended; none left passes")
    func leftoverProcessFailsTheRun() throws {
        let id = "leftover-test-\(UUID().uuidString)"
        let sleeper = Process()
        sleeper.executableURL = URL(fileURLWithPath: "/bin/sleep")
        sleeper.arguments = ["60"]
        sleeper.environment = ProcessInfo.processInfo.environment.merging(["FLOWSCOPE_TEST_RUN": id]) { _, new in new }
        try sleeper.run()
        defer { if sleeper.isRunning { sleeper.terminate() }; sleeper.waitUntilExit() }
        let found = try Self.check(id)
        #expect(found.status == 1)
        #expect(found.output.contains("\(sleeper.processIdentifier)") && found.output.contains("sleep 60"), "\(found.output)")
        sleeper.waitUntilExit()
        #expect(sleeper.terminationReason == .uncaughtSignal, "the check ended it")
        let clean = try Self.check(id)
        #expect(clean.status == 0, "\(clean.output)")
    }
}
