"""The PostgreSQL catalog: the source of truth of a store shared by a team or by several machines.

``catalog.url: postgresql://USER@HOST:PORT/DB`` (or ``REMINDFUL_CATALOG__URL``) selects it; the
password, if any, comes from the URL as configured or from libpq's own sources (``PGPASSWORD``,
``~/.pgpass``), never from a command line, and every place the URL is shown shows it
:func:`redacted <shown_url>`. psycopg 3 is imported when a catalog is first opened (the ``postgres``
extra): hooks and ``--help`` never load it.

It has the named methods of the SQLite :class:`~remindful.engine.catalog.Catalog` that the
repositories and the store call, with the same meaning: :meth:`insert_memories` writes the rows,
their type and scope counts (triggers) and their session windows in the caller's transaction;
:meth:`delete_ids` deletes rows with their windows, their audit entries and their queued vector
deletions in one; the lexical spaces are ``tsvector`` columns under GIN indexes
(:mod:`remindful.engine.postgres.lexical`).

Guarantees: a call that returns has committed. A write whose connection broke before its commit
was sent is retried on a new connection (up to :data:`RETRIES` times, with backoff), as are
serialisation failures and deadlocks; a connection that breaks *during* the commit raises
:class:`CommitUnknownError` (the write may or may not have landed: callers that replay use
idempotency keys, as the spool does). A server that does not answer is a :class:`StorageError`
naming the redacted URL. The single-writer jobs (one drainer, restore, reindex) hold an advisory
lock (:meth:`exclusive`); every write transaction holds the store's advisory lock shared, so a
restore's exclusive hold waits for them and stops new ones, as SQLite's file lock does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from remindful.engine import vectors as stored_vectors
from remindful.engine.captures import SALT_KEY, forget_key, salted_key
from remindful.engine.catalog import MemoryRow, counted, redact_row
from remindful.engine.postgres import windows
from remindful.engine.postgres.dialect import pg_filter, pg_sql
from remindful.engine.postgres.lexical import PostgresLexicalSearch
from remindful.engine.postgres.numbering import SETTLE_TIMEOUT_S, SessionNumbering
from remindful.engine.postgres.schema import (
    MEMORY_COLUMNS,
    MIGRATIONS,
    ORIGINS_VERSION,
    SCHEMA_VERSION,
    VERSION_DDL,
)
from remindful.engine.postgres.url import shown_url
from remindful.engine.projects import Project
from remindful.engine.redact import StoreRedactor
from remindful.engine.session_ids import StoredSessionIds
from remindful.engine.sqlfilter import SqlFilter
from remindful.errors import (
    AccessDeniedError,
    CorruptionError,
    DependencyMissingError,
    StaleVersionError,
    StorageError,
    StorageFullError,
    StorageLockedError,
)

T = TypeVar("T")
log = logging.getLogger("remindful")

RETRIES = 3
BACKOFF_S = 0.1
CONNECT_TIMEOUT_S = 5
#: The advisory lock every write holds shared and a restore holds alone.
STORE_LOCK = "store"
#: The advisory lock under which a database's schema is created or migrated.
MIGRATE_LOCK = "migrate"
#: How long (seconds) the type counts last read stand in for a new read (:meth:`PostgresCatalog.type_counts`).
COUNTS_REUSE_S = 0.25


class CommitUnknownError(StorageError):
    """The connection broke while a transaction was committing: it may or may not have landed."""


def lock_key(name: str) -> int:
    """The 64-bit advisory lock key of ``name`` (a stable hash: every machine takes the same)."""
    return int.from_bytes(hashlib.sha256(f"remindful:{name}".encode()).digest()[:8], "big", signed=True)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the extra is in dev
        raise DependencyMissingError("psycopg", "postgres") from exc
    return psycopg


def inspect(url: str, *, connect_timeout: float = CONNECT_TIMEOUT_S) -> tuple[int | None, float, float]:
    """Look at the PostgreSQL catalog ``url`` without changing anything (no schema is created or
    migrated): ``(schema version or None when it has none yet, the server's clock, the local clock
    at the middle of the round trip)``. A server that does not answer is a StorageError naming the
    redacted URL."""
    psycopg = _psycopg()
    try:
        with psycopg.connect(
            url, autocommit=True, connect_timeout=max(1, int(connect_timeout)), application_name="remindful doctor"
        ) as conn:
            has_table = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()[0]
            row = conn.execute("SELECT version FROM schema_version").fetchone() if has_table else None
            sent = time.time()
            server = float(conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0])
            local = (sent + time.time()) / 2
    except psycopg.Error as exc:
        raise StorageError(
            f"the PostgreSQL catalog {shown_url(url)} does not answer ({_first_line(exc)})",
            suggestion="check that the server runs and is reachable, and the user and its password "
            "(PGPASSWORD or ~/.pgpass)",
        ) from exc
    return (None if row is None else int(row[0])), server, local


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class PostgresCatalog:
    """A connection to one PostgreSQL database holding a store's catalog, serialised by a lock.

    ``redaction`` is the store's redactor (its session-id key lives in the local storage
    directory): what the named methods write passes through it, as on SQLite. Opening creates or
    migrates the schema (:mod:`remindful.engine.postgres.schema`)."""

    #: Never set: a server's damage is the server's to report (the SQLite catalog notes its file's).
    damage: CorruptionError | None = None
    #: Never set: a server that refuses writes says so on each write.
    unwritable: StorageError | None = None
    #: No file: nothing for an integrity check of the local file to look at.
    path: Path | None = None

    def __init__(
        self,
        url: str,
        *,
        redaction: StoreRedactor,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        token: str | None = None,
    ) -> None:
        self._url = url
        # The person this catalog acts as on a team store (schema version 6: row-level security);
        # None: the store's single user (refused by the database once the team has people).
        self._token = token
        self.shown_url = shown_url(url)
        self.redaction = redaction
        self._session_ids = StoredSessionIds(self.read, redaction.session_id)
        self._connect_timeout = connect_timeout
        self._psycopg = _psycopg()
        # Each thread has its own connection, for its reads and its write transactions: a store
        # never waits for a background thread's write in this process (the server orders them).
        self._local = threading.local()  # .conn, and .pipeline inside a write (pipeline_rest)
        self._conns: list[Any] = []
        self._conns_lock = threading.Lock()
        self._lexical = PostgresLexicalSearch(self)
        self._numbering = SessionNumbering(self.write, self.read)
        #: The type counts last read and when (time.monotonic()); None: read them again. A read
        #: keeps what it read only if no write committed since it began (``_commits``).
        self._type_counts: tuple[float, dict[str, int]] | None = None
        self._commits = 0
        self._with_retries(self._migrate, what="opening the PostgreSQL catalog")
        #: Whose token this catalog holds (None: opened without one). An unknown or revoked token
        #: is refused here, by the database; without a token a team store's first statement on
        #: its memories is (the admin's ``remindful team`` commands need none: they read ``people``).
        self.person: str | None = None
        self._definer_sees_all: bool | None = None  # (see indexed_ids)
        self._has_team: bool | None = None  # (see indexes_private)
        if token is not None:
            try:
                self.person = self._with_retries(
                    lambda: self._connection().execute("SELECT remindful_person()").fetchone()[0],
                    what="opening the catalog",
                )
            except BaseException:
                self.close()
                raise
        # Rows a process that stopped left unnumbered (:mod:`~remindful.engine.postgres.numbering`).
        self._numbering.repair()

    # -- connections and transactions -------------------------------------------------------------

    def _connect(self) -> Any:
        """A new autocommit connection (transactions are explicit: :meth:`transaction`), acting as
        the token's person for its life: the token goes as a bound parameter (never in a
        statement's text, so never in ``pg_stat_activity``), once per connection."""
        conn = self._psycopg.connect(
            self._url, autocommit=True, connect_timeout=max(1, int(self._connect_timeout)), application_name="remindful"
        )
        try:
            # Every read is planned for its own parameters: psycopg prepares one run five times,
            # and PostgreSQL's plan for any parameters (a generic plan) of a full-text query
            # walked the primary key backwards through every row for a term a few hundred rows
            # hold (125 ms at 100,000 memories against 1.5 ms planned for the term); a scope or a
            # type is as uneven. Planning costs a fraction of a millisecond. (A write transaction
            # sets it back for its own statements: :meth:`transaction`.)
            conn.execute(
                "SELECT set_config('plan_cache_mode', 'force_custom_plan', false), "
                "set_config('remindful.token', %s, false)",
                (self._token or "",),
            )
        except BaseException:
            conn.close()
            raise
        return conn

    def _connection(self) -> Any:
        """This thread's own connection (opened again if it broke)."""
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                with suppress(Exception):
                    conn.close()
            conn = self._local.conn = self._connect()
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def close(self) -> None:
        self._numbering.close()
        with self._conns_lock:
            for conn in self._conns:
                with suppress(Exception):
                    conn.close()
            self._conns.clear()

    def _error(self, exc: Exception, what: str) -> StorageError | AccessDeniedError | None:
        """Ours for a psycopg error; None means 'retry it' (a broken connection, a serialisation
        failure, a deadlock)."""
        errors = self._psycopg.errors
        if isinstance(exc, errors.InsufficientPrivilege):  # the database's own refusal (row-level security)
            return AccessDeniedError(
                f"{what} refused by the team store {self.shown_url}: {_first_line(exc)}",
                suggestion="`remindful team add NAME` (by the store's admin) issues a token; set it in "
                "catalog.token or REMINDFUL_CATALOG__TOKEN",
            )
        if isinstance(exc, errors.DiskFull):
            return StorageFullError(f"{what}: the PostgreSQL server's disk is full ({_first_line(exc)})")
        if isinstance(exc, errors.SerializationFailure | errors.DeadlockDetected | errors.LockNotAvailable):
            return None
        if isinstance(exc, self._psycopg.OperationalError):
            return None
        return StorageError(f"{what} failed on the PostgreSQL catalog {self.shown_url}: {_first_line(exc)}")

    def _with_retries(self, operation: Callable[[], T], *, what: str) -> T:
        for attempt in range(RETRIES + 1):
            try:
                return operation()
            except self._psycopg.Error as exc:
                mapped = self._error(exc, what)
                if mapped is not None:
                    raise mapped from exc
                if attempt == RETRIES:
                    if isinstance(exc, self._psycopg.OperationalError):
                        raise StorageError(
                            f"{what} failed: the PostgreSQL catalog {self.shown_url} does not answer "
                            f"({_first_line(exc)})",
                            suggestion="check that the server runs and is reachable; `remindful doctor` tells more",
                        ) from exc
                    raise StorageLockedError(
                        f"{what} failed: the catalog stayed busy through {RETRIES} retries ({_first_line(exc)})"
                    ) from exc
                time.sleep(BACKOFF_S * (2**attempt))
        raise AssertionError("unreachable")

    @contextmanager
    def transaction(self, *, durable: bool = True, pipelined: bool = False) -> Iterator[Any]:
        """One write transaction on this thread's connection, holding the store lock shared. The
        caller retries (:meth:`write`); a break during COMMIT is :class:`CommitUnknownError`.

        ``durable=False`` is for what the store derives again when it is lost (a memory's vector,
        its indexed mark, access counts, the embedding cache): its commit does not wait for the
        server to flush its write-ahead log (``synchronous_commit = off`` for this transaction
        only), so it neither waits for the disk nor makes the next acknowledged write wait for a
        flush of its own. The server can lose such a commit only in a crash within a fraction of
        a second of it, and always with everything committed after it (the log is replayed in
        order); a memory's own write is never one of them.

        A write may send its statements from some point on in pipeline mode (:meth:`pipeline_rest`):
        those that return nothing then go with the next that does, or with the COMMIT, in one round
        trip. An error of one of them is raised by that next read or by the commit, the
        transaction rolled back, as if raised where it was sent (a serialisation failure or a
        deadlock is retried); only a connection broken at the commit is :class:`CommitUnknownError`.
        ``pipelined``: the whole transaction is, from its BEGIN on (for a write that reads nothing
        back: a new memory's), so that it costs one round trip and the commit's flush.

        A session's new rows are numbered, and their windows built, right after the commit, in a
        transaction of its own (:mod:`~remindful.engine.postgres.numbering`)."""
        self._local.writing, self._local.to_number = True, set()
        try:
            with self._transaction(durable=durable, pipelined=pipelined) as conn:
                yield conn
            numbered = self._local.to_number
        finally:
            self._local.writing, self._local.to_number = False, None
        self._numbering.submit(numbered)

    @contextmanager
    def _transaction(self, *, durable: bool, pipelined: bool) -> Iterator[Any]:
        """:meth:`transaction` itself."""
        conn = self._connection()
        self._local.pipeline = None
        counted = None
        try:
            # One round trip: the key is our own integer, so the two statements go as one
            # simple query (no parameters) instead of two.
            local = "" if durable else "SET LOCAL synchronous_commit = off; "
            # A write's statements differ by keys, not by how many rows their values match: each
            # is planned once for any values (a generic plan, after psycopg prepared it), where a
            # read is planned for its own (the connection's setting, :meth:`_connect`). The
            # numbering of a session's windows took 0.4 ms to plan and 0.5 to run, at each store.
            local += "SET LOCAL plan_cache_mode = auto; "
            lock = f"SELECT pg_advisory_xact_lock_shared({lock_key(STORE_LOCK):d})"
            if pipelined:  # (the extended protocol of a pipeline takes one statement at a time)
                self.pipeline_rest(conn)
                for statement in ("BEGIN", *local.split("; ")[:-1], lock):
                    conn.execute(statement)
            else:
                conn.execute(f"BEGIN; {local}{lock}")
            yield conn
        except BaseException:
            self._end_pipeline(conn, failed=True)
            with suppress(Exception):
                conn.execute("ROLLBACK")
            raise
        try:
            if durable:
                self._commits += 1
                self._type_counts = None
                if getattr(self._local, "pipeline", None) is not None:
                    # Memories were written: their type counts come back with the commit, no round
                    # trip of their own, for the reads that follow (type_counts).
                    counted = (time.monotonic(), conn.execute(TYPE_COUNTS))
            conn.execute("COMMIT")
            self._end_pipeline(conn, failed=False)
            self._lexical.forget_size()
            if durable:
                self._commits += 1  # a read that began before the commit landed keeps nothing
            if counted is not None:
                self._type_counts = (counted[0], _counts(counted[1].fetchall()))
        except self._psycopg.OperationalError as exc:
            self._end_pipeline(conn, failed=True)
            if not conn.broken and not isinstance(exc, self._psycopg.errors.QueryCanceled):
                # A pipelined statement failed (the COMMIT did not run): as any failed write.
                with suppress(Exception):
                    conn.execute("ROLLBACK")
                raise
            raise CommitUnknownError(
                f"the connection to {self.shown_url} broke while committing: the write may or may not have landed"
            ) from exc
        except self._psycopg.Error:
            # A pipelined statement's error raised by the commit: the pipeline is left too, or the
            # connection stays in an aborted pipeline and its next read fails ("pipeline aborted").
            self._end_pipeline(conn, failed=True)
            with suppress(Exception):
                conn.execute("ROLLBACK")
            raise

    def pipeline_rest(self, conn: Any) -> None:
        """Send the rest of this write transaction's statements in pipeline mode (see
        :meth:`transaction`); its caller reads no ``rowcount`` after this."""
        if getattr(self._local, "pipeline", None) is None:
            self._local.pipeline = conn.pipeline()
            self._local.pipeline.__enter__()

    def _end_pipeline(self, conn: Any, *, failed: bool) -> None:
        pipeline, self._local.pipeline = getattr(self._local, "pipeline", None), None
        if pipeline is None:
            return
        if failed:
            with suppress(Exception):
                pipeline.__exit__(RuntimeError, RuntimeError("rolled back"), None)
        else:
            pipeline.__exit__(None, None, None)

    def write(self, fn: Callable[[Any], T], *, what: str = "write", durable: bool = True, pipelined: bool = False) -> T:
        """Run ``fn(conn)`` in one retried write transaction (``durable``, ``pipelined``: see
        :meth:`transaction`)."""

        def run() -> T:
            with self.transaction(durable=durable, pipelined=pipelined) as conn:
                return fn(conn)

        return self._with_retries(run, what=what)

    def read(self, sql: str, params: Sequence[Any] = (), *, private: bool = False) -> list[Any]:
        """Rows of one query (``%s`` parameters), retried on a broken connection. ``private`` is
        accepted for the SQLite catalog's callers (a read runs on its thread's own connection
        whenever another thread holds the shared one)."""

        sql = pg_sql(sql)
        if self._numbering.pending and not getattr(self._local, "writing", False) and _NUMBERED.search(sql):
            # A read of the windows or the numbering sees this process's rows numbered.
            self._numbering.settle()

        def run() -> list[Any]:
            # On this thread's connection: inside its write transaction, a read sees its writes.
            return list(self._connection().execute(sql, params).fetchall())

        return self._with_retries(run, what="read")

    @contextmanager
    def exclusive(self, name: str, *, wait: bool = True) -> Iterator[bool]:
        """Hold the advisory lock ``name`` (``drain``, ``reindex``, ``restore``, or :data:`STORE_LOCK`)
        on a session of its own for the block: yields whether it is held (``wait=False`` does not
        wait for another holder). The server releases it if this process dies."""
        conn = self._with_retries(self._connect, what="taking a lock")
        try:
            key = lock_key(name)
            if wait:
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
                held = True
            else:
                held = bool(conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0])
            yield held
        finally:
            with suppress(Exception):
                conn.close()

    # -- the schema ---------------------------------------------------------------------------------

    def _migrate(self) -> None:
        """Create or migrate the schema to :data:`SCHEMA_VERSION`, once, under an advisory lock."""
        conn = self._connect()
        try:
            conn.execute("BEGIN")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(MIGRATE_LOCK),))
            if not conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()[0]:
                conn.execute(VERSION_DDL)  # (a team member may not create tables: only when missing)
            row = conn.execute("SELECT version FROM schema_version").fetchone()
            version = 0 if row is None else int(row[0])
            if version > SCHEMA_VERSION:
                conn.execute("ROLLBACK")
                raise StorageError(
                    f"the PostgreSQL catalog {self.shown_url} was written by a newer remindful "
                    f"(schema {version} > {SCHEMA_VERSION})",
                    suggestion="upgrade remindful on this machine",
                )
            for number, statements in enumerate(MIGRATIONS[version:], start=version + 1):
                if number == ORIGINS_VERSION:
                    _derive_origins(conn)
                for statement in statements:
                    conn.execute(statement)
            if row is None:
                conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))
            elif version < SCHEMA_VERSION:
                conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION,))
            conn.execute("COMMIT")
            if version < SCHEMA_VERSION:
                log.info("PostgreSQL catalog %s: schema %d -> %d", self.shown_url, version, SCHEMA_VERSION)
        finally:
            conn.close()

    def schema_version(self) -> int:
        """The schema version the database is at."""
        return int(self.read("SELECT version FROM schema_version")[0][0])

    def server_time(self) -> float:
        """The server's clock (epoch seconds), for the clock skew ``doctor`` reports."""
        return float(self.read("SELECT extract(epoch FROM clock_timestamp())")[0][0])

    # -- memories -------------------------------------------------------------------------------

    def expect_vectors(self, dimension: Callable[[], int]) -> None:
        """Nothing to prepare: PostgreSQL writes an updated row as a new version of it, wherever it
        fits, so room kept in the row in advance would save nothing."""

    def insert_memories(self, conn: Any, rows: Sequence[MemoryRow], *, author: str | None = None) -> None:
        """Insert rows (inside a :meth:`transaction` of this catalog), redacted first as on SQLite, with the
        redaction counts in the same transaction, and the session windows (a session's: after the
        commit, :mod:`~remindful.engine.postgres.numbering`); ``author`` records who
        wrote them (default: the token's person; None without a token: the store's single user).
        On a team store the database refuses any other author than the token's person."""
        author = self.person if author is None else author
        counts: dict[str, int] = {}
        for row in rows:
            redact_row(self.redaction, row, counts)
        # From here on, what returns nothing waits for the windows' read, then for the COMMIT.
        self.pipeline_rest(conn)
        add_counts(conn, counted(counts))
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO memories (id, type, content, metadata, source, memory_class, session_id, created_at, "
                "updated_at, importance, access_count, last_accessed, bookmarked, content_hash, chunk, expires_at, "
                "embedding, indexed, size_bytes, scope, author, origin) "
                "VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                [
                    (
                        r.id,
                        r.type,
                        r.content,
                        r.metadata,
                        r.source,
                        r.memory_class,
                        r.session_id,
                        r.created_at,
                        r.updated_at,
                        r.importance,
                        r.access_count,
                        r.last_accessed,
                        int(r.bookmarked),
                        r.content_hash,
                        r.chunk,
                        r.expires_at,
                        _blob(r.embedding),
                        int(r.indexed),
                        len(r.content.encode()) + len(r.metadata) + (0 if r.embedding is None else r.embedding.nbytes),
                        r.scope,
                        author,
                        r.origin,
                    )
                    for r in rows
                ],
            )
        # A row without a session has its window now; a session's rows are numbered, and their
        # windows built, after the commit (:mod:`~remindful.engine.postgres.numbering`).
        windows.after_insert(conn, [r.id for r in rows if r.session_id is None])
        self._local.to_number.update(r.session_id for r in rows if r.session_id is not None)

    def get_rows(self, ids: Sequence[str]) -> dict[str, MemoryRow]:
        """Rows for ``ids`` that exist, keyed by id."""
        rows = self.read(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ANY(%s)", (list(ids),))
        return {row[0]: MemoryRow.from_sql(row) for row in rows}

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        return {r[0] for r in self.read("SELECT id FROM memories WHERE id = ANY(%s)", (list(ids),))}

    def select_rows(self, flt: SqlFilter, *, limit: int = 100, offset: int = 0) -> list[MemoryRow]:
        """Rows passing ``flt``, newest first."""
        where, params = pg_filter(flt)
        sql = (
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {where} "
            "ORDER BY created_at DESC, rowid DESC LIMIT %s OFFSET %s"
        )
        return [MemoryRow.from_sql(r) for r in self.read(sql, [*params, limit, offset])]

    def indexed_ids(self, memory_type: str) -> set[str] | None:
        """Ids of the rows of ``memory_type`` marked indexed, private ones excepted, every person's (schema 10's
        functions); None if this connection cannot see them all (a token's person, and an admin
        that row-level security binds): then no vector may be taken for stale."""
        if not self._sees_every_row():
            return None
        return {r[0] for r in self.read("SELECT remindful_indexed_ids(%s)", (memory_type,))}

    def indexed_count(self, memory_type: str) -> int:
        """How many rows of ``memory_type`` are marked indexed, private ones excepted (their vectors
        stay here), every person's where :meth:`indexed_ids` sees them (else those this
        connection sees)."""
        if not self._sees_every_row():
            return self.count(SqlFilter("type = ? AND indexed = 1 AND scope IS DISTINCT FROM 'user'", (memory_type,)))
        return int(self.read("SELECT remindful_indexed_count(%s)", (memory_type,))[0][0])

    @property
    def indexes_private(self) -> bool:
        """Whether private memories' vectors go to the index: not on a team store (schema version
        10), where they stay here, under row-level security, and never reach the Chroma server,
        which anyone reaching it reads whole. A store with no team yet is one person's. (A process
        running when the first person is added learns it at its next open; the first reconcile
        of a team member's process removes what it indexed meanwhile.)"""
        if self._token is not None:  # (a valid token: the store has a team)
            return False
        if self._has_team is None:
            self._has_team = bool(self.read("SELECT remindful_has_team()")[0][0])
        return not self._has_team

    def _sees_every_row(self) -> bool:
        if self.person is None:  # no team, or the admin's process: its reads see every row
            return True
        if self._definer_sees_all is None:
            self._definer_sees_all = bool(self.read("SELECT remindful_sees_every_row()")[0][0])
        return self._definer_sees_all

    def count(self, flt: SqlFilter | None = None, *, at_most: int | None = None) -> int:
        """Rows passing ``flt``; with ``at_most``, counting stops there."""
        where, params = pg_filter(flt or SqlFilter())
        if at_most is None:
            return int(self.read(f"SELECT count(*) FROM memories WHERE {where}", params)[0][0])
        sql = f"SELECT count(*) FROM (SELECT 1 FROM memories WHERE {where} LIMIT %s) AS bounded"
        return int(self.read(sql, [*params, at_most])[0][0])

    def read_in(self, sql: str, keys: Sequence[Any], params: Sequence[Any] = ()) -> list[Any]:
        """As :meth:`Catalog.read_in <remindful.engine.catalog.Catalog.read_in>`: ``{marks}`` in the
        (shared-dialect) statement stands for the keys, bound after ``params``."""
        rows: list[Any] = []
        for start in range(0, len(keys), 1000):
            chunk = list(keys[start : start + 1000])
            rows += self.read(sql.format(marks=",".join("?" * len(chunk))), [*params, *chunk])
        return rows

    def rows_passing(
        self, ids: Sequence[str], flt: SqlFilter, *, vectors: dict[str, np.ndarray] | None = None
    ) -> dict[str, MemoryRow]:
        """Rows for the ``ids`` that exist and pass ``flt``; with ``vectors``, their embeddings are
        read in the same statement and added to it."""
        if not ids:
            return {}
        where, params = pg_filter(flt)
        embedding = "" if vectors is None else ", embedding"
        rows = self.read(
            f"SELECT {MEMORY_COLUMNS}{embedding} FROM memories WHERE id = ANY(%s) AND ({where})", [list(ids), *params]
        )
        if vectors is not None:
            vectors.update((row[0], stored_vectors.decode(row[-1])) for row in rows if row[-1] is not None)
        return {row[0]: MemoryRow.from_sql(row) for row in rows}

    def ids_passing(self, ids: Sequence[str], flt: SqlFilter) -> set[str]:
        """Those of ``ids`` that exist and pass ``flt``."""
        if not ids:
            return set()
        where, params = pg_filter(flt)
        return {
            r[0] for r in self.read(f"SELECT id FROM memories WHERE id = ANY(%s) AND ({where})", [list(ids), *params])
        }

    def ids_by_rowid(self, rowids: Sequence[int], flt: SqlFilter, *, private: bool = False) -> dict[int, str]:
        """The ids of those of ``rowids`` that exist and pass ``flt``, keyed by rowid."""
        where, params = pg_filter(flt)
        sql = f"SELECT rowid, id FROM memories WHERE rowid = ANY(%s) AND ({where})"
        return {int(r): str(i) for r, i in self.read(sql, [list(rowids), *params])}

    def filtered_embeddings(self, flt: SqlFilter) -> tuple[list[str], np.ndarray | None]:
        """Ids and an (n, d) matrix of every embedded row matching ``flt`` (for exact scoring)."""
        where, params = pg_filter(flt)
        return _matrix(
            self.read(f"SELECT id, embedding FROM memories WHERE ({where}) AND embedding IS NOT NULL", params)
        )

    def filtered_embeddings_if(
        self, flt: SqlFilter, few: int, at_most: int, take: Callable[[int], bool]
    ) -> tuple[list[str], np.ndarray | None] | None:
        """As :meth:`filtered_embeddings` when at most ``few`` rows pass ``flt``, or when ``take(n)``
        agrees for their count ``n`` (counted up to ``at_most``); else None."""
        n = self.count(flt, at_most=max(at_most, few + 1))
        if n > few and not take(min(n, at_most)):
            return None
        return self.filtered_embeddings(flt)

    def pending_embeddings(self, flt: SqlFilter, after: int | None) -> tuple[list[str], np.ndarray | None]:
        """As :meth:`filtered_embeddings`, among the rows a vector index may lack: those not marked
        indexed, and (unless ``after`` is None) those above rowid ``after``."""
        where, params = pg_filter(flt)
        pending = "indexed = 0" if after is None else "(indexed = 0 OR rowid > %s)"
        sql = f"SELECT id, embedding FROM memories WHERE {pending} AND ({where}) AND embedding IS NOT NULL"
        return _matrix(self.read(sql, [*([] if after is None else [after]), *params]))

    def neighbourhoods(self, ids: Sequence[str], radius: int) -> list[tuple[str, str, int, bytes]]:
        """As :meth:`Catalog.neighbourhoods <remindful.engine.catalog.Catalog.neighbourhoods>`."""
        if not ids:
            return []
        rows = self.read(
            "SELECT c.id, m.id, m.seq - c.seq, m.embedding FROM memories c JOIN memories m "
            "ON m.session_id = c.session_id AND m.seq BETWEEN c.seq - %s AND c.seq + %s "
            "WHERE c.id = ANY(%s) AND m.embedding IS NOT NULL",
            [radius, radius, list(ids)],
        )
        return [(r[0], r[1], int(r[2]), stored_vectors.decode_bytes(r[3])) for r in rows]

    def without_embeddings(self, ids: Sequence[str]) -> list[tuple[str, str]]:
        """(id, content) of the memories among ``ids`` that have no vector yet."""
        rows = self.read("SELECT id, content FROM memories WHERE id = ANY(%s) AND embedding IS NULL", [list(ids)])
        return [(str(i), str(c)) for i, c in rows]

    def vectors_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored memories' vectors by content hash (one per hash)."""
        rows = self.read(
            "SELECT content_hash, embedding FROM memories WHERE content_hash = ANY(%s) AND embedding IS NOT NULL",
            [list(hashes)],
        )
        return {h: stored_vectors.decode(blob) for h, blob in rows}

    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        rows = self.read(
            "SELECT hash, vector FROM embedding_cache WHERE model = %s AND hash = ANY(%s)", [model, list(hashes)]
        )
        return {h: stored_vectors.decode(blob) for h, blob in rows}

    def put_cached_embeddings(self, model: str, items: dict[str, np.ndarray]) -> None:
        def run(c: Any) -> None:
            with c.cursor() as cur:
                cur.executemany(
                    "INSERT INTO embedding_cache (model, hash, vector) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                    [(model, h, _blob(v)) for h, v in items.items()],
                )

        if items:
            self.write(run, what="caching embeddings", durable=False)

    def stored_with(self, content_hash: str, session_id: str) -> list[tuple[str, dict[str, Any]]]:
        """(id, metadata) of each memory of session ``session_id`` whose content has ``content_hash``."""
        rows = self.read(
            "SELECT id, metadata FROM memories WHERE content_hash = %s AND session_id = %s",
            (content_hash, self.stored_session_id(session_id)),
        )
        return [(str(mid), json.loads(metadata)) for mid, metadata in rows]

    def has_chunked_response(self, session_id: str, full_content_hash: str) -> bool:
        """Whether session ``session_id`` holds a response stored in chunks whose whole text has
        ``full_content_hash``."""
        return bool(
            self.read(
                "SELECT 1 FROM memories WHERE session_id = %s AND source = 'response' "
                "AND metadata::jsonb ->> 'full_content_hash' = %s LIMIT 1",
                (self.stored_session_id(session_id), full_content_hash),
            )
        )

    @staticmethod
    def count_in(conn: Any, counts: Mapping[str, int]) -> None:
        """Add ``counts`` (name → hits) to ``capture_stats`` in the caller's transaction."""
        add_counts(conn, counts)

    def some_ids(self, limit: int) -> list[str]:
        """Up to ``limit`` memory ids, any."""
        return [str(r[0]) for r in self.read("SELECT id FROM memories LIMIT %s", (limit,))]

    def update_row(self, conn: Any, row: MemoryRow, *, version: int | None = None) -> None:
        """Write ``row``'s changed fields (content, metadata, hash, bookmark, importance, scope,
        origin; its vector if it has one) in the caller's transaction, marked for re-indexing, its
        version raised by one and its session windows rebuilt. ``version``: the version the
        change was made on; a row at another version is not written (:class:`StaleVersionError`)."""
        found = conn.execute("SELECT version FROM memories WHERE id = %s FOR UPDATE", (row.id,)).fetchone()
        if found is None:
            return
        if version is not None and int(found[0]) != version:
            raise StaleVersionError(row.id, int(found[0]), version)
        conn.execute(
            "UPDATE memories SET content=%s, metadata=%s, content_hash=%s, bookmarked=%s, importance=%s, "
            "updated_at=%s, indexed=0, embedding=COALESCE(%s, embedding), scope=%s, origin=%s, version=version+1 "
            "WHERE id=%s",
            (
                row.content,
                row.metadata,
                row.content_hash,
                int(row.bookmarked),
                row.importance,
                time.time(),
                _blob(row.embedding),
                row.scope,
                row.origin,
                row.id,
            ),
        )
        windows.after_update(conn, row.id)

    def version_of(self, memory_id: str) -> int | None:
        """The memory's version (1 when stored, one more at each update); None if there is none."""
        rows = self.read("SELECT version FROM memories WHERE id = %s", (memory_id,))
        return int(rows[0][0]) if rows else None

    def move_scope(self, conn: Any, flt: SqlFilter, scope: str) -> int:
        """Move the memories passing ``flt`` to ``scope`` in the caller's transaction, their
        neighbours' session windows rebuilt (a private text is in no shared memory's window); how
        many moved."""
        where, params = pg_filter(flt)
        moved = conn.execute(
            f"UPDATE memories SET scope = %s WHERE ({where}) AND scope IS DISTINCT FROM %s "
            "RETURNING rowid, session_id, seq",
            (scope, *params, scope),
        ).fetchall()
        windows.after_scope_move(conn, moved)
        return len(moved)

    def follow_file(self) -> bool:
        """Nothing to follow: a server's database is not replaced under its clients' feet."""
        return False

    def mend_windows(self, limit: int) -> int:
        """Nothing is queued: a delete mends its neighbours' windows in its own transaction."""
        return 0

    def windows_to_mend(self) -> bool:
        return False

    def await_windows(self, timeout: float | None = None) -> bool:
        """Wait until the sessions of the rows this process stored are numbered and their windows
        built (:mod:`~remindful.engine.postgres.numbering`); False on timeout."""
        return self._numbering.settle(SETTLE_TIMEOUT_S if timeout is None else timeout)

    def try_write(self, fn: Callable[[Any], Any], *, durable: bool = True) -> bool:
        """Run ``fn(conn)`` in one write transaction now (on this thread's own connection: no other
        thread of this process holds it); whether it ran (an error is logged and rolled back:
        nothing written). ``durable``: see :meth:`transaction`."""
        try:
            with self.transaction(durable=durable) as conn:
                fn(conn)
            return True
        except self._psycopg.Error as exc:
            log.debug("not written now: %s", exc)
            return False

    def embeddings(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        rows = self.read(
            "SELECT id, embedding FROM memories WHERE id = ANY(%s) AND embedding IS NOT NULL", (list(ids),)
        )
        return {mid: stored_vectors.decode(blob) for mid, blob in rows}

    def type_counts(self) -> dict[str, int]:
        """How many memories each type holds (types without any are left out). What a store and a
        search read first: the counts this process read or committed less than
        :data:`COUNTS_REUSE_S` ago stand in for a read (a write of this process's own is always
        in them: its commit reads them, or drops those read before); another machine's writes are
        counted that much later at most."""
        known = self._type_counts
        if known is not None and time.monotonic() - known[0] < COUNTS_REUSE_S:
            return dict(known[1])
        at, commits = time.monotonic(), self._commits
        counts = _counts(self.read(TYPE_COUNTS))
        if commits == self._commits:
            self._type_counts = (at, counts)
        return dict(counts)

    def scope_counts(self) -> dict[str | None, int]:
        """How many memories each scope holds (None: unscoped)."""
        return {scope or None: int(n) for scope, n in self.read("SELECT scope, n FROM scope_counts WHERE n > 0")}

    def touch(self, ids: Sequence[str], at: float, counts: Mapping[str, int] | None = None) -> None:
        """Count an access: ``access_count`` + 1 and ``last_accessed`` = at; and add ``counts`` to
        the store's counters (the searches' figures, :mod:`remindful.engine.perf`)."""
        if not ids and not counts:
            return

        def run(c: Any) -> None:
            if ids:
                c.execute(
                    "UPDATE memories SET access_count = access_count + 1, last_accessed = %s WHERE id = ANY(%s)",
                    (at, list(ids)),
                )
            add_counts(c, dict(counts or {}))

        self.write(run, what="recording access", durable=False)

    def unindexed(self, limit: int = 1000) -> list[tuple[MemoryRow, np.ndarray | None]]:
        rows = self.read(
            f"SELECT {MEMORY_COLUMNS}, embedding FROM memories WHERE indexed = 0 ORDER BY rowid LIMIT %s", [limit]
        )
        return [(MemoryRow.from_sql(r), None if r[-1] is None else stored_vectors.decode(r[-1])) for r in rows]

    def mark_indexed(self, ids: Sequence[str], value: bool = True) -> None:
        """Mark rows indexed (in the vector index) or not. A lost mark of indexed rows is derived
        again (the rows are indexed once more, which changes nothing), so that commit does not
        wait for the flush (:meth:`transaction`); a mark of rows the index lacks does."""
        if ids:
            self.write(
                lambda c: c.execute("UPDATE memories SET indexed = %s WHERE id = ANY(%s)", (int(value), list(ids))),
                what="marking memories indexed",
                durable=not value,
            )

    def set_embeddings(self, items: Mapping[str, np.ndarray], *, wait: bool = True) -> bool:
        """Save vectors; a row that had none grows by the vector's size (quota accounting). A vector
        lost in a crash is computed again (the row is still without one), so the commit does not
        wait for the flush (:meth:`transaction`)."""

        def run(c: Any) -> None:
            with c.cursor() as cur:
                cur.executemany(
                    "UPDATE memories SET size_bytes = size_bytes + CASE WHEN embedding IS NULL THEN %s ELSE 0 END, "
                    "embedding = %s WHERE id = %s",
                    [(v.nbytes, _blob(v), k) for k, v in items.items()],
                )

        if not items:
            return True
        if not wait:
            return self.try_write(run, durable=False)
        self.write(run, what="saving embeddings", durable=False)
        return True

    # The vectors of long memories' parts (remindful.engine.chunks) are not kept in PostgreSQL yet:
    # a long memory is judged by its own vector there, as before.

    def long_without_chunks(self, ids: Sequence[str], min_chars: int) -> list[tuple[str, str, str]]:
        """None: no parts are kept in this catalog."""
        return []

    def set_chunk_vectors(self, items: Mapping[str, tuple[str, np.ndarray]]) -> None:
        """Nothing: no parts are kept in this catalog."""

    def chunk_vectors(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """None: no parts are kept in this catalog."""
        return {}

    def claim_embedding_model(self, name: str) -> str:
        """Record ``name`` as the model of this store's vectors unless one is recorded; the recorded one."""

        def run(c: Any) -> str:
            c.execute("INSERT INTO meta (key, value) VALUES ('embedding_model', %s) ON CONFLICT DO NOTHING", (name,))
            return str(c.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()[0])

        return self.write(run, what="recording the embedding model")

    # -- lexical spaces ---------------------------------------------------------------------------

    def lexical(
        self, terms: Sequence[str], flt: SqlFilter, limit: int, *, table: str = "memories_fts", restricted: bool = True
    ) -> list[tuple[str, float]]:
        """Full-text matches among rows passing ``flt``, best first: see :meth:`PostgresLexicalSearch.search`."""
        return self._lexical.search(terms, flt, limit, table=table)

    def doc_freqs(self, terms: Sequence[str], upto: int | None = None) -> tuple[dict[str, int], int]:
        return self._lexical.doc_freqs(terms, upto)

    def windows(self, ids: Sequence[str]) -> dict[str, str]:
        return self._lexical.windows(ids)

    # -- sessions, projects, audit -------------------------------------------------------------------

    def stored_session_id(self, session_id: str) -> str:
        return self._session_ids(session_id)

    def change_marks(self) -> tuple[int, int]:
        """The audit log's newest entry (a delete, an update or a move of scope writes one) and the
        newest memory's rowid, in one read."""
        row = self.read(
            "SELECT (SELECT coalesce(max(seq), 0) FROM audit_log), (SELECT coalesce(max(rowid), 0) FROM memories)"
        )[0]
        return int(row[0]), int(row[1])

    def audit(self, conn: Any, action: str, memory_id: str | None, detail: dict[str, Any]) -> None:
        """One audit-log entry, now, in the caller's transaction; ``detail`` redacted."""
        text = json.dumps(self.redaction.value(json.loads(json.dumps(detail, default=str))))
        conn.execute(
            "INSERT INTO audit_log (at, action, memory_id, detail) VALUES (%s, %s, %s, %s)",
            (time.time(), action, memory_id, text),
        )

    def ensure_session(self, conn: Any, session_id: str, at: float) -> None:
        self.upsert_session(conn, session_id, at)

    def upsert_session(
        self,
        conn: Any,
        session_id: str,
        at: float,
        *,
        metadata: Mapping[str, Any] | None = None,
        ended: bool | None = None,
    ) -> None:
        """As :meth:`Catalog.upsert_session <remindful.engine.catalog.Catalog.upsert_session>`."""
        session_id = self.redaction.session_id(session_id)  # in a transaction: no read (stored_session_id's)
        if metadata is not None:
            metadata = self.redaction.value(metadata)
        ended_at = "excluded.ended_at" if ended else ("NULL" if ended is False else "s.ended_at")
        meta = None if metadata is None else json.dumps(metadata)
        conn.execute(
            "INSERT INTO sessions AS s (id, started_at, ended_at, metadata) VALUES (%s, %s, %s, coalesce(%s, '{}')) "
            "ON CONFLICT (id) DO UPDATE SET started_at = least(s.started_at, excluded.started_at), "
            f"ended_at = {ended_at}, metadata = coalesce(%s, s.metadata)",
            (session_id, at, at if ended else None, meta, meta),
        )

    def session_metadata(self, session_id: str, conn: Any = None) -> dict[str, Any]:
        stored = self.stored_session_id(session_id) if conn is None else self.redaction.session_id(session_id)
        sql, params = "SELECT metadata FROM sessions WHERE id = %s", (stored,)
        rows = conn.execute(sql, params).fetchall() if conn is not None else self.read(sql, params)
        return dict(json.loads(rows[0][0])) if rows and rows[0][0] else {}

    def record_projects(
        self, conn: Any, projects: Iterable[Project], at: float, counts: dict[str, int] | None = None
    ) -> None:
        """Record ``projects`` as seen at ``at``, in the caller's transaction (name and root redacted;
        a known one keeps its first root, one known by name only takes the first root seen)."""
        text = self.redaction.text
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO projects AS p (key, name, root, first_seen, last_seen) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (key) DO UPDATE SET last_seen = greatest(p.last_seen, excluded.last_seen), "
                "root = CASE WHEN p.root = '' THEN excluded.root ELSE p.root END",
                [(p.key, text(p.name, counts), text(p.root, counts), at, at) for p in projects],
            )

    # -- the hand-off from the machines' spools -------------------------------------------------

    def deliver(self, items: Sequence[tuple[str, Sequence[MemoryRow]]]) -> int:
        """Store each ``(key, rows)`` once, in one transaction: a key already delivered (``spool_done``)
        is skipped with its rows, so a machine that lost the answer (a server killed during the
        commit, :class:`CommitUnknownError`) delivers the same batch again and nothing is stored
        twice. A row whose statement was forgotten (a tombstone, recorded by any machine) is not
        stored: the check is made in the same transaction. Returns how many keys were new."""

        def run(conn: Any) -> int:
            fresh: list[MemoryRow] = []
            new = 0
            now = time.time()
            for key, rows in items:
                if conn.execute(
                    "INSERT INTO spool_done (idem_key, done_at) VALUES (%s, %s) ON CONFLICT DO NOTHING "
                    "RETURNING idem_key",
                    (key, now),
                ).fetchone():
                    fresh.extend(rows)
                    new += 1
            if fresh:
                # Tombstones are kept under the store's salt (remindful.engine.captures), read here.
                salt = conn.execute("SELECT value FROM meta WHERE key = %s", (SALT_KEY,)).fetchone()
                keys = {
                    row.id: forget_key(row.content)
                    if salt is None
                    else salted_key(bytes.fromhex(salt[0]), forget_key(row.content))
                    for row in fresh
                }
                buried = {
                    str(r[0])
                    for r in conn.execute("SELECT key FROM tombstones WHERE key = ANY(%s)", (list(set(keys.values())),))
                }
                fresh = [row for row in fresh if keys[row.id] not in buried]
            if fresh:
                self.insert_memories(conn, fresh)
            return new

        return self.write(run, what="delivering spooled events")

    # -- deletes and their queues ----------------------------------------------------------------

    def delete_ids(
        self, ids: Sequence[str], *, reason: str | Mapping[str, str] = "delete", mend_later: bool = False
    ) -> list[tuple[str, str]]:
        """Delete ``ids`` in one transaction with their windows (the neighbours' mended), an audit
        entry each (action ``reason`` or ``reason[id]``) and a queued vector deletion each; the
        (id, type) pairs that existed."""
        return self.write(lambda c: self.delete_in(c, ids, reason=reason), what="deleting memories")

    def delete_in(
        self, conn: Any, ids: Sequence[str], *, reason: str | Mapping[str, str] = "delete", mend_later: bool = False
    ) -> list[tuple[str, str]]:
        """:meth:`delete_ids` inside the caller's transaction (``mend_later`` is the SQLite
        catalog's: here the neighbours' windows are always mended in it)."""
        reasons = {} if isinstance(reason, str) else reason
        default = reason if isinstance(reason, str) else "delete"
        wanted = list(dict.fromkeys(ids))
        gone = [
            (str(i), str(t))
            for i, t in conn.execute(
                "SELECT id, type FROM memories WHERE id = ANY(%s) ORDER BY rowid FOR UPDATE", (wanted,)
            ).fetchall()
        ]
        if not gone:
            return []
        now = time.time()
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO audit_log (at, action, memory_id, detail) VALUES (%s, %s, %s, %s)",
                [(now, reasons.get(i, default), i, json.dumps({"type": t})) for i, t in gone],
            )
            cur.executemany(
                "INSERT INTO index_deletes (memory_id, type) VALUES (%s, %s) "
                "ON CONFLICT (memory_id) DO UPDATE SET type = excluded.type",
                gone,
            )
        spots = windows.before_delete(conn, [i for i, _ in gone])
        doomed = [i for i, _ in gone]
        deleted = {str(r[0]) for r in conn.execute("DELETE FROM memories WHERE id = ANY(%s) RETURNING id", (doomed,))}
        if len(deleted) < len(gone):  # row-level security kept some: another person's (nothing is deleted)
            kept = ", ".join(i for i, _ in gone if i not in deleted)
            raise AccessDeniedError(
                f"not deleted: {kept} (a memory may be deleted by its author, and a project's by anyone on the team)"
            )
        windows.after_delete(conn, spots)
        return gone

    def pending_index_deletes(self, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` queued vector deletions, oldest first: (memory id, type)."""
        return [tuple(r) for r in self.read("SELECT memory_id, type FROM index_deletes ORDER BY seq LIMIT %s", [limit])]

    def finish_index_deletes(self, ids: Sequence[str]) -> None:
        if ids:
            self.write(
                lambda c: c.execute("DELETE FROM index_deletes WHERE memory_id = ANY(%s)", (list(ids),)),
                what="recording vector deletions",
            )


def _derive_origins(conn: Any) -> None:
    """Give each row without an origin the one its source and metadata imply, in the migrating
    transaction (as SQLite's upgrade does)."""
    from remindful.model import derive_origin

    updates = []
    for rowid, source, metadata in conn.execute("SELECT rowid, source, metadata FROM memories WHERE origin IS NULL"):
        try:
            meta = json.loads(metadata)
        except ValueError:
            meta = {}
        updates.append((derive_origin(source, meta if isinstance(meta, dict) else {}), rowid))
    if updates:
        with conn.cursor() as cur:
            cur.executemany("UPDATE memories SET origin = %s WHERE rowid = %s", updates)


def add_counts(conn: Any, counts: Mapping[str, int]) -> None:
    """Add ``counts`` (name → hits) to ``capture_stats`` in the caller's transaction."""
    if counts:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO capture_stats AS s (name, value) VALUES (%s, %s) "
                "ON CONFLICT (name) DO UPDATE SET value = s.value + excluded.value",
                list(counts.items()),
            )


#: The type counts as :meth:`PostgresCatalog.type_counts` reads them.
TYPE_COUNTS = "SELECT type, n FROM type_counts WHERE n > 0"
#: What a read names when it reads the session windows or the sessions' numbering (a memory's
#: ``seq`` is read as ``m.seq``: :meth:`PostgresCatalog.neighbourhoods`); the spool's, the audit
#: log's and the deletes' own ``seq`` columns are not the numbering, and their reads do not wait.
_NUMBERED = re.compile(r"\b(?:context_windows|remindful_term_counts|m\.seq)\b")


def _counts(rows: Iterable[Sequence[Any]]) -> dict[str, int]:
    return {str(t): int(n) for t, n in rows}


def _matrix(rows: Sequence[Any]) -> tuple[list[str], np.ndarray | None]:
    """``(id, vector blob)`` rows as ids and an (n, d) matrix."""
    if not rows:
        return [], None
    return [r[0] for r in rows], stored_vectors.matrix([bytes(r[1]) for r in rows])


def _blob(vector: np.ndarray | None) -> bytes | None:
    return stored_vectors.encode(vector)


__all__ = ["CommitUnknownError", "PostgresCatalog", "add_counts", "inspect", "lock_key", "shown_url"]
