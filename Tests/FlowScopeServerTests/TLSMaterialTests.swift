import Foundation
import TestSupport
import Testing
@testable import FlowScopeServer

@Suite("TLS material and token", .ownThread)
struct TLSMaterialTests {
    @Test("a first start generates a P-256 self-signed certificate with private file modes, and later starts reuse it")
    func generateAndReuse() throws {
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let state = dir + "/.flowscope"
        let first = try TLSMaterial.loadOrCreate(stateDir: state)
        #expect(first.certPath == state + "/tls/cert.pem")
        #expect(StateDirectory.mode(of: first.keyPath) == 0o600)
        #expect(StateDirectory.mode(of: state) == 0o700)
        #expect(StateDirectory.mode(of: state + "/tls") == 0o700)
        #expect(first.keyPEM.contains("BEGIN PRIVATE KEY"))
        let second = try TLSMaterial.loadOrCreate(stateDir: state)
        #expect(second == first)

        // The certificate as openssl sees it: EC P-256, SAN localhost/127.0.0.1/::1, same fingerprint.
        let text = try run("/usr/bin/openssl", ["x509", "-in", first.certPath, "-noout", "-text", "-fingerprint", "-sha256"])
        #expect(text.contains("prime256v1") || text.contains("P-256"))
        #expect(text.contains("DNS:localhost"))
        #expect(text.contains("IP Address:127.0.0.1"))
        #expect(text.contains("IP Address:0:0:0:0:0:0:0:1"))
        #expect(text.contains("Fingerprint=" + first.fingerprint))
        #expect(first.fingerprint.count == 32 * 3 - 1)
    }

