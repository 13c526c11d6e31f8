"""What retention and dedup read and record: the unprotected memories with what the policy judges
them by, their importance inputs, the embedded memories dedup compares, the consolidation a
cluster's representative records, and the report of the last cleanup (the ``meta`` table)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from remindful.engine.catalog import Catalog, CatalogSource
from remindful.engine.importance import ImportanceInputs, columns, inputs_from_row
from remindful.engine.repositories.base import Repository
from remindful.engine.sqlfilter import SqlFilter


class RetentionCandidate(NamedTuple):
    """An unbookmarked memory as retention judges it: its size in bytes, whether its metadata says
    ``success: true``, whether it is a screen that represents a dedup cluster, whether it was stored
    by hand (source ``manual``)."""

    id: str
    type: str
    created_at: float
    expires_at: float | None
    size: int
    success: bool
    consolidated: bool
    manual: bool


class Embedded(NamedTuple):
    """An embedded memory as dedup compares it: its vector as the catalog stores it (see
    :mod:`remindful.engine.vectors`: int8 with a scale, a quarter of float32's bytes, so a million
    memories' vectors load as 0.4 GB, not 1.5), and its scope (dedup compares memories of one scope
    only: a project's copy is not another project's)."""

    id: str
    bookmarked: bool
    vector: bytes
    scope: str | None = None


def created_window(oldest: float, newest: float) -> SqlFilter:
    """The memories created at or after ``oldest`` and before ``newest`` (an age tier)."""
    return SqlFilter("created_at < ? AND created_at >= ?", (newest, oldest))


class RetentionRepository(Repository):
    """Named queries for the retention policy and dedup."""

    def __init__(self, catalog: Catalog | CatalogSource) -> None:
        super().__init__(catalog)
        self._columns: tuple[Catalog, str] | None = None  # (the catalog, its importance columns)

    def candidates(self) -> list[RetentionCandidate]:
        """Every memory that is not bookmarked (bookmarked ones are never deleted by a policy)."""
        rows = self._catalog.read(
            "SELECT id, type, created_at, expires_at, size_bytes, json_type(metadata, '$.success') = 'true', "
            "CASE WHEN type = 'screen' THEN json_type(metadata, '$.consolidation') IS NOT NULL ELSE 0 END, "
            "source = 'manual' FROM memories WHERE bookmarked = 0"
        )
        return [RetentionCandidate(r[0], r[1], r[2], r[3], r[4], bool(r[5]), bool(r[6]), bool(r[7])) for r in rows]

    def importance_inputs(self, ids: Sequence[str]) -> dict[str, ImportanceInputs]:
        """What :func:`remindful.engine.importance.score` needs of each of ``ids`` that exists."""
        catalog = self._catalog
        rows = catalog.read_in(f"SELECT {self._columns_of(catalog)} FROM memories WHERE id IN ({{marks}})", ids)
        return {r[0]: inputs_from_row(r) for r in rows}

    def unbookmarked(
        self, memory_type: str, *, above_rowid: int = 0, ids: Sequence[str] | None = None
    ) -> list[tuple[ImportanceInputs, str, int]]:
        """``(inputs, id, rowid)`` of the unbookmarked memories of ``memory_type`` the policy
        governs (every one here): those with a rowid above ``above_rowid``, or those of ``ids``
        (of any type). What the item quota evicts from (:class:`~remindful.engine.quotas.EvictionOrder`)."""
        catalog = self._catalog
        select = f"SELECT {self._columns_of(catalog)}, rowid FROM memories WHERE bookmarked = 0"
        if ids is not None:
            rows = catalog.read_in(f"{select} AND id IN ({{marks}})", ids)
        else:
            rows = catalog.read(f"{select} AND type = ? AND rowid > ?", (memory_type, above_rowid))
        return [(inputs_from_row(r), str(r[0]), int(r[-1])) for r in rows]

    def _columns_of(self, catalog: Catalog) -> str:
        """:func:`~remindful.engine.importance.columns` of ``catalog``, asked once per open catalog
        (every store past a type's item quota reads :meth:`unbookmarked` twice)."""
        if self._columns is None or self._columns[0] is not catalog:
            self._columns = (catalog, columns(catalog))
        return self._columns[1]

    def count_in_reach(self, memory_type: str) -> int | None:
        """How many memories of ``memory_type`` the policy governs, where that is not every memory
        (a team member's on a shared catalog); None: every memory, the store's type counts."""
        return None

    def types(self, flt: SqlFilter) -> list[str]:
        """The types of the memories passing ``flt``, unordered."""
        return [r[0] for r in self._catalog.read(f"SELECT DISTINCT type FROM memories WHERE {flt.sql}", flt.params)]

    def embedded(self, memory_type: str, flt: SqlFilter) -> list[Embedded]:
        """The embedded memories of ``memory_type`` passing ``flt``."""
        rows = self._catalog.read(
            f"SELECT id, bookmarked, embedding, scope FROM memories "
            f"WHERE type = ? AND ({flt.sql}) AND embedding IS NOT NULL",
            (memory_type, *flt.params),
        )
        return [Embedded(r[0], bool(r[1]), bytes(r[2]), r[3]) for r in rows]

    def total_bytes(self) -> int:
        """The memories' own bytes (content, metadata, vector), in all."""
        return int(self._catalog.read("SELECT coalesce(sum(size_bytes), 0) FROM memories")[0][0])

    def counts_in_reach(self) -> dict[str, int] | None:
        """How many memories of each type the policy governs, where that is not every memory
        (a team member's on a shared catalog); None: every memory, the store's type counts."""
        return None

    def protected_before(self, created_before: float) -> int:
        """Memories created before ``created_before`` that no age rule deletes: bookmarked or
        stored by hand."""
        return int(
            self._catalog.read(
                "SELECT count(*) FROM memories WHERE (bookmarked = 1 OR source = 'manual') AND created_at < ?",
                (created_before,),
            )[0][0]
        )

    def record_consolidations(self, updates: Sequence[tuple[str, float, str]]) -> None:
        """Set ``(metadata JSON, updated_at, id)`` on each representative, in one transaction, and
        mark it for re-indexing (the index holds a copy of its metadata)."""
        value = self._catalog.redaction.value
        rows = [(json.dumps(value(json.loads(meta)), ensure_ascii=False), at, mid) for meta, at, mid in updates]
        self._catalog.write(
            lambda c: c.executemany("UPDATE memories SET metadata = ?, updated_at = ?, indexed = 0 WHERE id = ?", rows),
            what="recording dedup consolidation",
        )

    def record_cleanup(self, report: dict[str, Any]) -> None:
        """Keep ``report`` as the last cleanup's (see :meth:`last_cleanup`)."""
        summary = json.dumps(report)
        self._catalog.write(
            lambda c: c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('last_cleanup', ?)", (summary,)),
            what="recording the cleanup",
        )

    def last_cleanup(self) -> dict[str, Any] | None:
        """The report :meth:`record_cleanup` kept last, or None."""
        rows = self._catalog.read("SELECT value FROM meta WHERE key = 'last_cleanup'")
        report: dict[str, Any] | None = json.loads(rows[0][0]) if rows else None
        return report


__all__ = ["Embedded", "RetentionCandidate", "RetentionRepository", "created_window"]
