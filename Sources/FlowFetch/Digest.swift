import COpenSSL

/// Message digests through OpenSSL.
public enum Digest {
    /// MD5 of `bytes` (16 bytes). Used only for the deterministic variation draw, never for security.
    public static func md5(_ bytes: some Collection<UInt8>) -> [UInt8] {
        run(Algorithms.shared.md5, bytes, length: 16)
    }

    /// SHA-256 of `bytes` (32 bytes): cache keys and checksums.
    public static func sha256(_ bytes: some Collection<UInt8>) -> [UInt8] {
        run(Algorithms.shared.sha256, bytes, length: 32)
    }

    /// Lowercase hex of a digest.
    public static func hex(_ digest: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(digest.count * 2)
        for b in digest { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 0xF)]) }
        return String(decoding: out, as: UTF8.self)
    }

    private static func run(_ md: OpaquePointer?, _ bytes: some Collection<UInt8>, length: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: length)
        var size: UInt32 = 0
        let copy = Array(bytes)
        copy.withUnsafeBytes { input in
            // EVP_Digest only fails on allocation failure; the zeroed output then still has the right length.
            _ = EVP_Digest(input.baseAddress, input.count, &out, &size, md, nil)
        }
        return out
    }

    /// The algorithms, fetched from OpenSSL's provider once: `EVP_md5()` and `EVP_sha256()` make
    /// OpenSSL 3 look the implementation up again on every digest, which costs more than hashing a
    /// short input.
    // Safe to share unchecked: it holds only C pointers to EVP_MD objects, fetched once, never
    // changed or freed, and OpenSSL documents fetched algorithms as usable from any number of
    // threads at once.
    private final class Algorithms: @unchecked Sendable {
        let md5: OpaquePointer?
        let sha256: OpaquePointer?
        static let shared = Algorithms()
        private init() {
            md5 = EVP_MD_fetch(nil, "MD5", nil) ?? EVP_md5()
            sha256 = EVP_MD_fetch(nil, "SHA256", nil) ?? EVP_sha256()
        }
    }
}
