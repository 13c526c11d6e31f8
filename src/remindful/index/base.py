"""The vector index protocol: named collections of unit vectors with flat scalar metadata.

The catalog is the source of truth; an index only accelerates dense search and can be rebuilt
from the catalog at any time (``remindful reindex``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

#: A metadata value an index can hold: no None, no nesting.
Scalar = str | int | float | bool


@runtime_checkable
class VectorIndex(Protocol):
    """Dense nearest-neighbour search over collections, cosine space.

    Collections are created on first use. ``upsert`` replaces a vector with the same id.
    ``query`` returns ``(id, similarity)`` pairs best first, similarity = 1 - cosine distance,
    at most ``k`` of them. Filtering is the catalog's job (:mod:`remindful.engine.sqlfilter`): the
    store checks every hit against it.
    Writes are durable when the call returns. Implementations are thread-safe.
    ``remote``: queries travel to a server (a search then sends its collections' queries at once).
    """

    remote: bool

    def upsert(
        self,
        collection: str,
        ids: Sequence[str],
        embeddings: np.ndarray,
        metadatas: Sequence[Mapping[str, Scalar]],
    ) -> None: ...

    def delete(self, collection: str, ids: Sequence[str]) -> None: ...

    def query(self, collection: str, embedding: np.ndarray, k: int) -> list[tuple[str, float]]: ...

    def count(self, collection: str) -> int: ...

    def ids(self, collection: str) -> list[str]: ...

    def reset(self) -> None:
        """Drop every collection and its data."""
        ...

    def close(self) -> None: ...
