import FlowJSON
import Foundation

extension FallbackFile {
    /// Loads a fallback file (docs/fetch-rules.md, "The fallback file"):
    /// `{"formatVersion": 1, "createdAt": <ms>, "placements": {"<id>": <REST audience response, one variation>},
    /// "layouts": {"<layoutId>": <layout>}}`. Any other formatVersion is rejected, and nothing of a bad file
    /// is used. Errors name the file and the JSON path; ``JSONInputError/wrongParam`` turns one into the
    /// engine's wrongParam (3001).
    public static func load(path: String) throws(JSONInputError) -> FallbackFile {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw JSONInputError(file: path, path: JSONPath.root, message: "cannot read the file")
        }
        return try decode(bytes: Array(data), file: path)
    }

    /// Decodes a fallback file's bytes; `file` names it in errors.
    public static func decode(bytes: [UInt8], file: String? = nil) throws(JSONInputError) -> FallbackFile {
        do {
            return try decode(JSON5.parse(bytes: bytes))
        } catch {
            throw file.map(error.inFile) ?? error
        }
    }

    /// Decodes a fallback file from its JSON.
    public static func decode(_ root: JSONValue) throws(JSONInputError) -> FallbackFile {
        let o = try JSONCursor(root).object()
        let versionCursor = try o.required("formatVersion")
        let version = try versionCursor.int()
        guard version == supportedFormatVersion else {
            throw versionCursor.error("unsupported formatVersion \(version): this engine reads formatVersion \(supportedFormatVersion)")
        }
        let createdAt = try o.optional("createdAt")?.double() ?? 0
        var placements: [String: AudiencePayload] = [:]
        for (id, c) in try o.required("placements").object().entries {
            let payload = try RESTCoding.audience(from: c)
            let fields = try c.object()
            guard payload.variations.count == 1 else {
                throw try fields.required("variations").error(
                    "a fallback flow has exactly one variation, got \(payload.variations.count)")
            }
            guard payload.placementId == id else {
                throw try fields.required("placementId").error("expected \"\(id)\" (the key of this placement), got \"\(payload.placementId)\"")
            }
            placements[id] = payload
        }
        var layouts: [String: Layout] = [:]
        for (id, c) in try o.optional("layouts")?.object().entries ?? [] {
            let layout = try RESTCoding.layout(from: c)
            guard layout.id == id else {
                throw try c.object().required("id").error("expected \"\(id)\" (the key of this layout), got \"\(layout.id)\"")
            }
            layouts[id] = layout
        }
        return FallbackFile(createdAt: createdAt, placements: placements, layouts: layouts)
    }

    /// The file as JSON (what ``decode(_:)`` reads).
    public var json: JSONValue {
        [
            "formatVersion": .number(Double(Self.supportedFormatVersion)), "createdAt": .number(createdAt),
            "placements": .object(placements.mapValues { RESTCoding.audienceJSON($0) }),
            "layouts": .object(layouts.mapValues(RESTCoding.layoutJSON)),
        ]
    }
}

extension JSONInputError {
    /// This input error as the engine's wrongParam (3001), e.g. a fallback file that cannot be used.
    public var wrongParam: FlowError { FlowError(.wrongParam, description) }
}
