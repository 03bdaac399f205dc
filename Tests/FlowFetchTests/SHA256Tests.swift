@testable import FlowFetch
import TestSupport
import Testing

@Suite("SHA-256 in Swift")
struct SHA256Tests {
    @Test("FIPS 180's examples: empty, \"abc\", the 448-bit and 896-bit messages and one million 'a'")
    func fipsVectors() {
        let vectors: [([UInt8], String)] = [
            ([], "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
            (Array("abc".utf8), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
            (Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8),
             "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
            (Array(("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                    + "mnopqrstnopqrstu").utf8),
             "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"),
            ([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000),
             "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
        ]
        for (input, hex) in vectors {
            #expect(Digest.hex(Digest.sha256(input)) == hex, "sha256 of \(input.count) bytes")
        }
    }

    @Test("messages around the padding boundaries (55, 56, 63, 64, 65 bytes) digest as published")
    func paddingBoundaries() {
        // A 55-byte message pads into one block; 56 and more need a second one for the length.
        let vectors = [
            (55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"),
            (56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"),
            (63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"),
            (64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"),
            (65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"),
        ]
        for (count, hex) in vectors {
            #expect(Digest.hex(Digest.sha256([UInt8](repeating: UInt8(ascii: "a"), count: count))) == hex, "\(count) x 'a'")
        }
    }

    @Test("agrees with OpenSSL on every length from 0 to 300 bytes, fed whole and in pieces")
    func agreesWithOpenSSL() {
        var seed: UInt64 = 11
        for length in 0...300 {
            let bytes = (0..<length).map { _ in
                seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return UInt8(truncatingIfNeeded: seed >> 40)
            }
            let expected = openSSLDigest("SHA256", bytes)
            #expect(expected.count == 32)
            #expect(Digest.sha256(bytes) == expected, "length \(length)")
            var sha = SHA256()
            var at = 0
            while at < length {
                let n = min(length - at, 1 + (at * 5 + length) % 90)
                bytes[at..<(at + n)].withUnsafeBytes { sha.update($0) }
                at += n
            }
            #expect(sha.finish() == expected, "length \(length) in pieces")
        }
    }
}
