"""Who may use the dashboard: the store's bearer token, a cookie carrying it, and a CSRF token.

Every request needs the token (:mod:`remindful.services.access`), in one of three places:

- ``Authorization: Bearer <token>`` (scripts);
- the ``remindful_token`` cookie, HttpOnly and SameSite=Strict (the browser);
- ``?token=<token>`` in the URL of a GET, once: the answer sets the cookie and redirects to the
  same URL without the token, so it leaves the address bar and the history at once.

Anything else gets 401. The ``Host`` header must name this machine (DNS rebinding), and a request
that says where it comes from (``Origin``) must come from the dashboard itself. A state-changing
request (POST) must also carry the CSRF token of this process in its ``csrf`` form field: an HMAC
of a secret drawn when the app is built, which a page of another site can neither read nor guess.
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
#: What every answer carries: no framing, no referrer to other sites (URLs name memories), no caching of
#: private pages, only the dashboard's own scripts and styles.
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


class DashboardGate:
    """ASGI middleware: the checks in the module docstring, in front of ``app``.

    ``hosts`` are the names a browser may use for the server (the loopback names by default; the
    daemon or a ``--host`` bind adds its own)."""

    def __init__(self, app: Any, token: str, *, hosts: Iterable[str] = LOOPBACK_NAMES) -> None:
        self.app = app
        self.token = token
        self.hosts = {h.lower().strip("[]") for h in hosts}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)  # lifespan
            return
        headers = _headers(scope)
        if host_name(headers.get("host", "")) not in self.hosts:
            await _plain(send, 421, "Misdirected request: this dashboard answers only to its own address\n")
            return
        origin = headers.get("origin")
        if origin is not None and not self._own_origin(origin):
            await _plain(send, 403, "Forbidden: the request comes from another site\n")
            return
        if self._bearer(headers) or self._cookie(headers):
            await self.app(scope, receive, _with_headers(send, SECURITY_HEADERS))
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        given = query.pop("token", None)
        if scope["method"] in ("GET", "HEAD") and given and bearer_ok(f"Bearer {given}", self.token):
            await self._set_cookie_and_redirect(scope, query, send)
            return
        await _plain(
            send,
            401,
            "Unauthorized: open the URL that `remindful dashboard` prints (it carries the token once)\n",
            [(b"www-authenticate", b'Bearer realm="remindful"')],
        )

    def _bearer(self, headers: dict[str, str]) -> bool:
        return bearer_ok(headers.get("authorization"), self.token)

    def _cookie(self, headers: dict[str, str]) -> bool:
        raw = headers.get("cookie")
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
        return parts.scheme in ("http", "https") and host_name(parts.netloc) in self.hosts

    async def _set_cookie_and_redirect(self, scope: Any, query: dict[str, str], send: Any) -> None:
        target = scope.get("root_path", "") + scope["path"]
        if query:
            target += "?" + urlencode(query)
        cookie = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
        await _plain(
            send,
            303,
            "",
            [(b"location", target.encode("latin-1")), (b"set-cookie", cookie.encode("latin-1")), *SECURITY_HEADERS],
        )


def _headers(scope: Any) -> dict[str, str]:
    """The request's headers by lower-case name (a repeated header: the first one)."""
    out: dict[str, str] = {}
    for key, value in scope["headers"]:
        out.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
    return out


def _with_headers(send: Any, extra: list[tuple[bytes, bytes]]) -> Any:
    async def wrapped(message: Any) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return wrapped


async def _plain(send: Any, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = text.encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = ["COOKIE", "CSRF_FIELD", "CsrfTokens", "DashboardGate", "host_name"]
