"""The repositories over the PostgreSQL catalog: the named queries of
:mod:`remindful.engine.repositories` (and :mod:`remindful.engine.captures`) with the same meaning,
in PostgreSQL's dialect. Every statement of this backend is in this package.

Each class answers what its SQLite namesake answers, with the same records
(:class:`~remindful.engine.repositories.sessions.SessionSpan`,
:class:`~remindful.engine.repositories.ledger.InjectionTotal`, ...), and ``tests/test_catalog_contract.py``
runs one contract over both. What this backend does not answer yet is listed in the package's
docstring.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from remindful.engine import call_history, perf
from remindful.engine import vectors as stored_vectors
from remindful.engine.captures import SALT_KEY, CaptureRepository, FileRecord, SessionEvent, salted_key
from remindful.engine.catalog import MemoryRow
from remindful.engine.importance import ImportanceInputs, inputs_from_row
from remindful.engine.postgres.catalog import PostgresCatalog, add_counts
from remindful.engine.postgres.dialect import pg_filter
from remindful.engine.postgres.schema import MEMORY_COLUMNS
from remindful.engine.projects import PROJECT_PREFIX, slug
from remindful.engine.redact import StoreRedactor
from remindful.engine.repositories.labels import label_sql
from remindful.engine.repositories.learning import Reinforcement
from remindful.engine.repositories.ledger import InjectionTotal
from remindful.engine.repositories.retention import Embedded, RetentionCandidate
from remindful.engine.repositories.scopes import RECORDED_PLACE
from remindful.engine.repositories.sessions import Activity, SessionLengths, SessionSpan, summary_sql
from remindful.engine.spool import DONE_KEEP_DAYS, HELD_KIND, Payload, encode
from remindful.engine.sqlfilter import SqlFilter, build_filter, scope_filter

Source = Callable[[], PostgresCatalog]

_LAST = "\U0010ffff"
RECENT_TOOL_CALLS = 20_000


def pg_field(key: str) -> str:
    """PostgreSQL's expression for the metadata value ``key`` as text (a key of the engine's own,
    never input): :func:`remindful.engine.repositories.labels.label_sql` names rows with it."""
    return f"(metadata::jsonb ->> '{key}')"


#: The newest actions created in a time range (its bounds and a limit are the first parameters).
RECENT_ACTIONS = 5000
_RECENT_ACTIONS = (
    "SELECT id, metadata, created_at FROM memories WHERE type = 'action' AND created_at BETWEEN %s AND %s "
    "ORDER BY created_at DESC LIMIT %s"
)
#: A failed call: metadata ``success`` false (or 0, as SQLite's JSON keeps a Python bool).
_FAILED = "(metadata::jsonb -> 'success') IN ('false'::jsonb, '0'::jsonb)"


class _Repository:
    def __init__(self, catalog: PostgresCatalog | Source) -> None:
        self._source: Source = (lambda: catalog) if isinstance(catalog, PostgresCatalog) else catalog

    @property
    def _catalog(self) -> PostgresCatalog:
        return self._source()

    def _write_each(self, sql: str, rows: Sequence[Sequence[Any]], *, what: str) -> None:
        """``sql`` once for each of ``rows``, in one write transaction (nothing when there are none)."""

        def run(conn: Any) -> None:
            with conn.cursor() as cur:
                cur.executemany(sql, rows)

        if rows:
            self._catalog.write(run, what=what)


class PostgresMemoryRepository(_Repository):
    """As :class:`~remindful.engine.repositories.memories.MemoryRepository`."""

    def rows(self, ids: Sequence[str]) -> dict[str, MemoryRow]:
        return self._catalog.get_rows(ids)

    def embeddings(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        return self._catalog.embeddings(ids)

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        return self._catalog.existing_ids(ids)

    def count(self, flt: SqlFilter | None = None) -> int:
        return self._catalog.count(flt)

    def some_ids(self, limit: int) -> list[str]:
        return [r[0] for r in self._catalog.read("SELECT id FROM memories LIMIT %s", (limit,))]

    def newest_ids(self, memory_type: str, since: float, limit: int) -> list[str]:
        rows = self._catalog.read(
            "SELECT id FROM memories WHERE type = %s AND created_at >= %s "
            "ORDER BY created_at DESC, rowid DESC LIMIT %s",
            (memory_type, since, limit),
        )
        return [r[0] for r in rows]

    def embedding_dimension(self) -> int | None:
        rows = self._catalog.read("SELECT embedding FROM memories WHERE embedding IS NOT NULL LIMIT 1")
        return stored_vectors.dimension(bytes(rows[0][0])) if rows else None

    def ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        rows = self._catalog.read(
            "SELECT id FROM memories WHERE id >= %s AND id < %s ORDER BY id LIMIT %s", (prefix, prefix + _LAST, limit)
        )
        return [str(r[0]) for r in rows]

    def id_neighbours(self, memory_id: str) -> tuple[str | None, str | None]:
        ((before, after),) = self._catalog.read(
            "SELECT (SELECT max(id) FROM memories WHERE id < %s), (SELECT min(id) FROM memories WHERE id > %s)",
            (memory_id, memory_id),
        )
        return before, after

    def workflow_with_pattern(self, pattern_key: str) -> str | None:
        rows = self._catalog.read(
            f"SELECT id FROM memories WHERE type = 'workflow' AND {pg_field('pattern_key')} = %s LIMIT 1",
            (pattern_key,),
        )
        return str(rows[0][0]) if rows else None

    def current_preferences(self, setting: str) -> list[str]:
        rows = self._catalog.read(
            f"SELECT id FROM memories WHERE source = 'config' AND {pg_field('setting')} = %s "
            "AND metadata::jsonb -> 'superseded_by' IS NULL",
            (setting,),
        )
        return [str(r[0]) for r in rows]

    def tool_calls(self, tool: str, limit: int) -> list[str]:
        rows = self._catalog.read(
            "SELECT id FROM (SELECT id, metadata, created_at FROM memories WHERE type = 'action' "
            "ORDER BY created_at DESC LIMIT %s) AS recent "
            f"WHERE coalesce({pg_field('tool')}, {pg_field('tool_name')}) = %s ORDER BY created_at DESC LIMIT %s",
            (RECENT_TOOL_CALLS, tool, limit),
        )
        return [str(r[0]) for r in rows]

    def relocate_attachments(self, old: str, new: str) -> None:
        self._catalog.write(
            lambda c: c.execute(
                "UPDATE memories SET metadata = replace(metadata, %s, %s) WHERE strpos(metadata, %s) > 0",
                (old, new, old),
            ),
            what="relocating attachment paths",
        )

    def clear_side_tables(self, detail: Mapping[str, Any]) -> None:
        catalog = self._catalog

        def run(conn: Any) -> None:
            for table in ("sessions", "spool", "file_hashes", "embedding_cache"):
                conn.execute(f"DELETE FROM {table}")
            conn.execute("SELECT remindful_forget_term_counts()")
            catalog.audit(conn, "clear_all", None, dict(detail))

        catalog.write(run, what="clearing the store")

    def page(self, after_rowid: int, limit: int) -> list[tuple[int, MemoryRow]]:
        """Up to ``limit`` memories above ``after_rowid``, in rowid order, with their vectors."""
        rows = self._catalog.read(
            f"SELECT rowid, {MEMORY_COLUMNS}, embedding FROM memories WHERE rowid > %s ORDER BY rowid LIMIT %s",
            (after_rowid, limit),
        )
        out = []
        for r in rows:
            row = MemoryRow.from_sql(r[1:])
            row.embedding = None if r[-1] is None else stored_vectors.decode(r[-1])
            out.append((int(r[0]), row))
        return out

    def insert_imported(self, rows: Sequence[MemoryRow], detail: Mapping[str, Any]) -> None:
        """Insert ``rows`` (ids, times and vectors kept, redacted as every write is), record their
        sessions and audit an ``import``, in one transaction."""
        catalog = self._catalog

        def run(conn: Any) -> None:
            catalog.insert_memories(conn, rows)
            for session_id, at in sorted({(r.session_id, r.created_at) for r in rows if r.session_id}):
                catalog.ensure_session(conn, session_id, at)
            catalog.audit(conn, "import", None, dict(detail))

        catalog.write(run, what="importing memories")


class PostgresSessionRepository(_Repository):
    """As :class:`~remindful.engine.repositories.sessions.SessionRepository` (spans, counts, lengths)."""

    def stored_id(self, session_id: str) -> str:
        return self._catalog.stored_session_id(session_id)

    def spans(self, session_id: str | None = None) -> list[SessionSpan]:
        catalog = self._catalog
        if session_id is not None:
            session_id = catalog.stored_session_id(session_id)
        where, args = ("session_id = %s", (session_id,)) if session_id is not None else ("session_id IS NOT NULL", ())
        found: dict[str, SessionSpan] = {}
        for sid, count, first, last in catalog.read(
            f"SELECT session_id, count(*), min(created_at), max(created_at) FROM memories WHERE {where} "
            "GROUP BY session_id",
            args,
        ):
            found[sid] = SessionSpan(sid, int(count), first, last)
        sql = "SELECT id, started_at, ended_at FROM sessions" + (" WHERE id = %s" if session_id is not None else "")
        for sid, started, ended in catalog.read(sql, args):
            span = found.setdefault(sid, SessionSpan(sid, 0, started, ended))
            span.start = min(span.start, started) if span.start is not None else started
            if ended is not None:
                span.end = ended
        return sorted(found.values(), key=lambda s: (-(s.start or 0.0), s.id))

    def count(self) -> int:
        ((count,),) = self._catalog.read(
            "SELECT count(*) FROM "
            "(SELECT session_id FROM memories WHERE session_id IS NOT NULL UNION SELECT id FROM sessions) s"
        )
        return int(count)

    def type_counts(self, ids: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
        where, args = ("session_id IS NOT NULL", ()) if ids is None else ("session_id = ANY(%s)", (list(ids),))
        out: dict[str, dict[str, int]] = {}
        for sid, memory_type, count in self._catalog.read(
            f"SELECT session_id, type, count(*) FROM memories WHERE {where} GROUP BY 1, 2", args
        ):
            out.setdefault(sid, {})[memory_type] = int(count)
        return out

    def exists(self, session_id: str) -> bool:
        return bool(self._catalog.read("SELECT 1 FROM sessions WHERE id = %s", (self.stored_id(session_id),)))

    def memory_count(self, session_id: str) -> int:
        return self._catalog.count(build_filter(session_id=self.stored_id(session_id)))

    def memory_ids(self, session_id: str, limit: int) -> list[str]:
        rows = self._catalog.read(
            "SELECT id FROM memories WHERE session_id = %s LIMIT %s", (self.stored_id(session_id), limit)
        )
        return [r[0] for r in rows]

    def delete(self, session_id: str) -> None:
        stored = self.stored_id(session_id)
        self._catalog.write(
            lambda c: c.execute("DELETE FROM sessions WHERE id = %s", (stored,)), what="deleting a session"
        )

    def activity(self, ids: Sequence[str] | None = None) -> list[Activity]:
        where, args = ("session_id IS NOT NULL", ()) if ids is None else ("session_id = ANY(%s)", (list(ids),))
        return [Activity(*row) for row in self._catalog.read(summary_sql(where, pg_field), args * 3)]

    def ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        end = prefix + _LAST
        rows = self._catalog.read(
            "SELECT id FROM (SELECT DISTINCT session_id AS id FROM memories WHERE session_id >= %s AND session_id < %s "
            "UNION SELECT id FROM sessions WHERE id >= %s AND id < %s) AS found ORDER BY id LIMIT %s",
            (prefix, end, prefix, end, limit),
        )
        return [str(r[0]) for r in rows]

    def id_neighbours(self, session_id: str) -> tuple[str | None, str | None]:
        ((before, after),) = self._catalog.read(
            "SELECT (SELECT max(x) FROM (SELECT max(session_id) AS x FROM memories WHERE session_id < %s "
            "UNION ALL SELECT max(id) FROM sessions WHERE id < %s) AS b), "
            "(SELECT min(x) FROM (SELECT min(session_id) AS x FROM memories WHERE session_id > %s "
            "UNION ALL SELECT min(id) FROM sessions WHERE id > %s) AS a)",
            (session_id, session_id, session_id, session_id),
        )
        return before, after

    def lengths(self) -> SessionLengths:
        catalog = self._catalog
        recorded = int(catalog.read("SELECT count(*) FROM sessions")[0][0])
        with_memories, avg_n, avg_span = catalog.read(
            "SELECT count(*), avg(n)::float8, avg(span)::float8 FROM (SELECT count(*) AS n, "
            "max(created_at) - min(created_at) AS span FROM memories WHERE session_id IS NOT NULL "
            "GROUP BY session_id) s"
        )[0]
        return SessionLengths(recorded, int(with_memories), avg_n, avg_span)


class PostgresScopeRepository(_Repository):
    """As :class:`~remindful.engine.repositories.scopes.ScopeRepository`."""

    def counts(self) -> dict[str | None, int]:
        return self._catalog.scope_counts()

    def projects(self) -> dict[str, tuple[str, str]]:
        rows = self._catalog.read("SELECT key, name, root FROM projects")
        return {PROJECT_PREFIX + key: (str(name), str(root)) for key, name, root in rows}

    def project_root(self, key: str) -> str | None:
        rows = self._catalog.read("SELECT root FROM projects WHERE key = %s", (key,))
        return str(rows[0][0]) if rows else None

    def recorded(self, text: str) -> bool:
        return bool(self._catalog.read(RECORDED_PLACE, (text,) * 4))

    def bindings(self) -> Mapping[str, tuple[str, str]]:
        rows = self._catalog.read("SELECT root, key, name FROM project_bindings")
        return {str(root): (str(key), str(name)) for root, key, name in rows}

    def bind(self, directory: str, key: str, name: str) -> None:
        catalog = self._catalog
        row = (catalog.redaction.text(directory), key, catalog.redaction.text(name), time.time())
        catalog.write(
            lambda conn: conn.execute(
                "INSERT INTO project_bindings (root, key, name, bound_at) VALUES (%s, %s, %s, %s) ON CONFLICT (root) "
                "DO UPDATE SET key = excluded.key, name = excluded.name, bound_at = excluded.bound_at",
                row,
            ),
            what="binding a directory to a project",
        )

    def unbind(self, directory: str) -> bool:
        catalog = self._catalog
        root = catalog.redaction.text(directory)
        return bool(
            catalog.write(
                lambda conn: conn.execute("DELETE FROM project_bindings WHERE root = %s", (root,)).rowcount,
                what="unbinding a directory",
            )
        )

    def find(self, name: str) -> str | None:
        """The scope of the project ``name`` names (key, name in any case, or the key it starts)."""
        wanted = name.strip()
        held = {s for s in self.counts() if s is not None and s.startswith(PROJECT_PREFIX)}
        if PROJECT_PREFIX + wanted in held:
            return PROJECT_PREFIX + wanted
        named = {s for s, (n, _root) in self.projects().items() if s in held and n.lower() == wanted.lower()}
        if named:
            return named.pop() if len(named) == 1 else None
        key = slug(wanted)
        if not key:
            return None
        if PROJECT_PREFIX + key in held:
            return PROJECT_PREFIX + key
        starting = [s for s in held if s[len(PROJECT_PREFIX) :].startswith(key + "-")]
        return starting[0] if len(starting) == 1 else None

    def by_type(self, scopes: Sequence[str | None] | None) -> dict[str, int]:
        where, params = pg_filter(build_filter(scopes=scopes))
        rows = self._catalog.read(f"SELECT type, count(*) FROM memories WHERE {where} GROUP BY type", params)
        return {str(t): int(n) for t, n in rows}


class PostgresLedgerRepository(_Repository):
    """As :class:`~remindful.engine.repositories.ledger.LedgerRepository`."""

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
        catalog = self._catalog
        if session_id is not None:
            session_id = catalog.stored_session_id(session_id)
        if project is not None:
            project = catalog.redaction.text(project)
        catalog.write(
            lambda conn: conn.execute(
                "INSERT INTO injections (at, session_id, project, event, tokens, memory_ids) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (at, session_id, project, event, int(tokens), json.dumps(list(memory_ids))),
            ),
            what="recording injected context",
        )

    def total(self) -> InjectionTotal:
        return self._totals(None, 1)[0]

    def by_project(self, limit: int = 20) -> list[InjectionTotal]:
        return self._totals("project", limit)

    def by_session(self, limit: int = 20) -> list[InjectionTotal]:
        return self._totals("session_id", limit)

    def _totals(self, column: str | None, limit: int) -> list[InjectionTotal]:
        ids = "json_array_length(memory_ids::json)"
        if column is None:
            sql = f"SELECT NULL, count(*), coalesce(sum(tokens), 0), coalesce(sum({ids}), 0), max(at) FROM injections"
        else:  # column is one of two names, never input
            order = "3 DESC, 5 DESC" if column == "project" else "5 DESC"
            sql = (
                f"SELECT {column}, count(*), sum(tokens), sum({ids}), max(at) "
                f"FROM injections GROUP BY {column} ORDER BY {order} LIMIT %s"
            )
        rows = self._catalog.read(sql, () if column is None else (limit,))
        return [
            InjectionTotal(None if key is None else str(key), int(n), int(tokens), int(memories), at)
            for key, n, tokens, memories, at in rows
        ]


_APPEND = (
    "INSERT INTO spool (idem_key, kind, payload, created_at) SELECT %s, %s, %s, %s "
    "WHERE NOT EXISTS (SELECT 1 FROM spool_done WHERE idem_key = %s) ON CONFLICT (idem_key) DO NOTHING"
)


def _done(conn: Any, key: str, at: float) -> None:
    conn.execute(
        "INSERT INTO spool_done (idem_key, done_at) VALUES (%s, %s) "
        "ON CONFLICT (idem_key) DO UPDATE SET done_at = excluded.done_at",
        (key, at),
    )


class PostgresCaptureRepository(_Repository):
    """As :class:`~remindful.engine.captures.CaptureRepository`: the spool every machine's drainer
    hands its events to (a replayed key is ignored, drained or not), the tombstones, the capture
    counts, the sessions' events and the Markdown watcher's files."""

    # -- the spool ---------------------------------------------------------------------------------

    def append(
        self, key: str, kind: str, record: Payload | Mapping[str, Any], created_at: float, *, redaction: StoreRedactor
    ) -> None:
        """Spool one record unless its key is spooled already or was drained (a replay)."""
        payload = record if isinstance(record, Payload) else encode(record, redaction)
        self._catalog.write(
            lambda conn: conn.execute(_APPEND, (key, kind, payload, created_at, key)), what="spooling an event"
        )

    def spool_waiting(self, max_attempts: int, hold_before: float | None = None) -> bool:
        if hold_before is None:
            return bool(self._catalog.read("SELECT 1 FROM spool WHERE attempts < %s LIMIT 1", (max_attempts,)))
        return bool(
            self._catalog.read(
                "SELECT 1 FROM spool WHERE attempts < %s AND (kind != %s OR created_at < %s) LIMIT 1",
                (max_attempts, HELD_KIND, hold_before),
            )
        )

    def claim(
        self, *, after: int, limit: int, max_attempts: int, payload_limit: int, hold_before: float | None = None
    ) -> list[tuple[int, str, str, str | None, float, int]]:
        """The next spooled rows, oldest first (see :func:`remindful.engine.spool.claim`)."""
        held = "" if hold_before is None else " AND (kind != %s OR created_at < %s)"
        rows = self._catalog.read(
            "SELECT seq, idem_key, kind, CASE WHEN octet_length(payload) > %s THEN NULL ELSE payload END, "
            f"created_at, attempts FROM spool WHERE attempts < %s AND seq > %s{held} ORDER BY seq LIMIT %s",
            (payload_limit, max_attempts, after, *(() if hold_before is None else (HELD_KIND, hold_before)), limit),
        )
        return [tuple(r) for r in rows]

    def finish_spooled(
        self,
        *,
        done: Sequence[tuple[int, str]],
        consumed: Iterable[str] = (),
        failures: Mapping[int, str] = {},
        hopeless: Iterable[int] = (),
        sessions: Sequence[SessionEvent] = (),
        at: float,
    ) -> None:
        """As :meth:`CaptureRepository.finish_spooled <remindful.engine.captures.CaptureRepository.finish_spooled>`."""
        hopeless = set(hopeless)
        catalog = self._catalog

        def run(conn: Any) -> None:
            for seq, key in done:
                conn.execute("DELETE FROM spool WHERE seq = %s", (seq,))
                _done(conn, key, at)
            for key in consumed:
                conn.execute("DELETE FROM spool WHERE idem_key = %s", (key,))
                _done(conn, key, at)
            for event in sessions:
                changes = dict(event.changes)
                meta = catalog.session_metadata(event.session_id, conn)
                meta.update({k: v for k, v in changes.items() if v is not None})
                for key in [k for k, v in changes.items() if v is None]:
                    meta.pop(key, None)
                catalog.upsert_session(conn, event.session_id, event.at, metadata=meta, ended=event.ended)
            for seq, error in failures.items():
                if seq in hopeless:
                    conn.execute(
                        "INSERT INTO spool_done (idem_key, done_at) SELECT idem_key, %s FROM spool WHERE seq = %s "
                        "ON CONFLICT (idem_key) DO UPDATE SET done_at = excluded.done_at",
                        (at, seq),
                    )
                    conn.execute("DELETE FROM spool WHERE seq = %s", (seq,))
                else:
                    conn.execute(
                        "UPDATE spool SET attempts = attempts + 1, last_error = %s WHERE seq = %s", (error[:2000], seq)
                    )
            if any(seq % 500 == 0 for seq, _ in done):
                conn.execute("DELETE FROM spool_done WHERE done_at < %s", (at - DONE_KEEP_DAYS * 86400,))

        catalog.write(run, what="finishing spooled events")

    def count(self, counts: Mapping[str, int], *, excluded: tuple[str | None, str] | None = None) -> None:
        catalog = self._catalog

        def run(conn: Any) -> None:
            add_counts(conn, dict(counts))
            if excluded is not None:
                catalog.audit(conn, "capture_excluded", None, {"session_id": excluded[0], "reason": excluded[1]})

        catalog.write(run, what="recording capture filter counts")

    def spooled_row(self, seq: int) -> tuple[str, str, str, float] | None:
        rows = self._catalog.read("SELECT idem_key, kind, payload, created_at FROM spool WHERE seq = %s", (seq,))
        return (str(rows[0][0]), str(rows[0][1]), str(rows[0][2]), float(rows[0][3])) if rows else None

    def import_spooled(self, records: Sequence[tuple[str, str, str, float]]) -> None:
        """Spool ``(key, kind, payload, created_at)`` records, replays ignored."""

        def run(conn: Any) -> None:
            for key, kind, payload, created_at in records:
                conn.execute(_APPEND, (key, kind, payload, created_at, key))

        if records:
            self._catalog.write(run, what="importing spooled events")

    def session_metadata(self, session_id: str) -> dict[str, Any]:
        return self._catalog.session_metadata(session_id)

    def update_session(self, event: SessionEvent) -> None:
        self.finish_spooled(done=(), sessions=(event,), at=event.at)

    # -- the memories a capture relates to ------------------------------------------------------------

    def stored_with(self, content_hash: str, session_id: str) -> list[tuple[str, dict[str, Any]]]:
        return self._catalog.stored_with(content_hash, session_id)

    def has_chunked_response(self, session_id: str, full_content_hash: str) -> bool:
        return self._catalog.has_chunked_response(session_id, full_content_hash)

    def call_memory(self, session_id: str, tool_use_id: str) -> str | None:
        rows = self._catalog.read(
            "SELECT id FROM memories WHERE session_id = %s AND metadata::jsonb ->> 'tool_use_id' = %s "
            "ORDER BY created_at LIMIT 1",
            (self._catalog.stored_session_id(session_id), tool_use_id),
        )
        return str(rows[0][0]) if rows else None

    def file_activity(
        self, file: str, *, since: float, before: float, kinds: Sequence[str]
    ) -> list[tuple[str, dict[str, Any]]]:
        rows = self._catalog.read(
            f"SELECT id, metadata FROM ({_RECENT_ACTIONS}) AS recent WHERE metadata::jsonb ->> 'file' = %s "
            "AND metadata::jsonb ->> 'kind' = ANY(%s) AND metadata::jsonb -> 'superseded_by' IS NULL "
            "ORDER BY created_at",
            (since, before, RECENT_ACTIONS, file, list(kinds)),
        )
        return [(str(mid), json.loads(meta)) for mid, meta in rows]

    # -- earlier outcomes of a call (the PreToolUse warning) ------------------------------------

    def project_root(self, key: str) -> str | None:
        rows = self._catalog.read("SELECT root FROM projects WHERE key = %s", (key,))
        return str(rows[0][0]) if rows else None

    def spooled_outcomes(self) -> list[tuple[str, float]]:
        rows = self._catalog.read(
            "SELECT payload, created_at FROM spool WHERE kind = ANY(%s) ORDER BY seq DESC LIMIT %s",
            (list(call_history.OUTCOME_KINDS), call_history.RECENT_SPOOLED),
        )
        return [(str(r[0]), float(r[1])) for r in rows]

    def stored_calls(self, scope: str, tool: str, arguments: dict[str, Any]) -> list[tuple[str, str, float]]:
        """As :func:`remindful.engine.call_history.stored_calls`: each key argument's JSON value
        equal to the stored one."""
        keys = sorted(arguments)
        same = "".join(" AND (metadata::jsonb -> 'arguments' -> %s) = %s::jsonb" for _ in keys)
        params: list[Any] = [scope, call_history.RECENT_MEMORIES, tool]
        for key in keys:
            params += [key, json.dumps(arguments[key])]
        rows = self._catalog.read(
            "SELECT content, metadata, created_at FROM (SELECT content, metadata, created_at, type FROM memories "
            "WHERE scope = %s ORDER BY created_at DESC LIMIT %s) m "
            f"WHERE type = 'action' AND metadata::jsonb ->> 'tool_name' = %s{same} ORDER BY created_at DESC",
            params,
        )
        return [(str(r[0]), str(r[1]), float(r[2])) for r in rows]

    def unresolved_failures(self, tool: str, *, since: float, before: float) -> list[tuple[str, dict[str, Any]]]:
        rows = self._catalog.read(
            f"SELECT id, metadata FROM ({_RECENT_ACTIONS}) AS recent "
            "WHERE coalesce(metadata::jsonb ->> 'tool_name', metadata::jsonb ->> 'tool') = %s "
            f"AND {_FAILED} AND metadata::jsonb -> 'resolved_by' IS NULL ORDER BY created_at",
            (since, before, RECENT_ACTIONS, tool),
        )
        return [(str(mid), json.loads(meta)) for mid, meta in rows]

    def mentioning(
        self, word: str, *, project: str | None, since: float, before: float, limit: int
    ) -> list[tuple[str, str, str, str, dict[str, Any]]]:
        rows = self._catalog.read(
            "SELECT id, type, source, content, metadata FROM memories "
            "WHERE content_tsv @@ plainto_tsquery('english', %s) AND created_at BETWEEN %s AND %s "
            "AND (%s::text IS NULL OR metadata::jsonb ->> 'project_id' = %s) "
            "AND metadata::jsonb -> 'superseded_by' IS NULL ORDER BY created_at DESC LIMIT %s",
            (word, since, before, project, project, limit + 1),
        )
        return [(str(i), str(t), str(src), str(text), json.loads(meta)) for i, t, src, text, meta in rows]

    def chunk_ids_of(self, path: str) -> list[str]:
        rows = self._catalog.read(
            "SELECT id FROM memories WHERE type = 'document' AND source = 'md_file' "
            "AND metadata::jsonb ->> 'file_path' = %s",
            (path,),
        )
        return [str(r[0]) for r in rows]

    # -- tombstones ---------------------------------------------------------------------------------

    def bury(self, graves: Mapping[str, tuple[str | None, str]], at: float) -> None:
        """As the SQLite repository's: stored keyed with the store's salt, made with the first
        tombstone (the bare tombstones written before re-keyed in the same transaction; a process
        making it at the same moment waits on the row and then uses the one made first)."""
        if not graves:
            return

        def run(conn: Any) -> None:
            salt = self._salt(conn)
            rows = [(salted_key(salt, key), at, reason, memory_id) for key, (memory_id, reason) in graves.items()]
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO tombstones (key, buried_at, reason, memory_id) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT (key) DO NOTHING",
                    rows,
                )

        self._catalog.write(run, what="recording what was forgotten")

    def buried(self, keys: Iterable[str]) -> set[str]:
        wanted = self._stored_keys(keys)
        if not wanted:
            return set()
        stored = list(wanted.values())
        found = {str(r[0]) for r in self._catalog.read("SELECT key FROM tombstones WHERE key = ANY(%s)", (stored,))}
        return {key for key, kept_as in wanted.items() if kept_as in found}

    def unbury(self, keys: Iterable[str]) -> int:
        wanted = list(self._stored_keys(keys).values())
        if not wanted:
            return 0
        return int(
            self._catalog.write(
                lambda conn: conn.execute("DELETE FROM tombstones WHERE key = ANY(%s)", (wanted,)).rowcount,
                what="lifting tombstones",
            )
        )

    def tombstones(self) -> int:
        return int(self._catalog.read("SELECT count(*) FROM tombstones")[0][0])

    def _stored_keys(self, keys: Iterable[str]) -> dict[str, str]:
        rows = self._catalog.read("SELECT value FROM meta WHERE key = %s", (SALT_KEY,))
        salt = bytes.fromhex(rows[0][0]) if rows else None
        return {key: key if salt is None else salted_key(salt, key) for key in dict.fromkeys(keys)}

    @staticmethod
    def _salt(conn: Any) -> bytes:
        """The store's salt, made now (with the bare tombstones re-keyed) if there is none."""
        found = conn.execute("SELECT value FROM meta WHERE key = %s", (SALT_KEY,)).fetchone()
        if found:
            return bytes.fromhex(found[0])
        made = os.urandom(32)
        inserted = conn.execute(
            "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING", (SALT_KEY, made.hex())
        ).rowcount
        if not inserted:  # another process made it first
            return bytes.fromhex(conn.execute("SELECT value FROM meta WHERE key = %s", (SALT_KEY,)).fetchone()[0])
        bare = [str(r[0]) for r in conn.execute("SELECT key FROM tombstones").fetchall()]
        with conn.cursor() as cur:
            cur.executemany("UPDATE tombstones SET key = %s WHERE key = %s", [(salted_key(made, k), k) for k in bare])
        return made

    # -- the Markdown watcher's files ------------------------------------------------------------------

    def file_record(self, path: str) -> FileRecord | None:
        rows = self._catalog.read("SELECT sha256, memory_ids FROM file_hashes WHERE path = %s", (path,))
        if not rows:
            return None
        return FileRecord(path, str(rows[0][0]), tuple(json.loads(rows[0][1] or "[]")))

    def record_file(self, record: FileRecord, at: float) -> None:
        self._catalog.write(
            lambda conn: conn.execute(
                "INSERT INTO file_hashes (path, sha256, memory_ids, updated_at) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (path) DO UPDATE SET sha256 = excluded.sha256, memory_ids = excluded.memory_ids, "
                "updated_at = excluded.updated_at",
                (record.path, record.sha256, json.dumps(list(record.memory_ids)), at),
            ),
            what="recording an indexed file",
        )

    def forget_file(self, path: str) -> None:
        self._catalog.write(
            lambda conn: conn.execute("DELETE FROM file_hashes WHERE path = %s", (path,)), what="forgetting a file"
        )

    def file_paths(self) -> list[str]:
        return [str(r[0]) for r in self._catalog.read("SELECT path FROM file_hashes")]

    def files_indexed(self) -> int:
        return int(self._catalog.read("SELECT count(*) FROM file_hashes")[0][0])


