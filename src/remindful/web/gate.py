"""The one gate in front of every HTTP surface: the MCP server's streamable HTTP, the daemon's
loopback API and the dashboard.

Every request needs the store's bearer token (:mod:`remindful.services.access`), compared in
constant time, in exactly one ``Authorization: Bearer <token>`` header (two are refused: which one
would count?). Without it, every surface gives the same answer: 401, :data:`UNAUTHORIZED` as text,
``WWW-Authenticate: Bearer realm="remindful"`` (a websocket is closed with code 1008).

With ``browser=True`` (the dashboard, and the daemon that serves it) a browser may come in without
the token, as one signed-in browser session (:mod:`remindful.web.signin`): ``GET /login?code=…``
spends a one-time code and answers a page that sets the session's cookie and goes on to the
session's own path prefix ``/s/<random>``; under that prefix the cookie stands for the token, and
the app below sees the prefix as its ``root_path``. ``POST /login`` with the token draws a code. The
store's token never reaches a browser, a URL or a cookie. A browser's page request without a
session gets the sign-in page (:mod:`remindful.web.signin_pages`, still 401), whose script takes a
browser signed in here to its dashboard: that is how ``/`` works as a bookmark.

With ``hosts`` (a server whose Host checks are not done by an SDK), ``Host`` must be one of those
names with a port (421 otherwise: DNS rebinding), and a request that says where it comes from
(``Origin``) must come from the very origin it was sent to: same scheme, host and port as its
``Host`` (403 otherwise: another server on 127.0.0.1, whatever its port, is another site). These
are checked before the token. The MCP server leaves them to the SDK's transport security.

Every answer of every surface, the gate's refusals and the app's own pages and errors alike,
carries :data:`SECURITY_HEADERS` (those the app did not set itself).

The dashboard's forms also carry a CSRF token (:class:`CsrfTokens`): an HMAC of a secret drawn
when the app is built, which a page of another site can neither read nor guess.

Standard library only (plus :mod:`remindful.services.access`): a raw ASGI middleware.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl

from remindful.services.access import bearer_ok
from remindful.web.signin import LOGIN_PATH, SignIns, cookie_name, session_segment
from remindful.web.signin_pages import code_refused_page, page_csp, sign_in_page, signed_in_page

log = logging.getLogger("remindful")

CSRF_FIELD = "csrf"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
#: The body of every 401 for a missing or wrong token, on every surface.
UNAUTHORIZED = (
    "Unauthorized: send 'Authorization: Bearer <token>' with the store's HTTP token "
    "(see `remindful token`), or open the sign-in link that `remindful dashboard` prints\n"
)
#: The body of the 401 for a sign-in code that is unknown, spent or expired.
CODE_REFUSED = (
    "This sign-in link was used already or has expired (each works once, for two minutes): "
    "press Enter where `remindful dashboard` runs, or start it again, for a new one\n"
)
#: What every answer carries: no framing, no referrer to other origins (URLs name memories and the
#: session's path), no caching, only the dashboard's own scripts and styles. ``same-origin`` and not
#: ``no-referrer``: under ``no-referrer`` a browser sends ``Origin: null`` with a same-origin form
#: POST (the Fetch standard's origin serialisation), which the Origin check must refuse.
SECURITY_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        b"frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
]
_CHALLENGE = (b"www-authenticate", b'Bearer realm="remindful"')
_HOST = r"(\[[0-9a-f:.]+\]|[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)"
_HOST_HEADER = re.compile(_HOST + r"(?::(\d{1,5}))?")
_ORIGIN = re.compile(r"(https?)://" + _HOST + r"(?::(\d{1,5}))?")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class CsrfTokens:
    """The CSRF token of one app: ``value`` goes into every form, :meth:`ok` checks a submitted one."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)
        self.value = hmac.new(self._secret, b"remindful dashboard csrf", hashlib.sha256).hexdigest()

    def ok(self, submitted: str | None) -> bool:
        return bool(submitted) and hmac.compare_digest(str(submitted).encode(), self.value.encode())


def parse_host(value: str, scheme: str = "http") -> tuple[str, int] | None:
    """``(name, port)`` of a ``Host`` header (``[::1]:8000`` -> ``("::1", 8000)``; no port: the
    scheme's default), or None when it is not a bare name or address with an optional port."""
    found = _HOST_HEADER.fullmatch(value.strip().lower())
    if found is None:
        return None
    port = int(found.group(2)) if found.group(2) else _DEFAULT_PORTS.get(scheme, 80)
    return found.group(1).strip("[]"), port


