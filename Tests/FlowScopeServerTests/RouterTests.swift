import Foundation
import Synchronization
import Testing
@testable import FlowScopeServer

@Suite("Router, rate limiter and static files (no sockets)")
struct RouterTests {
    let token = try! AuthToken(configured: "router-test-token-0001")

    func request(_ method: String, _ rawPath: String, authorized: Bool = false, query: [(String, String)] = []) -> Request {
        Request(method: method, path: rawPath, rawPath: rawPath, queryItems: query.map { ($0.0, $0.1) },
                headers: authorized ? ["authorization": "Bearer router-test-token-0001"] : [:])
    }

    @Test("path parameters are decoded per segment and passed to the handler")
    func parameters() {
        var router = Router()
        router.get("/api/runs/{id}") { .text("run=" + ($0.parameter("id") ?? "?") + " path=" + $0.path) }
        let response = router.respond(to: request("GET", "/api/runs/a%2Fb%20c"), token: token, policy: .loopbackReadsOpen)
        #expect(response.status == 200)
        #expect(String(decoding: response.bodyBytes, as: UTF8.self) == "run=a/b c path=/api/runs/a/b c")
        #expect(router.respond(to: request("GET", "/api/runs/"), token: token, policy: .loopbackReadsOpen).status == 404)
        #expect(router.respond(to: request("GET", "/api/runs/%zz"), token: token, policy: .loopbackReadsOpen).status == 400)
    }

    @Test("an absolute-form target (as a proxy sends it) is served as its path; other targets not starting with / are 400 saying so")
    func absoluteForm() {
        var router = Router()
        router.get("/api/runs") { .text("ok " + $0.path) }
        for target in ["http://localhost/api/runs", "HTTPS://127.0.0.1:8443/api/runs", "http://[::1]:8443/api/runs"] {
            let response = router.respond(to: request("GET", target), token: token, policy: .loopbackReadsOpen)
            #expect(response.status == 200 && String(decoding: response.bodyBytes, as: UTF8.self) == "ok /api/runs", "\(target)")
        }
        #expect(router.respond(to: request("GET", "http://localhost"), token: token, policy: .loopbackReadsOpen).status == 404)
        for target in ["*", "healthz", "http://"] {
            let response = router.respond(to: request("GET", target), token: token, policy: .loopbackReadsOpen)
            #expect(response.status == 400, "\(target)")
            #expect(String(decoding: response.bodyBytes, as: UTF8.self).contains("expected a path starting with /"), "\(target)")
        }
        // The token check made before the body is read sees the same path.
        router.post("/api/ingest", requiresToken: true) { _ in .json(["accepted": 0], status: 202) }
        #expect(router.needsToken(method: "POST", rawPath: "http://localhost/api/ingest", policy: .loopbackReadsOpen))
    }

    @Test("query strings are split and percent-decoded, and malformed ones are refused")
    func query() {
        let items = PercentDecoding.queryItems("since=12&name=fetch%5Fstarted&run=a+b&empty&x=%E2%9C%93")
        #expect(items?.map(\.name) == ["since", "name", "run", "empty", "x"])
        #expect(items?.map(\.value) == ["12", "fetch_started", "a b", "", "✓"])
        #expect(PercentDecoding.queryItems("a=%4") == nil)
        #expect(PercentDecoding.queryItems("a=%ff") == nil)  // not UTF-8
    }

    @Test("an unknown path is 404 and a known path with the wrong method is 405 with Allow")
    func notFoundAndMethod() {
        var router = Router()
        router.get("/api/runs") { _ in .json([]) }
        router.post("/api/ingest", requiresToken: true) { _ in .json(["accepted": 0], status: 202) }
        let missing = router.respond(to: request("GET", "/nope"), token: token, policy: .loopbackReadsOpen)
        #expect(missing.status == 404)
        #expect(String(decoding: missing.bodyBytes, as: UTF8.self) == #"{"error":{"message":"no such resource: /nope","status":404}}"# + "\n")
        let wrong = router.respond(to: request("DELETE", "/api/runs"), token: token, policy: .loopbackReadsOpen)
        #expect(wrong.status == 405)
        #expect(wrong.header("Allow") == "GET, HEAD")
        let getIngest = router.respond(to: request("GET", "/api/ingest"), token: token, policy: .loopbackReadsOpen)
        #expect(getIngest.status == 405)
        #expect(getIngest.header("allow") == "POST")
    }

