"""The vectors of deleted memories, removed from the index after the catalog delete queued them.

The catalog delete queues the vectors (``index_deletes``, in the same transaction);
:class:`IndexDeletes` removes them at once for a few, in the background for many (Chroma takes
~0.3 ms a vector, holding the GIL: :class:`~remindful.engine.background.DeleteFinisher`), after
the neighbours' session windows a large delete also left (:mod:`remindful.engine.windows`). Until
then it remembers which vectors this process knows are queued, so that a search skips them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from remindful.engine.backend import CatalogBackend
from remindful.engine.background import DeleteFinisher
from remindful.engine.index_locks import WaitCancelled
from remindful.engine.index_view import IndexView
from remindful.engine.scopes import in_index
from remindful.errors import RemindfulError
from remindful.index.base import VectorIndex
from remindful.model import MemoryType

log = logging.getLogger("remindful")

#: Vectors (or window spots) per step in the background: ~0.1 s of GIL per Chroma delete call
#: with chromadb 1.5, which has a fixed cost of ~25 ms, so smaller chunks take longer in all.
FINISH_CHUNK = 256


class IndexDeletes:
    """Removes queued vectors from the index ``current()`` returns (None: not open or unusable),
    writing through ``view``. ``stopping``: set while the mirror closes (a chunk waiting for the
    index lock gives up); ``may_start``: whether a background thread may be started now."""

    def __init__(
        self,
        catalog: CatalogBackend,
        view: IndexView,
        current: Callable[[], VectorIndex | None],
        *,
        stopping: threading.Event,
        may_start: Callable[[], bool],
    ) -> None:
        self._catalog = catalog
        self._view = view
        self._current = current
        self._stopping = stopping
        self._may_start = may_start
        self._lock = threading.Lock()
        self._finisher: DeleteFinisher | None = None
        self._queued: dict[str, set[str]] = {}  # type -> ids deleted, vectors maybe still in the index

    def skipped(self, type_value: str) -> set[str] | None:
        """Ids of ``type_value`` whose vectors may still be in the index though deleted."""
        return self._queued.get(type_value)

    def any_queued(self) -> bool:
        return any(self._queued.values())

    def track(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Note (id, type) pairs whose vectors are queued for removal."""
        for mid, type_value in pairs:
            self._queued.setdefault(type_value, set()).add(mid)

    def forget(self) -> None:
        """What this process knew is void (the store's content was replaced)."""
        self._queued.clear()

    def kick(self) -> None:
        """Large deletes left work queued in the catalog (windows to mend, vectors to remove): have
        the background :class:`DeleteFinisher` do it (unless no thread may start now)."""
        if not self._may_start():
            return
        if self._finisher is None:
            with self._lock:
                if self._finisher is None:
                    self._finisher = DeleteFinisher(self._step, chunk=FINISH_CHUNK)
        self._finisher.kick()

    def flush(self, timeout: float | None) -> bool:
        """Wait (at most ``timeout`` seconds) for the background finisher; False on timeout."""
        finisher = self._finisher
        return finisher is None or finisher.flush(timeout)

    def _step(self, limit: int) -> int:
        """One step of what large deletes left: mend the session windows around up to ``limit``
        deletion spots or, when none are left, remove up to ``limit`` queued vectors. Returns how
        many were handled (0: nothing left)."""
        try:
            return self._catalog.mend_windows(limit) or self.drain(limit, cancel=self._stopping)
        except WaitCancelled:  # closing: the rest stays queued
            return 0

    def drain(self, limit: int = FINISH_CHUNK, *, cancel: threading.Event | None = None) -> int:
        """Apply up to ``limit`` queued vector deletions, oldest first; returns how many were
        handled (0: none left, or no usable index)."""
        index = self._current()
        if index is None:
            return 0
        pairs = self._catalog.pending_index_deletes(limit)
        if pairs:
            self.unindex(index, pairs, cancel)
        return len(pairs)

    def unindex(
        self, index: VectorIndex, pairs: Sequence[tuple[str, str]], cancel: threading.Event | None = None
    ) -> None:
        """Remove the vectors of (id, type) ``pairs`` from ``index`` and their queue entries."""
        with self._view.writing(index, cancel):
            ids = [mid for mid, _t in pairs]
            # Stored again since (an import keeps ids): its vector is current, keep it. Unless it
            # is private where the index holds none: moved into the user scope, the row stays and
            # its vector goes.
            back = self._catalog.existing_ids(ids)
            if back and not self._catalog.indexes_private:
                rows = self._catalog.get_rows(sorted(back))
                back = {mid for mid in back if mid in rows and in_index(rows[mid].scope, private_indexed=False)}
            by_type: dict[str, list[str]] = {}
            for mid, type_value in pairs:
                if mid not in back:
                    by_type.setdefault(type_value, []).append(mid)
            for type_value, group in by_type.items():
                index.delete(MemoryType(type_value).collection, group)
            self._catalog.finish_index_deletes(ids)
        for mid, type_value in pairs:
            self._queued.get(type_value, set()).discard(mid)

    def finish(self, batch: int) -> None:
        """Stop the background finisher and do what is still queued here, ``batch`` at a time,
        without pauses (at close: leaving it would cost the next process to open the store)."""
        if self._finisher is not None:
            self._stopping.set()  # a chunk waiting for the index lock gives up: it is done below
            self._finisher.close()
            self._finisher = None
        try:
            while self._catalog.mend_windows(batch):
                pass
            if self._current() is not None and self.any_queued():
                while self.drain(batch):
                    pass
        except RemindfulError as exc:
            log.warning("deletions left to finish at the next open (%s)", exc)


__all__ = ["FINISH_CHUNK", "IndexDeletes"]
