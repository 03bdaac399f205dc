import FlowJSON

extension RESTCoding {
    /// A layout as `GET /v1/layouts/{id}?version=N` returns it:
    /// `{"id","version","screens":[...],"styles"?,"texts"?,"images":[{"url","customMediaId"?,"preview"?}],"videos":["url"]}`;
    /// `styles` and `texts` are kept as they came, whatever their JSON shape.
    public static func layoutJSON(_ l: Layout) -> JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(l.id), "version": .number(Double(l.version)), "screens": l.screens,
            "images": .array(l.images.map { i in
                var o: [String: JSONValue] = ["url": .string(i.url)]
                if let m = i.customMediaId { o["customMediaId"] = .string(m) }
                if let p = i.preview { o["preview"] = .string(p) }
                return .object(o)
            }),
            "videos": .array(l.videos.map(JSONValue.string)),
        ]
        if let styles = l.styles { o["styles"] = styles }
        if let texts = l.texts { o["texts"] = texts }
        return .object(o)
    }

    /// Reads a layout; errors name the JSON path.
    public static func layout(from c: JSONCursor) throws(JSONInputError) -> Layout {
        let o = try c.object()
        var images: [LayoutImage] = []
        for i in try o.optional("images")?.array() ?? [] {
            let io = try i.object()
            images.append(LayoutImage(url: try io.required("url").nonEmptyString(),
                                      customMediaId: try io.optional("customMediaId").flatMap { m throws(JSONInputError) in m.isNull ? nil : try m.string() },
                                      preview: try io.optional("preview").flatMap { p throws(JSONInputError) in p.isNull ? nil : try p.string() }))
        }
        return Layout(id: try o.required("id").nonEmptyString(), version: try o.required("version").int(),
                      screens: o.optional("screens")?.value ?? .array([]),
                      styles: o.optional("styles").flatMap { $0.isNull ? nil : $0.value },
                      texts: o.optional("texts").flatMap { $0.isNull ? nil : $0.value }, images: images,
                      videos: try o.optional("videos")?.array().map { v throws(JSONInputError) in try v.string() } ?? [])
    }

    /// A profile as `GET /v1/profiles/{id}` returns it: `{"id","appliedAttributionSources":["appleAds"]}`.
    public static func profileJSON(_ p: Profile) -> JSONValue {
        ["id": .string(p.id), "appliedAttributionSources": .array(p.appliedAttributionSources.sorted().map(JSONValue.string))]
    }

    /// Reads a profile; errors name the JSON path.
    public static func profile(from c: JSONCursor) throws(JSONInputError) -> Profile {
        let o = try c.object()
        let sources = try o.optional("appliedAttributionSources")?.array().map { s throws(JSONInputError) in try s.string() } ?? []
        return Profile(id: try o.required("id").nonEmptyString(), appliedAttributionSources: Set(sources))
    }
}
