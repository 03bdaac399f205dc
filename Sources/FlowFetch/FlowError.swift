/// An error a fetch call throws. Codes follow the SDK the seeds describe.
public struct FlowError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The error's kind, with its numeric code.
    public enum Code: Int, Sendable, Hashable, CaseIterable {
        case notActivated = 2002
        case badRequest = 2003
        case serverError = 2004
        case networkFailed = 2005
        case decodingFailed = 2006
        case wrongParam = 3001
        case profileWasChanged = 3006
        case operationInterrupted = 9000

        /// The code's name, e.g. `networkFailed`.
        public var name: String {
            switch self {
            case .notActivated: "notActivated"
            case .badRequest: "badRequest"
            case .serverError: "serverError"
            case .networkFailed: "networkFailed"
            case .decodingFailed: "decodingFailed"
            case .wrongParam: "wrongParam"
            case .profileWasChanged: "profileWasChanged"
            case .operationInterrupted: "operationInterrupted"
            }
        }
    }

    public var code: Code
    /// What happened, for people.
    public var message: String
    /// For preload errors only: each failing placement's own error. Nil on every other error.
    public var preloadErrors: [String: FlowError]?

    public init(_ code: Code, _ message: String, preloadErrors: [String: FlowError]? = nil) {
        self.code = code; self.message = message; self.preloadErrors = preloadErrors
    }

    public var description: String { "\(code.name) (\(code.rawValue)): \(message)" }
}
