"""The vector index kept in step with the catalog, across the processes that share a storage directory.

The catalog is the truth; the index (Chroma) mirrors what it holds, and can be rebuilt from it.

Opening (:mod:`~remindful.engine.index_open`): the index opens on first use; a search never
waits for it, and scores exactly from the catalog meanwhile. Once open and reconciled with the
catalog, the deletions still queued go to the background deleter and the rows still marked
un-indexed to the backlog (:mod:`~remindful.engine.backlog`).

Additions: a store commits its rows to the catalog and hands them to :meth:`IndexMirror.index_rows`,
which indexes them in the background (``performance.async_indexing``, :class:`BackgroundIndexer`) or
at once. Rows committed without a vector (``performance.defer_embedding``) are embedded there first,
outside the index lock. Until they are indexed, search scores them exactly from the catalog, after
waiting for the vectors this process has yet to compute (:meth:`IndexMirror.await_embeddings`).

Deletions go the other way: the catalog delete queues the vectors (``index_deletes``, in the same
transaction) and :meth:`IndexMirror.after_delete` applies the queue at once for a few, in the
background for many (Chroma takes ~0.3 ms a vector, holding the GIL: :class:`DeleteFinisher`),
after the neighbours' session windows a large delete also left (:mod:`remindful.engine.windows`).
Until then search drops their hits: every index hit is checked against the catalog, and this
process also skips the ones it knows are queued, asking the index for more to make up. A crash
leaves the queue to the next open, which drains it in the background; nothing deleted can come
back, since the catalog no longer holds it.

Other processes: chromadb's embedded client keeps its own copy of each HNSW graph in memory and
writes it back over the shared files, so every write holds :class:`IndexLock` and first reloads a
view another process made stale (the lock file counts the writes). Rows another process wrote
since this one loaded its view may be missing from it: search scores the rows above
:meth:`IndexMirror.pending_after` exactly from the catalog, and has the view reloaded in the
background when they grow many.

Readers never wait for a writer: no search takes the index lock. Reloading this process's copy
closes the client under the queries, so a reload (or a close) holds :class:`ViewLock` alone; a
search that finds it held scores from the catalog instead of waiting. Closing stops every
background thread before the index and the catalog close: the batch in hand gives up its wait for
the index lock after ``CLOSE_BUDGET_S``, and what is left stays marked un-indexed for the next open.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from remindful.config import PerformanceSettings
from remindful.engine.backend import CatalogBackend
from remindful.engine.background import BackgroundIndexer
from remindful.engine.backlog import BACKLOG_WATCH_S, Backlog
from remindful.engine.catalog import MemoryRow, catalog_damaged, integrity_problem
from remindful.engine.deferred import DeferredEmbeddings, EmbedderSource
from remindful.engine.dense import EXHAUSTIVE_BELOW, DenseQueries, IndexHandle
from remindful.engine.index_deletes import FINISH_CHUNK, IndexDeletes
from remindful.engine.index_locks import IndexHolders, IndexLock, ViewLock, WaitCancelled
from remindful.engine.index_open import IndexOpening, expect_sizes
from remindful.engine.index_snapshot import FILE_NAME as SNAPSHOT_FILE
from remindful.engine.index_snapshot import VectorSnapshot
from remindful.engine.index_view import IndexView
from remindful.engine.scopes import in_index
from remindful.engine.sqlfilter import SqlFilter
from remindful.errors import CorruptionError, RemindfulError
from remindful.index.base import VectorIndex
from remindful.model import MemoryType

log = logging.getLogger("remindful")

INDEX_BATCH = 1000
#: A failed index write is retried this many times in all, the index reloaded before each retry.
INDEX_WRITE_TRIES = 2
PENDING_REFRESH = 2000
#: Closing lets the background indexer work through its queue this long; what is left then stays
#: marked un-indexed, and the next process to open the index indexes it.
CLOSE_BUDGET_S = 30.0
#: Rows embedded per step in the background: a step is what a close waits for.
EMBED_BATCH = 256
#: Under a stream of stores the background embeds and indexes at most this often, each batch
#: what came since the last began (a lone store goes at once; a search waiting for vectors, and a
#: flush, hurry it). One store at a time, each store's vector write, index write and marks
#: competed with the next stores' acknowledgements for the two cores and the catalog.
INDEX_PACE_S = 0.1


class IndexMirror:
    """The vector index of one open catalog, kept in step with it across threads and processes.

    Built from the catalog, the embedder (for rows committed without a vector) and ``new_index``
    (which makes the index the first use opens). Thread-safe. ``exiting``: the interpreter is
    exiting: neither the index nor the embedder is opened any more (see :meth:`close_for_exit`).
    """

    def __init__(
        self,
        catalog: CatalogBackend,
        embedder: EmbedderSource,
        new_index: Callable[[], VectorIndex],
        *,
        path: Path,
        performance: PerformanceSettings,
        exiting: bool = False,
    ) -> None:
        self.catalog = catalog
        self._new_index = new_index
        self._performance = performance
        self._workers_lock = threading.Lock()  # starting a background worker (short)
        self._exiting = exiting  # set by close_for_exit: open nothing new
        self._refreshed_at = 0.0  # monotonic time of the last view refresh asked for
        self._index_failed: str | None = None  # a write failed: what is un-indexed waits for the next write
        self._index_lock = IndexLock(path / "index.lock")
        self._holders = IndexHolders(path / "index.holders")
        self._copy = ViewLock()  # this process's copy of the index: queries share it, a reload holds it alone
        # Which state of the index files this process's copy reflects (rows above view.rowid may be
        # missing from it: scored exactly until the view is refreshed).
        self._view = IndexView(catalog, self._index_lock, self._copy)
        # A large store's first searches scan it while the index opens (a local catalog only).
        self._snapshot: VectorSnapshot | None = None
        if catalog.path is not None:
            self._snapshot = VectorSnapshot(path / SNAPSHOT_FILE, path / "index.lock", catalog)
            self._view.snapshot = self._snapshot
        self._indexer: BackgroundIndexer | None = None
        # Set while closing: background waits for the index lock give up (WaitCancelled).
        self._stopping = threading.Event()
        self._deferred = DeferredEmbeddings(catalog, embedder, stopping=self._stopping, exiting=lambda: self._exiting)
        self._closing = False  # close() runs: no background thread is started
        # Opens the index on first use; a search has it opened (and this process's view of it
        # reloaded) in the background.
        self._opening = IndexOpening(
            catalog,
            new_index,
            view=self._view,
            index_lock=self._index_lock,
            holders=self._holders,
            snapshot=self._snapshot,
            stopping=self._stopping,
            search_wait_s=performance.search_timeout_ms / 1000,
            may_start=self._may_start,
            exiting=lambda: self._exiting,
            after_open=self._after_open,
        )
        self._deletes = IndexDeletes(
            catalog, self._view, lambda: self._opening.current, stopping=self._stopping, may_start=self._may_start
        )
        #: What searches ask for dense candidates (never waiting for the index).
        self.dense = DenseQueries(
            catalog,
            IndexHandle(
                opening=self._opening.due,
                searchable=self._opening.searchable,
                opened=self._opening.await_open,
                refresh=self._opening.ask,
                pending_after=self.pending_after,
                newest=self._max_rowid,
                generation=self._index_lock.generation,
            ),
            copy=self._copy,
            deletes=self._deletes,
            snapshot=self._snapshot,
        )
        # Indexes rows left un-indexed, when nobody else does.
        self._backlog = Backlog(
            catalog, self._holders, self.index_ids, stopping=self._stopping, batch=EMBED_BATCH, held=self._held
        )

    # -- the index: open, state, lock -----------------------------------------------------------

    @property
    def index(self) -> VectorIndex | None:
        """The vector index, opened now if needed (waiting for the index lock), or None while it is
        unusable (the reason is in :meth:`status`). A transient failure to open it (a lock, an
        unreachable server) is retried after ``INDEX_RETRY_S``; damage waits for
        ``reindex(reset=True)``. Searches use :attr:`dense`, which never waits for it."""
        return self._opening.get()

    def state(self) -> dict[str, Any]:
        """The vector index as this process sees it, without opening it (unlike :meth:`status`):
        :meth:`IndexOpening.state`."""
        return self._opening.state()

    def _may_start(self) -> bool:
        """Whether a background thread may be started now: not at interpreter exit, nor while closing."""
        return not (self._exiting or self._closing)

    def _after_open(self, queued: list[tuple[str, str]]) -> None:
        """The index just opened: drain the deletions left queued (by a process that stopped, or
        crashed, before it drained them) and index the rows left un-indexed, in the background;
        copy the vectors of the projects a search scores exactly (``DenseQueries.preload_scopes``)."""
        if queued:
            self._deletes.track(queued)
            self.kick_finisher()
        self._queue_backlog()
        try:
            self.dense.preload_scopes()
        except RemindfulError as exc:  # the first search of each reads its own copy, as before
            log.debug("could not copy the projects' vectors ahead: %s", exc)

    def status(self) -> dict[str, Any]:
        """Opens the index: ``available``, ``backend`` (its class name, None while unusable),
        ``error``, ``unindexed`` (rows marked un-indexed) and ``pending_deletes``."""
        index = self.index
        return {
            "available": index is not None,
            "backend": type(index).__name__ if index is not None else None,
            "error": self._opening.error,
            "unindexed": self.catalog.count(SqlFilter("indexed = 0")),
            # Vectors of deleted memories still to remove (a large delete finishes in the background).
            "pending_deletes": int(self.catalog.read("SELECT count(*) FROM index_deletes")[0][0]),
        }

    def lock(self) -> contextlib.AbstractContextManager[int]:
        """Hold the vector-index lock for a ``with`` block: no thread or process of this storage
        directory writes the index meanwhile (a backup copies the index files under it). Not
        re-entrant: do not call index-writing methods inside the block."""
        return self._index_lock()

    def _queue_backlog(self) -> None:
        """Have the rows marked un-indexed now indexed in the background (rows left by a process
        that stopped or crashed, or by a failed write): whoever opens the index never indexes
        them on its own thread (:class:`~remindful.engine.backlog.Backlog`)."""
        if self._may_start():  # else no new threads: the next open takes them
            self._backlog.queue(self._max_rowid())

    # -- this process's view of the index files -------------------------------------------------

    def _writing(
        self, index: VectorIndex, cancel: threading.Event | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """Hold the index lock for a write through ``index``, the view reloaded first if stale
        (:meth:`IndexView.writing`)."""
        return self._view.writing(index, cancel)

    def reload_view(self) -> None:
        """Another process replaced the store's content or rebuilt the index (a restore, a
        clear-all, a reindex: :meth:`remindful.engine.store.Store.follow_replacements`): what this
        process knows of the index is void, so its view is loaded afresh now (if it has one) and
        its queue of vectors to skip is dropped. Rows the new view may lack are scored exactly
        from the catalog until they are indexed (:meth:`pending_after`)."""
        with self._opening.lock:
            self._deletes.forget()
            self._index_failed = None
            self.dense.forget()  # the exact copies of the vectors too: read afresh when next needed
            index = self._opening.current
            if index is None:
                return
            try:
                self._view.refresh(index, force=True)
            except RemindfulError as exc:  # the next write reloads it again
                self._view.invalidate()
                log.warning("could not reload the vector index after the store changed (%s)", exc)

    def pending_after(self) -> int:
        """The rowid above which this process's index view may lack rows (beside rows not marked indexed).

        When too many accumulate, the background viewer is asked (at most once a second) to
        refresh the view: to reload it from the files if another process wrote them since
        (:meth:`IndexView.refresh`). The caller does not wait for it."""
        # An upper bound (rowids only grow): counting rows would read the whole table.
        if (
            self._opening.current is not None
            and self._max_rowid() - self._view.rowid > PENDING_REFRESH
            and time.monotonic() - self._refreshed_at >= 1.0
        ):
            self._refreshed_at = time.monotonic()
            self._opening.ask()
        return int(self._view.rowid)

    def _max_rowid(self) -> int:
        return int(self.catalog.read("SELECT coalesce(max(rowid), 0) FROM memories")[0][0])

    def keeps_files(self) -> bool:
        """Whether the index is files this process can replace (an embedded Chroma, not a server)."""
        return self._files_placer() is not None

    def _files_placer(self) -> Callable[[Path], None] | None:
        """The index's ``replace_files``, if it is files this process can replace."""
        placer: Callable[[Path], None] | None = getattr(
            self._opening.current or self._new_index(), "replace_files", None
        )
        return placer

    @contextlib.contextmanager
    def replacing(self) -> Iterator[Callable[[Path], bool]]:
        """Hold the index for a replacement of the store's content (a restore): no opening of it
        meanwhile, and the index lock held for a write (every process loads its view afresh after
        it). Yields ``replace(files)``: put the directory ``files`` in place of the index's files,
        this process's index closed (False, nothing done, if the index keeps no files here). The
        caller then has them opened with :meth:`open_replaced`."""
        with self._opening.lock, self._index_lock():

            def replace(files: Path) -> bool:
                place = self._files_placer()
                if place is None:
                    return False
                with self._copy.exclusive():
                    place(files)
                    self._opening.closed()
                self._view.invalidate()
                self._deletes.forget()
                return True

            yield replace

    def open_replaced(self, *, progress: Callable[[int], None] | None = None) -> dict[str, int]:
        """After :meth:`replacing` put files in place: open them as any index is opened (checked if
        they look changed since they were written, loaded, reconciled with the catalog), then index
        the rows they lack, and write the vector snapshot. Files that cannot be opened are moved
        aside and the index rebuilt from the catalog (:meth:`reindex`)."""
        index = self._opening.get()
        if index is None:
            log.warning("the restored vector index cannot be used (%s): rebuilding it", self._opening.error)
            return self.reindex(reset=True, progress=progress)
        with self._opening.lock:
            self._index_pending(index, progress)
        self._opening.keep_snapshot()
        return {t.collection: index.count(t.collection) for t in MemoryType}

    def reindex(self, *, reset: bool, progress: Callable[[int], None] | None = None) -> dict[str, int]:
        """Rebuild the index from the catalog (``reset``: move the index files aside first). A
        damaged catalog raises CorruptionError before anything is touched: the index is rebuilt
        from it, so the index may be the better copy of what the catalog lost."""
        path = self.catalog.path
        problem = None if path is None else integrity_problem(path)
        if problem is not None:
            raise catalog_damaged(problem)
        with self._opening.lock:
            index = self._opening.current or self._new_index()

            def restart(conn: Any) -> None:
                conn.execute("UPDATE memories SET indexed = 0")
                conn.execute("DELETE FROM index_deletes")  # the index is rebuilt from the catalog

            # Other processes reload their view at their next write; this one's queries score from
            # the catalog while the files are replaced under them.
            with self._index_lock() as generation, self._copy.exclusive():
                if reset and hasattr(index, "reset_files"):
                    index.reset_files()
                else:
                    index.reset()
                expect_sizes(index, self.catalog)  # the collections are made anew, for this many
                self.catalog.write(restart, what="reindex")
                self._view.rebuilt(generation)
            self._deletes.forget()
            self._index_pending(index, progress)
            self._opening.rebuilt(index)
        # The next fresh process's first searches scan the snapshot rather than wait for the index
        # (10.6 s at 1,000,000 memories): written whole now (~6 s there, beside ~610 s of rebuild).
        # The index is rebuilt whatever happens to it: a failure leaves it for a later open.
        self._opening.keep_snapshot()
        return {t.collection: index.count(t.collection) for t in MemoryType}

    # -- additions ------------------------------------------------------------------------------

    def defers_embedding(self) -> bool:
        """Whether new rows are committed without a vector and embedded by the background indexer
        (``performance.defer_embedding`` with ``async_indexing``)."""
        return self._performance.async_indexing and self._performance.defer_embedding

    def index_rows(self, rows: Sequence[MemoryRow]) -> None:
        """Add rows to the vector index: in the background (``performance.async_indexing``) or now.
        Rows without a vector are embedded first, there. Until then search scores them exactly (and
        waits for the ones this process has yet to embed); on failure they stay marked un-indexed
        and are indexed at the next open."""
        self._deferred.expect(r.id for r in rows if r.embedding is None)
        if self._performance.async_indexing:
            if self._closing:  # stored while closing: they stay un-indexed, for the next open
                return
            self._background().submit([r.id for r in rows])
        else:
            self.index_ids([r.id for r in rows])

    def _background(self) -> BackgroundIndexer:
        """The background indexer, started now if it was not yet."""
        if self._indexer is None:
            with self._workers_lock:
                if self._indexer is None:
                    self._indexer = BackgroundIndexer(
                        self.index_ids,
                        prepare=self._embed_stored,
                        pace=INDEX_PACE_S,
                        max_batch=INDEX_BATCH,
                        prepare_batch=EMBED_BATCH,
                        stopping=self._stopping,
                    )
        return self._indexer

    def _held(self) -> set[str]:
        """The ids this process's background indexer has yet to index."""
        indexer = self._indexer
        return set() if indexer is None else indexer.holding()

    def embeddings_pending(self, by: Hashable | None = None) -> bool:
        """Whether rows this process stored are still waiting for their vectors (with ``by``: rows a
        search of that writer waits for, :mod:`remindful.engine.deferred`)."""
        return self._deferred.pending(by)

    def await_embeddings(self, timeout: float, by: Hashable | None = None) -> bool:
        """Wait (at most ``timeout`` seconds) until the rows this process stored without a vector
        so far have one, or their embedding failed (with ``by``: the rows a search of that writer
        waits for); rows stored meanwhile are not waited for (under a stream of stores the wait
        would never end). False if they still wait."""
        rows = self._deferred.waiting(by)
        if not rows:
            return True
        if by is not None:  # a search: the few rows of small writes the indexer has not reached
            try:
                self._deferred.embed_few(rows)
            except RemindfulError as exc:  # the search goes on: they are found by their words
                log.warning("could not embed %d memories for a search (%s); they will be later", len(rows), exc)
        if self._indexer is not None:
            self._indexer.hurry()
        return self._deferred.wait(timeout, rows)

    def _embed_stored(self, ids: list[str]) -> None:
        """Embed the rows among ``ids`` committed without a vector (the background indexer's first
        step, and :meth:`index_ids`'). A failure leaves them for later; a damaged catalog is not
        said here: the write's caller and the next flush report it, once. The first write has the
        index opened once its first vectors are made: chromadb holds the GIL while it starts
        (10-30 ms), so asked from here, not from the write's thread, it does not hold up the
        write's return, and asked after the embedding, not before, it does not hold up that
        either (the next batches are embedded while it opens)."""
        try:
            self._deferred.embed_stored(ids)
        except CorruptionError as exc:
            if exc.part != "catalog":
                raise
            log.debug("not embedding %d memories: %s", len(ids), exc)
        except RemindfulError as exc:
            log.warning("stored %d memories but could not embed them yet (%s); they will be later", len(ids), exc)
        finally:
            if self._opening.due():
                self._opening.ask(searching=False)

    def index_ids(self, ids: list[str]) -> None:
        """Index the memories with these ids that are still un-indexed (read under the index lock,
        so a memory deleted meanwhile is not indexed again). An id may come more than once (a
        memory stored, then updated, in one batch of the background indexer; a row stored and in a
        backlog): it is indexed once. While closing, a wait for the index lock gives up: the rows
        stay marked un-indexed, for the next open."""
        ids = list(dict.fromkeys(ids))
        rows: list[MemoryRow] = []
        self._embed_stored(ids)  # first: search needs the vectors even without an index
        try:
            index = self._opening.get(self._stopping)
        except WaitCancelled:
            return
        except CorruptionError as exc:
            if exc.part != "catalog":
                raise
            # Not the index's: the catalog keeps it, the next write and flush report it.
            log.debug("not indexing %d memories: %s", len(ids), exc)
            return
        if index is None:
            return
        for attempt in range(INDEX_WRITE_TRIES):
            try:
                with self._writing(index, self._stopping):
                    found = self.catalog.get_rows(ids)
                    vectors = self.catalog.embeddings([i for i in ids if i in found and not found[i].indexed])
                    rows = [found[i] for i in ids if i in vectors]
                    for row in rows:
                        row.embedding = vectors[row.id]
                    if rows:
                        self._upsert(index, rows, locked=True)
                break
            except RemindfulError as exc:
                self._view.invalidate()  # whatever went wrong, the next write reloads the view first
                if attempt + 1 < INDEX_WRITE_TRIES and not isinstance(exc, CorruptionError):
                    log.info("indexing %d memories failed (%s); reloading the index and retrying", len(ids), exc)
                    continue
                self._index_failed = str(exc)
                log.warning(
                    "stored %d memories but could not index them yet (%s); search scores them from the catalog "
                    "and the next write indexes them",
                    len(ids),
                    exc,
                )
                return
            except WaitCancelled:
                return
        if self._index_failed is not None:  # an earlier write failed: index what it left, in the background
            self._index_failed = None
            self._queue_backlog()

    def _index_pending(self, index: VectorIndex, progress: Callable[[int], None] | None = None) -> int:
        done = 0
        while True:
            batch = self.catalog.unindexed(INDEX_BATCH)
            if not batch:
                return done
            fresh = self.embed_and_save([(row.id, row.content) for row, vector in batch if vector is None])
            self._deferred.embed_parts([row.id for row, _ in batch])
            rows = []
            for row, vector in batch:
                row.embedding = vector if vector is not None else fresh[row.id]
                rows.append(row)
            self._upsert(index, rows)
            done += len(rows)
            if progress:
                progress(len(rows))

    def _upsert(self, index: VectorIndex, rows: Sequence[MemoryRow], *, locked: bool = False) -> None:
        """Send ``rows``' vectors to ``index`` and mark the rows indexed. A private memory's vector
        stays in a catalog that does not index them (``CatalogBackend.indexes_private``)."""
        by_type: dict[str, list[MemoryRow]] = {}
        private = self.catalog.indexes_private
        for row in rows:
            if in_index(row.scope, private_indexed=private):
                by_type.setdefault(row.type, []).append(row)
        with contextlib.nullcontext() if locked else self._writing(index):
            for type_value, group in by_type.items():
                # Ids and vectors only: no text a user or an agent wrote (metadata, session ids) goes
                # to the index, one more set of files (or a server) where it could stay, and no column
                # either (Chroma keeps a row and two index entries per value, ~250 B a memory): filters
                # are evaluated on the catalog, which holds it all.
                matrix = np.stack([np.asarray(r.embedding, dtype=np.float32) for r in group])
                if self._snapshot is not None:
                    self._snapshot.stage([r.id for r in group], [type_value] * len(group), list(matrix))
                index.upsert(
                    MemoryType(type_value).collection,
                    [r.id for r in group],
                    matrix,
                    [{} for _ in group],
                )
            self.catalog.mark_indexed([r.id for r in rows])

    def embed_for_search(self, texts: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
        """Embed (id, content) pairs a search found without a vector (a process ended before
        embedding them) and return the vectors by id: :meth:`embed_and_save` without waiting."""
        return self.embed_and_save(texts, wait=False)

    def embed_and_save(self, texts: Sequence[tuple[str, str]], *, wait: bool = True) -> dict[str, np.ndarray]:
        """Embed (id, content) pairs and save the vectors in the catalog; returns them by id
        (:meth:`DeferredEmbeddings.embed_and_save`)."""
        return self._deferred.embed_and_save(texts, wait=wait)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the vector index reflects every store and delete of this process so far, and
        the background viewer did what it was asked (opening the index, which may queue a backlog,
        reloading the view); False on timeout. Never waits for a timer: rows another live process
        left un-indexed are its own to index, not waited for here."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        # What the paced background gathers is embedded now, while the viewer opens the index.
        if self._indexer is not None:
            self._indexer.hurry()
        # One after the other, each looked up when its turn comes: the viewer's open hands work
        # to the indexer and the backlog, whose open may queue deletions.
        if not self._opening.wait(left()):
            return False
        if self._indexer is not None and not self._indexer.flush(left()):
            return False
        # The backlog is others' rows: waited for only when this process alone indexes it (rows a
        # stopped process left); while another holds the index, it is theirs to finish.
        return self._backlog.wait(left()) and self._deletes.flush(left())

    def settle(self, timeout: float | None = None) -> bool:
        """:meth:`flush`, then until the background upkeep asked so far is done too (a large
        store's vector snapshot written whole for the next process: ~6 s at 1,000,000 memories,
        which a flush does not wait for); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.flush(timeout):
            return False
        return self._opening.settle(None if deadline is None else max(0.0, deadline - time.monotonic()))

    # -- deletions ------------------------------------------------------------------------------

    def after_delete(self, gone: Sequence[tuple[str, str]], *, later: bool) -> None:
        """After a catalog delete of ``gone`` (id, type), which queued their vectors (and, with
        ``later``, the mending of their neighbours' session windows): remove the vectors now, or
        (``later``) leave both to the background :class:`~remindful.engine.background.DeleteFinisher`,
        without opening the index here (an index opened later drains the queue). On an index error
        the vectors stay queued (and out of search results) until the next delete or open."""
        index = self._opening.current if later else self.index
        if index is not None:
            self._deletes.track(gone)
        if later:
            self.kick_finisher()
        elif index is not None:
            try:
                self._deletes.unindex(index, gone)
            except RemindfulError as exc:
                log.warning("could not remove %d vectors from the index yet (%s)", len(gone), exc)

    def after_scope_move(self) -> None:
        """Memories moved into or out of the user scope, on a catalog that keeps private vectors out
        of the index (``CatalogBackend.indexes_private``; its schema queued the vectors of the
        memories made private for removal, and marked those made shared un-indexed): remove and
        add them, in the background."""
        if self.catalog.indexes_private:
            return
        self.kick_finisher()
        self._queue_backlog()

    def kick_finisher(self) -> None:
        """Large deletes left work queued in the catalog (windows to mend, vectors to remove): have
        it done in the background (while closing, :meth:`close` does)."""
        self._deletes.kick()

    def drain_index_deletes(self, limit: int = FINISH_CHUNK, *, cancel: threading.Event | None = None) -> int:
        """Apply up to ``limit`` queued vector deletions, oldest first; returns how many were
        handled (0: none left, or no usable index)."""
        return self._deletes.drain(limit, cancel=cancel)

    def finish_deletes(self) -> None:
        """Stop the background finisher and do what is still queued here, without pauses (at
        close: leaving it would cost the next process to open the store)."""
        self._deletes.finish(INDEX_BATCH)

    # -- closing --------------------------------------------------------------------------------

    def close_for_exit(self) -> None:
        """:meth:`close` at interpreter exit: queued work is finished with what is loaded, but
        neither the index nor the embedder is opened now (the interpreter refuses new threads by
        then); what is left is indexed at the next open."""
        self._exiting = True
        self.close()

    def close(self) -> None:
        """Index what is queued (for ``CLOSE_BUDGET_S`` at most: the rest stays marked un-indexed,
        for the next open), finish what deletes left, and close the index (its holder marker
        removed: the next opener need not check the files). Returns once no background thread
        of this mirror runs any more. The catalog stays open."""
        self._closing = True
        if self._indexer is not None:
            self._indexer.close(CLOSE_BUDGET_S)
            self._indexer = None
        self._stopping.set()  # the viewer and the backlog give up a wait for the index lock
        self._opening.stop_viewer()
        self._backlog.close()
        self.dense.close()
        self.finish_deletes()
        index = self._opening.current
        if index is not None:
            with self._copy.exclusive(), contextlib.suppress(Exception):
                index.close()
            self._holders.release()  # closed cleanly: the next opener need not check the files
        self._opening.closed()
        self._stopping.clear()  # a use after close opens the index again
        self._closing = False


__all__ = [
    "BACKLOG_WATCH_S",
    "EXHAUSTIVE_BELOW",
    "FINISH_CHUNK",
    "EmbedderSource",
    "IndexHolders",
    "IndexLock",
    "IndexMirror",
    "ViewLock",
    "WaitCancelled",
]
