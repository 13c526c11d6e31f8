"""The counts behind ``stats()`` and ``capture_status()`` that no other repository answers: the most
frequent actions and screens, captures per day, what waits in the spool or for the index, the
capture filters' counts and the Markdown files indexed. Each reads an index or a small table."""

from __future__ import annotations

from typing import Any

from remindful.engine import perf
from remindful.engine.redact import read_counts
from remindful.engine.repositories.base import Repository
from remindful.engine.repositories.labels import label_sql

_TOP_SQL = """
SELECT label, count(*) FROM (
    SELECT {label} AS label FROM memories WHERE type = ? ORDER BY created_at DESC LIMIT ?
) WHERE label IS NOT NULL GROUP BY label ORDER BY 2 DESC, 1 LIMIT ?
"""


class StatsRepository(Repository):
    """Named counts for the statistics."""

    def newest_rowid(self) -> int | None:
        """The rowid of the newest memory (None when there is none): with the count, it tells
        whether anything was added or deleted since it was last asked."""
        value = self._catalog.read("SELECT max(rowid) FROM memories")[0][0]
        return None if value is None else int(value)

    def most_frequent(self, memory_type: str, keys: tuple[str, ...], window: int, top: int) -> list[tuple[str, int]]:
        """The ``top`` most frequent names (by ``keys``, see :mod:`.labels`) among the newest
        ``window`` memories of ``memory_type``, most frequent first (ties: by name)."""
        rows = self._catalog.read(_TOP_SQL.format(label=label_sql(keys)), (memory_type, window, top))
        return [(str(name), int(n)) for name, n in rows]

    def recent_names(self, memory_type: str, keys: tuple[str, ...], window: int) -> list[tuple[Any, ...]]:
        """``(name by keys or None, tool or None, arguments JSON or None, file or None, content's first
        200 characters)`` of the newest ``window`` memories of ``memory_type``: what names an action
        or a screen to a person (:func:`remindful.services.stats.most_frequent` groups them)."""
        sql = (
            f"SELECT {label_sql(keys, content=False)}, coalesce(json_extract(metadata, '$.tool_name'), "
            "json_extract(metadata, '$.tool')), json_extract(metadata, '$.arguments'), "
            "json_extract(metadata, '$.file'), substr(content, 1, 200) "
            "FROM memories WHERE type = ? ORDER BY created_at DESC LIMIT ?"
        )
        return [tuple(row) for row in self._catalog.read(sql, (memory_type, window))]

    def captures_per_day(self, since: float) -> dict[str, int]:
        """``{"YYYY-MM-DD": memories created that UTC day}`` for the days since ``since`` that have any."""
        rows = self._catalog.read(
            "SELECT date(created_at, 'unixepoch'), count(*) FROM memories WHERE created_at >= ? GROUP BY 1", (since,)
        )
        return {day: int(n) for day, n in rows}

    def spool_pending(self) -> int:
        """Hook events and captured tool calls waiting in the spool."""
        return int(self._catalog.read("SELECT count(*) FROM spool")[0][0])

    def unindexed(self) -> int:
        """Memories not yet marked as in the vector index."""
        return int(self._catalog.read("SELECT count(*) FROM memories WHERE indexed = 0")[0][0])

    def capture_counts(self) -> dict[str, int]:
        """Redactions and skipped captures per reason, summed over every process."""
        return {k: v for k, v in read_counts(self._catalog.read).items() if not k.startswith(perf.PREFIX)}

    def perf_counts(self) -> dict[str, int]:
        """The searches' figures of every process (:mod:`remindful.engine.perf`), by counter name."""
        return {k: v for k, v in read_counts(self._catalog.read).items() if k.startswith(perf.PREFIX)}

    def files_indexed(self) -> int:
        """Markdown files whose chunks are stored (the file watcher's hashes)."""
        return int(self._catalog.read("SELECT count(*) FROM file_hashes")[0][0])


__all__ = ["StatsRepository"]