def same_origin(origin: str, host: str, scheme: str = "http") -> bool:
    """Whether an ``Origin`` header names the origin a request was sent to, ``scheme`` plus its
    ``Host`` header: scheme, host and port all equal (``null`` and anything malformed: False)."""
    found = _ORIGIN.fullmatch(origin.strip().lower())
    target = parse_host(host, scheme)
    if found is None or target is None:
        return False
    origin_scheme, name, port = found.group(1), found.group(2).strip("[]"), found.group(3)
    return (origin_scheme, name, int(port) if port else _DEFAULT_PORTS[origin_scheme]) == (scheme, *target)


class BearerGate:
    """ASGI middleware: the checks in the module docstring, in front of ``app``.

    ``hosts``: the names a client may use for the server (None: not checked here). ``browser``:
    browsers may sign in with one-time codes (:attr:`sign_ins` draws them)."""

    def __init__(self, app: Any, token: str, *, hosts: Iterable[str] | None = None, browser: bool = False) -> None:
        self.app = app
        self.token = token
        self.hosts = None if hosts is None else {h.lower().strip("[]") for h in hosts}
        self.sign_ins = SignIns() if browser else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)  # lifespan
            return
        headers = _headers(scope)
        refusal = self._misdirected(scope, headers)
        if refusal is not None:
            await self._refuse(scope, send, *refusal)
            return
        path = _relative_path(scope)
        method = scope.get("method", "")
        given = headers.get("authorization", [])
        if given:  # a token was sent: it alone counts, even where a cookie would do
            if len(given) != 1 or not bearer_ok(given[0], self.token):
                await self._refuse(scope, send, 401, UNAUTHORIZED, [_CHALLENGE])
            elif self.sign_ins is not None and path == LOGIN_PATH and method == "POST":
                await self._draw_code(scope, headers, send)
            else:
                await self._serve(scope, receive, send)
            return
        if self.sign_ins is not None:
            if path == LOGIN_PATH and method == "GET":
                await self._sign_in(scope, headers, send)
                return
            root = self._session_root(scope, headers, path)
            if root is not None:
                inner = {**scope, "root_path": scope.get("root_path", "") + root}
                await self._serve(inner, receive, send)
                return
            if _browser_page(scope, headers):
                await _page(send, 401, sign_in_page(), script=True, extra=[_CHALLENGE])
                return
        await self._refuse(scope, send, 401, UNAUTHORIZED, [_CHALLENGE])

    def _misdirected(self, scope: Any, headers: dict[str, list[str]]) -> tuple[int, str] | None:
        """(status, text) when ``Host`` or ``Origin`` names another server; None when they are fine."""
        if self.hosts is None:
            return None
        host = _first(headers, "host")
        parsed = parse_host(host, scope.get("scheme", "http"))
        if parsed is None or parsed[0] not in self.hosts or len(headers.get("host", [])) > 1:
            return 421, "Misdirected request: this server answers only to its own address\n"
        origin = headers.get("origin")
        if origin is not None and (len(origin) > 1 or not same_origin(origin[0], host, _http_scheme(scope))):
            return 403, "Forbidden: the request comes from another origin (another site or another port)\n"
        return None

    def _session_root(self, scope: Any, headers: dict[str, list[str]], path: str) -> str | None:
        """The ``/s/…`` prefix of ``path`` when the request's session cookie opens it; else None.
        Every cookie of the right name is tried: another server on this host may have set one too."""
        root = session_segment(path)
        if root is None or self.sign_ins is None:
            return None
        name = cookie_name(_port(scope, headers))
        for value in _cookies(_first(headers, "cookie"), name):
            session = self.sign_ins.find(value)
            if session is not None and hmac.compare_digest(session.root, root):
                return root
        return None

    async def _sign_in(self, scope: Any, headers: dict[str, list[str]], send: Any) -> None:
        """Spend the ``code`` of the query: 401 when it is no good; else a page that sets the
        session cookie and moves on to the session's dashboard.

        A page, not a redirect: a browser does not send a SameSite=Strict cookie along a redirect
        chain that a page of another site started (the local launch page is a ``file:`` URL); a
        navigation that this page starts is same-site."""
        assert self.sign_ins is not None
        code = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"))).get("code", "")
        redeemed = self.sign_ins.redeem(code)
        if redeemed is None:
            if _browser_page(scope, headers):
                await _page(send, 401, code_refused_page(), script=True, extra=[_CHALLENGE])
            else:
                await self._refuse(scope, send, 401, CODE_REFUSED, [_CHALLENGE])
            return
        session_id, session = redeemed
        root = scope.get("root_path", "") + session.root
        name = cookie_name(_port(scope, headers))
        cookie = f"{name}={session_id}; HttpOnly; SameSite=Strict; Path={root}"
        await _page(send, 200, signed_in_page(root), extra=[(b"set-cookie", cookie.encode("latin-1"))])

    async def _draw_code(self, scope: Any, headers: dict[str, list[str]], send: Any) -> None:
        """``POST /login`` with the token: a new one-time sign-in URL for this server, as JSON."""
        assert self.sign_ins is not None
        code = self.sign_ins.new_code()
        base = f"{_http_scheme(scope)}://{_first(headers, 'host')}{scope.get('root_path', '')}"
        answer = {"url": f"{base}{LOGIN_PATH}?code={code}", "expires_in_s": self.sign_ins.code_ttl_s}
        await _answer(send, 200, json.dumps(answer) + "\n", "application/json")

    async def _serve(self, scope: Any, receive: Any, send: Any) -> None:
        """Run the app; every answer it starts gets :data:`SECURITY_HEADERS`, and one that fails
        before it answers gets a 500 with them (instead of the server's bare one)."""
        started = False

        async def with_headers(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": _add_missing(message.get("headers", []), SECURITY_HEADERS)}
            await send(message)

        try:
            await self.app(scope, receive, with_headers)
        except Exception:
            if not started and scope["type"] == "http":
                await _answer(send, 500, "Internal server error\n")
            raise

    async def _refuse(
        self, scope: Any, send: Any, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            await _answer(send, status, text, extra=extra)


def _browser_page(scope: Any, headers: dict[str, list[str]]) -> bool:
    """Whether a refusal should be a page for a person: a browser's navigation (``GET`` or ``HEAD``
    asking for HTML), not an API client (which gets the plain text every surface answers)."""
    accept = ",".join(headers.get("accept", [])).lower()
    return scope["type"] == "http" and scope.get("method") in ("GET", "HEAD") and "text/html" in accept


async def _page(send: Any, status: int, body: str, *, script: bool = False, extra: list[Any] | None = None) -> None:
    """A page of the gate itself (:mod:`remindful.web.signin_pages`), under its own CSP."""
    csp = [(b"content-security-policy", page_csp(script=script))]
    await _answer(send, status, body, "text/html; charset=utf-8", [*(extra or []), *csp])


def _relative_path(scope: Any) -> str:
    """The request's path below the gate's own ``root_path`` (the gate is usually outermost)."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def _http_scheme(scope: Any) -> str:
    scheme = scope.get("scheme", "http")
    return {"ws": "http", "wss": "https"}.get(scheme, scheme)


def _port(scope: Any, headers: dict[str, list[str]]) -> int:
    """The port the server listens on (its socket's; else the ``Host`` header's)."""
    server = scope.get("server")
    if server and server[1] is not None:
        return int(server[1])
    parsed = parse_host(_first(headers, "host"), _http_scheme(scope))
    return parsed[1] if parsed else 80


def _cookies(raw: str, name: str) -> list[str]:
    """Every value of the cookie ``name`` in a ``Cookie`` header (a browser sends one per path that
    matches; an unparsable pair is skipped)."""
    out = []
    for pair in raw.split(";"):
        key, sep, value = pair.strip().partition("=")
        if sep and key == name:
            out.append(value.strip().strip('"'))
    return out


def _headers(scope: Any) -> dict[str, list[str]]:
    """The request's headers by lower-case name, every value of a repeated one in order."""
    out: dict[str, list[str]] = {}
    for key, value in scope["headers"]:
        out.setdefault(key.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return out


def _first(headers: dict[str, list[str]], name: str) -> str:
    return headers.get(name, [""])[0]


def _add_missing(headers: Iterable[Any], extra: list[tuple[bytes, bytes]]) -> list[Any]:
    headers = list(headers)
    present = {bytes(k).lower() for k, _ in headers}
    return headers + [(k, v) for k, v in extra if k not in present]


async def _answer(
    send: Any,
    status: int,
    text: str,
    content_type: str = "text/plain; charset=utf-8",
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """An answer of the gate itself: ``text``, with :data:`SECURITY_HEADERS`."""
    body = text.encode()
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    headers = _add_missing(headers, SECURITY_HEADERS)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = [
    "CODE_REFUSED",
    "CSRF_FIELD",
    "LOOPBACK_NAMES",
    "SECURITY_HEADERS",
    "UNAUTHORIZED",
    "BearerGate",
    "CsrfTokens",
    "parse_host",
    "same_origin",
]
