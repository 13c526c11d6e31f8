"""Adding stored memories to the vector index (a part of :class:`remindful.indexing.IndexMaintenance`).

A store commits its rows to the catalog and hands them to :meth:`IndexAdditions.index_rows`, which
indexes them in the background (``performance.async_indexing``) or at once. Rows committed without
a vector (``performance.defer_embedding``) are embedded there first, outside the index lock. Until
they are indexed, search scores them exactly from the catalog, after waiting for the vectors this
process has yet to compute (:meth:`IndexAdditions.await_embeddings`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from remindful.background import BackgroundIndexer
from remindful.errors import RemindfulError

if TYPE_CHECKING:
    from remindful.background import IndexLock
    from remindful.catalog import Catalog, MemoryRow
    from remindful.config import Settings
    from remindful.embed.base import Embedder
    from remindful.index.base import VectorIndex

log = logging.getLogger("remindful")


class IndexAdditions:
    """The store path of :class:`~remindful.indexing.IndexMaintenance`; the attributes below are set
    by StoreState, and IndexMaintenance (with StoreState) provides what the stubs declare."""

    settings: Settings
    _index_rowid: int
    _spans: dict[str, tuple[int, int]]
    _init_lock: threading.RLock
    _index_lock: IndexLock
    _indexer: BackgroundIndexer | None
    #: Ids this process stored without a vector (``performance.defer_embedding``), not yet embedded.
    _unembedded: set[str]
    _embedded: threading.Condition  # notified when ids leave ``_unembedded``

    if TYPE_CHECKING:

        @property
        def catalog(self) -> Catalog: ...

        @property
        def index(self) -> VectorIndex | None: ...

        def _upsert(self, index: VectorIndex, rows: Sequence[MemoryRow], *, locked: bool = False) -> None: ...

    @property
    def embedder(self) -> Embedder:
        raise NotImplementedError

    def defers_embedding(self) -> bool:
        """Whether new rows are committed without a vector and embedded by the background indexer
        (``performance.defer_embedding`` with ``async_indexing``)."""
        performance = self.settings.performance
        return performance.async_indexing and performance.defer_embedding

    def index_rows(self, rows: Sequence[MemoryRow]) -> None:
        """Add rows to the vector index: in the background (``performance.async_indexing``) or now.
        Rows without a vector are embedded first, there. Until then search scores them exactly (and
        waits for the ones this process has yet to embed); on failure they stay marked un-indexed
        and are indexed at the next open."""
        unembedded = [r.id for r in rows if r.embedding is None]
        if unembedded:
            with self._embedded:
                self._unembedded.update(unembedded)
        if self.settings.performance.async_indexing:
            if self._indexer is None:
                with self._init_lock:
                    if self._indexer is None:
                        self._indexer = BackgroundIndexer(self.index_ids)
            self._indexer.submit([r.id for r in rows])
        else:
            self.index_ids([r.id for r in rows])

    def await_embeddings(self, timeout: float) -> bool:
        """Before a search: wait (at most ``timeout`` seconds) until the rows this process stored
        without a vector have one, or their embedding failed; False on timeout."""
        with self._embedded:
            return self._embedded.wait_for(lambda: not self._unembedded, timeout)

    def index_ids(self, ids: list[str]) -> None:
        """Index the memories with these ids that are still un-indexed (read under the index lock,
        so a memory deleted meanwhile is not indexed again)."""
        rows: list[MemoryRow] = []
        try:
            self._embed_stored(ids)  # first: search needs the vectors even without an index
        except RemindfulError as exc:
            log.warning("stored %d memories but could not embed them yet (%s); they will be later", len(ids), exc)
        index = self.index
        if index is None:
            return
        span = self._spans.pop(ids[0], None)
        try:
            with self._index_lock():
                found = self.catalog.get_rows(ids)
                vectors = self.catalog.embeddings([i for i in ids if i in found and not found[i].indexed])
                rows = [found[i] for i in ids if i in vectors]
                for row in rows:
                    row.embedding = vectors[row.id]
                if rows:
                    self._upsert(index, rows, locked=True)
        except RemindfulError as exc:
            log.warning(
                "stored %d memories but could not index them yet (%s); they will be indexed later", len(rows), exc
            )
            return
        if span is not None and span[0] == self._index_rowid:
            # Nobody else wrote in between: the view of the index is complete up to our rows.
            self._index_rowid = span[1]

    def _embed_stored(self, ids: list[str]) -> None:
        """Embed the memories among ``ids`` committed without a vector (outside the index lock:
        other processes need not wait for the model)."""
        try:
            if self._unembedded.isdisjoint(ids):
                return
            self._embed_and_save(self.catalog.without_embeddings(ids))
        finally:
            with self._embedded:
                self._unembedded.difference_update(ids)
                self._embedded.notify_all()

    def _embed_and_save(self, texts: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
        """Embed (id, content) pairs and save the vectors in the catalog; returns them by id."""
        if not texts:
            return {}
        vectors = self.embedder.embed([content for _, content in texts])
        found = {mid: vector for (mid, _), vector in zip(texts, vectors, strict=True)}
        self.catalog.set_embeddings(found)
        return found
