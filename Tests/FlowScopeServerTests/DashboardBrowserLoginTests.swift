import Foundation
import FlowJSON
import TestSupport
import Testing
@testable import FlowScopeServer

/// The browser login off loopback in headless Chromium: the server listens on 127.0.0.1 under the
/// off-loopback policy, where every request but /healthz needs the token.
@Suite("Dashboard in a real browser: the login off loopback", .serialized, .heavy)
struct DashboardBrowserLoginTests {
    @Test("opening /?token= once loads the page, its assets, the API and the live stream by the cookie, and the token leaves the address bar; without it the page is a 401")
    func loginInChromium() throws {
        guard let chromium = Chromium.executable() else {
            Issue.record("chromium not found on PATH (chromium, chromium-browser, google-chrome) nor in FLOWSCOPE_CHROMIUM")
            return
        }
        let stack = try DashboardStack(policy: .tokenEverywhere)
        _ = try stack.ingest(Array(DemoCalls.sample(run: "live").prefix(6)))
        try stack.waitForFetches(placement: "main_paywall", count: 1)

        let stranger = try DevToolsBrowser(executable: chromium.path)
        defer { stranger.close() }
        try stranger.open("\(stack.baseURL)/")
        #expect(try stranger.waitFor("document.body.innerText.includes('missing or invalid bearer token')"), "no page without the token")

        let browser = try DevToolsBrowser(executable: chromium.path)
        defer { browser.close() }
        try browser.open("\(stack.baseURL)/?token=\(stack.fixture.token.value)#run=live")
        let ready = try browser.waitFor("document.body.dataset.ready === 'true' && document.querySelector('#conn-state').dataset.state === 'open'", timeout: 30)
        #expect(ready, "the page loaded and its stream opened")
        #expect(try browser.evaluate("location.search") == "", "the token is gone from the URL")
        #expect(try browser.evaluate("location.hash") == "#run=live", "the fragment survived the redirect")
        #expect(try browser.evaluate("document.cookie") == "", "the cookie is HttpOnly")
        #expect(try browser.evaluate("document.querySelector('#placements tr[data-placement=\"main_paywall\"]') !== null") == .bool(true))
        #expect(try browser.evaluate("document.querySelector('#app-error').hidden") == .bool(true))

        _ = try stack.ingest(DemoCalls.call(run: "live", placement: "winback_offer", t: 100, source: "network", duration: 0.3))
        let tail = try browser.waitFor("[...document.querySelectorAll('#tail tbody tr[data-name=\"fetch.end\"] td')].some((td) => td.textContent === 'winback_offer')")
        #expect(tail, "a live event arrived over the stream the cookie authorised")
        #expect(try browser.waitFor("document.querySelector('#placements tr[data-placement=\"winback_offer\"]') !== null"), "the API reads after it too")
    }
}
