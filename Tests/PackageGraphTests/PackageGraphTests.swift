import FlowJSON
import Foundation
import Synchronization
import TestSupport
import Testing

/// The libraries an app and its tests link build wherever Swift runs (iOS, macOS, Linux): nothing they
/// pull in may be a system library (a C library from a package manager: libmicrohttpd, OpenSSL, SQLite).
@Suite("Package graph", .ownThread)
struct PackageGraphTests {
    /// The products that must stay free of system libraries.
    static let portableProducts = ["FlowFetch", "FlowEvents", "FlowScopeTesting"]

    /// The package as `swift package describe --type json` sees it: each target's type and dependencies,
    /// each product's targets.
    struct Graph {
        var targetTypes: [String: String]
        var dependencies: [String: [String]]
        var productTargets: [String: [String]]

        init(describeJSON: JSONValue) throws {
            targetTypes = [:]
            dependencies = [:]
            productTargets = [:]
            for t in describeJSON["targets"]?.arrayValue ?? [] {
                let name = try #require(t["name"]?.stringValue)
                targetTypes[name] = t["type"]?.stringValue ?? ""
                dependencies[name] = (t["target_dependencies"]?.arrayValue ?? []).compactMap(\.stringValue)
            }
            for p in describeJSON["products"]?.arrayValue ?? [] {
                let name = try #require(p["name"]?.stringValue)
                productTargets[name] = (p["targets"]?.arrayValue ?? []).compactMap(\.stringValue)
            }
        }

        init(targetTypes: [String: String], dependencies: [String: [String]], productTargets: [String: [String]]) {
            self.targetTypes = targetTypes
            self.dependencies = dependencies
            self.productTargets = productTargets
        }

        /// Every path from `product` (its targets, or the target of that name while there is no such
        /// product) to a system-library target, written `product -> target -> ... -> system target`
        /// (`target -> ... -> system target` from a target).
        func pathsToSystemLibraries(from product: String) -> [String] {
            let starts = productTargets[product] ?? (targetTypes[product] != nil ? [product] : [])
            var parent: [String: String] = [:]
            var seen = Set(starts)
            var queue = starts
            var found: [String] = []
            while !queue.isEmpty {
                let target = queue.removeFirst()
                if targetTypes[target] == "system-target" {
                    var path = [target]
                    while let p = parent[path[0]] { path.insert(p, at: 0) }
                    found.append((productTargets[product] != nil ? [product] + path : path).joined(separator: " -> "))
                    continue
                }
                for next in dependencies[target] ?? [] where !seen.contains(next) {
                    seen.insert(next)
                    parent[next] = target
                    queue.append(next)
                }
            }
            return found
        }
    }

    /// The package root: two levels above this file's folder.
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    /// The package as an Apple platform builds it: `swift package describe --type json`, less the
    /// target dependencies `swift package dump-package` says apply on other platforms only (the test
    /// kit's FlowTLS, Linux only).
    static func describePackage() throws -> JSONValue {
        guard case .object(var described) = try runPackage(["describe", "--type", "json"]) else { return .null }
        let dumped = try runPackage(["dump-package"])
        let apple: Set<String> = ["macos", "ios", "tvos", "watchos", "visionos", "maccatalyst", "driverkit"]
        var otherPlatformsOnly: [String: Set<String>] = [:]
        for t in dumped["targets"]?.arrayValue ?? [] {
            guard let name = t["name"]?.stringValue else { continue }
            for d in t["dependencies"]?.arrayValue ?? [] {
                for kind in ["target", "byName", "product"] {
                    guard let entry = d[kind]?.arrayValue, let dependency = entry.first?.stringValue,
                          let platforms = entry.last?["platformNames"]?.arrayValue?.compactMap(\.stringValue) else { continue }
                    if apple.isDisjoint(with: platforms) { otherPlatformsOnly[name, default: []].insert(dependency) }
                }
            }
        }
        described["targets"] = .array((described["targets"]?.arrayValue ?? []).map { t in
            guard case .object(var o) = t, let name = t["name"]?.stringValue, let skip = otherPlatformsOnly[name] else { return t }
            o["target_dependencies"] = .array((t["target_dependencies"]?.arrayValue ?? []).filter { !skip.contains($0.stringValue ?? "") })
            o["otherPlatformsOnly"] = .array(skip.sorted().map(JSONValue.string))
            return .object(o)
        })
        return .object(described)
    }

    /// Runs `swift package ARGUMENTS` on the package and parses its JSON output. Its scratch path is a
    /// fresh temporary folder: the package's own .build is locked while `swift test` runs.
    static func runPackage(_ arguments: [String]) throws -> JSONValue {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("flowscope-describe-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["swift", "package", "--package-path", packageRoot, "--scratch-path", scratch] + arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        // Read both pipes to their ends so neither fills up and stalls the child.
        let errorText = Mutex(Data())
        let reader = Thread { errorText.withLock { $0 = err.fileHandleForReading.readDataToEndOfFile() } }
        reader.start()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        while !reader.isFinished { Thread.sleep(forTimeInterval: 0.01) }
        try #require(process.terminationStatus == 0,
                     "swift package \(arguments.joined(separator: " ")) failed: \(String(decoding: errorText.withLock { $0 }, as: UTF8.self))")
        return try JSON5.parse(String(decoding: data, as: UTF8.self))
    }

    @Test("FlowFetch, FlowEvents and FlowScopeTesting pull in no system library (swift package describe)")
    func portableProductsHaveNoSystemLibrary() throws {
        let graph = try Graph(describeJSON: try Self.describePackage())
        #expect(graph.targetTypes.values.contains("system-target"), "the package's system libraries are listed as system-target")
        for product in Self.portableProducts {
            #expect(graph.productTargets[product] != nil || graph.targetTypes[product] != nil, "\(product) is in the package")
            let paths = graph.pathsToSystemLibraries(from: product)
            #expect(paths.isEmpty, "\(product) reaches a system library: \(paths.joined(separator: "; "))")
        }
    }

    @Test("the test kit's FlowTLS (attach over OpenSSL) is a Linux-only dependency: Apple platforms do not build it")
    func testKitTLSIsLinuxOnly() throws {
        let described = try Self.describePackage()
        let kit = try #require(described["targets"]?.arrayValue?.first { $0["name"] == "FlowScopeTesting" })
        #expect(kit["otherPlatformsOnly"] == ["FlowTLS"])
        #expect(kit["target_dependencies"]?.arrayValue?.contains("FlowTLS") == false)
    }

    @Test("the walk names the whole path to a system library, through products and nested targets")
    func walkNamesThePath() {
        let graph = Graph(targetTypes: ["A": "library", "B": "library", "C": "library", "CLib": "system-target"],
                          dependencies: ["A": ["B"], "B": ["C"], "C": ["CLib"]],
                          productTargets: ["Kit": ["A"]])
        #expect(graph.pathsToSystemLibraries(from: "Kit") == ["Kit -> A -> B -> C -> CLib"])
        #expect(graph.pathsToSystemLibraries(from: "B") == ["B -> C -> CLib"])
        let clean = Graph(targetTypes: ["A": "library", "B": "library"], dependencies: ["A": ["B"]], productTargets: ["Kit": ["A"]])
        #expect(clean.pathsToSystemLibraries(from: "Kit").isEmpty)
    }
}
