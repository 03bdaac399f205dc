// Fuzz target: layouts from the backend (`RESTCoding.layout(from:)`, GET /v1/layouts/{id}).
import FlowFetch
import FlowJSON

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzLayout(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    do throws(JSONInputError) {
        let layout = try RESTCoding.layout(from: JSONCursor(JSON5.parse(bytes: bytes)))
        let again = try RESTCoding.layout(from: JSONCursor(RESTCoding.layoutJSON(layout)))
        guard again == layout else { violated("layout round trip changed it", bytes) }
    } catch {
        checkError(error, bytes)
    }
    return 0
}
