// Fuzz target: the config file (`flowscope check-config FILE`, `flowscope serve --config FILE`).
import FlowJSON
@testable import FlowScopeCLI

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzConfig(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    do throws(JSONInputError) {
        _ = try FlowScopeConfig.decode(JSONCursor(JSON5.parse(bytes: bytes)))
    } catch {
        checkError(error, bytes)
    }
    return 0
}
