import FlowJSON
import Foundation
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The REST backend (docs/fetch-rules.md, "The backend protocol") over HTTP(S) with URLSession.
///
/// - targeted: `GET /v1/placements/{id}/audience` with `X-Profile-Id`; default: `.../audience/default`;
///   layout: `GET /v1/layouts/{id}?version=N`; profile: `GET /v1/profiles/{id}`; assets: their URL
///   (relative ones against the base URL), through the asset disk cache when one is given.
/// - 2xx with a valid body: success; 2xx otherwise (or a body over the cap): malformed; other statuses:
///   `http:NNN`; connection failures: transport (`refused`, `reset`, `dns`, `tls`, `offline`, `timeout`,
///   `ats`).
/// - The engine enforces each request's deadline by cancelling the task; cancellation cancels the
///   URLSession task, which closes its connection. The request's own timeout (`spec.timeout` plus a
///   margin) is only a safety net.
///
/// ```swift
/// let backend = try HTTPBackend(baseURL: URL(string: "http://127.0.0.1:8080")!)
/// let client = FlowClient(profile: Profile(id: "user-42"), backend: backend)
/// ```
public final class HTTPBackend: FlowBackend {
    /// Where the REST paths are resolved.
    public let baseURL: URL
    /// The largest response body accepted; a larger one is malformed.
    public let maxBodyBytes: Int
    /// Where downloaded images are kept (nil: not kept).
    public let assets: AssetDiskCache?
    /// Seconds added to a request's own timeout before URLSession gives up on it (the engine cuts it first).
    public let timeoutMargin: Double
    /// The PEM CA file https requests are verified against (nil: the system's trust store through URLSession).
    /// With a CA file, https requests go through ``CustomCATransport`` (on Linux that needs the FlowTLS library).
    public let caFile: String?
    /// What carries requests instead of URLSession: the custom-CA transport (https requests only) or the
    /// transport given to `init` (every request).
    private let transport: (any HTTPTransport)?
    private let transportTakesHTTP: Bool
    private let session: URLSession
    private let tasks: TaskTable
    private let gate = RequestGate(limit: HTTPBackend.maxConcurrentRequests)

    /// The most requests one backend has in flight at once; the others wait their turn in order
    /// (a cancelled one leaves the queue at once). The engine's deadlines run from each call's start,
    /// so a request that waits here still ends within its call's budget.
    public static let maxConcurrentRequests = 64

    /// A backend at `baseURL` (`http` or `https`). With `caFile` (PEM), https requests trust that CA
    /// only (through ``CustomCATransport``). With `transport`, every request goes through it instead
    /// of URLSession. Throws for a URL that has no scheme or host, an unreadable CA file, a CA file
    /// this platform cannot trust yet, both a CA file and a transport, or a URL URLSession cannot
    /// reach on this platform (``urlSessionProblem(for:)``) with neither. Errors about the CA file
    /// name it as `CA file PATH: ...` and carry it in ``HTTPBackendError/caFile``.
    public init(baseURL: URL, caFile: String? = nil, transport: (any HTTPTransport)? = nil, maxBodyBytes: Int = 4 * 1024 * 1024,
                assets: AssetDiskCache? = nil, timeoutMargin: Double = 1) throws(HTTPBackendError) {
        guard let scheme = baseURL.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = baseURL.host, !host.isEmpty else {
            throw HTTPBackendError("backend URL \(baseURL.absoluteString): expected http://host[:port] or https://host[:port]")
        }
        if let caFile {
            guard scheme == "https" else {
                throw HTTPBackendError(caFile: caFile, "applies to https:// backends only, not \(baseURL.absoluteString)")
            }
            if let problem = AtomicFile.readProblem(caFile) {
                throw HTTPBackendError(caFile: caFile, "cannot read the file: \(problem)")
            }
            guard transport == nil else { throw HTTPBackendError(caFile: caFile, "give a CA file or a transport, not both") }
            do throws(HTTPBackendError) {
                self.transport = try CustomCATransport.make(caFile: caFile)
            } catch {
                throw HTTPBackendError(caFile: caFile, error.message)
            }
        } else {
            if transport == nil, let problem = Self.urlSessionProblem(for: baseURL) {
                throw HTTPBackendError("backend URL \(baseURL.absoluteString): \(problem)")
            }
            self.transport = transport
        }
        transportTakesHTTP = caFile == nil
        self.caFile = caFile
        self.baseURL = baseURL
        self.maxBodyBytes = maxBodyBytes
        self.assets = assets
        self.timeoutMargin = timeoutMargin
        let table = TaskTable(maxBodyBytes: maxBodyBytes)
        self.tasks = table
        let config = URLSessionConfiguration.ephemeral
        config.requestCachePolicy = .reloadIgnoringLocalCacheData
        config.urlCache = nil
        config.httpCookieStorage = nil
        config.timeoutIntervalForResource = 600
        session = URLSession(configuration: config, delegate: table, delegateQueue: nil)
    }

