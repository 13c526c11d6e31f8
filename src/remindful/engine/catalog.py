"""The SQLite catalog: the source of truth for every memory.

One file, ``<storage>/catalog.sqlite3``, in WAL mode so that many processes (hooks, MCP servers,
the CLI) can read while one writes. It holds the memories with their embeddings, an FTS5 index
over their content, sessions, the hook spool, file hashes, the audit log and the persistent
embedding cache. The Chroma index is derived from it and can always be rebuilt.

Nothing secret is written: every method here that writes a text (memory rows, session rows and
their metadata, audit details) passes it through the catalog's
:class:`~remindful.engine.redact.StoreRedactor` first, and every lookup by a session id maps the
id the same way (:meth:`Catalog.stored_session_id`).

Guarantees: a call that returns has committed. Lock contention is retried (SQLite's busy timeout,
then up to 3 retries with exponential backoff) before :class:`StorageLockedError`; a full disk is
:class:`StorageFullError`; nothing is half-written, since every write is one transaction.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from remindful.engine import connection, spool
from remindful.engine import vectors as stored_vectors
from remindful.engine import windows as context
from remindful.engine.lexical import LexicalSearch
from remindful.engine.projects import Project
from remindful.engine.redact import StoreRedactor, add_counts, build_redactor
from remindful.engine.schema import (
    ADD_ORIGIN_COLUMN,
    ADD_SCOPE_COLUMN,
    ADD_VECTOR_ROOM_COLUMN,
    DOOMED_DDL,
    MEMORY_COLUMNS,
    RECOUNT_SCOPES,
    RECOUNT_TYPES,
    SCHEMA,
)
from remindful.engine.session_ids import StoredSessionIds
from remindful.engine.sqlfilter import SqlFilter
from remindful.engine.storelock import StoreLock
from remindful.errors import CorruptionError, StorageError, StorageFullError, StorageLockedError, unwritable
from remindful.model import content_hash, derive_origin
from remindful.owned import private_dir

T = TypeVar("T")
log = logging.getLogger("remindful")

#: How a repository reaches the catalog: the open one, asked for at each query (a restore closes the
#: catalog and the next use opens the swapped-in file), raising MemoryDisabledError when memory is off.
CatalogSource = Callable[[], "Catalog"]

#: 2: the ``index_deletes`` queue; 3: the ``context_mend`` queue; 4: ``context_drop`` instead of
#: the trigger that removed a deleted row's window; 5: the time indexes hold ``rowid`` and
#: ``expires_at`` (newest-first listings need no sort, and a broad filter is counted from an index
#: alone); 6: ``type_counts``, kept by triggers; 7: every table is created at open, those of the
#: capture counts and the learning layer too (:mod:`remindful.engine.schema`); 8: every memory has a
#: scope (:mod:`remindful.engine.scopes`), the rows of an older catalog given theirs by the upgrade;
#: 9: the tombstones of what was forgotten and the ledger of injected context; 10: every memory
#: records its origin, whose words it holds; 11: the directories the user bound to a project
#: (``project_bindings``); 12: the session windows' index is contentless; 13: the vectors of long
#: memories' parts (``chunk_vectors``, :mod:`remindful.engine.chunks`); 14: a row committed without
#: its vector keeps room for it (``vector_room``), the content hash index holds 16 hex digits, and
#: ``size_bytes`` counts a vector as stored (int8), recounted by the upgrade; 15: a session window's
#: recipe names a run of rowids by its offset and length (``-2+5``, :func:`remindful.engine.windows.recipe`;
#: those written before keep their list). Each upgrade re-runs the (idempotent) schema and recounts the types.
SCHEMA_VERSION = 15
#: The version from which ``size_bytes`` counts a vector's stored bytes.
STORED_SIZE_VERSION = 14
#: The version from which memories have a scope.
SCOPES_VERSION = 8
#: Rows given their scope per statement by the upgrade to :data:`SCOPES_VERSION`.
SCOPE_BATCH = 2000
RETRIES = 3
BACKOFF_S = 0.05
#: A write-ahead log larger than this is checkpointed in full and started over by the writer that
#: finds it so (see :meth:`Catalog._bound_wal`): with readers always overlapping (several processes
#: searching while others store) SQLite's automatic checkpoint never completes and the log grew
#: without end (770 MB beside a 16 MB database within a minute, 12 processes).
WAL_CHECKPOINT_BYTES = 32 * 1024 * 1024
#: How often (seconds) a process's writer looks at the log's size: a stat.
WAL_CHECK_INTERVAL_S = 1.0
#: How long that checkpoint waits for the readers of the moment (ms); a reader holding its
#: snapshot longer (a long export) leaves the log as it is until the next look.
WAL_CHECKPOINT_WAIT_MS = 200


def _classify(exc: BaseException) -> StorageError | None:
    """Map an sqlite/OS error to ours; None means 'retry it' (lock contention)."""
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return None
    if "disk is full" in text or (isinstance(exc, OSError) and exc.errno == errno.ENOSPC):
        return StorageFullError(str(exc))
    if "malformed" in text or "not a database" in text or "file is not a database" in text:
        return catalog_damaged(str(exc))
    return StorageError(f"Catalog operation failed: {exc}")


#: The way out of a damaged catalog (the index is rebuilt from it, so it cannot be rebuilt itself).
CATALOG_WAY_OUT = (
    "restore a backup with `remindful restore ARCHIVE`, or salvage the rows with "
    "`sqlite3 catalog.sqlite3 .recover | sqlite3 recovered.sqlite3` and put that in its place"
)
CATALOG_RECOVERY = f"Nothing was changed. Run `remindful doctor` for details; {CATALOG_WAY_OUT}"


def catalog_damaged(detail: str) -> CorruptionError:
    """The error every command gives for a damaged catalog (``part="catalog"``)."""
    return CorruptionError(f"The catalog database is damaged ({detail})", suggestion=CATALOG_RECOVERY, part="catalog")


def integrity_problem(path: Path, *, full: bool = False) -> str | None:
    """What SQLite's ``PRAGMA quick_check`` (``integrity_check`` with ``full``) finds wrong with the
    database at ``path``, or None. Read-only, its own connection; reads the whole file (about a
    second per few hundred MB)."""
    try:
        if unwritable(path.parent) is not None:  # SQLite cannot make the -shm file a reader needs there
            conn = connection.connect_read_only(path, timeout=30)
        else:
            conn = sqlite3.connect(str(path), timeout=30)
        try:
            rows = conn.execute("PRAGMA integrity_check" if full else "PRAGMA quick_check").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return str(exc)
    if rows == [("ok",)]:
        return None
    return "; ".join(str(r[0]) for r in rows[:3]) + (f" (and {len(rows) - 3} more)" if len(rows) > 3 else "")


def with_retries(operation: Callable[[], T], *, what: str = "catalog operation") -> T:
    """Run ``operation``; retry lock contention up to 3 times with exponential backoff."""
    for attempt in range(RETRIES + 1):
        try:
            return operation()
        except (sqlite3.Error, OSError) as exc:
            mapped = _classify(exc)
            if mapped is not None:
                raise mapped from exc
            if attempt == RETRIES:
                raise StorageLockedError(
                    f"{what} failed: the storage stayed locked through {RETRIES} retries ({exc})",
                    suggestion="another process holds the store; try again, or stop the other process",
                ) from exc
            time.sleep(BACKOFF_S * (2**attempt))
    raise AssertionError("unreachable")


@dataclass(slots=True)
class MemoryRow:
    """A ``memories`` row as stored: times are UTC epoch seconds, metadata and chunk are JSON text."""

    id: str
    type: str
    content: str
    metadata: str
    source: str
    memory_class: str
    session_id: str | None
    created_at: float
    updated_at: float | None = None
    importance: float = 0.5
    access_count: int = 0
    last_accessed: float | None = None
    bookmarked: bool = False
    content_hash: str = ""
    chunk: str | None = None
    expires_at: float | None = None
    indexed: bool = False
    embedding: np.ndarray | None = None
    scope: str | None = None
    #: Whose words the row holds (:func:`remindful.model.make_origin`).
    origin: str = "user"
    #: Whether the row passed the store's redaction (:func:`redact_row`): the Store's row builder
    #: redacts as it builds; the catalog redacts any other row before it inserts it.
    redacted: bool = False

    @classmethod
    def from_sql(cls, row: Sequence[Any]) -> MemoryRow:
        """A row read with :data:`~remindful.engine.schema.MEMORY_COLUMNS` (extra columns after them are ignored)."""
        (
            mid,
            mtype,
            content,
            metadata,
            source,
            mclass,
            session_id,
            created_at,
            updated_at,
            importance,
            access_count,
            last_accessed,
            bookmarked,
            chash,
            chunk,
            expires_at,
            indexed,
            scope,
            origin,
        ) = row[:19]
        return cls(
            id=mid,
            type=mtype,
            content=content,
            metadata=metadata,
            source=source,
            memory_class=mclass,
            session_id=session_id,
            created_at=created_at,
            updated_at=updated_at,
            importance=importance,
            access_count=access_count,
            last_accessed=last_accessed,
            bookmarked=bool(bookmarked),
            content_hash=chash,
            chunk=chunk,
            expires_at=expires_at,
            indexed=bool(indexed),
            scope=scope,
            origin=origin,
        )


def _upgrade_batches(conn: sqlite3.Connection, columns: str) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of ``memories`` in rowid order, :data:`SCOPE_BATCH` at a time, for an upgrade that
    gives each one a new column's value: ``(rowid, *columns, metadata)``, the metadata parsed (a
    dict; ``{}`` where it is not one)."""
    after = 0
    while True:
        rows = conn.execute(
            f"SELECT rowid, {columns}, metadata FROM memories WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (after, SCOPE_BATCH),
        ).fetchall()
        if not rows:
            return
        after = rows[-1][0]
        batch = []
        for *fields, metadata in rows:
            try:
                meta = json.loads(metadata) if metadata else {}
            except ValueError:
                meta = {}
            batch.append((*fields, meta if isinstance(meta, dict) else {}))
        yield batch


