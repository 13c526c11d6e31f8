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

from remindful.engine import perf
from remindful.engine.captures import SALT_KEY, FileRecord, SessionEvent, salted_key
from remindful.engine.catalog import MemoryRow
from remindful.engine.postgres.catalog import PostgresCatalog, add_counts
from remindful.engine.postgres.dialect import pg_filter
from remindful.engine.postgres.schema import MEMORY_COLUMNS
from remindful.engine.projects import PROJECT_PREFIX, slug
from remindful.engine.redact import StoreRedactor
from remindful.engine.repositories.ledger import InjectionTotal
from remindful.engine.repositories.sessions import SessionLengths, SessionSpan
from remindful.engine.spool import DONE_KEEP_DAYS, HELD_KIND, Payload, encode
from remindful.engine.sqlfilter import SqlFilter, build_filter

Source = Callable[[], PostgresCatalog]


class _Repository:
    def __init__(self, catalog: PostgresCatalog | Source) -> None:
        self._source: Source = (lambda: catalog) if isinstance(catalog, PostgresCatalog) else catalog

    @property
    def _catalog(self) -> PostgresCatalog:
        return self._source()


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
        rows = self._catalog.read("SELECT length(embedding) FROM memories WHERE embedding IS NOT NULL LIMIT 1")
        return int(rows[0][0]) // 4 if rows else None

    def page(self, after_rowid: int, limit: int) -> list[tuple[int, MemoryRow]]:
        """Up to ``limit`` memories above ``after_rowid``, in rowid order, with their vectors."""
        rows = self._catalog.read(
            f"SELECT rowid, {MEMORY_COLUMNS}, embedding FROM memories WHERE rowid > %s ORDER BY rowid LIMIT %s",
            (after_rowid, limit),
        )
        out = []
        for r in rows:
            row = MemoryRow.from_sql(r[1:])
            row.embedding = None if r[-1] is None else np.frombuffer(r[-1], dtype=np.float32)
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

    def session_metadata(self, session_id: str) -> dict[str, Any]:
        return self._catalog.session_metadata(session_id)

    def update_session(self, event: SessionEvent) -> None:
        self.finish_spooled(done=(), sessions=(event,), at=event.at)

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


@dataclass(frozen=True, slots=True)
class PostgresRepositories:
    """One of each repository over one PostgreSQL catalog."""

    memories: PostgresMemoryRepository
    sessions: PostgresSessionRepository
    stats: PostgresStatsRepository
    captures: PostgresCaptureRepository
    ledger: PostgresLedgerRepository
    scopes: PostgresScopeRepository

    @classmethod
    def over(cls, catalog: PostgresCatalog | Source) -> PostgresRepositories:
        return cls(
            memories=PostgresMemoryRepository(catalog),
            sessions=PostgresSessionRepository(catalog),
            stats=PostgresStatsRepository(catalog),
            captures=PostgresCaptureRepository(catalog),
            ledger=PostgresLedgerRepository(catalog),
            scopes=PostgresScopeRepository(catalog),
        )


__all__ = [
    "PostgresCaptureRepository",
    "PostgresLedgerRepository",
    "PostgresMemoryRepository",
    "PostgresRepositories",
    "PostgresScopeRepository",
    "PostgresSessionRepository",
    "PostgresStatsRepository",
]
