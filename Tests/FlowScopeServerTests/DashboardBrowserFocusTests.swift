import TestSupport
import Foundation
import FlowJSON
@testable import FlowScopeServer
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The keyboard in headless Chromium while live traffic flows: the focus holds a panel as the pointer
/// does. (Type name contains "DashboardBrowser": the Makefile runs these serially.)
@Suite("Dashboard keyboard focus in a real browser, with live traffic", .serialized, .heavy)
struct DashboardBrowserFocusTests {
    /// The focused waterfall row: its trace and its top in the viewport, or nil.
    static let focusedRow = """
        (() => { const a = document.activeElement; if (!a || !a.matches('#waterfall-chart g.wf-call')) return null;
          return { trace: a.dataset.trace, top: Math.round(a.querySelector('.row-bg').getBoundingClientRect().top) }; })()
        """

    @Test("with live traffic flowing, over 10 rounds: Tab to the waterfall, arrow down, wait; the focused row holds the panel (held note shown) and stays where it was, Enter opens exactly that call, Escape gives the focus back to the same row; focus elsewhere, the waterfall follows the traffic again")
    func enterOpensFocusedCall() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let (stack, browser, traffic) = try DashboardBrowserDebuggerTests.openLivePage(chromium)
        defer { browser.close(); traffic.stop(); _ = stack }
        _ = try browser.evaluate("document.querySelector('#waterfall').scrollIntoView({ block: 'start' })")

        for round in 0..<10 {
            // From Zoom in, Tab reaches the waterfall (one tab stop) as the keyboard does.
            _ = try browser.evaluate("document.querySelector('#wf-zoom-in').focus({ preventScroll: true })")
            try browser.press("Tab")
            #expect(try browser.waitFor("document.activeElement?.matches('#waterfall-chart g.wf-call') === true", timeout: 5),
                    "Tab reached a waterfall row (round \(round))")
            for _ in 0..<(1 + round % 3) { try browser.press("ArrowDown") }
            let before = try browser.evaluate(Self.focusedRow)
            let trace = try #require(before["trace"]?.stringValue, "a focused row (round \(round))")
            let top = before["top"]?.numberValue
            let seqBefore = try browser.evaluate("Number(document.body.dataset.latestSeq)").numberValue ?? 0
            usleep(1_000_000) // calls keep arriving while the user reads the row
            let seqAfter = try browser.evaluate("Number(document.body.dataset.latestSeq)").numberValue ?? 0
            #expect(seqAfter > seqBefore, "events kept arriving (round \(round): \(seqBefore) -> \(seqAfter))")
            let after = try browser.evaluate(Self.focusedRow)
            #expect(after["trace"]?.stringValue == trace, "the focus stayed on the row (round \(round)): \(after.jsonText)")
            // It stays where it was (a pixel of layout above may change) and in view.
            let moved = abs((after["top"]?.numberValue ?? -1_000) - (top ?? 0))
            #expect(moved <= 4, "the focused row did not move (round \(round)): \(before.jsonText) -> \(after.jsonText)")
            #expect(try browser.evaluate("(() => { const r = document.activeElement.getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; })()") == .bool(true),
                    "the focused row is in view (round \(round))")
            #expect(try browser.evaluate("!document.querySelector('#waterfall-held').hidden && document.querySelector('#waterfall-held').textContent.includes('keyboard focus')") == .bool(true),
                    "the held note says the focus holds the waterfall (round \(round))")
            try browser.press("Enter")
            #expect(try browser.waitFor("!document.querySelector('#trace-detail').hidden", timeout: 5), "Enter opened a call (round \(round))")
            #expect(try browser.evaluate("document.querySelector('#trace-detail').dataset.trace") == .string(trace),
                    "Enter opened the focused call (round \(round))")
            try browser.press("Escape")
            #expect(try browser.waitFor("document.querySelector('#trace-detail').hidden", timeout: 5), "Escape closed it (round \(round))")
            #expect(try browser.evaluate("document.activeElement?.dataset?.trace ?? null") == .string(trace),
                    "Escape gave the focus back to the same row (round \(round))")
        }

        // Focus elsewhere: the panel is no longer held and follows the traffic.
        _ = try browser.evaluate("document.querySelector('#waterfall-chart svg').dataset.mark = 'held'")
        _ = try browser.evaluate("document.querySelector('#wf-zoom-in').focus({ preventScroll: true })")
        #expect(try browser.waitFor("document.querySelector('#waterfall-chart svg')?.dataset.mark !== 'held' && document.querySelector('#waterfall-held').hidden", timeout: 5),
                "with the focus gone, the waterfall is redrawn")
        #expect(try browser.evaluate("document.querySelector('#app-error').hidden") == .bool(true))
    }

    @Test("with live traffic flowing, a focused tail row holds the tail (held note shown) and keeps its place")
    func focusHoldsTail() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let (stack, browser, traffic) = try DashboardBrowserDebuggerTests.openLivePage(chromium)
        defer { browser.close(); traffic.stop(); _ = stack }
        _ = try browser.evaluate("document.querySelector('#filter-name').focus()")
        try browser.press("Tab")
        #expect(try browser.waitFor("document.activeElement?.matches('#tail tbody tr') === true", timeout: 5), "Tab reached a tail row")
        try browser.press("ArrowDown")
        let seq = try browser.evaluate("document.activeElement.dataset.seq")
        let first = try browser.evaluate("document.querySelector('#tail tbody tr').dataset.seq")
        usleep(1_500_000)
        #expect(try browser.evaluate("document.activeElement.dataset.seq") == seq, "the focus stayed on the row")
        #expect(try browser.evaluate("document.querySelector('#tail tbody tr').dataset.seq") == first, "no row was added above it")
        #expect(try browser.evaluate("document.querySelector('#tail-held').textContent.includes('keyboard focus') && !document.querySelector('#tail-held').hidden") == .bool(true))
        _ = try browser.evaluate("document.querySelector('#filter-name').focus()")
        #expect(try browser.waitFor("document.querySelector('#tail tbody tr').dataset.seq !== \(first.jsonText)", timeout: 5), "focus gone, the tail follows again")
    }
}
