"""What a new session of a coding agent is told first: the recent knowledge (facts, decisions,
preferences, corrections) and open failures (failed calls no later success resolved) of the scopes
it sees (its project's and the user's), newest first, read from the time index, never from a
search."""

from __future__ import annotations

from typing import TYPE_CHECKING

from remindful.engine.catalog import MemoryRow
from remindful.engine.repositories.base import Repository
from remindful.engine.schema import MEMORY_COLUMNS
from remindful.engine.sqlfilter import SqlFilter, scope_filter

if TYPE_CHECKING:
    from collections.abc import Sequence

_CURRENT = "json_extract(metadata, '$.superseded_by') IS NULL AND (expires_at IS NULL OR expires_at > ?)"
#: The newest actions the brief looks for open failures among (from the time index): its cost stays
#: bounded however many calls a store holds.
RECENT_ACTIONS = 5000


class BriefRepository(Repository):
    """Named queries for the SessionStart brief."""

    def knowledge(
        self, scopes: Sequence[str | None] | None, *, since: float, now: float, limit: int
    ) -> list[MemoryRow]:
        """The newest ``limit`` knowledge memories created since ``since`` in ``scopes`` (None:
        every scope; None among them: the unscoped), none superseded or expired."""
        where = _in(scopes)
        rows = self._catalog.read(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE type = 'knowledge' AND created_at >= ? "
            f"AND {_CURRENT} AND ({where.sql}) ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (since, now, *where.params, limit),
        )
        return [MemoryRow.from_sql(r) for r in rows]

    def open_failures(
        self, scopes: Sequence[str | None] | None, *, since: float, now: float, limit: int
    ) -> list[MemoryRow]:
        """The newest ``limit`` failed calls in ``scopes`` (as :meth:`knowledge` takes them) among
        the newest :data:`RECENT_ACTIONS` actions created since ``since``, that no later success
        resolved, none superseded or expired."""
        where = _in(scopes)
        rows = self._catalog.read(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE rowid IN ("
            "SELECT rowid FROM memories WHERE type = 'action' AND created_at >= ? "
            "ORDER BY created_at DESC LIMIT ?) "
            "AND json_extract(metadata, '$.success') = 0 AND json_extract(metadata, '$.resolved_by') IS NULL "
            f"AND {_CURRENT} AND ({where.sql}) ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (since, RECENT_ACTIONS, now, *where.params, limit),
        )
        return [MemoryRow.from_sql(r) for r in rows]


def _in(scopes: Sequence[str | None] | None) -> SqlFilter:
    return SqlFilter() if scopes is None else scope_filter(scopes)


__all__ = ["BriefRepository"]
