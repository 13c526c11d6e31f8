"""Exact dense scoring for the mirror: what a search asks while the vector index is not open (it
opens in the background), is unusable, or this process reloads its copy of it.

:class:`ExactScorer` keeps the catalog's vectors in memory (:class:`~remindful.engine.flat.FlatVectors`,
made when first needed), scores a store too large to copy straight from the catalog (a part at a
time), and frees the copy once the index has served searches alone for ``FLAT_IDLE_S``.

:class:`ScopeVectors` keeps the vectors of one small scope (a project) in memory, int8 as the
catalog stores them: a search restricted to a scope too small a share of the store for the index
to find its rows scores them all exactly, and reading them from the catalog for every search cost
a 20,000-row scope of a 1,000,000-memory store 178 ms a search (its rows are spread over the whole
file). The copy reads only rows stored since (rowid above the last one read) and vectors that
arrived since (embedded after their commit). It is read afresh when the audit log grew (what may
change a row already read is audited: an update's new vector, a move to another scope, an import,
a clear) or when the scope's kept count is not the rows it holds (deletes), and dropped when the
store is replaced. A local catalog only (the SQL is SQLite's).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import numpy as np

from remindful.engine import vectors as stored_vectors
from remindful.engine.backend import CatalogBackend
from remindful.engine.flat import FlatVectors
from remindful.engine.retrieval.search import merge_dense, top_k_exact
from remindful.engine.sqlfilter import SqlFilter, build_filter
from remindful.model import MemoryType

#: A copy kept without a count (:meth:`ScopedScorer.query` ``counted=False``) reads again the
#: rows this many rowids below the last it read, for one committed late (see ``ScopeVectors._read``).
LATE_ROWIDS = 1000
#: The copy of the vectors that exact scoring keeps is freed once the index has served searches
#: alone this long.
FLAT_IDLE_S = 60.0
#: A store too large to copy is scored from the catalog this many rowids at a time.
PART_ROWIDS = 50_000
#: Scopes whose vectors are kept (the most recently searched), and the most rows kept for one.
SCOPES_KEPT = 4
SCOPE_MAX_ROWS = 100_000
_TYPES = [t.value for t in MemoryType]


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
        return self._in_parts(types, vector, k)

    def _in_parts(self, types: Sequence[MemoryType], vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """:meth:`query` of a store too large to copy, read from the catalog ``PART_ROWIDS`` rowids
        at a time: one part's vectors in memory, not all of them (1,000,000 as float32: 1.5 GB)."""
        flt = build_filter(types=[t.value for t in types])
        _, top = self._catalog.change_marks()
        best: list[tuple[str, float]] = []
        for start in range(0, top, PART_ROWIDS):
            part = SqlFilter("rowid > ? AND rowid <= ?", (start, start + PART_ROWIDS))
            ids, matrix = self._catalog.filtered_embeddings(flt & part)
            if matrix is not None:
                best = merge_dense(best, top_k_exact(vector, ids, matrix, k), k=k)
        return best

    def drop_if_idle(self) -> None:
        """The index serves searches: free the copy of the vectors if no search needed it lately."""
        flat = self._flat
        if flat is not None and flat.idle_s() > FLAT_IDLE_S:
            self._flat = None

    def forget(self) -> None:
        """The store's content was replaced: the copy is read afresh when next needed."""
        self._flat = None


