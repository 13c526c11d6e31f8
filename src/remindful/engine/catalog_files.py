"""The catalog as a file: what backups, restores, the doctor and tests do to a ``catalog.sqlite3``
without opening it as a store (no schema upgrade, no spool drain, no index): an online snapshot,
the check and counts of a copy, the spool read on a connection of its own, and read-only queries.

Each opens its own short-lived connection. (The damage check of a live catalog is
:func:`remindful.engine.catalog.integrity_problem`.)
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from remindful.engine import connection
from remindful.errors import StorageError

if TYPE_CHECKING:
    from remindful.engine.redact import StoreRedactor


def snapshot(source: Path, target: Path) -> None:
    """Copy the catalog at ``source`` to a new file ``target`` (0600) with SQLite's online backup
    API: one read transaction, so one consistent state while other threads and processes write;
    the copy is one self-contained file (rollback journal, no WAL)."""
    try:
        src = sqlite3.connect(str(source), timeout=30)
        dst = sqlite3.connect(str(target))
        try:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")
        finally:
            dst.close()
            src.close()
    except sqlite3.Error as exc:  # "database or disk is full", said so by the caller
        raise StorageError(f"Cannot copy the catalog {source}: {exc}") from exc
    os.chmod(target, 0o600)


def prepare_for_restore(
    staged: Path,
    live: Path,
    redaction: StoreRedactor | None = None,
    *,
    keep_index: bool = False,
    rows_checked: bool = False,
) -> None:
    """Make the catalog file ``staged`` ready for :func:`copy_into` the live catalog ``live``: the
    live one's page size (a copy into a WAL database cannot change it), the current schema, and
    every row marked un-indexed with no vector deletion queued (the vector index is rebuilt from
    it: until then every process scores its rows exactly rather than trust a view of the old
    index). The file comes from an archive, so it is trusted in nothing: its triggers and views
    are dropped before anything writes to it, and it is then rebuilt from its rows
    (:func:`rebuild_from_rows`, every text re-checked by ``redaction``).

    ``keep_index``: the archive's index files are put in place with it (they match its marks): the
    rows keep their marks and the queued vector deletions stay, but a row whose vector the
    re-check dropped (its content changed) is marked un-indexed, to be indexed anew.

    ``rows_checked``: the file is this store's own (an archive it sealed), of the current schema,
    and its rows passed the store's redaction as it is now: trusted, it is used as it is (its rows
    are neither re-checked nor copied into a new file)."""
    from remindful.engine.catalog import Catalog

    if not rows_checked:
        _drop_schema_objects(staged)

    try:
        conn = sqlite3.connect(str(live), timeout=30)
        try:
            page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        page_size = 0  # damaged beyond reading: the staged file takes its place as it is
    conn = sqlite3.connect(str(staged), isolation_level=None)
    try:
        if page_size and int(conn.execute("PRAGMA page_size").fetchone()[0]) != page_size:
            conn.execute("PRAGMA journal_mode=DELETE")
            conn.execute(f"PRAGMA page_size={page_size}")
            conn.execute("VACUUM")
    finally:
        conn.close()
    catalog = Catalog(staged)  # upgrades an older schema
    try:
        if not keep_index:
            catalog.write(
                lambda c: (c.execute("UPDATE memories SET indexed = 0"), c.execute("DELETE FROM index_deletes")),
                what="preparing the restored catalog",
            )
    finally:
        catalog.close()
    if not rows_checked:
        rebuild_from_rows(staged, redaction if redaction is not None else catalog.redaction)


def schema_version(path: Path) -> int:
    """The schema version of the catalog file at ``path`` (0 when it cannot be read)."""
    try:
        conn = _read_only(path)
        try:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return 0


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _drop_schema_objects(path: Path) -> None:
    """Drop every trigger and view of the catalog file at ``path`` (one from an archive: a trigger
    there would fire on the writes that prepare it)."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        found = conn.execute("SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'view')").fetchall()
        for kind, name in found:
            conn.execute(f"DROP {'TRIGGER' if kind == 'trigger' else 'VIEW'} IF EXISTS {_quoted(name)}")
    except sqlite3.DatabaseError as exc:
        raise StorageError(
            f"Restore failed: the archive's catalog cannot be read ({exc}); nothing was changed"
        ) from exc
    finally:
        conn.close()


