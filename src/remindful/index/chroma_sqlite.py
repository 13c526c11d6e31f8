"""Chroma's own SQLite file, given back its free pages while no Chroma client of this process has it open.

Chroma logs every vector in ``chroma.sqlite3`` (``embeddings_queue``, 1.5 KB a vector) until the
collection's HNSW files are saved (every ``sync_threshold`` additions), then deletes the log rows;
the pages they took stay in the file, free, and the file never shrinks: at 10,000 memories about a
third of it. :func:`create` makes a new file in incremental auto-vacuum mode before chromadb
fills it, and :func:`compact` gives the free pages back. Standard library only; the caller makes
sure no chromadb client of this process has the file open (closing this module's descriptor of the
file would drop that client's POSIX locks on it).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

__all__ = ["compact", "copy", "create"]

log = logging.getLogger(__name__)
_INCREMENTAL = 2  # PRAGMA auto_vacuum's value for incremental mode


def create(db: Path) -> None:
    """Make ``db`` an empty SQLite file in incremental auto-vacuum mode, for chromadb to create its
    tables in (a mode a file can take only while it has none, or by a rewrite): then
    :func:`compact` gives the free pages back without ever rewriting the file. Does nothing if the
    file exists (or appears meanwhile: another process made it)."""
    if db.exists():
        return
    try:
        conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    except sqlite3.Error as exc:
        log.debug("cannot create %s: %s", db, exc)
        return
    try:
        if not conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]:
            # No fsync for one header page (35 ms of a fresh store's first flush): chromadb's first
            # transaction syncs the file, header included; a crash before it leaves an empty file,
            # in which chromadb creates its tables as in any new one (the mode alone is lost).
            conn.execute("PRAGMA synchronous = OFF")
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            conn.execute("VACUUM")  # writes the header, with the mode, into the empty file
    except sqlite3.Error as exc:  # another process is creating it: chromadb will find it
        log.debug("could not prepare %s: %s", db, exc)
    finally:
        conn.close()


def compact(db: Path) -> None:
    """Return the free pages of the SQLite file ``db`` to the file system.

    A file in incremental auto-vacuum mode gives them back at once (``PRAGMA incremental_vacuum``
    moves no row: milliseconds); one made before :func:`create` was used is rewritten once
    (``VACUUM``) into that mode when its free pages are an eighth of it or more. Another process
    using the file makes SQLite refuse at once (no wait): the pages stay free for Chroma to reuse,
    and a later call tries again. Never raises for the file's sake.
    """
    if not db.exists():
        return
    try:
        conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    except sqlite3.Error as exc:
        log.debug("cannot open %s to compact it: %s", db, exc)
        return
    try:
        free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
        if not free:
            return
        if int(conn.execute("PRAGMA auto_vacuum").fetchone()[0]) == _INCREMENTAL:
            # executescript steps the pragma to its end; execute() would free one page.
            conn.executescript("PRAGMA incremental_vacuum;")
        elif free * 8 >= int(conn.execute("PRAGMA page_count").fetchone()[0]):
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            conn.execute("VACUUM")
    except sqlite3.Error as exc:  # busy (another process), read-only, full: the pages stay free
        log.debug("could not compact %s: %s", db, exc)
    finally:
        conn.close()


def copy(db: Path, target: Path) -> None:
    """Copy the SQLite file ``db`` to ``target`` (a new file) with SQLite's backup: consistent
    while chromadb has ``db`` open. Raises OSError."""
    try:
        source = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            copied = sqlite3.connect(target)
            try:
                source.backup(copied)
            finally:
                copied.close()
        finally:
            source.close()
    except sqlite3.Error as exc:
        raise OSError(f"cannot copy {db}: {exc}") from exc
