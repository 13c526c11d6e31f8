"""The local web dashboard: see, search and manage what the agent remembers.

``build_app(manager, token)`` is the whole dashboard as one ASGI app behind the store's bearer
token; ``remindful dashboard`` serves it on 127.0.0.1 and the daemon mounts it at ``/``.
"""

from remindful.web.app import build_app

__all__ = ["build_app"]
