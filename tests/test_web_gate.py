"""The pieces of the HTTP gate one by one: what counts as the same origin (scheme, host and port),
which Host headers are well formed, which redirect targets stay on the server, and the dashboard's
one-time codes and browser sessions (:mod:`remindful.web.signin`). The gate as a whole runs in
test_dashboard.py, test_http_surfaces.py and test_dashboard_browser.py."""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

import pytest

from remindful.web.app import local_target
from remindful.web.gate import parse_host, same_origin
from remindful.web.signin import SESSION_ROOT, SignIns, cookie_name, session_segment


@pytest.mark.parametrize(
    ("origin", "host", "same"),
    [
        ("http://127.0.0.1:8765", "127.0.0.1:8765", True),
        ("HTTP://LOCALHOST:8765", "localhost:8765", True),
        ("http://[::1]:8765", "[::1]:8765", True),
        ("http://127.0.0.1", "127.0.0.1", True),
        ("http://127.0.0.1:80", "127.0.0.1", True),  # the default port, said or not
        ("http://127.0.0.1", "127.0.0.1:80", True),
        ("http://127.0.0.1:9999", "127.0.0.1:8765", False),  # another server on this machine
        ("http://127.0.0.1", "127.0.0.1:8765", False),
        ("http://127.0.0.1:8765", "127.0.0.1", False),
        ("https://127.0.0.1:8765", "127.0.0.1:8765", False),  # another scheme
        ("http://localhost:8765", "127.0.0.1:8765", False),  # another host name is another origin
        ("http://evil.example:8765", "127.0.0.1:8765", False),
        ("http://127.0.0.1:8765.evil.example", "127.0.0.1:8765", False),
        ("http://127.0.0.1:8765/", "127.0.0.1:8765", False),  # an Origin has no path
        ("http://user@127.0.0.1:8765", "127.0.0.1:8765", False),
        ("null", "127.0.0.1:8765", False),
        ("", "127.0.0.1:8765", False),
        ("http://127.0.0.1:8765", "", False),
    ],
)
def test_same_origin_compares_scheme_host_and_port(origin: str, host: str, same: bool) -> None:
    assert same_origin(origin, host) is same


def test_an_https_request_is_its_own_origin() -> None:
    assert same_origin("https://example.com", "example.com", "https")
    assert not same_origin("http://example.com", "example.com", "https")


@pytest.mark.parametrize(
    ("host", "parsed"),
    [
        ("127.0.0.1:8765", ("127.0.0.1", 8765)),
        ("LocalHost", ("localhost", 80)),
        ("[::1]:8000", ("::1", 8000)),
        ("[::1]", ("::1", 80)),
        ("127.0.0.1:8080.evil", None),
        ("evil@127.0.0.1", None),
        ("127.0.0.1:", None),
        ("127.0.0.1/x", None),
        ("", None),
    ],
)
def test_parse_host(host: str, parsed: tuple[str, int] | None) -> None:
    assert parse_host(host) == parsed


HOSTILE = [
    "//evil.example",
    "//evil.example/?token=x",
    "/\\evil.example",
    "\\\\evil.example",
    "/\\/evil.example",
    "https://evil.example/",
    "http:evil.example",
    "javascript:alert(1)",
    "evil.example",
    "/\t/evil.example",
    "/\n/evil.example",
    "//%2F%2Fevil.example",
    "",
]


@pytest.mark.parametrize("target", HOSTILE)
def test_a_redirect_target_never_leaves_the_server(target: str) -> None:
    kept = local_target(target)
    assert kept.startswith("/") and not kept.startswith("//") and "\\" not in kept
    # As a browser would read it (WHATWG URL: a backslash is a slash in http URLs).
    resolved = urljoin("http://127.0.0.1:8765/s/abc/", kept.replace("\\", "/"))
    assert urlsplit(resolved).netloc == "127.0.0.1:8765", (target, kept, resolved)


@pytest.mark.parametrize(
    "target", ["/", "/memories/action_1", "/memories?deleted=x", "/sessions/a%2F%2Fb?resumed=1", "/%2F%2Fevil.example"]
)
def test_a_path_of_the_server_is_kept(target: str) -> None:
    assert local_target(target) == target  # %2F inside a path is not a slash to a browser


def test_a_code_works_once() -> None:
    sign_ins = SignIns()
    code = sign_ins.new_code()
    first = sign_ins.redeem(code)
    assert first is not None
    session_id, session = first
    assert sign_ins.redeem(code) is None
    assert sign_ins.find(session_id) == session
    assert session.root.startswith(SESSION_ROOT) and session_segment(session.root + "/memories") == session.root
    assert sign_ins.redeem("") is None and sign_ins.redeem("not-a-code") is None
    assert sign_ins.find("") is None and sign_ins.find(code) is None


def test_codes_and_sessions_are_unguessable_and_distinct() -> None:
    sign_ins = SignIns()
    codes = {sign_ins.new_code() for _ in range(20)}
    assert len(codes) == 20 and all(len(c) >= 40 for c in codes)
    sessions = [sign_ins.redeem(c) for c in codes]
    assert all(s is not None for s in sessions)
    ids = {s[0] for s in sessions if s}
    roots = {s[1].root for s in sessions if s}
    assert len(ids) == len(roots) == 20 and not ids & codes


def test_an_expired_code_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    sign_ins = SignIns(code_ttl_s=60)
    code = sign_ins.new_code()
    later = iter([10**9])
    monkeypatch.setattr("remindful.web.signin.time.monotonic", lambda: next(later))
    assert sign_ins.redeem(code) is None


@pytest.mark.parametrize("path", ["/", "/s/", "/s/short", "/s/" + "a" * 24 + "!", "/x/s/" + "a" * 24, "/s/" + "a" * 65])
def test_session_segment_needs_a_well_formed_prefix(path: str) -> None:
    assert session_segment(path) is None


def test_cookie_name_carries_the_port() -> None:
    assert cookie_name(8765) == "remindful_session_8765" != cookie_name(8766)
