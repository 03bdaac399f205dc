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

    /// The URL schemes `--from` reads.
    static let schemes = ["https", "http"]

    /// What `text` names: a URL for http(s), else a file, sniffed for the SQLite header. A URL of
    /// another scheme (`ftp://...`) is an error naming the schemes read; a missing, unreadable or
    /// directory path is an error naming the resolved path.
    static func parse(_ text: String, label: String = "--from") -> Result<TrafficSource, TrafficSourceError> {
        if let match = text.firstMatch(of: /^([A-Za-z][A-Za-z0-9+.\-]*):\/\//) {
            let scheme = match.1.lowercased()
            guard schemes.contains(scheme) else {
                return .failure(TrafficSourceError("\(label) \(text): the URL scheme \(scheme) is not read; expected https:// or "
                                                   + "http:// (https://HOST:PORT/api/events), or a file"))
            }
            guard let url = URL(string: text), url.host?.isEmpty == false else {
                return .failure(TrafficSourceError("\(label) \(text): expected a URL like https://HOST:PORT/api/events"))
            }
            return .success(.server(url: url))
        }
        if let problem = ServeChecks.fileProblem(text) {
            let hint = problem == "not found" ? " (expected a JSON Lines trace, an sqlite sink database, or https://HOST:PORT/api/events)" : ""
            return .failure(TrafficSourceError("\(label) \(FlowScopeConfig.absolutePath(text)): \(problem)\(hint)"))
        }
        guard let handle = FileHandle(forReadingAtPath: text) else {
            return .failure(TrafficSourceError("\(label) \(FlowScopeConfig.absolutePath(text)): cannot read the file"))
        }
        defer { try? handle.close() }
        let head = (try? handle.read(upToCount: 16)) ?? Data()
        if head.starts(with: Array("SQLite format 3\0".utf8)) { return .success(.sqlite(path: text)) }
        return .success(.jsonLines(path: text))
    }

    /// Reads every event. `caFile` and `token` apply to a server, and so does `defaultRun`: the run
    /// read when the URL names none (nil: every run). Errors begin with `label`, the flag or
    /// argument that named the source.
    func read(caFile: String?, token: String?, label: String = "--from", defaultRun: String? = "live") async -> Result<[Envelope], TrafficSourceError> {
        switch self {
        case .jsonLines(let path): return Self.readJSONLines(path, label: label)
        case .sqlite(let path): return Self.readSQLite(path, label: label)
        case .server(let url): return await Self.readServer(url, caFile: caFile, token: token, label: label, defaultRun: defaultRun)
        }
    }

    /// One envelope per non-blank line; an error names the flag, the file, the line and the JSON path.
    static func readJSONLines(_ path: String, chunkSize: Int = 1 << 20, label: String = "--from") -> Result<[Envelope], TrafficSourceError> {
        let shown = FlowScopeConfig.absolutePath(path)
        switch JSONLinesFile.envelopes(path, chunkSize: chunkSize) {
        case .success(let envelopes):
            return .success(envelopes)
        case .failure(.unreadable(let why)):
            return .failure(TrafficSourceError("\(label) \(shown): \(why)"))
        case .failure(.badLine(let line, let error)):
            return .failure(TrafficSourceError("\(label) \(shown): line \(line): \(error.description) "
                                               + "(expected one event envelope per line)"))
        }
    }

    /// Every event of an sqlite sink database, oldest first, read without changing the file.
    static func readSQLite(_ path: String, label: String = "--from") -> Result<[Envelope], TrafficSourceError> {
        do throws(SQLiteSinkError) {
            return .success(try SQLiteSink.storedEvents(inFile: FlowScopeConfig.absolutePath(path)).map(\.envelope))
        } catch {
            return .failure(TrafficSourceError("\(label) \(error.description)"))
        }
    }

    /// The page size asked of the server (its own limit may be smaller).
    static let pageLimit = 1000
    /// Most pages read: a server receiving events as fast as they are read ends there.
    static let maxPages = 10_000

    /// Pages through `GET /api/events?run=RUN&since=SEQ&limit=1000`, each page from the last seq of
    /// the one before, until a page is empty or shorter than the largest before it (the server's
    /// page size); `latestSeq` is not used (it is the memory sink's, not a stored run's). Without a
    /// `run` parameter in `url`, `run=live`.
    static func readServer(_ url: URL, caFile: String?, token: String?, label: String = "--from",
                           defaultRun: String? = "live") async -> Result<[Envelope], TrafficSourceError> {
        var out: [Envelope] = []
        var since: UInt64 = 0
        var pageSize = 0
        for _ in 0..<maxPages {
            guard let pageURL = pageURL(url, since: since, defaultRun: defaultRun) else {
                return .failure(TrafficSourceError("\(label) \(url.absoluteString): expected a URL like https://HOST:PORT/api/events"))
            }
            let body: [UInt8]
            switch await get(pageURL, caFile: caFile, token: token, label: label) {
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
            } catch {
                return .failure(TrafficSourceError("\(label) \(url.absoluteString): \(error.description)"))
            }
            out += page
            guard let last = page.last, last.seq > since, page.count >= pageSize else { break }
            pageSize = page.count
            since = last.seq
        }
        return .success(out)
    }

    /// `url` with `since` and `limit` set, and `run=DEFAULTRUN` when it names no run (nil: none).
    static func pageURL(_ url: URL, since: UInt64, defaultRun: String? = "live") -> URL? {
        guard var parts = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return nil }
        var items = (parts.queryItems ?? []).filter { $0.name != "since" && $0.name != "limit" }
        if let defaultRun, !items.contains(where: { $0.name == "run" }) { items.append(URLQueryItem(name: "run", value: defaultRun)) }
        parts.queryItems = items + [URLQueryItem(name: "since", value: String(since)),
                                    URLQueryItem(name: "limit", value: String(pageLimit))]
        return parts.url
    }

    private static func get(_ url: URL, caFile: String?, token: String?, label: String) async -> Result<[UInt8], TrafficSourceError> {
        var headers = [("Accept", "application/json")]
        if let token { headers.append(("Authorization", "Bearer \(token)")) }
        let status: Int, body: [UInt8]
        if let caFile, url.scheme?.lowercased() == "https" {
            if let problem = ServeChecks.fileProblem(caFile) {
                return .failure(TrafficSourceError("--ca \(FlowScopeConfig.absolutePath(caFile)): \(problem)"))
            }
            switch await TLSTransport.send("GET", url: url, headers: headers, caFile: caFile, timeout: 30, maxBodyBytes: 64 << 20) {
            case .success(let a): status = a.status; body = a.body
            case .failure(let f):
                return .failure(TrafficSourceError("\(label) \(url.absoluteString): \(f.reason): \(f.detail)"))
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
                return .failure(TrafficSourceError("\(label) \(url.absoluteString): \(error.localizedDescription)"
                                                   + (url.scheme == "https" && caFile == nil ? " (for a server's own certificate, give --ca FILE)" : "")))
            }
        }
        guard status == 200 else {
            let text = String(decoding: body.prefix(200), as: UTF8.self)
            return .failure(TrafficSourceError("\(label) \(url.absoluteString): HTTP \(status): \(text)"))
        }
        return .success(body)
    }
}

/// A source that cannot be read, with the one line to print.
struct TrafficSourceError: Error, Equatable {
    var message: String
    init(_ message: String) { self.message = message }
}
