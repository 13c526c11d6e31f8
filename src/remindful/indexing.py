"""Keeping the vector index in step with the catalog (a part of :class:`remindful.storage.StoreState`).

The index opens on first use: its files are health-checked only after a crash (or when a quick
look finds damage), it is reconciled with the catalog (vectors of deleted rows dropped, missing
ones re-added) and then every row still marked un-indexed is indexed. New memories are indexed in
the background; until then, and for rows another process wrote since this one opened the index,
search scores them exactly from the catalog (:meth:`IndexMaintenance.pending_after`).

Deleted memories' vectors go the other way: the catalog delete queues them (``index_deletes``, in
the same transaction) and :meth:`IndexMaintenance.after_delete` applies the queue at once for a
few, in the background for many (Chroma takes ~0.3 ms a vector, holding the GIL), after the
neighbours' session windows a large delete also left (:mod:`remindful.context`). Until then
search drops their hits: every index hit is checked against the catalog, and this process also
skips the ones it knows are queued, asking the index for more to make up. A crash leaves the
queue to the next open, which drains it in the background; nothing deleted can come back, since
the catalog no longer holds it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from remindful.background import DeleteFinisher
from remindful.errors import CorruptionError, RemindfulError, StorageError
from remindful.filters import SqlFilter, build_filter, index_metadata
from remindful.index.base import VectorIndex
from remindful.indexing_adds import IndexAdditions
from remindful.model import MemoryType

if TYPE_CHECKING:
    from remindful.background import IndexHolders, IndexLock
    from remindful.catalog import Catalog, MemoryRow
    from remindful.config import Settings

log = logging.getLogger("remindful")

INDEX_BATCH = 1000
PENDING_REFRESH = 2000
#: A delete of at most this many memories finishes before it returns: vectors (~0.1 s in Chroma)
#: and neighbours' session windows; a larger one leaves them to the :class:`DeleteFinisher`.
INLINE_DELETE = 256
#: Vectors (or window spots) per step in the background: ~0.1 s of GIL per Chroma delete call
#: with chromadb 1.5, which has a fixed cost of ~25 ms, so smaller chunks take longer in all.
FINISH_CHUNK = 256
#: While deletions are queued, a dense query asks the index for up to this many times ``k`` more
#: hits, to make up for the deleted ones it skips.
OVERFETCH = 3


class IndexMaintenance(IndexAdditions):
    """The vector-index half of StoreState; the attributes below are set by StoreState."""

    settings: Settings
    path: Any
    _given_index: VectorIndex | None
    _index: VectorIndex | None
    _index_opened: bool
    _index_error: str | None
    _index_rowid: int
    _init_lock: threading.RLock
    _index_lock: IndexLock
    _deleter: DeleteFinisher | None
    #: Ids (by type) whose vectors this process knows are queued for deletion.
    _unindexing: dict[str, set[str]]
    _holders: IndexHolders

    @property
    def catalog(self) -> Catalog:
        raise NotImplementedError

    def type_counts(self) -> dict[str, int]:
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
                queued = self._sync_index(index)
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
        if queued:  # left by a process that stopped (or crashed) before it drained them
            self._track_unindexing(queued)
            self._finisher().kick()
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

    def _sync_index(self, index: VectorIndex) -> list[tuple[str, str]]:
        """Make the index match the catalog: drop vectors of deleted rows, re-add missing ones.
        Queued deletions (``index_deletes``) are left to the background deleter: a count that
        differs only by them needs no comparison of ids. Returns them."""
        catalog = self.catalog
        # Vectors of deleted rows still queued for deletion: the index may hold them until drained.
        queued = catalog.read(
            "SELECT memory_id, type FROM index_deletes "
            "WHERE NOT EXISTS (SELECT 1 FROM memories WHERE memories.id = index_deletes.memory_id)"
        )
        waiting = Counter(t for _mid, t in queued)
        for memory_type in MemoryType:
            flt = build_filter(types=[memory_type.value]) & SqlFilter("indexed = 1")
            expected = catalog.count(flt)
            if index.count(memory_type.collection) in (expected, expected + waiting[memory_type.value]):
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
        return queued

    def _max_rowid(self) -> int:
        return int(self.catalog.read("SELECT coalesce(max(rowid), 0) FROM memories")[0][0])

    def pending_after(self) -> int:
        """The rowid above which this process's index view may lack rows (beside rows not marked indexed).

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
        return int(self._index_rowid)

    def _index_pending(self, index: VectorIndex, progress: Callable[[int], None] | None = None) -> int:
        done = 0
        while True:
            batch = self.catalog.unindexed(INDEX_BATCH)
            if not batch:
                return done
            fresh = self._embed_and_save([(row.id, row.content) for row, vector in batch if vector is None])
            rows = []
            for row, vector in batch:
                row.embedding = vector if vector is not None else fresh[row.id]
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

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the vector index reflects every store and delete so far; False on timeout."""
        return all(worker.flush(timeout) for worker in (self._indexer, self._deleter) if worker is not None)

    # -- deletions ------------------------------------------------------------------------------

    def after_delete(self, gone: Sequence[tuple[str, str]], *, later: bool) -> None:
        """After a catalog delete of ``gone`` (id, type), which queued their vectors (and, with
        ``later``, the mending of their neighbours' session windows): remove the vectors now, or
        (``later``) leave both to the background :class:`DeleteFinisher`. On an index error the
        vectors stay queued (and out of search results) until the next delete or open."""
        index = self.index
        if index is not None:
            self._track_unindexing(gone)
        if later:
            self._finisher().kick()
        elif index is not None:
            try:
                self._unindex(index, gone)
            except RemindfulError as exc:
                log.warning("could not remove %d vectors from the index yet (%s)", len(gone), exc)

    def finish_step(self, limit: int) -> int:
        """One step of what large deletes left: mend the session windows around up to ``limit``
        deletion spots or, when none are left, remove up to ``limit`` queued vectors. Returns how
        many were handled (0: nothing left)."""
        return self.catalog.mend_windows(limit) or self.drain_index_deletes(limit)

    def drain_index_deletes(self, limit: int = FINISH_CHUNK) -> int:
        """Apply up to ``limit`` queued vector deletions, oldest first; returns how many were
        handled (0: none left, or no usable index)."""
        index = self._index
        if index is None:
            return 0
        pairs = self.catalog.pending_index_deletes(limit)
        if pairs:
            self._unindex(index, pairs)
        return len(pairs)

    def _unindex(self, index: VectorIndex, pairs: Sequence[tuple[str, str]]) -> None:
        with self._index_lock():
            ids = [mid for mid, _t in pairs]
            # Stored again since (an import keeps ids): its vector is current, keep it.
            back = self.catalog.existing_ids(ids)
            by_type: dict[str, list[str]] = {}
            for mid, type_value in pairs:
                if mid not in back:
                    by_type.setdefault(type_value, []).append(mid)
            for type_value, group in by_type.items():
                index.delete(MemoryType(type_value).collection, group)
            self.catalog.finish_index_deletes(ids)
        for mid, type_value in pairs:
            self._unindexing.get(type_value, set()).discard(mid)

    def _track_unindexing(self, pairs: Sequence[tuple[str, str]]) -> None:
        for mid, type_value in pairs:
            self._unindexing.setdefault(type_value, set()).add(mid)

    def _finisher(self) -> DeleteFinisher:
        if self._deleter is None:
            with self._init_lock:
                if self._deleter is None:
                    self._deleter = DeleteFinisher(self.finish_step, chunk=FINISH_CHUNK)
        return self._deleter

    def finish_deletes(self) -> None:
        """Stop the background finisher and do what is still queued here, without pauses (at
        close: leaving it would cost the next process to open the store)."""
        if self._deleter is not None:
            self._deleter.close()
            self._deleter = None
        try:
            while self.catalog.mend_windows(INDEX_BATCH):
                pass
            if self._index is not None and any(self._unindexing.values()):
                while self.drain_index_deletes(INDEX_BATCH):
                    pass
        except RemindfulError as exc:
            log.warning("deletions left to finish at the next open (%s)", exc)

    def dense_query(
        self, types: Sequence[MemoryType], counts: Mapping[str, int]
    ) -> Callable[[np.ndarray, int], list[tuple[str, float]]] | None:
        """``query(vector, k)`` over the collections of ``types`` that hold anything (per
        ``counts``, from :meth:`type_counts`), or None while the index is unusable."""
        index = self.index
        if index is None:
            return None

        def run(vector: np.ndarray, k: int) -> list[tuple[str, float]]:
            found: list[tuple[str, float]] = []
            for memory_type in types:
                if counts.get(memory_type.value, 0):
                    gone = self._unindexing.get(memory_type.value)
                    if not gone:
                        found += self._query_collection(index, memory_type, vector, k)
                        continue
                    # Deleted, vectors not removed yet: skip them and ask for more to make up.
                    hits = self._query_collection(index, memory_type, vector, k + min(len(gone), OVERFETCH * k))
                    found += [(mid, score) for mid, score in hits if mid not in gone]
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
            # Vectors of deleted memories still to remove (a large delete finishes in the background).
            "pending_deletes": int(self.catalog.read("SELECT count(*) FROM index_deletes")[0][0]),
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

            def restart(conn: Any) -> None:
                conn.execute("UPDATE memories SET indexed = 0")
                conn.execute("DELETE FROM index_deletes")  # the index is rebuilt from the catalog

            self.catalog.write(restart, what="reindex")
            self._unindexing.clear()
            self._index_pending(index, progress)
            self._index, self._index_error, self._index_opened = index, None, True
            self._index_rowid = self._max_rowid()
        return {t.collection: index.count(t.collection) for t in MemoryType}
