"""What every capture point shares: the store's write path it stores through (:class:`MemoryWriter`),
the learning layer's counters (shown by ``stats().learning``), storing extracted memories and
finishing a capture (metrics, ``[MEM:CAPTURE]`` log line, ``MemoryCaptured`` event).

The counters and reinforcements are tables of the catalog
(:class:`~remindful.engine.repositories.LearningRepository`), so the CLI, hooks and servers
writing to one store add up to one set of figures.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from remindful.model import Memory, MemorySource, MemoryType, SearchHit
from remindful.services.learning.bus import MemoryCaptured, publish
from remindful.services.learning.types import CaptureSource

if TYPE_CHECKING:
    from remindful.config import Settings
    from remindful.embed.base import Embedder
    from remindful.engine.redact import StoreRedactor
    from remindful.engine.repositories import LearningRepository

log = logging.getLogger("remindful.services.learning")


class MemoryWriter(Protocol):
    """The store's write and read path as the learning layer uses it: every memory is stored
    validated and redacted (:class:`~remindful.engine.store.Store` is one)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def embedder(self) -> Embedder: ...

    @property
    def redaction(self) -> StoreRedactor:
        """The store's redaction (what a text built from captured words passes before it is
        reshaped: joined, cut or sent to an LLM)."""

    def ready(self) -> object:
        """Open the catalog (MemoryDisabledError when memory is off)."""

    def store_batch(self, items: Sequence[Mapping[str, Any]], *, defer: bool | None = None) -> list[str]: ...

    def get(self, memory_id: str) -> Memory: ...

    def get_batch(self, ids: Sequence[str]) -> list[Memory | None]: ...

    def update(
        self, memory_id: str, content: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> Memory: ...

    def list_memories(
        self,
        type: str | MemoryType | None = None,
        session_id: str | None = None,
        limit: int = 50,
        offset: int = 0,
        *,
        source: str | MemorySource | None = None,
    ) -> list[Memory]: ...

    def search(
        self,
        query: str,
        *,
        types: Sequence[str | MemoryType] | None = None,
        filters: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        since: datetime | str | float | None = None,
        until: datetime | str | float | None = None,
        limit: int,
        min_score: float,
        collapse: bool,
        resumed_session: str | None,
    ) -> list[SearchHit]: ...


#: Width of the extraction-confidence histogram's buckets.
BUCKETS = tuple(round(i / 10, 1) for i in range(10))


def bump(learning: LearningRepository, counts: Mapping[tuple[str, str], float]) -> None:
    """Add to counters, one transaction. Best effort: a failure is logged, never raised, since
    a metric must not fail a capture whose memories are already stored."""
    try:
        learning.add_to_counters(counts)
    except Exception as exc:
        log.warning("could not update learning metrics: %s", exc)


def bucket(confidence: float) -> str:
    low = min(int(max(confidence, 0.0) * 10), 9) / 10
    return f"{low:.1f}-{low + 0.1:.1f}"


def store_memories(store: MemoryWriter, items: Sequence[Mapping[str, Any]]) -> list[Memory]:
    """Store ``items`` (keyword arguments of ``Store.store``) in one batch through the Store's
    write path (validated and redacted); returns the stored memories."""
    if not items:
        return []
    ids = store.store_batch(list(items))
    return [m for m in store.get_batch(ids) if m is not None]


def refresh(store: MemoryWriter, memories: Sequence[Memory]) -> list[Memory]:
    """The memories as stored now (after reinforcement changed their importance)."""
    return [m for m in store.get_batch([m.id for m in memories]) if m is not None]


def finish(
    learning: LearningRepository,
    source: CaptureSource,
    source_id: str,
    memories: Sequence[Memory],
    extra: Mapping[tuple[str, str], float] | None = None,
) -> MemoryCaptured:
    """Count the capture and publish ``MemoryCaptured``. Never raises for metrics or subscribers."""
    counts: dict[tuple[str, str], float] = {("events", source.value): 1}
    # A search confirmation reinforces an existing memory; it creates none.
    for memory in memories if source is not CaptureSource.SEARCH_CONFIRMATION else ():
        counts[("created_type", memory.type.value)] = counts.get(("created_type", memory.type.value), 0) + 1
        key = ("created_class", memory.memory_class.value)
        counts[key] = counts.get(key, 0) + 1
    for key, value in (extra or {}).items():
        counts[key] = counts.get(key, 0) + value
    bump(learning, counts)  # disabled mid-way, closed store: logged; the memories are stored regardless
    event = MemoryCaptured(source_id=source_id, source=source, memories=tuple(memories))
    publish(event)
    return event


def preview(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat[:width]


def now() -> float:
    return time.time()
