"""Sessions as the catalog knows them: the ``sessions`` table (a row per session a memory or a hook
event named, with its recorded start and end) and the memories that carry a ``session_id``.

The upsert of a session row, inside the transaction that stores its first memory, is
:meth:`Catalog.ensure_session <remindful.engine.catalog.Catalog.ensure_session>`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from remindful.engine.repositories.base import Repository
from remindful.engine.repositories.labels import ACTION_KEYS, SCREEN_KEYS, TOOL_KEYS, label_sql, sqlite_field
from remindful.engine.sqlfilter import build_filter


@dataclass(slots=True)
class SessionSpan:
    """A session's memory count and its start and end (epoch seconds; None when unknown)."""

    id: str
    memory_count: int
    start: float | None
    end: float | None
    by_type: dict[str, int] = field(default_factory=dict)


class SessionLengths(NamedTuple):
    """How many sessions have a row, how many have memories, and the average memory count and span
    (first to last memory, seconds) of those that have memories (None when none has)."""

    recorded: int
    with_memories: int
    avg_memories: float | None
    avg_span_s: float | None


class Activity(NamedTuple):
    """How often (``times``) one action, screen or tool occurs in a session (``kind``: actions,
    screens, tools)."""

    session_id: str
    kind: str
    label: str | None
    times: int


def summary_sql(where: str, value_of: Callable[[str], str] = sqlite_field) -> str:
    """The count of each action, screen and tool per session, for the sessions ``where`` picks
    (``value_of``: a metadata value in the backend's dialect, see :func:`.labels.label_sql`)."""
    actions, screens = label_sql(ACTION_KEYS, value_of=value_of), label_sql(SCREEN_KEYS, value_of=value_of)
    tools = label_sql(TOOL_KEYS, content=False, value_of=value_of)
    return f"""
SELECT session_id, 'actions', {actions}, count(*) FROM memories
    WHERE type = 'action' AND {where} GROUP BY 1, 3
UNION ALL
SELECT session_id, 'screens', {screens}, count(*) FROM memories
    WHERE type = 'screen' AND {where} GROUP BY 1, 3
UNION ALL
SELECT session_id, 'tools', {tools}, count(*) FROM memories
    WHERE {where} AND {tools} IS NOT NULL GROUP BY 1, 3
"""


def _picking(ids: Sequence[str] | None) -> tuple[str, tuple[Any, ...]]:
    """The WHERE clause (and its parameters) over ``memories`` for the sessions ``ids`` (None: every session)."""
    if ids is None:
        return "session_id IS NOT NULL", ()
    return f"session_id IN ({', '.join('?' * len(ids))})", tuple(ids)