    deinit { session.invalidateAndCancel() }

    /// The URL a request goes to (path segments percent-encoded), or nil when the spec lacks what its kind needs.
    public func url(for spec: RequestSpec) -> URL? {
        func rest(_ path: String, query: String? = nil) -> URL? {
            var base = baseURL.absoluteString
            while base.hasSuffix("/") { base.removeLast() }
            return URL(string: base + path + (query.map { "?" + $0 } ?? ""))
        }
        switch spec.kind {
        case .targeted:
            return spec.placement.flatMap { rest("/v1/placements/\(Self.segment($0))/audience") }
        case .default:
            return spec.placement.flatMap { rest("/v1/placements/\(Self.segment($0))/audience/default") }
        case .layout:
            return spec.layout.flatMap { rest("/v1/layouts/\(Self.segment($0.id))", query: "version=\($0.version)") }
        case .profile:
            return rest("/v1/profiles/\(Self.segment(spec.profileId))")
        case .asset:
            return spec.assetURL.flatMap { URL(string: $0, relativeTo: baseURL)?.absoluteURL }
        }
    }

    /// Why URLSession on this platform cannot carry requests to `url`, or nil when it can.
    ///
    /// Linux (swift-corelibs-foundation, up to at least Swift 6.3) fails every request to an IPv6
    /// address literal such as `http://[::1]:8080` with `badURL` before connecting, refused port or
    /// not (swift-corelibs-foundation issue 5496): URLSession and libcurl disagree on the host's
    /// brackets. Such a URL is refused up front with this text instead of failing each request as
    /// an unexplained transport error.
    public static func urlSessionProblem(for url: URL) -> String? {
        #if canImport(FoundationNetworking)
        guard let host = url.host, host.contains(":") else { return nil }
        return "URLSession on this platform cannot reach an IPv6 address literal (swift-corelibs-foundation "
            + "issue 5496): use a host name that resolves to it, such as localhost, or an IPv4 address"
        #else
        return nil
        #endif
    }

