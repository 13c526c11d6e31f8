"""The store's embedder: the configured model (or the one given), built on first use, behind a cache
of the vectors the store already holds.

Building it costs nothing much, but loading a model does (~0.5 s): a store that only reads the
catalog never loads one. Asking whether it was built (:attr:`LazyEmbedder.loaded`) builds nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from remindful.config import Settings
from remindful.embed.base import Embedder
from remindful.engine.backend import CatalogBackend

log = logging.getLogger("remindful")


class LazyEmbedder:
    """The embedder of one store, built by :meth:`get` on first use. Thread-safe."""

    def __init__(self, settings: Settings, given: Embedder | None, catalog: Callable[[], CatalogBackend]) -> None:
        """``given``: the model to use instead of the configured one; ``catalog``: the store's
        catalog now (a restore closes the store and reopens it)."""
        self._settings = settings
        self._given = given
        self._catalog = catalog
        self._lock = threading.Lock()
        #: The embedder, or None until :meth:`get` built it.
        self.current: Embedder | None = None

    @property
    def loaded(self) -> bool:
        """Whether :meth:`get` built the embedder."""
        return self.current is not None

    def get(self) -> Embedder:
        """The embedder, built now if it was not yet."""
        if self.current is None:
            with self._lock:
                if self.current is None:
                    from remindful.embed import CachedEmbedder, default_embedder

                    settings = self._settings.embeddings
                    inner = self._given or default_embedder(
                        model_dir=settings.model_dir,
                        backend=settings.backend,
                        quantize=settings.quantize,
                        batch_size=self._settings.performance.embedding_batch_size,
                    )
                    cache = StoredVectors(self._catalog)
                    self.current = CachedEmbedder(inner, lru_size=settings.cache_size, store=cache)
        return self.current


class StoredVectors:
    """The persistent embedding cache of a store: the vectors its memories already hold, by content hash.

    Nothing is written here: every vector is persisted with its memory, so a second table of the
    same vectors (which once doubled the catalog's size) is not needed. Texts embedded but never
    stored (search queries) live in the in-memory LRU only. Vectors are reused only for the model
    recorded as the store's (the first embedder that asked); the ``embedding_cache`` table of older
    stores is still read.
    """

    def __init__(self, catalog: Callable[[], CatalogBackend]) -> None:
        self._catalog = catalog
        self._models: dict[str, bool] = {}
        self._models_of: CatalogBackend | None = None  # the catalog ``_models`` was learnt from

    def _owns(self, catalog: CatalogBackend, model: str) -> bool:
        if catalog is not self._models_of:
            self._models, self._models_of = {}, catalog
        known = self._models.get(model)
        if known is None:
            recorded = catalog.claim_embedding_model(model)
            known = self._models[model] = recorded == model
            if not known:
                log.warning(
                    "this store's vectors were made by %s, the embedder is now %s: stored vectors are not reused",
                    recorded,
                    model,
                )
        return known

    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        catalog = self._catalog()
        found = catalog.vectors_by_hash(hashes) if self._owns(catalog, model) else {}
        rest = [h for h in hashes if h not in found]
        return {**found, **catalog.get_cached_embeddings(model, rest)} if rest else found

    def put_cached_embeddings(self, model: str, items: dict[str, np.ndarray]) -> None:
        """Nothing to do: the vectors are stored with their memories."""


def embed_query(embedder: Embedder, query: str) -> Any:
    """The query's vector: through the embedder's ``embed_query`` where it has one (cached in memory
    only, and leaving a core to the lexical queries that run meanwhile), else embedded as a text."""
    method = getattr(embedder, "embed_query", None)
    return method(query) if method is not None else embedder.embed([query])[0]


__all__ = ["LazyEmbedder", "StoredVectors", "embed_query"]
