import TestSupport
import Foundation
import Synchronization
import Testing
@testable import FlowScopeServer

/// Response bodies are lent to libmicrohttpd without a copy (`ResponseBody`); these check that the
/// bytes still arrive intact over real TLS and that the lent storage is given back.
@Suite("Response bodies lent to libmicrohttpd", .ownThread)
struct ResponseBodyTests {
    /// A body whose every byte depends on its request number and position, so a mix-up shows.
    static func body(number: Int, count: Int) -> [UInt8] {
        var state = UInt64(number) &* 0x9E37_79B9_7F4A_7C15 | 1
        return (0..<count).map { _ in
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return UInt8(truncatingIfNeeded: state)
        }
    }

    @Test("multi-megabyte bodies built per request arrive byte for byte over TLS, one after another on a kept-alive connection")
    func largeBodies() throws {
        let fixture = try ServerFixture { router in
            router.get("/big") { request in
                let number = Int(request.query("n") ?? "") ?? 0
                let count = Int(request.query("size") ?? "") ?? 0
                return Response(status: 200, headers: [("Content-Type", "application/octet-stream")],
                                body: Self.body(number: number, count: count))
            }
        }
        let connection = try fixture.connect()
        for (number, size) in [(1, 3 << 20), (2, 32_323), (3, 16_384), (4, 16_385), (5, 1), (6, 1 << 20)] {
            let reply = try connection.request("GET", "/big?n=\(number)&size=\(size)")
            #expect(reply.status == 200)
            #expect(reply.header("content-length") == String(size))
            #expect(reply.body.count == size)
            #expect(reply.body == Self.body(number: number, count: size), "body \(number) of \(size) bytes differs")
        }
        let empty = try connection.request("GET", "/big?n=7&size=0")
        #expect(empty.status == 200)
        #expect(empty.header("content-length") == "0")
        #expect(empty.body.isEmpty)
        let head = try connection.request("HEAD", "/big?n=8&size=100000")
        #expect(head.status == 200)
        #expect(head.header("content-length") == "100000")
        #expect(try connection.request("GET", "/healthz").text == #"{"status":"ok"}"# + "\n")
    }

    @Test("concurrent clients each receive their own large body intact")
    func concurrentBodies() async throws {
        let fixture = try ServerFixture { router in
            router.get("/big") { request in
                Response(status: 200, headers: [], body: Self.body(number: Int(request.query("n") ?? "") ?? 0, count: 200_000))
            }
        }
        let port = fixture.port
        let failures = try await withThrowingTaskGroup(of: Int.self) { group in
            for client in 0..<6 {
                group.addTask {
                    let connection = try TestConnection(host: "127.0.0.1", port: port, tls: true)
                    var failed = 0
                    for round in 0..<4 {
                        let number = client * 100 + round
                        let reply = try connection.request("GET", "/big?n=\(number)")
                        if reply.status != 200 || reply.body != Self.body(number: number, count: 200_000) { failed += 1 }
                    }
                    return failed
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(failures == 0)
    }

    @Test("an answer repeating a body's storage is queued from the kept response, byte for byte; new bodies of the same size and headers are never mistaken for it; stop gives every kept body back")
    func keptResponses() throws {
        let constant = Self.body(number: 1, count: 20_000)
        let other = Self.body(number: 2, count: 20_000)
        let fixture = try ServerFixture { router in
            router.get("/constant") { _ in Response(status: 200, headers: [("Content-Type", "application/octet-stream")], body: constant) }
            router.get("/other") { _ in Response(status: 200, headers: [("Content-Type", "application/octet-stream")], body: other) }
            router.get("/fresh") { request in
                // A new array per request, same size and header fields as the constant ones.
                Response(status: 200, headers: [("Content-Type", "application/octet-stream")],
                         body: Self.body(number: Int(request.query("n") ?? "") ?? 0, count: 20_000))
            }
            router.get("/typed") { _ in Response(status: 200, headers: [("Content-Type", "text/plain")], body: constant) }
        }
        let connections = try (0..<2).map { _ in try fixture.connect() }
        for round in 0..<40 {
            let c = connections[round % 2]
            let constantReply = try c.request("GET", "/constant")
            #expect(constantReply.body == constant, "round \(round): /constant")
            #expect(try c.request("GET", "/other").body == other, "round \(round): /other")
            #expect(try c.request("GET", "/fresh?n=\(100 + round)").body == Self.body(number: 100 + round, count: 20_000),
                    "round \(round): /fresh")
            // Same body, other header fields: its own response.
            let typed = try c.request("GET", "/typed")
            #expect(typed.body == constant && typed.header("content-type") == "text/plain", "round \(round): /typed")
            #expect(constantReply.header("content-type") == "application/octet-stream")
        }
        // /constant, /other and /typed repeat 39 times each and stay kept (used more recently than
        // the /fresh entries, which never repeat and are evicted first).
        #expect(fixture.server.keptResponseHits == 3 * 39)
        #expect(Self.settles(fixture.server), "response bodies still held beyond the kept ones")
        fixture.server.stop()
        #expect(fixture.server.liveResponseBodies == 0, "kept bodies not given back at stop")
    }

    @Test("the server gives every lent body back once its response is sent or its connection dropped")
    func storageReleased() throws {
        let fixture = try ServerFixture { router in
            router.get("/big") { _ in Response(status: 200, headers: [], body: Self.body(number: 9, count: 2 << 20)) }
        }
        let reply = try fixture.connect().request("GET", "/big")
        #expect(reply.body == Self.body(number: 9, count: 2 << 20))
        // A client that leaves after the first bytes of a large body.
        let leaving = try fixture.connect()
        try leaving.send("GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")
        #expect(leaving.readSome() != nil)
        leaving.shutdownSocket()
        #expect(Self.settles(fixture.server), "response bodies still held after their responses ended")
        #expect(try fixture.connect().request("GET", "/healthz").status == 200)
        #expect(Self.settles(fixture.server))
    }

    /// Whether the server's lent bodies drop to 0 within 2 s.
    static func settles(_ server: HTTPSServer) -> Bool {
        for _ in 0..<400 {
            if server.liveResponseBodies == 0 { return true }
            usleep(5_000)
        }
        return server.liveResponseBodies == 0
    }
}
