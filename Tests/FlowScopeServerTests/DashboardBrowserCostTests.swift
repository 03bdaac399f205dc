import TestSupport
import Foundation
import FlowJSON
@testable import FlowScopeServer
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// What keeping the dashboard open costs, measured in headless Chromium with the DevTools protocol's
/// `Performance.getMetrics` (the main thread's task time over a window of wall time), at the demo's rate,
/// at 2,000 events/s and with no traffic. (Type name contains "DashboardBrowser": the Makefile runs
/// these serially.)
@Suite("Dashboard cost of keeping it open in a real browser", .serialized, .heavy)
struct DashboardBrowserCostTests {
    /// The share of `seconds` of wall time the page's main thread was busy (TaskDuration, in the thread's
    /// CPU time), and the script, style and layout parts of it.
    static func busy(_ browser: DevToolsBrowser, seconds: Double) throws -> (busy: Double, script: Double, layout: Double, style: Double) {
        func metrics() throws -> [String: Double] {
            let list = try browser.command("Performance.getMetrics", [:])["metrics"]?.arrayValue ?? []
            var out: [String: Double] = [:]
            for m in list { if let name = m["name"]?.stringValue, let v = m["value"]?.numberValue { out[name] = v } }
            return out
        }
        let start = try metrics()
        let t0 = Date()
        usleep(UInt32(seconds * 1_000_000))
        let end = try metrics()
        let wall = Date().timeIntervalSince(t0)
        func share(_ key: String) -> Double { ((end[key] ?? 0) - (start[key] ?? 0)) / wall }
        return (share("TaskDuration"), share("ScriptDuration"), share("LayoutDuration"), share("RecalcStyleDuration"))
    }

    static func describe(_ m: (busy: Double, script: Double, layout: Double, style: Double)) -> String {
        String(format: "busy %.1f%% (script %.1f%%, layout %.1f%%, style %.1f%%)", m.busy * 100, m.script * 100, m.layout * 100, m.style * 100)
    }

    /// Elements in the page.
    static let nodes = "document.getElementsByTagName('*').length"

    @Test("keeping the page open: with live traffic at the demo's rate (50 events/s) the main thread is busy at most 10% of a 6 s window, with no traffic about 0% (at most 1%), at 2,000 events/s at most 30%; the page holds at most 3,000 elements")
    func cheapToKeepOpen() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        // A page already full: 1,500 calls (6,000 events) before it opens.
        for batch in 0..<15 {
            var events: [JSONValue] = []
            for i in 0..<100 { events += DemoCalls.call(run: "live", placement: "warm_\(i % 7)", t: Double(batch * 100 + i), source: i % 3 == 0 ? "cache" : "network", duration: 0.05 + Double(i % 5) * 0.1) }
            _ = try stack.ingest(events)
        }
        let browser = try DashboardBrowserDebuggerTests.openPage(chromium, stack)
        defer { browser.close() }
        try browser.setViewport(width: 1440, height: 900)
        // Durations in the main thread's CPU time (not wall time): what the page costs, however busy the
        // machine running the test is.
        _ = try browser.command("Performance.enable", ["timeDomain": "threadTicks"])

        // The demo's rate: a call (4 events) every 80 ms.
        let demo = stack.liveTraffic(interval: 0.08)
        defer { demo.stop() }
        #expect(try browser.waitFor("document.querySelectorAll('#waterfall g.wf-call[data-placement^=\"live_\"]').length > 0"))
        usleep(1_500_000)
        let atDemo = try Self.busy(browser, seconds: 6)
        let nodesAtDemo = try browser.evaluate(Self.nodes).numberValue ?? 0
        demo.stop()
        print("dashboard cost, demo rate (50 events/s): \(Self.describe(atDemo)), \(Int(nodesAtDemo)) elements")
        #expect(atDemo.busy <= 0.10, "at the demo's rate: \(Self.describe(atDemo))")
        #expect(nodesAtDemo <= 3_000, "elements in the page at the demo's rate: \(nodesAtDemo)")

        // No traffic: nothing changes, nothing is drawn.
        usleep(2_000_000)
        let idle = try Self.busy(browser, seconds: 6)
        print("dashboard cost, no traffic: \(Self.describe(idle))")
        #expect(idle.busy <= 0.01, "with no traffic: \(Self.describe(idle))")

        // 2,000 events/s: four senders of 500 events a second each.
        let heavy = HeavyTraffic(port: stack.fixture.port, token: stack.fixture.token.value)
        defer { heavy.stop() }
        usleep(1_500_000)
        let atHeavy = try Self.busy(browser, seconds: 6)
        let nodesAtHeavy = try browser.evaluate(Self.nodes).numberValue ?? 0
        heavy.stop()
        let rate = heavy.rate
        print("dashboard cost, \(Int(rate)) events/s: \(Self.describe(atHeavy)), \(Int(nodesAtHeavy)) elements")
        #expect(rate >= 1_500, "the load reached about 2,000 events/s: \(rate)")
        #expect(atHeavy.busy <= 0.30, "at \(Int(rate)) events/s: \(Self.describe(atHeavy))")
        #expect(nodesAtHeavy <= 3_000, "elements in the page at \(Int(rate)) events/s: \(nodesAtHeavy)")
        #expect(try browser.evaluate("document.querySelector('#app-error').hidden") == .bool(true))
    }
}

/// Calls of the run `live` ingested in the background at about 2,000 events/s: four senders, each 125
/// calls (500 events) per request, one request a second, over one HTTPS connection per request, until
/// `stop()` (at most 60 s).
final class HeavyTraffic: Sendable {
    private let running = Atomic<Bool>(true)
    private let events = Atomic<Int>(0)
    private let started = Date()
    private let stoppedAt = Mutex<Date?>(nil)
    private let finished = DispatchSemaphore(value: 0)
    private static let senders = 4

    /// Events accepted per second of wall time (until stopped).
    var rate: Double {
        let end = stoppedAt.withLock { $0 } ?? Date()
        return Double(events.load(ordering: .relaxed)) / max(end.timeIntervalSince(started), 0.001)
    }

    init(port: Int, token: String) {
        for sender in 0..<Self.senders {
            Thread.detachNewThread { [self] in
                defer { finished.signal() }
                var i = 0
                let deadline = Date().addingTimeInterval(60)
                // Spread over the second.
                usleep(UInt32(sender * 250_000))
                while running.load(ordering: .relaxed), Date() < deadline {
                    let tick = Date()
                    var batch: [JSONValue] = []
                    for k in 0..<125 {
                        batch += DemoCalls.call(run: "live", placement: "heavy_\(k % 9)", t: Double(100_000 + (i * Self.senders + sender) * 125 + k),
                                                source: k % 3 == 0 ? "cache" : "network", duration: 0.05 + Double(k % 6) * 0.1)
                    }
                    let body = batch.map(\.jsonText).joined(separator: "\n")
                    if let connection = try? TestConnection(host: "127.0.0.1", port: port, tls: true),
                       let reply = try? connection.request("POST", "/api/ingest", headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/x-ndjson")], body: Array(body.utf8)),
                       reply.status == 202 {
                        events.add(batch.count, ordering: .relaxed)
                    }
                    i += 1
                    let left = 1.0 - Date().timeIntervalSince(tick)
                    if left > 0 { usleep(UInt32(left * 1_000_000)) }
                }
            }
        }
    }

    /// Stops the traffic and waits for every sender's last request.
    func stop() {
        guard running.exchange(false, ordering: .relaxed) else { return }
        stoppedAt.withLock { $0 = Date() }
        for _ in 0..<Self.senders { finished.wait() }
    }
}
