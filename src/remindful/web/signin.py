"""How a browser signs in to the dashboard without ever holding the store's bearer token.

The store's token (:mod:`remindful.services.access`) opens every HTTP surface; a browser gets a
credential that opens one dashboard, in one server process, and nothing else:

1. Whoever holds the token (``remindful dashboard`` in-process, or a client that sends the token
   with ``POST /login`` to a running server) draws a **one-time code** (:meth:`SignIns.new_code`),
   valid for :data:`CODE_TTL_S`; the URL the user opens carries only that code
   (``/login?code=…``).
2. ``GET /login?code=…`` spends the code (a second use, or a use after it expired, is refused) and
   starts a **browser session**: an opaque random id kept only in this process's memory, and a
   random path prefix ``/s/<random>`` under which the dashboard is served to that browser.
3. The id goes into a cookie that is HttpOnly (no script reads it), SameSite=Strict (no other site
   sends it along) and, above all, scoped to that path prefix (``Path=/s/<random>``): cookies are
   not scoped by port, so a cookie with ``Path=/`` on 127.0.0.1 is sent to *every* web server on
   127.0.0.1, whichever port and whoever runs it. A cookie scoped to an unguessable path is sent
   only with requests for that path, which the browser makes to the dashboard alone. The cookie's
   name carries the server's port (``remindful_session_<port>``), so two dashboards on one machine
   never overwrite each other's cookie.

Sessions live as long as the server process (a restart signs every browser out); codes and sessions
are kept by their SHA-256, so a lookup's timing says nothing about the secret itself.

Standard library only.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

#: Where a browser spends a one-time code (GET) and a token holder draws one (POST).
LOGIN_PATH = "/login"
#: Every signed-in browser's dashboard lives under ``/s/<its own random segment>``.
SESSION_ROOT = "/s/"
#: How long a one-time code can be spent.
CODE_TTL_S = 120.0
#: Codes not yet spent, and sessions, kept at most (the oldest go first): only token holders draw codes,
#: so this bounds memory, not abuse.
MAX_CODES = 64
MAX_SESSIONS = 64
COOKIE_PREFIX = "remindful_session_"
_SEGMENT = re.compile(r"[A-Za-z0-9_-]{20,64}")


@dataclass(frozen=True, slots=True)
class BrowserSession:
    """A signed-in browser: ``root`` is the path prefix its dashboard is served under (``/s/…``)."""

    root: str


def cookie_name(port: int) -> str:
    """The name of the session cookie of the dashboard on ``port``."""
    return f"{COOKIE_PREFIX}{port}"


def session_segment(path: str) -> str | None:
    """The ``/s/<segment>`` prefix ``path`` starts with, or None when it has none."""
    if not path.startswith(SESSION_ROOT):
        return None
    segment = path[len(SESSION_ROOT) :].split("/", 1)[0]
    return SESSION_ROOT + segment if _SEGMENT.fullmatch(segment) else None


class SignIns:
    """The one-time codes and browser sessions of one server process (thread-safe)."""

    def __init__(self, code_ttl_s: float = CODE_TTL_S) -> None:
        self.code_ttl_s = code_ttl_s
        self._codes: OrderedDict[bytes, float] = OrderedDict()  # hash -> deadline (monotonic)
        self._sessions: OrderedDict[bytes, BrowserSession] = OrderedDict()
        self._lock = threading.Lock()

    def new_code(self) -> str:
        """A fresh one-time code, spendable once within :attr:`code_ttl_s` seconds."""
        code = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            for key in [k for k, deadline in self._codes.items() if deadline <= now]:
                del self._codes[key]
            self._codes[_digest(code)] = now + self.code_ttl_s
            while len(self._codes) > MAX_CODES:
                self._codes.popitem(last=False)
        return code

    def redeem(self, code: str) -> tuple[str, BrowserSession] | None:
        """Spend ``code``: ``(session id, session)`` of a new browser session, or None when the code
        was never drawn here, is spent already or has expired (it is gone either way)."""
        if not code:
            return None
        with self._lock:
            deadline = self._codes.pop(_digest(code), None)
            if deadline is None or deadline <= time.monotonic():
                return None
            session_id = secrets.token_urlsafe(32)
            session = BrowserSession(SESSION_ROOT + secrets.token_urlsafe(18))
            self._sessions[_digest(session_id)] = session
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return session_id, session

    def find(self, session_id: str) -> BrowserSession | None:
        """The session of the cookie value ``session_id``; None for an unknown one."""
        if not session_id:
            return None
        with self._lock:
            return self._sessions.get(_digest(session_id))


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


__all__ = [
    "CODE_TTL_S",
    "COOKIE_PREFIX",
    "LOGIN_PATH",
    "SESSION_ROOT",
    "BrowserSession",
    "SignIns",
    "cookie_name",
    "session_segment",
]
