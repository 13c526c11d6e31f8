"""The hook spool: a table in the catalog, written by hook processes, drained by the store owner.

Standard library only. A spool row is acknowledged once committed; ``idem_key`` (unique) stops a
replayed event from being spooled twice, and ``spool_done`` remembers drained keys for
:data:`DONE_KEEP_DAYS` so that a replay after the drain is ignored too. If the catalog cannot be
written (locked for longer than the busy timeout, say), the record is appended to
``spool-fallback.jsonl`` instead and imported by the next drain: nothing is lost. The tables are
:data:`remindful.engine.schema.SPOOL_DDL` and ``SPOOL_DONE_DDL``.
"""

from __future__ import annotations

import json
import os
import sqlite3

from remindful.engine.schema import HOOK_SCHEMA

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from typing import Any

CATALOG_NAME = "catalog.sqlite3"
FALLBACK_NAME = "spool-fallback.jsonl"
#: Where the drainer sets aside a spooled event it cannot store (one JSON line each, with the error).
REJECTED_NAME = "spool-rejected.jsonl"
LOCK_NAME = "spool.lock"
DONE_KEEP_DAYS = 30
BUSY_TIMEOUT_MS = 10_000

INSERT_SQL = (
    "INSERT OR IGNORE INTO spool (idem_key, kind, payload, created_at) "
    "SELECT ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM spool_done WHERE idem_key = ?)"
)


def connect(storage: str | os.PathLike[str], *, check_same_thread: bool = True) -> sqlite3.Connection:
    """Open ``<storage>/catalog.sqlite3`` for a short write, creating it (0600, dir 0700, WAL).

    Paths are strings here: pathlib's imports cost hook processes several milliseconds."""
    db = os.path.join(storage, CATALOG_NAME)
    fresh = not os.path.exists(db)
    if fresh:
        os.makedirs(storage, mode=0o700, exist_ok=True)
        fd = os.open(db, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
    conn = sqlite3.connect(
        db, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=check_same_thread
    )
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    if fresh:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def ensure_tables(conn: sqlite3.Connection) -> None:
    """Create what a hook writes (the spool, the audit log, the capture counts) when no catalog,
    or an older one, holds them yet; the catalog creates them too when it opens."""
    conn.executescript(HOOK_SCHEMA)


def write_fallback(storage: str | os.PathLike[str], record: dict[str, Any], *, name: str = FALLBACK_NAME) -> None:
    """Append one spool record to the fallback file (used when the catalog is unwritable), or to
    the file ``name`` in the storage directory."""
    os.makedirs(storage, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(storage, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
    finally:
        os.close(fd)
