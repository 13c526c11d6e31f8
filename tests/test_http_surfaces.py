"""Every HTTP surface (the MCP server's streamable HTTP, the daemon's loopback API, the dashboard)
in-process: one gate refuses a request without the token with the same answer everywhere, and one
mapping (:func:`remindful.errors.http_status`) gives the status of every error of the tree."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from remindful import errors
from remindful.api import MemoryManager
from remindful.daemon import DaemonHandle
from remindful.errors import RemindfulError, http_status
from remindful.shells.mcp.server import build_server, http_app
from remindful.testing import open_fake
from remindful.web import build_app
from remindful.web.gate import SECURITY_HEADERS, UNAUTHORIZED

TOKEN = "surface-token-0123456789"
BASE = "http://127.0.0.1:8765"


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[MemoryManager]:
    with open_fake(tmp_path / "store") as manager:
        yield manager


def daemon_app(memory: MemoryManager) -> Any:
    handle = DaemonHandle(memory, None, http=True)  # not started: only its app is used
    handle.token = TOKEN
    return handle.app()


@pytest.fixture
def surfaces(memory: MemoryManager) -> dict[str, TestClient]:
    """Each surface's app as its server builds it, and a path that needs the token."""
    apps = {
        "mcp": http_app(build_server(lambda: memory), TOKEN, port=8765),
        "daemon": daemon_app(memory),
        "dashboard": build_app(memory, TOKEN),
    }
    return {name: TestClient(app, base_url=BASE, follow_redirects=False) for name, app in apps.items()}


PATHS = {"mcp": "/mcp", "daemon": "/health", "dashboard": "/memories"}
REFUSED_HEADERS: list[dict[str, str]] = [
    {},
    {"Authorization": "Bearer not-the-token"},
    {"Authorization": f"Bearer {TOKEN}x"},
    {"Authorization": f"Basic {TOKEN}"},
    {"Authorization": TOKEN},
]


def answer(client: TestClient, method: str, path: str, headers: dict[str, str] | list[tuple[str, str]]) -> Any:
    response = client.request(method, path, headers=headers)
    return response.status_code, sorted(response.headers.multi_items()), response.content


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
def test_every_surface_refuses_without_the_token_with_the_same_answer(
    surfaces: dict[str, TestClient], method: str
) -> None:
    for headers in REFUSED_HEADERS:
        seen = {name: answer(client, method, PATHS[name], headers) for name, client in surfaces.items()}
        assert seen["mcp"] == seen["daemon"] == seen["dashboard"], (headers, seen)
        status, sent, body = seen["mcp"]
        assert (status, body) == (401, UNAUTHORIZED.encode())
        assert ("www-authenticate", 'Bearer realm="remindful"') in sent
        assert {(k.decode(), v.decode()) for k, v in SECURITY_HEADERS} <= set(sent)


def test_two_authorization_headers_are_refused_everywhere(surfaces: dict[str, TestClient]) -> None:
    """Which one would count? Neither: a proxy and the server might disagree."""
    twice = [("Authorization", f"Bearer {TOKEN}"), ("Authorization", f"Bearer {TOKEN}")]
    for name, client in surfaces.items():
        assert answer(client, "GET", PATHS[name], twice)[0] == 401, name


def test_the_token_opens_every_surface(surfaces: dict[str, TestClient]) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert surfaces["daemon"].get("/health", headers=bearer).status_code == 200
    assert surfaces["daemon"].get("/memories", headers=bearer).status_code == 200  # the dashboard it serves
    assert surfaces["dashboard"].get("/memories", headers=bearer).status_code == 200
    with surfaces["mcp"] as mcp:  # the SDK's app needs its lifespan to answer
        # A bare GET is answered by the SDK itself (past the gate): anything but the gate's 401.
        assert mcp.get("/mcp", headers=bearer).status_code not in (401, 500)


def test_the_daemon_checks_host_and_origin_like_the_dashboard(surfaces: dict[str, TestClient]) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    daemon = surfaces["daemon"]
    assert daemon.post("/context", json={"query": "x"}, headers={**bearer, "Host": "evil.example"}).status_code == 421
    assert daemon.get("/health", headers={**bearer, "Origin": "http://evil.example"}).status_code == 403


# -- one error -> status mapping ------------------------------------------------------------------

#: One instance of every error class, with the status the tree in errors.py draws for it.
ERRORS: dict[type[RemindfulError], tuple[Callable[[], RemindfulError], int]] = {
    errors.RemindfulError: (lambda: errors.RemindfulError("boom"), 500),
    errors.ConfigError: (lambda: errors.ConfigError("search.limit", "expected a number"), 500),
    errors.StorageError: (lambda: errors.StorageError("cannot write"), 500),
    errors.StorageFullError: (lambda: errors.StorageFullError(), 507),
    errors.StorageLockedError: (lambda: errors.StorageLockedError("locked"), 503),
    errors.CorruptionError: (lambda: errors.CorruptionError("damaged"), 500),
    errors.NotFoundError: (lambda: errors.NotFoundError("action_x"), 404),
    errors.ValidationError: (lambda: errors.ValidationError("query", "expected text"), 400),
    errors.StaleVersionError: (lambda: errors.StaleVersionError("knowledge_x", 2, 1), 409),
    errors.EmbedderError: (lambda: errors.EmbedderError("no model"), 500),
    errors.DependencyMissingError: (lambda: errors.DependencyMissingError("torch", "st"), 500),
    errors.MemoryDisabledError: (lambda: errors.MemoryDisabledError("off in config"), 503),
    errors.UntrustedPathError: (lambda: errors.UntrustedPathError("config /x is writable by others"), 500),
    errors.AccessDeniedError: (lambda: errors.AccessDeniedError("this store has a team: set catalog.token"), 403),
}


