import FlowJSON

/// Maps method and path to a handler, and applies the access policy, rate limits and error shapes.
///
/// Patterns are literal segments and `{name}` parameters: `/api/runs/{id}` matches `/api/runs/r1` with
/// `request.parameter("id") == "r1"`. Routes are tried in registration order; the first match wins.
/// `GET` routes also answer `HEAD`. `GET /healthz` is built in and never needs the token.
/// Handlers run synchronously on the server's worker threads, so they must be quick.
///
/// ```swift
/// var router = Router()
/// router.get("/api/runs/{id}") { request in .json(["id": .string(request.parameter("id") ?? "")]) }
/// router.post("/api/ingest", requiresToken: true, rateLimit: limiter) { request in .json(["accepted": 1], status: 202) }
/// router.serveStatic(try StaticFiles(root: "web"))
/// ```
public struct Router: Sendable {
    /// What a route runs: one request in, one response out, on a server thread.
    public typealias Handler = @Sendable (Request) -> Response

    struct Route: Sendable {
        enum Segment: Sendable, Equatable {
            case literal(String)
            case parameter(String)
        }
        var method: String
        var segments: [Segment]
        var requiresToken: Bool
        var isPublic: Bool
        var rateLimit: RateLimiter?
        var handler: Handler

        func match(_ path: [String]) -> [String: String]? {
            guard path.count == segments.count else { return nil }
            var parameters: [String: String] = [:]
            for (segment, value) in zip(segments, path) {
                switch segment {
                case .literal(let literal): guard literal == value else { return nil }
                case .parameter(let name):
                    guard !value.isEmpty else { return nil }
                    parameters[name] = value
                }
            }
            return parameters
        }
    }

    private var routes: [Route] = []
    private var staticFiles: StaticFiles?

    /// A router with only `GET /healthz`.
    public init() {
        routes.append(Route(method: "GET", segments: Self.parse(pattern: "/healthz"), requiresToken: false,
                            isPublic: true, rateLimit: nil, handler: { _ in
                                Response(status: 200, headers: [("Content-Type", "application/json")], body: Self.healthBody)
                            }))
    }

    /// The body of `GET /healthz`: the fixed text `Response.json(["status": "ok"])` would serialise.
    static let healthBody: [UInt8] = Array("{\"status\":\"ok\"}\n".utf8)

    /// Makes `GET /healthz` ask `downSinks` each time: while it names sinks, the answer is
    /// `{"status":"degraded","down":["otlp"]}` (still 200: the server itself serves), else
    /// `{"status":"ok"}`. Only names are told, never errors, since the route needs no token.
    public mutating func health(downSinks: @escaping @Sendable () -> [String]) {
        routes.removeAll { $0.isPublic }
        routes.append(Route(method: "GET", segments: Self.parse(pattern: "/healthz"), requiresToken: false,
                            isPublic: true, rateLimit: nil, handler: { _ in
                                let down = downSinks()
                                guard !down.isEmpty else {
                                    return Response(status: 200, headers: [("Content-Type", "application/json")], body: Self.healthBody)
                                }
                                return .json(["status": "degraded", "down": .array(down.map { .string($0) })])
                            }))
    }

    /// Adds a `GET` (and `HEAD`) route.
    public mutating func get(_ pattern: String, requiresToken: Bool = false, rateLimit: RateLimiter? = nil,
                             _ handler: @escaping Handler) {
        add(method: "GET", pattern, requiresToken: requiresToken, rateLimit: rateLimit, handler)
    }

    /// Adds a `POST` route; ingest-like routes pass `requiresToken: true`.
    public mutating func post(_ pattern: String, requiresToken: Bool = false, rateLimit: RateLimiter? = nil,
                              _ handler: @escaping Handler) {
        add(method: "POST", pattern, requiresToken: requiresToken, rateLimit: rateLimit, handler)
    }

    /// Adds a route for any method (upper case).
    public mutating func add(method: String, _ pattern: String, requiresToken: Bool = false, rateLimit: RateLimiter? = nil,
                             _ handler: @escaping Handler) {
        routes.append(Route(method: method.uppercased(), segments: Self.parse(pattern: pattern),
                            requiresToken: requiresToken, isPublic: false, rateLimit: rateLimit, handler: handler))
    }

    /// Serves files from `files` for `GET`/`HEAD` requests that no route matches.
    public mutating func serveStatic(_ files: StaticFiles) {
        staticFiles = files
    }

    /// Answers `request`: decodes the path, finds the route, checks the token under `policy`,
    /// applies the route's rate limit, then runs the handler. Errors get the JSON error shape.
    ///
    /// With `login` (off loopback, see ``BrowserLogin``): a `GET` with `?token=` is a browser login
    /// (303 with the cookie, or 401), and the login's cookie authorises `GET` and `HEAD` requests as
    /// the bearer token does, except on routes that require the token.
    public func respond(to request: Request, token: AuthToken?, policy: AccessPolicy, login: BrowserLogin? = nil) -> Response {
        var request = request
        request.rawPath = Self.originForm(request.rawPath)
        guard request.rawPath.hasPrefix("/") else {
            return .error(400, "request target \(Self.preview(request.rawPath)): expected a path starting with /")
        }
        guard let segments = Self.decodeSegments(request.rawPath) else {
            return .error(400, "malformed percent-encoding in the path")
        }
        request.path = "/" + segments.joined(separator: "/")
        let method = request.method == "HEAD" ? "GET" : request.method
        if policy == .tokenEverywhere, method == "GET", let presented = request.query("token") {
            guard let login else { return .unauthorized("invalid token in the URL") }
            return login.login(request, presented: presented)
        }
        let resolution = resolve(method: method, segments: segments)
        let authorized = token?.accepts(authorization: request.header("authorization")) ?? false
        let cookie = method == "GET" && (login?.accepts(cookieHeader: request.header("cookie")) ?? false)
        if case .route(let route, _) = resolution, route.isPublic {
            // /healthz: open under every policy.
        } else if policy == .tokenEverywhere && !authorized && !cookie {
            return .unauthorized()
        }
        switch resolution {
        case .notFound:
            if method == "GET", let staticFiles { return staticFiles.response(for: request) }
            return .error(404, "no such resource: \(request.path)")
        case .methodNotAllowed(let allow):
            return .methodNotAllowed(allow: allow)
        case .route(let route, let parameters):
            if route.requiresToken && !authorized { return .unauthorized() }
            if let limiter = route.rateLimit, case .limited(let retryAfter) = limiter.take(key: request.remoteAddress) {
                return .tooManyRequests(retryAfter: retryAfter)
            }
            request.pathParameters = parameters
            return route.handler(request)
        }
    }

