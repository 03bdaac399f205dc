import COpenSSL
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How a browser reaches a server bound off loopback, where every route but `/healthz` needs the
/// token: opening any page with `?token=<token>` once sets a cookie that authorises the browser's
/// reads from then on.
///
/// - `GET /?token=<token>` (any `GET` path): the token is compared in constant time; when it is right,
///   the answer is `303 See Other` to the same URL without `token`, with
///   `Set-Cookie: __Host-flowscope-<port>=<value>; Path=/; HttpOnly; Secure; SameSite=Strict`.
///   A wrong token gets 401 (JSON).
/// - The cookie's value is not the token: it is HMAC-SHA256 of the token under a key drawn at random
///   when the server starts (never stored), as 64 hex digits. It cannot be turned back into the
///   token, even a short configured one, nor sent as `Authorization`; it is valid until the server
///   stops (a restart, or a new token, ends every login: open the URL again).
/// - The cookie authorises `GET` and `HEAD` (the page, its assets, the API's reads and the event
///   stream); routes that always need the token (ingest) still need `Authorization: Bearer`.
/// - The cookie has no expiry: the browser forgets it when it ends its session. The name carries the
///   port because cookies do not keep ports apart: two servers on one host each have their own.
///
/// Bound to loopback there is no login: reads are open and `?token=` is not looked at.
public struct BrowserLogin: Sendable {
    /// The cookie's name: `__Host-flowscope-<port>` (the `__Host-` prefix makes browsers accept it
    /// only with `Secure`, `Path=/` and no `Domain`).
    public let cookieName: String
    /// The cookie's value: HMAC-SHA256 of the token under `key`, lowercase hex.
    let cookieValue: String
    private let token: AuthToken

    /// The login of a server on `port` guarded by `token`; `key` (32 random bytes unless given)
    /// signs the cookie and lives only in memory.
    public init(token: AuthToken, port: Int, key: [UInt8]? = nil) {
        self.token = token
        cookieName = "__Host-flowscope-\(port)"
        cookieValue = Self.derive(token.value, key: key ?? Self.randomKey())
    }

    static func randomKey() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    /// The `Set-Cookie` value of a successful login.
    public var setCookie: String { "\(cookieName)=\(cookieValue); Path=/; HttpOnly; Secure; SameSite=Strict" }

    /// Whether a `Cookie` header carries this login's cookie with the right value (compared in
    /// constant time).
    public func accepts(cookieHeader header: String?) -> Bool {
        guard let header else { return false }
        var found = false
        // `;` between cookies; `,` where a client sent several Cookie fields (joined with `, `; a
        // cookie value never holds a comma).
        for pair in header.split(whereSeparator: { $0 == ";" || $0 == "," }) {
            let trimmed = pair.drop { $0 == " " }
            guard let equals = trimmed.firstIndex(of: "="), trimmed[..<equals] == cookieName else { continue }
            let value = trimmed[trimmed.index(after: equals)...].trimmingSuffix(" ")
            if AuthToken.constantTimeEquals(Array(value.utf8), Array(cookieValue.utf8)) { found = true }
        }
        return found
    }

    /// The answer to a `GET` whose query has `token`: 303 to `request`'s URL without it, with the
    /// cookie, when `presented` is the token; 401 otherwise.
    func login(_ request: Request, presented: String) -> Response {
        guard AuthToken.constantTimeEquals(Array(presented.utf8), Array(token.value.utf8)) else {
            return .unauthorized("invalid token in the URL")
        }
        return Response(status: 303, headers: [("Location", Self.location(of: request)), ("Set-Cookie", setCookie)])
    }

    /// `request`'s path and query (both as sent) without the `token` parameter. A path that a browser
    /// could read as another host's (`//host`, backslashes, or control characters and spaces, which
    /// browsers strip from a Location) or that holds anything but visible ASCII becomes `/`.
    static func location(of request: Request) -> String {
        let raw = request.rawPath
        let plain = raw.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7f && $0 != UInt8(ascii: "\\") }
        let path = plain && raw.hasPrefix("/") && !raw.hasPrefix("//") ? raw : "/"
        let kept = request.rawQuery.split(separator: "&").filter { pair in
            let name = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            return PercentDecoding.decode(name.utf8, plusIsSpace: true) != "token"
        }
        return kept.isEmpty ? path : path + "?" + kept.joined(separator: "&")
    }

    /// HMAC-SHA256 of `token` under `key`, as lowercase hex.
    static func derive(_ token: String, key: [UInt8]) -> String {
        let input = Array(token.utf8)
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        _ = HMAC(EVP_sha256(), key, Int32(key.count), input, input.count, &digest, &length)
        return digest.prefix(Int(length)).map { hexByte($0, uppercase: false) }.joined()
    }

    /// `https://<host>:<port>/?token=<token>`: the URL to open in a browser. `host` is the bind
    /// address, or this machine's host name for the unspecified addresses (`0.0.0.0`, `::`); the
    /// token is percent-encoded.
    public static func url(bind: String, port: Int, token: AuthToken) -> String {
        var host = bind
        if bind == "0.0.0.0" || bind == "::", let name = machineHostName() { host = name }
        if host.contains(":") { host = "[\(host)]" }
        return "https://\(host):\(port)/?token=\(PercentEncoding.query(token.value))"
    }
}

extension Substring {
    fileprivate func trimmingSuffix(_ character: Character) -> Substring {
        var s = self
        while s.last == character { s = s.dropLast() }
        return s
    }
}

/// This machine's host name (`gethostname`), nil when it has none.
func machineHostName() -> String? {
    var name = [CChar](repeating: 0, count: 256)
    guard gethostname(&name, name.count - 1) == 0, name[0] != 0 else { return nil }
    return String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
