// swift-tools-version:6.1
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
    // The libraries (FlowFetch, FlowEvents, FlowScopeTesting) also build for iOS; Linux needs no entry.
    // macOS 15 and iOS 18: the Synchronization module's Mutex and Atomic. Tools version 6.1: the test
    // kit's trait scopes each test (Swift Testing's TestScoping, Xcode 16.3).
    platforms: [.macOS(.v15), .iOS(.v18)],
    products: [
        .executable(name: "flowscope", targets: ["flowscope"]),
        // App code: the engine. Links no test framework.
        .library(name: "FlowFetch", targets: ["FlowFetch"]),
        // Sink authors and apps that run the pipeline in-process: the sink SDK.
        .library(name: "FlowEvents", targets: ["FlowEvents"]),
        // Test targets: the test kit (re-exports the engine, the event SDK and the lab; a test still imports
        // Testing or XCTest, and Foundation for Bundle and URL).
        .library(name: "FlowScopeTesting", targets: ["FlowScopeTesting"]),
        // Custom distributions: the whole CLI with extra sink types.
        .library(name: "FlowScopeCLI", targets: ["FlowScopeCLI"]),
        // Linux and macOS only (C libraries): the real-socket stub backend, and OpenSSL's custom-CA client.
        .library(name: "FlowScopeStubBackend", targets: ["FlowScopeStubBackend"]),
        .library(name: "FlowTLS", targets: ["FlowTLS"]),
    ] + builtInSinks.map { .library(name: $0, targets: [$0]) },
    targets: [
        // System libraries (Debian packages, or Homebrew on macOS), reached through module maps and
        // pkg-config. Homebrew's openssl@3 and sqlite are keg-only: docs/platforms.md says how
        // pkg-config finds them.
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"]), .brew(["libmicrohttpd"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"]), .brew(["openssl@3"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]),

        // Layers, lowest first: nothing imports a module above it.
        .target(name: "FlowJSON"),
        .target(name: "FlowFetch", dependencies: ["FlowJSON"]),
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
        // The server knows capabilities (an event store, a metrics exposition, sink stats), no sink;
        // FlowSim for the scenario that reproduces a stored call.
        .target(name: "FlowScopeServer", dependencies: ["FlowEvents", "FlowJSON", "FlowSim", "CMicroHTTPD", "COpenSSL"]),
        // Tools that need no test framework (call timelines): the CLI and the test kit use these.
        .target(name: "FlowScopeTools", dependencies: ["FlowFetch", "FlowEvents", "FlowJSON"]),
        // The backend REST protocol on real sockets (libmicrohttpd), for tests and `flowscope stub-backend`.
        .target(name: "FlowScopeStubBackend", dependencies: ["FlowFetch", "FlowJSON", "FlowSim", "CMicroHTTPD"]),
        // HTTPS that trusts a custom CA on Linux (OpenSSL), where URLSession cannot.
        .target(name: "FlowTLS", dependencies: ["FlowFetch", "COpenSSL"]),
        // The test kit users add to their test targets (Swift Testing trait, expectations, trace files).
        // On Linux it attaches over OpenSSL (FlowTLS), where URLSession cannot trust FLOWSCOPE_CA.
        .target(name: "FlowScopeTesting", dependencies: [
            "FlowScopeTools", "FlowFetch", "FlowEvents", "FlowSim", "FlowJSON", .target(name: "FlowTLS", condition: .when(platforms: [.linux])),
        ]),
        .target(name: "FlowScopeCLI", dependencies: [
            "FlowJSON", "FlowFetch", "FlowEvents", "FlowSim", "FlowScopeServer", "FlowScopeTools", "FlowScopeStubBackend", "FlowTLS",
            "MetricsSink", "MemorySink", "SQLiteSink", "JSONLinesSink", "OTLPSink", "ExecSink", "ConsoleSink",
        ], plugins: ["EmbedAssets"]),
        .executableTarget(name: "flowscope", dependencies: ["FlowScopeCLI"]),
        // Compiles web/, config/flowscope.json5 and config/demo/ into FlowScopeCLI at build time.
        .executableTarget(name: "AssetEmbedder"),
        // In BuildTools/, not SwiftPM's default Plugins/: plugins/ holds the sinks, and a case-insensitive
        // file system (macOS's default) would check both out into one folder.
        .plugin(name: "EmbedAssets", capability: .buildTool(), dependencies: ["AssetEmbedder"], path: "BuildTools/EmbedAssets"),

        // Helpers shared by several test targets (a loopback HTTP server, the `.ownThread` trait).
        .target(name: "TestSupport", dependencies: ["COpenSSL", "FlowEvents", "FlowFetch", "FlowJSON"], path: "Tests/Support"),
        .testTarget(name: "FlowJSONTests", dependencies: ["FlowJSON", "TestSupport"]),
        .testTarget(name: "FlowFetchTests", dependencies: ["FlowFetch", "FlowJSON", "FlowTLS", "TestSupport"]),
        .testTarget(name: "FlowEventsTests", dependencies: ["FlowEvents", "FlowFetch", "FlowJSON", "TestSupport"]),
        .testTarget(name: "FlowSimTests", dependencies: ["FlowSim", "FlowFetch", "FlowEvents", "FlowJSON", "TestSupport"]),
        .testTarget(name: "FlowScopeServerTests", dependencies: ["TestSupport", "FlowScopeServer", "FlowEvents", "FlowJSON", "MetricsSink", "MemorySink",
                                                          "SQLiteSink"]),
        .testTarget(name: "FlowScopeTestingTests", dependencies: [
            "FlowScopeTesting", "FlowScopeTools", "FlowScopeStubBackend", "FlowTLS", "FlowFetch", "FlowSim", "FlowJSON", "TestSupport",
        ]),
        // Reads the package graph: the libraries apps link pull in no system library.
        .testTarget(name: "PackageGraphTests", dependencies: ["FlowJSON", "TestSupport"]),
        .testTarget(name: "FlowScopeCLITests", dependencies: ["FlowScopeCLI", "FlowEvents", "FlowScopeStubBackend", "FlowJSON", "TestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
