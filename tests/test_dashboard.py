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
from remindful.web.gate import CODE_REFUSED, SECURITY_HEADERS, BearerGate
from remindful.web.signin import CODE_TTL_S, cookie_name

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
    assert anonymous.get(path, headers={"Cookie": f"remindful_token={TOKEN}"}).status_code == 401
    assert anonymous.get(path, headers={"Cookie": f"{cookie_name(80)}={TOKEN}"}).status_code == 401
    assert anonymous.get(path + "?token=wrong").status_code == 401


def test_the_store_token_in_a_url_opens_nothing_and_sets_no_cookie(anonymous: TestClient) -> None:
    """The old way in (``?token=`` set the token as a cookie, sent to every port of the host) is gone."""
    answer = anonymous.get(f"/memories?type=action&token={TOKEN}")
    assert answer.status_code == 401
    assert "set-cookie" not in answer.headers and "location" not in answer.headers


def test_post_without_the_token_is_401_and_changes_nothing(anonymous: TestClient, store: MemoryManager) -> None:
    memory_id = store.store("keep me", type="knowledge")
    assert anonymous.post(f"/memories/{memory_id}/delete", data={"csrf": "x"}).status_code == 401
    assert store.get(memory_id).content == "keep me"


def _sign_in(gate: BearerGate, client: TestClient) -> tuple[str, str]:
    """Spend a fresh code through ``client``: (the session's root path, its cookie header)."""
    assert gate.sign_ins is not None
    answer = client.get(f"/login?code={gate.sign_ins.new_code()}")
    assert answer.status_code == 200, answer.text
    cookie = answer.headers["set-cookie"]
    name_value, *attributes = [part.strip() for part in cookie.split(";")]
    root = next(a.removeprefix("Path=") for a in attributes if a.startswith("Path="))
    return root, name_value


def test_a_one_time_code_signs_a_browser_in_to_its_own_path_only(store: MemoryManager) -> None:
    gate = build_app(store, TOKEN, hosts=[HOST])
    browser = TestClient(gate, follow_redirects=False)
    assert gate.sign_ins is not None
    code = gate.sign_ins.new_code()
    answer = browser.get(f"/login?code={code}")
    assert answer.status_code == 200
    cookie = answer.headers["set-cookie"]
    name_value, *attributes = [part.strip() for part in cookie.split(";")]
    name, value = name_value.split("=", 1)
    assert name == cookie_name(80)  # the port of the server (the test client's is 80)
    assert TOKEN not in cookie and len(value) >= 40
    assert {"HttpOnly", "SameSite=Strict"} <= set(attributes)
    root = next(a.removeprefix("Path=") for a in attributes if a.startswith("Path="))
    assert re.fullmatch(r"/s/[A-Za-z0-9_-]{20,}", root)
    # The page moves on to the session's dashboard by itself (a page, not a redirect: SameSite).
    assert f'content="0;url={root}/"' in answer.text and TOKEN not in answer.text
    # The code is spent: a second use, with or without the cookie, is refused.
    again = browser.get(f"/login?code={code}", headers={"Cookie": name_value})
    assert again.status_code == 401 and again.text == CODE_REFUSED and "set-cookie" not in again.headers
    # Under its path the cookie opens the dashboard, and every link stays under that path.
    _fill(store)
    for path in ("/", "/memories", "/sessions", "/sessions/s1", "/patterns", "/settings"):
        page = browser.get(root + path, headers={"Cookie": name_value})
        assert page.status_code == 200, path
        assert TOKEN not in page.text and value not in page.text
        links = re.findall(r'(?:href|src|action)="([^"]*)"', page.text)
        assert links and all(link == "data:," or link.startswith(root + "/") for link in links), (path, links)
    # Nowhere else: not at /, not under another prefix, not as a bearer token.
    assert browser.get("/memories", headers={"Cookie": name_value}).status_code == 401
    assert browser.get("/s/" + "A" * 24 + "/memories", headers={"Cookie": name_value}).status_code == 401
    assert browser.get("/memories", headers={"Authorization": f"Bearer {value}"}).status_code == 401
    other_root, _ = _sign_in(gate, browser)
    assert other_root != root
    assert browser.get(other_root + "/", headers={"Cookie": name_value}).status_code == 401
    # Nor on another run of the dashboard (a new gate: sessions live with the server process).
    again_gate = TestClient(build_app(store, TOKEN, hosts=[HOST]), follow_redirects=False)
    assert again_gate.get(root + "/", headers={"Cookie": name_value}).status_code == 401


