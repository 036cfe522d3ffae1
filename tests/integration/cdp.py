"""A small driver for headless Chromium over the DevTools protocol, through
--remote-debugging-pipe (fd 3 in, fd 4 out, each message JSON ended by a NUL
byte): no websocket, no port, no package beyond the standard library.

    with Browser(1280, 800) as b:
        b.goto("http://127.0.0.1:8077/ui/")
        b.wait_for("document.querySelector('#models tbody tr')")
        b.screenshot("models.png")
        assert not b.errors()   # console errors, uncaught exceptions, CSP reports
"""
import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome")


def find_chromium():
    """The Chromium binary, or None. Debian's /usr/bin/chromium is a shell
    wrapper; the binary behind it is used so that fds 3 and 4 reach it."""
    for c in CANDIDATES:
        path = c if os.path.isabs(c) else shutil.which(c)
        if path and os.access(path, os.X_OK):
            return path
    return None


class CDPError(RuntimeError):
    pass


class Browser:
    def __init__(self, width, height, mobile=False, timeout=20):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="tensord-chromium-")
        binary = find_chromium()
        if not binary:
            raise CDPError("no chromium binary")
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()

        def fds():
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--disable-sync",
             "--disable-background-networking", "--mute-audio", "--hide-scrollbars",
             "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=fds, close_fds=False)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self._events = []
        self.log = []          # (kind, text) of everything the page reported
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(domain + ".enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}, session=True)

    # ---- protocol
    def _read(self, deadline):
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise CDPError("chromium did not answer in time")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise CDPError("chromium closed the pipe")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def _note(self, m):
        method, p = m.get("method"), m.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.log.append(("console", " ".join(str(a.get("value", a.get("description", "")))
                                                 for a in p.get("args", []))))
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            self.log.append(("exception", d.get("exception", {}).get("description") or d.get("text")))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            e = p["entry"]
            self.log.append(("log", f"{e.get('source')}: {e.get('text')} {e.get('url', '')}"))
        self._events.append(m)

    def call(self, method, params=None, session=False, timeout=None):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            m = self._read(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise CDPError(f"{method}: {m['error']}")
                return m.get("result", {})
            self._note(m)

    def pump(self, seconds):
        """Reads events for a while (console messages arrive unasked)."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                self._note(self._read(deadline))
        except CDPError:
            pass

    # ---- page
    def goto(self, url):
        self._events.clear()
        r = self.call("Page.navigate", {"url": url}, session=True)
        if not r.get("loaderId"):
            return  # the same document, another fragment: no load event
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self._events):
            self._note(self._read(deadline))

    def eval(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "awaitPromise": True,
                                           "returnByValue": True}, session=True)
        if "exceptionDetails" in r:
            raise CDPError(f"{expr}: {r['exceptionDetails'].get('exception', {}).get('description')}")
        return r.get("result", {}).get("value")

    def wait_for(self, expr, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            if self.eval(f"!!({expr})"):
                return True
            if time.monotonic() > deadline:
                raise CDPError(f"timed out waiting for {expr}")
            self.pump(0.05)

    def key(self, key, code, vk):
        """Presses and releases a key that types nothing (ArrowDown, PageDown...)."""
        for kind in ("rawKeyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": code,
                                                 "windowsVirtualKeyCode": vk,
                                                 "nativeVirtualKeyCode": vk}, session=True)

    def type(self, text):
        self.call("Input.insertText", {"text": text}, session=True)

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def errors(self, allow=()):
        """Everything logged as an error, less the texts matching allow."""
        return [(k, t) for k, t in self.log if not any(a in (t or "") for a in allow)]

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except (CDPError, OSError):
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
