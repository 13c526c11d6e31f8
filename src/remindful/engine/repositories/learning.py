"""The learning layer's tables: ``learning_counters`` (capture events, memories created, the
extraction-confidence histogram, LLM use: one figure per ``(kind, key)``, summed over every process
writing to the store) and ``reinforcements`` (each raise of a memory's importance, with its reason
and query). Both are created when the catalog opens (:data:`remindful.engine.schema.LEARNING_DDL`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import NamedTuple

from remindful.engine.repositories.base import Repository


class Reinforcement(NamedTuple):
    """One reinforcement of a memory: when, why, for which query, and its importance after it."""

    at: float
    reason: str
    query: str | None
    importance: float


class LearningRepository(Repository):
    """Named queries over the learning counters and reinforcements."""

    def add_to_counters(self, counts: Mapping[tuple[str, str], float]) -> None:
        """Add each ``(kind, key) → value`` to its counter (created at 0), in one transaction;
        zero values are skipped."""
        text = self._catalog.redaction.text  # keys name actions, tools and settings: redacted as any text
        items = [(kind, text(key), value) for (kind, key), value in counts.items() if value]
        if not items:
            return

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO learning_counters (kind, key, value) VALUES (?,?,?) "
                "ON CONFLICT(kind, key) DO UPDATE SET value = value + excluded.value",
                items,
            )

        self._catalog.write(run, what="counting captures")

    def counters(self) -> dict[str, dict[str, float]]:
        """Every counter, as ``{kind: {key: value}}`` (whole numbers as ints)."""
        out: dict[str, dict[str, float]] = {}
        for kind, key, value in self._catalog.read("SELECT kind, key, value FROM learning_counters ORDER BY kind, key"):
            out.setdefault(kind, {})[key] = int(value) if float(value).is_integer() else value
        return out

    def counter(self, kind: str, key: str) -> float:
        """One counter's value (0 when it was never counted)."""
        rows = self._catalog.read("SELECT value FROM learning_counters WHERE kind = ? AND key = ?", (kind, key))
        return rows[0][0] if rows else 0

    def reinforce(self, memory_id: str, step: float, *, reason: str, query: str | None, at: float) -> float | None:
        """Add ``step`` to the memory's importance (capped at 1.0), count an access at ``at`` and
        log the reinforcement, in one transaction; the new importance, or None when there is no
        such memory (nothing is written then). ``reason`` and ``query`` are kept redacted."""
        redaction = self._catalog.redaction
        reason = redaction.text(reason)
        query = None if query is None else redaction.text(query)

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
                (memory_id, at, reason, query, importance),
            )
            return importance

        return self._catalog.write(run, what="reinforcing a memory")

    def reinforcements(self, memory_id: str) -> list[Reinforcement]:
        """The memory's reinforcements, oldest first."""
        rows = self._catalog.read(
            "SELECT at, reason, query, importance FROM reinforcements WHERE memory_id = ? ORDER BY seq", (memory_id,)
        )
        return [Reinforcement(*row) for row in rows]

    def reinforcement_count(self) -> int:
        """Reinforcements of every memory, in all."""
        return int(self._catalog.read("SELECT count(*) FROM reinforcements")[0][0])


__all__ = ["LearningRepository", "Reinforcement"]
