import FlowJSON

/// Writes OTLP/JSON `ExportTraceServiceRequest` bodies (the OTLP/HTTP JSON encoding).
///
/// The rules the OTLP specification adds to protobuf's JSON mapping: `traceId`/`spanId`/
/// `parentSpanId` are lowercase hex (not base64), enums are integers, field names lowerCamelCase,
/// 64-bit integers (`startTimeUnixNano`, `intValue`) are strings.
public enum OTLPEncoding {
    /// The instrumentation scope name.
    public static let scopeName = "flowscope"

    /// One request body carrying `spans` for the service `flowscope` at `serviceVersion`.
    public static func exportRequest(_ spans: [OTLPSpan], serviceVersion: String) -> String {
        var out = ""
        out.reserveCapacity(512 + spans.count * 600)
        out += "{\"resourceSpans\":[{\"resource\":{\"attributes\":["
        writeKeyValue("service.name", .string("flowscope"), to: &out)
        out += ","
        writeKeyValue("service.version", .string(serviceVersion), to: &out)
        out += "]},\"scopeSpans\":[{\"scope\":{\"name\":"
        JSONWriter.writeString(scopeName, to: &out)
        out += ",\"version\":"
        JSONWriter.writeString(serviceVersion, to: &out)
        out += "},\"spans\":["
        for (i, span) in spans.enumerated() {
            if i > 0 { out += "," }
            writeSpan(span, to: &out)
        }
        out += "]}]}]}"
        return out
    }

    /// Appends one `Span` object.
    public static func writeSpan(_ span: OTLPSpan, to out: inout String) {
        out += "{\"traceId\":\""
        out += span.traceId
        out += "\",\"spanId\":\""
        out += span.spanId
        out += "\""
        if let parent = span.parentSpanId {
            out += ",\"parentSpanId\":\""
            out += parent
            out += "\""
        }
        out += ",\"name\":"
        JSONWriter.writeString(span.name, to: &out)
        out += ",\"kind\":"
        out += String(span.kind.rawValue)
        out += ",\"startTimeUnixNano\":\""
        out += String(span.startTimeUnixNano)
        out += "\",\"endTimeUnixNano\":\""
        out += String(span.endTimeUnixNano)
        out += "\",\"attributes\":"
        writeAttributes(span.attributes, to: &out)
        out += ",\"events\":["
        for (i, event) in span.events.enumerated() {
            if i > 0 { out += "," }
            out += "{\"timeUnixNano\":\""
            out += String(event.timeUnixNano)
            out += "\",\"name\":"
            JSONWriter.writeString(event.name, to: &out)
            out += ",\"attributes\":"
            writeAttributes(event.attributes, to: &out)
            out += "}"
        }
        out += "]"
        switch span.status {
        case .unset: out += ",\"status\":{}"
        case .error(let message):
            // STATUS_CODE_ERROR = 2.
            out += ",\"status\":{\"code\":2,\"message\":"
            JSONWriter.writeString(message, to: &out)
            out += "}"
        }
        out += "}"
    }

    /// Appends a `KeyValue` list, keys sorted; null values are left out (OTLP has no null).
    public static func writeAttributes(_ attributes: [String: JSONValue], to out: inout String) {
        out += "["
        var first = true
        for key in attributes.keys.sorted() {
            guard let value = attributes[key], value != .null else { continue }
            if !first { out += "," }
            first = false
            writeKeyValue(key, value, to: &out)
        }
        out += "]"
    }

    static func writeKeyValue(_ key: String, _ value: JSONValue, to out: inout String) {
        out += "{\"key\":"
        JSONWriter.writeString(key, to: &out)
        out += ",\"value\":"
        writeAnyValue(value, to: &out)
        out += "}"
    }

    /// Appends an `AnyValue`: strings, integers (as decimal strings), doubles, booleans, arrays
    /// and key-value lists. Null is the empty AnyValue.
    public static func writeAnyValue(_ value: JSONValue, to out: inout String) {
        switch value {
        case .null: out += "{}"
        case .bool(let b): out += b ? "{\"boolValue\":true}" : "{\"boolValue\":false}"
        case .string(let s):
            out += "{\"stringValue\":"
            JSONWriter.writeString(s, to: &out)
            out += "}"
        case .number(let n):
            if n.isFinite, n.rounded() == n, abs(n) < 9.007_199_254_740_992e15 {
                out += "{\"intValue\":\""
                out += String(Int64(n))
                out += "\"}"
            } else if n.isNaN {
                out += "{\"doubleValue\":\"NaN\"}"
            } else if n.isInfinite {
                out += n > 0 ? "{\"doubleValue\":\"Infinity\"}" : "{\"doubleValue\":\"-Infinity\"}"
            } else {
                out += "{\"doubleValue\":"
                JSONWriter.writeNumber(n, to: &out)
                out += "}"
            }
        case .array(let items):
            out += "{\"arrayValue\":{\"values\":["
            for (i, item) in items.enumerated() {
                if i > 0 { out += "," }
                writeAnyValue(item, to: &out)
            }
            out += "]}}"
        case .object(let members):
            out += "{\"kvlistValue\":{\"values\":["
            for (i, key) in members.keys.sorted().enumerated() {
                if i > 0 { out += "," }
                writeKeyValue(key, members[key] ?? .null, to: &out)
            }
            out += "]}}"
        }
    }
}
