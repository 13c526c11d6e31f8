"""Dense candidates for a search: from the vector index when this process's copy of it is usable, else scored exactly.

A search never waits for the index (:class:`~remindful.engine.mirror.IndexMirror` opens it in the
background): until it is open, or while this process reloads its copy, the catalog's vectors are
scored exactly (:class:`~remindful.engine.exact.ExactScorer`); a store too large to copy in memory
answers its first searches from the compact snapshot of the index's vectors
(:mod:`~remindful.engine.index_snapshot`) while the index opens. A search restricted to small scopes
scores their rows from copies kept in memory (:class:`~remindful.engine.exact.ScopedScorer`), and so
are the private memories where the index holds none (a shared catalog's Chroma server). Hits of
deleted rows whose vectors are still queued for removal are skipped, and more asked for to make up.
A remote index gets a search's collection queries at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from remindful.engine import flat
from remindful.engine.backend import CatalogBackend
from remindful.engine.exact import SCOPES_KEPT, ExactScorer, ScopedScorer
from remindful.engine.index_deletes import IndexDeletes
from remindful.engine.index_locks import ViewLock
from remindful.engine.index_snapshot import VectorSnapshot
from remindful.engine.projects import PROJECT_PREFIX
from remindful.engine.scopes import USER
from remindful.errors import RemindfulError
from remindful.index.base import VectorIndex
from remindful.model import MemoryType

log = logging.getLogger("remindful")

#: While deletions are queued, a dense query asks the index for up to this many times ``k`` more
#: hits, to make up for the deleted ones it skips.
OVERFETCH = 3
#: Collections of up to this many rows are searched exhaustively: asked for every row, HNSW visits
#: every node it can reach (2-5 ms with chromadb 1.5 at 1,000-2,000 rows, against ~1 ms for 100).
#: At its usual candidate list (ef = 100) HNSW misses outliers among many near-identical vectors:
#: one distinct memory (cosine 0.80 with the query) among 1,100 near-identical notes was not found
#: in 5 of 12 rebuilt indexes, and needed ef = 400 in one.
EXHAUSTIVE_BELOW = 2000
#: A large store's projects under this share of it have their vectors copied once its index opens
#: (:meth:`DenseQueries.preload_scopes`): a search restricted to one scores it exactly when its
#: share is too small for the index's candidates to hold enough of it (retrieval.search: under
#: 2.5 % for 20 candidates).
PRELOAD_SHARE = 0.05

DenseQuery = Callable[[np.ndarray, int], list[tuple[str, float]]]
ScopedQuery = Callable[[np.ndarray, int], list[tuple[str, float]] | None]


class DenseSource(NamedTuple):
    """What a search asks for dense candidates: ``query(vector, k)``, and the rowid above which
    rows may be missing from what it asks (the search scores those exactly from the catalog,
    with the rows not yet indexed). ``scoped(vector, k)``: the searched scopes' rows scored
    exactly from copies kept in memory (None: no scopes given, or one too large to keep)."""

    query: DenseQuery
    pending_after: int
    scoped: ScopedQuery | None = None


class IndexHandle(NamedTuple):
    """How dense queries reach the mirror's index without waiting for it. ``opening()``: it is
    still to be opened (or opened again after a failure); ``searchable()``: the index if it is
    usable now (else its opening is asked for, in the background); ``opened()``: the index once
    that opening ended, within the search's time budget; ``refresh(reload=False)``: have the
    background viewer refresh this process's copy (``reload``: even if no one wrote);
    ``pending_after()``: the rowid above which the copy may lack rows; ``newest()``: the catalog's
    largest rowid; ``generation()``: the index lock's count of writes."""

    opening: Callable[[], bool]
    searchable: Callable[[], VectorIndex | None]
    opened: Callable[[], VectorIndex | None]
    refresh: Callable[..., None]
    pending_after: Callable[[], int]
    newest: Callable[[], int]
    generation: Callable[[], int]


