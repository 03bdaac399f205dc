// Shared by every fuzz target (compiled into each one). Not part of the package.
import FlowJSON

/// Stops the run with a message libFuzzer records next to the crashing input.
func violated(_ what: String, _ bytes: UnsafeBufferPointer<UInt8>) -> Never {
    let preview = String(decoding: bytes.prefix(200), as: UTF8.self)
    fatalError("fuzz invariant violated: \(what)\ninput (\(bytes.count) bytes): \(preview.debugDescription)")
}

/// Every error a decoder throws must name where: a path starting with `$` (or `line N: $` for JSON Lines),
/// and say what was wrong.
func checkError(_ error: JSONInputError, _ bytes: UnsafeBufferPointer<UInt8>, linePrefix: Bool = false) {
    let path = linePrefix && error.path.hasPrefix("line ") ? String(error.path.drop(while: { $0 != "$" })) : error.path
    guard path.hasPrefix("$") else { violated("error path \(error.path.debugDescription) does not start with $", bytes) }
    guard !error.message.isEmpty else { violated("error without a message at \(error.path)", bytes) }
}

/// The input as text, the way the CLI reads files: nil when it is not UTF-8 (the CLI refuses those first).
func utf8Text(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
    String(validating: bytes, as: UTF8.self)
}
