@testable import FlowScopeStubBackend
import Foundation
import Synchronization
import Testing
import TestSupport

/// libmicrohttpd aborts the process when its daemon stops while a connection is still suspended
/// ("MHD_stop_daemon() called while we have suspended connections"), so `stop()` must leave none.
@Suite("Stub backend: stopping", .ownThread)
struct StubBackendStopTests {
    final class Flag: Sendable {
        private let value = Atomic<Bool>(false)
        func set() { value.store(true, ordering: .sequentiallyConsistent) }
        var isSet: Bool { value.load(ordering: .sequentiallyConsistent) }
        /// Waits until set, at most `seconds`; whether it was.
        func wait(seconds: Double = 5) -> Bool {
            let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
            while !isSet && ContinuousClock.now < deadline { usleep(1000) }
            return isSet
        }
    }

    /// The plan is asked for on the daemon thread, between the handler's check for a stop and the
    /// suspension: it answers only once `stop()` has begun and resumed what was suspended then, with a
    /// plan that suspends (a hang, or a latency). Without the guard in `suspend()` that connection stays
    /// suspended and MHD_stop_daemon aborts the test process.
    @Test("a request decided while stop() runs is closed, not left suspended", arguments: ["hang", "latency"])
    func stopWhileDeciding(_ kind: String) throws {
        let deciding = Flag(), stopBegun = Flag(), stopped = Flag()
        let stub = try StubBackendServer { _ in
            deciding.set()
            _ = stopBegun.wait()
            usleep(50_000)  // stop() resumes every suspended connection right after it begins
            return kind == "hang" ? StubPlan(.hang)
                : StubPlan(latency: 5, .respond(status: 200, body: Array("{}".utf8), contentType: "application/json"))
        }
        let client = try TestConnection(port: stub.port, tls: false, timeout: 5)
        try client.send("GET /v1/placements/main/audience HTTP/1.1\r\nHost: localhost\r\n\r\n")
        #expect(deciding.wait(), "the stub asked for a plan")
        Thread.detachNewThread {
            stub.stop()
            stopped.set()
        }
        let deadline = ContinuousClock.now + .seconds(5)
        while !stub.isStopping && ContinuousClock.now < deadline { usleep(1000) }
        stopBegun.set()
        let started = ContinuousClock.now
        let reply = client.readSome()
        let waited = ContinuousClock.now - started
        #expect(reply == nil, "no answer: the stub closes the connection")
        #expect(waited < .seconds(4), "closed at once, not left to the client's 5 s timeout (waited \(waited))")
        #expect(stopped.wait(), "stop() returned")
    }
}
