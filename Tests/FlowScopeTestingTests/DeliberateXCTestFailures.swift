import FlowScopeTesting
import Testing  // the expectations' source location defaults to Swift Testing's #_sourceLocation
import Foundation
import XCTest

/// XCTest cases that fail on purpose, run only in the child process of `XCTestVerdictTests`
/// (FLOWSCOPE_DELIBERATE_FAILURES=1); skipped elsewhere.
final class DeliberateXCTestFailures: XCTestCase {
    override func setUpWithError() throws {
        try XCTSkipUnless(ProcessInfo.processInfo.environment["FLOWSCOPE_DELIBERATE_FAILURES"] == "1", "fails on purpose in a child run only")
    }

    func testAssertFails() async throws {
        try await withFlowTrace("XC.assertFails", onFailure: { message, _ in XCTFail(message) }) {
            let flow = try await DeliberateFailures.defaultAudienceCall()
            XCTAssertEqual(flow.source, .network)
        }
    }

    func testOwnExpectationFails() async throws {
        try await withFlowTrace("XC.ownExpectation", onFailure: { message, _ in XCTFail(message) }) {
            _ = try await DeliberateFailures.defaultAudienceCall()
            expectFallback("main", to: .fallbackFile)
        }
    }

    func testPasses() async throws {
        try await withFlowTrace("XC.passes", onFailure: { message, _ in XCTFail(message) }) {
            let flow = try await DeliberateFailures.defaultAudienceCall()
            XCTAssertEqual(flow.source, .defaultAudience)
        }
    }
}
