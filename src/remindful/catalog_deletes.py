"""Deleting memories from the catalog, and the two queues a delete leaves (a part of
:class:`remindful.catalog.Catalog`).

A delete is one transaction: the rows, their FTS entries and session windows, an audit-log entry
per row, and an ``index_deletes`` entry per row, from which the vector index catches up. A large
delete queues the mending of its neighbours' session windows instead of doing it in the
transaction (:mod:`remindful.context`); :meth:`CatalogDeletes.mend_windows` works through that
queue.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from remindful import context

T = TypeVar("T")

#: A delete of this many rows or more runs with a page cache of BIG_DELETE_CACHE_KIB.
BIG_DELETE = 1000
BIG_DELETE_CACHE_KIB = 65536


class CatalogDeletes:
    """Deletes and their queues, for :class:`~remindful.catalog.Catalog` (which provides ``read`` and ``write``)."""

    if TYPE_CHECKING:

        def write(self, fn: Callable[[sqlite3.Connection], T], *, what: str = "write") -> T: ...

        def read(self, sql: str, params: Sequence[Any] = (), *, private: bool = False) -> list[Any]: ...

    def delete_ids(
        self, ids: Sequence[str], *, reason: str | Mapping[str, str] = "delete", mend_later: bool = False
    ) -> list[tuple[str, str]]:
        """Delete ``ids`` in one transaction: the rows, their FTS entries and session windows, the
        windows around them (``mend_later``: the windows are queued for :meth:`mend_windows`
        instead, see :mod:`remindful.context`), an audit-log entry per row (action ``reason``, or
        ``reason[id]``, default ``"delete"``) and an ``index_deletes`` entry per row, from which
        the vector index catches up (:meth:`pending_index_deletes`). Returns the (id, type) pairs
        that existed.

        Set-based: the ids go into a temporary table and every step is one statement over it."""
        reasons = {} if isinstance(reason, str) else reason
        default = reason if isinstance(reason, str) else "delete"
        pairs = [(i, reasons.get(i, default)) for i in ids]

        def run(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            if len(pairs) < BIG_DELETE:
                return delete(conn)
            # Each FTS delete reads index pages that SQLite's default 2 MB page cache has dropped
            # again by the next row: a bigger cache for this transaction makes it ~1.5x faster.
            size = conn.execute("PRAGMA cache_size").fetchone()[0]
            conn.execute(f"PRAGMA cache_size = {-BIG_DELETE_CACHE_KIB}")
            try:
                return delete(conn)
            finally:
                conn.execute(f"PRAGMA cache_size = {int(size)}")

        def delete(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS doomed (id TEXT PRIMARY KEY, reason TEXT NOT NULL)")
            conn.execute("DELETE FROM temp.doomed")
            conn.executemany("INSERT OR IGNORE INTO temp.doomed (id, reason) VALUES (?, ?)", pairs)
            gone: list[tuple[str, str]] = conn.execute(
                "SELECT m.id, m.type FROM temp.doomed d JOIN memories m ON m.id = d.id"
            ).fetchall()
            if gone:
                conn.execute(
                    "INSERT INTO audit_log (at, action, memory_id, detail) "
                    "SELECT ?, d.reason, m.id, json_object('type', m.type) "
                    "FROM temp.doomed d JOIN memories m ON m.id = d.id",
                    (time.time(),),
                )
                conn.execute(
                    "INSERT OR REPLACE INTO index_deletes (memory_id, type) "
                    "SELECT m.id, m.type FROM temp.doomed d JOIN memories m ON m.id = d.id"
                )
                spots = context.before_delete(conn, later=mend_later)
                conn.execute("DELETE FROM memories WHERE id IN (SELECT id FROM temp.doomed)")
                context.after_delete(conn, spots, later=mend_later)
            conn.execute("DELETE FROM temp.doomed")
            return gone

        return self.write(run, what="deleting memories")

    def mend_windows(self, limit: int) -> int:
        """Mend the session windows around up to ``limit`` queued deletion spots; returns how many
        were handled (0: none left)."""
        return self.write(lambda c: context.mend_pending(c, limit), what="mending session windows")

    def windows_to_mend(self) -> bool:
        return bool(self.read("SELECT 1 FROM context_drop UNION ALL SELECT 1 FROM context_mend LIMIT 1"))

    def pending_index_deletes(self, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` queued vector deletions, oldest first: (memory id, type)."""
        return self.read("SELECT memory_id, type FROM index_deletes ORDER BY rowid LIMIT ?", [limit])

    def finish_index_deletes(self, ids: Sequence[str]) -> None:
        """Drop queued vector deletions once the index has applied them."""
        if ids:
            self.write(
                lambda c: c.executemany("DELETE FROM index_deletes WHERE memory_id = ?", [(i,) for i in ids]),
                what="recording vector deletions",
            )
