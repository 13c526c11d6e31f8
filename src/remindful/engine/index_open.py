"""The vector index's opening: on first use, in the background, never on a search's path.

A write opens the index where it runs (the background indexer, as a rule). A search never waits
for it: it asks the viewer (an :class:`~remindful.engine.background.Errand`) to open it and scores
exactly from the catalog meanwhile. The viewer also reloads this process's view of the index files
when asked, and has a large store's vector snapshot (:mod:`~remindful.engine.index_snapshot`) kept
for the next fresh process by a keeper of its own, which a flush does not wait for (:meth:`IndexOpening.settle` does).

Opening checks the files, under the index lock, only when they may be damaged: a process holding
them died (:class:`~remindful.engine.index_locks.IndexHolders`), or a quick look finds something
wrong. It then loads this process's view and reconciles the index with the catalog
(:meth:`~remindful.engine.index_view.IndexView.reconcile`), and hands what that left to
``after_open``: the deletions still queued, and the backlog of rows marked un-indexed.

A transient failure (a lock, an unreachable server, a full disk, a read-only filesystem) is
retried after ``INDEX_RETRY_S``, search using the catalog alone meanwhile; damage is reported once
and waits for ``reindex(reset=True)``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from remindful.engine import flat
from remindful.engine.backend import CatalogBackend
from remindful.engine.background import Errand, interpreter_exiting
from remindful.engine.index_locks import IndexHolders, IndexLock, WaitCancelled
from remindful.engine.index_snapshot import SPARE_SHARE as SNAPSHOT_SPARE
from remindful.engine.index_snapshot import VectorSnapshot
from remindful.engine.index_view import IndexView
from remindful.errors import CorruptionError, RemindfulError, StorageError
from remindful.index.base import VectorIndex
from remindful.model import MemoryType

log = logging.getLogger("remindful")

#: After a transient failure to open the vector index, how long search uses the catalog alone
#: before the index is opened again.
INDEX_RETRY_S = 1.0
#: A search of a large store waits past its time budget for an opening that is loading the index
#: (not one waiting for another process's lock), at most this long: scoring the catalog's vectors
#: instead costs more (1,000,000 memories: 18 s) and could not start before the load ends anyway
#: (chromadb holds the GIL while it loads a graph).
LOADING_WAIT_S = 120.0


class IndexOpening:
    """Opens the index of one catalog (made by ``new_index``) on first use, and keeps whether it
    is usable (:attr:`current`) and why not (:attr:`error`). Thread-safe.

    ``after_open(queued)`` runs once the index opened, with the deletions reconciling left queued.
    ``may_start()`` says whether a background thread may start (not while closing or at exit);
    ``exiting()`` whether the interpreter exits (nothing new is opened then). A search waits at
    most ``search_wait_s`` for an opening it asked for (:meth:`await_open`)."""

    def __init__(
        self,
        catalog: CatalogBackend,
        new_index: Callable[[], VectorIndex],
        *,
        view: IndexView,
        index_lock: IndexLock,
        holders: IndexHolders,
        snapshot: VectorSnapshot | None,
        stopping: threading.Event,
        search_wait_s: float,
        may_start: Callable[[], bool],
        exiting: Callable[[], bool],
        after_open: Callable[[list[tuple[str, str]]], None],
    ) -> None:
        self._catalog = catalog
        self._new_index = new_index
        self._view = view
        self._index_lock = index_lock
        self._holders = holders
        self._snapshot = snapshot
        self._stopping = stopping
        self._search_wait_s = search_wait_s
        self._may_start = may_start
        self._exiting = exiting
        self._after_open = after_open
        #: Held while the index opens (long: it waits for the index lock); a rebuild holds it too.
        self.lock = threading.RLock()
        self._errand_lock = threading.Lock()  # starting the viewer (short)
        self._index: VectorIndex | None = None
        self._opened = False
        self._error: str | None = None
        self._retry_at = 0.0  # after a transient failure to open the index: when to try again
        self._viewer: Errand | None = None
        # Writes the vector snapshot whole when the viewer finds it stale: upkeep for the next
        # process, which neither a flush nor the viewer's next refresh waits for.
        self._keeper: Errand | None = None
        self._reload_wanted = False  # a query failed: the next refresh reloads even if no one wrote
        self._snapshot_wanted = False  # a search asked the viewer: it keeps the vector snapshot too
        self._snapshot_asked = False  # whether a search ever asked it to
        self._loading = False  # the opening holds the index lock and loads the index

    @property
    def current(self) -> VectorIndex | None:
        """The index if it is open and usable, without opening it."""
        return self._index

    @property
    def error(self) -> str | None:
        return self._error

    def get(self, cancel: threading.Event | None = None) -> VectorIndex | None:
        """The index, opened now if needed (waiting for the index lock; with ``cancel``, the wait
        gives up, WaitCancelled, once it is set), or None while it is unusable (:attr:`error`
        says why). Nothing is opened at interpreter exit."""
        if (self._exiting() or interpreter_exiting()) and not self._opened:
            return None
        if self.due():
            with self.lock:
                if self.due():
                    self._retry_at = 0.0
                    try:
                        self._open(cancel)
                    finally:
                        self._loading = False
                    self._opened = True
        return self._index

    def due(self) -> bool:
        """Whether the next use opens the index: never opened, or a retry's time has come."""
        return not self._opened or bool(self._retry_at and time.monotonic() >= self._retry_at)

    def searchable(self) -> VectorIndex | None:
        """The index for a search, if it is open and usable; else None, and it is opened in the
        background (the search scores from the catalog meanwhile). A process's first search has
        the vector snapshot kept even when a write opened the index before it."""
        if self.due() or not self._snapshot_asked:
            self.ask()
        return self._index

    def await_open(self) -> VectorIndex | None:
        """The index once the background opening asked for has ended (within the search time
        budget, or past it while the opening loads the index: ``LOADING_WAIT_S``), if it opened
        and is usable; else None (an opening still waiting for another process's lock)."""
        viewer = self._viewer
        started = time.monotonic()
        while viewer is not None and self._index is None:  # not what follows the opening
            waited = time.monotonic() - started
            if waited >= self._search_wait_s and not (self._loading and waited < LOADING_WAIT_S):
                break
            if viewer.wait(0.05):
                break
        return self._index

    def ask(self, *, reload: bool = False, searching: bool = True) -> None:
        """Have the viewer open the index (if needed) and refresh this process's view of it
        (``reload``: load it again even if no other process wrote since). Asked for a search
        (``searching``), it also keeps the store's vector snapshot; a write only has the index
        opened."""
        if not self._may_start():
            return
        if reload:
            self._reload_wanted = True
        if searching:
            self._snapshot_wanted = self._snapshot_asked = True
        if self._viewer is None:
            with self._errand_lock:
                if self._viewer is None:
                    self._viewer = Errand("remindful-index-view", self._view_errand)
        self._viewer.ask()

    def wait(self, timeout: float | None) -> bool:
        """Wait until the viewer did what it was asked (at most ``timeout`` seconds); False on
        timeout. Not for the snapshot it had written (:meth:`settle`)."""
        viewer = self._viewer
        return viewer is None or viewer.wait(timeout)

    def settle(self, timeout: float | None) -> bool:
        """:meth:`wait`, then until the vector snapshot asked for is written; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.wait(timeout):
            return False
        keeper = self._keeper
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return keeper is None or keeper.wait(left)

    def state(self) -> dict[str, Any]:
        """``opened`` (False until the first write or search needs the index), ``available``
        (None until then, else whether it is usable) and ``error`` (why not; None if it is)."""
        opened = self._opened
        return {"opened": opened, "available": self._index is not None if opened else None, "error": self._error}

    def rebuilt(self, index: VectorIndex) -> None:
        """``index`` was rebuilt from the catalog (under :attr:`lock`): it is the usable index now."""
        self._index, self._error, self._opened, self._retry_at = index, None, True, 0.0

    def stop_viewer(self) -> None:
        """Stop the viewer and the snapshot's keeper (set ``stopping`` first, so that their wait
        for the index lock, and a snapshot being written, give up)."""
        viewer, self._viewer = self._viewer, None
        if viewer is not None:
            viewer.close()
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.close()

    def closed(self) -> None:
        """The index was closed: the next use opens it again."""
        self._index = None
        self._opened = False

    def _view_errand(self) -> None:
        """The viewer's task: open the index if needed, then refresh the view if asked to."""
        try:
            fresh = self.due()
            index = self.get(self._stopping)
            if index is None:
                return
            if not fresh or self._reload_wanted:  # just opened: the view is current
                force, self._reload_wanted = self._reload_wanted, False
                self._view.refresh(index, force=force, cancel=self._stopping)
            if self._snapshot_wanted:
                self._snapshot_wanted = False
                self._ask_keeper()
        except WaitCancelled:
            return
        except RemindfulError as exc:
            if isinstance(exc, CorruptionError) and exc.part == "catalog":
                # Not the index's: every use of the catalog reports it (a second line would repeat it).
                log.debug("vector index not opened: %s", exc)
                return
            log.warning("could not refresh the vector index (%s); search scores from the catalog meanwhile", exc)

    def _ask_keeper(self) -> None:
        """Have the keeper write the snapshot whole if it needs to (in a thread of its own)."""
        if self._snapshot is None or not self._may_start():
            return
        with self._errand_lock:
            keeper = self._keeper
            if keeper is None:
                keeper = self._keeper = Errand("remindful-index-snapshot", self.keep_snapshot)
        keeper.ask()

    def keep_snapshot(self) -> None:
        """:meth:`_keep_snapshot`, which never raises here: what stops it (closing, the catalog's
        error) leaves the file stale, to be written whole after a later open."""
        try:
            self._keep_snapshot()
        except WaitCancelled:
            return
        except RemindfulError as exc:
            if isinstance(exc, CorruptionError) and exc.part == "catalog":
                log.debug("vector snapshot not written: %s", exc)  # every use of the catalog reports it
                return
            log.warning("could not write the vector snapshot (%s); a fresh process's search waits for the index", exc)

    def _keep_snapshot(self) -> None:
        """Write the compact copy of the index's vectors whole if it does not match the index files
        (or holds many records of deleted rows and older vectors: ``SPARE_SHARE``) and the store is
        too large to copy in memory (:mod:`~remindful.engine.index_snapshot`): the rows read
        without the index lock (5-6 s at 1,000,000 memories), the writes made meanwhile added under it."""
        snapshot = self._snapshot
        if snapshot is None or self._exiting() or self._catalog.count(at_most=flat.MAX_ROWS + 1) <= flat.MAX_ROWS:
            return
        header = snapshot.usable(self._index_lock.generation())
        rows = sum(self._catalog.type_counts().values())
        if header is not None and snapshot.records_held(header) <= rows * (1 + SNAPSHOT_SPARE):
            return  # matches the index files, and not grown much past the catalog's rows
        try:
            snapshot.rebuild(self._index_lock, self._view.floor, self._stopping)
        except (OSError, ValueError) as exc:
            log.warning("could not write %s (%s); a fresh process's search waits for the index", snapshot.path, exc)

    def _open(self, cancel: threading.Event | None = None) -> None:
        unwritable = self._catalog.unwritable
        if unwritable is not None:  # a read-only filesystem or a full disk: Chroma cannot open there
            self._error = f"{unwritable.message}; search scores the memories from the catalog"
            self._retry_at = time.monotonic() + INDEX_RETRY_S
            return
        started = time.perf_counter()
        index = self._new_index()
        try:
            preload = getattr(index, "preload", None)
            if preload is not None:
                preload()  # not under the lock: other processes would wait for the import
            expect_sizes(index, self._catalog)  # before the collections load: a large one saves less often
            # The files are checked and read under the lock: no writer is half-way through them (a
            # quick look during a write finds them changed, and a probe then may find them damaged).
            try:
                with self._index_lock(write=False, cancel=cancel) as generation:
                    self._check_files(index)  # a probe loads the files in a child process: not waited for
                    self._loading = True
                    self._view.load(index, generation)
                queued = self._view.reconcile(index, cancel=cancel)
            except CorruptionError as exc:
                if exc.part == "catalog" or exc.backup_path is not None or not hasattr(index, "check"):
                    raise
                with self._index_lock(write=False, cancel=cancel):
                    index.close()
                    index.check()  # back up the damaged files and describe the damage
                # The files are sound: the error was passing. Retry.
                raise StorageError(f"the vector index failed while opening ({exc})") from exc
        except WaitCancelled:
            with contextlib.suppress(Exception):
                index.close()
            raise
        except CorruptionError as exc:
            if exc.part == "catalog":  # not the index's fault: the caller reports it
                with contextlib.suppress(Exception):
                    index.close()
                raise
            self._error = str(exc)
            copied = f" (a copy of the damaged files is in {exc.backup_path})" if exc.backup_path else ""
            copied = "" if exc.backup_path and exc.backup_path in str(exc) else copied
            log.error(
                "Vector index unusable: %s%s. Search continues from the catalog; "
                "run `remindful reindex --reset` to rebuild the index.",
                exc,
                copied,
            )
            return
        except StorageError as exc:
            self._error = str(exc)
            self._retry_at = time.monotonic() + INDEX_RETRY_S
            log.warning(
                "Vector index unavailable: %s. Search continues from the catalog; retrying in %.0f s.",
                exc,
                INDEX_RETRY_S,
            )
            with contextlib.suppress(Exception):
                index.close()
            return
        self._index, self._error = index, None
        self._holders.hold()
        self._after_open(queued)
        log.debug("vector index ready in %.0f ms", (time.perf_counter() - started) * 1000)

    def _check_files(self, index: VectorIndex) -> None:
        """Run the index's full health check (seconds: a child process opens every collection) only
        when it may have been damaged: a process holding it died, or a quick look at the files
        (no database connection, milliseconds) finds something wrong. Raises CorruptionError."""
        check = getattr(index, "check", None)
        if check is None:
            return
        crashed = self._holders.crashed()
        quick = getattr(index, "quick_check", None)
        problem = quick() if quick is not None else "no quick check available"
        if crashed or problem:
            log.info("checking the vector index files (%s)", f"process {crashed} died" if crashed else problem)
            check()


def expect_sizes(index: VectorIndex, catalog: CatalogBackend) -> None:
    """Tell an index that tunes its collections to their size (the embedded Chroma's
    ``expect_sizes``: how often it saves its files) how many memories of each type the catalog holds."""
    expect = getattr(index, "expect_sizes", None)
    if expect is not None:
        counts = catalog.type_counts()
        expect({t.collection: int(counts.get(t.value, 0)) for t in MemoryType})


__all__ = ["INDEX_RETRY_S", "LOADING_WAIT_S", "IndexOpening", "expect_sizes"]
