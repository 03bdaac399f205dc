import FlowJSON

/// A user's profile as the engine knows it.
public struct Profile: Sendable, Hashable {
    /// The profile id; cache entries and variation draws are scoped to it.
    public var id: String
    /// Attribution sources the backend has applied to this profile (`appleAds` is the one the seeds use).
    public var appliedAttributionSources: Set<String>
    public init(id: String, appliedAttributionSources: Set<String> = []) {
        self.id = id
        self.appliedAttributionSources = appliedAttributionSources
    }
}

/// The default audience every placement has.
public let defaultAudienceName = "All Users"

/// Reference to a layout: its id and version.
public struct LayoutRef: Sendable, Hashable {
    public var id: String
    public var version: Int
    public init(id: String, version: Int) { self.id = id; self.version = version }
}

/// One variant of an audience as the backend sends it.
///
/// A value type whose fields sit in one shared, immutable box (as ``AudiencePayload``'s do): the
/// variation drawn for a response is copied into the flow at the cost of one reference count.
/// Setting a field makes a new box.
public struct Variation: Sendable, Hashable {
    private final class Fields: Sendable {
        let id: String, weight: Int, revision: Int
        let productIds: [String]
        let remoteConfig: [String: JSONValue]
        let layout: LayoutRef?
        init(id: String, weight: Int, revision: Int, productIds: [String], remoteConfig: [String: JSONValue], layout: LayoutRef?) {
            self.id = id; self.weight = weight; self.revision = revision; self.productIds = productIds
            self.remoteConfig = remoteConfig; self.layout = layout
        }
        /// A copy with the given fields changed.
        func with(id: String? = nil, weight: Int? = nil, revision: Int? = nil, productIds: [String]? = nil,
                  remoteConfig: [String: JSONValue]? = nil, layout: LayoutRef?? = nil) -> Fields {
            Fields(id: id ?? self.id, weight: weight ?? self.weight, revision: revision ?? self.revision,
                   productIds: productIds ?? self.productIds, remoteConfig: remoteConfig ?? self.remoteConfig,
                   layout: layout ?? self.layout)
        }
    }
    private var fields: Fields

    public var id: String {
        get { fields.id }
        set { fields = fields.with(id: newValue) }
    }
    /// Integer weight; an audience's weights sum to 100.
    public var weight: Int {
        get { fields.weight }
        set { fields = fields.with(weight: newValue) }
    }
    public var revision: Int {
        get { fields.revision }
        set { fields = fields.with(revision: newValue) }
    }
    public var productIds: [String] {
        get { fields.productIds }
        set { fields = fields.with(productIds: newValue) }
    }
    public var remoteConfig: [String: JSONValue] {
        get { fields.remoteConfig }
        set { fields = fields.with(remoteConfig: newValue) }
    }
    public var layout: LayoutRef? {
        get { fields.layout }
        set { fields = fields.with(layout: .some(newValue)) }
    }

    public init(id: String, weight: Int, revision: Int = 0, productIds: [String] = [],
                remoteConfig: [String: JSONValue] = [:], layout: LayoutRef? = nil) {
        fields = Fields(id: id, weight: weight, revision: revision, productIds: productIds, remoteConfig: remoteConfig, layout: layout)
    }

    public static func == (a: Variation, b: Variation) -> Bool {
        a.fields === b.fields || (a.id == b.id && a.weight == b.weight && a.revision == b.revision
            && a.productIds == b.productIds && a.remoteConfig == b.remoteConfig && a.layout == b.layout)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(id); hasher.combine(weight); hasher.combine(revision)
        hasher.combine(productIds); hasher.combine(remoteConfig); hasher.combine(layout)
    }
}