def error_tree() -> set[type[RemindfulError]]:
    """RemindfulError and every subclass imported so far, wherever it is defined."""
    found: set[type[RemindfulError]] = set()
    todo: list[type[RemindfulError]] = [RemindfulError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_every_error_of_the_tree_has_a_status() -> None:
    from remindful.services.learning.llm import LLMError  # a service's own error, under the tree

    tree = error_tree()
    drawn = {cls for cls in tree if cls.__module__ == "remindful.errors"}
    assert drawn == set(ERRORS), "a new error class in errors.py: give it a status here and in errors.py"
    for cls, (make, status) in ERRORS.items():
        assert type(make()) is cls and http_status(make()) == status, cls
    assert LLMError in tree and http_status(LLMError("unreachable")) == 500  # its nearest ancestor's
    assert http_status(ValueError("not ours")) == 500


@pytest.mark.parametrize("cls", list(ERRORS), ids=lambda cls: cls.__name__)
def test_the_dashboard_and_the_daemon_answer_the_mapped_status(
    memory: MemoryManager, monkeypatch: pytest.MonkeyPatch, cls: type[RemindfulError]
) -> None:
    make, status = ERRORS[cls]

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise make()

    monkeypatch.setattr(memory, "get", fail)
    monkeypatch.setattr(memory, "context", fail)
    monkeypatch.setattr(memory, "hook_context", fail)  # the daemon's /context answers a hook's request
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    dashboard = TestClient(build_app(memory, TOKEN), base_url=BASE, headers=bearer)
    daemon = TestClient(daemon_app(memory), base_url=BASE, headers=bearer)
    page = dashboard.get("/memories/action_x")
    assert page.status_code == status and f"Error {status}" in page.text
    assert daemon.get("/memories/action_x").status_code == status  # the dashboard the daemon serves
    context = daemon.post("/context", json={"query": "anything"})
    assert context.status_code == status
    assert context.json() == {"success": False, "error": str(make())}


# -- browsers ---------------------------------------------------------------------------------------


def test_a_browser_signs_in_to_the_daemons_dashboard_with_a_code_a_token_holder_draws(
    surfaces: dict[str, TestClient],
) -> None:
    daemon = surfaces["daemon"]
    drawn = daemon.post("/login", headers={"Authorization": f"Bearer {TOKEN}"})
    assert drawn.status_code == 200
    url = drawn.json()["url"]
    assert url.startswith(f"{BASE}/login?code=")
    signed_in = daemon.get(url)
    assert signed_in.status_code == 200
    cookie = signed_in.headers["set-cookie"]
    name_value = cookie.split(";", 1)[0]
    root = next(p.strip()[5:] for p in cookie.split(";") if p.strip().startswith("Path="))
    assert name_value.startswith("remindful_session_8765=") and TOKEN not in cookie
    page = daemon.get(root + "/memories", headers={"Cookie": name_value})
    assert page.status_code == 200 and f'href="{root}/sessions"' in page.text
    # A cookie of the same name that another server on this host set (Path=/) does not get in the way.
    tossed = daemon.get(root + "/memories", headers={"Cookie": f"remindful_session_8765=planted; {name_value}"})
    assert tossed.status_code == 200
    assert daemon.get(root + "/memories", headers={"Cookie": "remindful_session_8765=planted"}).status_code == 401
    # The session is the dashboard's: the MCP surface does not know it.
    assert surfaces["mcp"].get(root + "/mcp", headers={"Cookie": name_value}).status_code == 401
    assert surfaces["mcp"].post("/login", headers={"Authorization": f"Bearer {TOKEN}"}).status_code != 200


def test_every_surface_puts_the_security_headers_on_every_answer(surfaces: dict[str, TestClient]) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    expected = {(k.decode(), v.decode()) for k, v in SECURITY_HEADERS}
    with surfaces["mcp"] as mcp:
        answers = [
            mcp.get("/nowhere", headers=bearer),  # the SDK's own 404
            mcp.post("/mcp", headers={**bearer, "Origin": "http://evil.example"}, json={}),  # the SDK's 403
            mcp.post("/mcp", headers={**bearer, "Host": "evil.example"}, json={}),  # the SDK's 421
            surfaces["daemon"].get("/health", headers=bearer),
            surfaces["daemon"].post("/context", headers=bearer, content=b"not json"),
            surfaces["daemon"].get("/health", headers={**bearer, "Origin": "http://127.0.0.1:9999"}),
        ]
        statuses = [a.status_code for a in answers]
        assert statuses == [404, 403, 421, 200, 400, 403]
        for answer in answers:
            assert expected <= set(answer.headers.multi_items()), answer
