"""This process's view of the shared vector-index files, and the protocol that keeps it current.

chromadb's embedded client keeps its own copy of each HNSW graph in memory and writes it back
over the shared files, so a write through a stale copy would drop the other processes' vectors.
:class:`IndexView` tracks which generation of the files (:class:`~remindful.engine.index_locks.IndexLock`
counts the writes) this process's copy was loaded at, and up to which rowid every row is in it:
a write holds the index lock and reloads a stale view first (:meth:`IndexView.writing`); rows
above :attr:`IndexView.rowid` may be missing from the view, and a search scores them exactly.
Reloading replaces the copy under the queries' feet, so it holds
:class:`~remindful.engine.index_locks.ViewLock` alone.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from remindful.engine.backend import CatalogBackend
from remindful.engine.index_locks import IndexLock, ViewLock
from remindful.engine.index_snapshot import VectorSnapshot
from remindful.engine.scopes import USER
from remindful.engine.sqlfilter import SqlFilter, build_filter
from remindful.index.base import VectorIndex
from remindful.model import MemoryType

log = logging.getLogger("remindful")

#: How a write through the index is held: :meth:`IndexView.writing`, or a wrapper of it.
Writing = Callable[[VectorIndex, "threading.Event | None"], contextlib.AbstractContextManager[None]]


def _indexed_of(memory_type: MemoryType, *, private: bool) -> SqlFilter:
    """The catalog's rows of ``memory_type`` marked indexed: what its collection should hold
    (``private``: the private ones too; see ``CatalogBackend.indexes_private``)."""
    held = build_filter(types=[memory_type.value]) & SqlFilter("indexed = 1")
    return held if private else held & SqlFilter(f"scope IS DISTINCT FROM '{USER}'")


class IndexView:
    """Which state of the index files this process's copy reflects. ``generation``: the
    :class:`IndexLock` generation it is current at (-1: none, or unknown: the next write reloads
    it); ``rowid``: rows up to it are in the view, later ones may have been written by another
    process since. Not thread-safe on its own: its writers hold the index lock."""

    def __init__(self, catalog: CatalogBackend, lock: IndexLock, copy: ViewLock) -> None:
        self._catalog = catalog
        self.lock = lock
        self.copy = copy
        self.generation = -1
        self.rowid = 0
        #: The compact copy of the index's vectors that every write carries along, if any.
        self.snapshot: VectorSnapshot | None = None

    def invalidate(self) -> None:
        """Whatever happened to the files, the next write reloads the view first."""
        self.generation = -1

    def load(self, index: VectorIndex, generation: int) -> None:
        """Under the index lock at ``generation``: load the view afresh."""
        self.reload(index)
        self.generation = generation

    def catch_up(self, index: VectorIndex, generation: int) -> None:
        """Under the index lock at ``generation``: reload the view if another process wrote since."""
        if generation != self.generation:
            self.load(index, generation)

    def rebuilt(self, generation: int) -> None:
        """Under the index lock at ``generation``, which this process is rewriting whole (a reindex)."""
        self.generation, self.rowid = generation + 1, self.floor()

    @contextlib.contextmanager
    def writing(self, index: VectorIndex, cancel: threading.Event | None = None) -> Iterator[None]:
        """Hold the index lock for a write through ``index``. If another process wrote the index
        since this one loaded its view, the view is reloaded first: chromadb's embedded client
        writes its in-memory copy of a graph back over the shared files, so a write through a
        stale copy would drop the other processes' vectors ("Error finding id" later). With
        ``cancel``, the wait for the lock gives up (WaitCancelled) once it is set."""
        snapshot = self.snapshot
        with self.lock(cancel=cancel) as generation:
            if snapshot is not None:
                snapshot.begin()
            if generation != self.generation:
                self.reload(index)
            yield
            self.generation = generation + 1
            self.rowid = self.floor()  # the view is current: what is marked indexed is in it
            if snapshot is not None:
                snapshot.advance(generation, self.rowid)

    def reload(self, index: VectorIndex) -> None:
        """Under the index lock: load the index files afresh (if the index keeps a copy of them)
        and note which rows the new view may lack (:meth:`floor`). The copy is replaced under the
        queries' feet, so this holds the view alone: searches meanwhile score from the catalog."""
        floor = self.floor()
        reload = getattr(index, "reload", None)
        if reload is not None:
            with self.copy.exclusive():
                reload()
        self.rowid = floor

    def floor(self) -> int:
        """A rowid up to which every row marked indexed is in the index files as they are now
        (read under the index lock): rows not yet indexed may be indexed by another process later,
        so the view is complete only below the first of them."""
        top, first = self._catalog.read(
            "SELECT (SELECT coalesce(max(rowid), 0) FROM memories), (SELECT min(rowid) FROM memories WHERE indexed = 0)"
        )[0]
        return int(top) if first is None else min(int(top), int(first) - 1)

    def refresh(self, index: VectorIndex, *, force: bool = False, cancel: threading.Event | None = None) -> None:
        """Bring the view up to date (a search found many rows it may lack): reload it if another
        process wrote the index since (or ``force``; an index that keeps no copy of the files is
        closed instead, to be reopened at its next use), else just note what it holds. Waits for
        the index lock (run it in the background)."""
        with self.lock(write=False, cancel=cancel) as generation:
            if force and getattr(index, "reload", None) is None:
                with self.copy.exclusive():
                    index.close()
            elif force or generation != self.generation:
                self.load(index, generation)
            else:
                self.rowid = self.floor()

    def reconcile(
        self, index: VectorIndex, writing: Writing | None = None, cancel: threading.Event | None = None
    ) -> list[tuple[str, str]]:
        """Make the index match the catalog: drop vectors of deleted rows, mark missing ones
        un-indexed (the background indexer re-adds them). Queued deletions (``index_deletes``) are
        left to the background deleter: a count that differs only by them needs no comparison of
        ids. Returns them.

        The counts are compared under the index lock, where no writer is between its upsert and
        marking those rows indexed (one small read each); the ids are compared, and stale vectors
        removed, only for a type whose counts differ, holding the lock for a write (``writing``,
        :meth:`writing` by default)."""
        hold = writing or self.writing
        with self.lock(write=False, cancel=cancel) as generation:
            self.catch_up(index, generation)
            queued = self._queued_deletes()
            differing = [t for t in MemoryType if not self._agrees(index, t, queued)]
        for memory_type in differing:
            with hold(index, cancel):
                queued = self._queued_deletes()
                if self._agrees(index, memory_type, queued):
                    continue
                in_index = set(index.ids(memory_type.collection))
                every = self._catalog.indexed_ids(memory_type.value)
                # (None: a team member's process, which cannot see the others' private rows: their
                # vectors are not stale, and only what it can see is compared.)
                in_catalog = self._visible_indexed(memory_type) if every is None else every
                extra = [] if every is None else sorted(in_index - in_catalog)
                if extra:
                    index.delete(memory_type.collection, extra)
                missing = sorted(in_catalog - in_index)
                self._catalog.mark_indexed(missing, value=False)
            log.info("index %s: removed %d stale, re-adding %d", memory_type.collection, len(extra), len(missing))
        return queued

    def _visible_indexed(self, memory_type: MemoryType) -> set[str]:
        flt = _indexed_of(memory_type, private=self._catalog.indexes_private)
        return {r[0] for r in self._catalog.read(f"SELECT id FROM memories WHERE {flt.sql}", flt.params)}

    def _queued_deletes(self) -> list[tuple[str, str]]:
        """(memory id, type) of deleted rows whose vectors are still queued for deletion: the index
        may hold them until the background deleter drains them."""
        return self._catalog.read(
            "SELECT memory_id, type FROM index_deletes "
            "WHERE NOT EXISTS (SELECT 1 FROM memories WHERE memories.id = index_deletes.memory_id)"
        )

    def _agrees(self, index: VectorIndex, memory_type: MemoryType, queued: list[tuple[str, str]]) -> bool:
        """Whether the index's count for ``memory_type`` is the catalog's indexed count (plus the
        vectors still queued for deletion)."""
        expected = self._catalog.indexed_count(memory_type.value)
        waiting = sum(1 for _mid, t in queued if t == memory_type.value)
        return index.count(memory_type.collection) in (expected, expected + waiting)


__all__ = ["IndexView"]
