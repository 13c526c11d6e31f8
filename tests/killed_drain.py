"""A drain whose process dies at one point: the function named raises :class:`Killed` (as SIGKILL,
nothing after it runs), then the drain is left as it died."""

from __future__ import annotations

import contextlib
from typing import Any


class Killed(BaseException):
    """The drain's process dying."""


def drain_killed_at(memory: Any, owner: Any, name: str) -> None:
    """Drain ``memory``'s spool with ``owner.name`` (a module's function or a class's method)
    killing the drain when it is first called; ``owner.name`` is itself again afterwards."""
    real = getattr(owner, name)

    def killed(*args: Any, **kwargs: Any) -> None:
        raise Killed

    setattr(owner, name, killed)
    try:
        with contextlib.suppress(Killed):
            memory.drain_spool()
    finally:
        setattr(owner, name, real)
