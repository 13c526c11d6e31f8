"""The spool's statements: a table in the catalog, written by hook processes and capture points,
drained into memories by whoever owns the store. Standard library only (hook processes import it).

A spool row is acknowledged once committed; ``idem_key`` (unique) stops a replayed event from being
spooled twice, and ``spool_done`` remembers drained keys for :data:`DONE_KEEP_DAYS` so that a replay
after the drain is ignored too. If the catalog cannot be written (locked for longer than the busy
timeout, say), the record is appended to ``spool-fallback.jsonl`` instead (:func:`write_fallback`)
and imported by the next drain: nothing is lost. The tables are
:data:`remindful.engine.schema.SPOOL_DDL` and ``SPOOL_DONE_DDL``.

Every statement is a function here. Writes take a connection inside the caller's transaction: the
hook's own (:func:`connect`) or the Catalog's (``Catalog.write``). Reads take ``read``, a function
running one query (``Catalog.read``, or :func:`reader` of a connection). :func:`audit` is the one
insert into the audit log, the Catalog's and a hook's alike.

Nothing secret is spooled: a record reaches the spool (or its fallback file) only as a
:class:`Payload`, which :func:`encode` makes after the store's redaction
(:meth:`~remindful.engine.redact.StoreRedactor.record`: the session id mapped, every other field
redacted at any depth); :func:`append` takes a record and encodes it itself, or a Payload, and
refuses plain text. The audit log's details pass the same redactor.
"""

from __future__ import annotations

import json
import os
import time

from remindful.engine import connection
from remindful.engine.schema import HOOK_SCHEMA
from remindful.owned import private_dir, private_file

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import Any

    from remindful.engine.redact import StoreRedactor

    Read = Callable[[str, Sequence[Any]], list[Any]]
    #: A connection of :func:`connect`, as the capture paths above the engine name it.
    Connection = sqlite3.Connection

FALLBACK_NAME = "spool-fallback.jsonl"
#: Where the drainer sets aside a spooled event it cannot store (one JSON line each, with the error).
REJECTED_NAME = "spool-rejected.jsonl"
DONE_KEEP_DAYS = 30


def connect(
    storage: str | os.PathLike[str],
    *,
    busy_timeout_ms: int = connection.BUSY_TIMEOUT_MS,
    check_same_thread: bool = True,
) -> sqlite3.Connection:
    """A connection to ``<storage>/catalog.sqlite3`` for short writes (created if missing), with the
    catalog's pragmas and, unless a caller that must not wait says otherwise, its busy timeout
    (:func:`remindful.engine.connection.connect`)."""
    path = os.path.join(storage, connection.CATALOG_NAME)
    return connection.connect(path, busy_timeout_ms=busy_timeout_ms, check_same_thread=check_same_thread)


def ensure_tables(conn: sqlite3.Connection) -> None:
    """Create what a hook writes (the spool, the audit log, the capture counts) when no catalog,
    or an older one, holds them yet; the catalog creates them too when it opens."""
    conn.executescript(HOOK_SCHEMA)


