import Foundation
import TestSupport
import Testing
@testable import FlowScopeServer

/// The listening socket after libmicrohttpd refused to start. `.realTime`: the test watches descriptor
/// numbers, which other tests running at the same time would take.
@Suite("The listening socket after a failed start (RealTime)", .realTime)
struct ListenSocketRealTimeTests {
    @Test("a start that fails in TLS set-up (libmicrohttpd closes the socket it was given) closes nothing else when the server stops")
    func failedTLSStartClosesNothingElse() throws {
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        var tls = try TLSMaterial.loadOrCreate(tlsDirectory: dir + "/tls")
        tls.keyPEM = "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"
        let server = try HTTPSServer(config: ServerConfig(port: 0, tls: tls), router: Router())
        #expect(throws: ServerStartError.self) { try server.start() }
        // Two new descriptors take the lowest free numbers, among them the one the failed start freed.
        var fds: [Int32] = [-1, -1]
        try #require(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        server.stop()
        #expect(fcntl(fds[0], F_GETFD) >= 0, "the stop closed a descriptor it did not own")
        #expect(fcntl(fds[1], F_GETFD) >= 0, "the stop closed a descriptor it did not own")
    }
}