    /// Whether a request must carry the token before its body is read (the server rejects early).
    func needsToken(method: String, rawPath: String, policy: AccessPolicy) -> Bool {
        guard let segments = Self.decodeSegments(Self.originForm(rawPath)) else { return policy == .tokenEverywhere }
        let resolution = resolve(method: method == "HEAD" ? "GET" : method, segments: segments)
        if case .route(let route, _) = resolution {
            return !route.isPublic && (route.requiresToken || policy == .tokenEverywhere)
        }
        return policy == .tokenEverywhere
    }

    enum Resolution {
        case route(Route, [String: String])
        case methodNotAllowed([String])
        case notFound
    }

    func resolve(method: String, segments: [String]) -> Resolution {
        var allowed: [String] = []
        for route in routes {
            guard let parameters = route.match(segments) else { continue }
            if route.method == method { return .route(route, parameters) }
            if !allowed.contains(route.method) { allowed.append(route.method) }
        }
        if allowed.isEmpty { return .notFound }
        if allowed.contains("GET") && !allowed.contains("HEAD") { allowed.insert("HEAD", at: allowed.firstIndex(of: "GET")! + 1) }
        return .methodNotAllowed(allowed)
    }

    static func parse(pattern: String) -> [Route.Segment] {
        pattern.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map { part in
            if part.hasPrefix("{") && part.hasSuffix("}") && part.count > 2 {
                return .parameter(String(part.dropFirst().dropLast()))
            }
            return .literal(String(part))
        }
    }

    /// The path's segments after the leading `/`, each percent-decoded; nil when malformed.
    /// The path of an absolute-form target (`http://host/path`, as a proxy sends it; RFC 9112 3.2.2),
    /// which a server must accept; any other target as it is.
    static func originForm(_ target: String) -> String {
        for scheme in ["http://", "https://"] where target.utf8.count > scheme.utf8.count
            && target.prefix(scheme.count).lowercased() == scheme {
            let rest = target.dropFirst(scheme.count)
            return rest.firstIndex(of: "/").map { String(rest[$0...]) } ?? "/"
        }
        return target
    }

    /// At most 40 characters of a request target, for an error message.
    private static func preview(_ target: String) -> String {
        target.count > 40 ? String(target.prefix(40)) + "..." : target
    }

    static func decodeSegments(_ rawPath: String) -> [String]? {
        guard rawPath.hasPrefix("/") else { return nil }
        var segments: [String] = []
        for part in rawPath.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).dropFirst() {
            // Without an escape the segment is already its decoded text (split at an ASCII byte of valid UTF-8).
            if !part.contains(UInt8(ascii: "%")) {
                segments.append(String(Substring(part)))
                continue
            }
            guard let decoded = PercentDecoding.decode(part, plusIsSpace: false) else { return nil }
            segments.append(decoded)
        }
        return segments
    }
}

/// Percent-decoding of URL paths and query strings.
public enum PercentDecoding {
    /// Decodes `%XX` escapes (and `+` as a space when `plusIsSpace`); nil for a bad escape or invalid UTF-8.
    public static func decode<Bytes: Collection<UInt8>>(_ bytes: Bytes, plusIsSpace: Bool) -> String? {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index != bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                let first = bytes.index(after: index)
                guard first != bytes.endIndex else { return nil }
                let second = bytes.index(after: first)
                guard second != bytes.endIndex, let high = hexValue(bytes[first]), let low = hexValue(bytes[second]) else {
                    return nil
                }
                out.append(high << 4 | low)
                index = bytes.index(after: second)
                continue
            }
            out.append(plusIsSpace && byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
            index = bytes.index(after: index)
        }
        return String(validating: out, as: UTF8.self)
    }

    /// Splits `a=1&b=x%20y` into decoded pairs; nil when an escape is malformed.
    public static func queryItems(_ query: String) -> [(name: String, value: String)]? {
        var items: [(name: String, value: String)] = []
        for pair in query.utf8.split(separator: UInt8(ascii: "&")) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = decode(parts[0], plusIsSpace: true) else { return nil }
            let value = parts.count > 1 ? decode(parts[1], plusIsSpace: true) : ""
            guard let value else { return nil }
            items.append((name, value))
        }
        return items
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// Percent-encoding of query components.
enum PercentEncoding {
    private static let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8)

    /// `text` with every byte but the unreserved ones (RFC 3986) as `%XX`.
    static func query(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            if unreserved.contains(byte) { out.unicodeScalars.append(UnicodeScalar(byte)) } else { out += "%" + hexByte(byte, uppercase: true) }
        }
        return out
    }
}
