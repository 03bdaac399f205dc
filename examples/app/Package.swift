// swift-tools-version:6.1
// An app that loads its paywall with FlowScope's engine, and tests that run its loading code in
// virtual time. It depends on FlowScope by path, as your package would (or by URL).
import PackageDescription

let package = Package(
    name: "PaywallApp",
    platforms: [.macOS(.v15), .iOS(.v18)],
    dependencies: [.package(name: "FlowScope", path: "../..")],
    targets: [
        // App code: the engine only (no test framework is linked into the app).
        .target(name: "Paywall", dependencies: [.product(name: "FlowFetch", package: "FlowScope")]),
        .executableTarget(name: "paywall-app", dependencies: ["Paywall", .product(name: "FlowFetch", package: "FlowScope")]),
        // The same app running the event pipeline in-process, with a built-in sink.
        .executableTarget(name: "paywall-events", dependencies: [
            "Paywall", .product(name: "FlowFetch", package: "FlowScope"), .product(name: "FlowEvents", package: "FlowScope"),
            .product(name: "ConsoleSink", package: "FlowScope"),
        ]),
        // Tests in virtual time: the test kit; the scenario files are the test target's resources.
        .testTarget(name: "PaywallTests", dependencies: ["Paywall", .product(name: "FlowScopeTesting", package: "FlowScope")],
                    resources: [.copy("Fixtures")]),
        // Tests of a real FlowClient over real sockets: the stub backend too (Linux and macOS only).
        .testTarget(name: "PaywallSocketTests", dependencies: [
            "Paywall", .product(name: "FlowScopeTesting", package: "FlowScope"),
            .product(name: "FlowScopeStubBackend", package: "FlowScope"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
