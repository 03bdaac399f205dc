import COpenSSL
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A problem with a file the server reads or writes (certificate, key, token, state directory), naming it.
public struct ServerFileError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file or directory at fault.
    public var path: String
    /// What is wrong and what was expected.
    public var message: String

    /// Creates an error about `path`.
    public init(path: String, message: String) {
        self.path = path
        self.message = message
    }

    /// One line: `path: message`.
    public var description: String { "\(path): \(message)" }
}

/// The certificate and private key the HTTPS server presents, as PEM text.
///
/// With no certificate configured, `loadOrCreate(stateDir:)` generates an EC P-256 key and a
/// self-signed certificate for `localhost`, `127.0.0.1` and `::1` on first start and reuses them later.
/// A configured pair is read with `load(certPath:keyPath:)`, which checks that the key matches.
public struct TLSMaterial: Sendable, Equatable {
    /// The certificate, PEM.
    public var certPEM: String
    /// The private key, PEM (PKCS#8, unencrypted).
    public var keyPEM: String
    /// SHA-256 of the certificate's DER encoding, as `AB:CD:...` (how `openssl x509 -fingerprint` prints it).
    public var fingerprint: String
    /// Where the certificate lives.
    public var certPath: String
    /// Where the private key lives.
    public var keyPath: String

    /// The certificate file inside a state directory: `<stateDir>/tls/cert.pem`.
    public static func certPath(stateDir: String) -> String { stateDir + "/tls/cert.pem" }
    /// The key file inside a state directory: `<stateDir>/tls/key.pem`.
    public static func keyPath(stateDir: String) -> String { stateDir + "/tls/key.pem" }

    /// Loads the generated pair from `<stateDir>/tls/`, creating it first when absent.
    ///
    /// Directories are created with mode 0700 and the key file with mode 0600.
    /// A half-present pair (only one of the two files) is an error rather than silently replaced.
    public static func loadOrCreate(stateDir: String = ".flowscope") throws(ServerFileError) -> TLSMaterial {
        if !StateDirectory.exists(stateDir + "/tls") { try StateDirectory.create(stateDir) }
        return try loadOrCreate(tlsDirectory: stateDir + "/tls")
    }

    /// How long a generated certificate is valid in total: 397 days, counted from its notBefore (an
    /// hour before it was generated), within the 398 days browsers accept.
    public static let generatedValidityDays = 397
    /// A generated certificate with less than this left (30 days) is replaced at start.
    public static let renewalWindowSeconds = 30 * 86_400

    /// Loads the generated pair from `<tlsDirectory>/cert.pem` and `key.pem` (config `server.tls.dir`),
    /// creating the directory (mode 0700) and the pair when absent, and replacing the pair when the
    /// certificate has less than `renewalWindowSeconds` left (or has expired).
    ///
    /// `hosts` are names and addresses added to a newly generated certificate's SAN, next to
    /// `localhost`, `127.0.0.1` and `::1` (an existing certificate is kept as it is).
    public static func loadOrCreate(tlsDirectory: String, hosts: [String] = []) throws(ServerFileError) -> TLSMaterial {
        let cert = tlsDirectory + "/cert.pem"
        let key = tlsDirectory + "/key.pem"
        let haveCert = StateDirectory.exists(cert)
        let haveKey = StateDirectory.exists(key)
        var hosts = hosts
        if haveCert && haveKey {
            let existing = try load(certPath: cert, keyPath: key)
            if try secondsUntilExpiry(ofPEM: existing.certPEM) >= renewalWindowSeconds { return existing }
            // Renewed with the names it had (a `cert --host` name, an earlier bind address) as well.
            hosts = namesCarried(by: existing.certPEM) + hosts
        }
        if haveCert != haveKey {
            let missing = haveCert ? key : cert
            throw ServerFileError(path: missing, message: "missing while its pair exists; remove both files to regenerate")
        }
        try StateDirectory.create(tlsDirectory)
        let generated = try generateSelfSigned(days: generatedValidityDays, hosts: hosts)
        try StateDirectory.writeFile(key, contents: generated.keyPEM, mode: 0o600)
        try StateDirectory.writeFile(cert, contents: generated.certPEM, mode: 0o644)
        return try load(certPath: cert, keyPath: key)
    }

