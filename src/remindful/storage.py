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
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from remindful import context
from remindful.attachments import remove_copies
from remindful.background import AccessRecorder, BackgroundIndexer, IndexHolders, IndexLock
from remindful.catalog import Catalog, MemoryRow
from remindful.config import Settings
from remindful.embed.base import Embedder
from remindful.errors import (
    CorruptionError,
    MemoryDisabledError,
    RemindfulError,
    StorageError,
    ValidationError,
)
from remindful.filters import SqlFilter, build_filter, index_metadata, to_epoch
from remindful.index.base import VectorIndex
from remindful.model import ChunkMetadata, MemoryClass, MemorySource, MemoryType

log = logging.getLogger("remindful")

MAX_CONTENT_CHARS = 1_000_000
INDEX_BATCH = 1000
SIZE_WARNING_RATIO = 0.9
PENDING_REFRESH = 2000


def validate_item(item: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Validate one store item; raises ValidationError naming ``prefix + field``."""
    content = item.get("content")
    if not isinstance(content, str) or not content.strip():
        raise ValidationError(prefix + "content", "expected a non-empty string")
    if len(content) > MAX_CONTENT_CHARS:
        raise ValidationError(prefix + "content", f"expected at most {MAX_CONTENT_CHARS:,} characters")
    metadata = item.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise ValidationError(prefix + "metadata", f"expected a dict, got {type(metadata).__name__}")
    try:
        metadata = json.loads(json.dumps(dict(metadata), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValidationError(prefix + "metadata", f"expected JSON-safe values (no NaN, no objects): {exc}") from None
    if any(not isinstance(k, str) for k in metadata):
        raise ValidationError(prefix + "metadata", "expected string keys")
    session_id = item.get("session_id")
    if session_id is not None and (not isinstance(session_id, str) or not session_id.strip()):
        raise ValidationError(prefix + "session_id", "expected a non-empty string or None")
    timestamp = item.get("timestamp")
    try:
        epoch = None if timestamp is None else to_epoch(timestamp)
    except ValidationError as exc:
        raise ValidationError(prefix + "timestamp", exc.message.split(": ", 1)[-1]) from None
    chunk = item.get("chunk")
    if isinstance(chunk, ChunkMetadata):
        chunk = chunk.to_dict()
    elif chunk is not None:
        try:
            chunk = ChunkMetadata(**chunk).to_dict()
        except TypeError as exc:
            raise ValidationError(
                prefix + "chunk", f"expected parent_id, index, total[, start_word, end_word]: {exc}"
            ) from None
    return {
        "content": content,
        "type": _enum(MemoryType, item.get("type", "action"), prefix + "type"),
        "metadata": metadata,
        "session_id": session_id,
        "timestamp": epoch,
        "source": _enum(MemorySource, item.get("source", "manual"), prefix + "source"),
        "memory_class": None
        if item.get("memory_class") is None
        else _enum(MemoryClass, item["memory_class"], prefix + "memory_class"),
        "chunk": chunk,
    }


def _enum(kind: Any, value: Any, field: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        valid = ", ".join(m.value for m in kind)
        raise ValidationError(field, f"unknown value {value!r}; expected one of {valid}") from None


class StoreState:
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
        self._holders = IndexHolders(self.path / "index.holders")
        #: Run once when the catalog opens (the manager drains the hook spool here); a failure is
        #: logged and does not stop the open.
        self.on_open: list[Callable[[], None]] = []
        self._type_counts: dict[str, int] = {}
        self._counts_at = 0.0
        self._size_mb = 0.0
        self._size_at = 0.0
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
            probe = self.path / ".write-test"
            probe.write_bytes(b"")
            probe.unlink()
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

                    inner = self._given_embedder or default_embedder(
                        model_dir=self.settings.embeddings.model_dir, backend=self.settings.embeddings.backend
                    )
                    self._embedder = CachedEmbedder(
                        inner, lru_size=self.settings.embeddings.cache_size, store=self.catalog
                    )
        return self._embedder

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
        for row in rows:
            self._type_counts[row.type] = self._type_counts.get(row.type, 0) + 1
        self.stores += len(rows)
        self.store_ms.append((time.perf_counter() - started) * 1000 / len(rows))

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

    def delete(self, ids: list[str], *, reason: str = "delete") -> int:
        if not ids:
            return 0
        gone = self.catalog.delete_ids(ids)
        if not gone:
            return 0
        remove_copies(self.path, [mid for mid, _t in gone])
        self.catalog.write(
            lambda c: c.executemany(
                "INSERT INTO audit_log (at, action, memory_id, detail) VALUES (?,?,?,?)",
                [(time.time(), reason, mid, json.dumps({"type": t})) for mid, t in gone],
            ),
            what="auditing deletions",
        )
        by_type: dict[str, list[str]] = {}
        for mid, type_value in gone:
            by_type.setdefault(type_value, []).append(mid)
            self._type_counts[type_value] = max(self._type_counts.get(type_value, 1) - 1, 0)
        index = self.index
        if index is not None:
            try:
                with self._index_lock():
                    for type_value, group in by_type.items():
                        index.delete(MemoryType(type_value).collection, group)
            except RemindfulError as exc:  # stale vectors are filtered at search and removed at next open
                log.warning("deleted %d memories from the catalog; index cleanup deferred (%s)", len(gone), exc)
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

    def type_counts(self, *, max_age_s: float = 1.0) -> dict[str, int]:
        if time.monotonic() - self._counts_at > max_age_s:
            self._type_counts = dict(self.catalog.read("SELECT type, count(*) FROM memories GROUP BY type"))
            self._counts_at = time.monotonic()
        return self._type_counts

    def size_mb(self, *, max_age_s: float = 5.0) -> float:
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
        quota = self.settings.storage.max_size_mb
        used = self.size_mb()
        if used >= SIZE_WARNING_RATIO * quota:
            log.warning(
                "Memory storage at %.0f%% of its quota (%.1f MB of %.0f MB): enable auto-cleanup "
                "(retention.cleanup.enabled) or increase storage.max_size_mb",
                100 * used / quota,
                used,
                quota,
            )

    # -- read path ------------------------------------------------------------------------------

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
                    found += index.query(memory_type.collection, vector, k)
            return sorted(found, key=lambda item: -item[1])[:k]

        return run

    def record_search(self, seconds: float, ids: list[str]) -> None:
        self.searches += 1
        self.search_ms.append(seconds * 1000)
        if self._access is not None:
            self._access.record(ids)

    def stats(self) -> dict[str, Any]:
        from remindful.stats import build_stats

        return build_stats(self)

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

    def close(self) -> None:
        if self._indexer is not None:
            self._indexer.close()
            self._indexer = None
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


__all__ = ["IndexLock", "StoreState", "validate_item"]