class PostgresStatsRepository(_Repository):
    """As :class:`~remindful.engine.repositories.stats.StatsRepository` (the counts it reads)."""

    def most_frequent(self, memory_type: str, keys: tuple[str, ...], window: int, top: int) -> list[tuple[str, int]]:
        rows = self._catalog.read(
            "SELECT label, count(*) FROM ("
            f"SELECT {label_sql(keys, value_of=pg_field)} AS label FROM memories WHERE type = %s "
            "ORDER BY created_at DESC LIMIT %s) AS recent WHERE label IS NOT NULL GROUP BY label "
            "ORDER BY 2 DESC, 1 LIMIT %s",
            (memory_type, window, top),
        )
        return [(str(name), int(n)) for name, n in rows]

    def recent_names(self, memory_type: str, keys: tuple[str, ...], window: int) -> list[tuple[Any, ...]]:
        sql = (
            f"SELECT {label_sql(keys, content=False, value_of=pg_field)}, "
            f"coalesce({pg_field('tool_name')}, {pg_field('tool')}), metadata::jsonb -> 'arguments', "
            f"{pg_field('file')}, substr(content, 1, 200) "
            "FROM memories WHERE type = %s ORDER BY created_at DESC LIMIT %s"
        )
        rows = self._catalog.read(sql, (memory_type, window))
        # As SQLite's json_extract gives them: a string as itself, anything else as compact JSON.
        return [
            (a, b, c if c is None or isinstance(c, str) else json.dumps(c, separators=(",", ":")), d, e)
            for a, b, c, d, e in rows
        ]

    def newest_rowid(self) -> int | None:
        value = self._catalog.read("SELECT max(rowid) FROM memories")[0][0]
        return None if value is None else int(value)

    def captures_per_day(self, since: float) -> dict[str, int]:
        rows = self._catalog.read(
            "SELECT to_char(to_timestamp(created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD'), count(*) FROM memories "
            "WHERE created_at >= %s GROUP BY 1",
            (since,),
        )
        return {day: int(n) for day, n in rows}

    def spool_pending(self) -> int:
        return int(self._catalog.read("SELECT count(*) FROM spool")[0][0])

    def unindexed(self) -> int:
        return int(self._catalog.read("SELECT count(*) FROM memories WHERE indexed = 0")[0][0])

    def capture_counts(self) -> dict[str, int]:
        return {k: v for k, v in self._counters().items() if not k.startswith(perf.PREFIX)}

    def perf_counts(self) -> dict[str, int]:
        return {k: v for k, v in self._counters().items() if k.startswith(perf.PREFIX)}

    def _counters(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self._catalog.read("SELECT name, value FROM capture_stats ORDER BY name")}

    def files_indexed(self) -> int:
        return int(self._catalog.read("SELECT count(*) FROM file_hashes")[0][0])


