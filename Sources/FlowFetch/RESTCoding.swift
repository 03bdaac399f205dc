import FlowJSON

/// The backend REST protocol's JSON shapes (docs/fetch-rules.md), both ways.
public enum RESTCoding {
    /// `{"placementId","audience":{"name","versionId"},"variations":[...],"createdAt"}`.
    public static func audienceJSON(_ p: AudiencePayload, createdAt: Double = 0) -> JSONValue {
        [
            "placementId": .string(p.placementId),
            "audience": ["name": .string(p.audienceName), "versionId": .string(p.audienceVersionId)],
            "variations": .array(p.variations.map(variationJSON)),
            "createdAt": .number(createdAt),
        ]
    }

    static func variationJSON(_ v: Variation) -> JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(v.id), "weight": .number(Double(v.weight)), "revision": .number(Double(v.revision)),
            "productIds": .array(v.productIds.map(JSONValue.string)), "remoteConfig": .object(v.remoteConfig),
        ]
        if let l = v.layout { o["layout"] = ["id": .string(l.id), "version": .number(Double(l.version))] }
        return .object(o)
    }

    /// Reads an audience response; errors name the JSON path.
    public static func audience(from c: JSONCursor) throws(JSONInputError) -> AudiencePayload {
        let o = try c.object()
        let audience = try o.required("audience").object()
        var variations: [Variation] = []
        for v in try o.required("variations").array() {
            let vo = try v.object()
            var layout: LayoutRef?
            if let l = vo.optional("layout"), !l.isNull {
                let lo = try l.object()
                layout = LayoutRef(id: try lo.required("id").string(), version: try lo.required("version").int())
            }
            variations.append(Variation(
                id: try vo.required("id").nonEmptyString(), weight: try vo.required("weight").int(),
                revision: try vo.optional("revision")?.int() ?? 0,
                productIds: try vo.optional("productIds")?.array().map { p throws(JSONInputError) in try p.string() } ?? [],
                remoteConfig: try vo.optional("remoteConfig")?.object().members ?? [:], layout: layout))
        }
        return AudiencePayload(placementId: try o.required("placementId").nonEmptyString(),
                               audienceName: try audience.required("name").nonEmptyString(),
                               audienceVersionId: try audience.required("versionId").nonEmptyString(),
                               variations: variations)
    }
}
