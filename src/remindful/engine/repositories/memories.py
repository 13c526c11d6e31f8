"""Lookups and bulk writes over the ``memories`` table that the services need besides the store's own
write and read path (:class:`remindful.engine.store.Store`): rows and vectors by id, the ids a
service walks over, the pages an export reads, the rows an import writes, and the few metadata
lookups of the learning layer."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from remindful.engine.catalog import MemoryRow
from remindful.engine.repositories.base import Repository
from remindful.engine.schema import MEMORY_COLUMNS
from remindful.engine.sqlfilter import SqlFilter

#: Sorts after every character: ``prefix <= id < prefix + _LAST`` is "id starts with prefix".
_LAST = "\U0010ffff"
#: The newest action memories :meth:`MemoryRepository.tool_calls` reads at most (from the time index).
RECENT_TOOL_CALLS = 20_000


class MemoryRepository(Repository):
    """Named queries over memories."""

    # -- by id ------------------------------------------------------------------------------------

    def rows(self, ids: Sequence[str]) -> dict[str, MemoryRow]:
        """Rows for the ``ids`` that exist, keyed by id (without their vectors)."""
        return self._catalog.get_rows(ids)

    def embeddings(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The vectors of the ``ids`` that exist and have one."""
        return self._catalog.embeddings(ids)

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that are stored."""
        return self._catalog.existing_ids(ids)

    def ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        """Up to ``limit`` stored ids that start with ``prefix``, in order (a range over the id index)."""
        rows = self._catalog.read(
            "SELECT id FROM memories WHERE id >= ? AND id < ? ORDER BY id LIMIT ?", (prefix, prefix + _LAST, limit)
        )
        return [r[0] for r in rows]

    def id_neighbours(self, memory_id: str) -> tuple[str | None, str | None]:
        """The stored ids just before and just after ``memory_id`` in id order (None at either end)."""
        ((before, after),) = self._catalog.read(
            "SELECT (SELECT max(id) FROM memories WHERE id < ?), (SELECT min(id) FROM memories WHERE id > ?)",
            (memory_id, memory_id),
        )
        return before, after

    def count(self, flt: SqlFilter | None = None) -> int:
        """Memories passing ``flt`` (all by default)."""
        return self._catalog.count(flt)

    # -- ids to walk over --------------------------------------------------------------------------

    def some_ids(self, limit: int) -> list[str]:
        """Up to ``limit`` ids of stored memories, in no particular order (to delete everything in
        batches)."""
        return [r[0] for r in self._catalog.read("SELECT id FROM memories LIMIT ?", (limit,))]

    def newest_ids(self, memory_type: str, since: float, limit: int) -> list[str]:
        """Ids of the newest ``limit`` memories of ``memory_type`` created at or after ``since``,
        newest first."""
        rows = self._catalog.read(
            "SELECT id FROM memories WHERE type = ? AND created_at >= ? ORDER BY created_at DESC LIMIT ?",
            (memory_type, since, limit),
        )
        return [r[0] for r in rows]

    # -- metadata lookups ---------------------------------------------------------------------------

    def workflow_with_pattern(self, pattern_key: str) -> str | None:
        """The id of a workflow memory whose ``pattern_key`` metadata is ``pattern_key``, or None."""
        rows = self._catalog.read(
            "SELECT id FROM memories WHERE type = 'workflow' AND json_extract(metadata, '$.pattern_key') = ? LIMIT 1",
            (pattern_key,),
        )
        return str(rows[0][0]) if rows else None

    def current_preferences(self, setting: str) -> list[str]:
        """Ids of the configuration-change memories (source ``config``) about ``setting`` that no
        later one supersedes (no ``superseded_by`` metadata)."""
        rows = self._catalog.read(
            "SELECT id FROM memories WHERE source = 'config' AND json_extract(metadata, '$.setting') = ? "
            "AND json_extract(metadata, '$.superseded_by') IS NULL",
            (setting,),
        )
        return [r[0] for r in rows]

    def tool_calls(self, tool: str, limit: int) -> list[str]:
        """Ids of the newest ``limit`` action memories of calls of ``tool`` (metadata ``tool``, as
        the MCP middleware and the proxy store it, or ``tool_name``, as the hooks do) among the
        newest :data:`RECENT_TOOL_CALLS` actions, newest first."""
        rows = self._catalog.read(
            "SELECT id FROM (SELECT id, metadata, created_at FROM memories WHERE type = 'action' "
            "ORDER BY created_at DESC LIMIT ?) "
            "WHERE coalesce(json_extract(metadata, '$.tool'), json_extract(metadata, '$.tool_name')) = ? "
            "ORDER BY created_at DESC LIMIT ?",
            (RECENT_TOOL_CALLS, tool, limit),
        )
        return [str(r[0]) for r in rows]

    def relocate_attachments(self, old: str, new: str) -> None:
        """Replace ``old`` by ``new`` in every memory's metadata text (attachment paths of a store
        restored into another directory; both JSON-escaped as they appear in the text)."""
        self._catalog.write(
            lambda c: c.execute(
                "UPDATE memories SET metadata = replace(metadata, ?, ?) WHERE instr(metadata, ?) > 0", (old, new, old)
            ),
            what="relocating attachment paths",
        )

    # -- export and import ----------------------------------------------------------------------------

    def embedding_dimension(self) -> int | None:
        """The length of the stored vectors (that of any one of them), or None when none is stored."""
        rows = self._catalog.read("SELECT length(embedding) FROM memories WHERE embedding IS NOT NULL LIMIT 1")
        return int(rows[0][0]) // 4 if rows else None

    def page(self, after_rowid: int, limit: int) -> list[tuple[int, MemoryRow]]:
        """Up to ``limit`` memories with a rowid above ``after_rowid``, in rowid order, with their
        vectors: ``(rowid, row)`` (the last rowid is where the next page starts)."""
        rows = self._catalog.read(
            f"SELECT rowid, {MEMORY_COLUMNS}, embedding FROM memories WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (after_rowid, limit),
        )
        out = []
        for r in rows:
            row = MemoryRow.from_sql(r[1:])
            row.embedding = None if r[-1] is None else np.frombuffer(r[-1], dtype=np.float32)
            out.append((int(r[0]), row))
        return out

    def insert_imported(self, rows: Sequence[MemoryRow], detail: Mapping[str, Any]) -> None:
        """Insert ``rows`` (ids, times and vectors kept; redacted in place as every write is: a row
        whose content changed gets a new hash and no vector), record their sessions and audit an
        ``import`` with ``detail``, in one transaction."""

        catalog = self._catalog

        def run(conn: sqlite3.Connection) -> None:
            catalog.insert_memories(conn, rows)  # redacts each row first
            for session_id, at in {(r.session_id, r.created_at) for r in rows if r.session_id}:
                catalog.ensure_session(conn, session_id, at)
            catalog.audit(conn, "import", None, dict(detail))

        catalog.write(run, what="importing memories")

    # -- everything ----------------------------------------------------------------------------------

    def clear_side_tables(self, detail: Mapping[str, Any]) -> None:
        """Empty the sessions, the spool, the file hashes and the embedding cache, and audit a
        ``clear_all`` with ``detail``, in one transaction (the memories themselves are deleted
        before, through the store, which also takes their vectors out of the index)."""

        catalog = self._catalog

        def run(conn: sqlite3.Connection) -> None:
            for table in ("sessions", "spool", "file_hashes", "embedding_cache"):
                conn.execute(f"DELETE FROM {table}")
            catalog.audit(conn, "clear_all", None, dict(detail))

        catalog.write(run, what="clearing the store")


__all__ = ["MemoryRepository"]