def test_a_signed_in_browser_can_use_every_form(store: MemoryManager) -> None:
    gate = build_app(store, TOKEN, hosts=[HOST])
    browser = TestClient(gate, follow_redirects=False)
    root, cookie = _sign_in(gate, browser)
    memory_id = store.store("bookmark me", type="knowledge", session_id="s9")
    page = browser.get(f"{root}/memories/{memory_id}", headers={"Cookie": cookie}).text
    csrf = _csrf(page)
    same_origin = {"Cookie": cookie, "Origin": f"http://{HOST}"}
    answer = browser.post(f"{root}/memories/{memory_id}/bookmark", data={"csrf": csrf}, headers=same_origin)
    assert answer.status_code == 303 and answer.headers["location"] == f"{root}/memories/{memory_id}"
    assert store.get(memory_id).bookmarked
    answer = browser.post(f"{root}/sessions/s9/resume", data={"csrf": csrf}, headers=same_origin)
    assert answer.status_code == 303 and answer.headers["location"] == f"{root}/sessions/s9?resumed=1"
    answer = browser.post(f"{root}/memories/{memory_id}/delete", data={"csrf": csrf}, headers=same_origin)
    assert answer.status_code == 303 and answer.headers["location"].startswith(f"{root}/memories?deleted=")
    # From a page of another port of the same host: refused before anything happens.
    other = {"Cookie": cookie, "Origin": "http://testserver:9999"}
    kept = store.store("keep me", type="knowledge")
    assert browser.post(f"{root}/memories/{kept}/delete", data={"csrf": csrf}, headers=other).status_code == 403
    assert store.get(kept).content == "keep me"


