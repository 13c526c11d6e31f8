"""The storage state behind a MemoryManager: lazy catalog, embedder and index, and the write path.

Start-up order: the catalog opens on the first operation (a few ms); the embedder loads on the
first embedding; the vector index opens on the first write or search, is checked for corruption,
reconciled with the catalog and then indexes every row still marked un-indexed.

If the storage path is unusable, memory is disabled with the reason (every call raises
:class:`MemoryDisabledError`) and the host keeps running. If the index is corrupted, the error is
logged with recovery instructions and search keeps working from the catalog alone (exact dense
scoring + lexical) until ``reindex(reset=True)`` rebuilds it.

The index opens on first use: its files are health-checked only after a crash (or when a quick
look finds damage), it is reconciled with the catalog (vectors of deleted rows dropped, missing
ones re-added) and then every row still marked un-indexed is indexed. New memories are indexed in
the background; until then, and for rows another process wrote since this one opened the index,
search scores them exactly from the catalog (:meth:`IndexMaintenance.pending_after`).

Deleted memories' vectors go the other way: the catalog delete queues them (``index_deletes``, in
the same transaction) and :meth:`IndexMaintenance.after_delete` applies the queue at once for a
few, in the background for many (Chroma takes ~0.3 ms a vector, holding the GIL), after the
neighbours' session windows a large delete also left (:mod:`remindful.engine.windows`). Until then
search drops their hits: every index hit is checked against the catalog, and this process also
skips the ones it knows are queued, asking the index for more to make up. A crash leaves the
queue to the next open, which drains it in the background; nothing deleted can come back, since
the catalog no longer holds it.

A store commits its rows to the catalog and hands them to :meth:`IndexAdditions.index_rows`, which
indexes them in the background (``performance.async_indexing``) or at once. Rows committed without
a vector (``performance.defer_embedding``) are embedded there first, outside the index lock. Until
they are indexed, search scores them exactly from the catalog, after waiting for the vectors this
process has yet to compute (:meth:`IndexAdditions.await_embeddings`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from remindful.config import Settings
from remindful.embed.base import Embedder
from remindful.engine import windows
from remindful.engine.attachments import attach_files, remove_copies
from remindful.engine.background import (
    AccessRecorder,
    BackgroundIndexer,
    DeleteFinisher,
    IndexHolders,
    IndexLock,
    close_at_exit,
)
from remindful.engine.catalog import Catalog, MemoryRow, catalog_damaged, integrity_problem
from remindful.engine.redact import Redactor, add_counts, redactor_for
from remindful.engine.search import rank
from remindful.engine.sqlfilter import SqlFilter, build_filter, index_metadata, to_epoch
from remindful.engine.validation import (
    Limits,
    check_batch,
    check_metadata,
    check_text,
    check_unicode,
    parse_enum,
    validate_item,
)
from remindful.errors import (
    CorruptionError,
    MemoryDisabledError,
    NotFoundError,
    RemindfulError,
    StorageError,
    ValidationError,
)
from remindful.index.base import VectorIndex
from remindful.model import (
    DEFAULT_CLASS,
    ChunkMetadata,
    Memory,
    MemoryClass,
    MemorySource,
    MemoryType,
    SearchHit,
    content_hash,
    new_memory_id,
)
from remindful.runtime import new_session_id

log = logging.getLogger("remindful")

INDEX_BATCH = 1000
#: After a transient failure to open the vector index, how long search uses the catalog alone
#: before the index is opened again.
INDEX_RETRY_S = 1.0
#: A failed index write is retried this many times in all, the index reloaded before each retry.
INDEX_WRITE_TRIES = 2
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
#: Collections of up to this many rows are searched exhaustively: asked for every row, HNSW visits
#: every node it can reach (2-5 ms with chromadb 1.5 at 1,000-2,000 rows, against ~1 ms for 100).
#: At its usual candidate list (ef = 100) HNSW misses outliers among many near-identical vectors:
#: one distinct memory (cosine 0.80 with the query) among 1,100 near-identical notes was not found
#: in 5 of 12 rebuilt indexes, and needed ef = 400 in one.
EXHAUSTIVE_BELOW = 2000
#: How long export, backup, dedup and cleanup wait for this process's pending embeddings.
VECTORS_READY_TIMEOUT_S = 60.0
_STORE_KEYS = {"content", "type", "metadata", "session_id", "timestamp", "source", "memory_class", "chunk"}
SIZE_WARNING_RATIO = 0.9
#: Near the size quota, a store warns again only after this long, or when the usage grew by a point.
SIZE_WARNING_INTERVAL_S = 600.0
#: How long a measured storage size is used before the directory is walked again.
SIZE_MAX_AGE_S = 5.0


def _indexed_of(memory_type: MemoryType) -> SqlFilter:
    """The catalog's rows of ``memory_type`` marked indexed: what its collection should hold."""
    return build_filter(types=[memory_type.value]) & SqlFilter("indexed = 1")


