#!/usr/bin/env python3
"""Takes the screenshots of docs/dashboard.md from a running `flowscope serve` with demo traffic.

    flowscope serve &                       # demo traffic on
    sleep 60                                # a minute of calls
    scripts/dashboard-screenshots.py https://localhost:8443 docs/images [COMPARE_RUN]

With COMPARE_RUN (a run the server holds, e.g. events ingested under another run id), also the
Compare panel of live against it.

Headless Chromium (chromium on PATH, or FLOWSCOPE_CHROMIUM) driven over the DevTools protocol on a
pipe, as the DashboardBrowser tests drive it. Each view is opened by its URL, live stream on; the page
is paused before the shot so that it holds still.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import base64
import urllib.parse


class Browser:
    def __init__(self, executable):
        self.profile = tempfile.mkdtemp(prefix="flowscope-shots-")
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()

        def child_fds():
            # Commands on fd 3, answers on fd 4 (the pipes may already sit on 3 or 4: move them first).
            r, w = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(r, 3)
            os.dup2(w, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        self.process = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--ignore-certificate-errors", "--hide-scrollbars",
             f"--user-data-dir={self.profile}", "--no-first-run", "--remote-debugging-pipe", "--window-size=1400,1000", "about:blank"],
            preexec_fn=child_fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.buffer = b""
        self.next_id = 0
        self.session = None

    def command(self, method, params=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" in self.buffer:
                text, self.buffer = self.buffer.split(b"\0", 1)
                answer = json.loads(text)
                if answer.get("id") == self.next_id:
                    if "error" in answer:
                        raise RuntimeError(f"{method}: {answer['error']}")
                    return answer.get("result", {})
            chunk = os.read(self.from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("the browser closed the pipe")
            self.buffer += chunk

    def open(self, url, width=1400, height=1000):
        target = self.command("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.command("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.command("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        self.command("Page.navigate", {"url": url})

    def evaluate(self, expression):
        return self.command("Runtime.evaluate", {"expression": expression, "returnByValue": True}).get("result", {}).get("value")

    def wait_for(self, expression, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.evaluate(expression) is True:
                return
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {expression}")

    def close(self):
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


READY = "document.body.dataset.ready === 'true' && document.querySelector('#conn-state').dataset.state === 'open'"


def capture(executable, url, path, height, action=None, scroll_to=None):
    """Opens `url`, lets a few live updates in, pauses, runs `action` (JavaScript), scrolls `scroll_to`
    (a selector) under the top bar, and writes the viewport as a PNG."""
    browser = Browser(executable)
    try:
        browser.open(url, height=height)
        browser.wait_for(READY)
        time.sleep(2.5)
        browser.evaluate("document.querySelector('#pause').click()")
        if action:
            browser.evaluate(action)
        time.sleep(0.5)
        top = browser.evaluate(f"document.querySelector('{scroll_to}').getBoundingClientRect().top + window.scrollY - 70") if scroll_to else 0
        browser.evaluate(f"window.scrollTo(0, {top})")
        time.sleep(0.3)
        data = browser.command("Page.captureScreenshot", {"format": "png"})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        print(f"wrote {path}")
    finally:
        browser.close()


def main():
    base = sys.argv[1] if len(sys.argv) > 1 else "https://localhost:8443"
    out = sys.argv[2] if len(sys.argv) > 2 else "docs/images"
    executable = os.environ.get("FLOWSCOPE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not executable:
        sys.exit("chromium not found (set FLOWSCOPE_CHROMIUM)")
    os.makedirs(out, exist_ok=True)

    capture(executable, f"{base}/#run=live", f"{out}/dashboard-overview.png", 1500)
    capture(executable, f"{base}/#run=live&range=5m&placement=main_paywall&minDuration=300ms", f"{out}/dashboard-filtered.png", 1500)
    # The newest call of a second or more without an error: its requests, budgets and events on its own scale.
    capture(executable, f"{base}/#run=live&errorCode=none&minDuration=1s", f"{out}/dashboard-call.png", 1100,
            action="document.querySelector('#waterfall g.wf-call').dispatchEvent(new MouseEvent('click', { bubbles: true }))",
            scroll_to="#waterfall")
    # The second fullest bar of the last hour's histogram, its calls listed.
    capture(executable, f"{base}/#run=live&range=1h", f"{out}/dashboard-histogram.png", 1000,
            action="""(() => { const bins = [...document.querySelectorAll('#histogram g.bin')];
              bins.sort((a, b) => Number(b.dataset.count) - Number(a.dataset.count));
              bins[Math.min(1, bins.length - 1)].dispatchEvent(new MouseEvent('click', { bubbles: true })); })()""",
            scroll_to="#histogram")
    if len(sys.argv) > 3:
        capture(executable, f"{base}/#run=live&compare={urllib.parse.quote(sys.argv[3], safe='')}", f"{out}/dashboard-compare.png", 900,
                scroll_to="#compare")


if __name__ == "__main__":
    main()
