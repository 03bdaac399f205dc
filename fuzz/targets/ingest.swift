// Fuzz target: POST /api/ingest bodies (a JSON array of envelopes, or JSON Lines).
import FlowEvents
import FlowJSON
import FlowScopeServer

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzIngest(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    switch Ingest.decode(Array(bytes), maxEvents: 50) {
    case .success(let envelopes):
        guard envelopes.count <= 50 else { violated("more envelopes than maxEvents", bytes) }
    case .failure(let failure):
        guard failure.status == 400 || failure.status == 413 else { violated("status \(failure.status)", bytes) }
        guard !failure.message.isEmpty else { violated("failure without a message", bytes) }
        if failure.status == 400, !failure.message.hasPrefix("empty body"),
           !failure.message.hasPrefix("$"), !failure.message.hasPrefix("line ") {
            violated("400 without a path: \(failure.message)", bytes)
        }
    }
    return 0
}