    /// Reads a configured certificate and key; each must exist, be PEM, and the key must match the certificate.
    public static func load(certPath: String, keyPath: String) throws(ServerFileError) -> TLSMaterial {
        let certPEM = try StateDirectory.readFile(certPath, what: "a PEM certificate")
        let keyPEM = try StateDirectory.readFile(keyPath, what: "a PEM private key")
        let cert = try X509Box(pem: certPEM, path: certPath)
        let key = try PrivateKeyBox(pem: keyPEM, path: keyPath)
        guard X509_check_private_key(cert.raw, key.raw) == 1 else {
            ERR_clear_error()
            throw ServerFileError(path: keyPath, message: "private key does not match the certificate \(certPath)")
        }
        return TLSMaterial(certPEM: certPEM, keyPEM: keyPEM, fingerprint: try cert.sha256Fingerprint(path: certPath),
                           certPath: certPath, keyPath: keyPath)
    }

    /// Seconds from now until the first certificate in `pem` expires (negative once it has).
    public static func secondsUntilExpiry(ofPEM pem: String) throws(ServerFileError) -> Int {
        let cert = try X509Box(pem: pem, path: "<memory>")
        var days: Int32 = 0, seconds: Int32 = 0
        guard ASN1_TIME_diff(&days, &seconds, nil, X509_get0_notAfter(cert.raw)) == 1 else {
            throw ServerFileError(path: "<memory>", message: "unreadable certificate expiry (\(OpenSSLFailure("ASN1_TIME_diff").detail))")
        }
        return Int(days) * 86_400 + Int(seconds)
    }

    /// Colon-separated uppercase hex of the SHA-256 of the first certificate in `pem`.
    public static func fingerprint(ofPEM pem: String) throws(ServerFileError) -> String {
        try X509Box(pem: pem, path: "<memory>").sha256Fingerprint(path: "<memory>")
    }

    /// A fresh EC P-256 key and a self-signed certificate (SAN DNS:localhost, IP:127.0.0.1, IP:::1,
    /// and each of `hosts`: an IP address as such, anything else as a DNS name), valid from an hour
    /// ago (notBefore) for exactly `days` days in total (notAfter = notBefore + `days`).
    /// Nothing is written.
    public static func generateSelfSigned(days: Int = generatedValidityDays, hosts: [String] = []) throws(ServerFileError) -> (certPEM: String, keyPEM: String) {
        if let bad = hosts.first(where: { sanEntry($0) == nil }) {
            throw ServerFileError(path: "<generated>", message: "\"\(bad)\": expected a host name or an IP address")
        }
        do {
            return try SelfSigned.generate(days: days, san: (["DNS:localhost", "IP:127.0.0.1", "IP:::1"] + hosts.compactMap(sanEntry))
                .reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }.joined(separator: ","))
        } catch {
            throw ServerFileError(path: "<generated>", message: "certificate generation failed: \(error.detail)")
        }
    }
}

extension TLSMaterial {
    /// The names a certificate generated for a server bound to `bind` carries besides `localhost`,
    /// `127.0.0.1` and `::1`: none on loopback; the address itself, or this machine's host name for
    /// `0.0.0.0` and `::`, elsewhere (so that a client on another machine can verify it with the
    /// certificate as its CA).
    public static func hosts(forBind bind: String) -> [String] {
        if AccessPolicy.isLoopback(bind) { return [] }
        guard bind == "0.0.0.0" || bind == "::" else { return [bind] }
        guard let host = machineHostName(), sanEntry(host) != nil else { return [] }
        return [host]
    }
}

extension TLSMaterial {
    /// Whether the certificate in `pem` is valid for `host` (a host name or an IP address), as a
    /// client verifying it would decide.
    public static func certificate(_ pem: String, covers host: String) -> Bool {
        guard let box = try? X509Box(pem: pem, path: "<memory>") else { return false }
        guard let entry = sanEntry(host) else { return false }
        if entry.hasPrefix("IP:") { return X509_check_ip_asc(box.raw, host, 0) == 1 }
        return X509_check_host(box.raw, host, host.utf8.count, 0, nil) == 1
    }
}

