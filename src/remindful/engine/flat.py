"""The catalog's vectors held in this process's memory and scored exactly: what a search asks
while the vector index is not open yet (it opens in the background) or this process reloads its
copy of it.

Scoring every vector exactly is what the index approximates, so results do not suffer; reading
every vector from the catalog for each search does: thousands of rows a search, which on a busy
machine cost a search hundreds of milliseconds. So the vectors are read once, and each search
then reads only what changed since:

- rows stored since (rowid above the last one read), one indexed read;
- vectors that arrived since for rows read without one (embedded in the background after their
  commit), looked for at most every ``RECHECK_S`` seconds: until then such a row is scored by the
  search's own look at the rows not yet indexed (where it is, until it is indexed);
- deletions are not read: a deleted row found here is dropped where every dense candidate is
  checked against the catalog, and once the rows held outnumber the catalog's by
  ``STALE_SHARE``, they are read afresh; so are they when the newest row read is gone (SQLite
  gives the next row its rowid).

Not seen: a memory whose content another process updated since it was read keeps its old vector
here until the index opens (then this copy is dropped). At most ``MAX_ROWS`` rows are held; a
larger store is scored from the catalog directly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence

import numpy as np

from remindful.engine import vectors as stored_vectors
from remindful.engine.backend import CatalogBackend
from remindful.engine.retrieval.search import top_k_exact

#: The most rows held (1.5 KB each with 384-d vectors): above it, nothing is held.
MAX_ROWS = 50_000
#: How often vectors that arrived since for rows read without one are looked for.
RECHECK_S = 1.0
#: The share of rows held that may be gone from the catalog before all are read afresh.
STALE_SHARE = 0.05


class FlatVectors:
    """Exact nearest neighbours over the catalog's vectors, kept in memory (see the module
    docstring). Thread-safe."""

    def __init__(self, catalog: CatalogBackend) -> None:
        self._catalog = catalog
        self._lock = threading.Lock()
        self._used_at = time.monotonic()
        self._clear()

    def idle_s(self) -> float:
        """Seconds since the last query."""
        return time.monotonic() - self._used_at

    def _clear(self) -> None:
        self._top = 0  # the last rowid read
        self._ids: list[str] = []
        self._types: list[str] = []
        self._matrix: np.ndarray | None = None  # one row per id (zeros while its vector is missing), grown by doubling
        self._missing: dict[int, int] = {}  # rowid -> position, for rows read without a vector
        self._checked_at = 0.0
        self._positions: dict[str, list[int]] = {}  # per type, the positions with a vector
        self._arrays: dict[str, np.ndarray] = {}  # the same as arrays, made when asked

    def query(
        self, types: Sequence[str], counts: Mapping[str, int], vector: np.ndarray, k: int
    ) -> list[tuple[str, float]] | None:
        """The ``k`` rows of ``types`` nearest to ``vector``, best first, as (id, cosine); None
        if the store holds more than ``MAX_ROWS`` rows (``counts``: the catalog's count of each
        type)."""
        self._used_at = time.monotonic()
        with self._lock:
            if sum(counts.values()) > MAX_ROWS:
                self._clear()  # grew past it: free the memory
                return None
            self._refresh(counts)
            chosen = [self._array(t) for t in types if self._positions.get(t)]
            if not chosen or self._matrix is None:
                return []
            positions = np.concatenate(chosen) if len(chosen) > 1 else chosen[0]
            ids = self._ids
            return top_k_exact(vector, [ids[p] for p in positions.tolist()], self._matrix[positions], k)

    def _array(self, type_value: str) -> np.ndarray:
        array = self._arrays.get(type_value)
        if array is None:
            array = self._arrays[type_value] = np.asarray(self._positions[type_value], dtype=np.int64)
        return array

    def _refresh(self, counts: Mapping[str, int]) -> None:
        if len(self._ids) - sum(counts.values()) > STALE_SHARE * max(len(self._ids), 1):
            self._clear()  # many deleted since they were read
        elif self._ids and self._catalog.read("SELECT id FROM memories WHERE rowid = ?", (self._top,)) != [
            (self._ids[-1],)
        ]:
            self._clear()  # the newest row read is gone: its rowid may be another row's now
        self._read_new()
        if self._missing and time.monotonic() - self._checked_at >= RECHECK_S:
            self._read_arrived()

    def _read_new(self) -> None:
        rows = self._catalog.read(
            "SELECT rowid, id, type, embedding FROM memories WHERE rowid > ? ORDER BY rowid", (self._top,)
        )
        for rowid, mid, type_value, blob in rows:
            position = len(self._ids)
            self._ids.append(mid)
            self._types.append(type_value)
            self._top = rowid
            if blob is None:
                self._missing[rowid] = position
            else:
                self._put(position, blob)

    def _read_arrived(self) -> None:
        self._checked_at = time.monotonic()
        rows = self._catalog.read_in(
            "SELECT rowid, embedding FROM memories WHERE rowid IN ({marks}) AND embedding IS NOT NULL",
            list(self._missing),
        )
        for rowid, blob in rows:
            self._put(self._missing.pop(rowid), blob)

    def _put(self, position: int, blob: bytes) -> None:
        vector = stored_vectors.decode(blob)
        if self._matrix is None:
            self._matrix = np.zeros((max(1024, position + 1), len(vector)), dtype=np.float32)
        if position >= len(self._matrix):
            grown = np.zeros((max(2 * len(self._matrix), position + 1), self._matrix.shape[1]), dtype=np.float32)
            grown[: len(self._matrix)] = self._matrix
            self._matrix = grown
        self._matrix[position] = vector
        type_value = self._types[position]
        self._positions.setdefault(type_value, []).append(position)
        self._arrays.pop(type_value, None)


__all__ = ["MAX_ROWS", "FlatVectors"]
