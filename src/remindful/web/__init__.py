"""The local web dashboard: see, search and manage what the agent remembers; and the gate of every
HTTP surface (:mod:`remindful.web.gate`).

``build_app(manager, token)`` is the whole dashboard as one ASGI app behind the store's bearer
token, which browsers enter with one-time codes (:mod:`remindful.web.signin`), never the token;
``remindful dashboard`` serves it on 127.0.0.1 and the daemon mounts it at ``/``. It is imported on
first use, so the MCP server can take the gate without the dashboard's templates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from remindful.web.app import build_app

__all__ = ["build_app"]


def __getattr__(name: str) -> Any:
    if name == "build_app":
        from remindful.web.app import build_app

        return build_app
    raise AttributeError(f"module 'remindful.web' has no attribute {name!r}")
