// swift-tools-version:6.0
import PackageDescription

/// A sink plugin lives in plugins/<dir>/ with its own Sources, Tests and README.
/// `testExclude`: files in the Tests folder that are not Swift (check scripts the tests run).
func plugin(_ name: String, dir: String, extra: [Target.Dependency] = [], testExclude: [String] = []) -> [Target] {
    [
        .target(name: name, dependencies: ["FlowEvents", "FlowJSON"] + extra, path: "plugins/\(dir)/Sources"),
        .testTarget(name: "\(name)Tests", dependencies: [.target(name: name), "FlowEvents", "FlowFetch", "FlowJSON", "FlowScopeTesting", "TestSupport"],
                    path: "plugins/\(dir)/Tests", exclude: testExclude),
    ]
}

/// The built-in sinks, one product each (reuse in-process).
let builtInSinks = ["MetricsSink", "MemorySink", "SQLiteSink", "JSONLinesSink", "OTLPSink", "ExecSink", "ConsoleSink"]

let package = Package(
    name: "FlowScope",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "flowscope", targets: ["flowscope"]),
        // App code: the engine. Links no test framework.
        .library(name: "FlowFetch", targets: ["FlowFetch"]),
        // Sink authors and apps that run the pipeline in-process: the sink SDK.
        .library(name: "FlowEvents", targets: ["FlowEvents"]),
        // Test targets: the test kit (one import gives everything the README's test samples use).
        .library(name: "FlowScopeTesting", targets: ["FlowScopeTesting"]),
        // Custom distributions: the whole CLI with extra sink types.
        .library(name: "FlowScopeCLI", targets: ["FlowScopeCLI"]),
    ] + builtInSinks.map { .library(name: $0, targets: [$0]) },
    targets: [
        // System libraries (Debian packages), reached through module maps and pkg-config.
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),

        // Layers, lowest first: nothing imports a module above it.
        .target(name: "FlowJSON"),
        .target(name: "FlowFetch", dependencies: ["FlowJSON", "COpenSSL"]),
        .target(name: "FlowEvents", dependencies: ["FlowFetch", "FlowJSON"]),
        .target(name: "FlowSim", dependencies: ["FlowFetch", "FlowEvents", "FlowJSON"]),
    ]
    + plugin("MetricsSink", dir: "metrics")
    + plugin("MemorySink", dir: "memory")
    + plugin("SQLiteSink", dir: "sqlite", extra: ["CSQLite"])
    + plugin("JSONLinesSink", dir: "jsonl")
    + plugin("OTLPSink", dir: "otlp", testExclude: ["check_otlp_json.py"])
    + plugin("ExecSink", dir: "exec")
    + plugin("ConsoleSink", dir: "console")
    + [
        // The server knows capabilities (an event store, a metrics exposition, sink stats), no sink.
        .target(name: "FlowScopeServer", dependencies: ["FlowEvents", "FlowJSON", "CMicroHTTPD", "COpenSSL"]),
        // Tools that need no test framework (call timelines, the stub backend): the CLI uses these.
        .target(name: "FlowScopeTools", dependencies: ["FlowFetch", "FlowEvents", "FlowSim", "FlowJSON", "CMicroHTTPD"]),
        // The test kit users add to their test targets (Swift Testing trait, expectations, trace files).
        .target(name: "FlowScopeTesting", dependencies: ["FlowScopeTools", "FlowFetch", "FlowEvents", "FlowSim", "FlowJSON"]),
        .target(name: "FlowScopeCLI", dependencies: [
            "FlowJSON", "FlowFetch", "FlowEvents", "FlowSim", "FlowScopeServer", "FlowScopeTools",
            "MetricsSink", "MemorySink", "SQLiteSink", "JSONLinesSink", "OTLPSink", "ExecSink", "ConsoleSink",
        ], plugins: ["EmbedAssets"]),
        .executableTarget(name: "flowscope", dependencies: ["FlowScopeCLI"]),
        // Compiles web/, config/flowscope.json5 and config/demo/ into FlowScopeCLI at build time.
        .executableTarget(name: "AssetEmbedder"),
        .plugin(name: "EmbedAssets", capability: .buildTool(), dependencies: ["AssetEmbedder"]),

        // Helpers shared by several test targets (a loopback HTTP server).
        .target(name: "TestSupport", dependencies: ["COpenSSL"], path: "Tests/Support"),
        .testTarget(name: "FlowJSONTests", dependencies: ["FlowJSON", "TestSupport"]),
        .testTarget(name: "FlowFetchTests", dependencies: ["FlowFetch", "FlowJSON", "TestSupport"]),
        .testTarget(name: "FlowEventsTests", dependencies: ["FlowEvents", "FlowFetch", "FlowJSON", "TestSupport"]),
        .testTarget(name: "FlowSimTests", dependencies: ["FlowSim", "FlowFetch", "FlowEvents", "FlowJSON"]),
        .testTarget(name: "FlowScopeServerTests", dependencies: ["TestSupport", "FlowScopeServer", "FlowEvents", "FlowJSON", "MetricsSink", "MemorySink"]),
        .testTarget(name: "FlowScopeTestingTests", dependencies: ["FlowScopeTesting", "FlowScopeTools", "FlowFetch", "FlowSim", "FlowJSON", "TestSupport"]),
        .testTarget(name: "FlowScopeCLITests", dependencies: ["FlowScopeCLI", "FlowJSON", "TestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
