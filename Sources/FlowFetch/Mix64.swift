/// The SplitMix64 finaliser: a bijection on 64 bits that spreads every input bit over the output.
/// Used for the random number streams of simulations, derived span ids, cache-key hashes and trace
/// ids. Not for security.
@inline(__always)
public func mix64(_ x: UInt64) -> UInt64 {
    var z = (x ^ (x >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
}

/// SplitMix64's increment (the golden ratio in 64 bits).
public let splitMix64Gamma: UInt64 = 0x9E37_79B9_7F4A_7C15