#: Tables the catalog's own triggers and window code fill from the memories (counts, queues): the
#: rebuild lets them be made again rather than copy them.
_DERIVED_TABLES = frozenset(("type_counts", "scope_counts", "context_drop", "context_mend"))
#: Columns copied as they are: ids, keys, hashes, names of counters (no text of a memory).
_KEPT_COLUMNS = frozenset(("id", "key", "idem_key", "content_hash", "hash", "kind", "type", "scope", "name"))


def rebuild_from_rows(path: Path, redaction: StoreRedactor) -> dict[str, int]:
    """Replace the catalog file at ``path`` with a new one made from the current schema (only the
    tables, indexes and triggers remindful creates: no foreign schema object survives) and the
    rows of ``path``'s tables, every text re-checked by ``redaction`` on the way (the content,
    metadata and chunk of each memory, session ids mapped, JSON texts at any depth, other texts as
    texts; a memory whose content changed gets its new hash and loses its vector and its index
    mark). The session context windows are made again from the rows. Returns the redaction hits
    by rule."""
    from remindful.engine import windows
    from remindful.engine.catalog import Catalog

    fresh = path.with_name(path.name + ".rebuilt")
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{fresh}{suffix}").unlink(missing_ok=True)
    Catalog(fresh, redaction=redaction).close()
    counts: dict[str, int] = {}
    conn = sqlite3.connect(str(fresh), isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("ATTACH DATABASE ? AS src", (str(path),))
        tables = conn.execute("SELECT name, sql FROM main.sqlite_master WHERE type = 'table'").fetchall()
        virtual = {name for name, sql in tables if (sql or "").upper().startswith("CREATE VIRTUAL")}
        theirs = {name for (name,) in conn.execute("SELECT name FROM src.sqlite_master WHERE type = 'table'")}
        conn.execute("BEGIN")
        # The memories' own indexes and the trigger that fills their full-text index are made again
        # after the copy, each built at once (for 100,000 memories the copy's SQL took 23 s, 13 s so).
        deferred = conn.execute(
            "SELECT type, name, sql FROM main.sqlite_master WHERE tbl_name = 'memories' AND sql IS NOT NULL"
            " AND (type = 'index' OR name = 'memories_ai')"
        ).fetchall()
        for kind, name, _sql in deferred:
            conn.execute(f"DROP {'INDEX' if kind == 'index' else 'TRIGGER'} main.{_quoted(name)}")
        for name, _sql in tables:
            if (
                name in virtual
                or any(name.startswith(f"{v}_") for v in virtual)
                or name.startswith("sqlite_")
                or name in _DERIVED_TABLES
                or name not in theirs
            ):
                continue
            ours = [row[1] for row in conn.execute(f"PRAGMA main.table_info({_quoted(name)})")]
            present = {row[1] for row in conn.execute(f"PRAGMA src.table_info({_quoted(name)})")}
            columns = [c for c in ours if c in present]
            listed = ", ".join(_quoted(c) for c in columns)
            insert = f"INSERT OR IGNORE INTO main.{_quoted(name)} ({listed}) VALUES ({', '.join('?' * len(columns))})"
            rows = conn.execute(f"SELECT {listed} FROM src.{_quoted(name)}").fetchall()
            for start in range(0, len(rows), 500):
                batch = [_rechecked(name, columns, row, redaction, counts) for row in rows[start : start + 500]]
                conn.executemany(insert, batch)
        for _kind, _name, sql in deferred:
            conn.execute(sql)
        conn.execute("INSERT INTO main.memories_fts(memories_fts) VALUES ('rebuild')")
        windows.rebuild(conn)
        conn.execute("COMMIT")
        conn.execute("DETACH DATABASE src")
    except sqlite3.DatabaseError as exc:
        raise StorageError(
            f"Restore failed while rebuilding the archive's catalog ({exc}); nothing was changed"
        ) from exc
    finally:
        conn.close()
    os.chmod(fresh, 0o600)
    for suffix in ("-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    os.replace(fresh, path)
    return counts


def _rechecked(
    table: str, columns: Sequence[str], row: Sequence[Any], redaction: StoreRedactor, counts: dict[str, int]
) -> list[Any]:
    """``row`` of ``table`` as it may be written to this store (see :func:`rebuild_from_rows`)."""
    import json

    from remindful.model import content_hash

    out = list(row)
    for i, column in enumerate(columns):
        value = out[i]
        if not isinstance(value, str) or not value:
            continue
        if column == "session_id":
            out[i] = redaction.session_id(value, counts)
        elif column in _KEPT_COLUMNS or column.endswith("_id"):
            continue
        elif value[:1] in "{[":
            try:
                parsed = json.loads(value)
            except ValueError:
                out[i] = redaction.text(value, counts)
            else:
                out[i] = json.dumps(redaction.value(parsed, counts), ensure_ascii=False)
        else:
            out[i] = redaction.text(value, counts)
    if table == "memories" and "content" in columns:
        where = columns.index("content")
        if out[where] != row[where]:
            for column, value in (("content_hash", content_hash(out[where])), ("embedding", None), ("indexed", 0)):
                if column in columns:
                    out[columns.index(column)] = value
    return out


def copy_into(staged: Path, live: Path) -> None:
    """Copy the catalog file ``staged`` into the live catalog ``live`` with SQLite's online backup
    API: one write transaction on the live file, so every process's open connections read the new
    content next (no file is swapped under them, and every write acknowledged from then on lands
    in it; the caller holds off the writes meanwhile). A live file too damaged to open as a
    database is replaced by the staged one instead; the processes that had it open reconnect at
    their next write or search (:meth:`remindful.engine.catalog.Catalog.follow_file`)."""
    from remindful.engine import connection

    source = sqlite3.connect(str(staged))
    try:
        try:
            target = connection.connect(live)
            try:
                source.backup(target)
            finally:
                target.close()
            return
        except sqlite3.DatabaseError as exc:
            if "not a database" not in str(exc) and "malformed" not in str(exc):
                raise StorageError(f"Restore failed while copying the catalog ({exc}); nothing was changed") from exc
    finally:
        source.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{live}{suffix}").unlink(missing_ok=True)
    os.replace(staged, live)


def _read_only(path: Path, timeout: float = 5.0) -> sqlite3.Connection:
    # Also where SQLite cannot make the -shm file (a read-only filesystem, a full disk).
    return connection.connect_read_only(path, timeout=timeout)


def type_counts(path: Path) -> dict[str, int]:
    """Memories per type in the catalog file at ``path`` (types without any left out), read-only.
    Raises sqlite3's errors as StorageError."""
    try:
        conn = _read_only(path)
        try:
            return {str(t): int(n) for t, n in conn.execute("SELECT type, count(*) FROM memories GROUP BY type")}
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StorageError(str(exc)) from exc


def integrity(path: Path) -> str:
    """The first line of SQLite's ``PRAGMA integrity_check`` on the catalog file at ``path``
    (``"ok"`` when it is sound), read-only. Raises StorageError when it is not a readable database."""
    try:
        conn = _read_only(path)
        try:
            return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StorageError(str(exc)) from exc


class SpoolHealth(NamedTuple):
    """The spool of a catalog file: events waiting, the oldest one's time, those tried at least a
    given number of times, and the newest error recorded."""

    waiting: int
    oldest: float | None
    stuck: int
    last_error: str | None


def spool_health(path: Path, stuck_attempts: int) -> SpoolHealth:
    """:class:`SpoolHealth` of the catalog file at ``path``, read on a connection of its own (no
    store is opened: opening one drains the spool); all zeros when it has no spool table yet.
    Raises StorageError when the file cannot be read."""
    try:
        conn = _read_only(path, timeout=10)
        try:
            waiting, oldest, stuck, error = conn.execute(
                "SELECT count(*), min(created_at), sum(attempts >= ?), "
                "(SELECT last_error FROM spool WHERE last_error IS NOT NULL ORDER BY seq DESC LIMIT 1) FROM spool",
                (stuck_attempts,),
            ).fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        if "no such table" in str(exc):
            return SpoolHealth(0, None, 0, None)
        raise StorageError(str(exc)) from exc
    return SpoolHealth(int(waiting), oldest, int(stuck or 0), error)


def read_only_rows(path: Path, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Rows of ``sql`` run on a read-only connection to the catalog file at ``path`` (for tests:
    :func:`remindful.testing.catalog_rows`)."""
    conn = _read_only(path, timeout=30)
    try:
        return conn.execute(sql, tuple(params)).fetchall()
    finally:
        conn.close()


__all__ = [
    "SpoolHealth",
    "copy_into",
    "integrity",
    "prepare_for_restore",
    "read_only_rows",
    "snapshot",
    "spool_health",
    "type_counts",
]
