// swift-tools-version:6.1
// A sink of your own (AuditSink), its conformance test, and a custom `flowscope` that knows it.
import PackageDescription

let package = Package(
    name: "FlowScopeAudit",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "FlowScope", path: "../..")],
    targets: [
        // The sink: the sink SDK only.
        .target(name: "AuditSink", dependencies: [.product(name: "FlowEvents", package: "FlowScope")]),
        // The distribution: the whole CLI plus the sink's factory.
        .executableTarget(name: "flowscope-audit", dependencies: ["AuditSink", .product(name: "FlowScopeCLI", package: "FlowScope")]),
        .testTarget(name: "AuditSinkTests", dependencies: ["AuditSink", .product(name: "FlowScopeTesting", package: "FlowScope")]),
    ],
    swiftLanguageModes: [.v6]
)
