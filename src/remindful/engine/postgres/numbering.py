"""A session's new rows numbered, and their windows built, after the commit that stored them.

On PostgreSQL a store's acknowledgement waits for the server to flush its write-ahead log, and for
every statement of its transaction. The numbering of the row's session and the windows it changes
(:data:`~remindful.engine.postgres.windows.RENUMBER`: three windows rewritten, their ``tsvector``
and GIN entries) were most of that transaction's work: a team member's acknowledgement measured
4.5 to 6.6 ms with them and 2.8 to 3.2 ms without, in the same runs. Windows are derived from the rows,
as a memory's vector is: they are numbered here, in a transaction of their own that does not wait
for the flush, by a thread of this process, right after the commit.

A row with a session and no ``seq`` is one still to number. A job numbers its session from the
earliest such row on, so it is idempotent, and it is also the repair: a process that stopped
before its jobs ran left its rows unnumbered, and the next catalog opened on the store numbers
them (:meth:`SessionNumbering.repair`, through a partial index of those rows, schema 11).

A read of the windows or of the numbering waits for this process's jobs (:meth:`settle`), so a
process reads its own writes; another process's are seen once its job commits (milliseconds).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from remindful.engine.background import Worker
from remindful.engine.postgres import windows
from remindful.errors import RemindfulError

log = logging.getLogger("remindful")

#: How long a read waits for this process's numbering before it goes on without it.
SETTLE_TIMEOUT_S = 10.0
#: At most this long a closing catalog numbers what is queued; the rest is numbered at the next open.
CLOSE_BUDGET_S = 5.0
#: Sessions with rows to number looked for at a catalog's opening, at most.
REPAIR_MAX = 1000
#: Under a stream of stores a session is numbered at most this often (a lone store's at once; a
#: read that needs the windows hurries it): one job numbers all the rows a session got meanwhile.
PACE_S = 0.1


class SessionNumbering:
    """The numbering jobs of one catalog: ``write(fn, durable=, what=)`` runs ``fn(conn)`` in a
    retried write transaction, ``read(sql, params)`` reads."""

    def __init__(self, write: Callable[..., Any], read: Callable[..., list[Any]]) -> None:
        self._write = write
        self._read = read
        self._worker: Worker | None = None
        self._lock = threading.Lock()
        self._pending = 0  # sessions submitted and not yet handled
        self._failed: set[str] = set()  # sessions whose numbering failed: tried again at the next submit

    @property
    def pending(self) -> bool:
        return self._pending > 0

    def submit(self, sessions: Iterable[str]) -> None:
        """Number ``sessions``' unnumbered rows in the background (and those whose numbering failed)."""
        with self._lock:
            wanted = sorted({*sessions, *self._failed})
            self._failed.clear()
            if not wanted:
                return
            if self._worker is None:
                self._worker = Worker("remindful-numbering", self._number, pace=PACE_S)
            self._pending += len(wanted)
            self._worker.submit(wanted)

    def settle(self, timeout: float = SETTLE_TIMEOUT_S) -> bool:
        """Wait until every job submitted so far is done; False on timeout."""
        worker = self._worker
        if worker is None or not self.pending:
            return True
        return worker.flush(timeout)

    def repair(self) -> int:
        """Number what a process that stopped left unnumbered (what this connection may see); how
        many sessions were queued. Best effort: a read refused or failed numbers nothing, and the
        catalog still opens (the next one opened numbers them)."""
        try:
            rows = self._read(
                "SELECT DISTINCT session_id FROM memories WHERE seq IS NULL AND session_id IS NOT NULL LIMIT %s",
                [REPAIR_MAX],
            )
        except RemindfulError as exc:
            log.debug("no numbering repaired at open: %s", exc)
            return 0
        self.submit(str(r[0]) for r in rows)
        return len(rows)

    def close(self) -> None:
        """Number what is queued (for :data:`CLOSE_BUDGET_S` at most), then stop."""
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.close(CLOSE_BUDGET_S)

    def _number(self, sessions: list[str]) -> None:
        try:
            for session_id in dict.fromkeys(sessions):
                try:
                    self._write(
                        lambda conn, s=session_id: windows.number(conn, s), durable=False, what="numbering a session"
                    )
                except RemindfulError as exc:  # (the server down: one line; numbered with the next store)
                    log.warning("%s", exc)
                    with self._lock:
                        self._failed.add(session_id)
        finally:
            with self._lock:
                self._pending = max(0, self._pending - len(sessions))
