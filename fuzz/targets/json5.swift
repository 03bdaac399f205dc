// Fuzz target: the JSON5 reader. Invariants: never crash; errors carry a path, line and column;
// whatever parses is written back by JSONWriter and reads back to the same value.
import FlowJSON

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJSON5(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    do throws(JSONInputError) {
        let value = try JSON5.parse(bytes: bytes)
        let text = value.jsonText
        let again: JSONValue
        do { again = try JSON5.parse(text) } catch { violated("written JSON does not read back: \(error) in \(text.prefix(200))", bytes) }
        guard again == value else { violated("round trip changed the value: \(text.prefix(200))", bytes) }
    } catch {
        checkError(error, bytes)
        guard error.line != nil, error.column != nil else { violated("syntax error without line/column", bytes) }
    }
    return 0
}
