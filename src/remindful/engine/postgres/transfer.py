"""The PostgreSQL side of a copy from a local store (``remindful migrate``): the rows of each part
written as they were (ids, times, vectors and session ids kept: they were redacted when first
written), and the counts the copy is verified by, read as the source's
(:class:`~remindful.engine.repositories.transfer.TransferRepository`) are."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from remindful.engine.captures import SALT_KEY
from remindful.engine.catalog import MemoryRow
from remindful.engine.postgres.catalog import PostgresCatalog
from remindful.engine.repositories.transfer import Injection, ProjectRecord, Session, Tombstone


class PostgresTransfer:
    """Writes a copy into one PostgreSQL catalog, each part in its own transaction."""

    def __init__(self, catalog: PostgresCatalog) -> None:
        self._catalog = catalog

    @property
    def indexes_private(self) -> bool:
        """Whether private memories' vectors go to the index (not once the store has a team)."""
        return self._catalog.indexes_private

    def memories(self, rows: Sequence[MemoryRow]) -> None:
        """Insert ``rows`` as stored (already redacted), marked indexed: the copy puts their vectors
        in the target's index itself."""
        for row in rows:
            row.redacted = True
            row.indexed = row.embedding is not None
        self._catalog.write(lambda conn: self._catalog.insert_memories(conn, rows), what="copying memories")

    def sessions(self, rows: Sequence[Session]) -> None:
        self._many(
            "INSERT INTO sessions (id, started_at, ended_at, metadata) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (id) DO NOTHING",
            rows,
        )

    def tombstone_salt(self, salt: str) -> bool:
        """Keep the source's tombstone salt (its tombstones are keyed with it); False when the
        target has another one already (its tombstones could not be told apart)."""

        def run(conn: Any) -> bool:
            conn.execute("INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT DO NOTHING", (SALT_KEY, salt))
            return bool(conn.execute("SELECT value FROM meta WHERE key = %s", (SALT_KEY,)).fetchone()[0] == salt)

        return self._catalog.write(run, what="copying the tombstones' salt")

    def tombstones(self, rows: Sequence[Tombstone]) -> None:
        self._many(
            "INSERT INTO tombstones (key, buried_at, reason, memory_id) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (key) DO NOTHING",
            rows,
        )

    def injections(self, rows: Sequence[Injection]) -> None:
        self._many(
            "INSERT INTO injections (at, session_id, project, event, tokens, memory_ids) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            rows,
        )

    def projects(self, rows: Sequence[ProjectRecord]) -> None:
        self._many(
            "INSERT INTO projects (key, name, root, first_seen, last_seen) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (key) DO NOTHING",
            rows,
        )

    def _many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        def run(conn: Any) -> None:
            with conn.cursor() as cur:
                cur.executemany(sql, [tuple(r) for r in rows])

        if rows:
            self._catalog.write(run, what="copying a store")

    def counts(self) -> dict[str, int]:
        """As :meth:`TransferRepository.counts <remindful.engine.repositories.transfer.TransferRepository.counts>`."""
        ((memories, vectors, sessions, tombstones, injections, projects),) = self._catalog.read(
            "SELECT (SELECT count(*) FROM memories), (SELECT count(*) FROM memories WHERE embedding IS NOT NULL), "
            "(SELECT count(*) FROM sessions), (SELECT count(*) FROM tombstones), (SELECT count(*) FROM injections), "
            "(SELECT count(*) FROM projects)"
        )
        return {
            "memories": int(memories),
            "vectors": int(vectors),
            "sessions": int(sessions),
            "tombstones": int(tombstones),
            "injections": int(injections),
            "projects": int(projects),
        }


__all__ = ["PostgresTransfer"]
