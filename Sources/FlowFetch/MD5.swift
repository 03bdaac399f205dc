import Foundation

/// MD5 (RFC 1321) in Swift, on the stack. The variation draw hashes one short string per call; through
/// OpenSSL that string is first built and copied, and `EVP_Digest` allocates and frees a context each
/// time, which costs several times the hashing itself. Not for security (nothing here is).
struct MD5 {
    private var a0: UInt32 = 0x6745_2301, b0: UInt32 = 0xefcd_ab89, c0: UInt32 = 0x98ba_dcfe, d0: UInt32 = 0x1032_5476
    /// The block being filled (64 bytes).
    private var block: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    private var filled = 0
    private var length: UInt64 = 0

    init() {}

    /// The per-step constants: floor(2^32 * |sin(i + 1)|).
    private static let k: [UInt32] = (0..<64).map { UInt32(truncatingIfNeeded: Int64((abs(sin(Double($0 + 1))) * 4_294_967_296).rounded(.down))) }

    /// Adds the UTF-8 bytes of `text`.
    mutating func update(_ text: String) {
        var text = text
        text.withUTF8 { update(UnsafeRawBufferPointer($0)) }
    }

    /// Adds one byte.
    mutating func update(byte: UInt8) {
        withUnsafeBytes(of: byte) { update($0) }
    }

    /// Adds `bytes`.
    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        length &+= UInt64(bytes.count)
        var offset = 0
        while offset < bytes.count {
            let n = min(64 - filled, bytes.count - offset)
            let at = filled
            withUnsafeMutableBytes(of: &block) { b in
                b.baseAddress!.advanced(by: at).copyMemory(from: bytes.baseAddress!.advanced(by: offset), byteCount: n)
            }
            filled += n
            offset += n
            if filled == 64 { compress(); filled = 0 }
        }
    }

    /// Pads, and returns the digest as two big-endian halves: bytes 0..<8 and bytes 8..<16.
    mutating func finish() -> (high: UInt64, low: UInt64) {
        let bits = length &* 8
        // 0x80, zeros to byte 56 of a block (of the next one when fewer than 9 bytes are left), the length.
        let at = filled
        withUnsafeMutableBytes(of: &block) { b in
            b[at] = 0x80
            b.baseAddress!.advanced(by: at + 1).initializeMemory(as: UInt8.self, repeating: 0, count: 63 - at)
        }
        if at >= 56 {
            compress()
            block = (0, 0, 0, 0, 0, 0, 0, 0)
        }
        block.7 = bits.littleEndian
        compress()
        filled = 0
        func half(_ x: UInt32, _ y: UInt32) -> UInt64 { UInt64(x.byteSwapped) << 32 | UInt64(y.byteSwapped) }
        return (half(a0, b0), half(c0, d0))
    }

    private mutating func compress() {
        var a = a0, b = b0, c = c0, d = d0
        withUnsafeBytes(of: block) { raw in
            Self.k.withUnsafeBufferPointer { k in
                @inline(__always) func word(_ g: Int) -> UInt32 {
                    UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: g * 4, as: UInt32.self))
                }
                @inline(__always) func step(_ f: UInt32, _ i: Int, _ g: Int, _ r: UInt32) {
                    let sum = f &+ a &+ k[i] &+ word(g)
                    a = d; d = c; c = b
                    b = b &+ (sum << r | sum >> (32 - r))
                }
                /// The rotation of step `i` of a round (a switch, not an array literal: no bounds checks).
                @inline(__always) func shift(_ i: Int, _ r: (UInt32, UInt32, UInt32, UInt32)) -> UInt32 {
                    switch i & 3 { case 0: r.0; case 1: r.1; case 2: r.2; default: r.3 }
                }
                // The four rounds of RFC 1321, sixteen steps each.
                for i in 0..<16 { step((b & c) | (~b & d), i, i, shift(i, (7, 12, 17, 22))) }
                for i in 16..<32 { step((d & b) | (~d & c), i, (5 &* i &+ 1) & 15, shift(i, (5, 9, 14, 20))) }
                for i in 32..<48 { step(b ^ c ^ d, i, (3 &* i &+ 5) & 15, shift(i, (4, 11, 16, 23))) }
                for i in 48..<64 { step(c ^ (b | ~d), i, (7 &* i) & 15, shift(i, (6, 10, 15, 21))) }
            }
        }
        a0 &+= a; b0 &+= b; c0 &+= c; d0 &+= d
    }
}