/// What the backend answers for a placement: the audience resolved for the profile, with all its
/// variations. The client draws one (``VariationDraw``).
///
/// A value type whose fields sit in one shared, immutable box, as ``Flow``'s do: a payload travels
/// from the response through the machine into the flow and the cache, and each copy costs one
/// reference count instead of four. Setting a field makes a new box.
public struct AudiencePayload: Sendable, Hashable {
    private final class Fields: Sendable {
        let placementId: String, audienceName: String, audienceVersionId: String
        let variations: [Variation]
        init(placementId: String, audienceName: String, audienceVersionId: String, variations: [Variation]) {
            self.placementId = placementId; self.audienceName = audienceName
            self.audienceVersionId = audienceVersionId; self.variations = variations
        }
        /// A copy with the given fields changed.
        func with(placementId: String? = nil, audienceName: String? = nil, audienceVersionId: String? = nil,
                  variations: [Variation]? = nil) -> Fields {
            Fields(placementId: placementId ?? self.placementId, audienceName: audienceName ?? self.audienceName,
                   audienceVersionId: audienceVersionId ?? self.audienceVersionId, variations: variations ?? self.variations)
        }
    }
    private var fields: Fields

    public var placementId: String {
        get { fields.placementId }
        set { fields = fields.with(placementId: newValue) }
    }
    public var audienceName: String {
        get { fields.audienceName }
        set { fields = fields.with(audienceName: newValue) }
    }
    public var audienceVersionId: String {
        get { fields.audienceVersionId }
        set { fields = fields.with(audienceVersionId: newValue) }
    }
    public var variations: [Variation] {
        get { fields.variations }
        set { fields = fields.with(variations: newValue) }
    }

    public init(placementId: String, audienceName: String, audienceVersionId: String, variations: [Variation]) {
        fields = Fields(placementId: placementId, audienceName: audienceName, audienceVersionId: audienceVersionId, variations: variations)
    }

    public static func == (a: AudiencePayload, b: AudiencePayload) -> Bool {
        a.fields === b.fields || (a.placementId == b.placementId && a.audienceName == b.audienceName
            && a.audienceVersionId == b.audienceVersionId && a.variations == b.variations)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(placementId); hasher.combine(audienceName); hasher.combine(audienceVersionId); hasher.combine(variations)
    }
}

extension AudiencePayload {
    /// Whether both share one box (then every field is equal): an exact test that costs a pointer
    /// comparison, for memos that hold the payloads they compare.
    func isSameInstance(as other: AudiencePayload) -> Bool { fields === other.fields }
}

/// Where a flow (or a layout) came from.
public enum FlowSource: String, Sendable, Hashable, CaseIterable {
    case network, cache, defaultAudience, fallbackFile
}

/// What getFlow returns: the variation chosen for a placement, and where it came from.
///
/// A value type whose variation data sits in one shared, immutable box: copying a flow (into the
/// cache, an outcome, an event) costs one reference count, not a copy of every field. Setting a field
/// copies the box first, so flows behave exactly like plain structs.
public struct Flow: Sendable, Hashable {
    /// The fields that come from the backend's variation, shared between copies.
    private final class Variant: Sendable, Hashable {
        let placementId: String, variationId: String, audienceName: String, audienceVersionId: String
        let revision: Int
        let productIds: [String]
        let remoteConfig: [String: JSONValue]
        let layout: LayoutRef?

        init(placementId: String, variationId: String, audienceName: String, audienceVersionId: String,
             revision: Int, productIds: [String], remoteConfig: [String: JSONValue], layout: LayoutRef?) {
            self.placementId = placementId; self.variationId = variationId; self.audienceName = audienceName
            self.audienceVersionId = audienceVersionId; self.revision = revision; self.productIds = productIds
            self.remoteConfig = remoteConfig; self.layout = layout
        }

        /// A copy with one field changed.
        func with(placementId: String? = nil, variationId: String? = nil, audienceName: String? = nil,
                  audienceVersionId: String? = nil, revision: Int? = nil, productIds: [String]? = nil,
                  remoteConfig: [String: JSONValue]? = nil, layout: LayoutRef?? = nil) -> Variant {
            Variant(placementId: placementId ?? self.placementId, variationId: variationId ?? self.variationId,
                    audienceName: audienceName ?? self.audienceName, audienceVersionId: audienceVersionId ?? self.audienceVersionId,
                    revision: revision ?? self.revision, productIds: productIds ?? self.productIds,
                    remoteConfig: remoteConfig ?? self.remoteConfig, layout: layout ?? self.layout)
        }

