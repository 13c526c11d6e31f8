"""The dashboard end to end: `remindful dashboard` as a real process (embedded Chroma; the fake
embedder, since no figure here is about the model), driven by a real headless Chromium from
Debian's packages through Playwright. Loads every page, searches, opens a memory, bookmarks it,
deletes a session through the confirmation, and checks that a request without the token is
refused. Saves a screenshot of each page to a tmp dir, and also to ``$REMINDFUL_SCREENSHOTS``
when that names a directory (the README's pictures: overview.png, memories.png)."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

import remindful
from requirements import requires

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.slow,
    requires(CHROMIUM.exists(), f"Chromium at {CHROMIUM} (apt-get install chromium)"),
]
FAKE = {"REMINDFUL_EMBEDDINGS__BACKEND": "fake"}
#: Read at import: the autouse fixture drops every REMINDFUL_* variable before a test runs.
SCREENSHOTS = os.environ.get("REMINDFUL_SCREENSHOTS")


def _populate(path: Path, shots: Path) -> str:
    """Two weeks of an agent's memories: sessions of UI work with outcomes, screens with a
    screenshot, knowledge and conversation, on most days."""
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000002000000020802000000fdd49a73000000164944415478da63f8cf"
        "c0f09f81e13f03c37f0686ff0c0029fb05fb6e7bd1d80000000049454e44ae426082"
    )
    (shots / "login.png").write_bytes(png)
    now = time.time()
    flows = [
        [("navigate", "Open the staging login page", True), ("type", "Type the user name into #email", True),
         ("click", "Click the Sign in button", True)],
        [("navigate", "Open the billing report", True), ("click", "Click Export CSV at (500, 300)", False),
         ("click", "Click the Download link", True)],
        [("navigate", "Open the staging login page", True), ("type", "Type the user name into #email", True),
         ("click", "Click the Sign in button", True), ("scroll", "Scroll to the invoices table", True)],
    ]  # fmt: skip
    items: list[dict[str, Any]] = []
    for day in range(14):
        if day % 5 == 4:
            continue
        session = f"session_2026{day:04d}_agent"
        start = now - (14 - day) * 86400 + 3600
        for n, (verb, text, ok) in enumerate(flows[day % 3] * (1 + day % 2)):
            items.append({"content": text, "type": "action", "session_id": session, "timestamp": start + 60 * n,
                          "metadata": {"action": verb, "success": ok if day % 4 else True}})  # fmt: skip
        items.append({"content": "Login page with email and password fields", "type": "screen",
                      "session_id": session, "timestamp": start + 30,
                      "metadata": {"screen_name": "Staging login", "screenshot_path": str(shots / "login.png")}},
                     )  # fmt: skip
    items += [
        {"content": "The deploy script needs AWS_PROFILE=prod and a fresh token", "type": "knowledge",
         "session_id": "session_notes", "timestamp": now - 3 * 86400},
        {"content": "User prefers dark mode in every editor", "type": "knowledge", "session_id": "session_notes",
         "timestamp": now - 2 * 86400},
        {"content": "User: how do I deploy? Assistant: run make deploy with AWS_PROFILE=prod", "type": "conversation",
         "session_id": "session_notes", "timestamp": now - 2 * 86400 + 60},
        {"content": "Staging runs on port 8443; the health check is /healthz", "type": "knowledge",
         "session_id": "session_notes", "timestamp": now - 3600},
    ]  # fmt: skip
    settings = {"embeddings.backend": "fake", "attachments.copy_attachments": True, "security.allowed_paths": [shots]}
    with remindful.open(path, **settings) as memory:
        memory.store_batch(items)
        memory.flush()
        memory.search("deploy")
        memory.backup(name="weekly")
        return memory.list("knowledge", limit=1)[0].id


@contextmanager
def dashboard_process(
    store: Path, log: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[dict[str, Any]]:
    """`remindful dashboard --port 0` on ``store`` (plus ``args``): its base URL, its first
    sign-in link and the process, until the block ends."""
    code = "from remindful.shells.entry import main; main()"
    with (
        open(log, "w") as stderr,
        subprocess.Popen(
            [sys.executable, "-c", code, "--path", str(store), "dashboard", "--port", "0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, **FAKE, **(env or {})},
        ) as proc,
    ):
        try:
            assert proc.stdout is not None
            first, second = proc.stdout.readline(), proc.stdout.readline()
            assert first.startswith("remindful dashboard on http://127.0.0.1:"), first + log.read_text()
            base = first.split(" on ", 1)[1].strip().rstrip("/")
            assert second.startswith(f"  sign in: {base}/login?code="), second
            yield {"base": base, "link": second.split(": ", 1)[1].strip(), "proc": proc}
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[dict[str, Any]]:
    store, shots = tmp_path / "store", tmp_path / "shots"
    shots.mkdir()
    some_memory = _populate(store, shots)
    env = {"REMINDFUL_SECURITY__ALLOWED_PATHS": f'["{shots}"]'}
    with dashboard_process(store, tmp_path / "dashboard.log", "--no-open", env=env) as running:
        token = (store / "http_token").read_text().strip()
        yield {**running, "token": token, "store": store, "some_memory": some_memory}


@pytest.fixture
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            yield chromium
        finally:
            chromium.close()


def _saver(tmp_path: Path) -> Any:
    folder = tmp_path / "screenshots"
    folder.mkdir(exist_ok=True)
    extra = SCREENSHOTS

    def save(page: Any, name: str) -> Path:
        page.wait_for_load_state("load")
        target = folder / f"{name}.png"
        page.screenshot(path=str(target), full_page=False)
        if extra:
            Path(extra).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(target, Path(extra) / target.name)
        return target

    return save


def test_dashboard_in_a_real_browser(served: dict[str, Any], browser: Any, tmp_path: Path) -> None:
    base = served["base"]
    shoot = _saver(tmp_path)

    def save(page: Any, name: str) -> None:
        shoot(page, name)
        pages.append(page.content())

    # Without the token: refused, in the browser and to a plain client.
    stranger = browser.new_page()
    assert stranger.goto(base + "/").status == 401
    assert "remindful dashboard" in stranger.content()
    stranger.close()
    assert httpx.get(base + "/memories").status_code == 401

    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    visited: list[str] = []  # every URL the browser asked for, and every page it got
    pages: list[str] = []
    page.on("request", lambda request: visited.append(request.url))
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)

    # The printed link signs this browser in, once: a session cookie of this dashboard's port,
    # HttpOnly, SameSite=Strict, scoped to the session's own path, where the dashboard now lives.
    assert page.goto(served["link"]).status == 200
    page.wait_for_selector("body[data-charts-ready=true]")
    port = base.rsplit(":", 1)[1]
    (cookie,) = context.cookies()
    assert cookie["name"] == f"remindful_session_{port}" and cookie["value"] != served["token"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"].startswith("/s/")
    root = base + cookie["path"]
    assert page.url == root + "/"
    assert page.locator("#total-memories").inner_text() != "0"
    assert page.locator("#chart-per-day").bounding_box()["height"] > 50  # drawn by the shipped Chart.js
    save(page, "overview")

    page.click("nav >> text=Memories")
    page.wait_for_selector("#memories tbody tr")
    save(page, "memories")

    # Search, then open the best hit.
    page.fill("#search-box", "deploy AWS_PROFILE")
    page.press("#search-box", "Enter")
    page.wait_for_selector("#results")
    assert "deploy script needs AWS_PROFILE=prod" in page.locator("#results").inner_text()
    save(page, "search")
    page.click("#results tbody tr:first-child td a")
    page.wait_for_selector("#memory-content")
    memory_url = page.url

    # Bookmark it.
    page.click("#bookmark-button")
    page.wait_for_load_state("load")
    assert page.locator("#bookmarked").count() == 1, page.content()[-1500:]
    assert page.url == memory_url and page.locator("#bookmark-button").inner_text() == "Remove bookmark"
    save(page, "memory")

    # A screen memory shows its screenshot, served by the dashboard.
    page.goto(root + "/memories?type=screen")
    page.click("#memories tbody tr:first-child td a")
    image = page.wait_for_selector("img[id='attachment-screenshot_path']")
    # Loaded, not only in the page: the image arrives after the element (a real failure times out).
    # (Polled from here: wait_for_function evaluates with eval, which the page's CSP refuses.)
    deadline = time.monotonic() + 30
    while not image.evaluate("(img) => img.complete && img.naturalWidth > 0"):
        assert time.monotonic() < deadline, "the screenshot never loaded"
        page.wait_for_timeout(50)

    # Sessions, one session, and its deletion through the confirmation.
    page.click("nav >> text=Sessions")
    page.wait_for_selector("#sessions tbody tr")
    save(page, "sessions")
    page.click("#sessions a[href$='/sessions/session_notes']")
    page.wait_for_selector("#session-memories")
    save(page, "session")
    page.click("#delete-session-link")
    page.wait_for_selector("#confirm-delete-form")
    assert "_auto-before-delete-session.tar.gz" in page.content()
    save(page, "delete_session")
    page.check("#confirm-checkbox")
    page.click("#confirm-delete-button")
    notice = page.wait_for_selector("#notice")
    text = notice.inner_text()
    assert "Deleted session session_notes" in text
    backup = Path(text.split("written to ", 1)[1].strip().rstrip("."))
    assert backup.is_file() and backup.parent == served["store"] / "backups"
    assert "session_notes" not in page.locator("#sessions").inner_text()

    page.click("nav >> text=Patterns")
    page.wait_for_selector("body[data-charts-ready=true]")
    assert "→" in page.locator("#patterns").inner_text()
    assert (
        "Click Export CSV" in page.locator("#failure-prone").inner_text() or page.locator("#failure-prone tr").count()
    )
    save(page, "patterns")

    page.click("nav >> text=Settings")
    page.wait_for_selector("#settings")
    settings_text = page.locator("#settings").inner_text()
    assert "embeddings.backend" in settings_text and "environment (REMINDFUL_*)" in settings_text
    save(page, "settings")

    # The store's token is nowhere in the browser: not a cookie, not in storage, not in a page or URL.
    assert all(served["token"] not in c["value"] for c in context.cookies())
    stored = page.evaluate("() => JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage)])")
    assert served["token"] not in stored
    assert all(served["token"] not in url for url in visited)
    assert all(served["token"] not in html for html in pages)

    assert errors == []
    assert sorted(p.name for p in (tmp_path / "screenshots").iterdir()) == sorted(
        f"{n}.png"
        for n in (
            "overview",
            "memories",
            "search",
            "memory",
            "sessions",
            "session",
            "delete_session",
            "patterns",
            "settings",
        )
    )


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Another web server on 127.0.0.1 (any local user may run one): it logs what it receives."""

    seen: list[tuple[str, str]]

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Cookie", "")))
        body = b"<!doctype html><title>elsewhere</title>"
        if self.path != "/frame":
            body += b'<img src="/pixel.png"><iframe src="/frame"></iframe>'
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def other_server() -> Iterator[tuple[str, list[tuple[str, str]]]]:
    seen: list[tuple[str, str]] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def small(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A dashboard over a store with one memory, without a browser of its own."""
    store = tmp_path / "store"
    with remindful.open(store, **{"embeddings.backend": "fake"}) as memory:
        memory.store("The deploy script needs AWS_PROFILE=prod", type="knowledge", session_id="s1")
    with dashboard_process(store, tmp_path / "dashboard.log", "--no-open") as running:
        yield {**running, "token": (store / "http_token").read_text().strip()}


def test_another_local_port_receives_no_credential(small: dict[str, Any], browser: Any) -> None:
    """Cookies are not scoped by port: the old ``remindful_token`` cookie (Path=/) reached every web
    server on 127.0.0.1. The session cookie is scoped to the session's own path, so a server on
    another port gets nothing from the dashboard, whatever its pages ask for."""
    context = browser.new_context()
    page = context.new_page()
    # The control: a cookie with Path=/ on this host does reach the other server (so the recorder
    # would see a leak if there were one).
    context.add_cookies([{"name": "control", "value": "1", "domain": "127.0.0.1", "path": "/"}])
    assert page.goto(small["link"]).status == 200
    page.wait_for_selector("#total-memories")
    root = page.url.rstrip("/")
    assert page.goto(root + "/memories").status == 200
    with other_server() as (elsewhere, seen):
        for path in ("/", "/memories", "/s/", urlsplit(root).path + "/"):  # even the session's own path
            page.goto(elsewhere + path)
            page.wait_for_load_state("load")
        page.goto(root + "/sessions")  # and back: the dashboard still works
        assert page.locator("#sessions").count() == 1
    session_path = urlsplit(root).path
    elsewhere_paths = [(path, cookie) for path, cookie in seen if not path.startswith(session_path)]
    assert len(elsewhere_paths) >= 9 and {cookie for _, cookie in elsewhere_paths} == {"control=1"}, seen
    # Only a request for the session's own path on the other port could carry the cookie: that path
    # is random, known to this browser and the dashboard alone (never sent as a referrer elsewhere).
    assert all(small["token"] not in cookie for _, cookie in seen)


def test_a_sign_in_link_works_once(small: dict[str, Any], browser: Any) -> None:
    first = browser.new_context()
    page = first.new_page()
    assert page.goto(small["link"]).status == 200
    page.wait_for_selector("#total-memories")
    root = page.url.rstrip("/")
    second = browser.new_context()  # another browser (profile) with the same link: refused
    other = second.new_page()
    answer = other.goto(small["link"])
    assert answer is not None and answer.status == 401
    assert "has been used or has expired" in other.content()
    assert second.cookies() == []
    assert other.goto(root + "/").status == 401  # the path alone opens nothing
    assert page.goto(root + "/memories").status == 200  # the first browser is still signed in


def test_the_opened_browser_gets_a_private_page_never_a_secret_on_its_command_line(
    tmp_path: Path, browser: Any
) -> None:
    """Without --no-open the dashboard starts $BROWSER on a local page that only this user can
    read; the browser's command line (visible in ps to every local user) names that file alone."""
    store = tmp_path / "store"
    with remindful.open(store, **{"embeddings.backend": "fake"}) as memory:
        memory.store("The deploy script needs AWS_PROFILE=prod", type="knowledge")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    argv_file = tmp_path / "browser-argv.json"
    fake_browser = tmp_path / "fake-browser"
    fake_browser.write_text(
        f"#!{sys.executable}\nimport json, sys\nopen({str(argv_file)!r}, 'w').write(json.dumps(sys.argv))\n"
    )
    fake_browser.chmod(0o700)
    env = {"BROWSER": str(fake_browser), "XDG_RUNTIME_DIR": str(runtime)}
    with dashboard_process(store, tmp_path / "dashboard.log", env=env) as running:
        for _ in range(200):
            if argv_file.exists() and argv_file.read_text():
                break
            time.sleep(0.05)
        argv = json.loads(argv_file.read_text())
        token = (store / "http_token").read_text().strip()
        (url,) = argv[1:]
        assert url.startswith("file://") and "code" not in url and token not in url
        launch = Path(urlsplit(url).path)
        assert launch.parent == runtime and stat.S_IMODE(launch.stat().st_mode) == 0o600
        assert running["link"] not in launch.read_text()  # its own code, not the printed one
        page = browser.new_context().new_page()
        page.goto(url)  # from a file: page (another site): the sign-in still lands in the dashboard
        page.wait_for_selector("#total-memories", timeout=30_000)
        assert "/s/" in page.url and token not in page.content()
    assert not launch.exists()  # removed when the dashboard stops


#: Elements that stick out of their parent (horizontally) or of the window, outside any scrolling box:
#: what a person sees cut off or overlapping the next column. Empty when the page fits.
_OVERFLOWING = """() => {
  const out = [];
  const width = window.innerWidth;
  if (document.documentElement.scrollWidth > width) out.push(`page ${document.documentElement.scrollWidth} > ${width}`);
  const scrolls = (el) => ["auto", "scroll"].includes(getComputedStyle(el).overflowX);
  const walk = (el, clipped) => {
    for (const child of el.children) {
      const box = child.getBoundingClientRect(), frame = el.getBoundingClientRect();
      const style = getComputedStyle(child);
      if (box.width > 0 && style.position !== "absolute" && style.display !== "contents" && !clipped) {
        if (box.right > frame.right + 1 || box.left < frame.left - 1 || box.right > width + 1) {
          const at = (e, b) => `${e.tagName}#${e.id}.${e.className} [${Math.round(b.left)}, ${Math.round(b.right)}]`;
          out.push(`${at(child, box)} outside ${at(el, frame)}`);
        }
      }
      walk(child, clipped || scrolls(child));
    }
  };
  walk(document.body, false);
  return out;
}"""
WIDTHS = (1100, 1400, 1920)


def test_every_page_fits_the_window_from_1100_to_1920_px(served: dict[str, Any], browser: Any, tmp_path: Path) -> None:
    """Issue 35: the page was wider than the window at 1,100 and 1,400 px, the By type table's last
    column ran under By scope, the content a left-aligned block at 1,920 px, and the donut chart cut
    off after a resize. Each page at each width: nothing sticks out; a screenshot of each."""
    shoot = _saver(tmp_path)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    assert page.goto(served["link"]).status == 200
    page.wait_for_selector("body[data-charts-ready=true]")
    root = page.url.rstrip("/")
    memory_id = served["some_memory"]
    pages = {
        "overview": "/",
        "memories": "/memories",
        "search": "/memories?q=deploy",
        "memory": f"/memories/{memory_id}",
        "sessions": "/sessions",
        "session": "/sessions/session_notes",
        "patterns": "/patterns",
        "settings": "/settings",
    }
    problems: dict[str, list[str]] = {}
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in pages.items():
            page.goto(root + path)
            page.wait_for_load_state("load")
            if name in ("overview", "patterns"):
                page.wait_for_selector("body[data-charts-ready=true]")
            shoot(page, f"{name}-{width}")
            found = page.evaluate(_OVERFLOWING)
            if found:
                problems[f"{name} at {width}"] = found[:5]
        # Content is not a narrow block on one side of a wide window.
        page.goto(root + "/")
        page.wait_for_selector("body[data-charts-ready=true]")
        box = page.locator("main").bounding_box()
        assert box is not None
        if abs(box["x"] - (width - box["x"] - box["width"])) > 2:
            problems[f"main at {width}"] = [f"not centred: {box}"]
    # A resize from wide to narrow redraws the charts inside their boxes.
    page.set_viewport_size({"width": 1920, "height": 900})
    page.goto(root + "/")
    page.wait_for_selector("body[data-charts-ready=true]")
    page.set_viewport_size({"width": 1100, "height": 900})
    page.wait_for_timeout(500)  # Chart.js redraws on its resize observer
    shoot(page, "overview-resized")
    found = page.evaluate(_OVERFLOWING)
    if found:
        problems["overview after a resize"] = found[:5]
    # The sign-in page a browser without a session gets.
    stranger = browser.new_context(viewport={"width": 1100, "height": 900}).new_page()
    stranger.goto(served["base"] + "/")
    shoot(stranger, "sign-in-1100")
    assert stranger.evaluate(_OVERFLOWING) == []
    assert problems == {}, json.dumps(problems, indent=1)


def test_the_servers_address_leads_a_signed_in_browser_to_its_dashboard(small: dict[str, Any], browser: Any) -> None:
    """Issue 35: a bookmark of http://127.0.0.1:PORT/ answered 401 after signing in."""
    context = browser.new_context()
    page = context.new_page()
    assert page.goto(small["link"]).status == 200
    page.wait_for_selector("#total-memories")
    root = page.url.rstrip("/")
    assert "/s/" in root
    # The page keeps its path once its script ran (deferred: after #total-memories is parsed; a
    # loaded machine showed the gap): a bookmark followed before then finds nothing to go back to.
    # Polled from here: wait_for_function evaluates its string with eval, which the page's CSP
    # (script-src 'self') refuses whenever the first look finds nothing yet.
    deadline = time.monotonic() + 30
    while page.evaluate("() => localStorage.getItem('remindful.home')") is None:
        assert time.monotonic() < deadline, "the dashboard page never kept its path"
        page.wait_for_timeout(50)
    page.goto(small["base"] + "/")
    page.wait_for_url(root + "/")
    page.wait_for_selector("#total-memories")
    page.goto(small["base"] + "/sessions")  # a page outside the session: the same page inside it
    page.wait_for_url(root + "/sessions")
    # Another browser (no session): the sign-in page, and it stays there.
    other = browser.new_context().new_page()
    answer = other.goto(small["base"] + "/")
    assert answer is not None and answer.status == 401
    assert "Sign in to the remindful dashboard" in other.locator("h1").inner_text()
    assert "press Enter in that terminal" in other.locator("main").inner_text()
    # A session the server no longer knows (a restart signs every browser out): the page shows
    # how to sign in, under that path, and forgets it (no loop).
    page.evaluate("() => localStorage.setItem('remindful.home', '/s/' + 'B'.repeat(24) + '/')")
    page.goto(small["base"] + "/")
    page.wait_for_url(small["base"] + "/s/" + "B" * 24 + "/")
    page.wait_for_selector("#gate-page")
    assert page.evaluate("() => localStorage.getItem('remindful.home')") is None
