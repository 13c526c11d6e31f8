"""The one gate in front of every HTTP surface: the MCP server's streamable HTTP, the daemon's
loopback API and the dashboard.

Every request needs the store's bearer token (:mod:`remindful.services.access`), compared in
constant time. Without it, every surface gives the same answer: 401, :data:`UNAUTHORIZED` as
text, ``WWW-Authenticate: Bearer realm="remindful"`` and :data:`SECURITY_HEADERS` (a websocket is
closed with code 1008). The token is taken from:

- exactly one ``Authorization: Bearer <token>`` header (two are refused: which one would count?);
- with ``browser=True`` (the dashboard, and the daemon that serves it), also the ``remindful_token``
  cookie, HttpOnly and SameSite=Strict, and ``?token=<token>`` in the URL of a GET, once: the
  answer sets the cookie and redirects to the same URL without the token, so it leaves the address
  bar and the history at once.

With ``hosts`` (a server whose Host checks are not done by an SDK), the ``Host`` header must name
one of them (421 otherwise: DNS rebinding), and a request that says where it comes from
(``Origin``) must come from one of them (403); these are checked before the token. The MCP server
leaves them to the SDK's transport security, after the token.

The dashboard's forms also carry a CSRF token (:class:`CsrfTokens`): an HMAC of a secret drawn
when the app is built, which a page of another site can neither read nor guess.

Standard library only (plus :mod:`remindful.services.access`): a raw ASGI middleware.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from remindful.services.access import bearer_ok

COOKIE = "remindful_token"
CSRF_FIELD = "csrf"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
#: The body of every 401, on every surface.
UNAUTHORIZED = (
    "Unauthorized: send 'Authorization: Bearer <token>' with the store's HTTP token "
    "(see `remindful token`), or open the URL that `remindful dashboard` prints (it carries the token once)\n"
)
#: What every answer of a browser surface, and every refusal of the gate, carries: no framing, no
#: referrer to other sites (URLs name memories), no caching of private pages, only the dashboard's
#: own scripts and styles.
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


class CsrfTokens:
    """The CSRF token of one app: ``value`` goes into every form, :meth:`ok` checks a submitted one."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)
        self.value = hmac.new(self._secret, b"remindful dashboard csrf", hashlib.sha256).hexdigest()

    def ok(self, submitted: str | None) -> bool:
        return bool(submitted) and hmac.compare_digest(str(submitted).encode(), self.value.encode())


def host_name(value: str) -> str:
    """The host part of a ``Host`` header or of a URL's netloc (``[::1]:8000`` -> ``::1``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class BearerGate:
    """ASGI middleware: the checks in the module docstring, in front of ``app``.

    ``hosts``: the names a client may use for the server (None: not checked here). ``browser``:
    the cookie and the one-time ``?token=`` URL are accepted too, and every answer carries
    :data:`SECURITY_HEADERS`."""

    def __init__(self, app: Any, token: str, *, hosts: Iterable[str] | None = None, browser: bool = False) -> None:
        self.app = app
        self.token = token
        self.hosts = None if hosts is None else {h.lower().strip("[]") for h in hosts}
        self.browser = browser

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)  # lifespan
            return
        headers = _headers(scope)
        refusal = self._misdirected(headers)
        if refusal is None and self._authorized(headers):
            await self.app(scope, receive, _with_headers(send, SECURITY_HEADERS) if self.browser else send)
            return
        if kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if refusal is not None:
            await _plain(send, *refusal)
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        given = query.pop("token", None)
        if self.browser and scope["method"] in ("GET", "HEAD") and given and bearer_ok(f"Bearer {given}", self.token):
            await self._set_cookie_and_redirect(scope, query, send)
            return
        await _plain(send, 401, UNAUTHORIZED, [_CHALLENGE])

    def _misdirected(self, headers: dict[str, list[str]]) -> tuple[int, str] | None:
        """(status, text) when ``Host`` or ``Origin`` names another server; None when they are fine."""
        if self.hosts is None:
            return None
        if host_name(_first(headers, "host")) not in self.hosts:
            return 421, "Misdirected request: this server answers only to its own address\n"
        origin = headers.get("origin")
        if origin is not None and not self._own_origin(origin[0]):
            return 403, "Forbidden: the request comes from another site\n"
        return None

    def _authorized(self, headers: dict[str, list[str]]) -> bool:
        given = headers.get("authorization", [])
        if len(given) == 1 and bearer_ok(given[0], self.token):
            return True
        return self.browser and not given and self._cookie(_first(headers, "cookie"))

    def _cookie(self, raw: str) -> bool:
        if not raw:
            return False
        cookie: SimpleCookie = SimpleCookie()
        try:
            cookie.load(raw)
        except Exception:  # a malformed Cookie header is no cookie
            return False
        morsel = cookie.get(COOKIE)
        return morsel is not None and bearer_ok(f"Bearer {morsel.value}", self.token)

    def _own_origin(self, origin: str) -> bool:
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and self.hosts is not None and host_name(parts.netloc) in self.hosts

    async def _set_cookie_and_redirect(self, scope: Any, query: dict[str, str], send: Any) -> None:
        target = scope.get("root_path", "") + scope["path"]
        if query:
            target += "?" + urlencode(query)
        cookie = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
        headers = [(b"location", target.encode("latin-1")), (b"set-cookie", cookie.encode("latin-1"))]
        await _plain(send, 303, "", headers)


def _headers(scope: Any) -> dict[str, list[str]]:
    """The request's headers by lower-case name, every value of a repeated one in order."""
    out: dict[str, list[str]] = {}
    for key, value in scope["headers"]:
        out.setdefault(key.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return out


def _first(headers: dict[str, list[str]], name: str) -> str:
    return headers.get(name, [""])[0]


def _with_headers(send: Any, extra: list[tuple[bytes, bytes]]) -> Any:
    async def wrapped(message: Any) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return wrapped


async def _plain(send: Any, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """An answer of the gate itself: ``text``, with :data:`SECURITY_HEADERS` whatever the surface."""
    body = text.encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
        *SECURITY_HEADERS,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = [
    "COOKIE",
    "CSRF_FIELD",
    "LOOPBACK_NAMES",
    "SECURITY_HEADERS",
    "UNAUTHORIZED",
    "BearerGate",
    "CsrfTokens",
    "host_name",
]
