"""Durable tool-call captures: each call is committed to the store's spool before it is stored.

The middleware and ``remindful proxy`` hand every completed tool call to a
:class:`~remindful.services.ingest.worker.CaptureWorker`, which stores it from a background thread.
Before that, :meth:`CaptureSpool.append` commits the call — redacted, as every capture path does
before writing — as one row of the hook spool (``kind`` ``mcp_tool``, one small SQLite
transaction, ~0.1-0.3 ms), so a process killed (``kill -9``) right after a tool answered loses
nothing: the next owner of the store (the daemon, a remindful command, a server) stores the row
(:mod:`remindful.services.ingest.drainer`).

Who stores a row: the live process that spooled it (its worker stores it and deletes the row), and
only once that process is gone, a drainer — each row names its *owner* (pid and, on Linux, the
process's start time, so a reused pid does not count as alive). Exactly once: the stored memory
carries the row's key as ``spool_key``; a drainer finding a memory with that key (the worker
stored it, then the process died before deleting the row) only deletes the row.

If the catalog is busy for longer than :data:`APPEND_BUSY_MS` (a long write elsewhere), the row
goes to the spool's fallback file instead, imported by the next drain: the tool's answer never
waits on another process's transaction. Nothing is written for a session excluded by the privacy
settings, or when memory is disabled.

Standard library only (plus PyYAML for :meth:`CaptureSpool.from_config` when a config file exists).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time

from remindful.engine import spool
from remindful.engine.connection import BUSY_TIMEOUT_MS
from remindful.engine.redact import StoreRedactor, add_counts
from remindful.engine.storelock import StoreLock
from remindful.runtime import new_session_id, pid_alive
from remindful.services.ingest.calls import ToolCall
from remindful.services.ingest.filters import CaptureFilter, FilterConfig

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: kept as light as the hook path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from remindful.engine.spool import Connection
    from remindful.services.ingest.ports import CaptureStore


KIND = "mcp_tool"
APPEND_BUSY_MS = 5


def _process_start(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, Linux), or None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2 :].split()[19].decode()
    except (OSError, ValueError, IndexError):
        return None


def owner() -> dict[str, Any]:
    """This process, as a spool row's owner."""
    return {"pid": os.getpid(), "start": _process_start(os.getpid())}


def owner_alive(who: Any) -> bool:
    """Whether the process that spooled a row still runs (then it stores the row itself)."""
    if not isinstance(who, dict) or not isinstance(who.get("pid"), int):
        return False
    pid = who["pid"]
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] == b"Z":  # killed, not yet reaped by its parent
            return False
        started = fields[19].decode()
    except (OSError, ValueError, IndexError):
        return True  # no /proc: trust the pid
    return who.get("start") in (None, started)


class CaptureSpool:
    """Commits captured calls to ``<storage>``'s spool; see the module docstring.

    ``session_id`` is the session the captures belong to. ``flt`` supplies the redaction rules,
    the privacy exclusions and the memory switch (default: from the store's configuration).
    Thread-safe; connections open on first use and :meth:`close` closes them.
    """

    def __init__(self, storage: str | os.PathLike[str], session_id: str, flt: CaptureFilter) -> None:
        self.storage = os.fspath(storage)
        self.session_id = session_id
        self.filter = flt
        self._redaction = StoreRedactor(flt.redactor, self.storage)
        self._owner = owner()
        # One connection and lock per role: the request path never queues behind done()'s wait.
        self._locks = {"append": threading.Lock(), "done": threading.Lock()}
        self._conns: dict[str, Connection] = {}

    @classmethod
    def from_config(cls, path: str | None = None, session_id: str | None = None) -> CaptureSpool:
        """For the store ``remindful.open(path)`` would open, without opening it (milliseconds):
        storage path and filters read as a hook reads them (:mod:`remindful.config_sources`).
        Raises ConfigError or ValueError (naming the setting) for a config it cannot use."""
        from remindful.config_sources import read_sources, storage_path

        memory = read_sources().merged()
        flt = CaptureFilter(FilterConfig.from_mapping(memory))
        return cls(storage_path(path, memory), session_id or new_session_id(), flt)

    @classmethod
    def for_store(cls, store: CaptureStore, session_id: str | None = None) -> CaptureSpool:
        """For a Store (its path and its settings' filters); the session defaults to the store's."""
        from remindful.services.ingest.filters import filter_for

        return cls(store.path, session_id or store.session_id, filter_for(store))

    # -- the request path -------------------------------------------------------------------------

    def append(self, call: ToolCall, memory_type: str) -> tuple[str | None, ToolCall]:
        """Redact ``call`` and commit it. Returns the row's key (None when nothing may be written:
        memory disabled or the session excluded) and the redacted call, to be stored as is."""
        config = self.filter.config
        if not config.memory_enabled or self.filter.excluded_session(self.session_id) is not None:
            return None, call
        counts: dict[str, int] = {}
        redactor = self.filter.redactor
        if redactor is not None:
            call = dataclasses.replace(
                call,
                arguments=redactor.redact_value(call.arguments, counts),
                error=None if call.error is None else redactor.redact(call.error, counts),
                result=None if call.result is None else redactor.redact(call.result, counts),
            )
        key = f"{KIND}_{os.urandom(12).hex()}"
        record = {
            "session_id": self.session_id,
            "type": memory_type,
            "call": dataclasses.asdict(call),
            "owner": self._owner,
            "at": call.finished_at,
        }
        body = spool.encode(record, self._redaction, counts)  # the session id mapped
        try:
            # A restore or a clear-all waits for this write; while one runs, the fallback file.
            with self._locks["append"], StoreLock(self.storage).shared(wait=False):
                conn = self._connect("append", APPEND_BUSY_MS)
                with spool.immediate(conn):
                    spool.append(conn, key, KIND, body, call.finished_at, redaction=self._redaction)
                    add_counts(conn, {f"redacted_{k}": v for k, v in counts.items()})
        except Exception:  # busy or unwritable: the fallback file never waits; the next drain imports it
            spool.write_fallback(
                self.storage, {"idem_key": key, "kind": KIND, "payload": body, "created_at": call.finished_at}
            )
        return key, call

    # -- the worker -----------------------------------------------------------------------------

    def done(self, key: str) -> None:
        """The call is stored (or deliberately skipped): drop its row, remember its key."""
        with self._locks["done"], StoreLock(self.storage).shared():
            conn = self._connect("done", BUSY_TIMEOUT_MS)
            with spool.immediate(conn):
                spool.finish_key(conn, key, time.time())

    def close(self) -> None:
        for role, lock in self._locks.items():
            with lock:
                conn = self._conns.pop(role, None)
                if conn is not None:
                    conn.close()

    def _connect(self, role: str, busy_ms: int) -> Connection:
        conn = self._conns.get(role)
        if conn is None:
            conn = spool.connect(self.storage, busy_timeout_ms=busy_ms, check_same_thread=False)
            spool.ensure_tables(conn)
            self._conns[role] = conn
        return conn


def call_from_record(record: Mapping[str, Any]) -> ToolCall:
    """The (redacted) call of a spooled ``mcp_tool`` record."""
    fields = {f.name for f in dataclasses.fields(ToolCall)}
    return ToolCall(**{k: v for k, v in record["call"].items() if k in fields})


__all__ = ["KIND", "CaptureSpool", "call_from_record", "owner", "owner_alive"]
