import TestSupport
import Foundation
import FlowJSON
@testable import FlowScopeServer
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// WCAG AA contrast of every text the page renders, measured in headless Chromium over the whole page in
/// both themes while live traffic flows. (Type name contains "DashboardBrowser": the Makefile runs these
/// serially.)
@Suite("Dashboard contrast of every text in a real browser, with live traffic", .serialized, .heavy)
struct DashboardBrowserContrastTests {
    /// Every rendered text node (and each select's shown option, each input's value and placeholder):
    /// its effective colour (its own alpha, the opacity of its ancestors) against the background composited
    /// behind it in the page (the background colours of its ancestors, outermost first; in an SVG, the
    /// fills of the shapes drawn before it that it sits on, or the halo it is drawn on). Answers
    /// `{measured, failures: [[text, where, ratio, needed, fg, bg]]}`; AA: 4.5:1, 3:1 for large text
    /// (24 px, or 18.66 px bold).
    static let measure = """
        (() => {
          const parse = (c) => {
            if (!c || c === 'none' || c === 'transparent') return [0, 0, 0, 0];
            const v = (c.match(/-?[\\d.]+(e-?\\d+)?/g) || []).map(Number);
            if (c.startsWith('color(')) return [v[0] * 255, v[1] * 255, v[2] * 255, v.length > 3 ? v[3] : 1];
            return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1];
          };
          const over = (top, bottom) => [0, 1, 2].map((i) => top[i] * top[3] + bottom[i] * (1 - top[3])).concat([1]);
          const lum = (c) => c.slice(0, 3).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
            .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
          const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
          const opacity = (node) => { let o = 1; for (let n = node; n && n.nodeType === 1; n = n.parentElement) o *= Number(getComputedStyle(n).opacity); return o; };
          // The HTML backgrounds behind a node, composited from the page's canvas inwards.
          const htmlBackground = (node) => {
            const layers = [];
            for (let n = node; n && n.nodeType === 1; n = n.parentElement) {
              if (n instanceof SVGElement && !(n instanceof SVGSVGElement)) continue;
              layers.push(parse(getComputedStyle(n).backgroundColor));
            }
            let bg = [255, 255, 255, 1];
            for (const layer of layers.reverse()) bg = over(layer, bg);
            return bg;
          };
          // In an SVG: the shapes drawn before the text whose box holds the text's centre, or its halo.
          const svgBackground = (text, bg) => {
            const style = getComputedStyle(text);
            if (style.paintOrder.startsWith('stroke') && parseFloat(style.strokeWidth) >= 2) return over(parse(style.stroke), bg);
            const box = text.getBoundingClientRect();
            const cx = box.left + box.width / 2, cy = box.top + box.height / 2;
            const root = text.ownerSVGElement;
            for (const shape of root.querySelectorAll('rect')) {
              if (!(shape.compareDocumentPosition(text) & Node.DOCUMENT_POSITION_FOLLOWING)) continue;
              const r = shape.getBoundingClientRect();
              if (cx < r.left || cx > r.right || cy < r.top || cy > r.bottom || r.width === 0) continue;
              const s = getComputedStyle(shape);
              if (s.visibility === 'hidden' || s.display === 'none') continue;
              const fill = parse(s.fill);
              fill[3] *= Number(s.fillOpacity) * opacity(shape) / opacity(root);
              bg = over(fill, bg);
            }
            return bg;
          };
          const rendered = (el) => el.getClientRects().length > 0 && getComputedStyle(el).visibility === 'visible';
          const items = [];
          const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
          for (let t = walker.nextNode(); t; t = walker.nextNode()) {
            const el = t.parentElement;
            if (!t.textContent.trim() || !el || el.closest('option, title, script, style, [aria-hidden="true"]') || !rendered(el)) continue;
            items.push({ el, text: t.textContent.trim() });
          }
          for (const el of document.querySelectorAll('select, input')) {
            if (!rendered(el)) continue;
            if (el.tagName === 'SELECT') items.push({ el, text: el.selectedOptions[0]?.textContent ?? '' });
            else {
              if (el.value) items.push({ el, text: el.value });
              if (el.placeholder && !el.value) items.push({ el, text: el.placeholder, pseudo: '::placeholder' });
            }
          }
          const failures = [];
          for (const { el, text, pseudo } of items) {
            const style = getComputedStyle(el, pseudo ?? null);
            const isSVG = el instanceof SVGElement;
            const fg = parse(isSVG ? style.fill : style.color);
            fg[3] *= (isSVG ? Number(style.fillOpacity) : 1) * opacity(el);
            const htmlBg = htmlBackground(isSVG ? el.ownerSVGElement : el);
            const bg = isSVG ? svgBackground(el, htmlBg) : htmlBg;
            const shown = over(fg, bg);
            const size = parseFloat(style.fontSize), weight = Number(style.fontWeight) || 400;
            const needed = size >= 24 || (size >= 18.66 && weight >= 700) ? 3 : 4.5;
            const r = ratio(shown, bg);
            if (r < needed) {
              const where = (el.id ? '#' + el.id : el.tagName.toLowerCase()) + '.' + String(el.getAttribute('class') ?? '').split(' ').join('.') +
                ' in ' + (el.closest('[id]')?.id ?? '?');
              failures.push([text.slice(0, 40), where, Math.round(r * 100) / 100, needed, shown.slice(0, 3).map(Math.round).join(','), bg.slice(0, 3).map(Math.round).join(',')]);
            }
          }
          return JSON.stringify({ measured: items.length, failures });
        })()
        """

