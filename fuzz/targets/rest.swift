// Fuzz target: backend REST responses (an audience response with its variations).
import FlowFetch
import FlowJSON

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzREST(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    do throws(JSONInputError) {
        let payload = try RESTCoding.audience(from: JSONCursor(JSON5.parse(bytes: bytes)))
        // What was read is written back and reads back the same.
        let again = try RESTCoding.audience(from: JSONCursor(RESTCoding.audienceJSON(payload)))
        guard again == payload else { violated("audience round trip changed the payload", bytes) }
    } catch {
        checkError(error, bytes)
    }
    return 0
}
