// Fuzz target: on-disk cache entries. The first byte chooses the mode: odd = the raw bytes as found on
// disk; even = the rest as an entry body under a correct header and checksum, so the fuzzer reaches
// the JSON decoding behind the checksum.
import FlowFetch
import FlowJSON

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCache(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    guard let mode = bytes.first else {
        if case .success = CacheEntryCodec.decode([], key: key) { violated("empty entry decoded", bytes) }
        return 0
    }
    var entry = Array(bytes.dropFirst())
    if mode & 1 == 0 {
        entry = Array(("flowscope-cache-1 " + Digest.hex(Digest.sha256(entry)) + "\n").utf8) + entry
    }
    switch CacheEntryCodec.decode(entry, key: key) {
    case .success(let flow):
        // A decoded entry re-encodes to something that decodes to the same entry.
        guard case .success(let again) = CacheEntryCodec.decode(CacheEntryCodec.encode(flow, key: key), key: key),
              again == flow else { violated("cache entry round trip failed", bytes) }
    case .failure(let failure):
        guard !failure.message.isEmpty else { violated("failure without a reason", bytes) }
    }
    return 0
}

private let key = CacheKey(profileId: "user-42", placementId: "main_paywall")