class DenseQueries:
    """The dense side of a search on one open catalog and its index (see the module docstring)."""

    def __init__(
        self,
        catalog: CatalogBackend,
        index: IndexHandle,
        *,
        copy: ViewLock,
        deletes: IndexDeletes,
        snapshot: VectorSnapshot | None,
    ) -> None:
        self.catalog = catalog
        self._index = index
        self._copy = copy
        self._deletes = deletes
        self._snapshot = snapshot
        self.exact = ExactScorer(catalog)  # scores while the index is not usable
        self.scoped = ScopedScorer(catalog)  # small scopes, scored exactly
        # The private memories, where the index holds none of them: scored exactly.
        self.private = None if catalog.indexes_private else ScopedScorer(catalog)
        self._pool_lock = threading.Lock()
        self._queries: ThreadPoolExecutor | None = None

    def _pool(self) -> ThreadPoolExecutor:
        """The threads that send a search's collection queries to a remote index at once."""
        with self._pool_lock:
            if self._queries is None:
                self._queries = ThreadPoolExecutor(max_workers=len(MemoryType), thread_name_prefix="remindful-dense")
            return self._queries

    def close(self) -> None:
        """Stop the query threads (none run unless the index is remote)."""
        with self._pool_lock:
            queries, self._queries = self._queries, None
        if queries is not None:
            queries.shutdown(wait=True)

    def preload_scopes(self) -> list[str | None]:
        """Read the copies of a large local store's most recently active projects that a search
        would score exactly (a share under ``PRELOAD_SHARE`` of the store), before their first
        search does (:meth:`ScopedScorer.preload`). Returns the scopes read."""
        if self.catalog.path is None:  # a server catalog keeps no copies of its scopes
            return []
        counts = self.catalog.scope_counts()
        total = sum(counts.values())
        if total <= flat.MAX_ROWS:  # a small store's scope is read in milliseconds
            return []
        recent = self.catalog.read("SELECT key FROM projects ORDER BY last_seen DESC LIMIT ?", [4 * SCOPES_KEPT])
        scopes = [PROJECT_PREFIX + str(r[0]) for r in recent]
        return self.scoped.preload([s for s in scopes if 0 < counts.get(s, 0) <= total * PRELOAD_SHARE], counts)

    def forget(self) -> None:
        """The store was replaced: the copies of its vectors are read afresh when next needed."""
        self.exact.forget()
        self.scoped.forget()
        if self.private is not None:
            self.private.forget()

    def query(
        self,
        types: Sequence[MemoryType],
        counts: Mapping[str, int],
        scopes: Sequence[str | None] | None = None,
        scope_counts: Mapping[str | None, int] | None = None,
    ) -> DenseSource:
        """:meth:`source`, with ``scoped`` for a search restricted to ``scopes`` alone
        (``scope_counts``: the catalog's kept count of each)."""
        source = self.source(types, counts)
        if scopes is None or scope_counts is None or self.catalog.path is None:
            return source
        scoped = self.scoped

        def in_scopes(vector: np.ndarray, k: int) -> list[tuple[str, float]] | None:
            return scoped.query(scopes, scope_counts, types, vector, k)

        return source._replace(scoped=in_scopes)

    def source(self, types: Sequence[MemoryType], counts: Mapping[str, int]) -> DenseSource:
        """What a search asks for dense candidates over ``types`` (``counts``: the catalog's count
        of each type): the index's collections if it is open and usable, else (while it opens in
        the background, or for good if it is damaged) the catalog's vectors scored exactly
        (:class:`~remindful.engine.flat.FlatVectors`). Never waits for the index, but for its
        opening in a store too large for this process to hold its vectors (``flat.MAX_ROWS``):
        each exact query would read every vector from the catalog then, which costs more than the
        opening (a fresh process's first search of 100,000 memories scored them in 8 s; the index
        opened in under 2). While this process reloads its copy, a query scores exactly too."""
        exact, handle = self.exact, self._index
        large = sum(counts.get(t.value, 0) for t in types) > flat.MAX_ROWS
        if large and handle.opening():
            scanned = self._from_snapshot(types, counts)
            if scanned is not None:
                return scanned
        index = handle.searchable()
        if index is None and large:
            index = handle.opened()
        if index is None:
            top = handle.newest()  # the copy reads every row up to here (at least) when asked
            return DenseSource(lambda vector, k: exact.query(types, counts, vector, k), top)
        exact.drop_if_idle()

        def one(memory_type: MemoryType, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
            n = counts.get(memory_type.value, 0)
            # A small collection is asked for all its rows: HNSW then visits every node it can
            # reach, not just the ones its usual candidate list (ef) gets to.
            want = max(k, n) if n <= EXHAUSTIVE_BELOW else k
            gone = self._deletes.skipped(memory_type.value)
            if not gone:
                return self._query_collection(index, memory_type, counts, vector, want)[:k]
            # Deleted, vectors not removed yet: skip them and ask for more to make up.
            want += min(len(gone), OVERFETCH * k)
            hits = self._query_collection(index, memory_type, counts, vector, want)
            return [(mid, score) for mid, score in hits if mid not in gone][:k]

        def run(vector: np.ndarray, k: int) -> list[tuple[str, float]]:
            with self._copy.shared() as usable:
                if not usable:
                    return exact.query(types, counts, vector, k)
                held = [t for t in types if counts.get(t.value, 0)]
                if index.remote and len(held) > 1:
                    # A server answers each collection in a round trip: ask them all at once.
                    parts = list(self._pool().map(lambda t: one(t, vector, k), held))
                else:
                    parts = [one(t, vector, k) for t in held]
            return self._with_private(parts, types, vector, k)

        return DenseSource(run, handle.pending_after())

    def _from_snapshot(self, types: Sequence[MemoryType], counts: Mapping[str, int]) -> DenseSource | None:
        """Dense candidates from the compact copy of the index's vectors, if it matches the index
        files now (rows above its floor, and rows not marked indexed, are scored from the catalog).
        The index is asked to open once the copy was scanned, not before: chromadb holds the GIL
        while it loads a graph (8 s for 1,000,000 vectors on a busy machine), which would stall the
        scan; a search that comes meanwhile waits for it."""
        snapshot = self._snapshot
        header = None if snapshot is None else snapshot.usable(self._index.generation())
        if snapshot is None or header is None:
            return None

        def run(vector: np.ndarray, k: int) -> list[tuple[str, float]]:
            try:
                return self._with_private([snapshot.query(header, types, vector, k)], types, vector, k)
            except (OSError, ValueError) as exc:  # replaced meanwhile: the catalog's rows then
                log.info("could not scan %s (%s); scoring from the catalog", snapshot.path, exc)
                return self.exact.query(types, counts, vector, k)
            finally:
                self._index.refresh()

        return DenseSource(run, header.floor)

    def _with_private(
        self, parts: Sequence[list[tuple[str, float]]], types: Sequence[MemoryType], vector: np.ndarray, k: int
    ) -> list[tuple[str, float]]:
        """The best ``k`` of the index's ``parts``, with the private memories where the index holds
        none of them (``CatalogBackend.indexes_private``): those this catalog's person sees (under
        row-level security, their own), scored exactly from a copy of their vectors."""
        best: dict[str, float] = {}
        if self.private is not None:
            parts = [*parts, self.private.query([USER], {}, types, vector, k, counted=False) or []]
        for part in parts:
            for mid, score in part:
                if score > best.get(mid, -np.inf):  # (a private vector an older version indexed)
                    best[mid] = score
        return sorted(best.items(), key=lambda item: -item[1])[:k]

    def _query_collection(
        self, index: VectorIndex, memory_type: MemoryType, counts: Mapping[str, int], vector: np.ndarray, k: int
    ) -> list[tuple[str, float]]:
        """One collection's nearest neighbours. If the index fails (for example a collection another
        process created after this one loaded its view: "Nothing found on disk"), this type is
        scored exactly, and the background viewer reloads the view."""
        try:
            return index.query(memory_type.collection, vector, k)
        except RemindfulError as exc:
            log.info(
                "vector index query of %s failed (%s); scoring it exactly and reloading the index",
                memory_type.collection,
                exc,
            )
        self._index.refresh(reload=True)
        return self.exact.query([memory_type], counts, vector, k)


__all__ = ["EXHAUSTIVE_BELOW", "OVERFETCH", "DenseQueries", "DenseSource", "IndexHandle"]
