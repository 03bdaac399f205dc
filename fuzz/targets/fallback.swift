// Fuzz target: bundled fallback files (`FallbackFile.decode(bytes:file:)`): a bad file is refused whole,
// with the file and a path; a good one is written back by `json` and reads back the same.
import FlowFetch
import FlowJSON

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFallback(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    do throws(JSONInputError) {
        let file = try FallbackFile.decode(bytes: Array(bytes), file: "fallback.json")
        let again = try FallbackFile.decode(file.json)
        guard again.json == file.json else { violated("fallback file round trip changed it", bytes) }
    } catch {
        checkError(error, bytes)
        guard error.file == "fallback.json" else { violated("error does not name the file", bytes) }
    }
    return 0
}
