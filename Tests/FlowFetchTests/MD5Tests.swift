@testable import FlowFetch
import TestSupport
import Testing

@Suite("MD5 in Swift")
struct MD5Tests {
    static func swiftMD5(_ bytes: [UInt8]) -> [UInt8] {
        var md5 = MD5()
        bytes.withUnsafeBytes { md5.update($0) }
        let (high, low) = md5.finish()
        return withUnsafeBytes(of: high.bigEndian, Array.init) + withUnsafeBytes(of: low.bigEndian, Array.init)
    }

    @Test("RFC 1321's test suite")
    func rfcVectors() {
        let vectors = [
            ("", "d41d8cd98f00b204e9800998ecf8427e"), ("a", "0cc175b9c0f1b6a831c399e269772661"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"), ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            ("abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"),
            ("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", "d174ab98d277d9f5a5611c2c9f419d9f"),
            (String(repeating: "1234567890", count: 8), "57edf4a22be3c955ac49da2e2107b67a"),
        ]
        for (input, hex) in vectors {
            #expect(Digest.hex(Self.swiftMD5(Array(input.utf8))) == hex, "md5(\"\(input)\")")
        }
    }

    @Test("agrees with OpenSSL on every length from 0 to 300 bytes, fed whole and in pieces")
    func agreesWithOpenSSL() {
        var seed: UInt64 = 7
        for length in 0...300 {
            let bytes = (0..<length).map { _ in
                seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return UInt8(truncatingIfNeeded: seed >> 40)
            }
            let expected = openSSLDigest("MD5", bytes)
            #expect(Self.swiftMD5(bytes) == expected, "length \(length)")
            #expect(Digest.md5(bytes) == expected, "Digest.md5, length \(length)")
            // The same bytes in uneven pieces (the draw feeds version, "-" and profile separately).
            var md5 = MD5()
            var at = 0
            while at < length {
                let n = min(length - at, 1 + (at * 7 + length) % 70)
                bytes[at..<(at + n)].withUnsafeBytes { md5.update($0) }
                at += n
            }
            let (high, low) = md5.finish()
            let pieces = withUnsafeBytes(of: high.bigEndian, Array.init) + withUnsafeBytes(of: low.bigEndian, Array.init)
            #expect(pieces == expected, "length \(length) in pieces")
        }
    }

    @Test("the variation bucket equals OpenSSL's MD5 of \"version-profile\" for non-ASCII ids too")
    func bucketMatchesOpenSSL() {
        for (v, p) in [("av-all", "user-42"), ("版本-1", "usér-ü"), (String(repeating: "v", count: 80), "p"), ("", "")] {
            let d = openSSLDigest("MD5", Array("\(v)-\(p)".utf8))
            let expected = Int(d[8..<16].reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % 100)
            #expect(VariationDraw.bucket(audienceVersionId: v, profileId: p) == expected, "\(v)-\(p)")
        }
    }
}