class PostgresBriefRepository(_Repository):
    """As :class:`~remindful.engine.repositories.brief.BriefRepository`."""

    def knowledge(
        self, scopes: Sequence[str | None] | None, *, since: float, now: float, limit: int
    ) -> list[MemoryRow]:
        where, params = _in_scopes(scopes)
        rows = self._catalog.read(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE type = 'knowledge' AND created_at >= %s "
            f"AND {_CURRENT} AND ({where}) ORDER BY created_at DESC, rowid DESC LIMIT %s",
            (since, now, *params, limit),
        )
        return [MemoryRow.from_sql(r) for r in rows]

    def open_failures(
        self, scopes: Sequence[str | None] | None, *, since: float, now: float, limit: int
    ) -> list[MemoryRow]:
        where, params = _in_scopes(scopes)
        rows = self._catalog.read(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE rowid IN ("
            "SELECT rowid FROM memories WHERE type = 'action' AND created_at >= %s "
            "ORDER BY created_at DESC LIMIT %s) "
            f"AND {_FAILED} AND metadata::jsonb -> 'resolved_by' IS NULL "
            f"AND {_CURRENT} AND ({where}) ORDER BY created_at DESC, rowid DESC LIMIT %s",
            (since, RECENT_ACTIONS, now, *params, limit),
        )
        return [MemoryRow.from_sql(r) for r in rows]


_CURRENT = "metadata::jsonb -> 'superseded_by' IS NULL AND (expires_at IS NULL OR expires_at > %s)"


def _in_scopes(scopes: Sequence[str | None] | None) -> tuple[str, tuple[Any, ...]]:
    return pg_filter(SqlFilter() if scopes is None else scope_filter(scopes))


class PostgresLearningRepository(_Repository):
    """As :class:`~remindful.engine.repositories.learning.LearningRepository`."""

    def add_to_counters(self, counts: Mapping[tuple[str, str], float]) -> None:
        text = self._catalog.redaction.text
        items = [(kind, text(key), value) for (kind, key), value in counts.items() if value]
        self._write_each(
            "INSERT INTO learning_counters AS c (kind, key, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (kind, key) DO UPDATE SET value = c.value + excluded.value",
            items,
            what="counting captures",
        )

    def counters(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for kind, key, value in self._catalog.read("SELECT kind, key, value FROM learning_counters ORDER BY kind, key"):
            out.setdefault(kind, {})[key] = int(value) if float(value).is_integer() else float(value)
        return out

    def counter(self, kind: str, key: str) -> float:
        rows = self._catalog.read("SELECT value FROM learning_counters WHERE kind = %s AND key = %s", (kind, key))
        return float(rows[0][0]) if rows else 0

    def reinforce(self, memory_id: str, step: float, *, reason: str, query: str | None, at: float) -> float | None:
        redaction = self._catalog.redaction
        reason = redaction.text(reason)
        query = None if query is None else redaction.text(query)

        def run(conn: Any) -> float | None:
            row = conn.execute("SELECT importance FROM memories WHERE id = %s FOR UPDATE", (memory_id,)).fetchone()
            if row is None:
                return None
            importance = min(1.0, float(row[0]) + step)
            conn.execute(
                "UPDATE memories SET importance = %s, access_count = access_count + 1, last_accessed = %s "
                "WHERE id = %s",
                (importance, at, memory_id),
            )
            conn.execute(
                "INSERT INTO reinforcements (memory_id, at, reason, query, importance) VALUES (%s, %s, %s, %s, %s)",
                (memory_id, at, reason, query, importance),
            )
            return importance

        return self._catalog.write(run, what="reinforcing a memory")

    def reinforcements(self, memory_id: str) -> list[Reinforcement]:
        rows = self._catalog.read(
            "SELECT at, reason, query, importance FROM reinforcements WHERE memory_id = %s ORDER BY seq", (memory_id,)
        )
        return [Reinforcement(*row) for row in rows]

    def reinforcement_count(self) -> int:
        return int(self._catalog.read("SELECT count(*) FROM reinforcements")[0][0])


def _json_true(key: str) -> str:
    """Whether the metadata value ``key`` is the JSON boolean ``true`` (SQLite's ``json_type(..) = 'true'``)."""
    return f"coalesce((metadata::jsonb -> '{key}') = 'true'::jsonb, FALSE)"


def _json_bool(key: str) -> str:
    """SQLite's ``json_type(metadata, '$.KEY')`` as far as
    :func:`~remindful.engine.importance.inputs_from_row` reads it: ``'true'``, ``'false'`` or NULL."""
    value = f"(metadata::jsonb -> '{key}')"
    return f"CASE WHEN {value} = 'true'::jsonb THEN 'true' WHEN {value} = 'false'::jsonb THEN 'false' END"


#: :data:`remindful.engine.importance.COLUMNS` in PostgreSQL's dialect (the confirmations of the
#: ``reinforcements`` table counted, as :func:`~remindful.engine.importance.columns` does).
_IMPORTANCE_COLUMNS = (
    f"id, type, created_at, bookmarked, source, {_json_bool('success')}, "
    "CASE WHEN jsonb_typeof(metadata::jsonb -> 'reinforcement_count') = 'number' "
    "THEN (metadata::jsonb ->> 'reinforcement_count')::double precision ELSE 0 END "
    "+ (SELECT count(*) FROM reinforcements WHERE reinforcements.memory_id = memories.id), "
    f"{_json_bool('manual_save')}, access_count, last_accessed, importance"
)
#: The meta key of the last cleanup's report: the store's (its admin's) own, or a person's.
_LAST_CLEANUP = "last_cleanup"


class PostgresRetentionRepository(_Repository):
    """As :class:`~remindful.engine.repositories.retention.RetentionRepository`, over the memories
    this catalog's retention policy governs (its *reach*):

    - opened without a token (the store's single user before the team has people, or the
      store's admin: the owner role that row-level security does not bind): every memory, as on
      SQLite: its ``retention.*`` settings are the team's policy;
    - opened with a person's token: the memories that person wrote outside any project (their
      user scope, and the unscoped ones); a project's memories are the team's and no member's
      local settings clean them. The database refuses a member's deletion recorded as a policy's
      (audit action ``retention:*`` or ``dedup``) of any other memory (schema version 8), and
      row-level security hides the others' private memories anyway.

    Dedup compares, and quotas count, the reach only; each person keeps their own last cleanup."""

    def _reach(self) -> tuple[str, tuple[Any, ...]]:
        """The policy's memories as a condition and its parameters."""
        person = self._catalog.person
        if person is None:
            return "TRUE", ()
        return "(author = %s AND coalesce(scope, '') NOT LIKE 'project:%%')", (person,)

    def _meta_key(self) -> str:
        person = self._catalog.person
        return _LAST_CLEANUP if person is None else f"{_LAST_CLEANUP}:{person}"

    def candidates(self) -> list[RetentionCandidate]:
        reach, params = self._reach()
        rows = self._catalog.read(
            f"SELECT id, type, created_at, expires_at, size_bytes, {_json_true('success')}, "
            "type = 'screen' AND (metadata::jsonb -> 'consolidation') IS NOT NULL, source = 'manual' "
            f"FROM memories WHERE bookmarked = 0 AND {reach}",
            params,
        )
        return [RetentionCandidate(r[0], r[1], r[2], r[3], r[4], bool(r[5]), bool(r[6]), bool(r[7])) for r in rows]

    def importance_inputs(self, ids: Sequence[str]) -> dict[str, ImportanceInputs]:
        found: dict[str, ImportanceInputs] = {}
        for start in range(0, len(ids), 1000):
            rows = self._catalog.read(
                f"SELECT {_IMPORTANCE_COLUMNS} FROM memories WHERE id = ANY(%s)", (list(ids[start : start + 1000]),)
            )
            found.update((r[0], inputs_from_row(r)) for r in rows)
        return found

    def unbookmarked(
        self, memory_type: str, *, above_rowid: int = 0, ids: Sequence[str] | None = None
    ) -> list[tuple[ImportanceInputs, str, int]]:
        reach, mine = self._reach()
        select = f"SELECT {_IMPORTANCE_COLUMNS}, rowid FROM memories WHERE bookmarked = 0 AND {reach}"
        if ids is not None:
            rows = self._catalog.read(f"{select} AND id = ANY(%s)", (*mine, list(ids)))
        else:
            rows = self._catalog.read(f"{select} AND type = %s AND rowid > %s", (*mine, memory_type, above_rowid))
        return [(inputs_from_row(r), str(r[0]), int(r[-1])) for r in rows]

    def count_in_reach(self, memory_type: str) -> int | None:
        if self._catalog.person is None:
            return None
        reach, mine = self._reach()
        sql = f"SELECT count(*) FROM memories WHERE type = %s AND {reach}"
        return int(self._catalog.read(sql, (memory_type, *mine))[0][0])

    def types(self, flt: SqlFilter) -> list[str]:
        where, params = pg_filter(flt)
        reach, mine = self._reach()
        rows = self._catalog.read(f"SELECT DISTINCT type FROM memories WHERE ({where}) AND {reach}", (*params, *mine))
        return [r[0] for r in rows]

    def embedded(self, memory_type: str, flt: SqlFilter) -> list[Embedded]:
        where, params = pg_filter(flt)
        reach, mine = self._reach()
        rows = self._catalog.read(
            f"SELECT id, bookmarked, embedding, scope FROM memories "
            f"WHERE type = %s AND ({where}) AND {reach} AND embedding IS NOT NULL",
            (memory_type, *params, *mine),
        )
        return [Embedded(r[0], bool(r[1]), bytes(r[2]), r[3]) for r in rows]

    def total_bytes(self) -> int:
        reach, params = self._reach()
        return int(self._catalog.read(f"SELECT coalesce(sum(size_bytes), 0) FROM memories WHERE {reach}", params)[0][0])

    def counts_in_reach(self) -> dict[str, int] | None:
        if self._catalog.person is None:
            return None
        reach, params = self._reach()
        rows = self._catalog.read(f"SELECT type, count(*) FROM memories WHERE {reach} GROUP BY type", params)
        return {str(t): int(n) for t, n in rows}

    def protected_before(self, created_before: float) -> int:
        reach, params = self._reach()
        return int(
            self._catalog.read(
                "SELECT count(*) FROM memories WHERE (bookmarked = 1 OR source = 'manual') AND created_at < %s "
                f"AND {reach}",
                (created_before, *params),
            )[0][0]
        )

    def record_consolidations(self, updates: Sequence[tuple[str, float, str]]) -> None:
        """As on SQLite, and each representative's version raised (a correction made on a copy
        read before the merge is refused: :class:`~remindful.errors.StaleVersionError`)."""
        value = self._catalog.redaction.value
        rows = [(json.dumps(value(json.loads(meta)), ensure_ascii=False), at, mid) for meta, at, mid in updates]
        self._write_each(
            "UPDATE memories SET metadata = %s, updated_at = %s, indexed = 0, version = version + 1 WHERE id = %s",
            rows,
            what="recording dedup consolidation",
        )

    def record_cleanup(self, report: dict[str, Any]) -> None:
        key, summary = self._meta_key(), json.dumps(report)
        self._catalog.write(
            lambda c: c.execute(
                "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, summary),
            ),
            what="recording the cleanup",
        )

    def last_cleanup(self) -> dict[str, Any] | None:
        rows = self._catalog.read("SELECT value FROM meta WHERE key = %s", (self._meta_key(),))
        report: dict[str, Any] | None = json.loads(rows[0][0]) if rows else None
        return report


class MachineSpoolCaptureRepository(PostgresCaptureRepository):
    """The captures of a store on a shared catalog as one machine sees them: the spool is the
    machine's own (``<storage>/catalog.sqlite3``, where its hooks and capture points spool whether
    the server answers or not: the acknowledgement), everything else is the server's.

    The machine's drainer takes its spool's rows, stores them through the store's write path on
    the server, and only then finishes them in the local spool (:meth:`finish_spooled`: the
    sessions' events on the server, then the rows locally). A server that does not answer leaves
    the rows in the local spool (bounded by the disk; ``doctor`` and the brief warn); a drain that
    stopped between the server's commit and the local one finds the memories stored with the
    rows' spool keys and does not store them again (:mod:`remindful.services.ingest.drainer`)."""

    def __init__(self, catalog: PostgresCatalog | Source, spool: CaptureRepository) -> None:
        super().__init__(catalog)
        self.spool = spool

    def append(
        self, key: str, kind: str, record: Payload | Mapping[str, Any], created_at: float, *, redaction: StoreRedactor
    ) -> None:
        payload = record if isinstance(record, Payload) else encode(record, redaction)
        self.spool.import_spooled([(key, kind, str(payload), created_at)])

    def spool_waiting(self, max_attempts: int, hold_before: float | None = None) -> bool:
        return self.spool.spool_waiting(max_attempts, hold_before)

    def spooled_outcomes(self) -> list[tuple[str, float]]:
        return self.spool.spooled_outcomes()

    def claim(
        self, *, after: int, limit: int, max_attempts: int, payload_limit: int, hold_before: float | None = None
    ) -> list[tuple[int, str, str, str | None, float, int]]:
        return self.spool.claim(
            after=after, limit=limit, max_attempts=max_attempts, payload_limit=payload_limit, hold_before=hold_before
        )

    def spooled_row(self, seq: int) -> tuple[str, str, str, float] | None:
        return self.spool.spooled_row(seq)

    def import_spooled(self, records: Sequence[tuple[str, str, str, float]]) -> None:
        self.spool.import_spooled(records)

    def finish_spooled(
        self,
        *,
        done: Sequence[tuple[int, str]],
        consumed: Iterable[str] = (),
        failures: Mapping[int, str] = {},
        hopeless: Iterable[int] = (),
        sessions: Sequence[SessionEvent] = (),
        at: float,
    ) -> None:
        """The sessions' events on the server first (a repeat after a crash sets the same
        values), then the spool's rows in the machine's spool."""
        if sessions:
            super().finish_spooled(done=(), sessions=sessions, at=at)
        self.spool.finish_spooled(done=done, consumed=consumed, failures=failures, hopeless=hopeless, at=at)


@dataclass(frozen=True, slots=True)
class PostgresRepositories:
    """One of each repository over one PostgreSQL catalog."""

    memories: PostgresMemoryRepository
    sessions: PostgresSessionRepository
    stats: PostgresStatsRepository
    captures: PostgresCaptureRepository
    ledger: PostgresLedgerRepository
    scopes: PostgresScopeRepository
    retention: PostgresRetentionRepository

    @classmethod
    def over(cls, catalog: PostgresCatalog | Source) -> PostgresRepositories:
        return cls(
            memories=PostgresMemoryRepository(catalog),
            sessions=PostgresSessionRepository(catalog),
            stats=PostgresStatsRepository(catalog),
            captures=PostgresCaptureRepository(catalog),
            ledger=PostgresLedgerRepository(catalog),
            scopes=PostgresScopeRepository(catalog),
            retention=PostgresRetentionRepository(catalog),
        )


def shared_repositories(catalog: PostgresCatalog | Source, spool: CaptureRepository) -> Any:
    """Every repository a store on the shared catalog ``catalog`` gives its services (a
    :class:`~remindful.engine.repositories.Repositories` whose members are this backend's), with
    the machine's own ``spool`` (:class:`MachineSpoolCaptureRepository`)."""
    from remindful.engine.repositories import Repositories

    fields: dict[str, Any] = {
        "memories": PostgresMemoryRepository(catalog),
        "sessions": PostgresSessionRepository(catalog),
        "stats": PostgresStatsRepository(catalog),
        "learning": PostgresLearningRepository(catalog),
        "retention": PostgresRetentionRepository(catalog),
        "captures": MachineSpoolCaptureRepository(catalog, spool),
        "ledger": PostgresLedgerRepository(catalog),
        "brief": PostgresBriefRepository(catalog),
        "scopes": PostgresScopeRepository(catalog),
    }
    return Repositories(**fields)


__all__ = [
    "MachineSpoolCaptureRepository",
    "PostgresBriefRepository",
    "PostgresCaptureRepository",
    "PostgresLearningRepository",
    "PostgresLedgerRepository",
    "PostgresMemoryRepository",
    "PostgresRepositories",
    "PostgresRetentionRepository",
    "PostgresScopeRepository",
    "PostgresSessionRepository",
    "PostgresStatsRepository",
    "shared_repositories",
]
