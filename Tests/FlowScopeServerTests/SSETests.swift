import TestSupport
import FlowEvents
import FlowJSON
import Foundation
import MemorySink
import MetricsSink
import Synchronization
import Testing
@testable import FlowScopeServer

@Suite("Server-Sent Events", .ownThread)
struct SSETests {
    /// Waits until `condition` holds, up to `seconds`.
    func eventually(_ seconds: Double = 5, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(1_000)
        }
        return condition()
    }

    func subscribe(_ fixture: ServerFixture, lastEventID: UInt64? = nil) throws -> (TestConnection, HTTPReply) {
        let c = try fixture.connect()
        var head = "GET /api/events/stream HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
        if let lastEventID { head += "Last-Event-ID: \(lastEventID)\r\n" }
        try c.send(head + "\r\n")
        return (c, try c.readHead())
    }

    @Test("clients receive published messages as id/data frames, with the stream headers")
    func receive() throws {
        let hub = SSEHub(heartbeatInterval: .seconds(60))
        let fixture = try ServerFixture { router in router.get("/api/events/stream") { _ in .eventStream(hub) } }
        let clients = try (0..<20).map { _ in try subscribe(fixture) }
        for (_, head) in clients {
            #expect(head.status == 200)
            #expect(head.header("content-type") == "text/event-stream; charset=utf-8")
            #expect(head.header("cache-control") == "no-cache")
            #expect(head.header("x-content-type-options") == "nosniff")
        }
        #expect(eventually { hub.clientCount == 20 })
        hub.publish(id: 1, data: #"{"seq":1,"name":"a"}"#)
        hub.publish(id: 2, data: #"{"seq":2,"name":"b"}"#)
        for (c, _) in clients {
            let (text, ended) = c.readStream { $0.contains("id: 2\n") && $0.hasSuffix("\n\n") }
            #expect(!ended)
            #expect(text.contains("id: 1\ndata: {\"seq\":1,\"name\":\"a\"}\n\nid: 2\ndata: {\"seq\":2,\"name\":\"b\"}\n\n"), "\(text)")
            #expect(text.hasPrefix("retry: 2000\n"))
        }
        #expect(fixture.server.eventStreamClients == 20)
    }

    @Test("every stream starts with a hello carrying the hub's epoch, new for every hub, even when resuming")
    func helloEpoch() throws {
        let hub = SSEHub(heartbeatInterval: .seconds(60))
        #expect(hub.epoch.count == 16 && hub.epoch.allSatisfy(\.isHexDigit))
        #expect(SSEHub().epoch != hub.epoch, "a restarted server (a new hub) has another epoch")
        let fixture = try ServerFixture { router in router.get("/api/events/stream") { _ in .eventStream(hub) } }
        for lastEventID: UInt64? in [nil, 40] {
            let (c, _) = try subscribe(fixture, lastEventID: lastEventID)
            let (text, _) = c.readStream { $0.contains("\n\n") && $0.contains("epoch") }
            #expect(text.contains("event: hello\ndata: {\"epoch\":\"\(hub.epoch)\"}\n\n"), "\(text)")
        }
    }

    @Test("GET /api/events answers with the hub's epoch next to latestSeq")
    func eventsPageEpoch() throws {
        let metrics = try MetricsSink(version: "test")
        let memory = MemorySink()
        let pipeline = EventPipeline(run: "live", sinks: [metrics, memory])
        defer { pipeline.shutdown() }
        let hub = SSEHub()
        let router = DashboardAPI.router(pipeline: pipeline, metrics: metrics, store: memory, sinks: SinkStatus(stats: pipeline.stats), hub: hub, web: nil,
                                         ingestLimiter: RateLimiter(ratePerSecond: 10, burst: 10))
        let response = router.respond(to: Request(method: "GET", path: "/api/events"), token: nil, policy: .loopbackReadsOpen)
        let page = try JSON5.parse(String(decoding: response.bodyBytes, as: UTF8.self))
        #expect(page["epoch"]?.stringValue == hub.epoch)
        #expect(page["events"]?.arrayValue?.isEmpty == true && page["latestSeq"] == .null)
    }

    @Test("a client resuming with Last-Event-ID gets the missed messages once, then live ones")
    func resume() throws {
        let log = Mutex<[(UInt64, String)]>([])
        let hub = SSEHub(heartbeatInterval: .seconds(60)) { after in log.withLock { $0.filter { $0.0 > after } } }
        func publish(_ id: UInt64) {
            let data = #"{"seq":\#(id)}"#
            log.withLock { $0.append((id, data)) }
            hub.publish(id: id, data: data)
        }
        let fixture = try ServerFixture { router in router.get("/api/events/stream") { _ in .eventStream(hub) } }
        for id: UInt64 in 1...5 { publish(id) }
        let (c, head) = try subscribe(fixture, lastEventID: 3)
        #expect(head.status == 200)
        #expect(eventually { hub.clientCount == 1 })
        publish(6)
        let (text, _) = c.readStream { $0.contains("id: 6\n") && $0.hasSuffix("\n\n") }
        let ids = text.split(separator: "\n").filter { $0.hasPrefix("id: ") }.map { String($0.dropFirst(4)) }
        #expect(ids == ["4", "5", "6"], "\(text)")
    }

    @Test("a client far behind gets the newest replayed messages that fit its buffer, then live ones")
    func bigReplay() throws {
        let payload = #"{"pad":""# + String(repeating: "y", count: 1000) + #""}"#
        let hub = SSEHub(heartbeatInterval: .seconds(60), maxBufferedBytes: 64 * 1024) { after in
            (after + 1...1000).map { ($0, payload) }
        }
        let fixture = try ServerFixture { router in router.get("/api/events/stream") { _ in .eventStream(hub) } }
        let (c, _) = try subscribe(fixture, lastEventID: 0)
        #expect(eventually { hub.clientCount == 1 })
        hub.publish(id: 1001, data: "{}")
        let (text, ended) = c.readStream { $0.contains("id: 1001\n") }
        #expect(!ended)
        let ids = text.split(separator: "\n").filter { $0.hasPrefix("id: ") }.compactMap { Int($0.dropFirst(4)) }
        #expect(ids.last == 1001)
        #expect(ids.count > 10 && ids.count < 40, "\(ids.count) replayed")
        #expect(ids == Array((ids.first ?? 0)...1001), "contiguous newest messages")
        #expect(hub.droppedClients == 0)
    }

    @Test("idle streams get heartbeat comments")
    func heartbeats() throws {
        let hub = SSEHub(heartbeatInterval: .milliseconds(50))
        let fixture = try ServerFixture { router in router.get("/api/events/stream") { _ in .eventStream(hub) } }
        let (c, _) = try subscribe(fixture)
        let (text, ended) = c.readStream { $0.components(separatedBy: ": ping\n\n").count > 3 }
        #expect(!ended)
        #expect(text.components(separatedBy: ": ping\n\n").count > 3)
    }

    @Test("stopping the server ends every stream cleanly and frees the connections")
    func stopEndsStreams() throws {
        let hub = SSEHub(heartbeatInterval: .seconds(60))
        let fixture = try ServerFixture { router in router.get("/api/events/stream") { _ in .eventStream(hub) } }
        let clients = try (0..<3).map { _ in try subscribe(fixture) }
        #expect(eventually { hub.clientCount == 3 })
        hub.publish(id: 9, data: "{}")
        for (c, _) in clients { _ = c.readStream { $0.contains("id: 9\n") } }
        let clock = ContinuousClock()
        let started = clock.now
        fixture.server.stop()
        #expect(clock.now - started < .seconds(2))
        for (c, _) in clients {
            let (_, ended) = c.readStream { _ in false }
            #expect(ended)
        }
        #expect(hub.clientCount == 0)
        #expect(fixture.server.eventStreamClients == 0)
    }

    @Test("a client that disconnects is removed from the hub")
    func disconnect() throws {
        let hub = SSEHub(heartbeatInterval: .milliseconds(50))
        let fixture = try ServerFixture { router in router.get("/api/events/stream") { _ in .eventStream(hub) } }
        let (c, _) = try subscribe(fixture)
        #expect(eventually { hub.clientCount == 1 })
        c.shutdownSocket()
        #expect(eventually { hub.clientCount == 0 })
        #expect(try fixture.connect().request("GET", "/healthz").status == 200)
    }

    @Test("a client that does not read is dropped once its buffer is full, and others are unaffected")
    func slowClient() throws {
        let hub = SSEHub(heartbeatInterval: .seconds(60), maxBufferedBytes: 64 * 1024)
        let fixture = try ServerFixture { router in router.get("/api/events/stream") { _ in .eventStream(hub) } }
        let (slow, _) = try subscribe(fixture)
        let (fast, _) = try subscribe(fixture)
        #expect(eventually { hub.clientCount == 2 })
        let payload = #"{"pad":""# + String(repeating: "x", count: 1000) + #""}"#
        let frameBytes = SSEHub.frame(id: 10_000, data: payload).count
        let total = 20_000
        let received = Mutex(0)  // decoded bytes seen by the fast client
        let reader = Thread {
            var decoder = ChunkDecoder()
            while let more = fast.readSome() {
                let n = decoder.feed(more).count
                received.withLock { $0 += n }
            }
        }
        reader.start()
        for id in 1...total {
            hub.publish(id: UInt64(id), data: payload)
            // Stay within the fast client's buffer: a client that keeps up is never dropped.
            if id % 20 == 0 { _ = eventually(5) { received.withLock { $0 } >= (id - 40) * frameBytes } }
        }
        // ~20 MB is more than the kernel buffers of a client that never reads: it is dropped.
        #expect(eventually(10) { hub.droppedClients == 1 })
        let expected = (1...total).reduce(0) { $0 + SSEHub.frame(id: UInt64($1), data: payload).count }
        #expect(eventually(10) { received.withLock { $0 } >= expected }, "\(received.withLock { $0 }) of \(expected)")
        #expect(hub.clientCount == 1)
        fast.shutdownSocket()
        _ = slow
    }
}
