/// Bad input found in a JSON (or JSON5) document: which file, where in it, and what was expected.
///
/// `description` is the one line users see, e.g.
/// `config/flowscope.json5: $.sinks[2].rotateBytes: expected a positive integer, got "10MB"`.
public struct JSONInputError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file, when the document came from one.
    public var file: String?
    /// JSON path of the offending value, `$` for the root, e.g. `$.steps[3].fetchPolicy`.
    public var path: String
    /// Line and column (1-based) for syntax errors, when known.
    public var line: Int?
    public var column: Int?
    /// What is wrong and what was expected.
    public var message: String

    public init(file: String? = nil, path: String, line: Int? = nil, column: Int? = nil, message: String) {
        self.file = file; self.path = path; self.line = line; self.column = column; self.message = message
    }

    /// The same error, attributed to `file`.
    public func inFile(_ file: String) -> JSONInputError {
        var copy = self
        copy.file = file
        return copy
    }

    public var description: String {
        var s = ""
        if let file { s += file + ": " }
        s += path
        if let line, let column { s += " (line \(line), column \(column))" }
        return s + ": " + message
    }
}
