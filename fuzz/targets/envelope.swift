// Fuzz target: one envelope (a line of a trace file, an element of an ingest body).
import FlowEvents
import FlowJSON

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzEnvelope(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    do throws(JSONInputError) {
        let envelope = try Envelope(jsonValue: JSON5.parse(bytes: bytes))
        // jsonLine writes what was read; it reads back to the same line.
        let line = envelope.jsonLine
        let again = try Envelope(jsonValue: JSON5.parse(line))
        guard again.jsonLine == line else { violated("envelope round trip changed \(line.prefix(200))", bytes) }
    } catch {
        checkError(error, bytes)
    }
    return 0
}
