"""Vectors computed after their rows commit: rows stored without a vector
(``performance.defer_embedding``) are embedded by the background indexer, outside the index lock,
and a search waits for the ones its writer has yet to compute. The parts of long memories
(:mod:`remindful.engine.chunks`) are embedded there too, right after.

*Whose* rows a search waits for (read your writes): every row of a small write (up to
``SHARED_ROWS`` rows: a ``store``, a hook's captures) stored before it, whoever stored it; the rows
of a larger write (an import, a ``store_batch`` of thousands) only when the search has the same
writer. A writer is the thread, unless the caller names one with :data:`WRITER` (the MCP server
does: its tool calls run in worker threads, one after another, and a client that stored a batch
and then searches must find it). So a script that imports and then searches finds its import, and
a serving process's searches do not wait, up to the whole time budget, for the vectors of an
import another thread is making (issue 34: 4.3 s at the 95th percentile of searches during one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from contextvars import ContextVar
from typing import Protocol

import numpy as np

from remindful.embed.base import Embedder
from remindful.embed.cache import CachedEmbedder
from remindful.engine.backend import CatalogBackend
from remindful.engine.chunks import ChunkFiller

#: The writer of what is stored in this context (None: the thread): see the module docstring.
WRITER: ContextVar[Hashable | None] = ContextVar("remindful_writer", default=None)

#: A write of more rows than this is waited for by its own writer's searches only; a smaller one
#: by every search (embedding 64 texts takes about a quarter of a second on two cores).
SHARED_ROWS = 64

#: How long the background indexer waits for rows a search is embedding (:meth:`DeferredEmbeddings.embed_few`).
CLAIM_WAIT_S = 60.0


def writer() -> Hashable:
    """The writer of the current context: :data:`WRITER`, else the thread."""
    named = WRITER.get()
    # The thread itself, not its ident: a new thread may get the ident of one that ended.
    return named if named is not None else threading.current_thread()


class EmbedderSource(Protocol):
    """The embedder the mirror embeds deferred rows with, built on first use."""

    def get(self) -> Embedder:
        """The embedder, built now if it was not yet."""
        ...

    @property
    def loaded(self) -> bool:
        """Whether it was built (asking builds nothing)."""
        ...


class DeferredEmbeddings:
    """Embeds rows and saves their vectors in the catalog, and tracks the rows this process stored
    without one until they have it. ``stopping``: set while closing (nothing more is embedded);
    ``exiting()``: the interpreter exits (the embedder is not built any more). Thread-safe."""

    def __init__(
        self,
        catalog: CatalogBackend,
        embedder: EmbedderSource,
        *,
        stopping: threading.Event,
        exiting: Callable[[], bool],
    ) -> None:
        self._catalog = catalog
        self._embedder = embedder
        self._stopping = stopping
        self._exiting = exiting
        self._chunks = ChunkFiller(catalog, embedder.get)
        # The rows this process stored without a vector, by the writer whose searches wait for
        # them (None: every search's), and each row's writer.
        self._by_writer: dict[Hashable | None, set[str]] = {}
        self._writer_of: dict[str, Hashable | None] = {}
        # The rows being embedded now (by the background indexer, or by a search: :meth:`embed_few`).
        self._claimed: set[str] = set()
        self._embedded = threading.Condition()

    def expect(self, ids: Iterable[str]) -> None:
        """Note the rows of one write, stored without a vector: searches wait for them (:meth:`wait`):
        every search when they are at most ``SHARED_ROWS``, else their writer's."""
        ids = list(ids)
        if not ids:
            return
        owner = None if len(ids) <= SHARED_ROWS else writer()
        with self._embedded:
            self._forget(ids)
            self._by_writer.setdefault(owner, set()).update(ids)
            self._writer_of.update(dict.fromkeys(ids, owner))

    def _forget(self, ids: Iterable[str]) -> None:
        """No longer wait for ``ids`` (under the condition's lock)."""
        for mid in ids:
            if mid in self._writer_of:
                owner = self._writer_of.pop(mid)
                rows = self._by_writer[owner]
                rows.discard(mid)
                if not rows:
                    del self._by_writer[owner]

    def pending(self, by: Hashable | None = None) -> bool:
        """Whether rows this process stored are still waiting for their vectors (with ``by``:
        rows a search of that writer waits for)."""
        with self._embedded:
            return bool(self._writer_of) if by is None else None in self._by_writer or by in self._by_writer

    def waiting(self, by: Hashable | None = None) -> frozenset[str]:
        """The rows this process stored that are still waiting for their vectors (with ``by``: those
        a search of that writer waits for)."""
        with self._embedded:
            if by is None:
                return frozenset(self._writer_of)
            return frozenset(self._by_writer.get(None, set()) | self._by_writer.get(by, set()))

    def wait(self, timeout: float, rows: frozenset[str]) -> bool:
        """Wait (at most ``timeout`` seconds) until none of ``rows`` waits for its vector any more
        (it has one, or its embedding failed); False on timeout. Rows stored meanwhile are not
        waited for: under a stream of stores the wait would never end."""
        with self._embedded:
            return self._embedded.wait_for(lambda: self._writer_of.keys().isdisjoint(rows), timeout)

    def embed_stored(self, ids: list[str]) -> None:
        """Embed the memories among ``ids`` committed without a vector, and the parts of the long
        ones that lack theirs (outside the index lock: other processes need not wait for the
        model); nothing once closing ran out of time. Rows a search is embedding meanwhile
        (:meth:`embed_few`) are left to it, and waited for: the index write that follows needs
        their vectors."""
        with self._embedded:
            mine = self._claim(ids)
        try:
            if self._stopping.is_set() or (self._exiting() and not self._embedder.loaded):
                return
            self.embed_and_save(self._catalog.without_embeddings(mine))
            self.embed_parts(ids)
        finally:
            with self._embedded:
                self._claimed.difference_update(mine)
                self._forget(mine)
                self._embedded.notify_all()
                if len(mine) < len(ids):
                    self._embedded.wait_for(lambda: self._claimed.isdisjoint(ids), CLAIM_WAIT_S)

    def embed_few(self, rows: Iterable[str]) -> None:
        """Embed now, in the caller's thread (a search's), the rows among ``rows`` of small writes
        (waited for by every search) that nothing embeds yet, if they are at most ``SHARED_ROWS``:
        a search for what was just stored is not held up by an import queued before it (the
        background indexer embeds in order; a batch it is embedding already is waited for)."""
        with self._embedded:
            shared = self._by_writer.get(None, set())
            free = [mid for mid in rows if mid in shared and mid not in self._claimed]
            if not free or len(free) > SHARED_ROWS:
                return
            self._claimed.update(free)
        try:
            self.embed_and_save(self._catalog.without_embeddings(free))
        finally:  # on failure too, as embed_stored: the search reports it; no later search waits
            with self._embedded:
                self._claimed.difference_update(free)
                self._forget(free)
                self._embedded.notify_all()

    def _claim(self, ids: Iterable[str]) -> list[str]:
        """Of ``ids``, those nothing is embedding now, claimed (under the condition's lock)."""
        free = [mid for mid in ids if mid not in self._claimed]
        self._claimed.update(free)
        return free

    def embed_parts(self, ids: Sequence[str]) -> None:
        """Embed and save the parts of the long memories among ``ids`` that lack them."""
        if not self._stopping.is_set():
            self._chunks.fill(ids)

    def embed_and_save(self, texts: Sequence[tuple[str, str]], *, wait: bool = True) -> dict[str, np.ndarray]:
        """Embed (id, content) pairs and save the vectors in the catalog; returns them by id.
        ``wait=False`` (a search's): they are kept in the catalog only if it takes them at once,
        never waiting for another process's write (their writer, or a later search, keeps them),
        nor written to the embedding cache's persistent store."""
        if not texts:
            return {}
        embedder = self._embedder.get()
        contents = [content for _, content in texts]
        if not wait and isinstance(embedder, CachedEmbedder):
            vectors = embedder.embed(contents, persist=False)
        else:
            vectors = embedder.embed(contents)
        found = {mid: vector for (mid, _), vector in zip(texts, vectors, strict=True)}
        self._catalog.set_embeddings(found, wait=wait)
        return found


__all__ = ["SHARED_ROWS", "WRITER", "DeferredEmbeddings", "EmbedderSource", "writer"]
