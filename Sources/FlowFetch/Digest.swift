/// Message digests, in Swift (``MD5`` and ``SHA256``): no C library, so the engine builds on every
/// platform Swift runs on.
public enum Digest {
    /// MD5 of `bytes` (16 bytes). Used only for the deterministic variation draw, never for security.
    public static func md5(_ bytes: some Collection<UInt8>) -> [UInt8] {
        var md5 = MD5()
        Array(bytes).withUnsafeBytes { md5.update($0) }
        let (high, low) = md5.finish()
        return withUnsafeBytes(of: high.bigEndian, Array.init) + withUnsafeBytes(of: low.bigEndian, Array.init)
    }

    /// SHA-256 of `bytes` (32 bytes): cache keys and checksums.
    public static func sha256(_ bytes: some Collection<UInt8>) -> [UInt8] {
        var sha = SHA256()
        Array(bytes).withUnsafeBytes { sha.update($0) }
        return sha.finish()
    }

    /// Lowercase hex of a digest.
    public static func hex(_ digest: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(digest.count * 2)
        for b in digest { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 0xF)]) }
        return String(decoding: out, as: UTF8.self)
    }
}
