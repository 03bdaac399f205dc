/// The deterministic A/B assignment of docs/fetch-rules.md: the same profile always gets the same
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
        pick(payload) { bucket(audienceVersionId: $0, profileId: profileId) }
    }

    /// ``pick(_:profileId:)``, taking the bucket from `memo` when it holds it (and remembering it there).
    static func pick(_ payload: AudiencePayload, profileId: String, memo: inout BucketMemo) -> Variation? {
        pick(payload) { memo.bucket(audienceVersionId: $0, profileId: profileId) }
    }

    /// The pick with the bucket of an audience version id given by `bucket`.
    @inline(__always)
    private static func pick(_ payload: AudiencePayload, bucket: (String) -> Int) -> Variation? {
        let variations = payload.variations
        // Weights come from the backend: stop as soon as the sum passes 100 (no overflow, however
        // many huge weights a response carries).
        var total = 0
        for i in variations.indices {
            guard variations[i].weight >= 0, variations[i].weight <= 100 - total else { return nil }
            total += variations[i].weight
        }
        guard !variations.isEmpty, total == 100 else { return nil }
        let b = bucket(payload.audienceVersionId)
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

    /// The last few buckets drawn, by (audience version, profile): a bucket is a pure function of the
    /// two ids, so a remembered one is the one MD5 would give.
    struct BucketMemo {
        private var recent = RecentEntries<(versionId: String, profileId: String, bucket: Int)>()

        init() {}

        /// The bucket of the pair, from memory or computed (and then remembered).
        mutating func bucket(audienceVersionId: String, profileId: String) -> Int {
            // By index, compared in place (iterating the entries would copy, and retain, each one's ids).
            for i in recent.entries.indices
            where recent.entries[i].versionId == audienceVersionId && recent.entries[i].profileId == profileId {
                return recent.entries[i].bucket
            }
            let b = VariationDraw.bucket(audienceVersionId: audienceVersionId, profileId: profileId)
            recent.remember((audienceVersionId, profileId, b))
            return b
        }
    }

    /// The last few flows built, by payload instance and profile: a payload and a profile always give
    /// the same flow, so a remembered one is shared (its variation data is one box) instead of drawn
    /// and built again. Each entry holds its payload, so an instance compared by identity is never a
    /// new payload at a reused address.
    struct FlowMemo {
        private var recent = RecentEntries<(payload: AudiencePayload, profileId: String, flow: Flow)>()

        init() {}

        /// The flow built for the pair, if remembered (with the source it was built with).
        func flow(_ payload: AudiencePayload, profileId: String) -> Flow? {
            for i in recent.entries.indices
            where recent.entries[i].payload.isSameInstance(as: payload) && recent.entries[i].profileId == profileId {
                return recent.entries[i].flow
            }
            return nil
        }

        /// Remembers the flow built for the pair.
        mutating func remember(_ payload: AudiencePayload, profileId: String, _ flow: Flow) {
            recent.remember((payload, profileId, flow))
        }
    }
}

/// The last eight entries remembered, the oldest replaced first once full: the engine's memos.
struct RecentEntries<Entry> {
    static var capacity: Int { 8 }
    private(set) var entries: [Entry] = []
    private var next = 0

    /// Adds `entry`, replacing the oldest when full.
    mutating func remember(_ entry: Entry) {
        if entries.count < Self.capacity {
            if entries.isEmpty { entries.reserveCapacity(Self.capacity) }
            entries.append(entry)
        } else {
            entries[next] = entry
            next = (next + 1) % Self.capacity
        }
    }
}
