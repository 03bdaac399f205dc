import COpenSSL

/// The digest OpenSSL computes (`"MD5"`, `"SHA256"`): the reference the Swift digests are tested against.
public func openSSLDigest(_ algorithm: String, _ bytes: [UInt8]) -> [UInt8] {
    let md = EVP_MD_fetch(nil, algorithm, nil)
    defer { EVP_MD_free(md) }
    var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
    var size: UInt32 = 0
    bytes.withUnsafeBytes { input in
        _ = EVP_Digest(input.baseAddress, input.count, &out, &size, md, nil)
    }
    return Array(out.prefix(Int(size)))
}
