"""Forgetting: a memory the user deletes stays deleted.

Deleting a memory by hand (``delete``, ``delete_many``: the CLI, the MCP tools, the dashboard)
first leaves a tombstone of its text (:func:`remindful.engine.captures.forget_key`: a hash of its
words, never the words), then deletes it; a correction leaves one for the statement it replaces
(:mod:`remindful.services.learning.corrections`). Every automatic capture checks the tombstones
before it stores (hook events, the turns conversation capture learns from, captured tool calls),
so the same statement is not learned again from the next session's transcript. Storing a
statement explicitly is never refused.

Deletes that are housekeeping leave no tombstone: retention, dedup (whose survivor holds the same
text), a Markdown file re-indexed, a session deleted for privacy, ``clear_all``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from remindful.engine.captures import forget_key

if TYPE_CHECKING:
    from remindful.engine.captures import CaptureRepository
    from remindful.model import Memory


class Deleter(Protocol):
    """What forgetting needs of the store (the Store is one)."""

    def get_batch(self, ids: Sequence[str]) -> list[Memory | None]: ...

    def delete_many(self, ids: Sequence[str], *, reason: str | Mapping[str, str] = ...) -> int: ...


def forget(store: Deleter, captures: CaptureRepository, ids: Sequence[str], *, reason: str = "deleted") -> int:
    """Bury the text of each memory of ``ids`` that exists (``reason`` recorded with it), then delete
    them; returns how many existed. A tombstone is written before the delete, so a crash between
    the two leaves the memory in place but never lets it be learned again."""
    found = [m for m in store.get_batch(ids) if m is not None]
    captures.bury({forget_key(m.content): (m.id, reason) for m in found}, time.time())
    return store.delete_many([m.id for m in found]) if found else 0


__all__ = ["forget"]
