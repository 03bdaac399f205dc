import TestSupport
import Testing
@testable import FlowScopeServer

/// The byte-level request glue: URI split, header-name folding, path segments.
@Suite("Request glue on bytes", .ownThread)
struct RequestGlueTests {
    @Test("the raw URI splits into path and query at the first ? and drops a # fragment, with non-ASCII text intact")
    func uriSplit() {
        let cases: [(uri: String, path: String, query: String)] = [
            ("/metrics", "/metrics", ""),
            ("/api/events?since=5&run=r%201", "/api/events", "since=5&run=r%201"),
            ("/a?b=1#frag?x", "/a", "b=1"),
            ("/a#frag?x=1", "/a", ""),
            ("/é/ü?name=ñ", "/é/ü", "name=ñ"),
            ("/?", "/", ""),
            ("", "", ""),
        ]
        for (uri, path, query) in cases {
            let state = RequestState(rawURI: uri)
            #expect(state.rawPath == path, "path of \(uri)")
            #expect(state.rawQuery == query, "query of \(uri)")
        }
    }

    @Test("header names fold ASCII letters only, and the case-insensitive compare needs equal lengths")
    func asciiFolding() {
        #expect(ASCII.equalsIgnoringCase("Content-Length", "content-length"))
        #expect(ASCII.equalsIgnoringCase("CACHE-CONTROL", "cache-control"))
        #expect(!ASCII.equalsIgnoringCase("Cache-Controls", "cache-control"))
        #expect(!ASCII.equalsIgnoringCase("Cache_Control", "cache-control"))
        #expect(!ASCII.equalsIgnoringCase("", "date"))
        #expect(ASCII.equalsIgnoringCase("Date", "date"))
        // '[' and '@' sit next to the letters: they must not be folded.
        #expect(!ASCII.equalsIgnoringCase("[", "{"))
        #expect(!ASCII.equalsIgnoringCase("@", "`"))
        "X-Trace-ÄB@[Z".withCString { #expect(ASCII.lowercasedString($0) == "x-trace-Äb@[z") }
    }

    @Test("path segments with and without escapes decode alike; a bad escape is refused")
    func segments() {
        #expect(Router.decodeSegments("/api/runs/r1") == ["api", "runs", "r1"])
        #expect(Router.decodeSegments("/api/runs/r%201") == ["api", "runs", "r 1"])
        #expect(Router.decodeSegments("/a+b/é//") == ["a+b", "é", "", ""])
        #expect(Router.decodeSegments("/") == [""])
        #expect(Router.decodeSegments("/a/%zz") == nil)
        #expect(Router.decodeSegments("/a/%FF") == nil)
        #expect(Router.decodeSegments("relative") == nil)
    }

    @Test("headers a handler sets that libmicrohttpd owns are dropped in any case; its Cache-Control is kept")
    func ownedHeaders() throws {
        let fixture = try ServerFixture { router in
            router.get("/h") { _ in
                Response(status: 200, headers: [("CONTENT-LENGTH", "999"), ("connection", "close"), ("DaTe", "x"),
                                                ("Cache-CONTROL", "max-age=5"), ("Content-Type", "text/plain")],
                         body: Array("hi".utf8))
            }
        }
        let connection = try fixture.connect()
        let reply = try connection.request("GET", "/h")
        #expect(reply.status == 200)
        #expect(reply.text == "hi")
        #expect(reply.header("content-length") == "2")
        #expect(reply.header("cache-control") == "max-age=5")
        #expect(reply.header("date") != "x")
        #expect(try connection.request("GET", "/healthz").status == 200, "the connection stays open")
    }
}
