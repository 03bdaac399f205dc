import COpenSSL
import Foundation
import TestSupport
import Testing
@testable import FlowScopeServer

@Suite("TLS policy: AEAD suites only, a generated certificate of exactly 397 days, renewed near expiry", .ownThread)
struct TLSPolicyTests {
    @Test("TLS 1.2 clients offering only CBC or static-RSA suites are refused; ECDHE with AES-GCM or ChaCha20-Poly1305 is served")
    func aeadOnly() throws {
        let fixture = try ServerFixture()
        let v12 = Int(TLS1_2_VERSION)
        for cbc in ["ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384", "ECDHE-ECDSA-AES128-SHA", "AES128-SHA256", "AES128-GCM-SHA256"] {
            #expect(throws: ClientError.self, "\(cbc) was accepted") {
                _ = try TestConnection(port: fixture.port, maxTLSVersion: v12, ciphers: cbc)
            }
        }
        for aead in ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305"] {
            let connection = try TestConnection(port: fixture.port, maxTLSVersion: v12, ciphers: aead)
            #expect(connection.cipherName == aead)
            #expect(try connection.request("GET", "/healthz").status == 200)
        }
        #expect(try TestConnection(port: fixture.port).tlsVersion == "TLSv1.3")

        // Control: the same CBC client is served by GnuTLS's NORMAL priorities, so the refusal above
        // is the default priority string at work.
        let permissive = try HTTPSServer(config: ServerConfig(port: 0, tls: fixture.tls, tlsPriorities: "NORMAL"), router: Router())
        try permissive.start()
        defer { permissive.stop() }
        #expect(try TestConnection(port: permissive.port, maxTLSVersion: v12, ciphers: "ECDHE-ECDSA-AES128-SHA").cipherName
                == "ECDHE-ECDSA-AES128-SHA")
    }

    @Test("a generated certificate is valid from one hour before generation for exactly 397 days in total")
    func validity() throws {
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let before = Int(Date().timeIntervalSince1970)
        let material = try TLSMaterial.loadOrCreate(tlsDirectory: dir + "/tls")
        let after = Int(Date().timeIntervalSince1970)
        let cert = try X509Box(pem: material.certPEM, path: material.certPath)
        var days: Int32 = 0, seconds: Int32 = 0
        try #require(ASN1_TIME_diff(&days, &seconds, X509_get0_notBefore(cert.raw), X509_get0_notAfter(cert.raw)) == 1)
        #expect(days == 397 && seconds == 0, "notAfter - notBefore = \(days) days \(seconds) s")
        var notBefore = tm()
        try #require(ASN1_TIME_to_tm(X509_get0_notBefore(cert.raw), &notBefore) == 1)
        let start = timegm(&notBefore)
        #expect(start >= before - 3600 && start <= after - 3600, "notBefore \(start), generated between \(before) and \(after)")
        let left = try TLSMaterial.secondsUntilExpiry(ofPEM: material.certPEM)
        #expect(left <= 397 * 86_400 - 3600 && left > 397 * 86_400 - 3600 - 60, "\(left) s")
        let text = try run("/usr/bin/openssl", ["x509", "-in", material.certPath, "-noout", "-checkend", "\(397 * 86_400)"])
        #expect(text.contains("will expire"), "\(text)")
    }

    @Test("a generated certificate with under 30 days left is replaced at start; one with more is kept")
    func renewal() throws {
        let dir = makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        for (days, renewed) in [(10, true), (29, true), (31, false), (200, false)] {
            let tls = "\(dir)/tls-\(days)"
            try FileManager.default.createDirectory(atPath: tls, withIntermediateDirectories: true)
            let old = try TLSMaterial.generateSelfSigned(days: days)
            try old.certPEM.write(toFile: tls + "/cert.pem", atomically: true, encoding: .utf8)
            try old.keyPEM.write(toFile: tls + "/key.pem", atomically: true, encoding: .utf8)
            let loaded = try TLSMaterial.loadOrCreate(tlsDirectory: tls)
            #expect((loaded.certPEM != old.certPEM) == renewed, "\(days) days left")
            #expect(try String(contentsOfFile: tls + "/cert.pem", encoding: .utf8) == loaded.certPEM)
            if renewed {
                #expect(try TLSMaterial.secondsUntilExpiry(ofPEM: loaded.certPEM) > 396 * 86_400)
                #expect(StateDirectory.mode(of: tls + "/key.pem") == 0o600)
            }
        }
    }
}
