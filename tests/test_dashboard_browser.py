"""The dashboard end to end: `remindful dashboard` as a real process (embedded Chroma; the fake
embedder, since no figure here is about the model), driven by a real headless Chromium from
Debian's packages through Playwright. Loads every page, searches, opens a memory, bookmarks it,
deletes a session through the confirmation, and checks that a request without the token is
refused. Saves a screenshot of each page to a tmp dir, and also to ``$REMINDFUL_SCREENSHOTS``
when that names a directory (the README's pictures: overview.png, memories.png)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import remindful

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)"),
]
FAKE = {"REMINDFUL_EMBEDDINGS__BACKEND": "fake"}
#: Read at import: the autouse fixture drops every REMINDFUL_* variable before a test runs.
SCREENSHOTS = os.environ.get("REMINDFUL_SCREENSHOTS")


def _populate(path: Path, shots: Path) -> None:
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


@pytest.fixture
def served(tmp_path: Path) -> Iterator[dict[str, Any]]:
    store, shots = tmp_path / "store", tmp_path / "shots"
    shots.mkdir()
    _populate(store, shots)
    env = {**os.environ, **FAKE, "REMINDFUL_SECURITY__ALLOWED_PATHS": f'["{shots}"]'}
    code = "from remindful.shells.entry import main; main()"
    log = tmp_path / "dashboard.log"
    with (
        open(log, "w") as stderr,
        subprocess.Popen(
            [sys.executable, "-c", code, "--path", str(store), "dashboard", "--port", "0", "--no-open"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
        ) as proc,
    ):
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith("remindful dashboard on http://127.0.0.1:"), line + log.read_text()
            url = line.split(" on ", 1)[1].split()[0]
            yield {"url": url, "base": url.split("/?", 1)[0], "token": url.split("token=", 1)[1], "store": store}
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


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
    folder.mkdir()
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
    save = _saver(tmp_path)

    # Without the token: refused, in the browser and to a plain client.
    stranger = browser.new_page()
    assert stranger.goto(base + "/").status == 401
    assert "remindful dashboard" in stranger.content()
    stranger.close()
    assert httpx.get(base + "/memories").status_code == 401

    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)

    # The printed URL opens it once: the token becomes an HttpOnly cookie and leaves the address bar.
    assert page.goto(served["url"]).status == 200
    assert page.url == base + "/"
    cookie = next(c for c in context.cookies() if c["name"] == "remindful_token")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    page.wait_for_selector("body[data-charts-ready=true]")
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
    page.goto(base + "/memories?type=screen")
    page.click("#memories tbody tr:first-child td a")
    image = page.wait_for_selector("img[id='attachment-screenshot_path']")
    # Loaded, not only in the page: the image arrives after the element (a real failure times out).
    page.wait_for_function("(img) => img.complete && img.naturalWidth > 0", arg=image, timeout=30_000)

    # Sessions, one session, and its deletion through the confirmation.
    page.click("nav >> text=Sessions")
    page.wait_for_selector("#sessions tbody tr")
    save(page, "sessions")
    page.click("#sessions a[href='/sessions/session_notes']")
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
    assert served["token"] not in page.content()
    save(page, "settings")

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
