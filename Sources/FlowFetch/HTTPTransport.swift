import Foundation
import Synchronization

/// One HTTP request as a transport sends it.
public struct HTTPExchange: Sendable {
    /// `GET`, `POST`, ...
    public var method: String
    public var url: URL
    /// Header fields in order (the transport adds Host, Content-Length and Connection as it needs).
    public var headers: [(String, String)]
    public var body: [UInt8]

    public init(method: String, url: URL, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// A transport's answer: the status and the whole body.
public struct HTTPAnswer: Sendable, Equatable {
    public var status: Int
    public var body: [UInt8]
    public init(status: Int, body: [UInt8]) { self.status = status; self.body = body }
}

/// Why an exchange failed. `reason` is one of `refused`, `reset`, `dns`, `tls`, `offline`, `timeout`, `ats`,
/// `cancelled`, `toolarge`, `protocol` or `transport`; `detail` says more, for people.
public struct HTTPTransportFailure: Error, Sendable, Equatable {
    public var reason: String
    public var detail: String
    public init(reason: String, detail: String) { self.reason = reason; self.detail = detail }
}

/// Performs HTTP exchanges: the seam through which ``HTTPBackend`` and the test kit's attach send
/// https requests that must trust a custom CA. Cancelling the calling task ends the exchange.
public protocol HTTPTransport: Sendable {
    /// Sends `exchange`; gives up after `timeout` seconds; a body over `maxBodyBytes` fails as `toolarge`.
    func perform(_ exchange: HTTPExchange, timeout: Double, maxBodyBytes: Int) async -> Result<HTTPAnswer, HTTPTransportFailure>
}

/// The transport that trusts a custom CA (a PEM file of certificates) for https requests.
///
/// - Apple platforms: URLSession, answering the server-trust challenge against the file's
///   certificates only (built in).
/// - Linux: URLSession cannot trust a custom CA there (it never asks its delegate and takes no CA
///   setting), so a transport that can must be installed first: `TLSTransport.install()` from the
///   `FlowTLS` library (OpenSSL). The `flowscope` CLI installs it.
///
/// An installed transport wins on every platform.
public enum CustomCATransport {
    /// Makes a transport that trusts only the CA file it is given; throws for a file it cannot use.
    public typealias Factory = @Sendable (_ caFile: String) throws(HTTPBackendError) -> any HTTPTransport

    private static let installed = Mutex<Factory?>(nil)

    /// Makes `factory` the way custom CAs are trusted in this process (replacing any earlier one).
    public static func install(_ factory: @escaping Factory) {
        installed.withLock { $0 = factory }
    }

    /// Whether a transport was installed in this process.
    public static var isInstalled: Bool { installed.withLock { $0 != nil } }

    /// A transport that trusts only `caFile`. Throws, saying what to do, where this platform has none.
    public static func make(caFile: String) throws(HTTPBackendError) -> any HTTPTransport {
        try make(caFile: caFile, using: installed.withLock { $0 })
    }

    static func make(caFile: String, using factory: Factory?) throws(HTTPBackendError) -> any HTTPTransport {
        if let factory { return try factory(caFile) }
        #if canImport(Security)
        return try URLSessionCATransport(caFile: caFile)
        #else
        throw HTTPBackendError("URLSession on this platform cannot trust a custom CA: link the FlowTLS library and call "
                               + "TLSTransport.install() once before the first request (the flowscope CLI does)")
        #endif
    }
}

/// Reading certificates from PEM text.
public enum PEM {
    /// The DER bytes of every `CERTIFICATE` block in `text`, in order (none: empty).
    public static func certificates(in text: String) -> [[UInt8]] {
        let begin = "-----BEGIN CERTIFICATE-----", end = "-----END CERTIFICATE-----"
        var out: [[UInt8]] = []
        var rest = Substring(text)
        while let start = rest.range(of: begin), let stop = rest.range(of: end, range: start.upperBound..<rest.endIndex) {
            let base64 = rest[start.upperBound..<stop.lowerBound].filter { !$0.isWhitespace }
            if let der = Data(base64Encoded: String(base64)), !der.isEmpty { out.append(Array(der)) }
            rest = rest[stop.upperBound...]
        }
        return out
    }
}