    @Test("a generated certificate carries localhost, 127.0.0.1, ::1 and the hosts given (names and addresses), and nothing else")
    func hosts() throws {
        let plain = try TLSMaterial.generateSelfSigned()
        for host in ["localhost", "127.0.0.1", "::1"] { #expect(TLSMaterial.certificate(plain.certPEM, covers: host), "\(host)") }
        #expect(!TLSMaterial.certificate(plain.certPEM, covers: "buildbox.example"))
        let named = try TLSMaterial.generateSelfSigned(hosts: ["buildbox.example", "192.0.2.7", "2001:db8::1", "localhost"])
        for host in ["localhost", "127.0.0.1", "::1", "buildbox.example", "192.0.2.7", "2001:db8::1"] {
            #expect(TLSMaterial.certificate(named.certPEM, covers: host), "\(host)")
        }
        for host in ["other.example", "192.0.2.8", "example"] { #expect(!TLSMaterial.certificate(named.certPEM, covers: host), "\(host)") }
        #expect(throws: ServerFileError.self) { try TLSMaterial.generateSelfSigned(hosts: ["bad name"]) }
        #expect(sanEntry("a..b") == nil && sanEntry("") == nil && sanEntry("*.example.com") == "DNS:*.example.com")
    }

    @Test("a certificate renewed at start keeps the names it carried and adds the ones asked for")
    func renewalKeepsNames() throws {
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let expiring = try TLSMaterial.generateSelfSigned(days: 10, hosts: ["kept.example", "192.0.2.9"])
        #expect(TLSMaterial.namesCarried(by: expiring.certPEM) == ["localhost", "127.0.0.1", "0:0:0:0:0:0:0:1", "kept.example", "192.0.2.9"])
        try expiring.keyPEM.write(toFile: dir + "/key.pem", atomically: true, encoding: .utf8)
        try expiring.certPEM.write(toFile: dir + "/cert.pem", atomically: true, encoding: .utf8)
        let renewed = try TLSMaterial.loadOrCreate(tlsDirectory: dir, hosts: ["new.example"])
        #expect(renewed.certPEM != expiring.certPEM)
        for host in ["localhost", "::1", "kept.example", "192.0.2.9", "new.example"] {
            #expect(TLSMaterial.certificate(renewed.certPEM, covers: host), "\(host)")
        }
    }

    @Test("serve's certificate names: none beyond the defaults on loopback; the bind address, or the host name for 0.0.0.0 and ::")
    func hostsForBind() {
        #expect(TLSMaterial.hosts(forBind: "127.0.0.1").isEmpty && TLSMaterial.hosts(forBind: "::1").isEmpty
                && TLSMaterial.hosts(forBind: "localhost").isEmpty)
        #expect(TLSMaterial.hosts(forBind: "192.0.2.7") == ["192.0.2.7"])
        var name = [CChar](repeating: 0, count: 256)
        gethostname(&name, 255)
        let host = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        #expect(TLSMaterial.hosts(forBind: "0.0.0.0") == [host] && TLSMaterial.hosts(forBind: "::") == [host])
    }

    @Test("a configured TLS directory holds cert.pem and key.pem directly")
    func tlsDirectory() throws {
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let material = try TLSMaterial.loadOrCreate(tlsDirectory: dir + "/certs")
        #expect(material.certPath == dir + "/certs/cert.pem")
        #expect(material.keyPath == dir + "/certs/key.pem")
        #expect(StateDirectory.mode(of: dir + "/certs") == 0o700)
        #expect(try TLSMaterial.loadOrCreate(tlsDirectory: dir + "/certs") == material)
    }

    @Test("two generated certificates differ and their fingerprints differ")
    func distinct() throws {
        let a = try TLSMaterial.generateSelfSigned()
        let b = try TLSMaterial.generateSelfSigned()
        #expect(a.certPEM != b.certPEM)
        #expect(try TLSMaterial.fingerprint(ofPEM: a.certPEM) != TLSMaterial.fingerprint(ofPEM: b.certPEM))
    }

    @Test("a configured certificate that is missing, not PEM, or paired with another key is an error naming the file")
    func invalidConfigured() throws {
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let good = try TLSMaterial.loadOrCreate(stateDir: dir + "/a")
        let other = try TLSMaterial.loadOrCreate(stateDir: dir + "/b")

        let missing = #expect(throws: ServerFileError.self) { try TLSMaterial.load(certPath: dir + "/nope.pem", keyPath: good.keyPath) }
        #expect(missing?.path == dir + "/nope.pem")
        #expect(missing?.description.contains("file not found") == true)

        let garbage = dir + "/garbage.pem"
        try "hello, not a certificate\n".write(toFile: garbage, atomically: true, encoding: .utf8)
        let notPEM = #expect(throws: ServerFileError.self) { try TLSMaterial.load(certPath: garbage, keyPath: good.keyPath) }
        #expect(notPEM?.path == garbage)
        #expect(notPEM?.message.contains("PEM certificate") == true)

        let badKey = #expect(throws: ServerFileError.self) { try TLSMaterial.load(certPath: good.certPath, keyPath: garbage) }
        #expect(badKey?.path == garbage)

        let broken = dir + "/broken.pem"
        try "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".write(toFile: broken, atomically: true, encoding: .utf8)
        let unreadable = #expect(throws: ServerFileError.self) { try TLSMaterial.load(certPath: broken, keyPath: good.keyPath) }
        #expect(unreadable?.path == broken)

        let mismatch = #expect(throws: ServerFileError.self) { try TLSMaterial.load(certPath: good.certPath, keyPath: other.keyPath) }
        #expect(mismatch?.path == other.keyPath)
        #expect(mismatch?.message.contains("does not match") == true)

        let encrypted = dir + "/encrypted.pem"
        _ = try run("/usr/bin/openssl", ["pkey", "-in", good.keyPath, "-aes256", "-passout", "pass:secret", "-out", encrypted])
        let locked = #expect(throws: ServerFileError.self) { try TLSMaterial.load(certPath: good.certPath, keyPath: encrypted) }
        #expect(locked?.path == encrypted)
        #expect(locked?.message.contains("encrypted") == true)

        #expect(throws: Never.self) { try TLSMaterial.load(certPath: good.certPath, keyPath: good.keyPath) }
    }

    @Test("half a generated pair is reported, not silently replaced")
    func halfPair() throws {
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let material = try TLSMaterial.loadOrCreate(stateDir: dir)
        unlink(material.keyPath)
        let error = #expect(throws: ServerFileError.self) { try TLSMaterial.loadOrCreate(stateDir: dir) }
        #expect(error?.path == material.keyPath)
    }

    @Test("the token is 32 random bytes in hex, stored with mode 0600 and reused")
    func tokenFile() throws {
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let token = try AuthToken.loadOrCreate(stateDir: dir)
        #expect(token.value.count == 64)
        #expect(token.value.allSatisfy { $0.isHexDigit && !$0.isUppercase })
        #expect(token.path == dir + "/token")
        #expect(StateDirectory.mode(of: dir + "/token") == 0o600)
        #expect(try AuthToken.loadOrCreate(stateDir: dir) == token)
        #expect(try AuthToken.generate() != token.value)
        #expect(throws: ServerFileError.self) { try AuthToken(configured: "short") }
        #expect(try AuthToken(configured: "a-configured-token-123").path == nil)
    }

    @Test("the bearer check accepts exactly the token")
    func bearer() throws {
        let token = try AuthToken(configured: "0123456789abcdef0123")
        #expect(token.accepts(authorization: "Bearer 0123456789abcdef0123"))
        #expect(token.accepts(authorization: "bearer 0123456789abcdef0123"))
        #expect(!token.accepts(authorization: nil))
        #expect(!token.accepts(authorization: "Bearer 0123456789abcdef012"))
        #expect(!token.accepts(authorization: "Bearer 0123456789abcdef01234"))
        #expect(!token.accepts(authorization: "Bearer 0123456789abcdef0124"))
        #expect(!token.accepts(authorization: "Basic 0123456789abcdef0123"))
        #expect(!token.accepts(authorization: "0123456789abcdef0123"))
        #expect(AuthToken.constantTimeEquals([1, 2, 3], [1, 2, 3]))
        #expect(!AuthToken.constantTimeEquals([1, 2, 3], [1, 2, 4]))
        #expect(!AuthToken.constantTimeEquals([1, 2, 3], [1, 2, 3, 0]))
        #expect(!AuthToken.constantTimeEquals([], [0]))
    }
}

/// Timing of the token comparison: `.realTime`, so other tests' load cannot skew it.
@Suite("Token comparison timing (RealTime)", .realTime)
struct TokenTimingRealTimeTests {
    @Test("the comparison takes the same time whether the first or the last byte differs")
    func constantTime() throws {
        let secret = [UInt8](repeating: 0x61, count: 4096)
        var early = secret
        early[0] = 0x62
        var late = secret
        late[4095] = 0x62
        func measure(_ other: [UInt8]) -> Duration {
            let clock = ContinuousClock()
            var best = Duration.seconds(1)
            for _ in 0..<40 {
                let start = clock.now
                for _ in 0..<20 { _ = AuthToken.constantTimeEquals(secret, other) }
                best = min(best, clock.now - start)
            }
            return best
        }
        _ = measure(early)
        let a = measure(early)
        let b = measure(late)
        let ratio = Double(a.components.attoseconds) / Double(max(b.components.attoseconds, 1))
        // An early-exit compare would make `a` hundreds of times faster than `b`.
        #expect(ratio > 0.25 && ratio < 4.0, "early \(a), late \(b)")
    }
}

/// Runs a tool and returns what it printed (standard output and error).
func run(_ tool: String, _ arguments: [String]) throws -> String { try runProgram(tool, arguments).output }
