"""Open a page in a real headless Chromium and report what a person would see (imported by tests).

Chromium is driven over the DevTools protocol (a websocket): navigate, wait for the load event, collect
console errors, uncaught exceptions and failed loads, read every image's natural size, and take a
screenshot. Debian's ``chromium`` package (``apt-get install chromium``) is what CI installs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PageView", "find_chromium", "open_page"]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageView:
    """What the page showed: the screenshot (PNG), each image's (complete, naturalWidth), the errors."""

    screenshot_png: bytes
    images: list[tuple[bool, int]]
    errors: list[str] = field(default_factory=list)
    title: str = ""


class _DevTools:
    def __init__(self, url: str) -> None:
        import websocket

        self.socket = websocket.create_connection(url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    def wait_for(self, method: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(e.get("method") == method for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} within {timeout_s} s")
            self.events.append(json.loads(self.socket.recv()))


def _errors(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            out.append(f"exception: {details.get('text')} {details.get('exception', {}).get('description', '')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            out.append(f"console.{params['type']}: {[a.get('value') for a in params.get('args', [])]}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            out.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        elif method == "Network.loadingFailed":
            out.append(f"load failed: {params.get('errorText')}")
    return out


def open_page(path: Path, profile_dir: Path, *, width: int = 1280, height: int = 2400,
              timeout_s: float = 90.0) -> PageView:
    """Load ``path`` (a local file) in headless Chromium; ``profile_dir`` is a fresh user-data directory."""
    chromium = find_chromium()
    if chromium is None:
        raise FileNotFoundError("chromium is not installed")
    process = subprocess.Popen(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--no-first-run", f"--user-data-dir={profile_dir}", "--remote-debugging-port=0",
         f"--window-size={width},{height}", "--hide-scrollbars", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile_dir / "DevToolsActivePort"
        deadline = time.monotonic() + timeout_s
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or process.poll() is not None:
                raise TimeoutError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as answer:
            targets = json.loads(answer.read())
        page = next(t for t in targets if t.get("type") == "page")
        tools = _DevTools(page["webSocketDebuggerUrl"])
        for domain in ("Runtime", "Log", "Network", "Page"):
            tools.call(f"{domain}.enable")
        tools.call("Page.navigate", url=path.resolve().as_uri())
        tools.wait_for("Page.loadEventFired", timeout_s)
        images = tools.call("Runtime.evaluate", returnByValue=True, expression=(
            "JSON.stringify(Array.from(document.images).map(i => [i.complete, i.naturalWidth]))"))
        title = tools.call("Runtime.evaluate", expression="document.title", returnByValue=True)
        shot = tools.call("Page.captureScreenshot", format="png")
        import base64

        view = PageView(base64.b64decode(shot["data"]),
                        [(bool(c), int(w)) for c, w in json.loads(images["result"]["value"])],
                        _errors(tools.events), str(title["result"].get("value", "")))
        tools.socket.close()
        return view
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
