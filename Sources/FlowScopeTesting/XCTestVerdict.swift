// XCTest's failures in a `withFlowTrace` body count in the test's verdict. Linux only for now: on
// Apple platforms XCTest's observer API is main-thread-bound and cannot be checked here, so there a
// verdict counts the test kit's expectations and thrown errors only (docs/testing.md says so).
#if canImport(XCTest) && os(Linux)
import Foundation
import Synchronization
import XCTest

/// Notes every XCTest failure recorded while a `withFlowTrace` body runs in the recorder of that
/// body. XCTest runs one test case at a time, so one recorder is active at most.
final class XCTestVerdictObserver: NSObject, XCTestObservation, Sendable {
    static let shared = XCTestVerdictObserver()
    private static let registered = Atomic<Bool>(false)
    private let active = Mutex<FlowTraceRecorder?>(nil)

    /// Registers the observer once per process.
    static func register() {
        guard !registered.exchange(true, ordering: .relaxed) else { return }
        XCTestObservationCenter.shared.addTestObserver(shared)
    }

    /// Runs `body` with `recorder` noting XCTest's failures.
    func observing<R>(_ recorder: FlowTraceRecorder, _ body: () async throws -> R) async rethrows -> R {
        active.withLock { $0 = recorder }
        defer { active.withLock { if $0 === recorder { $0 = nil } } }
        return try await body()
    }

    func testCase(_ testCase: XCTestCase, didFailWithDescription description: String, inFile filePath: String?, atLine lineNumber: Int) {
        guard let recorder = active.withLock({ $0 }) else { return }
        // The test kit's own failed expectation, reported through XCTFail ("failed - <message>"), is noted already.
        let message = description.hasPrefix("failed - ") ? String(description.dropFirst("failed - ".count)) : description
        guard !recorder.failures.contains(where: { message.hasPrefix($0) }) else { return }
        let file = filePath.map { URL(fileURLWithPath: $0).lastPathComponent + ":\(lineNumber): " } ?? ""
        recorder.noteFailure(file + description)
    }
}
#endif
