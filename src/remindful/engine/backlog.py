"""Rows left un-indexed (by a process that stopped or crashed, or by a failed write), indexed in
the background by whoever opens the index, unless another process is already indexing them.

Several processes sharing a store each index what they store, and taking their rows too would
embed them twice over (on a busy machine, at the searches' expense). So, while another live
process has the index open (:class:`~remindful.engine.index_locks.IndexHolders`), the backlog is
watched for ``BACKLOG_WATCH_S``; while it shrinks, it is left alone. Alone with the index, this
process indexes it at once: a flush never waits for a watch of nobody.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Set

from remindful.engine.backend import CatalogBackend
from remindful.engine.background import Errand
from remindful.engine.index_locks import IndexHolders
from remindful.engine.sqlfilter import SqlFilter

log = logging.getLogger("remindful")

#: A backlog of rows left un-indexed is watched this long: while it shrinks (another process is
#: indexing them) it is left alone.
BACKLOG_WATCH_S = 2.0


class Backlog:
    """Indexes (with ``index_ids``) the catalog's rows marked un-indexed up to the rowid last
    :meth:`queue`\\ d, ``batch`` at a time, in a background errand, but for those ``held``
    returns (this process's own indexer has them: the rows it stored while the index opened).
    ``stopping``: set while the mirror closes; the errand then gives up (what is left waits for
    the next open)."""

    def __init__(
        self,
        catalog: CatalogBackend,
        holders: IndexHolders,
        index_ids: Callable[[list[str]], None],
        *,
        stopping: threading.Event,
        batch: int,
        held: Callable[[], Set[str]] = frozenset,
    ) -> None:
        self._catalog = catalog
        self._held = held
        self._holders = holders
        self._index_ids = index_ids
        self._stopping = stopping
        self._batch = batch
        self._lock = threading.Lock()
        self._errand: Errand | None = None
        self._top = 0  # the last rowid of the backlog

    def queue(self, top: int) -> None:
        """Have the rows marked un-indexed up to rowid ``top`` indexed in the background."""
        with self._lock:
            self._top = max(self._top, top)
            if self._errand is None:
                self._errand = Errand("remindful-index-backlog", self._run)
        self._errand.ask()

    def wait(self, timeout: float | None) -> bool:
        """For a flush: wait (at most ``timeout`` seconds) until the backlog asked for is done,
        only when this process alone has the index open; while another holds it, the backlog is
        theirs to finish and is not waited for. False on timeout."""
        errand = self._errand
        return errand is None or bool(self._holders.others()) or errand.wait(timeout)

    def close(self) -> None:
        """Stop the errand (set ``stopping`` first so that a wait for the index lock gives up)."""
        errand, self._errand = self._errand, None
        if errand is not None:
            errand.close()

    def _left(self, top: int) -> int:
        return self._catalog.count(SqlFilter("indexed = 0 AND rowid <= ?", (top,)))

    def _run(self) -> None:
        """Index the backlog, unless another process is indexing it (see the module docstring):
        once it stands still, it is indexed here, a batch at a time, until someone else's work
        shows again (or it is done, or a batch gets nowhere: what is left waits for the next
        open)."""
        top = self._top
        while True:
            before = self._left(top)
            if not before or self._stopping.is_set():
                return
            if self._holders.others():  # only a process with the index open can be indexing them
                if self._stopping.wait(BACKLOG_WATCH_S):
                    return
                if self._left(top) < before:
                    continue  # another process is on it
            while True:
                before = self._left(top)
                held = self._held()
                found = self._catalog.read(
                    "SELECT id FROM memories WHERE indexed = 0 AND rowid <= ? ORDER BY rowid LIMIT ?",
                    (top, self._batch + len(held)),
                )
                ids = [r[0] for r in found if r[0] not in held][: self._batch]
                if not ids or self._stopping.is_set():
                    return
                self._index_ids(ids)
                after = self._left(top)
                if after >= before:
                    log.info("%d memories left un-indexed for now: indexing them got nowhere", after)
                    return
                if before - after > len(ids):
                    break  # others index some too: watch again


__all__ = ["BACKLOG_WATCH_S", "Backlog"]
