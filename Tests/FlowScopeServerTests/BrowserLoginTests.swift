import Foundation
import FlowJSON
import Testing
import TestSupport
@testable import FlowScopeServer

/// Off loopback every route but /healthz needs the token: a browser logs in once with `?token=` and
/// is authorised by the cookie from then on. The servers listen on 127.0.0.1 under the off-loopback
/// policy (`ServerConfig.policyForTesting`).
@Suite("Browser login off loopback, over real HTTPS", .ownThread)
struct BrowserLoginTests {
    /// A server under the off-loopback policy with a static page and asset, an API read, an event
    /// stream and a token-only ingest route.
    static func fixture(policy: AccessPolicy = .tokenEverywhere, hub: SSEHub) throws -> (ServerFixture, String) {
        let web = makeTemporaryDirectory()
        try FileManager.default.createDirectory(atPath: web + "/js", withIntermediateDirectories: true)
        try "<!doctype html><title>FlowScope</title>".write(toFile: web + "/index.html", atomically: true, encoding: .utf8)
        try "export const x = 1;".write(toFile: web + "/js/app.js", atomically: true, encoding: .utf8)
        let files = try StaticFiles(root: web)
        let fixture = try ServerFixture(policy: policy) { router in
            router.get("/api/runs") { _ in .json(["runs": []]) }
            router.get("/api/events/stream") { _ in .eventStream(hub) }
            router.post("/api/ingest", requiresToken: true) { _ in .json(["accepted": 0], status: 202) }
            router.serveStatic(files)
        }
        return (fixture, web)
    }

    static func message(_ reply: HTTPReply) -> String? {
        (try? JSON5.parse(reply.text))?["error"]?["message"]?.stringValue
    }

    @Test("no token: 401; ?token=wrong: 401; ?token=right: 303 to the URL without it, with an HttpOnly, Secure, SameSite=Strict cookie that is not the token")
    func login() throws {
        let hub = SSEHub(heartbeatInterval: .seconds(60))
        let (fixture, web) = try Self.fixture(hub: hub)
        defer { removeDirectory(web) }
        let c = try fixture.connect()
        for path in ["/", "/js/app.js", "/api/runs", "/api/events/stream"] {
            let reply = try c.request("GET", path)
            #expect(reply.status == 401, "\(path)")
            #expect(reply.header("content-type") == "application/json" && Self.message(reply) == "missing or invalid bearer token", "\(path)")
        }
        let token = fixture.token.value
        for wrong in ["wrong", String(token.dropLast()) + (token.hasSuffix("0") ? "1" : "0"), ""] {
            let reply = try c.request("GET", "/?token=\(wrong)")
            #expect(reply.status == 401 && reply.header("set-cookie") == nil, "token=\(wrong)")
            #expect(Self.message(reply) == "invalid token in the URL" && reply.header("www-authenticate")?.hasPrefix("Bearer") == true)
        }

        let reply = try c.request("GET", "/?token=\(token)")
        #expect(reply.status == 303)
        #expect(reply.header("location") == "/")
        let cookie = try #require(reply.header("set-cookie"))
        let name = "__Host-flowscope-\(fixture.port)"
        let value = try #require(cookie.split(separator: ";").first?.split(separator: "=", maxSplits: 1).last.map(String.init))
        #expect(cookie == "\(name)=\(value); Path=/; HttpOnly; Secure; SameSite=Strict")
        #expect(value.count == 64 && value.allSatisfy(\.isHexDigit) && !value.contains(token) && value != token)
        #expect(reply.header("cache-control") == "no-store" && reply.header("referrer-policy") == "no-referrer")

        // The rest of the URL is kept as sent; a path a browser would read as another host's is not.
        let kept = try c.request("GET", "/api/runs?a=1&token=\(token)&b=x%20y")
        #expect(kept.status == 303 && kept.header("location") == "/api/runs?a=1&b=x%20y")
        #expect(try c.request("GET", "//evil.example/?token=\(token)").header("location") == "/")
        #expect(try c.request("HEAD", "/?token=\(token)&run=live").header("location") == "/?run=live")
    }

    @Test("the cookie authorises the page, its assets, the API and the event stream; not ingest, and not with another value or name")
    func cookieAuthorises() throws {
        let hub = SSEHub(heartbeatInterval: .seconds(60))
        let (fixture, web) = try Self.fixture(hub: hub)
        defer { removeDirectory(web) }
        let login = try fixture.connect().request("GET", "/?token=\(fixture.token.value)")
        let pair = try #require(login.header("set-cookie")?.split(separator: ";").first.map(String.init))
        let cookie = [("Cookie", "theme=dark; \(pair); other=1")]
        let c = try fixture.connect()
        let page = try c.request("GET", "/", headers: cookie)
        #expect(page.status == 200 && page.text.contains("<title>FlowScope</title>"))
        #expect(try c.request("GET", "/js/app.js", headers: cookie).status == 200)
        let runs = try c.request("GET", "/api/runs", headers: cookie)
        #expect(runs.status == 200 && runs.text == #"{"runs":[]}"# + "\n")
        #expect(try c.request("HEAD", "/api/runs", headers: cookie).status == 200)
        #expect(try c.request("GET", "/api/runs", headers: [("Cookie", "theme=dark"), ("Cookie", pair)]).status == 200,
                "a second Cookie field")

