import FlowEvents
import FlowFetch
import FlowJSON
import FlowTLS
import Foundation
import SQLiteSink
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Where `simulate --from` reads recorded events: a JSON Lines trace file (the jsonl sink's output),
/// an sqlite sink database, or a running server's `https://HOST:PORT/api/events`.
enum TrafficSource: Equatable {
    case jsonLines(path: String)
    case sqlite(path: String)
    case server(url: URL)

    /// What `text` names: a URL for http(s), else a file, sniffed for the SQLite header.
    static func parse(_ text: String) -> Result<TrafficSource, TrafficSourceError> {
        let lower = text.lowercased()
        if lower.hasPrefix("https://") || lower.hasPrefix("http://") {
            guard let url = URL(string: text), url.host != nil else {
                return .failure(TrafficSourceError("--from \(text): expected a URL like https://HOST:PORT/api/events"))
            }
            return .success(.server(url: url))
        }
        guard let handle = FileHandle(forReadingAtPath: text) else {
            return .failure(TrafficSourceError("--from \(text): cannot read the file (expected a JSON Lines trace, an sqlite sink "
                                               + "database, or https://HOST:PORT/api/events)"))
        }
        defer { try? handle.close() }
        let head = (try? handle.read(upToCount: 16)) ?? Data()
        if head.starts(with: Array("SQLite format 3\0".utf8)) { return .success(.sqlite(path: text)) }
        return .success(.jsonLines(path: text))
    }

    /// Reads every event. `caFile` and `token` apply to a server.
    func read(caFile: String?, token: String?) async -> Result<[Envelope], TrafficSourceError> {
        switch self {
        case .jsonLines(let path): return Self.readJSONLines(path)
        case .sqlite(let path): return Self.readSQLite(path)
        case .server(let url): return await Self.readServer(url, caFile: caFile, token: token)
        }
    }

    /// One envelope per non-blank line; an error names the file, the line and the JSON path.
    static func readJSONLines(_ path: String) -> Result<[Envelope], TrafficSourceError> {
        guard let data = FileManager.default.contents(atPath: path) else {
            return .failure(TrafficSourceError("--from \(path): cannot read the file"))
        }
        var out: [Envelope] = []
        var line = 0
        for slice in data.split(separator: 0x0A, omittingEmptySubsequences: false) {
            line += 1
            guard slice.contains(where: { $0 != 0x20 && $0 != 0x0D && $0 != 0x09 }) else { continue }
            do throws(JSONInputError) {
                out.append(try Envelope(jsonValue: try JSON5.parse(bytes: Array(slice))))
            } catch {
                return .failure(TrafficSourceError("\(path): line \(line): \(error.description) (expected one event envelope per line)"))
            }
        }
        return .success(out)
    }

    /// Every event of an sqlite sink database, oldest first.
    static func readSQLite(_ path: String) -> Result<[Envelope], TrafficSourceError> {
        do throws(SQLiteSinkError) {
            let store = try SQLiteSink(path: path)
            let count = try store.count()
            return .success(try store.storedEvents(limit: count + 1).map(\.envelope))
        } catch {
            return .failure(TrafficSourceError("--from \(error.description)"))
        }
    }

    /// Pages through `GET /api/events?since=SEQ&limit=1000` up to the newest event at the first page.
    static func readServer(_ url: URL, caFile: String?, token: String?) async -> Result<[Envelope], TrafficSourceError> {
        var out: [Envelope] = []
        var since: UInt64 = 0
        var newest: UInt64?
        // Bounded: a server with live traffic keeps adding events; stop at the newest seen first.
        for _ in 0..<100_000 {
            guard var parts = URLComponents(url: url, resolvingAgainstBaseURL: false) else { break }
            parts.queryItems = (parts.queryItems ?? []).filter { $0.name != "since" && $0.name != "limit" }
                + [URLQueryItem(name: "since", value: String(since)), URLQueryItem(name: "limit", value: "1000")]
            guard let pageURL = parts.url else { break }
            let body: [UInt8]
            switch await get(pageURL, caFile: caFile, token: token) {
            case .success(let b): body = b
            case .failure(let e): return .failure(e)
            }
            let page: [Envelope]
            do throws(JSONInputError) {
                let value = try JSON5.parse(bytes: body)
                guard let events = value["events"] else {
                    throw JSONInputError(path: "$.events", message: "required key is missing (expected the answer of GET /api/events)")
                }
                page = try Envelope.decodeAll(events, path: "$.events")
                if newest == nil { newest = value["latestSeq"]?.numberValue.map { UInt64(max($0, 0)) } ?? 0 }
            } catch {
                return .failure(TrafficSourceError("--from \(url.absoluteString): \(error.description)"))
            }
            out += page
            guard let last = page.last, last.seq > since, last.seq < (newest ?? 0) else { break }
            since = last.seq
        }
        return .success(out)
    }

    private static func get(_ url: URL, caFile: String?, token: String?) async -> Result<[UInt8], TrafficSourceError> {
        var headers = [("Accept", "application/json")]
        if let token { headers.append(("Authorization", "Bearer \(token)")) }
        let status: Int, body: [UInt8]
        if let caFile, url.scheme?.lowercased() == "https" {
            guard FileManager.default.isReadableFile(atPath: caFile) else {
                return .failure(TrafficSourceError("--ca \(caFile): cannot read the file"))
            }
            switch await TLSTransport.send("GET", url: url, headers: headers, caFile: caFile, timeout: 30, maxBodyBytes: 64 << 20) {
            case .success(let a): status = a.status; body = a.body
            case .failure(let f):
                return .failure(TrafficSourceError("--from \(url.absoluteString): \(f.reason): \(f.detail)"))
            }
        } else {
            var request = URLRequest(url: url)
            request.timeoutInterval = 30
            for (k, v) in headers { request.setValue(v, forHTTPHeaderField: k) }
            do {
                let (data, response) = try await URLSession.shared.data(for: request)
                status = (response as? HTTPURLResponse)?.statusCode ?? 0
                body = Array(data)
            } catch {
                return .failure(TrafficSourceError("--from \(url.absoluteString): \(error.localizedDescription)"
                                                   + (url.scheme == "https" && caFile == nil ? " (for a server's own certificate, give --ca FILE)" : "")))
            }
        }
        guard status == 200 else {
            let text = String(decoding: body.prefix(200), as: UTF8.self)
            return .failure(TrafficSourceError("--from \(url.absoluteString): HTTP \(status): \(text)"))
        }
        return .success(body)
    }
}

/// A source that cannot be read, with the one line to print.
struct TrafficSourceError: Error, Equatable {
    var message: String
    init(_ message: String) { self.message = message }
}
