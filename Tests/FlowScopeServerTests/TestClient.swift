import COpenSSL
import Foundation
import TestSupport
@testable import FlowScopeServer

/// A private temporary directory, removed by `cleanup()`.
func makeTemporaryDirectory() -> String {
    var template = Array((NSTemporaryDirectory() + "/flowscope-server-XXXXXX").utf8CString)
    let path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
    return path
}

func removeDirectory(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}

/// A running server on 127.0.0.1 with a fresh state directory.
final class ServerFixture {
    let dir: String
    let tls: TLSMaterial
    let token: AuthToken
    let server: HTTPSServer
    var port: Int { server.port }

    /// `policy`: another access policy than the bind address's (the off-loopback one on 127.0.0.1).
    init(bind: String = "127.0.0.1", port: Int = 0, limits: ServerLimits = ServerLimits(connectionTimeoutSeconds: 10),
         insecure: Bool = false, policy: AccessPolicy? = nil, router configure: (inout Router) -> Void = { _ in }) throws {
        dir = makeTemporaryDirectory()
        tls = try TLSMaterial.loadOrCreate(stateDir: dir)
        token = try AuthToken.loadOrCreate(stateDir: dir)
        var router = Router()
        configure(&router)
        var config = ServerConfig(bind: bind, port: port, tls: tls, insecureHTTP: insecure, token: token, limits: limits)
        config.policyForTesting = policy
        server = try HTTPSServer(config: config, router: router)
        try server.start()
    }

    func connect(tls: Bool = true) throws -> TestConnection {
        try TestConnection(host: server.config.bind, port: port, tls: tls)
    }

    deinit {
        server.stop()
        removeDirectory(dir)
    }
}
