import Foundation
import Synchronization
import TestSupport
import Testing

/// The `.ownThread` trait keeps blocking tests off the cooperative pool, so that plain `swift test`
/// runs blocking and async tests side by side on a 2-core machine.
/// Counters and flags shared between the threads of a test.
final class Counter: Sendable {
    let value = Atomic<Int>(0)
}

final class Flag: Sendable {
    let value = Atomic<Bool>(false)
    var isSet: Bool { value.load(ordering: .acquiring) }
    func set() { value.store(true, ordering: .releasing) }
}

final class Log: Sendable {
    let lines = Mutex<[String]>([])
    func add(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

@Suite("Tests on threads of their own")
struct OwnThreadTests {
    /// The cooperative pool has one thread per core.
    static let poolWidth = ProcessInfo.processInfo.activeProcessorCount

    /// The calling thread.
    static func thread() -> pthread_t { pthread_self() }

    /// Blocks the calling thread until `release` is set (true) or `seconds` pass (false).
    static func blockUntil(_ release: Flag, seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while !release.isSet {
            if Date() > deadline { return false }
            usleep(2_000)
        }
        return true
    }

    @Test("a test body that blocks under .ownThread runs on its executor's thread, not the pool's", .ownThread)
    func bodyRunsOnItsOwnThread() async throws {
        // On the pool, the body would resume on whichever of its threads is free.
        let before = Self.thread()
        for _ in 0..<5 {
            try await Task.sleep(for: .milliseconds(5))
            #expect(pthread_equal(Self.thread(), before) != 0, "the body resumed on another thread: it was on the pool")
        }
        let inChild = await Task { pthread_equal(Self.thread(), before) != 0 }.value
        #expect(!inChild, "an unstructured task runs on the pool, not on the test's thread")
    }

    @Test("more test bodies blocked under the trait's scope than the pool has threads: work on the pool still runs and releases them")
    func blockedScopesLeaveThePoolFree() async throws {
        let release = Flag()
        let started = Counter()
        let blockers = Self.poolWidth + 1
        // The trait as Swift Testing applies it to a test, with shares enough for every blocker.
        let trait = OwnThreadTrait(.light, shares: MachineShares(width: blockers))
        let test = try #require(Test.current)
        let released = try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<blockers {
                group.addTask {
                    let result = Mutex<Bool?>(nil)
                    try await trait.provideScope(for: test, testCase: nil) {
                        // A synchronous test body that blocks.
                        started.value.add(1, ordering: .relaxed)
                        let released = Self.blockUntil(release, seconds: 60)
                        result.withLock { $0 = released }
                    }
                    return result.withLock { $0 } ?? false
                }
            }
            // Pool work, enqueued once every blocker holds its thread: it ends the blocking.
            while started.value.load(ordering: .relaxed) < blockers { try await Task.sleep(for: .milliseconds(5)) }
            Task.detached { release.set() }
            return try await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(released == Array(repeating: true, count: blockers), "a blocker waited 60 s: the pool did not run the release")
    }

    @Test("the same blocking on the pool itself holds the pool: work enqueued there waits until a blocker gives up, and the pool is not quiet meanwhile", .realTime)
    func blockingThePoolStarvesIt() async throws {
        // The control for the test above; `.realTime`, so no other blocking test is running meanwhile.
        let release = Flag()
        let started = Counter()
        let blockers = (0..<Self.poolWidth).map { _ in
            Task.detached { () -> Bool in
                started.value.add(1, ordering: .relaxed)
                return Self.blockUntil(release, seconds: 1)
            }
        }
        // This test's body is on its own thread (.realTime): it may block while the pool is full.
        let deadline = Date().addingTimeInterval(30)
        while started.value.load(ordering: .relaxed) < Self.poolWidth && Date() < deadline { usleep(2_000) }
        #expect(started.value.load(ordering: .relaxed) == Self.poolWidth)
        // What a `.realTime` test waits for before its bounds: not while the pool is held.
        let quietWhileHeld = await OwnThreadTrait.waitForQuietPool(limit: .milliseconds(300))
        #expect(!quietWhileHeld, "the pool counted as quiet while every one of its threads was blocked")
        Task.detached { release.set() }
        var results: [Bool] = []
        for blocker in blockers { results.append(await blocker.value) }
        #expect(results.contains(false), "every blocker was released by pool work while the pool's \(Self.poolWidth) threads were blocked")
        #expect(await OwnThreadTrait.waitForQuietPool(), "the pool stayed busy after the blockers ended")
    }

    @Test("a .realTime test waits for the .ownThread tests running, and none starts while it runs")
    func sharesAreExclusiveForRealTime() async throws {
        let shares = MachineShares(width: 3)
        let log = Log()
        await shares.acquire(1)
        await shares.acquire(1)
        let alone = Task {
            await shares.acquire(3)
            log.add("alone")
            try? await Task.sleep(for: .milliseconds(50))
            log.add("alone done")
            shares.release(3)
        }
        try await Task.sleep(for: .milliseconds(50))
        // Asked after the realTime test: it waits behind it though a share is free.
        let late = Task {
            await shares.acquire(1)
            log.add("late")
            shares.release(1)
        }
        try await Task.sleep(for: .milliseconds(50))
        #expect(log.all.isEmpty)
        shares.release(1)
        shares.release(1)
        await alone.value
        await late.value
        #expect(log.all == ["alone", "alone done", "late"])
    }
}

/// A suite that blocks says so: the check that keeps plain `swift test` off a starved pool as new
/// test files arrive.
@Suite("Blocking suites carry a thread trait")
struct BlockingSuiteTraitTests {
    /// Calls that block the calling thread, as the suites use them.
    static let blockingCalls = ["DevToolsBrowser", "TestConnection(", "runProcess(", "runProgram(", "waitUntilExit()",
                                "readDataToEndOfFile()", "usleep(", "Thread.sleep(", "DispatchSemaphore("]
    static let traits = [".ownThread", ".heavy", ".realTime"]

    /// Every `@Suite` attribute of `text` with the name of the type it is on.
    static func suites(in text: String) -> [(attribute: String, type: String)] {
        var found: [(String, String)] = []
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        for (i, line) in lines.enumerated() where line.hasPrefix("@Suite") {
            let rest = lines[i...].prefix(3).joined(separator: " ")
            let declaration = rest.range(of: #"(struct|final class|class|enum) [A-Za-z0-9_]+"#, options: .regularExpression)
            let type = declaration.map { String(rest[$0].split(separator: " ").last!) } ?? "?"
            found.append((line, type))
        }
        return found
    }

    @Test("every suite in a test file that calls a blocking helper carries .ownThread, .heavy or .realTime, and every *RealTime* suite .realTime")
    func blockingSuitesCarryATrait() throws {
        let root = PackageGraphTests.packageRoot
        let folders = ["Tests"] + (try FileManager.default.contentsOfDirectory(atPath: root + "/plugins")).map { "plugins/\($0)/Tests" }
        var missing: [String] = []
        var checked = 0
        for folder in folders {
            guard let files = FileManager.default.enumerator(atPath: root + "/" + folder) else { continue }
            // This file blocks threads on purpose, test by test, to show what the traits are for.
            for case let file as String in files where file.hasSuffix(".swift") && !file.hasPrefix("Support/") && !file.hasSuffix("/OwnThreadTests.swift") {
                let path = folder + "/" + file
                let text = try String(contentsOfFile: root + "/" + path, encoding: .utf8)
                let blocks = Self.blockingCalls.contains { text.contains($0) }
                for suite in Self.suites(in: text) {
                    checked += 1
                    if suite.type.contains("RealTime") && !suite.attribute.contains(".realTime") {
                        missing.append("\(path): \(suite.type) checks wall-clock bounds: .realTime")
                    } else if blocks && !Self.traits.contains(where: { suite.attribute.contains($0) }) {
                        missing.append("\(path): \(suite.type) is in a file that blocks: .ownThread, .heavy or .realTime")
                    }
                }
            }
        }
        #expect(checked > 100, "only \(checked) suites found under \(root)")
        #expect(missing.isEmpty, "suites without a thread trait:\n\(missing.joined(separator: "\n"))")
    }
}
