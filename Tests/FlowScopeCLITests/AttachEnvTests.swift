import FlowJSON
import Foundation
import TestSupport
import Testing
@testable import FlowScopeCLI

@Suite("flowscope attach-env", .ownThread)
struct AttachEnvTests {
    @Test("prints one shell line with absolute paths, the token read from its file; --required adds FLOWSCOPE_ATTACH_REQUIRED=1")
    func line() async throws {
        let made = makeTemporaryDirectory("attachenv")
        defer { removeDirectory(made) }
        let dir = URL(fileURLWithPath: made).standardizedFileURL.path
        #expect(await flowscope("cert", "--dir", dir + "/state/tls").status == 0)
        try write("0123456789abcdef0123456789abcdef0123456789abcdef", to: dir + "/state/token")
        try write("{ server: { stateDir: \"state\", port: 9443 } }\n", to: dir + "/flowscope.json5")
        let result = await flowscope("attach-env", "--config", dir + "/flowscope.json5")
        #expect(result.status == 0, "\(result.err)")
        #expect(result.out == "export FLOWSCOPE_ATTACH=https://localhost:9443 FLOWSCOPE_TOKEN=\"$(cat \(dir)/state/token)\" "
                + "FLOWSCOPE_CA=\(dir)/state/tls/cert.pem\n")
        let required = await flowscope("attach-env", "--config", dir + "/flowscope.json5", "--port", "8000", "--required")
        #expect(required.out.hasPrefix("export FLOWSCOPE_ATTACH=https://localhost:8000 "))
        #expect(required.out.hasSuffix(" FLOWSCOPE_ATTACH_REQUIRED=1\n"))
        // What a POSIX shell makes of the line: the three variables, the token's value included.
        let shell = try runProcess("/bin/sh", ["-c", result.out + "printf '%s\\n' \"$FLOWSCOPE_ATTACH\" \"$FLOWSCOPE_TOKEN\" \"$FLOWSCOPE_CA\""])
        #expect(shell.out == "https://localhost:9443\n0123456789abcdef0123456789abcdef0123456789abcdef\n\(dir)/state/tls/cert.pem\n")
    }

    @Test("before serve has made the certificate or the token, and for a bad --port, it exits 2 saying what is missing")
    func missing() async throws {
        let dir = makeTemporaryDirectory("attachenv")
        defer { removeDirectory(dir) }
        let none = await flowscope("attach-env", "--state-dir", dir + "/never")
        #expect(none.status == 2)
        #expect(none.err.contains("no certificate at \(dir)/never/tls/cert.pem yet"), "\(none.err)")
        #expect(await flowscope("cert", "--dir", dir + "/s/tls").status == 0)
        let noToken = await flowscope("attach-env", "--state-dir", dir + "/s")
        #expect(noToken.status == 2 && noToken.err.contains("no token at \(dir)/s/token yet"), "\(noToken.err)")
        let badPort = await flowscope("attach-env", "--port", "http")
        #expect(badPort.status == 2 && badPort.err.contains("--port expects a port number 1-65535, got http"))
    }
}