#: Connections to catalog files that were replaced: never closed (see :meth:`Catalog.follow_file`).
_RETIRED: list[sqlite3.Connection] = []


def _identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def redact_row(redaction: StoreRedactor, row: MemoryRow, counts: dict[str, int] | None = None) -> None:
    """Make ``row`` fit to be written, in place: its content, metadata and chunk redacted, its
    session id mapped (:meth:`StoreRedactor.session_id`). A content the redaction changed gets
    its new hash and loses its vector (made from the secret: the row is embedded again). A row
    marked ``redacted`` is left as it is."""
    if row.redacted:
        return
    content = redaction.text(row.content, counts)
    if content != row.content:
        row.content, row.content_hash, row.embedding = content, content_hash(content), None
    row.metadata = json.dumps(redaction.value(json.loads(row.metadata), counts), ensure_ascii=False, allow_nan=False)
    if row.session_id is not None:
        row.session_id = redaction.session_id(row.session_id, counts)
    if row.chunk:
        row.chunk = json.dumps(redaction.value(json.loads(row.chunk), counts))
    row.redacted = True


def counted(counts: Mapping[str, int]) -> dict[str, int]:
    """Redaction hits by rule, as ``capture_stats`` names them (``redacted_<rule>``)."""
    return {f"redacted_{name}": n for name, n in counts.items()}


#: A delete of this many rows or more runs with a page cache of BIG_DELETE_CACHE_KIB.
BIG_DELETE = 1000
BIG_DELETE_CACHE_KIB = 65536


