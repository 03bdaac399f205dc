import FlowEvents

/// What `GET /metrics` renders: the families of every sink that exposes metrics, one after another,
/// in sink order. Two sinks exposing one family name are refused when it is made.
///
/// Each sink is asked with the scrape's `Accept` header. When all answer with one content type,
/// that is the answer (OpenMetrics: one `# EOF`, at the end); when they disagree (one sink speaks
/// only Prometheus text), every sink is asked for Prometheus text (`accept` nil) instead.
public struct CombinedMetrics: MetricsExposing {
    /// Two sinks expose the same metric family.
    public struct Collision: Error, Sendable, Equatable, CustomStringConvertible {
        /// The family's name.
        public var family: String
        /// The two sinks, in sink order.
        public var first: String, second: String
        /// `metric family "x" is exposed by both sink "a" and sink "b"`.
        public var description: String {
            "metric family \"\(family)\" is exposed by both sink \"\(first)\" and sink \"\(second)\" (rename one, or disable one sink)"
        }
    }

    /// The sinks, by name, in order.
    public let sources: [(name: String, exposing: any MetricsExposing)]

    /// Combines `sources`; throws the first family name two of them expose.
    public init(_ sources: [(name: String, exposing: any MetricsExposing)]) throws(Collision) {
        var owner: [String: String] = [:]
        for source in sources {
            for family in source.exposing.metricFamilyNames.sorted() {
                if let other = owner[family] { throw Collision(family: family, first: other, second: source.name) }
                owner[family] = source.name
            }
        }
        self.sources = sources
    }

    /// The families of every source, checked for collisions when made.
    public var metricFamilyNames: Set<String> { sources.reduce(into: []) { $0.formUnion($1.exposing.metricFamilyNames) } }

    /// Every source's exposition for `accept`, concatenated (see the type's comment).
    public func exposition(accept: String?) -> (contentType: String, body: [UInt8]) {
        if sources.count == 1 { return sources[0].exposing.exposition(accept: accept) }
        var parts = sources.map { $0.exposing.exposition(accept: accept) }
        if Set(parts.map(\.contentType)).count > 1 { parts = sources.map { $0.exposing.exposition(accept: nil) } }
        guard let contentType = parts.first?.contentType else {
            return ("text/plain; version=0.0.4; charset=utf-8", [])
        }
        let eof = Array("# EOF\n".utf8)
        var body: [UInt8] = []
        body.reserveCapacity(parts.reduce(0) { $0 + $1.body.count })
        var sawEOF = false
        for part in parts {
            var bytes = part.body[...]
            if bytes.hasSuffix(eof) {
                sawEOF = true
                bytes = bytes.dropLast(eof.count)
            }
            body += bytes
            if let last = body.last, last != UInt8(ascii: "\n") { body.append(UInt8(ascii: "\n")) }
        }
        if sawEOF { body += eof }
        return (contentType, body)
    }
}

extension ArraySlice<UInt8> {
    fileprivate func hasSuffix(_ suffix: [UInt8]) -> Bool { count >= suffix.count && self.suffix(suffix.count).elementsEqual(suffix) }
}
