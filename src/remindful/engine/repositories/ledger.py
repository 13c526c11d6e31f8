"""The ledger of injected context: one row per block a hook injected into an agent (the session, the
project, the event, the tokens it cost and the memories in it), summed per session and per
project for the statistics and the dashboard."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from remindful.engine.repositories.base import Repository


@dataclass(frozen=True, slots=True)
class InjectionTotal:
    """What was injected into one session or project (``key``): how many blocks, how many tokens
    (estimated, as budgeted), how many memories, and when last."""

    key: str | None
    injections: int
    tokens: int
    memories: int
    last_at: float | None


class LedgerRepository(Repository):
    """Named queries over the ``injections`` table."""

    def record(
        self,
        *,
        at: float,
        session_id: str | None,
        project: str | None,
        event: str,
        tokens: int,
        memory_ids: Sequence[str],
    ) -> None:
        """Record one injected block (the session id mapped and the project redacted as the
        store's write boundary does)."""
        catalog = self._catalog
        if session_id is not None:
            session_id = catalog.stored_session_id(session_id)
        if project is not None:
            project = catalog.redaction.text(project)
        catalog.write(
            lambda conn: conn.execute(
                "INSERT INTO injections (at, session_id, project, event, tokens, memory_ids) VALUES (?, ?, ?, ?, ?, ?)",
                (at, session_id, project, event, int(tokens), json.dumps(list(memory_ids))),
            ),
            what="recording injected context",
        )

    def total(self) -> InjectionTotal:
        """Everything injected, in all."""
        return self._totals(None, 1)[0]

    def by_project(self, limit: int = 20) -> list[InjectionTotal]:
        """Per project, the most tokens first."""
        return self._totals("project", limit)

    def by_session(self, limit: int = 20) -> list[InjectionTotal]:
        """Per session, the most recent first."""
        return self._totals("session_id", limit)

    def _totals(self, column: str | None, limit: int) -> list[InjectionTotal]:
        if column is None:
            sql = (
                "SELECT NULL, count(*), coalesce(sum(tokens), 0), coalesce(sum(json_array_length(memory_ids)), 0), "
                "max(at) FROM injections"
            )
        else:  # column is one of two names, never input
            order = "3 DESC, 5 DESC" if column == "project" else "5 DESC"
            sql = (
                f"SELECT {column}, count(*), sum(tokens), sum(json_array_length(memory_ids)), max(at) "
                f"FROM injections GROUP BY {column} ORDER BY {order} LIMIT ?"
            )
        rows = self._catalog.read(sql, () if column is None else (limit,))
        return [
            InjectionTotal(None if key is None else str(key), int(n), int(tokens), int(memories), at)
            for key, n, tokens, memories, at in rows
        ]


__all__ = ["InjectionTotal", "LedgerRepository"]