class Catalog:
    """Thread-safe access to ``catalog.sqlite3``. One connection, serialised by a lock.

    :meth:`read`, :meth:`read_in`, :meth:`write` and :meth:`transaction` run raw SQL: they are the
    engine's own. Everything above the engine asks a repository of :mod:`remindful.engine.repositories`
    (or a named method here) instead, so that a second catalog backend can replace this one
    (``tests/test_architecture.py`` holds every module outside ``engine/`` to that).

    ``redaction`` is the store's redactor (default: the built-in rules, the key beside the
    catalog file); the named methods that write pass what they write through it. ``scope_of``
    gives the rows of a catalog older than scopes theirs when the upgrade runs (default:
    :class:`remindful.engine.scopes.Assigner` with the default settings)."""

    #: Every vector goes to the index (a local one: only this user's files hold it).
    indexes_private = True

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout_ms: int = connection.BUSY_TIMEOUT_MS,
        redaction: StoreRedactor | None = None,
        scope_of: ScopeOf | None = None,
    ) -> None:
        self.path = path
        self.redaction = (
            redaction if redaction is not None else StoreRedactor(build_redactor(library=True), path.parent)
        )
        self._scope_of = scope_of
        self._lock = threading.RLock()
        self._local = threading.local()
        self._lexical = LexicalSearch(self)
        self._session_ids = StoredSessionIds(self.read, self.redaction.session_id)
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()  # not the shared connection's: a reader never waits for a writer
        # Reads running on the threads' own connections, and whether close() has begun: close
        # waits for them (closing a connection under a running query crashed the process).
        self._reads = threading.Condition(self._readers_lock)
        self._active_reads = 0
        self._closed = False
        self._busy_timeout_ms = busy_timeout_ms
        #: Every write transaction holds it shared: a restore or a clear-all waits for them
        #: (:mod:`remindful.engine.storelock`).
        self.store_lock = StoreLock(path.parent)
        self._epoch = 0  # bumped when the file is replaced: each thread's reader reconnects
        self._vector_room: int | None = None  # bytes a stored vector takes (see vector_room())
        self._dimension: Callable[[], int] | None = None  # the embedder's, asked for before any vector is stored
        self._wal_checked_at = 0.0  # monotonic time the writer last looked at the log's size
        #: Why nothing can be written (a read-only directory, a full disk), if so: the catalog is
        #: open for reading only, and every write raises it (:meth:`transaction`).
        self.unwritable: StorageError | None = None
        #: The damage a read or write of this process met (a CorruptionError), if any: from then on
        #: nothing is written (:meth:`transaction`), as every command stops on a damaged catalog.
        #: A store's own pages may be sound while others are not; the damage then shows where a
        #: later read touches it (the indexer's), and the next write stops there.
        self.damage: CorruptionError | None = None
        private_dir(path.parent, "storage directory")
        try:
            try:
                connection.make_private(path)
                self._conn = connection.connect(path, busy_timeout_ms=busy_timeout_ms, check_same_thread=False)
            except (sqlite3.Error, OSError) as exc:
                # A full disk or a read-only filesystem: SQLite cannot even make the -shm file a
                # reader needs. What is there can still be read.
                why = unwritable(path.parent, exc)
                if why is None or not path.is_file() or path.stat().st_size == 0:
                    raise
                self._conn = connection.connect_read_only(path, check_same_thread=False)
                self.unwritable = why
                log.warning("%s; the catalog is open for reading only", why.message)
            self._file = _identity(path)
        except (sqlite3.Error, OSError) as exc:
            raise StorageError(f"Cannot open catalog {path}: {exc}") from exc
        with_retries(self._init_schema, what="opening the catalog")

    def _init_schema(self) -> None:
        conn = self._conn
        if self.unwritable is not None:  # read as it is: an older schema cannot be upgraded here
            if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                raise self.unwritable
            return
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":  # pragma: no cover - only on filesystems without shared memory
            raise StorageError(f"SQLite WAL mode unavailable on {self.path} (got {mode})")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version < SCHEMA_VERSION:
            with self.store_lock.shared():
                conn.execute("BEGIN IMMEDIATE")
                try:
                    # Another process may have upgraded it meanwhile: look again inside the transaction.
                    version = conn.execute("PRAGMA user_version").fetchone()[0]
                    if version < SCHEMA_VERSION:
                        self._upgrade(conn, version)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
        elif version > SCHEMA_VERSION:
            raise StorageError(
                f"{self.path} was written by a newer remindful (schema {version} > {SCHEMA_VERSION})",
                suggestion="upgrade remindful",
            )

    def _upgrade(self, conn: sqlite3.Connection, version: int) -> None:
        """Bring a catalog of schema ``version`` up to :data:`SCHEMA_VERSION`, in the caller's
        transaction: all of it or nothing. From before scopes, the ``scope`` column is added and
        every row given its scope by ``scope_of`` (as a new memory would be given it, from its
        metadata's ``cwd`` or ``project_id``; unscoped where they name none and no user-level rule
        applies), the projects found recorded."""
        columns = {row[1] for row in conn.execute("PRAGMA table_info(memories)")}
        if columns and "scope" not in columns:
            conn.execute(ADD_SCOPE_COLUMN)
        if columns and "origin" not in columns:
            conn.execute(ADD_ORIGIN_COLUMN)
            self._origin_rows(conn)
        if columns and "vector_room" not in columns:
            conn.execute(ADD_VECTOR_ROOM_COLUMN)
        if columns and version < STORED_SIZE_VERSION:
            # Vectors were counted as float32 (4 bytes a component) whatever was stored.
            conn.execute(
                "UPDATE memories SET size_bytes = length(CAST(content AS BLOB)) + length(metadata) "
                "+ length(embedding) WHERE embedding IS NOT NULL"
            )
        # Before schema 12 the session windows' text was stored in context_fts: rebuilt contentless.
        windows_sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'context_fts'").fetchone()
        stored_windows = windows_sql is not None and "content=''" not in windows_sql[0]
        if stored_windows:
            conn.execute("DROP TABLE context_fts")
        for statement in _statements(SCHEMA + RECOUNT_TYPES):
            conn.execute(statement)
        if stored_windows and columns and "seq" in columns:
            context.rebuild(conn)
        if columns and version < SCOPES_VERSION:
            self._scope_rows(conn)
            for statement in _statements(RECOUNT_SCOPES):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @staticmethod
    def _origin_rows(conn: sqlite3.Connection) -> None:
        """Give every row of a catalog older than origins the origin its source and metadata
        imply (:func:`remindful.model.derive_origin`; see :meth:`_upgrade`)."""
        for rows in _upgrade_batches(conn, "source"):
            updates = []
            for rowid, source, metadata in rows:
                origin = derive_origin(source, metadata)
                if origin != "user":
                    updates.append((origin, rowid))
            conn.executemany("UPDATE memories SET origin = ? WHERE rowid = ?", updates)

    def _scope_rows(self, conn: sqlite3.Connection) -> None:
        """Give every row of an older catalog its scope (see :meth:`_upgrade`)."""
        scope_of = self._scope_of
        if scope_of is None:
            from remindful.engine.projects import Resolver
            from remindful.engine.scopes import Assigner

            scope_of = Assigner(Resolver())
        now = time.time()
        for rows in _upgrade_batches(conn, "type, source, content"):
            updates: list[tuple[str, int]] = []
            found: dict[str, Project] = {}
            for rowid, mtype, source, content, metadata in rows:
                scope, project = scope_of(content, type=mtype, source=source, metadata=metadata)
                if scope is not None:
                    updates.append((scope, rowid))
                if project is not None and scope == project.scope:
                    found[project.key] = project
            conn.executemany("UPDATE memories SET scope = ? WHERE rowid = ?", updates)
            self.record_projects(conn, found.values(), now)

    def close(self) -> None:
        """Close every connection, once the reads running on the threads' own ones have ended
        (a read that starts later raises StorageError)."""
        with self._lock, self._reads:
            self._closed = True
            self._reads.wait_for(lambda: self._active_reads == 0)
            if self.unwritable is None:
                _give_back_free_pages(self._conn)
            self._conn.close()
            for conn in self._readers:
                conn.close()
            self._readers.clear()

    @contextmanager
    def _private(self) -> Iterator[sqlite3.Connection]:
        """This thread's own connection for one read, counted so that :meth:`close` waits for it."""
        with self._reads:
            if self._closed:
                raise StorageError(f"the catalog {self.path} is closed")
            self._active_reads += 1
        try:
            yield self._reader()
        finally:
            with self._reads:
                self._active_reads -= 1
                self._reads.notify_all()

    def _reader(self) -> sqlite3.Connection:
        """This thread's own read connection (WAL lets it read while another connection writes)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or self._local.epoch != self._epoch:
            if self.unwritable is not None:
                conn = connection.connect_read_only(self.path, check_same_thread=False)
            else:
                conn = connection.connect(self.path, check_same_thread=False)
            self._local.conn, self._local.epoch = conn, self._epoch
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def follow_file(self) -> bool:
        """If ``catalog.sqlite3`` is another file than the one open (a restore put a new file in
        place of a catalog too damaged to copy into, :mod:`remindful.services.backup`), connect to
        the new one; whether it did. The old connections are left open until the process ends:
        closing the last of them would checkpoint and unlink ``catalog.sqlite3-wal`` by name,
        which is the new file's WAL by then. A stat; every write transaction calls it."""
        try:
            found = _identity(self.path)
        except OSError:
            return False
        if found == self._file:
            return False
        with self._lock:
            if _identity(self.path) == self._file:
                return False
            log.warning("%s was replaced (a restore); reconnecting", self.path)
            _RETIRED.append(self._conn)
            with self._readers_lock:
                _RETIRED.extend(self._readers)
                self._readers.clear()
            self._conn = connection.connect(self.path, busy_timeout_ms=self._busy_timeout_ms, check_same_thread=False)
            self._file = _identity(self.path)
            self._epoch += 1
            self.damage = None  # another file: its damage, if any, is found anew
            with_retries(self._init_schema, what="opening the catalog")
        return True

    # -- plumbing ---------------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE). The caller wraps it in :func:`with_retries`.
        It holds the store lock shared (before the thread lock: a thread waiting for a restore
        must not hold up the restoring thread's own reads)."""
        if self.unwritable is not None:
            self._regain_writes()
        with self.store_lock.shared(), self._lock:
            self.follow_file()
            damage = self.damage
            if damage is not None:
                raise CorruptionError(damage.message, suggestion=damage.suggestion, part="catalog")
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            self._bound_wal()

    def _bound_wal(self) -> None:
        """After a commit, at most every ``WAL_CHECK_INTERVAL_S``: if the write-ahead log is larger
        than ``WAL_CHECKPOINT_BYTES``, checkpoint it in full and truncate it. The checkpoint waits
        up to ``WAL_CHECKPOINT_WAIT_MS`` for the readers of the moment (readers that start meanwhile
        read the database file, not the log); if one holds on longer, the log stays for the next
        look. Nothing of it raises: the write is committed already."""
        now = time.monotonic()
        if now - self._wal_checked_at < WAL_CHECK_INTERVAL_S:
            return
        self._wal_checked_at = now
        try:
            if os.stat(f"{self.path}-wal").st_size <= WAL_CHECKPOINT_BYTES:
                return
        except OSError:
            return
        try:
            with self._waiting_at_most(WAL_CHECKPOINT_WAIT_MS):
                busy, pages, done = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            log.debug("catalog log checkpointed: %s of %s pages%s", done, pages, " (readers held on)" if busy else "")
        except sqlite3.Error as exc:
            log.debug("catalog log not checkpointed now: %s", exc)

    @contextmanager
    def _waiting_at_most(self, ms: int) -> Iterator[None]:
        """The shared connection waits at most ``ms`` for another connection's lock meanwhile
        (its busy timeout), then as long as it was opened to."""
        self._conn.execute(f"PRAGMA busy_timeout={ms}")
        try:
            yield
        finally:
            self._conn.execute(f"PRAGMA busy_timeout={self._busy_timeout_ms}")

    def _regain_writes(self) -> None:
        """The catalog was opened for reading only (:attr:`unwritable`): if the disk has room again,
        connect for writing (this thread's readers reconnect too); else raise why it cannot."""
        with self._lock:
            if self.unwritable is None:
                return
            why = unwritable(self.path.parent)
            if why is not None:
                raise why
            try:
                conn = connection.connect(self.path, busy_timeout_ms=self._busy_timeout_ms, check_same_thread=False)
                conn.execute("PRAGMA user_version").fetchone()
            except (sqlite3.Error, OSError) as exc:
                why = unwritable(self.path.parent, exc) or StorageError(f"Cannot open catalog {self.path}: {exc}")
                raise why from exc
            _RETIRED.append(self._conn)  # an immutable reader: nothing of it to close by name
            _RETIRED.extend(self._readers)
            self._readers.clear()
            self._conn, self.unwritable = conn, None
            self._epoch += 1
            log.info("%s is writable again", self.path)

    def write(self, fn: Callable[[sqlite3.Connection], T], *, what: str = "write", pipelined: bool = False) -> T:
        """Run ``fn(conn)`` in one retried write transaction. (``pipelined``: a server catalog's
        hint, see :meth:`PostgresCatalog.write <remindful.engine.postgres.catalog.PostgresCatalog.write>`;
        a file's statements cost no round trip.)"""

        def run() -> T:
            with self.transaction() as conn:
                return fn(conn)

        return self._noting_damage(lambda: with_retries(run, what=what))

    def _noting_damage(self, operation: Callable[[], T]) -> T:
        try:
            return operation()
        except CorruptionError as exc:
            if exc.part == "catalog" and self.damage is None:
                self.damage = exc
            raise

    def read(self, sql: str, params: Sequence[Any] = (), *, private: bool = False) -> list[Any]:
        """Rows of a query. ``private=True`` runs it on this thread's own connection, in parallel
        with the shared one (search runs its lexical queries that way while it embeds the query).
        A read never waits for a write of another thread: while one holds the shared connection
        (perhaps waiting for another process's transaction), it runs on this thread's own."""

        def run() -> list[Any]:
            if private:
                with self._private() as conn:
                    return conn.execute(sql, params).fetchall()
            with self._reading() as conn:
                return conn.execute(sql, params).fetchall()

        return self._noting_damage(lambda: with_retries(run, what="read"))

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """A connection to read on: the shared one if no other thread holds it (this thread's
        transaction included), else this thread's own rather than waiting for the holder (a write
        may be waiting for another process's transaction, up to the busy timeout and retries)."""
        if not self._lock.acquire(blocking=False):
            with self._private() as conn:
                yield conn
            return
        try:
            yield self._conn
        finally:
            self._lock.release()

    def read_in(self, sql: str, keys: Sequence[Any], params: Sequence[Any] = ()) -> list[Any]:
        """Rows of ``sql`` for every key: ``{marks}`` in it stands for a chunk of ``keys`` (as
        ``IN ({marks})``), queried 500 at a time to stay under SQLite's variable limit; ``params``
        bind before the chunk. ``sql`` is a format string: other braces in it must be doubled."""
        rows: list[Any] = []
        for start in range(0, len(keys), 500):
            chunk = list(keys[start : start + 500])
            rows += self.read(sql.format(marks=",".join("?" * len(chunk))), [*params, *chunk])
        return rows

    # -- memories -------------------------------------------------------------------------------

    def insert_memories(self, conn: sqlite3.Connection, rows: Sequence[MemoryRow]) -> None:
        """Insert rows (inside the caller's transaction) and build their session context windows.
        A row not yet redacted is redacted here first, in place (:func:`redact_row`), and the
        hits are counted in the same transaction."""
        counts: dict[str, int] = {}
        for row in rows:
            redact_row(self.redaction, row, counts)
        add_counts(conn, counted(counts))
        room = self.vector_room(conn)
        conn.executemany(
            "INSERT INTO memories (id, type, content, metadata, source, memory_class, session_id, created_at, "
            "updated_at, importance, access_count, last_accessed, bookmarked, content_hash, chunk, expires_at, "
            "embedding, indexed, size_bytes, scope, origin, vector_room) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
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
                    blob := _blob(r.embedding),
                    int(r.indexed),
                    len(r.content.encode()) + len(r.metadata) + (0 if blob is None else len(blob)),
                    r.scope,
                    r.origin,
                    None if blob is not None or not room else bytes(room),
                )
                for r in rows
            ],
        )
        context.after_insert(conn, [r.id for r in rows])

    def get_rows(self, ids: Sequence[str]) -> dict[str, MemoryRow]:
        """Rows for ``ids`` that exist, keyed by id."""
        rows = self.read_in(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id IN ({{marks}})", ids)
        return {row[0]: MemoryRow.from_sql(row) for row in rows}

    def rows_passing(
        self, ids: Sequence[str], flt: SqlFilter, *, vectors: dict[str, np.ndarray] | None = None
    ) -> dict[str, MemoryRow]:
        """Rows for the ``ids`` that exist and pass ``flt``, keyed by id; with ``vectors``, their
        embeddings are read in the same statement and added to it."""
        embedding = "" if vectors is None else ", embedding"
        rows = self.read(f"SELECT {MEMORY_COLUMNS}{embedding} {_FROM_IDS} WHERE {flt.sql}", [_json(ids), *flt.params])
        if vectors is not None:
            vectors.update((row[0], stored_vectors.decode(row[-1])) for row in rows if row[-1] is not None)
        return {row[0]: MemoryRow.from_sql(row) for row in rows}

    def ids_passing(self, ids: Sequence[str], flt: SqlFilter) -> set[str]:
        """Those of ``ids`` that exist and pass ``flt``."""
        return {row[0] for row in self.read(f"SELECT id {_FROM_IDS} WHERE {flt.sql}", [_json(ids), *flt.params])}

    def ids_by_rowid(self, rowids: Sequence[int], flt: SqlFilter, *, private: bool = False) -> dict[int, str]:
        """The ids of those of ``rowids`` that exist and pass ``flt``, keyed by rowid."""
        sql = f"SELECT memories.rowid, id {_FROM_ROWIDS} WHERE {flt.sql}"
        return dict(self.read(sql, [_json(rowids), *flt.params], private=private))

    def select_rows(
        self, flt: SqlFilter, *, limit: int = 100, offset: int = 0, order: str = "created_at DESC, rowid DESC"
    ) -> list[MemoryRow]:
        sql = f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {flt.sql} ORDER BY {order} LIMIT ? OFFSET ?"
        return [MemoryRow.from_sql(r) for r in self.read(sql, [*flt.params, limit, offset])]

    def indexed_ids(self, memory_type: str) -> set[str] | None:
        """Ids of the rows of ``memory_type`` marked indexed: what its collection should hold
        (None: not all of them are visible here, as on a team's shared catalog)."""
        return {r[0] for r in self.read("SELECT id FROM memories WHERE type = ? AND indexed = 1", (memory_type,))}

    def indexed_count(self, memory_type: str) -> int:
        """How many rows of ``memory_type`` are marked indexed."""
        return self.count(SqlFilter("type = ? AND indexed = 1", (memory_type,)))

    def count(self, flt: SqlFilter | None = None, *, at_most: int | None = None) -> int:
        """Rows passing ``flt``; with ``at_most``, counting stops there (a broad filter would read
        the whole table)."""
        flt = flt or SqlFilter()
        if at_most is None:
            return int(self.read(f"SELECT count(*) FROM memories WHERE {flt.sql}", flt.params)[0][0])
        return int(self.read(_bounded_count_sql(flt), [*flt.params, at_most])[0][0])

    def embeddings(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        rows = self.read_in("SELECT id, embedding FROM memories WHERE id IN ({marks}) AND embedding IS NOT NULL", ids)
        return {mid: stored_vectors.decode(blob) for mid, blob in rows}

    def filtered_embeddings(self, flt: SqlFilter) -> tuple[list[str], np.ndarray | None]:
        """Ids and an (n, d) matrix of every embedded row matching ``flt`` (for exact scoring)."""
        return _matrix(self.read(_embeddings_sql(flt), flt.params))

    def filtered_embeddings_if(
        self, flt: SqlFilter, few: int, at_most: int, take: Callable[[int], bool]
    ) -> tuple[list[str], np.ndarray | None] | None:
        """As :meth:`filtered_embeddings` when at most ``few`` rows pass ``flt``, or when ``take(n)``
        agrees for their count ``n`` (counted up to ``at_most``); else None. One statement reads
        the rows, its first ``few + 1`` before the count and the rest after it: none is read
        twice, and all in one snapshot."""
        rows_sql, count_sql = _embeddings_sql(flt), _bounded_count_sql(flt)

        def run() -> tuple[list[str], np.ndarray | None] | None:
            with self._reading() as conn:
                cursor = conn.execute(rows_sql, flt.params)
                try:
                    rows = cursor.fetchmany(few + 1)
                    if len(rows) <= few:
                        return _matrix(rows)
                    if not take(int(conn.execute(count_sql, [*flt.params, at_most]).fetchone()[0])):
                        return None
                    return _matrix(rows + cursor.fetchall())
                finally:
                    cursor.close()

        return with_retries(run, what="read")

    def pending_embeddings(self, flt: SqlFilter, after: int | None) -> tuple[list[str], np.ndarray | None]:
        """As :meth:`filtered_embeddings`, among the rows a vector index may lack: those not marked
        indexed, and (unless ``after`` is None) those above rowid ``after``."""
        pending = "SELECT rowid FROM memories WHERE indexed = 0"
        params: list[Any] = []
        if after is not None:
            pending += " UNION SELECT rowid FROM memories WHERE rowid > ?"
            params.append(after)
        # The few pending rows drive the query: a broad filter's index (on type, say) would scan the table.
        sql = (
            f"WITH pending(r) AS ({pending}) SELECT id, embedding FROM pending CROSS JOIN memories "
            f"ON memories.rowid = pending.r WHERE {flt.sql} AND embedding IS NOT NULL"
        )
        return _matrix(self.read(sql, [*params, *flt.params]))

    def long_without_chunks(self, ids: Sequence[str], min_chars: int) -> list[tuple[str, str, str]]:
        """``(id, content, content_hash)`` of those of ``ids`` longer than ``min_chars`` characters
        whose parts' vectors are not stored for their present text (:mod:`remindful.engine.chunks`)."""
        return self.read(
            f"SELECT id, content, memories.content_hash {_FROM_IDS} WHERE length(content) > ? AND NOT EXISTS "
            "(SELECT 1 FROM chunk_vectors c WHERE c.memory = memories.rowid "
            "AND c.content_hash = memories.content_hash)",
            [_json(ids), min_chars],
        )

    def set_chunk_vectors(self, items: Mapping[str, tuple[str, np.ndarray]]) -> None:
        """Store each memory's parts' vectors (``id -> (content hash, (n, d) matrix)``) in place of
        any it had; nothing for a memory deleted meanwhile, or whose text changed since (its hash
        is no longer the one given)."""

        def run(c: sqlite3.Connection) -> None:
            for mid, (text_hash, matrix) in items.items():
                found = c.execute(
                    "SELECT rowid FROM memories WHERE id = ? AND content_hash = ?", (mid, text_hash)
                ).fetchone()
                if found is None:
                    continue
                c.execute("DELETE FROM chunk_vectors WHERE memory = ?", (found[0],))
                c.executemany(
                    "INSERT INTO chunk_vectors (memory, part, content_hash, vector) VALUES (?, ?, ?, ?)",
                    [(found[0], part, text_hash, _blob(vector)) for part, vector in enumerate(matrix)],
                )

        if items:
            self.write(run, what="saving the vectors of long memories' parts")

    def chunk_vectors(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The parts' vectors of those of ``ids`` that have them for their present text, each an
        (n, d) matrix."""
        rows = self.read(
            f"SELECT id, c.vector {_FROM_IDS} JOIN chunk_vectors c ON c.memory = memories.rowid "
            "AND c.content_hash = memories.content_hash ORDER BY id, c.part",
            [_json(ids)],
        )
        blobs: dict[str, list[bytes]] = {}
        for mid, blob in rows:
            blobs.setdefault(mid, []).append(blob)
        return {mid: stored_vectors.matrix(parts) for mid, parts in blobs.items()}

    def lexical(
        self, terms: Sequence[str], flt: SqlFilter, limit: int, *, table: str = "memories_fts", restricted: bool = True
    ) -> list[tuple[str, float]]:
        """BM25 matches among rows passing ``flt``, best first: see :meth:`LexicalSearch.search`."""
        return self._lexical.search(terms, flt, limit, table=table, restricted=restricted)

    def doc_freqs(self, terms: Sequence[str], upto: int | None = None) -> tuple[dict[str, int], int]:
        """Memories holding each term, and the store's size: see :meth:`LexicalSearch.doc_freqs`."""
        return self._lexical.doc_freqs(terms, upto)

    def windows(self, ids: Sequence[str]) -> dict[str, str]:
        """Session-window texts by id: see :meth:`LexicalSearch.windows`."""
        return self._lexical.windows(ids)

    def neighbourhoods(self, ids: Sequence[str], radius: int) -> list[tuple[str, str, int, bytes]]:
        """For each id: (id, neighbour id, offset, neighbour vector as float32 bytes) for every
        embedded memory within ``radius`` positions of it in its session (offset 0 is the memory
        itself)."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self.read(
            "SELECT c.id, m.id, m.seq - c.seq, m.embedding FROM memories c JOIN memories m "
            "ON m.session_id = c.session_id AND m.seq BETWEEN c.seq - ? AND c.seq + ? "
            f"WHERE c.id IN ({marks}) AND m.embedding IS NOT NULL",
            [radius, radius, *ids],
        )
        return [(r[0], r[1], int(r[2]), stored_vectors.decode_bytes(r[3])) for r in rows]

    def unindexed(self, limit: int = 1000) -> list[tuple[MemoryRow, np.ndarray | None]]:
        rows = self.read(
            f"SELECT {MEMORY_COLUMNS}, embedding FROM memories WHERE indexed = 0 ORDER BY rowid LIMIT ?", [limit]
        )
        return [(MemoryRow.from_sql(r), None if r[-1] is None else stored_vectors.decode(r[-1])) for r in rows]

    def mark_indexed(self, ids: Sequence[str], value: bool = True) -> None:
        if ids:
            self.write(
                lambda c: c.executemany("UPDATE memories SET indexed = ? WHERE id = ?", [(int(value), i) for i in ids]),
                what="marking memories indexed",
            )

    def set_embeddings(self, items: dict[str, np.ndarray], *, wait: bool = True) -> bool:
        """Save vectors; a row that had none grows by the stored vector's size (quota accounting).
        ``wait=False``: only if that needs no wait for another thread's or process's write (see
        :meth:`try_write`); returns whether they were saved."""

        def run(c: sqlite3.Connection) -> None:
            c.executemany(
                "UPDATE memories SET size_bytes = size_bytes + CASE WHEN embedding IS NULL THEN ? ELSE 0 END, "
                "embedding = ?, vector_room = NULL WHERE id = ?",
                [(len(blob), blob, k) for k, v in items.items() if (blob := _blob(v)) is not None],
            )
            if items:
                self._vector_room = len(_blob(next(iter(items.values()))) or b"")

        if not wait:
            return self.try_write(run)
        self.write(run, what="saving embeddings")
        return True

    def try_write(self, fn: Callable[[sqlite3.Connection], Any]) -> bool:
        """Run ``fn(conn)`` in one write transaction if it can start at once: not while another
        thread of this process holds the shared connection, another process writes, or a restore
        holds the store; whether it ran. For what a reader may keep on the way but must not wait
        for (a search keeping the vectors it computed). An error of ``fn`` (a full disk, say) is
        rolled back and logged: nothing was written. Nothing is written to a catalog found
        damaged (:attr:`damage`) or unwritable."""
        if self.unwritable is not None or self.damage is not None:
            return False
        try:
            held = self.store_lock.shared(wait=False)
            held.__enter__()
        except BlockingIOError:  # a restore or a clear-all holds the store
            return False
        try:
            if not self._lock.acquire(blocking=False):
                return False
            try:
                return self._try_transaction(fn)
            finally:
                self._lock.release()
        finally:
            held.__exit__(None, None, None)

    def _try_transaction(self, fn: Callable[[sqlite3.Connection], Any]) -> bool:
        """:meth:`try_write`'s transaction, under the locks it took."""
        self.follow_file()
        conn = self._conn
        try:
            with self._waiting_at_most(0):
                conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:  # another process writes
            return False
        try:
            fn(conn)
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            log.debug("not written now: %s", exc)
            return False
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return True

    def without_embeddings(self, ids: Sequence[str]) -> list[tuple[str, str]]:
        """(id, content) of the memories among ``ids`` that have no vector yet."""
        return self.read_in("SELECT id, content FROM memories WHERE id IN ({marks}) AND embedding IS NULL", ids)

    def type_counts(self) -> dict[str, int]:
        """How many memories each type holds (types without any are left out); exact, and cheap."""
        return dict(self.read("SELECT type, n FROM type_counts WHERE n > 0"))

    def scope_counts(self) -> dict[str | None, int]:
        """How many memories each scope holds (None: unscoped; scopes without any are left out);
        exact, and cheap."""
        return {scope or None: int(n) for scope, n in self.read("SELECT scope, n FROM scope_counts WHERE n > 0")}

    def record_projects(
        self, conn: sqlite3.Connection, projects: Iterable[Project], at: float, counts: dict[str, int] | None = None
    ) -> None:
        """Record ``projects`` as seen at ``at``, in the caller's transaction (a known one keeps its
        name and root, the first seen; one known by name only takes the first root seen). The name
        and the root directory are written redacted (a directory's or a marker's name may hold a
        secret); hits go to ``counts``."""
        text = self.redaction.text
        conn.executemany(
            "INSERT INTO projects (key, name, root, first_seen, last_seen) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(key) DO UPDATE SET last_seen = max(last_seen, excluded.last_seen), "
            "root = CASE WHEN root = '' THEN excluded.root ELSE root END",
            [(p.key, text(p.name, counts), text(p.root, counts), at, at) for p in projects],
        )

    def update_row(self, conn: sqlite3.Connection, row: MemoryRow, *, version: int | None = None) -> None:
        """Write ``row``'s changed fields (content, metadata, hash, bookmark, importance, scope,
        origin; its vector if it has one) in the caller's transaction, marked for re-indexing, with
        its session windows rebuilt. ``version``: versions are kept by a shared (PostgreSQL)
        catalog only; a local catalog has one writer and refuses none."""
        context.before_update(conn, row.id)
        conn.execute(
            "UPDATE memories SET content=?, metadata=?, content_hash=?, bookmarked=?, importance=?, updated_at=?, "
            "indexed=0, embedding=COALESCE(?, embedding), scope=?, origin=? WHERE id=?",
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
        context.after_update(conn, row.id)

    def version_of(self, memory_id: str) -> int | None:
        """None: a local catalog keeps no versions (one writer)."""
        return None

    def move_scope(self, conn: sqlite3.Connection, flt: SqlFilter, scope: str) -> int:
        """Move the memories passing ``flt`` to ``scope`` in the caller's transaction; how many moved."""
        flt = flt & SqlFilter("scope IS NOT ?", (scope,))
        return int(conn.execute(f"UPDATE memories SET scope = ? WHERE {flt.sql}", (scope, *flt.params)).rowcount)

    @staticmethod
    def count_in(conn: sqlite3.Connection, counts: Mapping[str, int]) -> None:
        """Add ``counts`` (name → hits) to ``capture_stats`` in the caller's transaction."""
        add_counts(conn, counts)

    def some_ids(self, limit: int) -> list[str]:
        """Up to ``limit`` memory ids, any."""
        return [str(r[0]) for r in self.read("SELECT id FROM memories LIMIT ?", (limit,))]

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that are stored."""
        return {r[0] for r in self.read_in("SELECT id FROM memories WHERE id IN ({marks})", ids)}

    def touch(self, ids: Sequence[str], at: float, counts: Mapping[str, int] | None = None) -> None:
        """Count an access: ``access_count`` + 1 and ``last_accessed`` = at; and add ``counts`` to
        the store's counters (``capture_stats``: the searches' figures, :mod:`remindful.engine.perf`)."""
        if not ids and not counts:
            return

        def run(c: sqlite3.Connection) -> None:
            c.executemany(
                "UPDATE memories SET access_count = access_count + 1, last_accessed = ? WHERE id = ?",
                [(at, i) for i in ids],
            )
            add_counts(c, counts or {})

        self.write(run, what="recording access")

    # -- the rest of the catalog ----------------------------------------------------------------

    def change_marks(self, *, private: bool = False) -> tuple[int, int]:
        """The audit log's newest entry (a delete, an update or a move of scope writes one) and the
        newest memory's rowid, in one read (``private``: on this thread's own connection, as
        :meth:`read` has it)."""
        row = self.read(
            "SELECT (SELECT coalesce(max(rowid), 0) FROM audit_log), (SELECT coalesce(max(rowid), 0) FROM memories)",
            private=private,
        )[0]
        return int(row[0]), int(row[1])

    def audit(self, conn: sqlite3.Connection, action: str, memory_id: str | None, detail: dict[str, Any]) -> None:
        """One audit-log entry, now, in the caller's transaction (the statement hook processes run
        too: :func:`remindful.engine.spool.audit`); ``detail`` is redacted."""
        spool.audit(conn, action, memory_id, detail, redaction=self.redaction)

    def stored_session_id(self, session_id: str) -> str:
        """The id under which session ``session_id`` is stored: itself, unless it carries a secret
        (:meth:`StoreRedactor.session_id`); a stored id maps to itself, found without the secret
        detector (:mod:`remindful.engine.session_ids`)."""
        return self._session_ids(session_id)

    def ensure_session(self, conn: sqlite3.Connection, session_id: str, at: float) -> None:
        self.upsert_session(conn, session_id, at)

    def upsert_session(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        at: float,
        *,
        metadata: Mapping[str, Any] | None = None,
        ended: bool | None = None,
    ) -> None:
        """Record session ``session_id`` as seen at ``at``, in the caller's transaction: a new one
        starts at ``at``, a known one keeps the earlier start. ``metadata`` (if given) replaces its
        metadata; ``ended`` True ends it at ``at``, False reopens it, None leaves that as it is. The
        id is mapped and the metadata redacted as every write is."""
        session_id = self.redaction.session_id(session_id)  # in a transaction: no read (stored_session_id's)
        if metadata is not None:
            metadata = self.redaction.value(metadata)
        ended_at = "excluded.ended_at" if ended else ("NULL" if ended is False else "ended_at")
        conn.execute(
            "INSERT INTO sessions (id, started_at, ended_at, metadata) VALUES (?, ?, ?, coalesce(?, '{}')) "
            "ON CONFLICT(id) DO UPDATE SET started_at = min(started_at, excluded.started_at), "
            f"ended_at = {ended_at}, metadata = coalesce(?, metadata)",
            (session_id, at, at if ended else None, *(2 * [None if metadata is None else json.dumps(metadata)])),
        )

    def session_metadata(self, session_id: str, conn: sqlite3.Connection | None = None) -> dict[str, Any]:
        """The metadata of session ``session_id`` ({} for a session not recorded); read in the
        caller's transaction ``conn`` when given (to update it there)."""
        stored = self.stored_session_id(session_id) if conn is None else self.redaction.session_id(session_id)
        sql, params = "SELECT metadata FROM sessions WHERE id = ?", (stored,)
        rows = conn.execute(sql, params).fetchall() if conn is not None else self.read(sql, params)
        return dict(json.loads(rows[0][0])) if rows and rows[0][0] else {}

    def stored_with(self, content_hash: str, session_id: str) -> list[tuple[str, dict[str, Any]]]:
        """(id, metadata) of each memory of session ``session_id`` whose content has ``content_hash``."""
        rows = self.read(
            "SELECT id, metadata FROM memories WHERE substr(content_hash, 1, 16) = substr(?1, 1, 16) "
            "AND content_hash = ?1 AND session_id = ?2",
            (content_hash, self.stored_session_id(session_id)),
        )
        return [(str(mid), json.loads(metadata)) for mid, metadata in rows]

    def has_chunked_response(self, session_id: str, full_content_hash: str) -> bool:
        """Whether session ``session_id`` holds a response stored in chunks whose whole text has
        ``full_content_hash`` (its chunks carry it in their metadata)."""
        return bool(
            self.read(
                "SELECT 1 FROM memories WHERE session_id = ? AND source = 'response' "
                "AND json_extract(metadata, '$.full_content_hash') = ? LIMIT 1",
                (self.stored_session_id(session_id), full_content_hash),
            )
        )

    def claim_embedding_model(self, name: str) -> str:
        """Record ``name`` as the model of this store's vectors unless one is recorded; returns the
        recorded one."""
        return str(
            self.write(
                lambda c: (
                    c.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('embedding_model', ?)", (name,)),
                    c.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()[0],
                )[1],
                what="recording the embedding model",
            )
        )

    def vectors_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored memories' vectors by content hash (one per hash)."""
        wanted = set(hashes)
        rows = self.read_in(
            "SELECT content_hash, embedding FROM memories WHERE substr(content_hash, 1, 16) IN ({marks}) "
            "AND embedding IS NOT NULL",
            sorted({h[:16] for h in wanted}),
        )
        return {h: stored_vectors.decode(blob) for h, blob in rows if h in wanted}

    def expect_vectors(self, dimension: Callable[[], int]) -> None:
        """Where this catalog's vectors will come from: an embedder of ``dimension()`` numbers,
        asked when rows come before any vector is stored here (see :meth:`vector_room`)."""
        self._dimension = dimension

    def vector_room(self, conn: sqlite3.Connection) -> int:
        """The bytes a stored vector takes here (that of the newest one stored; before any, that of
        the expected embedder's, else 0): a row committed without its vector is given that much room
        (schema 14's ``vector_room``). A fresh store's first rows come before any vector: without
        the expected size, a bulk import grew every row in place when its vector came, and the
        table's pages were 78 % full where they are 91 %."""
        if self._vector_room is None:
            found = conn.execute(
                "SELECT length(embedding) FROM memories WHERE embedding IS NOT NULL ORDER BY rowid DESC LIMIT 1"
            ).fetchone()
            self._vector_room = int(found[0]) if found is not None else self._expected_room()
        return self._vector_room

    def _expected_room(self) -> int:
        """What a vector of the expected embedder takes (0 when none is known, or it cannot be built:
        its error comes with the embedding; :meth:`set_embeddings` learns the size then)."""
        if self._dimension is None:
            return 0
        try:
            return stored_vectors.stored_size(self._dimension())
        except Exception as exc:
            log.debug("no room for vectors of an embedder not built: %s", exc)
            return 0

    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        rows = self.read_in(
            "SELECT hash, vector FROM embedding_cache WHERE model = ? AND hash IN ({marks})", hashes, [model]
        )
        return {h: stored_vectors.decode(blob) for h, blob in rows}

    def put_cached_embeddings(self, model: str, items: dict[str, np.ndarray]) -> None:
        if items:
            self.write(
                lambda c: c.executemany(
                    "INSERT OR IGNORE INTO embedding_cache (model, hash, vector) VALUES (?,?,?)",
                    [(model, h, _blob(v)) for h, v in items.items()],
                ),
                what="caching embeddings",
            )

    # -- deletes and their queues ----------------------------------------------------------------

    def delete_ids(
        self, ids: Sequence[str], *, reason: str | Mapping[str, str] = "delete", mend_later: bool = False
    ) -> list[tuple[str, str]]:
        """Delete ``ids`` in one transaction: the rows, their FTS entries and session windows, the
        windows around them (``mend_later``: the windows are queued for :meth:`mend_windows`
        instead, see :mod:`remindful.engine.windows`), an audit-log entry per row (action ``reason``, or
        ``reason[id]``, default ``"delete"``) and an ``index_deletes`` entry per row, from which
        the vector index catches up (:meth:`pending_index_deletes`). Returns the (id, type) pairs
        that existed.

        Set-based: the ids go into a temporary table and every step is one statement over it."""

        def run(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            if len(ids) < BIG_DELETE:
                return self.delete_in(conn, ids, reason=reason, mend_later=mend_later)
            # Each FTS delete reads index pages that SQLite's default 2 MB page cache has dropped
            # again by the next row: a bigger cache for this transaction makes it ~1.5x faster.
            size = conn.execute("PRAGMA cache_size").fetchone()[0]
            conn.execute(f"PRAGMA cache_size = {-BIG_DELETE_CACHE_KIB}")
            try:
                return self.delete_in(conn, ids, reason=reason, mend_later=mend_later)
            finally:
                conn.execute(f"PRAGMA cache_size = {int(size)}")

        return self.write(run, what="deleting memories")

    @staticmethod
    def delete_in(
        conn: sqlite3.Connection,
        ids: Sequence[str],
        *,
        reason: str | Mapping[str, str] = "delete",
        mend_later: bool = False,
    ) -> list[tuple[str, str]]:
        """:meth:`delete_ids` inside the caller's transaction ``conn`` (a quota eviction commits
        with the insert it makes room for, or not at all)."""
        reasons = {} if isinstance(reason, str) else reason
        default = reason if isinstance(reason, str) else "delete"
        pairs = [(i, reasons.get(i, default)) for i in ids]
        conn.execute(DOOMED_DDL)
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

    def mend_windows(self, limit: int) -> int:
        """Mend the session windows around up to ``limit`` queued deletion spots; returns how many
        were handled (0: none left). Nothing queued, nothing written (a close on a full disk)."""
        if not self.windows_to_mend():
            return 0
        return self.write(lambda c: context.mend_pending(c, limit), what="mending session windows")

    def windows_to_mend(self) -> bool:
        return bool(self.read("SELECT 1 FROM context_drop UNION ALL SELECT 1 FROM context_mend LIMIT 1"))

    def await_windows(self, timeout: float | None = None) -> bool:
        """Nothing to wait for: a write builds its rows' windows in its own transaction."""
        return True

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


#: Gives an older catalog's row its scope at the upgrade: called with the row's content and
#: keywords ``type``, ``source`` and ``metadata``, returns its scope (None: unscoped) and the project
#: it was captured in (:class:`remindful.engine.scopes.Assigner` is one).
ScopeOf = Callable[..., tuple[str | None, Project | None]]


def _statements(script: str) -> list[str]:
    """The statements of a DDL script, each whole (a trigger's body holds semicolons)."""
    out: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--"):
            continue
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    if current.strip():
        out.append(current.strip())
    return out


# The given ids or rowids (a JSON array bound as the first parameter) drive the lookup, so the planner
# never prefers a filter's index: on a broad filter (one type of 100,000 rows) that scanned the table.
_FROM_IDS = "FROM (SELECT value AS wanted FROM json_each(?)) CROSS JOIN memories ON memories.id = wanted"
_FROM_ROWIDS = "FROM (SELECT value AS wanted FROM json_each(?)) CROSS JOIN memories ON memories.rowid = wanted"


def _give_back_free_pages(conn: sqlite3.Connection) -> None:
    """Return the file's free pages to the file system, in a catalog made in incremental
    auto-vacuum mode (:func:`remindful.engine.connection.connect`; an older one keeps its pages,
    which later writes reuse): at 10,000 memories the full-text indexes' merges leave about 5 % of
    the file free. Moves no row (milliseconds); never waits for another process's write."""
    try:
        conn.execute("PRAGMA busy_timeout=0")
        incremental = conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        if incremental and conn.execute("PRAGMA freelist_count").fetchone()[0]:
            conn.executescript("PRAGMA incremental_vacuum;")  # to its end: execute() frees one page
    except sqlite3.Error as exc:  # busy, full: the pages stay free for later writes
        log.debug("free pages not given back: %s", exc)


def _json(values: Sequence[Any]) -> str:
    return json.dumps(list(values))


def _embeddings_sql(flt: SqlFilter) -> str:
    """Every embedded row passing ``flt``: (id, vector blob)."""
    return f"SELECT id, embedding FROM memories WHERE {flt.sql} AND embedding IS NOT NULL"


def _bounded_count_sql(flt: SqlFilter) -> str:
    """The rows passing ``flt``, counted up to a bound (its last parameter): a broad filter would
    read the whole table."""
    return f"SELECT count(*) FROM (SELECT 1 FROM memories WHERE {flt.sql} LIMIT ?)"


def _matrix(rows: Sequence[Any]) -> tuple[list[str], np.ndarray | None]:
    """``(id, vector blob)`` rows as ids and an (n, d) matrix."""
    if not rows:
        return [], None
    return [r[0] for r in rows], stored_vectors.matrix([r[1] for r in rows])


def _blob(vector: np.ndarray | None) -> bytes | None:
    return stored_vectors.encode(vector)
