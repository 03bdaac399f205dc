@testable import FlowFetch
import Foundation
import Synchronization
import Testing

/// The transport seam: HTTPBackend through a given transport, and how a custom CA is trusted.
@Suite("HTTP transport seam")
struct HTTPTransportTests {
    /// Answers every exchange with `reply` and keeps what it was asked.
    final class ScriptedTransport: HTTPTransport {
        let reply: @Sendable (HTTPExchange) -> Result<HTTPAnswer, HTTPTransportFailure>
        let asked = Mutex<[(exchange: HTTPExchange, timeout: Double, maxBodyBytes: Int)]>([])
        init(_ reply: @escaping @Sendable (HTTPExchange) -> Result<HTTPAnswer, HTTPTransportFailure>) { self.reply = reply }
        func perform(_ exchange: HTTPExchange, timeout: Double, maxBodyBytes: Int) async -> Result<HTTPAnswer, HTTPTransportFailure> {
            asked.withLock { $0.append((exchange, timeout, maxBodyBytes)) }
            return reply(exchange)
        }
    }

    static let audience = Array(#"{"placementId":"main","audience":{"name":"All Users","versionId":"av"},"variations":[{"id":"v-A","weight":100}],"createdAt":0}"#.utf8)

    @Test("HTTPBackend sends each request through a given transport: method, URL, headers, timeout and cap")
    func requestsGoThroughTheTransport() async throws {
        let transport = ScriptedTransport { _ in .success(HTTPAnswer(status: 200, body: Self.audience)) }
        let backend = try HTTPBackend(baseURL: URL(string: "http://backend.test:8080")!, transport: transport,
                                      maxBodyBytes: 1000, timeoutMargin: 0.5)
        let done = await backend.send(RequestSpec(kind: .targeted, placement: "main", profileId: "user 42", timeout: 2))
        guard case .success(.audience(let payload)) = done.result else { Issue.record("expected an audience, got \(done.result)"); return }
        #expect(payload.placementId == "main")
        let asked = transport.asked.withLock { $0 }
        #expect(asked.count == 1)
        #expect(asked.first?.exchange.method == "GET")
        #expect(asked.first?.exchange.url.absoluteString == "http://backend.test:8080/v1/placements/main/audience")
        #expect(asked.first?.exchange.headers.first { $0.0 == "X-Profile-Id" }?.1 == "user 42")
        #expect(asked.first?.exchange.headers.first { $0.0 == "Accept" }?.1 == "application/json")
        #expect(asked.first?.timeout == 2.5)
        #expect(asked.first?.maxBodyBytes == 1000)
    }

    @Test("a transport's failures become the engine's request failures", arguments: [
        ("refused", RequestFailure.transport(reason: "refused")), ("tls", .transport(reason: "tls")),
        ("timeout", .transport(reason: "timeout")), ("cancelled", .cancelled), ("protocol", .transport(reason: "reset")),
        ("toolarge", .malformed(reason: "body over 1000 bytes")),
    ])
    func failuresMap(reason: String, expected: RequestFailure) async throws {
        let detail = reason == "toolarge" ? "body over 1000 bytes" : "detail"
        let transport = ScriptedTransport { _ in .failure(HTTPTransportFailure(reason: reason, detail: detail)) }
        let backend = try HTTPBackend(baseURL: URL(string: "https://backend.test")!, transport: transport, maxBodyBytes: 1000)
        let done = await backend.send(RequestSpec(kind: .default, placement: "main", profileId: "u", timeout: 1))
        #expect(done.result == .failure(expected))
    }

    @Test("a CA file and a transport together are refused: one decides how https is trusted")
    func caFileAndTransport() throws {
        let transport = ScriptedTransport { _ in .success(HTTPAnswer(status: 200, body: [])) }
        #expect(throws: HTTPBackendError(caFile: "/etc/hostname", "give a CA file or a transport, not both")) {
            try HTTPBackend(baseURL: URL(string: "https://backend.test")!, caFile: "/etc/hostname", transport: transport)
        }
    }

