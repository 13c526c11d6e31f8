"""``InMemoryIndex``: exact brute-force cosine search in numpy, the shipped fake of ``VectorIndex``.

It is exact where Chroma's HNSW is approximate, keeps nothing on disk, and checks its arguments
as the Chroma backends do (:mod:`remindful.index.checks`). Use it in tests and for small, throwaway stores.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import numpy as np

from remindful.index.base import Scalar
from remindful.index.checks import check_collection_name, check_query, check_upsert

__all__ = ["InMemoryIndex"]


class _Collection:
    """Unit vectors in a growable array; row ``i`` belongs to ``ids[i]``; deletes move the last row in."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.ids: list[str] = []
        self.rows: dict[str, int] = {}
        self.metadatas: list[dict[str, Scalar]] = []
        self.vectors = np.zeros((16, dim), dtype=np.float32)

    def upsert(self, ids: list[str], vectors: np.ndarray, metadatas: list[dict[str, Scalar]]) -> None:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        # a zero vector has no direction: it stays zero and scores 0 against everything
        unit = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
        for i, id_ in enumerate(ids):
            row = self.rows.get(id_)
            if row is None:
                row = len(self.ids)
                if row == self.vectors.shape[0]:
                    grown = np.zeros((row * 2, self.dim), dtype=np.float32)
                    grown[:row] = self.vectors
                    self.vectors = grown
                self.ids.append(id_)
                self.metadatas.append(metadatas[i])
                self.rows[id_] = row
            else:
                self.metadatas[row] = metadatas[i]
            self.vectors[row] = unit[i]

    def delete(self, ids: Sequence[str]) -> None:
        for id_ in ids:
            row = self.rows.pop(id_, None)
            if row is None:
                continue
            last = len(self.ids) - 1
            if row != last:
                moved = self.ids[last]
                self.ids[row], self.metadatas[row] = moved, self.metadatas[last]
                self.vectors[row] = self.vectors[last]
                self.rows[moved] = row
            self.ids.pop()
            self.metadatas.pop()


class InMemoryIndex:
    """A ``VectorIndex`` held in process memory: exact, thread-safe (one lock), lost on exit.

    Contract as in :class:`~remindful.index.base.VectorIndex`, plus the argument checks shared with
    the Chroma backends: invalid collection names, ragged or non-finite input, duplicate ids in one
    call, a vector of the wrong dimension and invalid filters raise ``ValueError``. ``close()``
    keeps the data (there is nothing to release); ``reset()`` drops it.
    """

    remote = False

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._collections: dict[str, _Collection] = {}

    def upsert(
        self,
        collection: str,
        ids: Sequence[str],
        embeddings: np.ndarray,
        metadatas: Sequence[Mapping[str, Scalar]],
    ) -> None:
        check_collection_name(collection)
        ids_, vectors, metas = check_upsert(ids, embeddings, metadatas)
        if not ids_:
            return
        with self._lock:
            col = self._collections.get(collection)
            if col is None:
                col = self._collections[collection] = _Collection(vectors.shape[1])
            if vectors.shape[1] != col.dim:
                raise ValueError(
                    f"Collection {collection!r} holds {col.dim}-d vectors, got {vectors.shape[1]}-d embeddings"
                )
            col.upsert(ids_, vectors, metas)

    def delete(self, collection: str, ids: Sequence[str]) -> None:
        check_collection_name(collection)
        with self._lock:
            col = self._collections.get(collection)
            if col is not None:
                col.delete(list(ids))

    def query(self, collection: str, embedding: np.ndarray, k: int) -> list[tuple[str, float]]:
        check_collection_name(collection)
        vector = check_query(embedding, k)
        with self._lock:
            col = self._collections.get(collection)
            if col is None or not col.ids:
                return []
            if vector.shape[0] != col.dim:
                raise ValueError(f"Collection {collection!r} holds {col.dim}-d vectors, got {vector.shape[0]}-d")
            norm = float(np.linalg.norm(vector))
            unit = vector / norm if norm > 0 else vector
            sims = col.vectors[: len(col.ids)] @ unit
            candidates = np.arange(len(col.ids))
            if candidates.size > k:
                top = np.argpartition(-sims[candidates], k - 1)[:k]
                candidates = candidates[top]
            order = candidates[np.argsort(-sims[candidates], kind="stable")]
            return [(col.ids[i], float(np.clip(sims[i], -1.0, 1.0))) for i in order]

    def count(self, collection: str) -> int:
        check_collection_name(collection)
        with self._lock:
            col = self._collections.get(collection)
            return 0 if col is None else len(col.ids)

    def ids(self, collection: str) -> list[str]:
        """Every id in the collection, in no particular order."""
        check_collection_name(collection)
        with self._lock:
            col = self._collections.get(collection)
            return [] if col is None else list(col.ids)

    def reset(self) -> None:
        with self._lock:
            self._collections.clear()

    def close(self) -> None:
        """Nothing to release: the data stays until ``reset()`` or garbage collection."""
