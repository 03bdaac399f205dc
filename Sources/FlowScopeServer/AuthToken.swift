import COpenSSL

/// The bearer token that guards ingest (and, off loopback, every endpoint).
///
/// Unless one is configured, a token is generated at first start into `<stateDir>/token`
/// (mode 0600, 32 random bytes from `RAND_bytes` as 64 lowercase hex digits) and reused later.
public struct AuthToken: Sendable, Equatable {
    /// The token text clients send as `Authorization: Bearer <value>`.
    public let value: String
    /// The file it was read from or written to; nil for a configured token.
    public let path: String?

    /// The token file inside a state directory: `<stateDir>/token`.
    public static func path(stateDir: String) -> String { stateDir + "/token" }

    /// A configured token, used as is. It must be at least 16 characters of visible ASCII.
    public init(configured value: String) throws(ServerFileError) {
        guard Self.isWellFormed(value) else {
            throw ServerFileError(path: "server.auth.token",
                                  message: "expected at least 16 visible ASCII characters without spaces")
        }
        self.value = value
        self.path = nil
    }

    private init(value: String, path: String) {
        self.value = value
        self.path = path
    }

    /// Reads `<stateDir>/token`, generating it (and the directory, mode 0700) when absent.
    public static func loadOrCreate(stateDir: String = ".flowscope") throws(ServerFileError) -> AuthToken {
        let file = path(stateDir: stateDir)
        if StateDirectory.exists(file) {
            let text = try StateDirectory.readFile(file, what: "a token (one line of hex)")
            let trimmed = String(text.filter { !$0.isWhitespace })
            guard isWellFormed(trimmed) else {
                throw ServerFileError(path: file, message: "expected a token of at least 16 visible ASCII characters; delete the file to regenerate")
            }
            return AuthToken(value: trimmed, path: file)
        }
        try StateDirectory.create(stateDir)
        let value = try generate()
        try StateDirectory.writeFile(file, contents: value + "\n", mode: 0o600)
        return AuthToken(value: value, path: file)
    }

    /// 32 random bytes from OpenSSL's CSPRNG as 64 lowercase hex digits.
    public static func generate() throws(ServerFileError) -> String {
        var bytes = [UInt8](repeating: 0, count: 32)
        guard RAND_bytes(&bytes, Int32(bytes.count)) == 1 else {
            throw ServerFileError(path: "<token>", message: "RAND_bytes failed: \(OpenSSLFailure("RAND_bytes").detail)")
        }
        return bytes.map { hexByte($0, uppercase: false) }.joined()
    }

    /// Whether an `Authorization` header value carries this token (`Bearer <token>`, scheme case-insensitive).
    /// The token bytes are compared in constant time.
    public func accepts(authorization header: String?) -> Bool {
        guard let header else { return false }
        let bytes = Array(header.utf8)
        let scheme = Array("bearer ".utf8)
        guard bytes.count > scheme.count,
              zip(bytes.prefix(scheme.count), scheme).allSatisfy({ $0 | 0x20 == $1 | 0x20 }) else { return false }
        var presented = bytes[scheme.count...]
        while presented.first == 0x20 { presented = presented.dropFirst() }
        while presented.last == 0x20 { presented = presented.dropLast() }
        return Self.constantTimeEquals(Array(presented), Array(value.utf8))
    }

    /// Compares two byte strings in time that depends only on their lengths, not their contents.
    public static func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference = UInt(bitPattern: a.count ^ b.count)
        let count = max(a.count, b.count)
        for i in 0..<count {
            let x = i < a.count ? a[i] : 0
            let y = i < b.count ? b[i] : 0
            difference |= UInt(x ^ y)
        }
        return difference == 0
    }

    static func isWellFormed(_ value: String) -> Bool {
        value.utf8.count >= 16 && value.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }
}
