#if canImport(Security)
import Foundation
import Security

/// Apple platforms: URLSession that trusts only the certificates of one PEM file, by answering the
/// server-trust challenge against them (host name checked by the system's SSL policy). Linux has no
/// such hook (URLSession there never asks its delegate), so this is not built there; see
/// ``CustomCATransport``.
final class URLSessionCATransport: HTTPTransport {
    private let session: URLSession

    init(caFile: String) throws(HTTPBackendError) {
        guard let text = try? String(contentsOfFile: caFile, encoding: .utf8) else {
            throw HTTPBackendError("cannot read the file")
        }
        let anchors = PEM.certificates(in: text)
        guard !anchors.isEmpty else { throw HTTPBackendError("no PEM certificate in the file") }
        let config = URLSessionConfiguration.ephemeral
        config.requestCachePolicy = .reloadIgnoringLocalCacheData
        config.urlCache = nil
        config.httpCookieStorage = nil
        session = URLSession(configuration: config, delegate: AnchorTrust(anchors: anchors.map { Data($0) }), delegateQueue: nil)
    }

    deinit { session.invalidateAndCancel() }

    func perform(_ exchange: HTTPExchange, timeout: Double, maxBodyBytes: Int) async -> Result<HTTPAnswer, HTTPTransportFailure> {
        var request = URLRequest(url: exchange.url, timeoutInterval: timeout)
        request.httpMethod = exchange.method
        for (name, value) in exchange.headers { request.setValue(value, forHTTPHeaderField: name) }
        if !exchange.body.isEmpty { request.httpBody = Data(exchange.body) }
        do {
            let (data, response) = try await session.data(for: request)
            guard data.count <= maxBodyBytes else {
                return .failure(HTTPTransportFailure(reason: "toolarge", detail: "body over \(maxBodyBytes) bytes"))
            }
            return .success(HTTPAnswer(status: (response as? HTTPURLResponse)?.statusCode ?? 0, body: Array(data)))
        } catch {
            let reason: String
            switch HTTPBackend.failure(for: error) {
            // Not cancelled by the caller: the trust delegate refused the server's certificate.
            case .cancelled: reason = Task.isCancelled ? "cancelled" : "tls"
            case .transport(let r): reason = r
            default: reason = "transport"
            }
            return .failure(HTTPTransportFailure(reason: reason, detail: error.localizedDescription))
        }
    }
}

/// Answers server-trust challenges: trusted only when the chain ends at one of `anchors` (DER).
private final class AnchorTrust: NSObject, URLSessionDelegate, Sendable {
    let anchors: [Data]
    init(anchors: [Data]) { self.anchors = anchors }

    func urlSession(_ session: URLSession, didReceive challenge: URLAuthenticationChallenge) async
        -> (URLSession.AuthChallengeDisposition, URLCredential?) {
        guard challenge.protectionSpace.authenticationMethod == NSURLAuthenticationMethodServerTrust,
              let trust = challenge.protectionSpace.serverTrust else { return (.performDefaultHandling, nil) }
        let certificates = anchors.compactMap { SecCertificateCreateWithData(nil, $0 as CFData) }
        SecTrustSetAnchorCertificates(trust, certificates as CFArray)
        SecTrustSetAnchorCertificatesOnly(trust, true)
        var error: CFError?
        guard SecTrustEvaluateWithError(trust, &error) else { return (.cancelAuthenticationChallenge, nil) }
        return (.useCredential, URLCredential(trust: trust))
    }
}
#endif