def test_a_code_expires(store: MemoryManager, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = build_app(store, TOKEN, hosts=[HOST])
    assert gate.sign_ins is not None
    code = gate.sign_ins.new_code()
    now = time.monotonic()
    monkeypatch.setattr("remindful.web.signin.time.monotonic", lambda: now + CODE_TTL_S + 1)
    answer = TestClient(gate).get(f"/login?code={code}")
    assert answer.status_code == 401 and answer.text == CODE_REFUSED


def test_a_token_holder_draws_codes_for_a_running_server(store: MemoryManager) -> None:
    """The daemon serves the dashboard too: whoever has the store's token can get a sign-in link."""
    client = TestClient(build_app(store, TOKEN, hosts=[HOST]), follow_redirects=False)
    assert client.post("/login").status_code == 401
    assert client.post("/login", headers={"Authorization": "Bearer wrong"}).status_code == 401
    drawn = client.post("/login", headers={"Authorization": f"Bearer {TOKEN}"})
    assert drawn.status_code == 200 and drawn.json()["expires_in_s"] == CODE_TTL_S
    url = drawn.json()["url"]
    assert url.startswith(f"http://{HOST}/login?code=") and TOKEN not in url
    assert client.get(url.removeprefix(f"http://{HOST}")).status_code == 200


@pytest.mark.parametrize(
    "path",
    [
        f"//evil.example/?token={TOKEN}",
        f"/\\evil.example/?token={TOKEN}",
        f"/%2F%2Fevil.example/?token={TOKEN}",
        f"/%5Cevil.example/?token={TOKEN}",
        f"//evil.example/login?token={TOKEN}",
        "//evil.example/login?code=whatever",
        "/login?code=whatever&next=//evil.example/",
    ],
)
def test_no_request_is_redirected_off_site(anonymous: TestClient, path: str) -> None:
    answer = anonymous.get(f"http://{HOST}{path}")  # the path as it is, not read as a host
    assert answer.status_code == 401
    assert "location" not in answer.headers and "set-cookie" not in answer.headers


def test_a_foreign_host_or_origin_is_refused_even_with_the_token(client: TestClient) -> None:
    assert client.get("/", headers={"Host": "evil.example:8765"}).status_code == 421
    assert client.get("/", headers={"Host": f"{HOST}:8080.evil"}).status_code == 421
    assert client.get("/", headers={"Origin": "http://evil.example"}).status_code == 403
    assert client.get("/", headers={"Origin": f"http://{HOST}"}).status_code == 200
    assert client.get("/", headers={"Origin": f"http://{HOST}:80"}).status_code == 200


@pytest.mark.parametrize("origin", ["http://127.0.0.1:9999", "http://127.0.0.1", "https://127.0.0.1:8765", "null"])
def test_an_origin_on_another_port_or_scheme_is_refused(store: MemoryManager, origin: str) -> None:
    app = build_app(store, TOKEN)
    with TestClient(app, base_url="http://127.0.0.1:8765", headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        assert c.get("/", headers={"Origin": "http://127.0.0.1:8765"}).status_code == 200
        answer = c.get("/", headers={"Origin": origin})
        assert answer.status_code == 403 and "another port" in answer.text
        assert answer.headers["x-frame-options"] == "DENY"


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


def test_every_answer_carries_the_security_headers(
    anonymous: TestClient, client: TestClient, store: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refusals, errors and pages alike: 200, 303, 400, 401, 403 (Origin and CSRF), 404 (an unknown
    route and an unknown memory), 421, 500 and 503."""
    memory_id = store.store("keep me", type="knowledge")
    csrf = _csrf(client.get(f"/memories/{memory_id}").text)
    answers = {
        "200": client.get("/static/dashboard.css"),
        "303": client.post(f"/memories/{memory_id}/bookmark", data={"csrf": csrf}, follow_redirects=False),
        "400": client.get("/memories?page=x"),
        "401": anonymous.get("/"),
        "401 code": anonymous.get("/login?code=nope"),
        "403 origin": client.get("/", headers={"Origin": "http://evil.example"}),
        "403 csrf": client.post(f"/memories/{memory_id}/delete", data={}),
        "404 route": client.get("/no/such/page"),
        "404 memory": client.get("/memories/action_20990101000000000000_deadbeef"),
        "421": client.get("/", headers={"Host": "evil.example"}),
    }  # fmt: skip
    monkeypatch.setattr(store, "stats", lambda: 1 / 0)
    answers["500"] = TestClient(client.app, raise_server_exceptions=False, headers=client.headers).get("/")
    monkeypatch.undo()
    store.close()
    store.engine.disabled_reason = "disabled for this test"
    answers["503"] = client.get("/memories")
    for name, answer in answers.items():
        assert str(answer.status_code) == name.split()[0], (name, answer.status_code, answer.text[:200])
        sent = {(k.encode(), v.encode()) for k, v in answer.headers.multi_items()}
        assert set(SECURITY_HEADERS) <= sent, (name, answer.headers)


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
    row = re.search(r"<code>search.candidates</code></td><td[^>]*><code>([^<]*)</code></td><td[^>]*>([^<]*)<", page)
    assert row and row.group(2) == "environment (REMINDFUL_*)"
    row = re.search(
        r"<code>retention.default_retention_days</code></td><td[^>]*><code>[^<]*</code></td><td[^>]*>([^<]*)<", page
    )
    assert row and row.group(1).startswith("config file")
    row = re.search(r"<code>storage.max_size_mb</code></td><td[^>]*><code>[^<]*</code></td><td[^>]*>([^<]*)<", page)
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


# -- pages a browser without a session gets (issue 35) ------------------------------------------

BROWSER_ACCEPT = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def _csp_hashes(csp: str, directive: str) -> set[str]:
    part = next(p.strip() for p in csp.split(";") if p.strip().startswith(directive))
    return {token.strip("'") for token in part.split()[1:] if token.startswith("'sha256-")}


def _inline(html: str, tag: str) -> list[str]:
    return re.findall(rf"<{tag}>(.*?)</{tag}>", html, flags=re.S)


def _sha(text: str) -> str:
    import base64
    import hashlib

    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


@pytest.mark.parametrize("path", ["/", "/memories", "/s/" + "A" * 24 + "/"])
def test_a_browser_without_a_session_gets_a_styled_sign_in_page(anonymous: TestClient, path: str) -> None:
    """Not the plain-text 401 an API client gets: a page saying how to get a link, whose inline style
    and script are the only ones its Content-Security-Policy allows."""
    answer = anonymous.get(path, headers=BROWSER_ACCEPT)
    assert answer.status_code == 401 and answer.headers["content-type"].startswith("text/html")
    assert answer.headers["www-authenticate"] == 'Bearer realm="remindful"'
    assert "Sign in to the remindful dashboard" in answer.text
    assert "<code>remindful dashboard</code>" in answer.text and "press <b>Enter</b>" in answer.text
    csp = answer.headers["content-security-policy"]
    assert csp.count("content-security-policy") == 0 and "default-src 'none'" in csp
    (style,), (script,) = _inline(answer.text, "style"), _inline(answer.text, "script")
    assert _csp_hashes(csp, "style-src") == {_sha(style)} and _csp_hashes(csp, "script-src") == {_sha(script)}
    assert "remindful.home" in script and TOKEN not in answer.text
    assert answer.headers["x-frame-options"] == "DENY"
    # An API client still gets the one plain line every surface answers.
    assert anonymous.get(path).headers["content-type"].startswith("text/plain")


def test_a_used_link_in_a_browser_gets_a_page_and_the_signed_in_page_is_styled(store: MemoryManager) -> None:
    gate = build_app(store, TOKEN, hosts=[HOST])
    browser = TestClient(gate, follow_redirects=False, headers=BROWSER_ACCEPT)
    assert gate.sign_ins is not None
    code = gate.sign_ins.new_code()
    signed = browser.get(f"/login?code={code}")
    assert signed.status_code == 200 and "<h1>Signed in</h1>" in signed.text
    (style,) = _inline(signed.text, "style")
    assert _csp_hashes(signed.headers["content-security-policy"], "style-src") == {_sha(style)}
    root = next(a.strip().removeprefix("Path=") for a in signed.headers["set-cookie"].split(";") if "Path=" in a)
    assert f'content="0;url={root}/"' in signed.text and f'href="{root}/"' in signed.text
    again = browser.get(f"/login?code={code}")
    assert again.status_code == 401 and "has been used or has expired" in again.text
    assert "press <b>Enter</b>" in again.text and "set-cookie" not in again.headers


def test_dashboard_pages_name_their_session_root_for_the_bookmark(store: MemoryManager) -> None:
    gate = build_app(store, TOKEN, hosts=[HOST])
    browser = TestClient(gate, follow_redirects=False)
    root, cookie = _sign_in(gate, browser)
    page = browser.get(root + "/", headers={"Cookie": cookie})
    assert f'<body data-root="{root}">' in page.text


def test_overview_links_stay_under_the_session_root_and_numbers_read_well(store: MemoryManager) -> None:
    """Issue 32: the injections-by-session links lacked the ``/s/…`` prefix (401); issue 35:
    ``164.612 ms``, ``1 searches``, ``1 memories``."""
    from remindful.services.context import hook_request

    store.store("The deploy script picks the region from DEPLOY_REGION", type="knowledge", session_id="sess-1")
    asked = hook_request("UserPromptSubmit", {"session_id": "sess-1", "prompt": "deploy script region"}, None)
    assert store.hook_context(asked).text  # one search
    gate = build_app(store, TOKEN, hosts=[HOST])
    browser = TestClient(gate, follow_redirects=False)
    root, cookie = _sign_in(gate, browser)
    page = browser.get(root + "/", headers={"Cookie": cookie}).text
    session_links = re.findall(r'href="([^"]*/sessions/sess-1)"', page)
    assert session_links == [f"{root}/sessions/sess-1"]
    assert browser.get(session_links[0], headers={"Cookie": cookie}).status_code == 200
    assert "1 search<" in page and "1 searches" not in page
    p50 = re.search(r'id="search-p50">([^<]*)<', page)
    assert p50 and re.fullmatch(r"\d+(\.\d{1,2})? ms|\d+(\.\d)? s", p50.group(1)), p50
    assert "10,000" in page and "1 memories" not in page and "True" not in page


def test_settings_are_grouped_by_section_with_sources_and_booleans_as_in_the_file(client: TestClient) -> None:
    page = client.get("/settings").text
    sections = re.findall(r'<section class="settings-section" id="section-([a-z_]+)">', page)
    assert sections[0] == "general" and "embeddings" in sections and len(sections) == len(set(sections)) > 5
    embeddings = page.split('id="section-embeddings"', 1)[1].split("</section>", 1)[0]
    assert "<code>embeddings.backend</code>" in embeddings and "<code>hooks." not in embeddings
    values = re.findall(r'<td class="value"><code>([^<]*)</code>', page)
    assert "true" in values and "false" in values
    assert "True" not in values and "False" not in values
    assert re.search(r"<td>(default|config file[^<]*|environment[^<]*)</td>", page)


def test_sessions_name_their_project(store: MemoryManager, client: TestClient) -> None:
    store.work_in(str(Path(store.path).parent), reads="all")
    store.store("ran the build", type="action", session_id="s-project")
    listing = client.get("/sessions").text
    row = next(r for r in listing.split("<tr>") if "/sessions/s-project" in r)
    project = re.search(r'<td class="project"><a [^>]*>([^<]+)</a>', row)
    assert project and project.group(1) not in ("", "unscoped"), row
    assert project.group(1) in client.get("/sessions/s-project").text


def test_latency_and_cache_cards_count_the_searches_of_other_processes(tmp_path: Path) -> None:
    """Issue 35: the cards said "no search in this process yet" after searches were made: the
    dashboard's process is not the one that searched. The searches of another opening of the store
    (another process, as the MCP server is) are counted by the store."""
    path = tmp_path / "shared"
    with open_fake(path) as searcher:
        searcher.store("The deploy script needs AWS_PROFILE=prod", type="knowledge")
        for query in ("deploy script", "AWS profile", "deploy script", "nothing like it at all"):
            searcher.search(query)
    with open_fake(path) as dashboard_side:
        figures = (dashboard_side.stats().performance or {})["store"]
        assert figures["searches"] == 4 and figures["p50_search_ms"] > 0
        assert figures["embedding_cache"]["hits"] + figures["embedding_cache"]["misses"] >= 3
        page = TestClient(build_app(dashboard_side, TOKEN, hosts=[HOST]), headers={"Authorization": f"Bearer {TOKEN}"})
        html = page.get("/").text
    assert "4 searches" in html and "no search" not in html
    assert re.search(r'id="cache-rate">\d+%<', html)
    assert "perf." not in html  # the counters are not capture counts
