"""Coding-agent hooks: ``remindful hook <event>`` and the spool behind it.

A hook process (:mod:`remindful.services.hooks.fast`, standard library only) turns the agent's hook JSON
into a small, redacted spool record in one short SQLite transaction and exits; whoever owns the
store drains the spool into memories (:func:`drain`, :mod:`remindful.services.hooks.drainer`). SessionStart
and UserPromptSubmit also print relevant memories for the agent (:mod:`remindful.services.context`).
This package imports nothing heavy, so that hook processes stay fast.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from remindful.engine.store import Store


def drain(store: Store, *, limit: int | None = None) -> int:
    """Store every pending spooled hook event through ``store``; returns how many events were
    processed. Safe to call from many processes at once (one drains, the others return 0)."""
    from remindful.services.hooks.drainer import drain_spool

    return drain_spool(store, limit=limit)


__all__ = ["drain"]
