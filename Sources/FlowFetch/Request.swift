/// What a request asks the backend for.
public enum RequestKind: String, Sendable, Hashable, CaseIterable {
    /// The audience resolved for the profile now.
    case targeted
    /// The default audience (All Users).
    case `default`
    /// A layout by id and version.
    case layout
    /// An image of a layout.
    case asset
    /// The profile (background refresh after identify).
    case profile
}

/// A request the engine asks its driver to send.
public struct RequestSpec: Sendable, Hashable {
    public var kind: RequestKind
    /// The placement, for targeted and default requests.
    public var placement: String?
    /// The layout, for layout requests.
    public var layout: LayoutRef?
    /// The URL, for asset requests.
    public var assetURL: String?
    /// The profile the request is made for.
    public var profileId: String
    /// Seconds the engine gives it before cutting it (its deadline is set by the engine, not the driver).
    public var timeout: Double
    public init(kind: RequestKind, placement: String? = nil, layout: LayoutRef? = nil, assetURL: String? = nil,
                profileId: String, timeout: Double) {
        self.kind = kind; self.placement = placement; self.layout = layout; self.assetURL = assetURL
        self.profileId = profileId; self.timeout = timeout
    }
}

/// What a backend answered.
public enum ResponseBody: Sendable, Hashable {
    case audience(AudiencePayload)
    case layout(Layout)
    case asset(bytes: Int)
    case profile(Profile)
}

/// Why a request failed.
public enum RequestFailure: Error, Sendable, Hashable {
    /// Cut by the engine's deadline.
    case timeout
    /// Cancelled by the engine (the call ended another way).
    case cancelled
    /// Connection refused or reset, DNS failure, offline, TLS failure; `reason` is e.g. `reset`, `refused`.
    case transport(reason: String)
    /// A non-2xx HTTP status.
    case http(status: Int)
    /// A 2xx answer whose body is not a valid response.
    case malformed(reason: String)

    /// The request outcome as scenario results and events write it: `timeout`, `cancelled`,
    /// `reset`, `http:404`, `malformed`.
    public var outcome: String {
        switch self {
        case .timeout: "timeout"
        case .cancelled: "cancelled"
        case .transport(let reason): reason
        case .http(let status): "http:\(status)"
        case .malformed: "malformed"
        }
    }

    /// The error class of docs/fetch-rules.md.
    public var errorClass: ErrorClass {
        switch self {
        case .timeout, .cancelled: .timeout
        case .transport: .transport
        case .http(let status):
            if status >= 500 || status == 429 || status == 499 { .server }
            else if status >= 400 { .client }
            else { .server }
        case .malformed: .decoding
        }
    }

    /// The FlowError a call throws when this is its last failed request.
    public var flowError: FlowError {
        switch errorClass {
        case .timeout: FlowError(.networkFailed, "request timed out")
        case .transport: FlowError(.networkFailed, "transport error: \(outcome)")
        case .server: FlowError(.serverError, "server error: \(outcome)")
        case .client: FlowError(.badRequest, status404 ? "placement not found (http:404)" : "bad request: \(outcome)")
        case .decoding:
            if case .malformed(let reason) = self { FlowError(.decodingFailed, "invalid response: \(reason)") }
            else { FlowError(.decodingFailed, "invalid response") }
        }
    }

    private var status404: Bool { if case .http(404) = self { true } else { false } }
}

/// The error classes of docs/fetch-rules.md; the first three are eligible for the default-audience fallback.
public enum ErrorClass: String, Sendable, Hashable {
    case timeout, transport, server, client, decoding
    /// Whether a failure of this class falls back to the default audience.
    public var fallsBack: Bool { self == .timeout || self == .transport || self == .server }
}

/// A request's answer or failure.
public typealias RequestResult = Result<ResponseBody, RequestFailure>