class ScopeVectors:
    """The vectors of one scope's rows, int8, in memory (see the module docstring). Not
    thread-safe: :class:`ScopedScorer` serialises its use."""

    def __init__(self, scope: str | None) -> None:
        self.scope = scope
        self._filter = build_filter(scopes=[scope])
        self._clear(-1)

    def _clear(self, generation: int) -> None:
        self.generation = generation
        self.top = 0  # the last rowid read
        self.ids: list[str] = []
        self._types: list[int] = []
        self._codes = np.zeros((0, 0), dtype=np.int8)
        self._scales = np.zeros(0, dtype=np.float32)
        self._missing: dict[int, int] = {}  # rowid -> position of rows read without a vector
        self._type_array = np.zeros(0, dtype=np.uint8)
        self._newest = -1  # the store's newest rowid at the last read
        self._last: tuple[bytes, np.ndarray] | None = None  # the last query's key and scores
        self._read_rowids: set[int] = set()  # (uncounted copies: the rowids read, see _read)

    def refresh(self, catalog: CatalogBackend, generation: int, newest: int, count: int | None) -> None:
        """Bring the copy up to the catalog: ``generation`` is the audit log's newest entry now,
        ``newest`` the newest memory's rowid, ``count`` the scope's kept count (None: not known;
        the copy follows the rowids and the audit log alone, and reads again the rows a little
        below the last it read: one committed late has an older rowid, and is read with the
        next row stored after it)."""
        if generation != self.generation:
            self._clear(generation)
        # No row stored since the last read (the newest rowid is the same: a row given a deleted
        # one's rowid changes some scope's count) and the count agrees: nothing to read.
        if newest == self._newest and count in (None, len(self.ids)) and not self._missing:
            return
        self._read(catalog, late=LATE_ROWIDS if count is None else 0)
        if count is not None and len(self.ids) != count:  # rows deleted or moved since: read afresh
            self._clear(generation)
            self._read(catalog)
        self._newest = newest

    def _read(self, catalog: CatalogBackend, *, late: int = 0) -> None:
        """Read the rows past the last one read; ``late``: and those up to that many rowids below
        it not read yet (a server's writers commit rowids out of order: one taken before the
        newest read may commit after it)."""
        flt = self._filter
        rows = catalog.read(
            f"SELECT rowid, id, type, embedding FROM memories WHERE {flt.sql} AND rowid > ? ORDER BY rowid",
            [*flt.params, max(0, self.top - late) if late else self.top],
        )
        if late:
            rows = [r for r in rows if int(r[0]) not in self._read_rowids]
            self._read_rowids.update(int(r[0]) for r in rows)
        if self._missing:
            arrived = catalog.read_in(
                "SELECT rowid, embedding FROM memories WHERE rowid IN ({marks}) AND embedding IS NOT NULL",
                list(self._missing),
            )
            for rowid, blob in arrived:
                self._put(self._missing.pop(rowid), blob)
                self._last = None
        if not rows:
            return
        self._last = None
        start = len(self.ids)
        blobs = [r[3] for r in rows]
        dimension = next((stored_vectors.dimension(b) for b in blobs if b is not None), self._codes.shape[1])
        codes = np.zeros((start + len(rows), dimension), dtype=np.int8)
        scales = np.zeros(start + len(rows), dtype=np.float32)
        if start and self._codes.shape[1] == dimension:
            codes[:start], scales[:start] = self._codes, self._scales
        self._codes, self._scales = codes, scales
        alike: list[int] = []  # positions of the int8 vectors of this dimension: copied at once
        for n, (rowid, mid, type_value, blob) in enumerate(rows):
            self.ids.append(mid)
            self._types.append(_TYPES.index(type_value) if type_value in _TYPES else 255)
            if blob is None:
                self._missing[rowid] = start + n
            elif len(blob) == dimension + 5 and stored_vectors.is_quantised(blob):
                alike.append(n)
            else:
                self._put(start + n, blob)
        if alike:  # 20,000 rows one by one: 0.13 s of a scope's first search at 1,000,000 memories
            at = np.asarray(alike, dtype=np.int64) + start
            self._codes[at], self._scales[at] = stored_vectors.unpack([rows[n][3] for n in alike])
        self.top = max(self.top, int(rows[-1][0]))
        self._type_array = np.asarray(self._types, dtype=np.uint8)

    def _put(self, position: int, blob: bytes) -> None:
        if not stored_vectors.is_quantised(blob):
            blob = stored_vectors.encode(stored_vectors.decode(blob)) or blob
        if not self._codes.shape[1] and stored_vectors.is_quantised(blob):  # the first vector read
            self._codes = np.zeros((len(self._scales), len(blob) - 5), dtype=np.int8)
        if stored_vectors.is_quantised(blob) and len(blob) - 5 == self._codes.shape[1]:
            self._scales[position] = np.frombuffer(blob, dtype="<f4", count=1, offset=1)[0]
            self._codes[position] = np.frombuffer(blob, dtype=np.int8, offset=5)
        else:  # not comparable: never a candidate
            self._scales[position] = 0.0

    def scores(self, types: Sequence[str], vector: np.ndarray) -> np.ndarray:
        """Every row's cosine with ``vector`` (-inf for rows of other types or without a vector)."""
        n = len(self.ids)
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if not n or self._codes.shape[1] != len(query):
            return np.full(n, -np.inf, dtype=np.float32)
        # A search asks again with the same vector as its ranking looks further: scored once.
        key = query.tobytes() + ",".join(sorted(types)).encode()
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        out = stored_vectors.cosines(self._codes, query) * self._scales
        wanted = np.isin(self._type_array, [_TYPES.index(t) for t in types if t in _TYPES])
        out[~wanted | (self._scales == 0.0)] = -np.inf
        if self._missing:
            out[list(self._missing.values())] = -np.inf
        self._last = (key, out)
        return out


