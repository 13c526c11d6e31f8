"""Vectors computed after their rows commit: rows stored without a vector
(``performance.defer_embedding``) are embedded by the background indexer, outside the index lock,
and a search waits for the ones this process has yet to compute. The parts of long memories
(:mod:`remindful.engine.chunks`) are embedded there too, right after."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import numpy as np

from remindful.embed.base import Embedder
from remindful.embed.cache import CachedEmbedder
from remindful.engine.backend import CatalogBackend
from remindful.engine.chunks import ChunkFiller


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
        self._unembedded: set[str] = set()
        self._embedded = threading.Condition()

    def expect(self, ids: Iterable[str]) -> None:
        """Note rows stored without a vector: searches wait for them (:meth:`wait`)."""
        with self._embedded:
            self._unembedded.update(ids)

    def pending(self) -> bool:
        """Whether rows this process stored are still waiting for their vectors."""
        with self._embedded:
            return bool(self._unembedded)

    def waiting(self) -> frozenset[str]:
        """The rows this process stored that are still waiting for their vectors."""
        with self._embedded:
            return frozenset(self._unembedded)

    def wait(self, timeout: float, rows: frozenset[str]) -> bool:
        """Wait (at most ``timeout`` seconds) until none of ``rows`` waits for its vector any more
        (it has one, or its embedding failed); False on timeout. Rows stored meanwhile are not
        waited for: under a stream of stores the wait would never end."""
        with self._embedded:
            return self._embedded.wait_for(lambda: self._unembedded.isdisjoint(rows), timeout)

    def embed_stored(self, ids: list[str]) -> None:
        """Embed the memories among ``ids`` committed without a vector, and the parts of the long
        ones that lack theirs (outside the index lock: other processes need not wait for the
        model); nothing once closing ran out of time."""
        try:
            if self._stopping.is_set() or (self._exiting() and not self._embedder.loaded):
                return
            self.embed_and_save(self._catalog.without_embeddings(ids))
            self.embed_parts(ids)
        finally:
            with self._embedded:
                self._unembedded.difference_update(ids)
                self._embedded.notify_all()

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


__all__ = ["DeferredEmbeddings", "EmbedderSource"]
