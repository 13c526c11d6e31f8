"""How every process opens ``<storage>/catalog.sqlite3``: the Catalog, a hook process, a capture point.

One busy timeout and one set of pragmas for all of them (WAL, ``synchronous=NORMAL``, foreign
keys), so that a hook and the store owner wait for each other alike. Standard library only, and
paths are strings: hook processes open the catalog on every event, and pathlib's imports cost them
milliseconds.
"""

from __future__ import annotations

import os
import sqlite3
import stat

from remindful.errors import UntrustedPathError
from remindful.owned import private_dir, refuse_untrusted

CATALOG_NAME = "catalog.sqlite3"
#: How long a connection waits for another process's write transaction before it gives up.
BUSY_TIMEOUT_MS = 5000


def connect(
    path: str | os.PathLike[str], *, busy_timeout_ms: int = BUSY_TIMEOUT_MS, check_same_thread: bool = True
) -> sqlite3.Connection:
    """A connection to the catalog file ``path`` in autocommit mode (the caller runs its own
    ``BEGIN IMMEDIATE``), with the pragmas every connection has. A missing file is created 0600
    (its directory 0700) before SQLite would create it 0644, and put in WAL mode; the Catalog then
    creates the tables (a hook creates those it writes, :data:`remindful.engine.schema.HOOK_SCHEMA`)."""
    path = os.fspath(path)
    fresh = not os.path.lexists(path)
    if fresh:
        private_dir(os.path.dirname(path) or ".", "storage directory")
        _create(path)  # unless another process made it first
    else:
        refuse_planted(path)
    conn = sqlite3.connect(
        path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=check_same_thread
    )
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    if fresh or os.path.getsize(path) == 0:  # a new database (make_private may have made its file)
        # No fsync for the header page (1 ms of a fresh store's first write): the first transaction
        # syncs the file, header included; a crash before it leaves a database without tables,
        # which the catalog fills as a new one (the modes alone may be lost). Freed pages (the
        # full-text merges', deletes') are then given back without a rewrite (Catalog.close), a
        # mode a file takes only before its first table. (Empty while its tables are only in the
        # WAL: both pragmas then change nothing.)
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    # A deleted memory's words are overwritten with zeros, not left in free pages of the file.
    conn.execute("PRAGMA secure_delete=ON")
    return conn


def connect_read_only(
    path: str | os.PathLike[str], *, check_same_thread: bool = True, timeout: float = BUSY_TIMEOUT_MS / 1000
) -> sqlite3.Connection:
    """A connection that only reads the catalog file ``path``, for a storage directory where
    nothing can be written (a read-only filesystem, a full disk). SQLite's read-only mode still
    needs the ``-shm`` file, which it cannot create or grow there; then the file is opened as
    immutable: no locks, and a ``-wal`` file is not read (what another process wrote there since
    the last checkpoint is not seen; on a read-only filesystem there is no other writer)."""
    path = os.path.abspath(os.fspath(path))
    uri = "file:" + path.replace("?", "%3f").replace("#", "%23")
    for mode in ("mode=ro", "immutable=1"):
        conn = sqlite3.connect(
            f"{uri}?{mode}", uri=True, timeout=timeout, isolation_level=None, check_same_thread=check_same_thread
        )
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the -shm fails only at a first read
        except sqlite3.OperationalError as exc:
            conn.close()
            if mode != "mode=ro" or "locked" in str(exc) or "busy" in str(exc):
                raise
            continue
        return conn
    raise AssertionError("unreachable")


def refuse_planted(path: str | os.PathLike[str]) -> None:
    """:class:`~remindful.errors.UntrustedPathError` (one line: the path, why, the fix) when the
    catalog file ``path`` or its -wal/-shm file is a symbolic link (SQLite would follow it: the
    memories would land in whatever file it names) or another user's, or when its directory is
    another user's or writable by others (:func:`remindful.owned.problem`)."""
    path = os.fspath(path)
    refuse_untrusted(os.path.dirname(os.path.abspath(path)), "storage directory")
    for file in (path, path + "-wal", path + "-shm"):
        try:
            st = os.lstat(file)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            raise UntrustedPathError(
                f"catalog file {file} is a symbolic link; not followed", suggestion=f"Remove it: rm {file}"
            )
        refuse_untrusted(file, "catalog file")


def make_private(path: str | os.PathLike[str]) -> None:
    """Create the catalog file 0600 if it is missing, and tighten an existing one and its -wal/-shm
    files (SQLite gives new -wal/-shm files the database file's mode). A file that cannot be
    tightened (not ours, a filesystem without modes) stays usable, with a warning."""
    path = os.fspath(path)
    if not _create(path):
        refuse_planted(path)
    for file in (path, path + "-wal", path + "-shm"):
        try:
            if os.stat(file).st_mode & 0o077:
                os.chmod(file, 0o600)
        except FileNotFoundError:
            pass
        except OSError as exc:
            import logging

            logging.getLogger("remindful").warning("cannot make %s private (0600): %s", file, exc)


def _create(path: str) -> bool:
    """Create the file ``path`` 0600 unless it exists; whether this call created it."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600))
    except FileExistsError:
        return False
    return True


__all__ = ["BUSY_TIMEOUT_MS", "CATALOG_NAME", "connect", "connect_read_only", "make_private"]