        static func == (a: Variant, b: Variant) -> Bool {
            a === b || (a.placementId == b.placementId && a.variationId == b.variationId && a.audienceName == b.audienceName
                && a.audienceVersionId == b.audienceVersionId && a.revision == b.revision && a.productIds == b.productIds
                && a.remoteConfig == b.remoteConfig && a.layout == b.layout)
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(placementId); hasher.combine(variationId); hasher.combine(audienceName)
            hasher.combine(audienceVersionId); hasher.combine(revision); hasher.combine(productIds)
            hasher.combine(remoteConfig); hasher.combine(layout)
        }
    }

    private var variant: Variant
    public var source: FlowSource
    /// True when the flow came from a default-audience fetch (directly, from the fallback file, or
    /// from a cache entry stored from one): the user's own audience may have been missed.
    public var targetingLost: Bool

    public var placementId: String {
        get { variant.placementId }
        set { variant = variant.with(placementId: newValue) }
    }
    public var variationId: String {
        get { variant.variationId }
        set { variant = variant.with(variationId: newValue) }
    }
    public var audienceName: String {
        get { variant.audienceName }
        set { variant = variant.with(audienceName: newValue) }
    }
    public var audienceVersionId: String {
        get { variant.audienceVersionId }
        set { variant = variant.with(audienceVersionId: newValue) }
    }
    public var revision: Int {
        get { variant.revision }
        set { variant = variant.with(revision: newValue) }
    }
    public var productIds: [String] {
        get { variant.productIds }
        set { variant = variant.with(productIds: newValue) }
    }
    public var remoteConfig: [String: JSONValue] {
        get { variant.remoteConfig }
        set { variant = variant.with(remoteConfig: newValue) }
    }
    public var layout: LayoutRef? {
        get { variant.layout }
        set { variant = variant.with(layout: .some(newValue)) }
    }

    public init(placementId: String, variationId: String, audienceName: String, audienceVersionId: String,
                revision: Int = 0, productIds: [String] = [], remoteConfig: [String: JSONValue] = [:],
                layout: LayoutRef? = nil, source: FlowSource, targetingLost: Bool) {
        variant = Variant(placementId: placementId, variationId: variationId, audienceName: audienceName,
                          audienceVersionId: audienceVersionId, revision: revision, productIds: productIds,
                          remoteConfig: remoteConfig, layout: layout)
        self.source = source
        self.targetingLost = targetingLost
    }

    /// The flow made of `variation` of `payload`.
    public init(payload: AudiencePayload, variation: Variation, source: FlowSource, targetingLost: Bool) {
        self.init(placementId: payload.placementId, variationId: variation.id, audienceName: payload.audienceName,
                  audienceVersionId: payload.audienceVersionId, revision: variation.revision,
                  productIds: variation.productIds, remoteConfig: variation.remoteConfig, layout: variation.layout,
                  source: source, targetingLost: targetingLost)
    }
}

/// How getFlow uses the cache before going to the network.
public enum FetchPolicy: Sendable, Hashable, CustomStringConvertible {
    /// Network first; the cache only as a fallback. The default.
    case reloadRevalidatingCacheData
    /// A cached entry of any age is returned at once, with no request.
    case returnCacheDataElseLoad
    /// A cached entry younger than `maxAge` seconds is returned at once; an older one is expired.
    case returnCacheDataIfNotExpiredElseLoad(maxAge: Double)

    public var description: String {
        switch self {
        case .reloadRevalidatingCacheData: "reloadRevalidatingCacheData"
        case .returnCacheDataElseLoad: "returnCacheDataElseLoad"
        case .returnCacheDataIfNotExpiredElseLoad(let maxAge):
            "returnCacheDataIfNotExpiredElseLoad(\(JSONValue.number(maxAge).jsonText))"
        }
    }
}

/// One image of a layout.
public struct LayoutImage: Sendable, Hashable {
    /// Where the full image is downloaded from.
    public var url: String
    /// A custom media id an app's assets resolver may map to a bundled file.
    public var customMediaId: String?
    /// Inline low-resolution preview (base64), shown until the image is there.
    public var preview: String?
    public init(url: String, customMediaId: String? = nil, preview: String? = nil) {
        self.url = url; self.customMediaId = customMediaId; self.preview = preview
    }
}