class Store:
    """Lazily opened parts of one storage directory and the operations that span them."""

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: Embedder | None,
        index: VectorIndex | None,
        exact_before_index: int = 0,
    ) -> None:
        """``exact_before_index``: until this process opened the vector index, a search over at most
        this many memories scores them all exactly from the catalog instead of opening it (for a
        short-lived reader such as a hook: importing chromadb and loading the graph take a second)."""
        self.settings = settings
        self.exact_before_index = exact_before_index
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
        # The IndexLock generation this process's view of the index files is current at (-1: none).
        self._index_generation = -1
        self._exiting = False  # set by close_for_exit: open nothing new
        self._refreshed_at = 0.0  # monotonic time of the last _refresh_view
        self._index_retry_at = 0.0  # after a transient failure to open the index: when to try again
        self._index_failed: str | None = None  # a write failed: what is un-indexed waits for the next write
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
        self._redactor: Redactor | None = redactor_for(settings.privacy)  # rules compile on first need
        self._session_id: str | None = None
        #: A session whose memories rank higher in later searches (:meth:`resume_session`).
        self._resumed_session: str | None = None
        self._lock = threading.RLock()
        self.store_ms: deque[float] = deque(maxlen=1000)
        self.search_ms: deque[float] = deque(maxlen=1000)
        self.stores = 0
        self.searches = 0

    # -- lazy parts -----------------------------------------------------------------------------

    def ready(self) -> Store:
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
            if self.path.stat().st_mode & 0o077:  # existed (or was made) readable by others: tighten it
                try:
                    os.chmod(self.path, 0o700)
                except OSError as exc:  # not ours, or a filesystem without modes: usable, but say so
                    log.warning("cannot make the storage directory %s private (0700): %s", self.path, exc)
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
        close_at_exit(self)
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
                        model_dir=settings.model_dir,
                        backend=settings.backend,
                        quantize=settings.quantize,
                        batch_size=self.settings.performance.embedding_batch_size,
                    )
                    # The current catalog, not this one: a restore closes the store and reopens it.
                    self._embedder = CachedEmbedder(
                        inner, lru_size=self.settings.embeddings.cache_size, store=StoredVectors(lambda: self.catalog)
                    )
        return self._embedder

    # -- memories: store, read, search, delete -------------------------------------------------

    @property
    def session_id(self) -> str:
        """This process's session, generated on first use (``session_YYYYmmdd_HHMMSS_xxxx``)."""
        with self._lock:
            if self._session_id is None:
                self._session_id = new_session_id()
            return self._session_id

    @session_id.setter
    def session_id(self, value: str) -> None:
        self._session_id = _text(value, "session_id")

    @property
    def current_session(self) -> str | None:
        """This process's session if one was used yet, else None (asking :attr:`session_id` makes one)."""
        return self._session_id

    @property
    def resumed_session(self) -> str | None:
        """The session :meth:`resume_session` ranks higher in searches, or None."""
        return self._resumed_session

    def forget_resumed(self, session_id: str | None = None) -> None:
        """Stop ranking the resumed session higher (only if it is ``session_id``, when given)."""
        if session_id is None or self._resumed_session == session_id:
            self._resumed_session = None

    # -- writes ---------------------------------------------------------------------------------

    def store_batch(self, items: Sequence[Mapping[str, Any]], *, defer: bool | None = None) -> list[str]:
        """Store many memories in one catalog transaction with one batched embedding call.

        Each item takes the keyword arguments of :meth:`store`. All or nothing: a bad item
        raises ValidationError (naming ``items[i].field``) before anything is written.
        ``defer=False`` embeds before the commit, so an embedding failure raises EmbedderError and
        stores nothing (the capture paths' ERR-P1-01); by default ``performance.defer_embedding``
        decides.
        """
        if not isinstance(items, Sequence) or isinstance(items, str | bytes):
            raise ValidationError("items", "expected a list of dicts with at least 'content'")
        check_batch(list(items), Limits.of(self.settings.limits))
        state = self.ready()
        now = time.time()
        rows: list[MemoryRow] = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise ValidationError(f"items[{i}]", "expected a dict with at least 'content'")
            unknown = set(item) - _STORE_KEYS
            if unknown:
                raise ValidationError(f"items[{i}]", f"unknown keys {sorted(unknown)}; expected {sorted(_STORE_KEYS)}")
            rows.append(self._new_row(item, i if len(items) > 1 else None, now))
        if not rows:
            return []
        # The rows of a batch share one timestamp, so their ids differ by 32 random bits only: with
        # thousands of rows two can collide (0.6 % of 7,000-row batches), which failed the batch.
        taken: set[str] = set()
        for row in rows:
            while row.id in taken:
                row.id = new_memory_id(MemoryType(row.type), datetime.fromtimestamp(row.created_at, UTC))
            taken.add(row.id)
        if defer is False or not state.defers_embedding():
            vectors = state.embedder.embed([r.content for r in rows])
            for row, vector in zip(rows, vectors, strict=True):
                row.embedding = vector
        victims = state.make_room(rows)
        attach_files(self.settings, rows)
        state.commit_new(rows, evict=victims)
        state.index_rows(rows)
        return [r.id for r in rows]

    def vectors_ready(self) -> Store:
        """The ready store, once the rows this process stored have vectors (for work that reads them)."""
        state = self.ready()
        state.await_embeddings(VECTORS_READY_TIMEOUT_S)
        return state

    def _new_row(self, item: Mapping[str, Any], position: int | None, now: float) -> MemoryRow:
        prefix = "" if position is None else f"items[{position}]."
        fields = validate_item(item, prefix, Limits.of(self.settings.limits))
        # Privacy: secrets are redacted before anything is written (capture/filters.py).
        fields["content"], fields["metadata"] = self.redact(fields["content"], fields["metadata"])
        memory_type: MemoryType = fields["type"]
        metadata: dict[str, Any] = fields["metadata"]
        created = fields["timestamp"] if fields["timestamp"] is not None else now
        created_dt = datetime.fromtimestamp(created, UTC)
        auto_delete = self.settings.privacy.auto_delete_days
        importance = metadata.get("importance")
        return MemoryRow(
            id=new_memory_id(memory_type, created_dt),
            type=memory_type.value,
            content=fields["content"],
            metadata=json.dumps(metadata, ensure_ascii=False, allow_nan=False),
            source=fields["source"].value,
            memory_class=(fields["memory_class"] or DEFAULT_CLASS[memory_type]).value,
            session_id=fields["session_id"] or self.session_id,
            created_at=created,
            importance=float(importance) if isinstance(importance, int | float) and 0 <= importance <= 1 else 0.5,
            bookmarked=bool(metadata.get("bookmarked") or metadata.get("manual_save")),
            content_hash=content_hash(fields["content"]),
            chunk=json.dumps(fields["chunk"]) if fields["chunk"] else None,
            expires_at=created + auto_delete * 86400 if auto_delete else None,
        )

    def update(self, memory_id: str, content: str | None = None, metadata: Mapping[str, Any] | None = None) -> Memory:
        """Replace a memory's content and/or merge keys into its metadata (a key set to None is
        removed). The content is re-embedded. Returns the updated memory."""
        state = self.ready()
        row = self._row(memory_id)
        if content is not None:
            limits = self.settings.limits
            row.content, _ = self.redact(
                check_text(content, "content", max_chars=limits.content_chars, setting="content_chars"), {}
            )
            row.content_hash = content_hash(row.content)
            row.embedding = state.embedder.embed([row.content])[0]
        if metadata is not None:
            if not isinstance(metadata, Mapping):
                raise ValidationError("metadata", "expected a dict")
            merged = {**json.loads(row.metadata), **metadata}
            merged = self.redact(row.content, {k: v for k, v in merged.items() if v is not None})[1]
            row.metadata = validate_item(
                {"content": row.content, "metadata": merged}, "", Limits.of(self.settings.limits)
            )["metadata"]
            row.metadata = json.dumps(row.metadata, ensure_ascii=False, allow_nan=False)
            row.bookmarked = bool(merged.get("bookmarked") or merged.get("manual_save"))
        state.commit_update(row)
        state.index_rows([row])
        return self.get(memory_id)

    def delete(self, memory_id: str) -> bool:
        """Delete one memory everywhere; False if there was none with that id."""
        return self.delete_many([_text(memory_id, "memory_id")]) == 1

    def delete_by_file_path(self, path: str | os.PathLike[str]) -> int:
        """Delete every memory (Markdown chunks) taken from the file at ``path``; returns how many."""
        given = str(path)
        flt = build_filter(filters={"file_path": {"$in": [given, str(Path(given).expanduser().resolve())]}})
        rows = self.ready().catalog.read(f"SELECT id FROM memories WHERE {flt.sql}", flt.params)
        return self.delete_many([r[0] for r in rows])

    # -- reads ----------------------------------------------------------------------------------

    def get(self, memory_id: str) -> Memory:
        """The memory with this id; raises NotFoundError ("Memory not found", suggests search)."""
        return _to_memory(self._row(memory_id))

    def _row(self, memory_id: str) -> MemoryRow:
        memory_id = _text(memory_id, "memory_id")
        row = self.ready().catalog.get_rows([memory_id]).get(memory_id)
        if row is None:
            raise NotFoundError(memory_id)
        return row

    def get_batch(self, ids: Sequence[str]) -> list[Memory | None]:
        """Memories for ``ids`` in request order; None where an id does not exist. One query."""
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise ValidationError("ids", "expected a list of memory ids")
        found = self.ready().catalog.get_rows([_text(i, f"ids[{n}]") for n, i in enumerate(ids)])
        return [_to_memory(found[i]) if i in found else None for i in ids]

    def list_memories(
        self,
        type: str | MemoryType | None = None,
        session_id: str | None = None,
        limit: int = 50,
        offset: int = 0,
        *,
        source: str | MemorySource | None = None,
    ) -> list[Memory]:
        """Memories newest first, optionally of one type, one session and/or one source
        (``source="hook"``: the spec's find_by_source)."""
        types = [_type(type).value] if type is not None else None
        sources = {"source": _source(source).value} if source is not None else None
        flt = build_filter(types=types, session_id=session_id, filters=sources)
        rows = self.ready().catalog.select_rows(
            flt, limit=_bounded(limit, "limit", 1, 10_000), offset=_bounded(offset, "offset", 0, 10**9)
        )
        return [_to_memory(r) for r in rows]

    def search(
        self,
        query: str,
        types: Sequence[str | MemoryType] | None = None,
        limit: int = 10,
        filters: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        since: datetime | str | float | None = None,
        until: datetime | str | float | None = None,
        min_score: float | None = None,
        collapse: bool = False,
    ) -> list[SearchHit]:
        """Hybrid search (dense + lexical, fused); see :mod:`remindful.engine.search`. Filters apply to
        every space. Best first; scores are calibrated relevances in [0, 1], and hits scoring under
        ``min_score`` are left out (None: none is; the services judge relevance with their own
        thresholds, while ``MemoryManager.search`` and context apply the configured floors). ``collapse``
        folds near-duplicates into one hit and puts newer versions first (what users and context see;
        off by default for the services, which count repeats)."""
        query = check_text(query, "query", max_chars=self.settings.limits.query_chars, setting="query_chars")
        if filters is not None:
            check_metadata(filters, "filters", Limits.of(self.settings.limits))
        limit = _bounded(limit, "limit", 1, 1000)
        if min_score is not None and (
            isinstance(min_score, bool) or not isinstance(min_score, int | float) or not 0 <= min_score <= 1
        ):
            raise ValidationError("min_score", f"expected a number from 0 to 1, got {min_score!r}")
        type_values = [_type(t).value for t in types] if types else None
        flt = build_filter(
            types=type_values,
            session_id=session_id,
            since=None if since is None else to_epoch(since, "since"),
            until=None if until is None else to_epoch(until, "until"),
            filters=filters,
        ) & SqlFilter("(expires_at IS NULL OR expires_at > ?)", (time.time(),))
        state = self.ready()
        started = time.perf_counter()
        # Read your writes: what this process stored is dense-searchable (lexically it is at once).
        state.await_embeddings(self.settings.performance.search_timeout_ms / 1000)
        restricted = bool(filters or session_id or since is not None or until is not None)
        searched_types = [MemoryType(t) for t in type_values] if type_values else list(MemoryType)
        counts = state.type_counts()
        searched = sum(counts.get(t.value, 0) for t in searched_types)
        # A short-lived reader (exact_before_index) scores a small store exactly from the catalog
        # rather than open the index: faster, and exact (what the index approximates).
        exact = self.exact_before_index > 0 and searched <= self.exact_before_index
        exact = exact and not state.index_state()["opened"]
        results = rank(
            state.catalog,
            lambda: _embed_query(state.embedder, query),
            query,
            flt,
            settings=self.settings.search,
            limit=limit,
            dense_from_index=None if exact else state.dense_query(searched_types, counts),
            restricted=restricted,
            typed=type_values is not None and len(set(type_values)) < len(MemoryType),
            searched=searched,
            pending_after=None if exact or state.index is None else state.pending_after(),
            resumed_session=self._resumed_session,
            min_score=0.0 if min_score is None else min_score,
            diverse=collapse,
            embed_missing=state._embed_and_save,
        )
        state.record_search(time.perf_counter() - started, [hit.row.id for hit in results])
        return [
            SearchHit(
                id=hit.row.id,
                type=MemoryType(hit.row.type),
                content=hit.row.content,
                metadata=json.loads(hit.row.metadata),
                score=hit.score,
                created_at=datetime.fromtimestamp(hit.row.created_at, UTC),
                session_id=hit.row.session_id,
                source=MemorySource(hit.row.source),
                sources=hit.spaces,
                similar=hit.similar,
                similar_ids=hit.similar_ids,
                superseded_by=hit.superseded_by,
            )
            for hit in results
        ]

    def resume_session(self, session_id: str) -> int:
        """Rank this session's memories higher in later searches; returns its memory count."""
        session_id = _text(session_id, "session_id")
        count = self.ready().catalog.count(build_filter(session_id=session_id))
        if count == 0:
            raise NotFoundError(session_id, kind="session")
        self._resumed_session = session_id
        return count

    def redact(self, content: str, metadata: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """``content`` and ``metadata`` with every secret replaced (``privacy.redact``, on by default):
        every write goes through here before anything reaches the disk. Hits are counted in
        ``capture_stats``; a no-op when redaction is off."""
        redactor = self._redactor
        if redactor is None:
            return content, metadata
        counts: dict[str, int] = {}
        content = redactor.redact(content, counts)
        metadata = redactor.redact_value(metadata, counts)
        if counts:
            hits = {"redacted_" + name: n for name, n in counts.items()}
            try:
                self.ready().catalog.write(lambda conn: add_counts(conn, hits), what="recording redaction counts")
            except StorageError as exc:  # counts are best effort; the redaction stands
                log.warning("could not record redaction counts: %s", exc)
        return content, metadata

    # -- write path -----------------------------------------------------------------------------

    def commit_new(self, rows: Sequence[MemoryRow], *, evict: Sequence[str] = ()) -> None:
        """Insert ``rows`` and delete ``evict`` (quota evictions, audited as ``quota_evict``) in ONE
        transaction: a crash never leaves memories evicted for rows that were not stored."""
        started = time.perf_counter()
        gone: list[tuple[str, str]] = []

        def run(conn: Any) -> tuple[int, int]:
            if evict:
                gone[:] = Catalog.delete_in(conn, evict, reason="quota_evict", mend_later=len(evict) > INLINE_DELETE)
            before = conn.execute("SELECT coalesce(max(rowid), 0) FROM memories").fetchone()[0]
            Catalog.insert_memories(conn, rows)
            for session_id, at in {(r.session_id, r.created_at) for r in rows if r.session_id}:
                self.catalog.ensure_session(conn, session_id, at)
            return before, conn.execute("SELECT max(rowid) FROM memories").fetchone()[0]

        span = self.catalog.write(run, what="storing memories")
        if gone:
            remove_copies(self.path, [mid for mid, _t in gone])
            self.after_delete(gone, later=len(evict) > INLINE_DELETE)
            log.info("quota: evicted %d least important memories to store %d", len(gone), len(rows))
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
            windows.after_update(conn, row.id)
            self.catalog.audit(conn, "update", row.id, {})

        self.catalog.write(run, what="updating a memory")
        if row.embedding is None:
            row.embedding = self.catalog.embeddings([row.id]).get(row.id)

    def delete_many(self, ids: Sequence[str], *, reason: str | Mapping[str, str] = "delete") -> int:
        """Delete memories everywhere; returns how many existed. ``reason`` (or ``reason[id]``) is
        the audit-log action. The catalog delete commits first and is the truth: when this returns
        no read or search finds the memories. Their vectors and, for more than
        :data:`~remindful.engine.INLINE_DELETE` memories, their neighbours' session windows
        follow (see :meth:`after_delete`); attachment copies go here."""
        if not ids:
            return 0
        ids = list(ids)
        later = len(ids) > INLINE_DELETE
        gone = self.ready().catalog.delete_ids(ids, reason=reason, mend_later=later)
        if not gone:
            return 0
        remove_copies(self.path, [mid for mid, _t in gone])
        self.after_delete(gone, later=later)
        return len(gone)

    def make_room(self, rows: Sequence[MemoryRow]) -> list[str]:
        """The memories to evict (the least important unprotected ones) so that ``rows`` fit the
        per-type item quotas; :meth:`commit_new` deletes them in the insert's transaction. Warns
        when the storage nears its size quota. Raises ValidationError for a batch that
        alone holds more memories of a type than its quota: it could never be stored whole."""
        incoming: dict[str, int] = {}
        evict: list[str] = []
        for row in rows:
            incoming[row.type] = incoming.get(row.type, 0) + 1
        counts = self.type_counts()
        for type_value, n_new in incoming.items():
            limit = self.settings.max_items_for(MemoryType(type_value))
            if n_new > limit:
                raise ValidationError(
                    "items",
                    f"at most {limit} {type_value} memories (that type's quota), got {n_new}; nothing was stored: "
                    "store fewer at a time or raise the quota (retention.max_items_per_collection)",
                )
            excess = counts.get(type_value, 0) + n_new - limit
            if excess <= 0:
                continue
            from remindful.engine.importance import least_important

            victims = least_important(self.catalog, type_value, excess, time.time())
            if len(victims) < excess:
                log.warning(
                    "%s_memories is over its quota of %d but every remaining memory is bookmarked", type_value, limit
                )
            evict += victims
        self._warn_if_near_size_quota()
        return evict

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
                "Memory storage at %.0f%% of its quota (%s MB of %s MB): enable auto-cleanup "
                "(retention.cleanup.enabled) or increase storage.max_size_mb",
                100 * used / quota,
                megabytes(used),
                megabytes(quota),
            )

    # -- read path ------------------------------------------------------------------------------

    def record_search(self, seconds: float, ids: list[str]) -> None:
        self.searches += 1
        self.search_ms.append(seconds * 1000)
        if self._access is not None:
            self._access.record(ids)

    def index_state(self) -> dict[str, Any]:
        """The vector index as this process sees it, without opening it (unlike :meth:`index_status`):
        ``opened`` is False until the first write or search needs it; ``available`` is None until
        then, else whether it is usable; ``error`` says why it is not (None if it is)."""
        opened = self._index_opened
        return {"opened": opened, "available": self._index is not None if opened else None, "error": self._index_error}

    def embedding_cache_stats(self) -> dict[str, Any]:
        """The embedding cache's figures (hits, misses, entries), or {} while no embedder is loaded:
        asking never loads the model."""
        embedder = self._embedder
        return embedder.stats() if embedder is not None and hasattr(embedder, "stats") else {}

    def close_for_exit(self) -> None:
        """:meth:`close` at interpreter exit (the program did not close the store): queued work is
        finished with what is loaded, but neither the index nor the embedder is opened now (the
        interpreter refuses new threads by then); what is left is indexed at the next open."""
        self._exiting = True
        self.close()

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

    # -- the vector index: open, reconcile, query, delete, rebuild ------------------------------

    @property
    def index(self) -> VectorIndex | None:
        """The vector index, or None while it is unusable (the reason is in ``index_status``). A
        transient failure to open it (a lock, an unreachable server) is retried after
        ``INDEX_RETRY_S``; damage waits for ``reindex(reset=True)``."""
        if self._exiting and not self._index_opened:
            return None
        if not self._index_opened or (self._index_retry_at and time.monotonic() >= self._index_retry_at):
            with self._init_lock:
                if not self._index_opened or (self._index_retry_at and time.monotonic() >= self._index_retry_at):
                    self._index_retry_at = 0.0
                    self._open_index()
                    self._index_opened = True
        return self._index

    @contextlib.contextmanager
    def _writing(self, index: VectorIndex) -> Iterator[None]:
        """Hold the index lock for a write through ``index``. If another process wrote the index
        since this one loaded its view, the view is reloaded first: chromadb's embedded client
        writes its in-memory copy of a graph back over the shared files, so a write through a
        stale copy would drop the other processes' vectors ("Error finding id" later)."""
        with self._index_lock() as generation:
            if generation != self._index_generation:
                self._reload_view(index)
            yield
            self._index_generation = generation + 1
            self._index_rowid = self._view_floor()  # the view is current: what is marked indexed is in it

    def _reload_view(self, index: VectorIndex) -> None:
        """Under the index lock: load the index files afresh (if the index keeps a copy of them)
        and note which rows the new view may lack (:meth:`_view_floor`)."""
        floor = self._view_floor()
        reload = getattr(index, "reload", None)
        if reload is not None:
            reload()
        self._index_rowid = floor

    def _view_floor(self) -> int:
        """A rowid up to which every row marked indexed is in the index files as they are now
        (read under the index lock): rows not yet indexed may be indexed by another process later,
        so the view is complete only below the first of them."""
        top, first = self.catalog.read(
            "SELECT (SELECT coalesce(max(rowid), 0) FROM memories), (SELECT min(rowid) FROM memories WHERE indexed = 0)"
        )[0]
        return int(top) if first is None else min(int(top), int(first) - 1)

    def _refresh_view(self, index: VectorIndex, *, force: bool = False) -> None:
        """Bring the view up to date (a search found many rows it may lack): reload it if another
        process wrote the index since (or ``force``), else just note what it holds."""
        self._refreshed_at = time.monotonic()
        with self._index_lock(write=False) as generation:
            if force or generation != self._index_generation:
                self._reload_view(index)
                self._index_generation = generation
            else:
                self._index_rowid = self._view_floor()

    def check_catalog(self) -> None:
        """Raise CorruptionError (``part="catalog"``) if SQLite's quick check finds the catalog
        damaged: before a step that would be destructive on a damaged catalog. Reads the whole file."""
        problem = integrity_problem(self.catalog.path)
        if problem is not None:
            raise catalog_damaged(problem)

    def index_lock(self) -> contextlib.AbstractContextManager[int]:
        """Hold the vector-index lock for a ``with`` block: no thread or process of this storage
        directory writes the index meanwhile (a backup copies the index files under it). Not
        re-entrant: do not call index-writing Store methods inside the block."""
        return self._index_lock()

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
                preload = getattr(index, "preload", None)
                if preload is not None:
                    preload()  # not under the lock: other processes would wait for the import
                with self._index_lock(write=False) as generation:
                    self._reload_view(index)  # the files are read under the lock: no writer is half-way
                    self._index_generation = generation
                queued = self._sync_index(index)
            except CorruptionError as exc:
                if exc.part == "catalog" or exc.backup_path is not None or not hasattr(index, "check"):
                    raise
                index.close()
                index.check()  # back up the damaged files and describe the damage
                # The files are sound: the error was passing (another process was writing). Retry.
                raise StorageError(f"the vector index failed while opening ({exc})") from exc
        except CorruptionError as exc:
            if exc.part == "catalog":  # not the index's fault: the caller reports it
                with contextlib.suppress(Exception):
                    index.close()
                raise
            self._index_error = str(exc)
            copied = f" (a copy of the damaged files is in {exc.backup_path})" if exc.backup_path else ""
            copied = "" if exc.backup_path and exc.backup_path in str(exc) else copied
            log.error(
                "Vector index unusable: %s%s. Search continues from the catalog; "
                "run `remindful reindex --reset` to rebuild the index.",
                exc,
                copied,
            )
            return
        except StorageError as exc:
            self._index_error = str(exc)
            self._index_retry_at = time.monotonic() + INDEX_RETRY_S
            log.warning(
                "Vector index unavailable: %s. Search continues from the catalog; retrying in %.0f s.",
                exc,
                INDEX_RETRY_S,
            )
            with contextlib.suppress(Exception):
                index.close()
            return
        self._index, self._index_error = index, None
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
        differs only by them needs no comparison of ids. Returns them.

        The counts are compared first without the index lock (one small read each); the ids are
        compared, and stale vectors removed, only under it: another process may be between its
        upsert and marking those rows indexed, and its vectors are not stale."""
        queued = self._queued_deletes()
        for memory_type in MemoryType:
            if self._index_agrees(index, memory_type, queued):
                continue
            with self._writing(index):
                queued = self._queued_deletes()
                if self._index_agrees(index, memory_type, queued):
                    continue
                flt = _indexed_of(memory_type)
                in_index = set(index.ids(memory_type.collection))
                in_catalog = {r[0] for r in self.catalog.read(f"SELECT id FROM memories WHERE {flt.sql}", flt.params)}
                extra = sorted(in_index - in_catalog)
                if extra:
                    index.delete(memory_type.collection, extra)
                missing = sorted(in_catalog - in_index)
                self.catalog.mark_indexed(missing, value=False)
            log.info("index %s: removed %d stale, re-adding %d", memory_type.collection, len(extra), len(missing))
        self._index_pending(index)
        return queued

    def _queued_deletes(self) -> list[tuple[str, str]]:
        """(memory id, type) of deleted rows whose vectors are still queued for deletion: the index
        may hold them until the background deleter drains them."""
        return self.catalog.read(
            "SELECT memory_id, type FROM index_deletes "
            "WHERE NOT EXISTS (SELECT 1 FROM memories WHERE memories.id = index_deletes.memory_id)"
        )

    def _index_agrees(self, index: VectorIndex, memory_type: MemoryType, queued: list[tuple[str, str]]) -> bool:
        """Whether the index's count for ``memory_type`` is the catalog's indexed count (plus the
        vectors still queued for deletion)."""
        expected = self.catalog.count(_indexed_of(memory_type))
        waiting = sum(1 for _mid, t in queued if t == memory_type.value)
        return index.count(memory_type.collection) in (expected, expected + waiting)

    def _max_rowid(self) -> int:
        return int(self.catalog.read("SELECT coalesce(max(rowid), 0) FROM memories")[0][0])

    def pending_after(self) -> int:
        """The rowid above which this process's index view may lack rows (beside rows not marked indexed).

        When too many accumulate, the view is refreshed (at most once a second): reloaded from the
        files if another process wrote them since (:meth:`_refresh_view`)."""
        # An upper bound (rowids only grow): counting rows would read the whole table.
        index = self._index
        if (
            index is not None
            and self._max_rowid() - self._index_rowid > PENDING_REFRESH
            and time.monotonic() - self._refreshed_at >= 1.0
        ):
            self._refresh_view(index)
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
        with contextlib.nullcontext() if locked else self._writing(index):
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
        with self._writing(index):
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
                n = counts.get(memory_type.value, 0)
                if n:
                    # A small collection is asked for all its rows: HNSW then visits every node it
                    # can reach, not just the ones its usual candidate list (ef) gets to.
                    want = max(k, n) if n <= EXHAUSTIVE_BELOW else k
                    gone = self._unindexing.get(memory_type.value)
                    if not gone:
                        found += self._query_collection(index, memory_type, vector, want)[:k]
                        continue
                    # Deleted, vectors not removed yet: skip them and ask for more to make up.
                    hits = self._query_collection(index, memory_type, vector, want + min(len(gone), OVERFETCH * k))
                    found += [(mid, score) for mid, score in hits if mid not in gone][:k]
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
            log.info("vector index query of %s failed (%s); reloading and retrying", memory_type.collection, exc)
        try:  # a view loaded while another process was writing the files: load it again, under the lock
            self._refresh_view(index, force=True)
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
        """Rebuild the index from the catalog (``reset``: move the index files aside first). A
        damaged catalog raises CorruptionError before anything is touched: the index is rebuilt
        from it, so the index may be the better copy of what the catalog lost."""
        self.ready()
        self.check_catalog()
        with self._init_lock:
            index = self._index or self._new_index()

            def restart(conn: Any) -> None:
                conn.execute("UPDATE memories SET indexed = 0")
                conn.execute("DELETE FROM index_deletes")  # the index is rebuilt from the catalog

            with self._index_lock() as generation:  # other processes reload their view at their next write
                if reset and hasattr(index, "reset_files"):
                    index.reset_files()
                else:
                    index.reset()
                self.catalog.write(restart, what="reindex")
                self._index_generation, self._index_rowid = generation + 1, self._view_floor()
            self._unindexing.clear()
            self._index_pending(index, progress)
            self._index, self._index_error, self._index_opened, self._index_retry_at = index, None, True, 0.0
        return {t.collection: index.count(t.collection) for t in MemoryType}

    # -- adding stored memories to the index ---------------------------------------------------

    def defers_embedding(self) -> bool:
        """Whether new rows are committed without a vector and embedded by the background indexer
        (``performance.defer_embedding`` with ``async_indexing``)."""
        performance = self.settings.performance
        return performance.async_indexing and performance.defer_embedding

    def index_rows(self, rows: Sequence[MemoryRow]) -> None:
        """Add rows to the vector index: in the background (``performance.async_indexing``) or now.
        Rows without a vector are embedded first, there. Until then search scores them exactly (and
        waits for the ones this process has yet to embed); on failure they stay marked un-indexed
        and are indexed at the next open."""
        unembedded = [r.id for r in rows if r.embedding is None]
        if unembedded:
            with self._embedded:
                self._unembedded.update(unembedded)
        if self.settings.performance.async_indexing:
            if self._indexer is None:
                with self._init_lock:
                    if self._indexer is None:
                        self._indexer = BackgroundIndexer(self.index_ids, prepare=self._embed_stored)
            self._indexer.submit([r.id for r in rows])
        else:
            self.index_ids([r.id for r in rows])

    def await_embeddings(self, timeout: float) -> bool:
        """Before a search: wait (at most ``timeout`` seconds) until the rows this process stored
        without a vector have one, or their embedding failed; False on timeout."""
        with self._embedded:
            return self._embedded.wait_for(lambda: not self._unembedded, timeout)

    def index_ids(self, ids: list[str]) -> None:
        """Index the memories with these ids that are still un-indexed (read under the index lock,
        so a memory deleted meanwhile is not indexed again)."""
        rows: list[MemoryRow] = []
        try:
            self._embed_stored(ids)  # first: search needs the vectors even without an index
        except RemindfulError as exc:
            log.warning("stored %d memories but could not embed them yet (%s); they will be later", len(ids), exc)
        index = self.index
        if index is None:
            return
        self._spans.pop(ids[0], None)
        for attempt in range(INDEX_WRITE_TRIES):
            try:
                with self._writing(index):
                    found = self.catalog.get_rows(ids)
                    vectors = self.catalog.embeddings([i for i in ids if i in found and not found[i].indexed])
                    rows = [found[i] for i in ids if i in vectors]
                    for row in rows:
                        row.embedding = vectors[row.id]
                    if rows:
                        self._upsert(index, rows, locked=True)
                break
            except RemindfulError as exc:
                self._index_generation = -1  # whatever went wrong, the next write reloads the view first
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
        if self._index_failed is not None:  # an earlier write failed: index what it left
            self._index_failed = None
            try:
                self._index_pending(index)
            except RemindfulError as exc:
                self._index_failed = str(exc)
                self._index_generation = -1

    def _embed_stored(self, ids: list[str]) -> None:
        """Embed the memories among ``ids`` committed without a vector (outside the index lock:
        other processes need not wait for the model)."""
        try:
            if self._unembedded.isdisjoint(ids) or (self._exiting and self._embedder is None):
                return
            self._embed_and_save(self.catalog.without_embeddings(ids))
        finally:
            with self._embedded:
                self._unembedded.difference_update(ids)
                self._embedded.notify_all()

    def _embed_and_save(self, texts: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
        """Embed (id, content) pairs and save the vectors in the catalog; returns them by id."""
        if not texts:
            return {}
        vectors = self.embedder.embed([content for _, content in texts])
        found = {mid: vector for (mid, _), vector in zip(texts, vectors, strict=True)}
        self.catalog.set_embeddings(found)
        return found


__all__ = ["Store"]


class StoredVectors:
    """The persistent embedding cache of a store: the vectors its memories already hold, by content hash.

    Nothing is written here: every vector is persisted with its memory, so a second table of the
    same vectors (which once doubled the catalog's size) is not needed. Texts embedded but never
    stored (search queries) live in the in-memory LRU only. Vectors are reused only for the model
    recorded as the store's (the first embedder that asked); the ``embedding_cache`` table of older
    stores is still read.
    """

    def __init__(self, catalog: Callable[[], Catalog]) -> None:
        self._catalog = catalog
        self._models: dict[str, bool] = {}
        self._models_of: Catalog | None = None  # the catalog ``_models`` was learnt from

    def _owns(self, catalog: Catalog, model: str) -> bool:
        if catalog is not self._models_of:
            self._models, self._models_of = {}, catalog
        known = self._models.get(model)
        if known is None:
            recorded = catalog.claim_embedding_model(model)
            known = self._models[model] = recorded == model
            if not known:
                log.warning(
                    "this store's vectors were made by %s, the embedder is now %s: stored vectors are not reused",
                    recorded,
                    model,
                )
        return known

    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        catalog = self._catalog()
        found = catalog.vectors_by_hash(hashes) if self._owns(catalog, model) else {}
        rest = [h for h in hashes if h not in found]
        return {**found, **catalog.get_cached_embeddings(model, rest)} if rest else found

    def put_cached_embeddings(self, model: str, items: dict[str, np.ndarray]) -> None:
        """Nothing to do: the vectors are stored with their memories."""


def _embed_query(embedder: Embedder, query: str) -> Any:
    embed_query = getattr(embedder, "embed_query", None)
    return embed_query(query) if embed_query is not None else embedder.embed([query])[0]


def _to_memory(row: MemoryRow) -> Memory:
    chunk = json.loads(row.chunk) if row.chunk else None
    return Memory(
        id=row.id,
        type=MemoryType(row.type),
        content=row.content,
        metadata=json.loads(row.metadata),
        source=MemorySource(row.source),
        memory_class=MemoryClass(row.memory_class),
        session_id=row.session_id,
        created_at=datetime.fromtimestamp(row.created_at, UTC),
        importance=row.importance,
        access_count=row.access_count,
        last_accessed=datetime.fromtimestamp(row.last_accessed, UTC) if row.last_accessed else None,
        bookmarked=row.bookmarked,
        content_hash=row.content_hash,
        chunk=ChunkMetadata(**chunk) if chunk else None,
        expires_at=datetime.fromtimestamp(row.expires_at, UTC) if row.expires_at else None,
        updated_at=datetime.fromtimestamp(row.updated_at, UTC) if row.updated_at else None,
    )


def megabytes(value: float) -> str:
    """A size in MB for a message: whole MB from 10 up, else two significant digits (0.4, not 0)."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(field, "expected a non-empty string")
    check_unicode(value, field)
    return value


def _type(value: Any) -> MemoryType:
    result: MemoryType = parse_enum(MemoryType, value, "type")
    return result


def _source(value: Any) -> MemorySource:
    result: MemorySource = parse_enum(MemorySource, value, "source")
    return result


def _bounded(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(field, f"expected an integer from {low} to {high}, got {value!r}")
    return value