class ScopedScorer:
    """The ``k`` memories of some scopes nearest to a vector, scored exactly over copies of their
    vectors kept in memory (:class:`ScopeVectors`, the ``SCOPES_KEPT`` most recently searched).
    Thread-safe."""

    def __init__(self, catalog: CatalogBackend) -> None:
        self._catalog = catalog
        self._lock = threading.Lock()
        self._scopes: OrderedDict[str | None, ScopeVectors] = OrderedDict()

    def query(
        self,
        scopes: Sequence[str | None],
        counts: Mapping[str | None, int],
        types: Sequence[MemoryType],
        vector: np.ndarray,
        k: int,
        *,
        counted: bool = True,
    ) -> list[tuple[str, float]] | None:
        """The ``k`` rows of ``scopes`` and ``types`` nearest to ``vector``, best first, as (id,
        cosine); None when a scope is too large to keep (``counts``: the catalog's kept counts).
        ``counted=False``: no count is known (the rows this catalog's person sees of a scope whose
        count is everyone's): the copy is kept whatever its size, and follows the newest rowid and
        the audit log alone."""
        wanted = list(dict.fromkeys(scopes))
        if counted and any(counts.get(s, 0) > SCOPE_MAX_ROWS for s in wanted):
            return None
        generation, newest = self._catalog.change_marks()
        found: list[tuple[str, float]] = []
        with self._lock:
            for scope in wanted:
                held = self._scopes.pop(scope, None) or ScopeVectors(scope)
                self._scopes[scope] = held
                while len(self._scopes) > SCOPES_KEPT:
                    self._scopes.popitem(last=False)
                held.refresh(self._catalog, generation, newest, counts.get(scope, 0) if counted else None)
                scores = held.scores([t.value for t in types], vector)
                top = np.argpartition(-scores, k)[:k] if len(scores) > k else np.arange(len(scores))
                found += [(held.ids[i], float(scores[i])) for i in top.tolist() if np.isfinite(scores[i])]
        return sorted(found, key=lambda item: -item[1])[:k]

    def preload(self, scopes: Sequence[str | None], counts: Mapping[str | None, int]) -> list[str | None]:
        """Read the copies of ``scopes`` (most wanted first; ``counts``: the catalog's kept count
        of each) before a search asks, while fewer than ``SCOPES_KEPT`` are kept: a scope's first
        search otherwise reads its rows itself (20,000 spread over a catalog of 1,000,000: 0.3 s,
        the small project's p99). A copy a search made meanwhile is left as it is, and searched
        scopes stay ahead of preloaded ones. Returns the scopes read."""
        read: list[str | None] = []
        for scope in scopes:
            if counts.get(scope, 0) > SCOPE_MAX_ROWS:
                continue
            with self._lock:
                if len(self._scopes) >= SCOPES_KEPT:
                    break
                if scope in self._scopes:
                    continue
                generation, newest = self._catalog.change_marks()
                held = ScopeVectors(scope)
                held.refresh(self._catalog, generation, newest, counts.get(scope, 0))
                self._scopes[scope] = held
                self._scopes.move_to_end(scope, last=False)  # the first a search's copy pushes out
            read.append(scope)
        return read

    def forget(self) -> None:
        """The store's content was replaced: every copy is read afresh when next needed."""
        with self._lock:
            self._scopes.clear()


__all__ = ["FLAT_IDLE_S", "SCOPES_KEPT", "SCOPE_MAX_ROWS", "ExactScorer", "ScopeVectors", "ScopedScorer"]