/// A flow's layout: screens, styles and texts (kept as JSON, as the backend sent them), images and
/// video references.
///
/// A value type whose fields sit in one shared, immutable box, like ``Flow``: a layout travels
/// inside responses, outcomes and actions, and moving it then moves one reference, not seven
/// fields. Setting a field copies the box first, so layouts behave exactly like plain structs.
public struct Layout: Sendable, Hashable {
    private final class Fields: Sendable, Hashable {
        let id: String, version: Int
        let screens: JSONValue, styles: JSONValue?, texts: JSONValue?
        let images: [LayoutImage], videos: [String]

        init(id: String, version: Int, screens: JSONValue, styles: JSONValue?, texts: JSONValue?,
             images: [LayoutImage], videos: [String]) {
            self.id = id; self.version = version; self.screens = screens; self.styles = styles; self.texts = texts
            self.images = images; self.videos = videos
        }

        /// A copy with the given fields changed.
        func with(id: String? = nil, version: Int? = nil, screens: JSONValue? = nil, styles: JSONValue?? = nil,
                  texts: JSONValue?? = nil, images: [LayoutImage]? = nil, videos: [String]? = nil) -> Fields {
            Fields(id: id ?? self.id, version: version ?? self.version, screens: screens ?? self.screens,
                   styles: styles ?? self.styles, texts: texts ?? self.texts, images: images ?? self.images,
                   videos: videos ?? self.videos)
        }

        static func == (a: Fields, b: Fields) -> Bool {
            a === b || (a.id == b.id && a.version == b.version && a.screens == b.screens && a.styles == b.styles
                && a.texts == b.texts && a.images == b.images && a.videos == b.videos)
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(id); hasher.combine(version); hasher.combine(screens); hasher.combine(styles)
            hasher.combine(texts); hasher.combine(images); hasher.combine(videos)
        }
    }

    private var fields: Fields

    public var id: String {
        get { fields.id }
        set { fields = fields.with(id: newValue) }
    }
    public var version: Int {
        get { fields.version }
        set { fields = fields.with(version: newValue) }
    }
    public var screens: JSONValue {
        get { fields.screens }
        set { fields = fields.with(screens: newValue) }
    }
    /// The layout's styles, when the backend sends them (nil: the layout has none).
    public var styles: JSONValue? {
        get { fields.styles }
        set { fields = fields.with(styles: .some(newValue)) }
    }
    /// The layout's texts (for example localized strings by key), when the backend sends them.
    public var texts: JSONValue? {
        get { fields.texts }
        set { fields = fields.with(texts: .some(newValue)) }
    }
    public var images: [LayoutImage] {
        get { fields.images }
        set { fields = fields.with(images: newValue) }
    }
    /// Video references; videos are never cached by the engine.
    public var videos: [String] {
        get { fields.videos }
        set { fields = fields.with(videos: newValue) }
    }

    public init(id: String, version: Int, screens: JSONValue = .array([]), styles: JSONValue? = nil, texts: JSONValue? = nil,
                images: [LayoutImage] = [], videos: [String] = []) {
        fields = Fields(id: id, version: version, screens: screens, styles: styles, texts: texts, images: images, videos: videos)
    }
    public var ref: LayoutRef { LayoutRef(id: id, version: version) }
}

/// What getFlowConfiguration returns: the layout for a flow and where it came from.
public struct FlowConfiguration: Sendable, Hashable {
    public var flow: Flow
    public var layout: Layout
    /// `cache`, `fallbackFile` or `network`.
    public var source: FlowSource
    public init(flow: Flow, layout: Layout, source: FlowSource) { self.flow = flow; self.layout = layout; self.source = source }
}

/// The bundled fallback file: one default-audience flow per placement, and layouts.
public struct FallbackFile: Sendable, Hashable {
    /// The only format version this engine reads.
    public static let supportedFormatVersion = 1
    public var createdAt: Double
    /// Per placement: the audience payload with exactly one variation.
    public var placements: [String: AudiencePayload]
    public var layouts: [String: Layout]
    public init(createdAt: Double = 0, placements: [String: AudiencePayload], layouts: [String: Layout] = [:]) {
        self.createdAt = createdAt; self.placements = placements; self.layouts = layouts
    }

    /// The fallback flow for a placement, if the file has one.
    public func flow(for placementId: String) -> Flow? {
        guard let payload = placements[placementId], let variation = payload.variations.first else { return nil }
        return Flow(payload: payload, variation: variation, source: .fallbackFile, targetingLost: true)
    }
}
