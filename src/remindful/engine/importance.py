"""The importance score: which memories to keep when something has to go.

Used by quota eviction (the least important unprotected memories go first), by the retention
tiers' item caps and by dedup (a cluster keeps its most important member, then the newest).

``score(inputs, now)`` is a pure function of :class:`ImportanceInputs`, in ``[0, 2)``:

==================  =======  =========================================================
term                weight   value in [0, 1]
==================  =======  =========================================================
bookmarked          1.0      1 if bookmarked or manual_save, else 0
base importance     0.20     the stored ``importance`` (0.5 unless the caller set it)
manual              0.15     1 if the memory was stored explicitly (``source`` manual)
success             0.15     1 for ``success: true``, 0.5 unknown, 0 for ``success: false``
reinforcement       0.15     r / (r + 2), r = ``metadata.reinforcement_count`` (confirmations)
access              0.10     a / (a + 5), a = access count (never reaches 1)
recency             0.15     exp(-age / 30 days), age since the last access or creation
type                0.10     workflow, knowledge 1 · document 0.8 · conversation 0.6 ·
                             action 0.5 · screen 0.3
==================  =======  =========================================================

Every term but ``bookmarked`` sums to less than 1 (the access term never reaches its weight), so
a bookmarked memory always outranks every unbookmarked one. The score never decreases when a
term's input improves (more accesses, more reinforcement, a newer last use, success), which the
property tests check.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DAY_S = 86_400.0
RECENCY_SCALE_DAYS = 30.0
WEIGHTS = {
    "bookmarked": 1.0,
    "base": 0.20,
    "manual": 0.15,
    "success": 0.15,
    "reinforcement": 0.15,
    "access": 0.10,
    "recency": 0.15,
    "type": 0.10,
}
TYPE_VALUE = {
    "workflow": 1.0,
    "knowledge": 1.0,
    "document": 0.8,
    "conversation": 0.6,
    "action": 0.5,
    "screen": 0.3,
}


@dataclass(frozen=True, slots=True)
class ImportanceInputs:
    """What the score looks at. Times are epoch seconds."""

    type: str
    created_at: float
    bookmarked: bool = False
    manual: bool = False
    success: bool | None = None
    reinforcement: int = 0
    access_count: int = 0
    last_accessed: float | None = None
    base: float = 0.5


def score(inputs: ImportanceInputs, now: float) -> float:
    """The importance of a memory at time ``now``, in ``[0, 2)``; see the module docstring."""
    w = WEIGHTS
    last_used = max(inputs.created_at, inputs.last_accessed or 0.0)
    age_days = max(now - last_used, 0.0) / DAY_S
    success = 0.5 if inputs.success is None else (1.0 if inputs.success else 0.0)
    reinforcement = max(inputs.reinforcement, 0)
    access = max(inputs.access_count, 0)
    return (
        w["bookmarked"] * inputs.bookmarked
        + w["base"] * min(max(inputs.base, 0.0), 1.0)
        + w["manual"] * inputs.manual
        + w["success"] * success
        + w["reinforcement"] * reinforcement / (reinforcement + 2)
        + w["access"] * access / (access + 5)
        + w["recency"] * math.exp(-age_days / RECENCY_SCALE_DAYS)
        + w["type"] * TYPE_VALUE.get(inputs.type, 0.5)
    )


#: Columns :func:`inputs_from_row` reads, in order (see :func:`columns`). The metadata keys are
#: extracted by SQLite (``json_type`` tells ``true`` from ``1``), several times faster than here.
COLUMNS = (
    "id, type, created_at, bookmarked, source, json_type(metadata, '$.success'), "
    "coalesce(json_extract(metadata, '$.reinforcement_count'), 0), json_type(metadata, '$.manual_save'), "
    "access_count, last_accessed, importance"
)
# Confirmations recorded by the learning module (remindful.services.learning.reinforce) in their own table.
_REINFORCED = "(SELECT count(*) FROM reinforcements WHERE reinforcements.memory_id = memories.id)"


def columns(catalog: Any) -> str:
    """:data:`COLUMNS`, counting reinforcements from the ``reinforcements`` table when it exists.
    Use in ``SELECT {columns(catalog)} FROM memories`` (no table alias)."""
    if catalog.read("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'reinforcements'"):
        return COLUMNS.replace(
            "coalesce(json_extract(metadata, '$.reinforcement_count'), 0)",
            f"coalesce(json_extract(metadata, '$.reinforcement_count'), 0) + {_REINFORCED}",
        )
    return COLUMNS


N_COLUMNS = 11


def inputs_from_row(row: Sequence[Any]) -> ImportanceInputs:
    """Build the inputs from a ``SELECT {COLUMNS}`` row."""
    _id, mtype, created_at, bookmarked, source, success, reinforcement, manual_save, access, last, base = row[:11]
    return ImportanceInputs(
        type=mtype,
        created_at=created_at,
        bookmarked=bool(bookmarked),
        manual=source == "manual" or manual_save == "true",
        success=True if success == "true" else False if success == "false" else None,
        reinforcement=int(reinforcement) if isinstance(reinforcement, int | float) else 0,
        access_count=access,
        last_accessed=last,
        base=base,
    )


__all__ = [
    "COLUMNS",
    "N_COLUMNS",
    "WEIGHTS",
    "ImportanceInputs",
    "inputs_from_row",
    "score",
]
