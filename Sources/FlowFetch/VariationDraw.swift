/// The deterministic A/B assignment of fetch-semantics.md: the same profile always gets the same
/// variation of an audience version.
public enum VariationDraw {
    /// The bucket 0..<100 of a profile for an audience version: MD5 of `"<versionId>-<profileId>"`,
    /// bytes 8..<16 read big-endian, modulo 100.
    public static func bucket(audienceVersionId: String, profileId: String) -> Int {
        var md5 = MD5()
        md5.update(audienceVersionId)
        md5.update(byte: UInt8(ascii: "-"))
        md5.update(profileId)
        return Int(md5.finish().low % 100)
    }

    /// Picks the variation for `profileId`, or nil when the weights do not sum to 100 (the response is
    /// then invalid: decodingFailed). Variations are walked sorted by (weight, id), accumulating weights;
    /// the first whose cumulative weight exceeds the bucket wins.
    public static func pick(_ payload: AudiencePayload, profileId: String) -> Variation? {
        guard !payload.variations.isEmpty, payload.variations.allSatisfy({ $0.weight >= 0 }),
              payload.variations.reduce(0, { $0 + $1.weight }) == 100 else { return nil }
        let b = bucket(audienceVersionId: payload.audienceVersionId, profileId: profileId)
        let order: (Variation, Variation) -> Bool = { ($0.weight, $0.id) < ($1.weight, $1.id) }
        let variations = payload.variations
        // Backends usually send them in order already: then there is nothing to sort (or allocate).
        let inOrder = zip(variations, variations.dropFirst()).allSatisfy { !order($1, $0) }
        let sorted = inOrder ? variations : variations.sorted(by: order)
        var cumulative = 0
        for v in sorted {
            cumulative += v.weight
            if cumulative > b { return v }
        }
        return nil
    }
}