class SessionRepository(Repository):
    """Named queries over sessions and the memories in them. A session id given to a method is
    the caller's: it is looked up as the catalog stores it (:meth:`stored_id`)."""

    def stored_id(self, session_id: str) -> str:
        """The id under which session ``session_id`` is stored (:meth:`Catalog.stored_session_id`)."""
        return self._catalog.stored_session_id(session_id)

    def spans(self, session_id: str | None = None) -> list[SessionSpan]:
        """Every session that has memories or a row (or the one ``session_id``), newest start first
        (then by id): its memory count, start (the earlier of its recorded start and its first
        memory) and end (the recorded end, else its last memory's time). One pass over the session
        index; no memory row is read. ``by_type`` is left empty (see :meth:`type_counts`)."""
        catalog = self._catalog
        if session_id is not None:
            session_id = catalog.stored_session_id(session_id)
        where, args = ("session_id = ?", (session_id,)) if session_id is not None else ("session_id IS NOT NULL", ())
        found: dict[str, SessionSpan] = {}
        for sid, count, first, last in catalog.read(
            f"SELECT session_id, count(*), min(created_at), max(created_at) FROM memories WHERE {where} "
            "GROUP BY session_id",
            args,
        ):
            found[sid] = SessionSpan(sid, count, first, last)
        sql = "SELECT id, started_at, ended_at FROM sessions" + (" WHERE id = ?" if session_id is not None else "")
        for sid, started, ended in catalog.read(sql, args):
            span = found.setdefault(sid, SessionSpan(sid, 0, started, ended))
            span.start = min(span.start, started) if span.start is not None else started
            if ended is not None:
                span.end = ended
        return sorted(found.values(), key=lambda s: (-(s.start or 0.0), s.id))

    def count(self) -> int:
        """How many sessions :meth:`spans` lists."""
        ((count,),) = self._catalog.read(
            "SELECT count(*) FROM "
            "(SELECT session_id FROM memories WHERE session_id IS NOT NULL UNION SELECT id FROM sessions)"
        )
        return int(count)

    def type_counts(self, ids: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
        """``{session: {type: memories}}`` for the sessions ``ids`` (None: every session)."""
        where, args = _picking(ids)
        out: dict[str, dict[str, int]] = {}
        for sid, memory_type, count in self._catalog.read(
            f"SELECT session_id, type, count(*) FROM memories WHERE {where} GROUP BY 1, 2", args
        ):
            out.setdefault(sid, {})[memory_type] = count
        return out

    def activity(self, ids: Sequence[str] | None = None) -> list[Activity]:
        """How often each action, screen and tool (named as :mod:`.labels` says) occurs in the
        sessions ``ids`` (None: every session), unordered."""
        where, args = _picking(ids)
        return [Activity(*row) for row in self._catalog.read(summary_sql(where), args * 3)]

    def ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        """Up to ``limit`` session ids (of memories or of session rows) that start with ``prefix``, in order."""
        end = prefix + "\U0010ffff"
        rows = self._catalog.read(
            "SELECT id FROM (SELECT DISTINCT session_id AS id FROM memories WHERE session_id >= ? AND session_id < ? "
            "UNION SELECT id FROM sessions WHERE id >= ? AND id < ?) ORDER BY id LIMIT ?",
            (prefix, end, prefix, end, limit),
        )
        return [r[0] for r in rows]

    def id_neighbours(self, session_id: str) -> tuple[str | None, str | None]:
        """The session ids just before and just after ``session_id`` in id order (None at either end)."""
        ((before, after),) = self._catalog.read(
            "SELECT (SELECT max(x) FROM (SELECT max(session_id) AS x FROM memories WHERE session_id < ? "
            "UNION ALL SELECT max(id) FROM sessions WHERE id < ?)), "
            "(SELECT min(x) FROM (SELECT min(session_id) AS x FROM memories WHERE session_id > ? "
            "UNION ALL SELECT min(id) FROM sessions WHERE id > ?))",
            (session_id, session_id, session_id, session_id),
        )
        return before, after

    def exists(self, session_id: str) -> bool:
        """Whether the ``sessions`` table has a row for ``session_id``."""
        return bool(self._catalog.read("SELECT 1 FROM sessions WHERE id = ?", (self.stored_id(session_id),)))

    def memory_count(self, session_id: str) -> int:
        """How many memories the session holds."""
        return self._catalog.count(build_filter(session_id=self.stored_id(session_id)))

    def memory_ids(self, session_id: str, limit: int) -> list[str]:
        """Up to ``limit`` ids of the session's memories, in no particular order."""
        stored = self.stored_id(session_id)
        return [
            r[0] for r in self._catalog.read("SELECT id FROM memories WHERE session_id = ? LIMIT ?", (stored, limit))
        ]

    def delete(self, session_id: str) -> None:
        """Drop the session's row (its memories are deleted by the store before)."""
        stored = self.stored_id(session_id)
        self._catalog.write(
            lambda c: c.execute("DELETE FROM sessions WHERE id = ?", (stored,)), what="deleting a session"
        )

    def lengths(self) -> SessionLengths:
        """The figures of :class:`SessionLengths`."""
        catalog = self._catalog
        recorded = int(catalog.read("SELECT count(*) FROM sessions")[0][0])
        with_memories, avg_n, avg_span = catalog.read(
            "SELECT count(*), avg(n), avg(span) FROM (SELECT count(*) AS n, max(created_at) - min(created_at) AS span "
            "FROM memories WHERE session_id IS NOT NULL GROUP BY session_id)"
        )[0]
        return SessionLengths(recorded, int(with_memories), avg_n, avg_span)


__all__ = ["Activity", "SessionLengths", "SessionRepository", "SessionSpan"]
