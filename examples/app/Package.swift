// swift-tools-version:6.0
// An app that loads its paywall with FlowScope's engine, and tests that run its loading code in
// virtual time. It depends on FlowScope by path, as your package would (or by URL).
import PackageDescription

let package = Package(
    name: "PaywallApp",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "FlowScope", path: "../..")],
    targets: [
        // App code: the engine only (no test framework is linked into the app).
        .target(name: "Paywall", dependencies: [.product(name: "FlowFetch", package: "FlowScope")]),
        .executableTarget(name: "paywall-app", dependencies: ["Paywall", .product(name: "FlowFetch", package: "FlowScope")]),
        // Tests: the test kit, one import.
        .testTarget(name: "PaywallTests", dependencies: ["Paywall", .product(name: "FlowScopeTesting", package: "FlowScope")],
                    resources: [.copy("Fixtures")]),
    ],
    swiftLanguageModes: [.v6]
)
