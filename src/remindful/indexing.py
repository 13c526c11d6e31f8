"""Keeping the vector index in step with the catalog (a part of :class:`remindful.storage.StoreState`).

The index opens on first use: its files are health-checked only after a crash (or when a quick
look finds damage), it is reconciled with the catalog (vectors of deleted rows dropped, missing
ones re-added) and then every row still marked un-indexed is indexed. New memories are indexed in
the background; until then, and for rows another process wrote since this one opened the index,
search scores them exactly from the catalog (:meth:`IndexMaintenance.pending_sql`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from remindful.background import BackgroundIndexer
from remindful.errors import CorruptionError, RemindfulError, StorageError
from remindful.filters import SqlFilter, build_filter, index_metadata
from remindful.index.base import VectorIndex
from remindful.model import MemoryType

if TYPE_CHECKING:
    from remindful.background import IndexHolders, IndexLock
    from remindful.catalog import Catalog, MemoryRow
    from remindful.config import Settings
    from remindful.embed.base import Embedder

log = logging.getLogger("remindful")

INDEX_BATCH = 1000
PENDING_REFRESH = 2000


class IndexMaintenance:
    """The vector-index half of StoreState; the attributes below are set by StoreState."""

    settings: Settings
    path: Any
    _given_index: VectorIndex | None
    _index: VectorIndex | None
    _index_opened: bool
    _index_error: str | None
    _index_rowid: int
    _spans: dict[str, tuple[int, int]]
    _init_lock: threading.RLock
    _index_lock: IndexLock
    _indexer: BackgroundIndexer | None
    _holders: IndexHolders

    @property
    def catalog(self) -> Catalog:
        raise NotImplementedError

    @property
    def embedder(self) -> Embedder:
        raise NotImplementedError

    def type_counts(self, *, max_age_s: float = 1.0) -> dict[str, int]:
        raise NotImplementedError

    def ready(self) -> Any:
        raise NotImplementedError

    @property
    def index(self) -> VectorIndex | None:
        """The vector index, or None while it is unusable (the reason is in ``index_status``)."""
        if not self._index_opened:
            with self._init_lock:
                if not self._index_opened:
                    self._open_index()
                    self._index_opened = True
        return self._index

    def _new_index(self) -> VectorIndex:
        if self._given_index is not None:
            return self._given_index
        chroma = self.settings.storage.chromadb
        if chroma.mode == "server":
            from remindful.index import ChromaServerIndex

            return ChromaServerIndex(chroma.host, chroma.port)
        from remindful.index import ChromaEmbeddedIndex

        return ChromaEmbeddedIndex(self.path / "chroma", hnsw=chroma.hnsw.model_dump())

    def _open_index(self) -> None:
        started = time.perf_counter()
        index = self._new_index()
        try:
            self._check_index_files(index)
            try:
                self._sync_index(index)
            except CorruptionError as exc:
                if exc.backup_path is not None or not hasattr(index, "check"):
                    raise
                index.close()
                index.check()  # back up the damaged files and describe the damage
                raise
        except CorruptionError as exc:
            self._index_error = str(exc)
            log.error(
                "Vector index unusable: %s (damaged files copied to %s). Search continues from the catalog; "
                "run `remindful reindex --reset` to rebuild the index.",
                exc,
                exc.backup_path,
            )
            return
        except StorageError as exc:
            self._index_error = str(exc)
            log.error("Vector index unavailable: %s. Search continues from the catalog.", exc)
            return
        self._index = index
        self._index_rowid = self._max_rowid()
        self._holders.hold()
        log.debug("vector index ready in %.0f ms", (time.perf_counter() - started) * 1000)

    def _check_index_files(self, index: VectorIndex) -> None:
        """Run the index's full health check (seconds: a child process opens every collection) only
        when it may have been damaged: a process holding it died, or a quick look at the files
        (no database connection, milliseconds) finds something wrong. Raises CorruptionError."""
        check = getattr(index, "check", None)
        if check is None:
            return
        crashed = self._holders.crashed()
        quick = getattr(index, "quick_check", None)
        problem = quick() if quick is not None else "no quick check available"
        if crashed or problem:
            log.info("checking the vector index files (%s)", f"process {crashed} died" if crashed else problem)
            check()

    def _sync_index(self, index: VectorIndex) -> None:
        """Make the index match the catalog: drop vectors of deleted rows, re-add missing ones."""
        catalog = self.catalog
        for memory_type in MemoryType:
            flt = build_filter(types=[memory_type.value]) & SqlFilter("indexed = 1")
            expected = catalog.count(flt)
            if index.count(memory_type.collection) == expected:
                continue
            in_index = set(index.ids(memory_type.collection))
            in_catalog = {r[0] for r in catalog.read(f"SELECT id FROM memories WHERE {flt.sql}", flt.params)}
            extra = sorted(in_index - in_catalog)
            if extra:
                with self._index_lock():
                    index.delete(memory_type.collection, extra)
            missing = sorted(in_catalog - in_index)
            catalog.mark_indexed(missing, value=False)
            log.info("index %s: removed %d stale, re-adding %d", memory_type.collection, len(extra), len(missing))
        self._index_pending(index)

    def _max_rowid(self) -> int:
        return int(self.catalog.read("SELECT coalesce(max(rowid), 0) FROM memories")[0][0])

    def pending_sql(self) -> str:
        """SQL (appended to a filter) selecting rows this process's index view may lack.

        When too many accumulate, the view is refreshed: they are upserted again (idempotent)."""
        # An upper bound (rowids only grow): counting rows would read the whole table.
        above = self._max_rowid() - self._index_rowid
        if above > PENDING_REFRESH and self._index is not None:
            top = self._max_rowid()
            with self._init_lock:
                for start in range(self._index_rowid, top, INDEX_BATCH):
                    rows = self.catalog.select_rows(
                        SqlFilter("rowid > ? AND rowid <= ? AND embedding IS NOT NULL", (start, start + INDEX_BATCH)),
                        limit=INDEX_BATCH,
                        order="rowid",
                    )
                    vectors = self.catalog.embeddings([r.id for r in rows])
                    for row in rows:
                        row.embedding = vectors[row.id]
                    if rows:
                        self._upsert(self._index, rows)
                self._index_rowid = top
        return f"AND (indexed = 0 OR rowid > {int(self._index_rowid)})"

    def _index_pending(self, index: VectorIndex, progress: Callable[[int], None] | None = None) -> int:
        done = 0
        while True:
            batch = self.catalog.unindexed(INDEX_BATCH)
            if not batch:
                return done
            missing = [row for row, vector in batch if vector is None]
            if missing:
                vectors = self.embedder.embed([row.content for row in missing])
                self.catalog.set_embeddings({row.id: v for row, v in zip(missing, vectors, strict=True)})
            rows = []
            for row, vector in batch:
                row.embedding = vector if vector is not None else self.catalog.embeddings([row.id])[row.id]
                rows.append(row)
            self._upsert(index, rows)
            done += len(rows)
            if progress:
                progress(len(rows))

    def _upsert(self, index: VectorIndex, rows: Sequence[MemoryRow], *, locked: bool = False) -> None:
        by_type: dict[str, list[MemoryRow]] = {}
        for row in rows:
            by_type.setdefault(row.type, []).append(row)
        with contextlib.nullcontext() if locked else self._index_lock():
            for type_value, group in by_type.items():
                index.upsert(
                    MemoryType(type_value).collection,
                    [r.id for r in group],
                    np.stack([np.asarray(r.embedding, dtype=np.float32) for r in group]),
                    [
                        index_metadata(
                            {
                                "session_id": r.session_id,
                                "source": r.source,
                                "memory_class": r.memory_class,
                                "created_at": r.created_at,
                            },
                            json.loads(r.metadata),
                        )
                        for r in group
                    ],
                )
        self.catalog.mark_indexed([r.id for r in rows])

    def index_rows(self, rows: Sequence[MemoryRow]) -> None:
        """Add rows to the vector index: in the background (``performance.async_indexing``) or now.
        Until then search scores them exactly; on failure they stay marked un-indexed and are
        indexed at the next open."""
        if self.settings.performance.async_indexing:
            if self._indexer is None:
                with self._init_lock:
                    if self._indexer is None:
                        self._indexer = BackgroundIndexer(self.index_ids)
            self._indexer.submit([r.id for r in rows])
        else:
            self.index_ids([r.id for r in rows])

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until memories stored so far are in the vector index; False on timeout."""
        return self._indexer.flush(timeout) if self._indexer is not None else True

    def index_ids(self, ids: list[str]) -> None:
        """Index the memories with these ids that are still un-indexed (read under the index lock,
        so a memory deleted meanwhile is not indexed again)."""
        index = self.index
        if index is None:
            return
        span = self._spans.pop(ids[0], None)
        try:
            with self._index_lock():
                found = self.catalog.get_rows(ids)
                vectors = self.catalog.embeddings([i for i in ids if i in found and not found[i].indexed])
                rows = [found[i] for i in ids if i in vectors]
                for row in rows:
                    row.embedding = vectors[row.id]
                if rows:
                    self._upsert(index, rows, locked=True)
        except RemindfulError as exc:
            log.warning(
                "stored %d memories but could not index them yet (%s); they will be indexed later", len(rows), exc
            )
            return
        if span is not None and span[0] == self._index_rowid:
            # Nobody else wrote in between: the view of the index is complete up to our rows.
            self._index_rowid = span[1]

    def dense_query(self, types: Sequence[MemoryType]) -> Callable[[np.ndarray, int], list[tuple[str, float]]] | None:
        """``query(vector, k)`` over the collections of ``types`` that hold anything, or None
        while the index is unusable."""
        index = self.index
        if index is None:
            return None
        counts = self.type_counts()

        def run(vector: np.ndarray, k: int) -> list[tuple[str, float]]:
            found: list[tuple[str, float]] = []
            for memory_type in types:
                if counts.get(memory_type.value, 0):
                    found += self._query_collection(index, memory_type, vector, k)
            return sorted(found, key=lambda item: -item[1])[:k]

        return run

    def _query_collection(
        self, index: VectorIndex, memory_type: MemoryType, vector: np.ndarray, k: int
    ) -> list[tuple[str, float]]:
        """One collection's nearest neighbours. If the index fails (for example a collection another
        process created after this one opened the store: "Nothing found on disk"), the client is
        closed so that the next use reopens it, and this type is scored exactly from the catalog."""
        try:
            return index.query(memory_type.collection, vector, k)
        except RemindfulError as exc:
            log.warning("vector index query of %s failed (%s); scoring from the catalog", memory_type.collection, exc)
            with contextlib.suppress(Exception):
                index.close()
            ids, matrix = self.catalog.filtered_embeddings(build_filter(types=[memory_type.value]))
            if matrix is None:
                return []
            scores = matrix @ vector
            order = np.argsort(-scores)[:k]
            return [(ids[i], float(scores[i])) for i in order]

    def index_status(self) -> dict[str, Any]:
        index = self.index
        return {
            "available": index is not None,
            "backend": type(index or self._given_index).__name__ if (index or self._given_index) else None,
            "error": self._index_error,
            "unindexed": self.catalog.count(SqlFilter("indexed = 0")),
        }

    def reindex(self, *, reset: bool, progress: Any = None) -> dict[str, int]:
        self.ready()
        with self._init_lock:
            index = self._index or self._new_index()
            with self._index_lock():
                if reset and hasattr(index, "reset_files"):
                    index.reset_files()
                else:
                    index.reset()
            self.catalog.write(lambda c: c.execute("UPDATE memories SET indexed = 0"), what="reindex")
            self._index_pending(index, progress)
            self._index, self._index_error, self._index_opened = index, None, True
            self._index_rowid = self._max_rowid()
        return {t.collection: index.count(t.collection) for t in MemoryType}
