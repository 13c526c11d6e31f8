"""The dashboard app in-process (Starlette's TestClient): the gate (token, cookie, Host, Origin,
CSRF), every page, paging and filters, bookmark, deletes, attachments, settings without secrets.
The real browser runs in test_dashboard_browser.py."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from remindful.api import MemoryManager
from remindful.testing import open_fake
from remindful.web import build_app
from remindful.web.app import PAGE_SIZE
from remindful.web.gate import COOKIE

TOKEN = "test-token-0123456789"
HOST = "testserver"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryManager]:
    (tmp_path / "shots").mkdir()
    settings = {"attachments.copy_attachments": True, "security.allowed_paths": [tmp_path / "shots"]}
    with open_fake(tmp_path / "store", **settings) as manager:
        yield manager


@pytest.fixture
def anonymous(store: MemoryManager) -> TestClient:
    return TestClient(build_app(store, TOKEN, hosts=[HOST]), follow_redirects=False)


@pytest.fixture
def client(store: MemoryManager) -> TestClient:
    return TestClient(build_app(store, TOKEN, hosts=[HOST]), headers={"Authorization": f"Bearer {TOKEN}"})


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "no CSRF field in the page"
    return found.group(1)


def _fill(store: MemoryManager) -> dict[str, Any]:
    now = time.time()
    ids = store.store_batch(
        [
            {"content": "clicked login", "type": "action", "session_id": "s1", "metadata": {"action": "click"}},
            {"content": "typed password field", "type": "action", "session_id": "s1", "metadata": {"action": "type"}},
            {"content": "Login page shown", "type": "screen", "session_id": "s1", "metadata": {"screen_name": "Login"}},
            {"content": "deploy needs AWS_PROFILE=prod", "type": "knowledge", "session_id": "s2"},
            {
                "content": "an old note from last year",
                "type": "knowledge",
                "session_id": "s2",
                "timestamp": now - 400 * 86400,
            },
        ]
    )
    return {"ids": ids}


# -- the gate -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/memories", "/sessions", "/patterns", "/settings", "/static/dashboard.js"])
def test_every_request_without_the_token_is_401(anonymous: TestClient, path: str) -> None:
    answer = anonymous.get(path)
    assert answer.status_code == 401
    assert "remindful dashboard" in answer.text
    assert anonymous.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert anonymous.get(path, headers={"Cookie": f"{COOKIE}=wrong"}).status_code == 401
    assert anonymous.get(path + "?token=wrong").status_code == 401


def test_post_without_the_token_is_401_and_changes_nothing(anonymous: TestClient, store: MemoryManager) -> None:
    memory_id = store.store("keep me", type="knowledge")
    assert anonymous.post(f"/memories/{memory_id}/delete", data={"csrf": "x"}).status_code == 401
    assert store.get(memory_id).content == "keep me"


def test_token_url_sets_an_httponly_strict_cookie_and_redirects_without_the_token(anonymous: TestClient) -> None:
    answer = anonymous.get(f"/memories?type=action&token={TOKEN}")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/memories?type=action"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={TOKEN}")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    # The browser then sends the cookie: the page answers, without any token in the URL.
    page = anonymous.get("/memories?type=action", headers={"Cookie": f"{COOKIE}={TOKEN}"})
    assert page.status_code == 200 and TOKEN not in page.text


def test_a_foreign_host_or_origin_is_refused_even_with_the_token(client: TestClient) -> None:
    assert client.get("/", headers={"Host": "evil.example:8765"}).status_code == 421
    assert client.get("/", headers={"Origin": "http://evil.example"}).status_code == 403
    assert client.get("/", headers={"Origin": f"http://{HOST}"}).status_code == 200


def test_loopback_hosts_are_served_by_default(store: MemoryManager) -> None:
    app = build_app(store, TOKEN)
    with TestClient(app, base_url="http://127.0.0.1:8765", headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        assert c.get("/").status_code == 200
        assert c.get("/", headers={"Host": "[::1]:8765"}).status_code == 200
        assert c.get("/", headers={"Host": "localhost"}).status_code == 200
        assert c.get("/", headers={"Host": "testserver"}).status_code == 421


def test_a_post_without_the_csrf_token_is_refused(client: TestClient, store: MemoryManager) -> None:
    memory_id = store.store("keep me too", type="knowledge")
    for data in ({}, {"csrf": "0" * 64}):
        answer = client.post(f"/memories/{memory_id}/delete", data=data)
        assert answer.status_code == 403
        assert "CSRF" in answer.text
    assert client.post(f"/memories/{memory_id}/bookmark", data={}).status_code == 403
    assert not store.get(memory_id).bookmarked and store.get(memory_id).content == "keep me too"


def test_pages_carry_security_headers_and_no_token(client: TestClient, store: MemoryManager) -> None:
    _fill(store)
    for path in ("/", "/memories", "/sessions", "/patterns", "/settings"):
        answer = client.get(path)
        assert answer.status_code == 200, path
        assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["referrer-policy"] == "same-origin"
        assert TOKEN not in answer.text


# -- pages ----------------------------------------------------------------------------------------


def test_overview_shows_totals_storage_activity_and_charts(client: TestClient, store: MemoryManager) -> None:
    _fill(store)
    store.search("deploy")
    store.backup(name="nightly")
    page = client.get("/").text
    assert 'id="total-memories">5<' in page
    assert "knowledge_memories" in page and "of 500 MB" in page
    assert "click" in page and "Login" in page  # most frequent action and screen
    assert "_nightly.tar.gz" in page  # last backup
    assert 'data-chart="per_day"' in page and '<script type="application/json" id="chart-data">' in page
    assert '<script src="/static/chart.umd.min.js"' in page


def test_chart_library_is_served_from_the_package_with_its_license(client: TestClient) -> None:
    script = client.get("/static/chart.umd.min.js")
    assert script.status_code == 200 and "Chart.js v4" in script.text[:200] and "MIT License" in script.text[:200]
    assert "MIT License" in client.get("/static/chart.js.LICENSE.md").text


def test_memories_page_lists_newest_first_with_filters(client: TestClient, store: MemoryManager) -> None:
    _fill(store)
    page = client.get("/memories").text
    assert page.index("an old note") > page.index("deploy needs")  # newest first
    only_screens = client.get("/memories?type=screen").text
    assert "Login page shown" in only_screens and "clicked login" not in only_screens
    one_session = client.get("/memories?session=s2").text
    assert "deploy needs" in one_session and "clicked login" not in one_session
    old = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 400 * 86400))
    by_day = client.get(f"/memories?since={old}&until={old}").text
    assert "an old note" in by_day and "deploy needs" not in by_day
    recent = client.get(f"/memories?since={time.strftime('%Y-%m-%d', time.gmtime(time.time() - 86400))}").text
    assert "deploy needs" in recent and "an old note" not in recent
    assert "an old note" in client.get("/memories?until=9999-12-31").text  # the last day there is: no overflow
    store.store("from a hook", type="action", source="hook")
    hooks = client.get("/memories?source=hook").text
    assert "from a hook" in hooks and "clicked login" not in hooks


@pytest.mark.parametrize(
    ("query", "field"),
    [("type=nope", "type"), ("source=nope", "source"), ("since=yesterday", "since"), ("page=-1", "page")],
)
def test_bad_filters_are_400_naming_the_field(client: TestClient, query: str, field: str) -> None:
    answer = client.get(f"/memories?{query}")
    assert answer.status_code == 400
    assert f"'{field}'" in answer.text or f"{field}:" in answer.text or field in answer.text.split("error-message")[1]


def test_memories_are_paged(client: TestClient, store: MemoryManager) -> None:
    now = time.time()
    total = PAGE_SIZE * 2 + 5
    store.store_batch(
        [{"content": f"note number {i}", "type": "knowledge", "timestamp": now - i} for i in range(total)]
    )
    first = client.get("/memories").text
    assert (
        "note number 0<" in first and f"note number {PAGE_SIZE - 1}<" in first and f"number {PAGE_SIZE}<" not in first
    )
    assert 'id="next-page"' in first
    last = client.get("/memories?page=2").text
    assert f"note number {total - 1}<" in last and 'id="next-page"' not in last
    assert last.count('href="/memories/knowledge_') == 5
    # paging inside a time range keeps to it
    day = time.strftime("%Y-%m-%d", time.gmtime(now))
    assert client.get(f"/memories?since={day}&page=2").text.count('href="/memories/knowledge_') == 5


def test_search_shows_scores_and_matched_spaces(client: TestClient, store: MemoryManager) -> None:
    _fill(store)
    page = client.get("/memories?q=AWS_PROFILE+deploy").text
    assert 'id="results"' in page and "deploy needs AWS_PROFILE=prod" in page
    assert re.search(r'<td class="num">[01]\.\d{3}</td>', page)
    assert '<span class="tag">lexical</span>' in page


def test_memory_page_bookmark_toggle_and_delete(client: TestClient, store: MemoryManager) -> None:
    memory_id = _fill(store)["ids"][3]
    page = client.get(f"/memories/{memory_id}").text
    assert "deploy needs AWS_PROFILE=prod" in page and "importance" in page and "access count" in page
    csrf = _csrf(page)
    assert client.post(f"/memories/{memory_id}/bookmark", data={"csrf": csrf}).status_code == 200
    assert store.get(memory_id).bookmarked
    client.post(f"/memories/{memory_id}/bookmark", data={"csrf": csrf})
    assert not store.get(memory_id).bookmarked
    answer = client.post(f"/memories/{memory_id}/delete", data={"csrf": csrf}, follow_redirects=False)
    assert answer.status_code == 303
    assert client.get(f"/memories/{memory_id}").status_code == 404


def test_unknown_memory_is_404(client: TestClient) -> None:
    answer = client.get("/memories/action_20990101000000000000_deadbeef")
    assert answer.status_code == 404 and "not found" in answer.text.lower()


def test_screenshot_attachment_shows_as_an_image_served_only_from_the_store(
    client: TestClient, store: MemoryManager, tmp_path: Path
) -> None:
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da6364f8ffbf1e0005fe02fea7d6a4a30000000049454e44ae426082"
    )
    shot = tmp_path / "shots" / "shot.png"
    shot.write_bytes(png)
    memory_id = store.store("login screen", type="screen", metadata={"screenshot_path": str(shot)})
    page = client.get(f"/memories/{memory_id}").text
    url = f"/memories/{memory_id}/attachments/screenshot_path"
    assert f'<img src="{url}"' in page
    image = client.get(url)
    assert image.status_code == 200 and image.content == png and image.headers["content-type"] == "image/png"
    # A path outside the store's attachments is shown, never served.
    secret = tmp_path / "secret.png"
    secret.write_bytes(png)
    other = store.store("elsewhere", type="screen", metadata={"screenshot_path": str(secret)})
    store.update(other, metadata={"screenshot_path": str(secret)})
    assert "not served" in client.get(f"/memories/{other}").text
    assert client.get(f"/memories/{other}/attachments/screenshot_path").status_code == 404
    assert client.get(f"/memories/{memory_id}/attachments/nope").status_code == 404


def test_sessions_page_session_memories_in_order_and_resume(client: TestClient, store: MemoryManager) -> None:
    _fill(store)
    sessions = client.get("/sessions").text
    assert 'href="/sessions/s1"' in sessions and 'href="/sessions/s2"' in sessions and "3 memories" in sessions
    page = client.get("/sessions/s1").text
    assert page.index("clicked login") < page.index("typed password") < page.index("Login page shown")
    answer = client.post("/sessions/s1/resume", data={"csrf": _csrf(page)})
    assert answer.status_code == 200 and "Resumed" in answer.text
    assert 'href="/sessions/s1"' in client.get("/sessions").text


def test_session_memories_are_paged_in_time_order(client: TestClient, store: MemoryManager) -> None:
    now = time.time()
    store.store_batch(
        [
            {"content": f"step {i:03d}", "type": "action", "session_id": "long", "timestamp": now - 1000 + i}
            for i in range(150)
        ]
    )
    first = client.get("/sessions/long").text
    assert "step 000" in first and "step 099" in first and "step 100" not in first
    assert first.index("step 000") < first.index("step 099")
    second = client.get("/sessions/long?page=1").text
    assert "step 100" in second and "step 149" in second and "step 099" not in second


def test_deleting_a_session_needs_the_confirmation_and_names_the_backup(
    client: TestClient, store: MemoryManager
) -> None:
    _fill(store)
    confirm_page = client.get("/sessions/s1/delete").text
    assert "backups/backup_" in confirm_page and "_auto-before-delete-session.tar.gz" in confirm_page
    csrf = _csrf(confirm_page)
    refused = client.post("/sessions/s1/delete", data={"csrf": csrf})
    assert refused.status_code == 400 and "confirm" in refused.text
    assert len(store.list(session_id="s1")) == 3
    done = client.post("/sessions/s1/delete", data={"csrf": csrf, "confirm": "yes"})
    assert done.status_code == 200 and "Deleted session s1" in done.text
    backup = re.search(r"backup first written to <code>([^<]+)</code>", done.text)
    assert backup and Path(backup.group(1)).is_file()
    assert store.list(session_id="s1") == []
    assert client.get("/sessions/s1").status_code == 404


def test_patterns_page_shows_workflows_and_failure_prone_actions(client: TestClient, store: MemoryManager) -> None:
    now = time.time()
    items = []
    for s in range(3):
        for i, (verb, ok) in enumerate([("navigate", True), ("fill", True), ("click", s == 0)]):
            items.append(
                {
                    "content": f"{verb} the checkout form",
                    "type": "action",
                    "session_id": f"p{s}",
                    "metadata": {"action": verb, "success": ok},
                    "timestamp": now - 1000 * (3 - s) + i,
                }
            )
    store.store_batch(items)
    page = client.get("/patterns").text
    assert "→" in page  # a recurring workflow's steps
    failing = page.split('id="failure-prone"')[1]
    assert "click" in failing and "33%" in failing
    assert 'data-chart="kinds"' in page


def test_settings_show_sources_and_never_secrets(
    client: TestClient, store: MemoryManager, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "memory:\n  retention: {default_retention_days: 9}\n"
        "  learning: {llm: {base_url: 'http://user:hunter2@llm.local:8080/v1'}}\n"
    )
    monkeypatch.setenv("REMINDFUL_CONFIG", str(config))
    monkeypatch.setenv("REMINDFUL_SEARCH__CANDIDATES", "70")
    monkeypatch.setenv("REMINDFUL_HTTP_TOKEN", TOKEN)
    page = client.get("/settings").text
    row = re.search(r"<code>search.candidates</code></td><td><code>([^<]*)</code></td><td[^>]*>([^<]*)<", page)
    assert row and row.group(2) == "environment (REMINDFUL_*)"
    row = re.search(
        r"<code>retention.default_retention_days</code></td><td><code>[^<]*</code></td><td[^>]*>([^<]*)<", page
    )
    assert row and row.group(1).startswith("config file")
    row = re.search(r"<code>storage.max_size_mb</code></td><td><code>[^<]*</code></td><td[^>]*>([^<]*)<", page)
    assert row and row.group(1) == "default"
    assert "hunter2" not in page and TOKEN not in page


def test_setting_rows_hide_secret_keys_and_url_credentials() -> None:
    from remindful.config import load_settings
    from remindful.web.provenance import HIDDEN, _shown

    assert _shown("learning.llm.api_key", "sk-abc") == HIDDEN
    assert _shown("x.token", "abc") == HIDDEN
    assert _shown("hooks.context_budget_tokens", 1500) == "1500"
    assert "pw" not in _shown("learning.llm.base_url", "https://me:pw@host/v1")
    assert load_settings  # the module imports the real settings


def test_a_failing_api_call_is_a_page_not_a_crash(client: TestClient, store: MemoryManager) -> None:
    store.close()
    store.engine.disabled_reason = "disabled for this test"
    answer = client.get("/")
    assert answer.status_code == 503 and "disabled for this test" in answer.text
    assert client.get("/memories").status_code == 503
