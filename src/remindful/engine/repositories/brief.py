"""What a new session of a coding agent is told first: a project's recent knowledge (facts,
decisions, preferences, corrections) and its open failures (failed calls no later success
resolved), newest first, read from the time index, never from a search."""

from __future__ import annotations

from remindful.engine.catalog import MemoryRow
from remindful.engine.repositories.base import Repository
from remindful.engine.schema import MEMORY_COLUMNS

#: Memories in ``project`` (metadata ``project_id``), or, when ``user_level`` holds for them, in none.
_IN_PROJECT = (
    "(? IS NULL OR json_extract(metadata, '$.project_id') = ? "
    "OR (json_extract(metadata, '$.project_id') IS NULL AND ({user_level})))"
)
#: What holds for the user wherever they work: preferences, rules and corrections.
_USER_LEVEL = (
    "source IN ('correction', 'config') OR json_extract(metadata, '$.category') IN ('preference', 'instruction')"
)
_CURRENT = "json_extract(metadata, '$.superseded_by') IS NULL AND (expires_at IS NULL OR expires_at > ?)"
#: The newest actions the brief looks for open failures among (from the time index): its cost stays
#: bounded however many calls a store holds.
RECENT_ACTIONS = 5000


class BriefRepository(Repository):
    """Named queries for the SessionStart brief."""

    def knowledge(self, project: str | None, *, since: float, now: float, limit: int) -> list[MemoryRow]:
        """The newest ``limit`` knowledge memories created since ``since`` of ``project`` (or
        user-level: preferences, rules, corrections of no project), none superseded or expired;
        every project's when ``project`` is None."""
        rows = self._catalog.read(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE type = 'knowledge' AND created_at >= ? "
            f"AND {_CURRENT} AND {_IN_PROJECT.format(user_level=_USER_LEVEL)} "
            "ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (since, now, project, project, limit),
        )
        return [MemoryRow.from_sql(r) for r in rows]

    def open_failures(self, project: str | None, *, since: float, now: float, limit: int) -> list[MemoryRow]:
        """The newest ``limit`` failed calls in ``project`` (every project's when None) among the
        newest :data:`RECENT_ACTIONS` actions created since ``since``, that no later success
        resolved, none superseded or expired."""
        rows = self._catalog.read(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE rowid IN ("
            "SELECT rowid FROM memories WHERE type = 'action' AND created_at >= ? "
            "ORDER BY created_at DESC LIMIT ?) "
            "AND json_extract(metadata, '$.success') = 0 AND json_extract(metadata, '$.resolved_by') IS NULL "
            f"AND {_CURRENT} AND {_IN_PROJECT.format(user_level='0')} "
            "ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (since, RECENT_ACTIONS, now, project, project, limit),
        )
        return [MemoryRow.from_sql(r) for r in rows]


__all__ = ["BriefRepository"]