    /// Percent-encodes one path segment (everything but RFC 3986 unreserved characters).
    public static func segment(_ s: String) -> String {
        var out = ""
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(b))
            default:
                out += "%" + String(b >> 4, radix: 16, uppercase: true) + String(b & 0xF, radix: 16, uppercase: true)
            }
        }
        return out
    }

    public func send(_ spec: RequestSpec) async -> RequestCompletion {
        guard let url = url(for: spec) else {
            return RequestCompletion(.failure(.malformed(reason: "request has no \(spec.kind == .layout ? "layout" : "placement or URL")")))
        }
        if spec.kind == .asset, let cached = assets?.load(url.absoluteString) {
            return RequestCompletion(.success(.asset(bytes: cached.count)), bytes: cached.count)
        }
        guard await gate.enter() else { return RequestCompletion(.failure(.cancelled)) }
        defer { gate.leave() }
        if let transport, transportTakesHTTP || url.scheme?.lowercased() == "https" {
            var headers = [("Accept", "application/json")]
            if spec.kind != .asset { headers.append(("X-Profile-Id", spec.profileId)) }
            let answer = await transport.perform(HTTPExchange(method: "GET", url: url, headers: headers),
                                                 timeout: max(spec.timeout, 0.1) + timeoutMargin, maxBodyBytes: maxBodyBytes)
            switch answer {
            case .success(let a):
                let completion = Self.completion(status: a.status, body: a.body, for: spec)
                if spec.kind == .asset, case .success = completion.result { assets?.store(url.absoluteString, a.body) }
                return completion
            case .failure(let f):
                switch f.reason {
                case "cancelled": return RequestCompletion(.failure(.cancelled))
                case "toolarge": return RequestCompletion(.failure(.malformed(reason: f.detail)), bytes: maxBodyBytes)
                case "protocol": return RequestCompletion(.failure(.transport(reason: "reset")))
                default: return RequestCompletion(.failure(.transport(reason: f.reason)))
                }
            }
        }
        var request = URLRequest(url: url)
        request.httpMethod = "GET"
        request.timeoutInterval = max(spec.timeout, 0.1) + timeoutMargin
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        if spec.kind != .asset { request.setValue(spec.profileId, forHTTPHeaderField: "X-Profile-Id") }
        let slot = Mutex<(task: URLSessionDataTask?, cancelled: Bool)>((nil, false))
        let (status, body, error) = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<TaskTable.Finished, Never>) in
                let task = session.dataTask(with: request)
                let proceed = slot.withLock { s -> Bool in
                    guard !s.cancelled else { return false }
                    s.task = task
                    return true
                }
                guard proceed else {
                    continuation.resume(returning: (0, [], URLError(.cancelled)))
                    return
                }
                tasks.register(task.taskIdentifier, continuation)
                task.resume()
            }
        } onCancel: {
            slot.withLock { s -> URLSessionDataTask? in
                s.cancelled = true
                return s.task
            }?.cancel()
        }
        if let error {
            if Task.isCancelled { return RequestCompletion(.failure(.cancelled)) }
            if let overflow = error as? BodyTooLarge {
                return RequestCompletion(.failure(.malformed(reason: "body over \(overflow.limit) bytes")), bytes: overflow.limit)
            }
            return RequestCompletion(.failure(Self.failure(for: error)))
        }
        let completion = Self.completion(status: status, body: body, for: spec)
        if spec.kind == .asset, case .success = completion.result { assets?.store(url.absoluteString, body) }
        return completion
    }

    /// Maps an HTTP answer to the engine's completion: 2xx with a valid body is a success, any other
    /// 2xx is malformed, other statuses are `http(status)`.
    public static func completion(status: Int, body: [UInt8], for spec: RequestSpec) -> RequestCompletion {
        guard (200..<300).contains(status) else { return RequestCompletion(.failure(.http(status: status)), bytes: body.count) }
        if spec.kind == .asset { return RequestCompletion(.success(.asset(bytes: body.count)), bytes: body.count) }
        do throws(JSONInputError) {
            let root = JSONCursor(try JSON5.parse(bytes: body))
            let answer: ResponseBody
            switch spec.kind {
            case .targeted, .default:
                let payload = try RESTCoding.audience(from: root)
                if let asked = spec.placement, payload.placementId != asked {
                    throw JSONInputError(path: "$.placementId", message: "expected \"\(asked)\", got \"\(payload.placementId)\"")
                }
                answer = .audience(payload)
            case .layout:
                let layout = try RESTCoding.layout(from: root)
                if let asked = spec.layout, layout.ref != asked {
                    throw JSONInputError(path: "$", message: "expected layout \(asked.id) v\(asked.version), got \(layout.id) v\(layout.version)")
                }
                answer = .layout(layout)
            case .profile:
                answer = .profile(try RESTCoding.profile(from: root))
            case .asset:
                answer = .asset(bytes: body.count)
            }
            return RequestCompletion(.success(answer), bytes: body.count)
        } catch {
            return RequestCompletion(.failure(.malformed(reason: error.description)), bytes: body.count)
        }
    }

    /// The transport failure for a URLSession error: `refused`, `reset`, `dns`, `tls`, `offline`,
    /// `timeout`, `ats` (App Transport Security refused cleartext http), or `transport` for anything else.
    public static func failure(for error: Error) -> RequestFailure {
        guard let e = error as? URLError else { return .transport(reason: "transport") }
        switch e.code {
        case .cancelled: return .cancelled
        case .cannotConnectToHost: return .transport(reason: "refused")
        case .networkConnectionLost, .badServerResponse, .zeroByteResource, .cannotParseResponse: return .transport(reason: "reset")
        case .cannotFindHost, .dnsLookupFailed: return .transport(reason: "dns")
        case .secureConnectionFailed, .serverCertificateHasBadDate, .serverCertificateUntrusted,
             .serverCertificateHasUnknownRoot, .serverCertificateNotYetValid, .clientCertificateRejected,
             .clientCertificateRequired:
            return .transport(reason: "tls")
        case .notConnectedToInternet, .internationalRoamingOff, .dataNotAllowed: return .transport(reason: "offline")
        // Apple platforms: App Transport Security refused cleartext http to this host (-1022); the
        // app's Info.plist needs an exception for it (docs/platforms.md).
        case .appTransportSecurityRequiresSecureConnection: return .transport(reason: "ats")
        case .timedOut: return .transport(reason: "timeout")
        default:
            // libcurl errors that Foundation does not map arrive as code -1 with curl's message.
            let text = (e.userInfo[NSLocalizedDescriptionKey] as? String ?? "").lowercased()
            if text.contains("ssl") || text.contains("certificate") || text.contains("tls") { return .transport(reason: "tls") }
            if text.contains("reset") || text.contains("recv failure") || text.contains("empty reply") { return .transport(reason: "reset") }
            if text.contains("resolve") { return .transport(reason: "dns") }
            if text.contains("refused") || text.contains("couldn't connect") { return .transport(reason: "refused") }
            return .transport(reason: "transport")
        }
    }
}