    @Test("with nothing installed, a custom CA is trusted through URLSession on Apple platforms and refused on Linux naming FlowTLS")
    func customCAWithoutAnInstalledTransport() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("flowscope-ca-\(UInt64.random(in: 0...UInt64.max))").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try Self.pem.write(toFile: dir + "/ca.pem", atomically: true, encoding: .utf8)
        #if canImport(Security)
        #expect(throws: Never.self) { try CustomCATransport.make(caFile: dir + "/ca.pem", using: nil) }
        #else
        do {
            _ = try CustomCATransport.make(caFile: dir + "/ca.pem", using: nil)
            Issue.record("expected an error: URLSession on Linux cannot trust a custom CA")
        } catch {
            #expect(error.message.contains("link the FlowTLS library and call TLSTransport.install()"), "\(error.message)")
        }
        #endif
    }

    @Test("an installed custom-CA factory is what CustomCATransport makes, given the CA file")
    func installedFactoryIsUsed() throws {
        let made = Mutex<[String]>([])
        let factory: CustomCATransport.Factory = { caFile throws(HTTPBackendError) in
            made.withLock { $0.append(caFile) }
            return ScriptedTransport { _ in .success(HTTPAnswer(status: 204, body: [])) }
        }
        let transport = try CustomCATransport.make(caFile: "/some/ca.pem", using: factory)
        #expect(transport is ScriptedTransport)
        #expect(made.withLock { $0 } == ["/some/ca.pem"])
    }

    /// A certificate in PEM (any DER bytes will do for parsing): two blocks, with text around them.
    static let pem = """
    subject=CN=localhost
    -----BEGIN CERTIFICATE-----
    AAECAwQF
    BgcI
    -----END CERTIFICATE-----
    junk
    -----BEGIN PRIVATE KEY-----
    CQoL
    -----END PRIVATE KEY-----
    -----BEGIN CERTIFICATE-----
    /w==
    -----END CERTIFICATE-----

    """

    @Test("PEM reading finds every CERTIFICATE block, decodes it, and skips keys and text")
    func pemCertificates() {
        #expect(PEM.certificates(in: Self.pem) == [[0, 1, 2, 3, 4, 5, 6, 7, 8], [0xFF]])
        #expect(PEM.certificates(in: "no certificate here").isEmpty)
        #expect(PEM.certificates(in: "-----BEGIN CERTIFICATE-----\nAAEC").isEmpty)
    }

    @Test("URLSession errors map to transport reasons; App Transport Security's -1022 is 'ats', not a generic failure")
    func urlErrorsMapToTransportReasons() {
        #expect(HTTPBackend.failure(for: URLError(.appTransportSecurityRequiresSecureConnection)) == .transport(reason: "ats"))
        #expect(URLError.Code.appTransportSecurityRequiresSecureConnection.rawValue == -1022)
        #expect(HTTPBackend.failure(for: URLError(.cannotConnectToHost)) == .transport(reason: "refused"))
        #expect(HTTPBackend.failure(for: URLError(.serverCertificateUntrusted)) == .transport(reason: "tls"))
        #expect(HTTPBackend.failure(for: URLError(.notConnectedToInternet)) == .transport(reason: "offline"))
        #expect(HTTPBackend.failure(for: URLError(.cancelled)) == .cancelled)
    }

    @Test("a CA file that cannot be read is named with the reason: missing, a directory, unreadable")
    func unreadableCAFilesAreNamed() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("flowscope-ca-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(AtomicFile.readProblem(dir + "/missing.pem") == "no such file or directory")
        #expect(AtomicFile.readProblem(dir) == "is a directory")
        try AtomicFile.write(Array("x".utf8), to: dir + "/ca.pem")
        #expect(AtomicFile.readProblem(dir + "/ca.pem") == nil)
    }
}
