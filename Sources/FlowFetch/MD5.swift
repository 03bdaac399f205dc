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
    private static let shifts: [UInt32] = [7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21]

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
        update(byte: 0x80)
        while filled != 56 { update(byte: 0) }
        withUnsafeBytes(of: bits.littleEndian) { update($0) }
        func half(_ x: UInt32, _ y: UInt32) -> UInt64 { UInt64(x.byteSwapped) << 32 | UInt64(y.byteSwapped) }
        return (half(a0, b0), half(c0, d0))
    }

    private mutating func compress() {
        var m = (UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0),
                 UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0), UInt32(0))
        withUnsafeBytes(of: block) { b in
            withUnsafeMutableBytes(of: &m) { $0.copyMemory(from: b) }
        }
        var a = a0, b = b0, c = c0, d = d0
        Self.k.withUnsafeBufferPointer { k in
            Self.shifts.withUnsafeBufferPointer { s in
                withUnsafeBytes(of: m) { raw in
                    let words = raw.bindMemory(to: UInt32.self)
                    for i in 0..<64 {
                        var f: UInt32
                        let g: Int
                        switch i >> 4 {
                        case 0: f = (b & c) | (~b & d); g = i
                        case 1: f = (d & b) | (~d & c); g = (5 &* i &+ 1) & 15
                        case 2: f = b ^ c ^ d; g = (3 &* i &+ 5) & 15
                        default: f = c ^ (b | ~d); g = (7 &* i) & 15
                        }
                        f = f &+ a &+ k[i] &+ UInt32(littleEndian: words[g])
                        a = d; d = c; c = b
                        let r = s[(i >> 4) << 2 | (i & 3)]
                        b = b &+ (f << r | f >> (32 - r))
                    }
                }
            }
        }
        a0 &+= a; b0 &+= b; c0 &+= c; d0 &+= d
    }
}