        let stream = try fixture.connect()
        try stream.send("GET /api/events/stream HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\nCookie: \(pair)\r\n\r\n")
        let head = try stream.readHead()
        #expect(head.status == 200 && head.header("content-type")?.hasPrefix("text/event-stream") == true)
        hub.publish(id: 1, data: #"{"seq":1}"#)
        let (text, _) = stream.readStream { $0.contains("id: 1\n") && $0.hasSuffix("\n\n") }
        #expect(text.contains("event: hello") && text.contains("id: 1\ndata: {\"seq\":1}\n\n"), "\(text)")

        // Ingest needs the bearer token whatever the cookie; a bad value or another server's name is no login.
        #expect(try c.request("POST", "/api/ingest", headers: cookie, body: Array("{}".utf8)).status == 401)
        #expect(try c.request("POST", "/api/ingest", headers: [("Authorization", "Bearer \(fixture.token.value)")],
                              body: Array("{}".utf8)).status == 202)
        let name = "__Host-flowscope-\(fixture.port)"
        for bad in ["\(name)=\(String(repeating: "0", count: 64))", "\(name)=", "__Host-flowscope-1\(pair.dropFirst(name.count))",
                    "\(name)=\(fixture.token.value)"] {
            #expect(try c.request("GET", "/api/runs", headers: [("Cookie", bad)]).status == 401, "\(bad)")
        }
        #expect(try c.request("GET", "/healthz").status == 200, "/healthz stays open")
    }

    @Test("the cookie is an HMAC of the token under a key of the server's start: another start's cookie for the same token is refused; a redirect path with spaces or control characters goes to /")
    func cookiePerStart() throws {
        let token = try AuthToken(configured: "passwordpassword")
        let first = BrowserLogin(token: token, port: 8443), second = BrowserLogin(token: token, port: 8443)
        #expect(first.cookieValue != second.cookieValue)
        #expect(first.accepts(cookieHeader: "__Host-flowscope-8443=\(first.cookieValue)"))
        #expect(!first.accepts(cookieHeader: "__Host-flowscope-8443=\(second.cookieValue)"))
        // A fixed key gives the HMAC-SHA256 a standard tool computes (Python's hmac, key "Jefe").
        let known = BrowserLogin(token: token, port: 1, key: Array("Jefe".utf8))
        #expect(known.cookieValue == "391c26f9d8b736dbae16dbefe6848ee4cb5f4ea55cb1319090edd37caa3de8e4")

        let hub = SSEHub(heartbeatInterval: .seconds(60))
        let (fixture, web) = try Self.fixture(hub: hub)
        defer { removeDirectory(web) }
        let c = try fixture.connect()
        let value = fixture.token.value
        #expect(try c.request("GET", "/\t/evil.example/?token=\(value)").header("location") == "/")
        #expect(try c.request("GET", "/a\\b?token=\(value)").header("location") == "/")
    }

    @Test("over plain HTTP (--insecure-http) there is no login: ?token= is refused and no cookie is set")
    func noLoginOverHTTP() throws {
        let fixture = try ServerFixture(insecure: true, policy: .tokenEverywhere)
        let reply = try fixture.connect(tls: false).request("GET", "/?token=\(fixture.token.value)")
        #expect(reply.status == 401 && reply.header("set-cookie") == nil)
        #expect(fixture.server.browserLoginURL == nil)
    }

    @Test("on loopback nothing changes: ?token= is not looked at and no cookie is set")
    func loopbackUnchanged() throws {
        let hub = SSEHub(heartbeatInterval: .seconds(60))
        let (fixture, web) = try Self.fixture(policy: .loopbackReadsOpen, hub: hub)
        defer { removeDirectory(web) }
        let c = try fixture.connect()
        for path in ["/", "/?token=wrong", "/?token=\(fixture.token.value)", "/api/runs?token=x"] {
            let reply = try c.request("GET", path)
            #expect(reply.status == 200 && reply.header("set-cookie") == nil, "\(path)")
        }
        #expect(fixture.server.browserLoginURL == nil)
    }

    @Test("the URL to open: the bind address (the host name for 0.0.0.0), the port and the token percent-encoded")
    func loginURL() throws {
        let token = try AuthToken(configured: "abc&def#ghi%jkl+mno")
        #expect(BrowserLogin.url(bind: "192.0.2.7", port: 8443, token: token) == "https://192.0.2.7:8443/?token=abc%26def%23ghi%25jkl%2Bmno")
        #expect(BrowserLogin.url(bind: "2001:db8::1", port: 9000, token: token).hasPrefix("https://[2001:db8::1]:9000/?token="))
        var name = [CChar](repeating: 0, count: 256)
        gethostname(&name, 255)
        let host = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        #expect(BrowserLogin.url(bind: "0.0.0.0", port: 8443, token: token).hasPrefix("https://\(host):8443/?token="))
        let hub = SSEHub(heartbeatInterval: .seconds(60))
        let (fixture, web) = try Self.fixture(hub: hub)
        defer { removeDirectory(web) }
        #expect(fixture.server.browserLoginURL == "https://127.0.0.1:\(fixture.port)/?token=\(fixture.token.value)")
        // The printed URL logs in.
        let reply = try fixture.connect().request("GET", "/?token=\(fixture.token.value)")
        #expect(reply.status == 303 && reply.header("set-cookie") != nil)
    }
}
