"""An embedder wrapper that embeds each distinct text once: LRU in memory, then a persistent store."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from remindful.embed.base import Embedder, EmbeddingStore
from remindful.errors import EmbedderError
from remindful.model import content_hash

logger = logging.getLogger(__name__)


class CachedEmbedder:
    """Wraps an :class:`Embedder`; vectors are keyed by ``content_hash(text)`` under ``inner.name``.

    Each ``embed`` call looks texts up in the in-memory LRU (``lru_size`` entries, 0 disables it),
    then in ``store`` (one batched lookup), and sends only the remaining distinct texts to
    ``inner.embed`` in one batched call; their vectors go back into both caches. Identical texts in
    one call are embedded once.

    Statistics count requested texts: ``hits`` were served from memory (including repeats within
    one call), ``store_hits`` from the persistent store, ``misses`` needed the model.

    Thread-safe. Two threads missing the same text at once may both embed it; the result is the same.
    The persistent store is an optimisation: if it fails, the error is logged and the text embedded.
    """

    def __init__(self, inner: Embedder, *, lru_size: int = 1000, store: EmbeddingStore | None = None) -> None:
        if lru_size < 0:
            raise ValueError(f"lru_size must be >= 0, got {lru_size}")
        self.inner = inner
        self.store = store
        self._lru_size = lru_size
        self._lru: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.store_hits = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def hit_rate(self) -> float:
        """Share of requested texts served without the model (0.0 before any request)."""
        total = self.hits + self.store_hits + self.misses
        return (self.hits + self.store_hits) / total if total else 0.0

    def stats(self) -> dict[str, float | int]:
        """Counters for status pages: hits, store_hits, misses, hit_rate, lru_entries, lru_size."""
        with self._lock:
            entries = len(self._lru)
        return {
            "hits": self.hits,
            "store_hits": self.store_hits,
            "misses": self.misses,
            "hit_rate": self.hit_rate,
            "lru_entries": entries,
            "lru_size": self._lru_size,
        }

    def clear(self) -> None:
        """Empty the in-memory LRU (the persistent store is left alone)."""
        with self._lock:
            self._lru.clear()

    def embed_one(self, text: str) -> np.ndarray:
        """The ``(dimension,)`` vector of one text."""
        return self.embed([text])[0]

    def embed_query(self, text: str) -> np.ndarray:
        """One search query's vector, cached in memory only: queries are rarely stored, and a
        persistent-cache write per search would cost a catalog transaction. Computed by the inner
        embedder's ``embed_query`` when it has one (it leaves a core to the search's other work)."""
        own = getattr(self.inner, "embed_query", None)
        compute = None if own is None else (lambda texts: np.asarray(own(texts[0]))[None, :])
        return self.embed([text], persist=False, compute=compute)[0]

    def embed(
        self,
        texts: Sequence[str],
        *,
        persist: bool = True,
        compute: Callable[[list[str]], np.ndarray] | None = None,
    ) -> np.ndarray:
        """A ``(len(texts), dimension)`` float32 array of unit rows, in input order.

        ``persist=False`` skips the persistent store (lookup and write) and uses the LRU only;
        ``compute`` embeds what no cache holds (default: the inner embedder's ``embed``).
        Raises :class:`EmbedderError` if the inner embedder returns the wrong shape; errors of the
        inner embedder propagate unchanged.
        """
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string")
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        hashes = [content_hash(text) for text in texts]
        # First position of each distinct text: what is looked up and, if missing, embedded.
        first: dict[str, int] = {}
        for position, key in enumerate(hashes):
            first.setdefault(key, position)

        found, lru_found = self._lru_lookup(first)
        store_found = self._store_lookup([key for key in first if key not in found]) if persist else {}
        found.update(store_found)
        missing = [key for key in first if key not in found]
        if missing:
            computed = self._embed_missing([texts[first[key]] for key in missing], compute or self.inner.embed)
            fresh = {key: computed[i] for i, key in enumerate(missing)}
            found.update(fresh)
            if persist:
                self._store_put(fresh)
        if store_found or missing:
            self._lru_put({**store_found, **{key: found[key] for key in missing}})

        for position, key in enumerate(hashes):
            out[position] = found[key]
        with self._lock:
            self.misses += len(missing)
            self.store_hits += len(store_found)
            # Everything else was served from memory: LRU hits and repeats within this call.
            self.hits += len(texts) - len(missing) - len(store_found)
        logger.debug(
            "embed: %d texts, %d from LRU, %d from store, %d embedded",
            len(texts),
            lru_found,
            len(store_found),
            len(missing),
        )
        return out

    def _lru_lookup(self, keys: dict[str, int]) -> tuple[dict[str, np.ndarray], int]:
        found: dict[str, np.ndarray] = {}
        if not self._lru_size:
            return found, 0
        with self._lock:
            for key in keys:
                vector = self._lru.get(key)
                if vector is not None:
                    self._lru.move_to_end(key)
                    found[key] = vector
        return found, len(found)

    def _lru_put(self, items: dict[str, np.ndarray]) -> None:
        if not self._lru_size:
            return
        with self._lock:
            for key, vector in items.items():
                self._lru[key] = vector
                self._lru.move_to_end(key)
            while len(self._lru) > self._lru_size:
                self._lru.popitem(last=False)

    def _store_lookup(self, keys: list[str]) -> dict[str, np.ndarray]:
        if self.store is None or not keys:
            return {}
        try:
            stored = self.store.get_cached_embeddings(self.name, keys)
        except Exception:  # the store is only a cache: a failed read costs time, not correctness
            logger.warning("embedding store lookup failed; embedding instead", exc_info=True)
            return {}
        wanted = set(keys)
        result = {}
        for key, vector in stored.items():
            array = np.asarray(vector, dtype=np.float32).reshape(-1)
            if key in wanted and array.shape == (self.dimension,):
                result[key] = _frozen(array)
        return result

    def _store_put(self, items: dict[str, np.ndarray]) -> None:
        if self.store is None or not items:
            return
        try:
            self.store.put_cached_embeddings(self.name, items)
        except Exception:
            logger.warning("embedding store write failed; vectors stay in memory only", exc_info=True)

    def _embed_missing(self, texts: list[str], compute: Callable[[list[str]], np.ndarray]) -> list[np.ndarray]:
        vectors = np.asarray(compute(texts), dtype=np.float32)
        if vectors.shape != (len(texts), self.dimension):
            raise EmbedderError(
                f"Embedder {self.inner.name!r} returned shape {vectors.shape} for {len(texts)} texts, "
                f"expected ({len(texts)}, {self.dimension})"
            )
        return [_frozen(row) for row in vectors]

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, hits={self.hits}, store_hits={self.store_hits}, misses={self.misses})"


def _frozen(vector: np.ndarray) -> np.ndarray:
    """A read-only copy: cached vectors are shared, so nobody may change them in place."""
    copy = np.array(vector, dtype=np.float32, copy=True)
    copy.flags.writeable = False
    return copy
