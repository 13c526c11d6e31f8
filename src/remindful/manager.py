"""MemoryManager: the one API every shell (CLI, MCP, HTTP, hooks) calls.

Every write follows one path: validate → catalog commit (acknowledged here: a crash after it
loses nothing) → embed (cached) → vector index, the last two in the background by default
(``performance.defer_embedding``; a search first waits for this process's pending embeddings). A
row the index did not take is marked un-indexed, and embedded and indexed at the next open (or
``reindex``). The catalog, the embedder and the index
start on first use, so opening costs a few milliseconds and loads no model.

Thread-safe: the catalog serialises its writes; the index and embedder are thread-safe.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from remindful.attachments import attach_files
from remindful.capture.filters import redact_for_store
from remindful.catalog import MemoryRow
from remindful.config import Settings
from remindful.embed.base import Embedder
from remindful.errors import (
    NotFoundError,
    ValidationError,
)
from remindful.filters import SqlFilter, build_filter, to_epoch
from remindful.index.base import VectorIndex
from remindful.manager_helpers import _bounded, _source, _text, _to_memory, _type
from remindful.manager_learning import LearningMixin
from remindful.manager_lifecycle import LifecycleMixin
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
from remindful.search import rank
from remindful.storage import StoreState
from remindful.validation import validate_item

log = logging.getLogger("remindful")

#: How long export, backup, dedup and cleanup wait for this process's pending embeddings.
VECTORS_READY_TIMEOUT_S = 60.0
_STORE_KEYS = {"content", "type", "metadata", "session_id", "timestamp", "source", "memory_class", "chunk"}


# Sessions, retention, export and backup: manager_lifecycle.py; learning: manager_learning.py.
class MemoryManager(LifecycleMixin, LearningMixin):
    """Store, search and manage memories in one storage directory.

    ``embedder`` and ``index`` default to the configured ones (ONNX MiniLM; embedded Chroma at
    ``<storage>/chroma``, or a Chroma server); pass fakes in tests.
    """

    def __init__(
        self, settings: Settings, *, embedder: Embedder | None = None, index: VectorIndex | None = None
    ) -> None:
        self.settings = settings
        self.path = settings.storage_path
        self._state = StoreState(settings, embedder=embedder, index=index)
        self._state.on_open.append(self._drain_spool)
        self._session_id: str | None = None
        self._resumed_session: str | None = None
        self._lock = threading.RLock()

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> MemoryManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every memory stored so far is in the vector index (search finds them before
        that too, scored from the catalog) and every large delete so far has left it and the
        session windows (search skips them before that too). False if ``timeout`` seconds passed
        first."""
        return self._state.flush(timeout)

    def close(self) -> None:
        """Flush pending access counts and release the catalog and the index."""
        self._state.close()

    def _drain_spool(self) -> None:
        """Store hook events spooled while no daemon ran (see :mod:`remindful.hooks.drainer`)."""
        from remindful.hooks.drainer import drain_on_open

        drain_on_open(self)

    def check_enabled(self) -> None:
        """Raise MemoryDisabledError (with the reason) if memory is off or its storage unusable."""
        self._state.ready()

    @property
    def disabled_reason(self) -> str | None:
        """Why memory is disabled (config, or an unusable storage path), or None."""
        return self._state.disabled_reason

    @property
    def session_id(self) -> str:
        """This process's session, generated on first use (``session_YYYYmmdd_HHMMSS_xxxx``)."""
        with self._lock:
            if self._session_id is None:
                now = datetime.now(UTC)
                self._session_id = f"session_{now:%Y%m%d_%H%M%S}_{os.urandom(2).hex()}"
            return self._session_id

    @session_id.setter
    def session_id(self, value: str) -> None:
        self._session_id = _text(value, "session_id")

    # -- writes ---------------------------------------------------------------------------------

    def store(
        self,
        content: str,
        type: str | MemoryType = "action",
        metadata: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        timestamp: datetime | str | float | None = None,
        source: str | MemorySource = "manual",
        *,
        memory_class: str | MemoryClass | None = None,
        chunk: ChunkMetadata | Mapping[str, Any] | None = None,
    ) -> str:
        """Store one memory and return its id. Raises ValidationError naming a bad field."""
        item = {
            "content": content,
            "type": type,
            "metadata": metadata,
            "session_id": session_id,
            "timestamp": timestamp,
            "source": source,
            "memory_class": memory_class,
            "chunk": chunk,
        }
        return self.store_batch([item])[0]

    def store_batch(self, items: Sequence[Mapping[str, Any]], *, defer: bool | None = None) -> builtins.list[str]:
        """Store many memories in one catalog transaction with one batched embedding call.

        Each item takes the keyword arguments of :meth:`store`. All or nothing: a bad item
        raises ValidationError (naming ``items[i].field``) before anything is written.
        ``defer=False`` embeds before the commit, so an embedding failure raises EmbedderError and
        stores nothing (the capture paths' ERR-P1-01); by default ``performance.defer_embedding``
        decides.
        """
        if not isinstance(items, Sequence) or isinstance(items, str | bytes):
            raise ValidationError("items", "expected a list of dicts with at least 'content'")
        state = self._state.ready()
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
        if defer is False or not state.defers_embedding():
            vectors = state.embedder.embed([r.content for r in rows])
            for row, vector in zip(rows, vectors, strict=True):
                row.embedding = vector
        state.make_room(rows)
        attach_files(self.settings, rows)
        state.commit_new(rows)
        state.index_rows(rows)
        return [r.id for r in rows]

    def _vectors_ready(self) -> StoreState:
        """The ready store, once the rows this process stored have vectors (for work that reads them)."""
        state = self._state.ready()
        state.await_embeddings(VECTORS_READY_TIMEOUT_S)
        return state

    def _new_row(self, item: Mapping[str, Any], position: int | None, now: float) -> MemoryRow:
        prefix = "" if position is None else f"items[{position}]."
        fields = validate_item(item, prefix)
        # Privacy: secrets are redacted before anything is written (capture/filters.py).
        fields["content"], fields["metadata"] = redact_for_store(self, fields["content"], fields["metadata"])
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
        state = self._state.ready()
        row = self._row(memory_id)
        if content is not None:
            row.content, _ = redact_for_store(self, _text(content, "content"), {})
            row.content_hash = content_hash(row.content)
            row.embedding = state.embedder.embed([row.content])[0]
        if metadata is not None:
            if not isinstance(metadata, Mapping):
                raise ValidationError("metadata", "expected a dict")
            merged = {**json.loads(row.metadata), **metadata}
            merged = redact_for_store(self, row.content, {k: v for k, v in merged.items() if v is not None})[1]
            row.metadata = validate_item({"content": row.content, "metadata": merged}, "")["metadata"]
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
        rows = self._state.ready().catalog.read(f"SELECT id FROM memories WHERE {flt.sql}", flt.params)
        return self.delete_many([r[0] for r in rows])

    def delete_many(self, ids: Sequence[str]) -> int:
        """Delete memories by id; returns how many existed."""
        return self._state.ready().delete(list(ids))

    # -- reads ----------------------------------------------------------------------------------

    def get(self, memory_id: str) -> Memory:
        """The memory with this id; raises NotFoundError ("Memory not found", suggests search)."""
        return _to_memory(self._row(memory_id))

    def _row(self, memory_id: str) -> MemoryRow:
        memory_id = _text(memory_id, "memory_id")
        row = self._state.ready().catalog.get_rows([memory_id]).get(memory_id)
        if row is None:
            raise NotFoundError(memory_id)
        return row

    def get_batch(self, ids: Sequence[str]) -> builtins.list[Memory | None]:
        """Memories for ``ids`` in request order; None where an id does not exist. One query."""
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise ValidationError("ids", "expected a list of memory ids")
        found = self._state.ready().catalog.get_rows([_text(i, f"ids[{n}]") for n, i in enumerate(ids)])
        return [_to_memory(found[i]) if i in found else None for i in ids]

    def list(
        self,
        type: str | MemoryType | None = None,
        session_id: str | None = None,
        limit: int = 50,
        offset: int = 0,
        *,
        source: str | MemorySource | None = None,
    ) -> builtins.list[Memory]:
        """Memories newest first, optionally of one type, one session and/or one source
        (``source="hook"``: the spec's find_by_source)."""
        types = [_type(type).value] if type is not None else None
        sources = {"source": _source(source).value} if source is not None else None
        flt = build_filter(types=types, session_id=session_id, filters=sources)
        rows = self._state.ready().catalog.select_rows(
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
    ) -> builtins.list[SearchHit]:
        """Hybrid search (dense + lexical, fused); see :mod:`remindful.search`. Filters apply to
        every space. Scores are in [0, 1], best first."""
        query = _text(query, "query")
        limit = _bounded(limit, "limit", 1, 1000)
        type_values = [_type(t).value for t in types] if types else None
        flt = build_filter(
            types=type_values,
            session_id=session_id,
            since=None if since is None else to_epoch(since, "since"),
            until=None if until is None else to_epoch(until, "until"),
            filters=filters,
        ) & SqlFilter("(expires_at IS NULL OR expires_at > ?)", (time.time(),))
        state = self._state.ready()
        started = time.perf_counter()
        # Read your writes: what this process stored is dense-searchable (lexically it is at once).
        state.await_embeddings(self.settings.performance.search_timeout_ms / 1000)
        restricted = bool(filters or session_id or since is not None or until is not None)
        searched_types = [MemoryType(t) for t in type_values] if type_values else list(MemoryType)
        counts = state.type_counts()
        results = rank(
            state.catalog,
            lambda: _embed_query(state.embedder, query),
            query,
            flt,
            settings=self.settings.search,
            limit=limit,
            dense_from_index=state.dense_query(searched_types, counts),
            restricted=restricted,
            typed=type_values is not None and len(set(type_values)) < len(MemoryType),
            searched=sum(counts.get(t.value, 0) for t in searched_types),
            pending_after=state.pending_after() if state.index is not None else None,
            resumed_session=self._resumed_session,
        )
        state.record_search(time.perf_counter() - started, [row.id for row, _, _ in results])
        return [
            SearchHit(
                id=row.id,
                type=MemoryType(row.type),
                content=row.content,
                metadata=json.loads(row.metadata),
                score=score,
                created_at=datetime.fromtimestamp(row.created_at, UTC),
                session_id=row.session_id,
                source=MemorySource(row.source),
                sources=spaces,
            )
            for row, score, spaces in results
        ]

    def resume_session(self, session_id: str) -> int:
        """Rank this session's memories higher in later searches; returns its memory count."""
        session_id = _text(session_id, "session_id")
        count = self._state.ready().catalog.count(build_filter(session_id=session_id))
        if count == 0:
            raise NotFoundError(session_id)
        self._resumed_session = session_id
        return count

    def stats(self) -> dict[str, Any]:
        """Counts per collection, storage size and quota use, latencies, cache hit rate."""
        return self._state.ready().stats()

    # -- maintenance ----------------------------------------------------------------------------

    def reindex(self, *, reset: bool = False, progress: Any = None) -> dict[str, int]:
        """Rebuild the vector index from the catalog. ``reset=True`` first backs up and removes
        the index files (the recovery for a corrupted index). Returns counts per collection."""
        return self._state.reindex(reset=reset, progress=progress)

    def index_status(self) -> dict[str, Any]:
        """Whether the vector index is usable, and why not."""
        return self._state.index_status()


# -- helpers ---------------------------------------------------------------------------------------


def _embed_query(embedder: Embedder, query: str) -> Any:
    embed_query = getattr(embedder, "embed_query", None)
    return embed_query(query) if embed_query is not None else embedder.embed([query])[0]


__all__ = ["MemoryManager"]
