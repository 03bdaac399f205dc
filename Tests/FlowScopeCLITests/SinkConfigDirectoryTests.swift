import FlowEvents
import FlowJSON
import Foundation
import Testing
@testable import FlowScopeCLI

/// A distribution's sink type with a file option that is not called `path`: `SinkContext.filePath`
/// must resolve it against the config file's directory in check-config and in serve alike.
private struct ResolvingFactory: SinkFactory {
    let type = "resolving"
    let expected: String

    func options(from context: SinkContext) throws(JSONInputError) -> String {
        try context.checkKeys(["file"])
        return try context.filePath("file") ?? ""
    }

    func validate(_ file: String, context: SinkContext) throws(JSONInputError) {
        guard file == expected else { throw JSONInputError(path: context.path(of: "file"), message: "resolved to \(file)") }
    }

    // Never builds a sink: serve stops here, saying what it was given.
    func makeSink(_ file: String, context: SinkContext) throws -> any EventSink {
        throw JSONInputError(path: context.path(of: "file"), message: "built with \(file)")
    }
}

@Suite("sink file options and the config file's directory")
struct SinkConfigDirectoryTests {
    @Test("a relative file option of a custom sink resolves against the config file's directory, not the working directory")
    func customFileOption() async throws {
        let dir = makeTemporaryDirectory("sink-dir")
        defer { removeDirectory(dir) }
        try FileManager.default.createDirectory(atPath: dir + "/conf", withIntermediateDirectories: true)
        let config = dir + "/conf/flowscope.json5"
        try write(#"{ server: { port: 0, stateDir: "state" }, demo: { enabled: false }, sinks: [ { type: "resolving", file: "logs/x.log" } ] }"#,
                  to: config)
        let expected = ((dir + "/conf/logs/x.log") as NSString).standardizingPath
        #expect(FileManager.default.currentDirectoryPath != dir + "/conf")

        func run(_ arguments: String...) async -> (status: Int32, out: String, err: String) {
            let captured = CapturedOutput()
            let status = await CommandLine.run(arguments, output: captured.output, sinks: [ResolvingFactory(expected: expected)])
            return (status, captured.out, captured.err)
        }
        let check = await run("check-config", config)
        #expect(check.status == 0, "\(check.err)")
        #expect(check.out == "\(config): ok (sinks: metrics, memory, resolving; 7 strategies)\n")  // with the two serve adds

        let serve = await run("serve", "--config", config, "--port", "0", "--no-demo")
        #expect(serve.status == 2)
        #expect(serve.err.contains("$.sinks[0].file: built with \(expected)"), "\(serve.err)")
    }
}
