import FlowFetch
import FlowJSON
import Foundation
import Testing

@Suite("Fallback file loading")
struct RuntimeFallbackFileTests {
    static let valid = """
    {
      "formatVersion": 1, "createdAt": 1733100000000,
      "placements": {
        "main": { "placementId": "main", "audience": { "name": "All Users", "versionId": "av-fb" },
                  "variations": [ { "id": "fb-A", "weight": 100, "revision": 2, "productIds": ["p1"], "remoteConfig": { "x": 1 },
                                    "layout": { "id": "L1", "version": 3 } } ],
                  "createdAt": 1733100000000 }
      },
      "layouts": { "L1": { "id": "L1", "version": 3, "screens": ["main"], "images": [ { "url": "https://a.invalid/1.png", "preview": "AAAA" } ] } }
    }
    """

    static func write(_ text: String) throws -> String {
        let path = temporaryDirectory() + ".json"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test("a valid file loads its flows and layouts, and the engine serves its flow as fallbackFile")
    func loads() async throws {
        let path = try Self.write(Self.valid)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let file = try FallbackFile.load(path: path)
        let flow = try #require(file.flow(for: "main"))
        #expect(flow.variationId == "fb-A")
        #expect(flow.productIds == ["p1"])
        #expect(flow.layout == LayoutRef(id: "L1", version: 3))
        #expect(file.layouts["L1"]?.images.first?.preview == "AAAA")
        #expect(try FallbackFile.decode(file.json) == file, "the JSON form round-trips")

        let client = FlowClient(profile: Profile(id: "p"), backend: FixedBackend(fail: .http(status: 503)),
                                configuration: .init(fallback: file))
        #expect(try await client.getFlow(placementId: "main", loadTimeout: 30).source == .fallbackFile)
    }

    @Test("another formatVersion is rejected with the file, the path and what is supported; it maps to wrongParam")
    func wrongVersion() throws {
        let path = try Self.write(Self.valid.replacingOccurrences(of: "\"formatVersion\": 1", with: "\"formatVersion\": 2"))
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            _ = try FallbackFile.load(path: path)
            Issue.record("expected an error")
        } catch {
            #expect(error.file == path)
            #expect(error.path == "$.formatVersion")
            #expect(error.message.contains("formatVersion 2"))
            #expect(error.wrongParam.code == .wrongParam)
            #expect(error.wrongParam.message.contains(path))
        }
    }

    @Test("bad files name the JSON path at fault", arguments: [
        ("{\"placements\": {}}", "$", "formatVersion"),
        ("{\"formatVersion\": 1, \"placements\": {\"main\": {\"placementId\": \"main\", \"audience\": {\"name\": \"All Users\", \"versionId\": \"v\"}, \"variations\": [{\"id\": \"a\", \"weight\": 50}, {\"id\": \"b\", \"weight\": 50}]}}}",
         "$.placements.main.variations", "exactly one variation"),
        ("{\"formatVersion\": 1, \"placements\": {\"main\": {\"placementId\": \"other\", \"audience\": {\"name\": \"All Users\", \"versionId\": \"v\"}, \"variations\": [{\"id\": \"a\", \"weight\": 100}]}}}",
         "$.placements.main.placementId", "expected \"main\""),
        ("{\"formatVersion\": 1, \"placements\": {\"main\": {\"placementId\": \"main\", \"variations\": []}}}",
         "$.placements.main", "audience"),
        ("{\"formatVersion\": 1, \"placements\": {}, \"layouts\": {\"L1\": {\"id\": \"L1\", \"version\": \"three\"}}}",
         "$.layouts.L1.version", ""),
        ("{\"formatVersion\": 1, \"placements\": [", "$.placements[0]", "line 1"),
    ])
    func badFiles(text: String, path: String, fragment: String) throws {
        let file = try Self.write(text)
        defer { try? FileManager.default.removeItem(atPath: file) }
        do {
            _ = try FallbackFile.load(path: file)
            Issue.record("expected an error for \(text)")
        } catch {
            #expect(error.file == file)
            #expect(error.path == path, "\(error)")
            #expect(fragment.isEmpty || error.description.contains(fragment), "\(error)")
        }
    }

    @Test("a missing file is an error naming it")
    func missing() {
        do {
            _ = try FallbackFile.load(path: "/nonexistent/fallback.json")
            Issue.record("expected an error")
        } catch {
            #expect(error.description == "/nonexistent/fallback.json: $: cannot read the file")
        }
    }
}
