import CMicroHTTPD
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A response body lent to libmicrohttpd without a copy: the response keeps one retain of this box,
/// given back by libmicrohttpd's free callback when it destroys the response (after the last byte
/// is sent, or when the connection closes).
///
/// Sendable: `bytes` is immutable. The pointer handed to libmicrohttpd is the array's own storage,
/// which this box keeps alive and which nothing mutates (the array is a `let`; arrays are never
/// bridged on Linux, so the storage is native and its address fixed while it lives).
final class ResponseBody: Sendable {
    let bytes: [UInt8]
    /// Counts the bodies libmicrohttpd holds (`HTTPSServer.liveResponseBodies`, a test hook).
    private let owner: ServerContext

    private init(_ bytes: [UInt8], owner: ServerContext) {
        self.bytes = bytes
        self.owner = owner
        owner.liveBodies.add(1, ordering: .relaxed)
    }

    deinit { owner.liveBodies.subtract(1, ordering: .relaxed) }

    /// A libmicrohttpd response over `bytes` (which it does not copy); nil if libmicrohttpd refuses.
    static func create(_ bytes: [UInt8], owner: ServerContext) -> OpaquePointer? {
        if bytes.isEmpty { return MHD_create_response_from_buffer(0, nil, .RESPMEM_PERSISTENT) }
        let body = ResponseBody(bytes, owner: owner)
        let base = body.bytes.withUnsafeBytes { UnsafeMutableRawPointer(mutating: $0.baseAddress) }
        let retained = Unmanaged.passRetained(body).toOpaque()
        let release: MHD_ContentReaderFreeCallback = responseBodyRelease
        guard let raw = MHD_create_response_from_buffer_with_free_callback_cls(bytes.count, base, release, retained) else {
            // libmicrohttpd calls the callback only for responses it created.
            Unmanaged<ResponseBody>.fromOpaque(retained).release()
            return nil
        }
        return raw
    }
}

private func responseBodyRelease(cls: UnsafeMutableRawPointer?) {
    guard let cls else { return }
    Unmanaged<ResponseBody>.fromOpaque(cls).release()
}

/// Byte-level ASCII text helpers for the request path (no allocation, no Unicode tables).
enum ASCII {
    /// Whether `text` equals `lowercase` (lower-case ASCII) when ASCII letters of `text` are folded to lower case.
    static func equalsIgnoringCase(_ text: String, _ lowercase: StaticString) -> Bool {
        let count = lowercase.utf8CodeUnitCount
        guard text.utf8.count == count else { return false }
        return lowercase.withUTF8Buffer { expected in
            var index = 0
            for byte in text.utf8 {
                if lowercased(byte) != expected[index] { return false }
                index += 1
            }
            return true
        }
    }

    /// `byte` with A-Z mapped to a-z.
    @inline(__always)
    static func lowercased(_ byte: UInt8) -> UInt8 {
        byte &- UInt8(ascii: "A") < 26 ? byte | 0x20 : byte
    }

    /// A C string with ASCII letters folded to lower case (other bytes kept; invalid UTF-8 repaired).
    static func lowercasedString(_ cString: UnsafePointer<CChar>) -> String {
        let length = strlen(cString)
        return cString.withMemoryRebound(to: UInt8.self, capacity: length) { bytes in
            String(unsafeUninitializedCapacity: length) { buffer in
                for index in 0..<length { buffer[index] = lowercased(bytes[index]) }
                return length
            }
        }
    }
}
