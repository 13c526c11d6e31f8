"""Reinforcement: raise a memory's importance so that it ranks higher in later searches.

Search multiplies a memory's fused score by ``1 + search.importance_boost * (2 * importance - 1)``
(:func:`remindful.engine.retrieval.search.boost`), so importance moves rank among near-ties and never lifts an
irrelevant memory over a relevant one. Each reinforcement adds a fixed step, capped at 1.0:

- explicit trigger phrase in a conversation ("remember that …"): ``learning.trigger_boost`` (0.25)
- a user correction: ``learning.correction_boost`` (0.3)
- a confirmed search result (:func:`confirm`): ``learning.confirm_boost`` (0.15)

It also counts as an access (``access_count`` + 1, ``last_accessed`` = now), and each one is
logged in the ``reinforcements`` table with its reason and query.
"""

from __future__ import annotations

import logging
import sqlite3
from enum import StrEnum
from typing import Any

from remindful.engine.store import Store
from remindful.errors import NotFoundError, ValidationError
from remindful.model import Memory
from remindful.services.learning.common import finish, now
from remindful.services.learning.types import CaptureSource

log = logging.getLogger("remindful.services.learning")


class ReinforcementReason(StrEnum):
    EXPLICIT_USER_CONFIRMATION = "explicit_user_confirmation"
    USER_CORRECTION = "user_correction"
    SUCCESSFUL_APPLICATION = "successful_application"


def reinforce(
    store: Store, memory_id: str, reason: ReinforcementReason, step: float, query: str | None = None
) -> float:
    """Add ``step`` to the memory's importance (capped at 1.0) and count an access; returns the
    new importance. Raises NotFoundError if there is no such memory."""
    if not 0 <= step <= 1:
        raise ValidationError("step", f"expected a number from 0 to 1, got {step!r}")
    catalog = store.catalog
    at = now()

    def run(conn: sqlite3.Connection) -> float | None:
        row = conn.execute("SELECT importance FROM memories WHERE id = ?", (memory_id,)).fetchone()
        if row is None:
            return None
        importance = min(1.0, float(row[0]) + step)
        conn.execute(
            "UPDATE memories SET importance = ?, access_count = access_count + 1, last_accessed = ? WHERE id = ?",
            (importance, at, memory_id),
        )
        conn.execute(
            "INSERT INTO reinforcements (memory_id, at, reason, query, importance) VALUES (?,?,?,?,?)",
            (memory_id, at, reason.value, query, importance),
        )
        return importance

    result = catalog.write(run, what="reinforcing a memory")
    if result is None:
        raise NotFoundError(memory_id)
    return result


def confirm(store: Store, query: str, memory_id: str) -> Memory:
    """A search for ``query`` found ``memory_id`` helpful: reinforce it (importance +
    ``learning.confirm_boost``, access count + 1) so it ranks higher next time. Returns the
    updated memory; raises NotFoundError / ValidationError."""
    if not isinstance(query, str) or not query.strip():
        raise ValidationError("query", "expected the non-empty search query the result answered")
    if not isinstance(memory_id, str) or not memory_id.strip():
        raise ValidationError("memory_id", "expected the id of the helpful search result")
    reinforce(
        store, memory_id, ReinforcementReason.SUCCESSFUL_APPLICATION, store.settings.learning.confirm_boost, query
    )
    memory = store.get(memory_id)
    log.info("[MEM:CAPTURE] Reinforced memory %s from successful search", memory_id)
    finish(store, CaptureSource.SEARCH_CONFIRMATION, memory_id, [memory])
    return memory


def history(store: Store, memory_id: str) -> list[dict[str, Any]]:
    """The memory's reinforcements, oldest first: ``{at, reason, query, importance}``."""
    rows = store.catalog.read(
        "SELECT at, reason, query, importance FROM reinforcements WHERE memory_id = ? ORDER BY seq", (memory_id,)
    )
    return [{"at": at, "reason": reason, "query": query, "importance": imp} for at, reason, query, imp in rows]


__all__ = ["ReinforcementReason", "confirm", "history", "reinforce"]
