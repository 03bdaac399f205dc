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
        let variations = payload.variations
        var total = 0
        for i in variations.indices {
            guard variations[i].weight >= 0 else { return nil }
            total += variations[i].weight
        }
        guard !variations.isEmpty, total == 100 else { return nil }
        let b = bucket(audienceVersionId: payload.audienceVersionId, profileId: profileId)
        func before(_ i: Int, _ j: Int) -> Bool {
            (variations[i].weight, variations[i].id) < (variations[j].weight, variations[j].id)
        }
        // Walked by index (no variation is copied but the one returned). Backends usually send them
        // in order already: then there is nothing to sort (or allocate).
        func walk(_ order: some Sequence<Int>) -> Variation? {
            var cumulative = 0
            for i in order {
                cumulative += variations[i].weight
                if cumulative > b { return variations[i] }
            }
            return nil
        }
        let inOrder = variations.indices.dropFirst().allSatisfy { !before($0, $0 - 1) }
        return inOrder ? walk(variations.indices) : walk(variations.indices.sorted(by: before))
    }
}