/// A backend that cannot be set up as asked.
public struct HTTPBackendError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong, naming the URL or file at fault, e.g. `CA file ca.pem: cannot read the file: ...`.
    public var message: String
    /// The CA file at fault when the error is about one (nil otherwise).
    public var caFile: String?
    /// What is wrong without naming the CA file: with ``caFile``, what follows `CA file PATH: ` in
    /// ``message``, for a caller that names the file its own way (the CLI: `--ca PATH: problem`);
    /// otherwise the whole message.
    public var problem: String

    /// An error saying `message`.
    public init(_ message: String) { self.message = message; self.problem = message; self.caFile = nil }
    /// An error about the CA file `caFile`: the message is `CA file <caFile>: <problem>`.
    public init(caFile: String, _ problem: String) {
        self.message = "CA file \(caFile): \(problem)"; self.problem = problem; self.caFile = caFile
    }
    public var description: String { message }
}

/// A response body went over the cap.
struct BodyTooLarge: Error { var limit: Int }

/// The URLSession delegate: collects each task's status and body (capped) and resumes its waiter.
final class TaskTable: NSObject, URLSessionDataDelegate, Sendable {
    typealias Finished = (status: Int, body: [UInt8], error: Error?)
    private struct Pending {
        var continuation: CheckedContinuation<Finished, Never>?
        var status = 0
        var body: [UInt8] = []
        var overflow = false
    }
    private let pending = Mutex<[Int: Pending]>([:])
    let maxBodyBytes: Int

    init(maxBodyBytes: Int) { self.maxBodyBytes = maxBodyBytes }

    func register(_ id: Int, _ continuation: CheckedContinuation<Finished, Never>) {
        pending.withLock { $0[id, default: Pending()].continuation = continuation }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping (URLSession.ResponseDisposition) -> Void) {
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        let tooLarge = response.expectedContentLength > Int64(maxBodyBytes)
        pending.withLock {
            $0[dataTask.taskIdentifier, default: Pending()].status = status
            if tooLarge { $0[dataTask.taskIdentifier]?.overflow = true }
        }
        completionHandler(tooLarge ? .cancel : .allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let over = pending.withLock { p -> Bool in
            guard var entry = p[dataTask.taskIdentifier], !entry.overflow else { return false }
            if entry.body.count + data.count > maxBodyBytes {
                entry.overflow = true
                entry.body = []
            } else {
                entry.body.append(contentsOf: data)
            }
            p[dataTask.taskIdentifier] = entry
            return entry.overflow
        }
        if over { dataTask.cancel() }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        guard let entry = pending.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
        let finished: Finished
        if entry.overflow {
            finished = (entry.status, [], BodyTooLarge(limit: maxBodyBytes))
        } else {
            finished = (entry.status, entry.body, error)
        }
        entry.continuation?.resume(returning: finished)
    }
}
