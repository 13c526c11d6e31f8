"""The storage state behind a MemoryManager: lazy catalog, embedder and index, and the write path.

Start-up order: the catalog opens on the first operation (a few ms); the embedder loads on the
first embedding; the vector index opens on the first write or search, is checked for corruption,
reconciled with the catalog and then indexes every row still marked un-indexed.

If the storage path is unusable, memory is disabled with the reason (every call raises
:class:`MemoryDisabledError`) and the host keeps running. If the index is corrupted, the error is
logged with recovery instructions and search keeps working from the catalog alone (exact dense
scoring + lexical) until ``reindex(reset=True)`` rebuilds it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from remindful import context, indexing
from remindful.attachments import remove_copies
from remindful.background import AccessRecorder, BackgroundIndexer, DeleteFinisher, IndexHolders, IndexLock
from remindful.catalog import Catalog, MemoryRow
from remindful.config import Settings
from remindful.embed.base import Embedder
from remindful.errors import (
    CorruptionError,
    MemoryDisabledError,
    StorageError,
)
from remindful.index.base import VectorIndex
from remindful.indexing import IndexMaintenance
from remindful.model import MemoryType

log = logging.getLogger("remindful")

SIZE_WARNING_RATIO = 0.9
#: Near the size quota, a store warns again only after this long, or when the usage grew by a point.
SIZE_WARNING_INTERVAL_S = 600.0
#: How long a measured storage size is used before the directory is walked again.
SIZE_MAX_AGE_S = 5.0


class StoreState(IndexMaintenance):
    """Lazily opened parts of one storage directory and the operations that span them."""

    def __init__(self, settings: Settings, *, embedder: Embedder | None, index: VectorIndex | None) -> None:
        self.settings = settings
        self.path = settings.storage_path
        self.disabled_reason = None if settings.enabled else "disabled in configuration (enabled: false)"
        self._given_embedder = embedder
        self._given_index = index
        self._catalog: Catalog | None = None
        self._embedder: Embedder | None = None
        self._index: VectorIndex | None = None
        self._index_opened = False
        self._index_error: str | None = None
        # Rows up to this rowid are in this process's view of the index; later ones may have been
        # written by another process and are scored exactly until the view is refreshed.
        self._index_rowid = 0
        self._spans: dict[str, tuple[int, int]] = {}
        self._init_lock = threading.RLock()
        self._index_lock = IndexLock(self.path / "index.lock")
        self._access: AccessRecorder | None = None
        self._indexer: BackgroundIndexer | None = None
        self._unembedded: set[str] = set()
        self._embedded = threading.Condition()
        self._deleter: DeleteFinisher | None = None
        self._unindexing: dict[str, set[str]] = {}
        self._holders = IndexHolders(self.path / "index.holders")
        #: Run once when the catalog opens (the manager drains the hook spool here); a failure is
        #: logged and does not stop the open.
        self.on_open: list[Callable[[], None]] = []
        self._size_mb = 0.0
        self._size_at = 0.0
        self._size_warned: tuple[float, int] | None = None  # (monotonic time, percent) of the last warning
        self._size_thread: threading.Thread | None = None  # measuring the size for the warning
        self._size_lock = threading.Lock()
        self.store_ms: deque[float] = deque(maxlen=1000)
        self.search_ms: deque[float] = deque(maxlen=1000)
        self.stores = 0
        self.searches = 0

    # -- lazy parts -----------------------------------------------------------------------------

    def ready(self) -> StoreState:
        """Open the catalog if needed; raise MemoryDisabledError if memory is off or unusable."""
        if self.disabled_reason:
            raise MemoryDisabledError(self.disabled_reason)
        if self._catalog is None:
            with self._init_lock:
                if self._catalog is None:
                    self._open_catalog()
        return self

    def _open_catalog(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
            # a probe of our own: processes opening one path at once must not remove each other's
            with tempfile.NamedTemporaryFile(dir=self.path, prefix=".write-test-"):
                pass
            catalog = Catalog(self.path / "catalog.sqlite3")
        except (OSError, StorageError) as exc:
            if isinstance(exc, CorruptionError):
                raise
            self.disabled_reason = (
                f"storage path {self.path} is not usable ({exc}); "
                "set MEMORY_STORAGE_PATH or storage.path to a writable directory"
            )
            log.error("Memory disabled: %s", self.disabled_reason)
            raise MemoryDisabledError(self.disabled_reason) from exc
        self._access = AccessRecorder(catalog)
        self._catalog = catalog
        if catalog.windows_to_mend():  # left by a process that stopped before it finished a delete
            self._finisher().kick()
        for callback in self.on_open:
            try:
                callback()
            except Exception as exc:  # e.g. a spooled event that cannot be stored yet: retried later
                log.warning("task at catalog open failed: %s", exc)

    @property
    def catalog(self) -> Catalog:
        assert self._catalog is not None, "call ready() first"
        return self._catalog

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            with self._init_lock:
                if self._embedder is None:
                    from remindful.embed import CachedEmbedder, default_embedder

                    settings = self.settings.embeddings
                    inner = self._given_embedder or default_embedder(
                        model_dir=settings.model_dir, backend=settings.backend, quantize=settings.quantize
                    )
                    self._embedder = CachedEmbedder(
                        inner, lru_size=self.settings.embeddings.cache_size, store=StoredVectors(self.catalog)
                    )
        return self._embedder

    # -- write path -----------------------------------------------------------------------------

    def commit_new(self, rows: Sequence[MemoryRow]) -> None:
        started = time.perf_counter()

        def run(conn: Any) -> tuple[int, int]:
            before = conn.execute("SELECT coalesce(max(rowid), 0) FROM memories").fetchone()[0]
            Catalog.insert_memories(conn, rows)
            for session_id, at in {(r.session_id, r.created_at) for r in rows if r.session_id}:
                self.catalog.ensure_session(conn, session_id, at)
            return before, conn.execute("SELECT max(rowid) FROM memories").fetchone()[0]

        span = self.catalog.write(run, what="storing memories")
        self._spans[rows[0].id] = span
        self.stores += len(rows)
        self.store_ms.append((time.perf_counter() - started) * 1000 / len(rows))

    def commit_update(self, row: MemoryRow) -> None:
        def run(conn: Any) -> None:
            conn.execute(
                "UPDATE memories SET content=?, metadata=?, content_hash=?, bookmarked=?, updated_at=?, indexed=0, "
                "embedding=COALESCE(?, embedding) WHERE id=?",
                (
                    row.content,
                    row.metadata,
                    row.content_hash,
                    int(row.bookmarked),
                    time.time(),
                    None if row.embedding is None else np.asarray(row.embedding, np.float32).tobytes(),
                    row.id,
                ),
            )
            context.after_update(conn, row.id)
            self.catalog.audit(conn, "update", row.id, {})

        self.catalog.write(run, what="updating a memory")
        if row.embedding is None:
            row.embedding = self.catalog.embeddings([row.id]).get(row.id)

    def delete(self, ids: list[str], *, reason: str | Mapping[str, str] = "delete") -> int:
        """Delete memories everywhere; returns how many existed. ``reason`` (or ``reason[id]``) is
        the audit-log action. The catalog delete commits first and is the truth: when this returns
        no read or search finds the memories. Their vectors and, for more than
        :data:`~remindful.indexing.INLINE_DELETE` memories, their neighbours' session windows
        follow (see :meth:`after_delete`); attachment copies go here."""
        if not ids:
            return 0
        later = len(ids) > indexing.INLINE_DELETE
        gone = self.catalog.delete_ids(ids, reason=reason, mend_later=later)
        if not gone:
            return 0
        remove_copies(self.path, [mid for mid, _t in gone])
        self.after_delete(gone, later=later)
        return len(gone)

    def make_room(self, rows: Sequence[MemoryRow]) -> None:
        """Enforce per-type item quotas (evict the least important unprotected memories) and warn
        when the storage nears its size quota. The new rows are always stored."""
        incoming: dict[str, int] = {}
        for row in rows:
            incoming[row.type] = incoming.get(row.type, 0) + 1
        counts = self.type_counts()
        for type_value, n_new in incoming.items():
            limit = self.settings.max_items_for(MemoryType(type_value))
            excess = counts.get(type_value, 0) + n_new - limit
            if excess <= 0:
                continue
            from remindful.policy.importance import least_important

            victims = least_important(self.catalog, type_value, excess, time.time())
            if len(victims) < excess:
                log.warning(
                    "%s_memories is over its quota of %d but every remaining memory is bookmarked", type_value, limit
                )
            if victims:
                self.delete(victims, reason="quota_evict")
                log.info("quota: evicted %d least important %s memories (limit %d)", len(victims), type_value, limit)
        self._warn_if_near_size_quota()

    def type_counts(self) -> dict[str, int]:
        """How many memories each type holds, as committed (by any process)."""
        return self.catalog.type_counts()

    def size_mb(self, *, max_age_s: float = SIZE_MAX_AGE_S) -> float:
        """The storage directory's size without its backups, measured again when older than
        ``max_age_s`` (a walk that stats every file: ~0.4 s with 10,000 attachment copies)."""
        if time.monotonic() - self._size_at > max_age_s:
            total = 0
            for root, _dirs, files in os.walk(self.path):
                if Path(root).name == "backups":
                    continue
                for name in files:
                    with contextlib.suppress(OSError):
                        total += os.stat(os.path.join(root, name)).st_size
            self._size_mb = total / 1_048_576
            self._size_at = time.monotonic()
        return self._size_mb

    def _warn_if_near_size_quota(self) -> None:
        """Near the quota, warn on a store: at once, then again after ``SIZE_WARNING_INTERVAL_S``
        or when the usage grew by a percentage point (a warning on every store flooded the hook
        daemon's log). A size older than ``SIZE_MAX_AGE_S`` is measured again in a thread of its
        own, which then warns: the walk is not the store's to wait for."""
        if time.monotonic() - self._size_at <= SIZE_MAX_AGE_S:
            self._check_size_quota(self._size_mb)
            return
        with self._size_lock:
            if self._size_thread is not None and self._size_thread.is_alive():
                return
            self._size_thread = threading.Thread(
                target=lambda: self._check_size_quota(self.size_mb(max_age_s=0)), name="remindful-size", daemon=True
            )
            self._size_thread.start()

    def _check_size_quota(self, used: float) -> None:
        quota = self.settings.storage.max_size_mb
        if used < SIZE_WARNING_RATIO * quota:
            self._size_warned = None
            return
        percent, now, last = int(100 * used / quota), time.monotonic(), self._size_warned
        if last is None or percent > last[1] or now - last[0] >= SIZE_WARNING_INTERVAL_S:
            self._size_warned = (now, percent)
            log.warning(
                "Memory storage at %.0f%% of its quota (%.1f MB of %.0f MB): enable auto-cleanup "
                "(retention.cleanup.enabled) or increase storage.max_size_mb",
                100 * used / quota,
                used,
                quota,
            )

    # -- read path ------------------------------------------------------------------------------

    def record_search(self, seconds: float, ids: list[str]) -> None:
        self.searches += 1
        self.search_ms.append(seconds * 1000)
        if self._access is not None:
            self._access.record(ids)

    def stats(self) -> dict[str, Any]:
        from remindful.stats import build_stats

        return build_stats(self)

    def close(self) -> None:
        if self._indexer is not None:
            self._indexer.close()
            self._indexer = None
        if self._catalog is not None:
            self.finish_deletes()
        if self._access is not None:
            self._access.close()
        if self._index is not None:
            with contextlib.suppress(Exception):
                self._index.close()
            self._holders.release()  # closed cleanly: the next opener need not check the files
        if self._catalog is not None:
            self._catalog.close()
        self._catalog = None
        self._index = None
        self._index_opened = False
        self._access = None


__all__ = ["StoreState"]


class StoredVectors:
    """The persistent embedding cache of a store: the vectors its memories already hold, by content hash.

    Nothing is written here: every vector is persisted with its memory, so a second table of the
    same vectors (which once doubled the catalog's size) is not needed. Texts embedded but never
    stored (search queries) live in the in-memory LRU only. Vectors are reused only for the model
    recorded as the store's (the first embedder that asked); the ``embedding_cache`` table of older
    stores is still read.
    """

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog
        self._models: dict[str, bool] = {}

    def _owns(self, model: str) -> bool:
        known = self._models.get(model)
        if known is None:
            recorded = self._catalog.claim_embedding_model(model)
            known = self._models[model] = recorded == model
            if not known:
                log.warning(
                    "this store's vectors were made by %s, the embedder is now %s: stored vectors are not reused",
                    recorded,
                    model,
                )
        return known

    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        found = self._catalog.vectors_by_hash(hashes) if self._owns(model) else {}
        rest = [h for h in hashes if h not in found]
        return {**found, **self._catalog.get_cached_embeddings(model, rest)} if rest else found

    def put_cached_embeddings(self, model: str, items: dict[str, np.ndarray]) -> None:
        """Nothing to do: the vectors are stored with their memories."""
