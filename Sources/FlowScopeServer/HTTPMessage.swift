import FlowJSON

/// One HTTP request as a route handler sees it.
public struct Request: Sendable {
    /// `GET`, `POST`, ... (`HEAD` is routed as `GET`; the server omits the body).
    public var method: String
    /// The path, percent-decoded, without the query: `/api/runs/r 1`.
    public var path: String
    /// The path exactly as sent (still percent-encoded), without the query.
    public var rawPath: String
    /// Query parameters in order, percent-decoded (`+` is a space).
    public var queryItems: [(name: String, value: String)]
    /// The query exactly as sent (still percent-encoded), without `?`; empty without one.
    public var rawQuery: String
    /// Header fields with lowercased names; repeated fields are joined with `, `.
    public var headers: [String: String]
    /// The request body (at most `ServerLimits.maxBodyBytes`).
    public var body: [UInt8]
    /// The client's IP address as text (`127.0.0.1`, `::1`).
    public var remoteAddress: String
    /// Values of `{name}` segments of the matched route pattern.
    public var pathParameters: [String: String]

    /// A request; the server builds these, tests may too.
    public init(method: String, path: String, rawPath: String? = nil,
                queryItems: [(name: String, value: String)] = [], rawQuery: String? = nil, headers: [String: String] = [:],
                body: [UInt8] = [], remoteAddress: String = "127.0.0.1", pathParameters: [String: String] = [:]) {
        self.method = method
        self.path = path
        self.rawPath = rawPath ?? path
        self.queryItems = queryItems
        // Without one given: the items, encoded again (what a test's request would have sent).
        self.rawQuery = rawQuery ?? queryItems.map { PercentEncoding.query($0.name) + "=" + PercentEncoding.query($0.value) }
            .joined(separator: "&")
        self.headers = headers
        self.body = body
        self.remoteAddress = remoteAddress
        self.pathParameters = pathParameters
    }

    /// A header field's value; the name is matched case-insensitively.
    public func header(_ name: String) -> String? { headers[name.lowercased()] }

    /// The first value of a query parameter.
    public func query(_ name: String) -> String? { queryItems.first { $0.name == name }?.value }

    /// A `{name}` path parameter.
    public func parameter(_ name: String) -> String? { pathParameters[name] }
}

/// One HTTP response: status, header fields and body.
///
/// The server adds the security headers (`Content-Security-Policy`, `X-Content-Type-Options`,
/// `Referrer-Policy`, ...) and `Cache-Control: no-store` when the handler set none.
public struct Response: Sendable {
    /// What the body is.
    public enum Body: Sendable {
        /// Fixed bytes.
        case bytes([UInt8])
        /// A Server-Sent Events stream from `hub`, kept open until the client leaves or the server stops.
        case eventStream(SSEHub)
    }

    /// The status code.
    public var status: Int
    /// Header fields in order.
    public var headers: [(name: String, value: String)]
    /// The body.
    public var body: Body

    /// A response with `body` bytes.
    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = .bytes(body)
    }

    /// A response with an explicit body kind.
    public init(status: Int, headers: [(name: String, value: String)], body: Body) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The first value of a header field (case-insensitive name).
    public func header(_ name: String) -> String? {
        let lower = name.lowercased()
        return headers.first { $0.name.lowercased() == lower }?.value
    }

    /// The body bytes; empty for a stream.
    public var bodyBytes: [UInt8] {
        if case .bytes(let bytes) = body { bytes } else { [] }
    }

    /// A JSON response (`application/json`).
    public static func json(_ value: JSONValue, status: Int = 200) -> Response {
        Response(status: status, headers: [("Content-Type", "application/json")], body: Array((value.jsonText + "\n").utf8))
    }

    /// A JSON response from text the caller already serialized.
    public static func jsonText(_ text: String, status: Int = 200) -> Response {
        Response(status: status, headers: [("Content-Type", "application/json")], body: Array(text.utf8))
    }

    /// A plain text response (`text/plain; charset=utf-8` unless another type is given).
    public static func text(_ text: String, status: Int = 200, contentType: String = "text/plain; charset=utf-8") -> Response {
        Response(status: status, headers: [("Content-Type", contentType)], body: Array(text.utf8))
    }

    /// The JSON error shape every 4xx/5xx uses: `{"error":{"message":"...","status":N}}`.
    public static func error(_ status: Int, _ message: String) -> Response {
        .json(["error": ["status": .number(Double(status)), "message": .string(message)]], status: status)
    }

    /// 405 with the `Allow` header listing what the path supports.
    public static func methodNotAllowed(allow: [String]) -> Response {
        var response = Response.error(405, "method not allowed; allowed: \(allow.joined(separator: ", "))")
        response.headers.append(("Allow", allow.joined(separator: ", ")))
        return response
    }

    /// 401 with a `WWW-Authenticate: Bearer` challenge.
    public static func unauthorized(_ message: String = "missing or invalid bearer token") -> Response {
        var response = Response.error(401, message)
        response.headers.append(("WWW-Authenticate", "Bearer realm=\"flowscope\""))
        return response
    }

    /// 429 with `Retry-After` in whole seconds (at least 1).
    public static func tooManyRequests(retryAfter seconds: Double) -> Response {
        let whole = max(1, Int(seconds.rounded(.up)))
        var response = Response.error(429, "too many requests; retry after \(whole) s")
        response.headers.append(("Retry-After", String(whole)))
        return response
    }

    /// 503 with `Retry-After` in whole seconds (at least 1), also given in the body as
    /// `{"error":{"status":503,"message":...,"retryAfter":N}}` for clients that cannot read headers.
    public static func serviceUnavailable(retryAfter seconds: Int, _ message: String) -> Response {
        let whole = max(1, seconds)
        var response = Response.json(["error": ["status": 503, "message": .string(message + "; retry after \(whole) s"),
                                                "retryAfter": .number(Double(whole))]], status: 503)
        response.headers.append(("Retry-After", String(whole)))
        return response
    }

    /// A Server-Sent Events stream from `hub`; `Last-Event-ID` of the request is honoured by the server.
    public static func eventStream(_ hub: SSEHub) -> Response {
        Response(status: 200, headers: [
            ("Content-Type", "text/event-stream; charset=utf-8"),
            ("Cache-Control", "no-cache"),
            ("X-Accel-Buffering", "no"),
        ], body: .eventStream(hub))
    }
}

/// The headers added to every response.
public enum SecurityHeaders {
    /// Only same-origin resources; no inline script or style; no framing; images may be data: URLs.
    public static let contentSecurityPolicy =
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        + "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

    /// Header fields in order.
    public static let fields: [(name: String, value: String)] = [
        ("Content-Security-Policy", contentSecurityPolicy),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Frame-Options", "DENY"),
        ("Cross-Origin-Resource-Policy", "same-origin"),
    ]
}