def reader(conn: sqlite3.Connection) -> Read:
    """``read`` for the functions below, on a connection of one's own."""

    def read(sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return conn.execute(sql, params).fetchall()

    return read


class immediate:
    """One write transaction on a connection of one's own (``BEGIN IMMEDIATE`` … ``COMMIT``,
    rolled back if the block raises). A class, not ``contextlib.contextmanager``: importing
    contextlib costs hook processes milliseconds."""

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        self.conn.execute("ROLLBACK" if kind is not None else "COMMIT")


# -- what may be spooled ------------------------------------------------------------------------------


class Payload(str):
    """A spool row's payload: a record as JSON text, made by :func:`encode` (redacted)."""

    __slots__ = ()


def encode(record: Mapping[str, Any], redaction: StoreRedactor, counts: dict[str, int] | None = None) -> Payload:
    """``record`` as a spool payload: redacted by ``redaction`` (hits added to ``counts``), as JSON."""
    return Payload(json.dumps(redaction.record(record, counts), ensure_ascii=False, default=str))


def reencode(payload: str, redaction: StoreRedactor, counts: dict[str, int] | None = None) -> Payload:
    """A payload read back from a file (the fallback file, written by this or an older version)
    made fit to spool again: decoded and :func:`encode`-d, or redacted as text if it is no JSON
    object (the drain then sets it aside as unreadable)."""
    try:
        record = json.loads(payload)
    except ValueError:
        record = None
    if isinstance(record, dict):
        return encode(record, redaction, counts)
    return Payload(redaction.text(payload, counts))


# -- writes, inside the caller's transaction ------------------------------------------------------

_APPEND = (
    "INSERT OR IGNORE INTO spool (idem_key, kind, payload, created_at) "
    "SELECT ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM spool_done WHERE idem_key = ?)"
)


def append(
    conn: sqlite3.Connection,
    key: str,
    kind: str,
    record: Payload | Mapping[str, Any],
    created_at: float,
    *,
    redaction: StoreRedactor,
    counts: dict[str, int] | None = None,
) -> None:
    """Spool one record, unless its key is spooled already or was drained (a replay): a Payload
    as it is, a record :func:`encode`-d first (hits added to ``counts``). Plain text is refused
    (TypeError): nothing reaches the spool unredacted."""
    if not isinstance(record, Payload):
        if isinstance(record, str):
            raise TypeError("spool.append takes a record or a Payload made by spool.encode, not text")
        record = encode(record, redaction, counts)
    conn.execute(_APPEND, (key, kind, record, created_at, key))


def append_many(
    conn: sqlite3.Connection,
    records: Iterable[tuple[str, str, str, float]],
    *,
    redaction: StoreRedactor,
    counts: dict[str, int] | None = None,
) -> None:
    """:func:`append` for each ``(key, kind, payload, created_at)`` read back from a file: each
    payload is :func:`reencode`-d."""
    conn.executemany(
        _APPEND, [(key, kind, reencode(payload, redaction, counts), at, key) for key, kind, payload, at in records]
    )


def finish(conn: sqlite3.Connection, seq: int, key: str, at: float) -> None:
    """Row ``seq`` (key ``key``) is stored: delete it and remember its key."""
    conn.execute("DELETE FROM spool WHERE seq = ?", (seq,))
    conn.execute("INSERT OR REPLACE INTO spool_done (idem_key, done_at) VALUES (?, ?)", (key, at))


def finish_key(conn: sqlite3.Connection, key: str, at: float) -> None:
    """The row with key ``key`` is stored (or deliberately skipped): delete it, remember the key."""
    conn.execute("DELETE FROM spool WHERE idem_key = ?", (key,))
    conn.execute("INSERT OR REPLACE INTO spool_done (idem_key, done_at) VALUES (?, ?)", (key, at))


def give_up(conn: sqlite3.Connection, seq: int, at: float) -> None:
    """Row ``seq`` can never be stored (the caller set it aside): delete it and remember its key,
    so that a replay of it is ignored too."""
    conn.execute(
        "INSERT OR REPLACE INTO spool_done (idem_key, done_at) SELECT idem_key, ? FROM spool WHERE seq = ?", (at, seq)
    )
    conn.execute("DELETE FROM spool WHERE seq = ?", (seq,))


def retry_later(conn: sqlite3.Connection, seq: int, error: str) -> None:
    """Row ``seq`` failed this time: count the attempt and keep the error (its first 2,000 characters)."""
    conn.execute("UPDATE spool SET attempts = attempts + 1, last_error = ? WHERE seq = ?", (error[:2000], seq))


def forget_keys(conn: sqlite3.Connection, at: float) -> None:
    """Forget the keys drained more than :data:`DONE_KEEP_DAYS` before ``at``."""
    conn.execute("DELETE FROM spool_done WHERE done_at < ?", (at - DONE_KEEP_DAYS * 86400,))


def audit(
    conn: sqlite3.Connection,
    action: str,
    memory_id: str | None,
    detail: dict[str, Any],
    at: float | None = None,
    *,
    redaction: StoreRedactor,
) -> None:
    """One audit-log entry (``at`` defaults to now); ``detail`` is stored as JSON, redacted by
    ``redaction`` (after values JSON does not know, such as paths, became text)."""
    text = json.dumps(redaction.value(json.loads(json.dumps(detail, default=str))))
    conn.execute(
        "INSERT INTO audit_log (at, action, memory_id, detail) VALUES (?,?,?,?)",
        (time.time() if at is None else at, action, memory_id, text),
    )


# -- reads --------------------------------------------------------------------------------------------


#: Rows of this kind wait in the spool until they are ``hold_before`` old: the start of a tool call,
#: whose outcome (another row, consuming it) usually follows.
HELD_KIND = "PreToolUse"


def pending(read: Read, max_attempts: int, hold_before: float | None = None) -> bool:
    """Whether a row waits that has been tried fewer than ``max_attempts`` times (with
    ``hold_before``, a :data:`HELD_KIND` row only once created before it)."""
    if hold_before is None:
        return bool(read("SELECT 1 FROM spool WHERE attempts < ? LIMIT 1", (max_attempts,)))
    return bool(
        read(
            "SELECT 1 FROM spool WHERE attempts < ? AND (kind != ? OR created_at < ?) LIMIT 1",
            (max_attempts, HELD_KIND, hold_before),
        )
    )


def claim(
    read: Read, *, after: int, limit: int, max_attempts: int, payload_limit: int, hold_before: float | None = None
) -> list[Any]:
    """The next rows to drain, oldest first: ``(seq, idem_key, kind, payload, created_at, attempts)``
    of up to ``limit`` rows after ``seq`` ``after`` tried fewer than ``max_attempts`` times (with
    ``hold_before``, a :data:`HELD_KIND` row only once created before it). A payload over
    ``payload_limit`` bytes is not read (None): the caller sets it aside. The caller holds the spool
    lock, so no other drainer reads the same rows."""
    held = "" if hold_before is None else " AND (kind != ? OR created_at < ?)"
    return read(
        "SELECT seq, idem_key, kind, CASE WHEN length(CAST(payload AS BLOB)) > ? THEN NULL ELSE payload END, "
        f"created_at, attempts FROM spool WHERE attempts < ? AND seq > ?{held} ORDER BY seq LIMIT ?",
        (payload_limit, max_attempts, after, *(() if hold_before is None else (HELD_KIND, hold_before)), limit),
    )


def stored_any(read: Read) -> bool:
    """Whether the catalog holds any memory: False too when it has no memories table yet (only
    hooks have written to it). A hook with nothing to inject then loads no model."""
    try:
        return bool(read("SELECT 1 FROM memories LIMIT 1", ()))
    except Exception as exc:  # sqlite3.OperationalError, not imported here
        if "no such table" in str(exc):
            return False
        raise


def row(read: Read, seq: int) -> tuple[str, str, str, float] | None:
    """``(idem_key, kind, payload, created_at)`` of row ``seq``, or None."""
    rows = read("SELECT idem_key, kind, payload, created_at FROM spool WHERE seq = ?", (seq,))
    return tuple(rows[0]) if rows else None


# -- the fallback file ------------------------------------------------------------------------------


def write_fallback(storage: str | os.PathLike[str], record: dict[str, Any], *, name: str = FALLBACK_NAME) -> None:
    """Append one spool record to the fallback file (used when the catalog is unwritable), or to
    the file ``name`` in the storage directory (0600, the directory 0700). A record for the
    fallback file carries a :class:`Payload` (TypeError otherwise), as :func:`append` takes."""
    if name == FALLBACK_NAME and not isinstance(record.get("payload"), Payload):
        raise TypeError("the fallback file takes a Payload made by spool.encode")
    private_dir(storage, "storage directory")
    fd = private_file(os.path.join(storage, name))
    try:
        os.write(fd, (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
    finally:
        os.close(fd)


__all__ = [
    "DONE_KEEP_DAYS",
    "FALLBACK_NAME",
    "HELD_KIND",
    "REJECTED_NAME",
    "Payload",
    "append",
    "append_many",
    "audit",
    "claim",
    "connect",
    "encode",
    "ensure_tables",
    "finish",
    "finish_key",
    "forget_keys",
    "give_up",
    "immediate",
    "pending",
    "reader",
    "reencode",
    "retry_later",
    "row",
    "stored_any",
    "write_fallback",
]