extension TLSMaterial {
    /// The host names and IP addresses in the SAN of the certificate in `pem` (IPv6 as OpenSSL
    /// prints them, in full); empty when it has none or cannot be read.
    public static func namesCarried(by pem: String) -> [String] {
        guard let box = try? X509Box(pem: pem, path: "<memory>") else { return [] }
        let index = X509_get_ext_by_NID(box.raw, NID_subject_alt_name, -1)
        guard index >= 0, let ext = X509_get_ext(box.raw, index),
              let text = try? SelfSigned.pem({ X509V3_EXT_print($0, ext, 0, 0) }) else { return [] }
        return text.split(separator: ",").compactMap { part -> String? in
            let entry = part.trimmingCharacters(in: .whitespaces)
            for prefix in ["DNS:", "IP Address:"] where entry.hasPrefix(prefix) { return String(entry.dropFirst(prefix.count)) }
            return nil
        }
    }
}

/// The SAN entry for `host`: `IP:` for an IPv4 or IPv6 address, `DNS:` for a host name (letters,
/// digits, `-`, `.`, a leading `*.`); nil for anything else.
public func sanEntry(_ host: String) -> String? {
    var v4 = in_addr(), v6 = in6_addr()
    if inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1 { return "IP:" + host }
    let name = host.hasPrefix("*.") ? String(host.dropFirst(2)) : host
    guard !name.isEmpty, name.count <= 253, !name.hasPrefix("."), !name.hasSuffix("."), !name.contains(".."),
          name.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7a) || $0 == 0x2d || $0 == 0x2e })
    else { return nil }
    return "DNS:" + host
}

/// An OpenSSL failure at one step, with OpenSSL's own reason.
struct OpenSSLFailure: Error {
    let detail: String
    init(_ step: String) {
        let code = ERR_get_error()
        ERR_clear_error()
        var buf = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buf, buf.count)
        let reason = buf.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        detail = "\(step): \(reason)"
    }
}

/// Owns an `X509 *`; used within one call.
final class X509Box {
    let raw: OpaquePointer
    init(pem: String, path: String) throws(ServerFileError) {
        guard pem.contains("-----BEGIN CERTIFICATE-----") else {
            throw ServerFileError(path: path, message: "expected a PEM certificate (-----BEGIN CERTIFICATE-----)")
        }
        let parsed: OpaquePointer? = withMemoryBIO(pem) { PEM_read_bio_X509($0, nil, nil, nil) }
        guard let parsed else {
            let failure = OpenSSLFailure("PEM_read_bio_X509")
            throw ServerFileError(path: path, message: "not a readable PEM certificate (\(failure.detail))")
        }
        raw = parsed
    }
    deinit { X509_free(raw) }

    func sha256Fingerprint(path: String) throws(ServerFileError) -> String {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        guard X509_digest(raw, EVP_sha256(), &digest, &length) == 1 else {
            throw ServerFileError(path: path, message: "cannot hash the certificate (\(OpenSSLFailure("X509_digest").detail))")
        }
        return digest.prefix(Int(length)).map { hexByte($0, uppercase: true) }.joined(separator: ":")
    }
}

/// Owns an `EVP_PKEY *`; used within one call.
final class PrivateKeyBox {
    let raw: OpaquePointer
    init(pem: String, path: String) throws(ServerFileError) {
        guard pem.contains("PRIVATE KEY-----") else {
            throw ServerFileError(path: path, message: "expected a PEM private key (-----BEGIN PRIVATE KEY-----)")
        }
        guard !pem.contains("ENCRYPTED") else {
            throw ServerFileError(path: path, message: "the private key is encrypted; expected an unencrypted PEM key")
        }
        // An explicit no-password callback: OpenSSL's default would prompt on the terminal.
        let parsed: OpaquePointer? = withMemoryBIO(pem) { PEM_read_bio_PrivateKey($0, nil, noPassword, nil) }
        guard let parsed else {
            let failure = OpenSSLFailure("PEM_read_bio_PrivateKey")
            throw ServerFileError(path: path, message: "not a readable unencrypted PEM private key (\(failure.detail))")
        }
        raw = parsed
    }
    deinit { EVP_PKEY_free(raw) }
}

/// A PEM password callback that supplies none.
private func noPassword(_ buffer: UnsafeMutablePointer<CChar>?, _ size: Int32, _ writing: Int32, _ context: UnsafeMutableRawPointer?) -> Int32 {
    -1
}

/// Runs `body` with a read-only memory BIO over `text`.
func withMemoryBIO<T>(_ text: String, _ body: (OpaquePointer) -> T?) -> T? {
    var bytes = Array(text.utf8)
    return bytes.withUnsafeMutableBytes { buffer -> T? in
        guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
        defer { BIO_free(bio) }
        return body(bio)
    }
}

