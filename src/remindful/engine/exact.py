"""Exact dense scoring for the mirror: what a search asks while the vector index is not open (it
opens in the background), is unusable, or this process reloads its copy of it.

:class:`ExactScorer` keeps the catalog's vectors in memory (:class:`~remindful.engine.flat.FlatVectors`,
made when first needed), scores a store too large to copy straight from the catalog, and frees the
copy once the index has served searches alone for ``FLAT_IDLE_S``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import numpy as np

from remindful.engine.backend import CatalogBackend
from remindful.engine.flat import FlatVectors
from remindful.engine.retrieval.search import top_k_exact
from remindful.engine.sqlfilter import build_filter
from remindful.model import MemoryType

#: The copy of the vectors that exact scoring keeps is freed once the index has served searches
#: alone this long.
FLAT_IDLE_S = 60.0


class ExactScorer:
    """The ``k`` memories nearest to a vector, scored exactly over the catalog's vectors. Thread-safe."""

    def __init__(self, catalog: CatalogBackend) -> None:
        self._catalog = catalog
        self._lock = threading.Lock()
        self._flat: FlatVectors | None = None

    @property
    def holds_copy(self) -> bool:
        """Whether the vectors are copied in memory now."""
        return self._flat is not None

    def query(
        self, types: Sequence[MemoryType], counts: Mapping[str, int], vector: np.ndarray, k: int
    ) -> list[tuple[str, float]]:
        """The ``k`` memories of ``types`` nearest to ``vector`` (``counts``: the catalog's count of
        each type): from this process's copy of the vectors, or (a store too large to copy) from
        the catalog."""
        flat = self._flat
        if flat is None:
            with self._lock:
                flat = self._flat = self._flat or FlatVectors(self._catalog)
        found = flat.query([t.value for t in types], counts, vector, k)
        if found is not None:
            return found
        ids, matrix = self._catalog.filtered_embeddings(build_filter(types=[t.value for t in types]))
        return top_k_exact(vector, ids, matrix, k) if matrix is not None else []

    def drop_if_idle(self) -> None:
        """The index serves searches: free the copy of the vectors if no search needed it lately."""
        flat = self._flat
        if flat is not None and flat.idle_s() > FLAT_IDLE_S:
            self._flat = None

    def forget(self) -> None:
        """The store's content was replaced: the copy is read afresh when next needed."""
        self._flat = None


__all__ = ["FLAT_IDLE_S", "ExactScorer"]