    @Test("on loopback only token routes need the token; elsewhere everything but /healthz does")
    func policies() {
        var router = Router()
        router.get("/api/runs") { _ in .json([]) }
        router.post("/api/ingest", requiresToken: true) { _ in .json(["accepted": 0], status: 202) }
        let open = AccessPolicy.loopbackReadsOpen
        #expect(router.respond(to: request("GET", "/api/runs"), token: token, policy: open).status == 200)
        #expect(router.respond(to: request("POST", "/api/ingest"), token: token, policy: open).status == 401)
        #expect(router.respond(to: request("POST", "/api/ingest"), token: nil, policy: open).status == 401)
        #expect(router.respond(to: request("POST", "/api/ingest", authorized: true), token: token, policy: open).status == 202)
        let closed = AccessPolicy.tokenEverywhere
        let denied = router.respond(to: request("GET", "/api/runs"), token: token, policy: closed)
        #expect(denied.status == 401)
        #expect(denied.header("WWW-Authenticate")?.hasPrefix("Bearer") == true)
        #expect(router.respond(to: request("GET", "/nope"), token: token, policy: closed).status == 401)
        #expect(router.respond(to: request("GET", "/api/runs", authorized: true), token: token, policy: closed).status == 200)
        #expect(router.respond(to: request("GET", "/healthz"), token: token, policy: closed).status == 200)
        #expect(AccessPolicy(bindAddress: "127.0.0.1") == open)
        #expect(AccessPolicy(bindAddress: "127.1.2.3") == open)
        #expect(AccessPolicy(bindAddress: "::1") == open)
        #expect(AccessPolicy(bindAddress: "localhost") == open)
        #expect(AccessPolicy(bindAddress: "0.0.0.0") == closed)
        #expect(AccessPolicy(bindAddress: "::") == closed)
        #expect(AccessPolicy(bindAddress: "192.168.1.10") == closed)
    }

    @Test("the token bucket refuses past the burst with a Retry-After, then refills")
    func rateLimit() {
        let clock = Mutex(100.0)
        let limiter = RateLimiter(ratePerSecond: 2, burst: 3, now: { clock.withLock { $0 } })
        var router = Router()
        router.post("/api/ingest", rateLimit: limiter) { _ in .json(["accepted": 1], status: 202) }
        let statuses = (0..<4).map { _ in router.respond(to: request("POST", "/api/ingest"), token: token, policy: .loopbackReadsOpen) }
        #expect(statuses.map(\.status) == [202, 202, 202, 429])
        #expect(statuses[3].header("Retry-After") == "1")
        #expect(String(decoding: statuses[3].bodyBytes, as: UTF8.self).contains(#""status":429"#))
        // Another client has its own bucket.
        #expect(limiter.take(key: "10.0.0.2") == .allowed)
        clock.withLock { $0 += 0.5 }
        #expect(router.respond(to: request("POST", "/api/ingest"), token: token, policy: .loopbackReadsOpen).status == 202)
        #expect(router.respond(to: request("POST", "/api/ingest"), token: token, policy: .loopbackReadsOpen).status == 429)
        if case .limited(let after) = limiter.take(key: "127.0.0.1") { #expect(abs(after - 0.5) < 1e-9) } else { Issue.record("expected limited") }
    }

    @Test("the limiter forgets idle clients first when its table is full")
    func limiterBound() {
        let clock = Mutex(0.0)
        let limiter = RateLimiter(ratePerSecond: 1, burst: 1, maxClients: 10, now: { clock.withLock { $0 } })
        for i in 0..<100 { _ = limiter.take(key: "c\(i)") }
        #expect(limiter.trackedClients <= 10)
    }

    @Test("static paths with traversal, encoded separators, backslashes, NUL or hidden names are refused")
    func traversalUnit() {
        for bad in ["/../etc/passwd", "/a/../../etc/passwd", "/%2e%2e/etc/passwd", "/%2E%2E%2Fetc%2Fpasswd", "/..%2fetc",
                    "/a%5c..%5cb", "/a\\..\\b", "/a%00.html", "/.git/config", "//etc/passwd", "/./index.html", "/a//b"] {
            #expect(StaticFiles.safeRelativePath(bad) == nil, "\(bad)")
        }
        #expect(StaticFiles.safeRelativePath("/") == "index.html")
        #expect(StaticFiles.safeRelativePath("/js/app.js") == "js/app.js")
        #expect(StaticFiles.safeRelativePath("/sub/") == "sub/index.html")
    }

    @Test("content types follow the extension")
    func contentTypes() {
        #expect(StaticFiles.contentType(forPath: "/x/index.html") == "text/html; charset=utf-8")
        #expect(StaticFiles.contentType(forPath: "app.js") == "text/javascript; charset=utf-8")
        #expect(StaticFiles.contentType(forPath: "a.css") == "text/css; charset=utf-8")
        #expect(StaticFiles.contentType(forPath: "a.svg") == "image/svg+xml")
        #expect(StaticFiles.contentType(forPath: "a.json") == "application/json")
        #expect(StaticFiles.contentType(forPath: "a.png") == "image/png")
        #expect(StaticFiles.contentType(forPath: "favicon.ico") == "image/x-icon")
        #expect(StaticFiles.contentType(forPath: "f.woff2") == "font/woff2")
        #expect(StaticFiles.contentType(forPath: "README") == "application/octet-stream")
    }

    @Test("a missing static directory is an error naming it")
    func missingRoot() {
        let error = #expect(throws: ServerFileError.self) { try StaticFiles(root: "/nonexistent/web") }
        #expect(error?.path == "/nonexistent/web")
    }

    @Test("SSE frames carry the id and one data line per line")
    func frames() {
        #expect(String(decoding: SSEHub.frame(id: 7, data: #"{"a":1}"#), as: UTF8.self) == "id: 7\ndata: {\"a\":1}\n\n")
        #expect(String(decoding: SSEHub.frame(id: 8, data: "x\ny"), as: UTF8.self) == "id: 8\ndata: x\ndata: y\n\n")
    }
}
