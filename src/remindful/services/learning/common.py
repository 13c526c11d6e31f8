"""What every capture point shares: the learning layer's counters (shown by
``stats()["learning"]``), storing extracted memories and finishing a capture (metrics,
``[MEM:CAPTURE]`` log line, ``MemoryCaptured`` event).

The tables (``learning_counters``, ``reinforcements``) are the catalog's, created when it opens
(:data:`remindful.engine.schema.LEARNING_DDL`). Counters live in the catalog, so the CLI, hooks
and servers writing to one store add up to one set of figures.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Mapping, Sequence
from typing import Any

from remindful.engine.catalog import Catalog
from remindful.engine.store import Store
from remindful.model import Memory
from remindful.services.learning.bus import MemoryCaptured, publish
from remindful.services.learning.types import CaptureSource

log = logging.getLogger("remindful.services.learning")

#: Width of the extraction-confidence histogram's buckets.
BUCKETS = tuple(round(i / 10, 1) for i in range(10))


def bump(catalog: Catalog, counts: Mapping[tuple[str, str], float]) -> None:
    """Add to counters, one transaction. Best effort: a failure is logged, never raised, since
    a metric must not fail a capture whose memories are already stored."""
    items = [(kind, key, value) for (kind, key), value in counts.items() if value]
    if not items:
        return

    def run(conn: sqlite3.Connection) -> None:
        conn.executemany(
            "INSERT INTO learning_counters (kind, key, value) VALUES (?,?,?) "
            "ON CONFLICT(kind, key) DO UPDATE SET value = value + excluded.value",
            items,
        )

    try:
        catalog.write(run, what="counting captures")
    except Exception as exc:
        log.warning("could not update learning metrics: %s", exc)


def counters(catalog: Catalog) -> dict[str, dict[str, float]]:
    """Every counter, as ``{kind: {key: value}}``."""
    out: dict[str, dict[str, float]] = {}
    for kind, key, value in catalog.read("SELECT kind, key, value FROM learning_counters ORDER BY kind, key"):
        out.setdefault(kind, {})[key] = int(value) if float(value).is_integer() else value
    return out


def bucket(confidence: float) -> str:
    low = min(int(max(confidence, 0.0) * 10), 9) / 10
    return f"{low:.1f}-{low + 0.1:.1f}"


def store_memories(store: Store, items: Sequence[Mapping[str, Any]]) -> list[Memory]:
    """Store ``items`` (keyword arguments of ``Store.store``) in one batch through the Store's
    write path (validated and redacted); returns the stored memories."""
    if not items:
        return []
    ids = store.store_batch(list(items))
    return [m for m in store.get_batch(ids) if m is not None]


def refresh(store: Store, memories: Sequence[Memory]) -> list[Memory]:
    """The memories as stored now (after reinforcement changed their importance)."""
    return [m for m in store.get_batch([m.id for m in memories]) if m is not None]


def finish(
    store: Store,
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
    try:
        bump(store.catalog, counts)
    except Exception as exc:  # disabled mid-way, closed store: the memories are stored regardless
        log.warning("could not count capture: %s", exc)
    event = MemoryCaptured(source_id=source_id, source=source, memories=tuple(memories))
    publish(event)
    return event


def preview(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat[:width]


def now() -> float:
    return time.time()