func hexByte(_ byte: UInt8, uppercase: Bool) -> String {
    let digits: [Character] = uppercase ? Array("0123456789ABCDEF") : Array("0123456789abcdef")
    return String([digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]])
}

/// Key and certificate generation with non-variadic OpenSSL 3 calls (EVP_EC_gen is a variadic macro).
enum SelfSigned {
    static func generate(days: Int, san: String) throws(OpenSSLFailure) -> (certPEM: String, keyPEM: String) {
        guard let kctx = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { throw OpenSSLFailure("EVP_PKEY_CTX_new_from_name") }
        defer { EVP_PKEY_CTX_free(kctx) }
        guard EVP_PKEY_keygen_init(kctx) == 1 else { throw OpenSSLFailure("EVP_PKEY_keygen_init") }
        guard EVP_PKEY_CTX_set_group_name(kctx, "P-256") == 1 else { throw OpenSSLFailure("EVP_PKEY_CTX_set_group_name") }
        var generated: OpaquePointer?
        guard EVP_PKEY_generate(kctx, &generated) == 1, let pkey = generated else { throw OpenSSLFailure("EVP_PKEY_generate") }
        defer { EVP_PKEY_free(pkey) }

        guard let x509 = X509_new() else { throw OpenSSLFailure("X509_new") }
        defer { X509_free(x509) }
        guard X509_set_version(x509, 2) == 1 else { throw OpenSSLFailure("X509_set_version") }  // v3
        guard let serial = BN_new() else { throw OpenSSLFailure("BN_new") }
        defer { BN_free(serial) }
        guard BN_rand(serial, 63, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) == 1,
              BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(x509)) != nil else { throw OpenSSLFailure("serial number") }
        // Valid from an hour ago (clock skew), for exactly `days` days in total from then.
        var notBefore = time(nil) - 3600
        guard X509_time_adj_ex(X509_getm_notBefore(x509), 0, 0, &notBefore) != nil,
              X509_time_adj_ex(X509_getm_notAfter(x509), Int32(days), 0, &notBefore) != nil else { throw OpenSSLFailure("validity") }
        guard X509_set_pubkey(x509, pkey) == 1 else { throw OpenSSLFailure("X509_set_pubkey") }
        let name = X509_get_subject_name(x509)
        guard X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, "localhost", -1, -1, 0) == 1,
              X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, "FlowScope", -1, -1, 0) == 1,
              X509_set_issuer_name(x509, name) == 1 else { throw OpenSSLFailure("subject name") }

        var v3 = X509V3_CTX()
        X509V3_set_ctx(&v3, x509, x509, nil, nil, 0)  // X509V3_set_ctx_nodb is a macro; zeroed db does the same
        let extensions: [(Int32, String)] = [
            (NID_basic_constraints, "critical,CA:FALSE"),
            (NID_key_usage, "critical,digitalSignature"),
            (NID_ext_key_usage, "serverAuth"),
            (NID_subject_key_identifier, "hash"),
            (NID_subject_alt_name, san),
        ]
        for (nid, value) in extensions {
            guard let ext = X509V3_EXT_nconf_nid(nil, &v3, nid, value) else { throw OpenSSLFailure("extension \(value)") }
            defer { X509_EXTENSION_free(ext) }
            guard X509_add_ext(x509, ext, -1) == 1 else { throw OpenSSLFailure("X509_add_ext") }
        }
        guard X509_sign(x509, pkey, EVP_sha256()) > 0 else { throw OpenSSLFailure("X509_sign") }

        let keyPEM = try pem { PEM_write_bio_PrivateKey($0, pkey, nil, nil, 0, nil, nil) }
        let certPEM = try pem { PEM_write_bio_X509($0, x509) }
        return (certPEM, keyPEM)
    }

    /// Writes into a memory BIO and reads it back (BIO_get_mem_data is a macro).
    static func pem(_ write: (OpaquePointer) -> Int32) throws(OpenSSLFailure) -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { throw OpenSSLFailure("BIO_new") }
        defer { BIO_free(bio) }
        guard write(bio) == 1 else { throw OpenSSLFailure("PEM_write") }
        let count = Int(BIO_ctrl_pending(bio))
        var bytes = [UInt8](repeating: 0, count: count)
        guard BIO_read(bio, &bytes, Int32(count)) == Int32(count) else { throw OpenSSLFailure("BIO_read") }
        return String(decoding: bytes, as: UTF8.self)
    }
}
