/// SHA-256 (FIPS 180-4) in Swift: cache-entry checksums and cache keys. In Swift rather than through
/// a C library so that the engine builds wherever Swift runs (iOS, macOS, Linux).
struct SHA256 {
    private var h: (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32) =
        (0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19)
    /// The block being filled (64 bytes).
    private var block = [UInt8](repeating: 0, count: 64)
    private var filled = 0
    private var length: UInt64 = 0

    init() {}

    /// The round constants: the first 32 bits of the fractional parts of the cube roots of the first 64 primes.
    private static let k: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]

    /// Adds `bytes`.
    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        length &+= UInt64(bytes.count)
        var offset = 0
        while offset < bytes.count {
            let n = min(64 - filled, bytes.count - offset)
            let at = filled, from = offset
            block.withUnsafeMutableBytes { b in
                b.baseAddress!.advanced(by: at).copyMemory(from: bytes.baseAddress!.advanced(by: from), byteCount: n)
            }
            filled += n
            offset += n
            if filled == 64 { compress(); filled = 0 }
        }
    }

    /// Pads and returns the 32-byte digest.
    mutating func finish() -> [UInt8] {
        let bits = length &* 8
        // 0x80, zeros to byte 56 of a block (of the next one when fewer than 9 bytes are left), the
        // length in bits, big-endian.
        block[filled] = 0x80
        for i in (filled + 1)..<64 { block[i] = 0 }
        if filled >= 56 {
            compress()
            for i in 0..<64 { block[i] = 0 }
        }
        for i in 0..<8 { block[56 + i] = UInt8(truncatingIfNeeded: bits >> (56 - 8 * UInt64(i))) }
        compress()
        filled = 0
        var out = [UInt8]()
        out.reserveCapacity(32)
        for word in [h.0, h.1, h.2, h.3, h.4, h.5, h.6, h.7] {
            out.append(contentsOf: [UInt8(word >> 24), UInt8(truncatingIfNeeded: word >> 16),
                                    UInt8(truncatingIfNeeded: word >> 8), UInt8(truncatingIfNeeded: word)])
        }
        return out
    }

    private mutating func compress() {
        @inline(__always) func rotr(_ x: UInt32, _ n: UInt32) -> UInt32 { x >> n | x << (32 - n) }
        var (a, b, c, d, e, f, g, hh) = h
        // The message schedule on the stack: no allocation per block.
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 64) { w in
            block.withUnsafeBufferPointer { m in
                for t in 0..<16 {
                    w[t] = UInt32(m[4 * t]) << 24 | UInt32(m[4 * t + 1]) << 16 | UInt32(m[4 * t + 2]) << 8 | UInt32(m[4 * t + 3])
                }
            }
            for t in 16..<64 {
                let s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3)
                let s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10)
                w[t] = w[t - 16] &+ s0 &+ w[t - 7] &+ s1
            }
            Self.k.withUnsafeBufferPointer { k in
                for t in 0..<64 {
                    let s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)
                    let choose = (e & f) ^ (~e & g)
                    let t1 = hh &+ s1 &+ choose &+ k[t] &+ w[t]
                    let s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)
                    let majority = (a & b) ^ (a & c) ^ (b & c)
                    let t2 = s0 &+ majority
                    hh = g; g = f; f = e; e = d &+ t1
                    d = c; c = b; b = a; a = t1 &+ t2
                }
            }
        }
        h = (h.0 &+ a, h.1 &+ b, h.2 &+ c, h.3 &+ d, h.4 &+ e, h.5 &+ f, h.6 &+ g, h.7 &+ hh)
    }
}