    /// Measures the page in both themes; expects no failure and at least `atLeast` texts measured.
    static func expectAA(_ browser: DevToolsBrowser, _ what: String, atLeast: Int, sourceLocation: SourceLocation = #_sourceLocation) throws {
        for scheme in ["light", "dark"] {
            try browser.emulate(colorScheme: scheme)
            usleep(300_000)
            let result = try JSON5.parse(try browser.evaluate(measure).stringValue ?? "{}")
            let measured = Int(result["measured"]?.numberValue ?? 0)
            let failures = result["failures"]?.arrayValue ?? []
            #expect(measured >= atLeast, "\(what), \(scheme): \(measured) texts measured", sourceLocation: sourceLocation)
            // One line per distinct failing place, so that the message stays readable.
            var seen = Set<String>()
            let distinct = failures.filter { seen.insert($0.arrayValue?.dropFirst().first?.stringValue ?? "").inserted }
            #expect(failures.isEmpty, "\(what), \(scheme): \(failures.count) of \(measured) texts below AA, e.g. \(distinct.prefix(25).map(\.jsonText).joined(separator: "\n"))",
                    sourceLocation: sourceLocation)
        }
    }

    @Test("with live traffic flowing, every rendered text of the page meets WCAG AA against the background composited behind it, in the light and the dark theme: a live run with a call open, a histogram bar's calls listed and a refused filter; a test run; the empty state")
    func everyTextMeetsAA() throws {
        guard let chromium = DashboardBrowserDebuggerTests.chromium() else { return }
        let stack = try DashboardStack()
        _ = try stack.ingest(DemoCalls.sample(run: "live"))
        _ = try stack.ingest(DemoCalls.call(run: "test:checkout", placement: "checkout", t: 1, source: "cache", duration: 0.1))
        let (browser, traffic) = (try DashboardBrowserDebuggerTests.openPage(chromium, stack),
                                  stack.liveTraffic(interval: 0.2))
        defer { browser.close(); traffic.stop() }
        #expect(try browser.waitFor("document.querySelectorAll('#waterfall g.wf-call[data-placement^=\"live_\"]').length > 0"))

        // A call open (its detail table and chart), a bar's calls listed, a row selected and focused.
        _ = try browser.evaluate("document.querySelector('#waterfall g.wf-call[data-placement=\"main_paywall\"]')?.dispatchEvent(new MouseEvent('click', { bubbles: true }))")
        #expect(try browser.waitFor("!document.querySelector('#trace-detail').hidden"))
        _ = try browser.evaluate("document.querySelector('#histogram g.bin[data-count]:not([data-count=\"0\"])')?.dispatchEvent(new MouseEvent('click', { bubbles: true }))")
        #expect(try browser.waitFor("!document.querySelector('#bin-calls').hidden"))
        // The tail shows every kind of event (cache.*, layout.*, request.*, fetch.*, timeout, fallback).
        _ = try browser.evaluate("document.querySelector('#pause').click()")
        try Self.expectAA(browser, "live run, paused, a call open, a bar's calls listed", atLeast: 300)
        _ = try browser.evaluate("document.querySelector('#pause').click()")

        // A refused filter: its message in the filter bar and in every panel.
        try DashboardBrowserFilterTests.setFilter(browser, "f-min", "fast")
        #expect(try browser.waitFor("!document.querySelector('#filter-error').hidden"))
        try Self.expectAA(browser, "a refused filter", atLeast: 100)
        try DashboardBrowserFilterTests.setFilter(browser, "f-min", "")

        // A test run (its badge) with the zoom buttons enabled.
        _ = try browser.evaluate("location.hash = 'run=test%3Acheckout&zoom=0-0.05'")
        #expect(try browser.waitFor("document.querySelector('#run-kind').dataset.kind === 'test' && document.querySelectorAll('#waterfall g.wf-call').length === 1"))
        try Self.expectAA(browser, "a test run, zoomed", atLeast: 100)

        // The empty state: a server with no events.
        let empty = try DashboardStack()
        let other = try DashboardBrowserDebuggerTests.openPage(chromium, empty)
        defer { other.close() }
        #expect(try other.waitFor("!document.querySelector('#empty-state').hidden"))
        try Self.expectAA(other, "the empty state", atLeast: 20)
    }
}
