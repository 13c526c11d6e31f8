"""``stats()``: counts per collection, storage size and quota use, latencies, cache hit rate.

Built from a handful of indexed SQL aggregates and a directory walk cached for a few seconds,
so it stays well under the spec's 100 ms at 100k memories.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from remindful.filters import SqlFilter
from remindful.model import MemoryType

if TYPE_CHECKING:
    from remindful.storage import StoreState


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def build_stats(state: StoreState) -> dict[str, Any]:
    settings = state.settings
    catalog = state.catalog
    counts = state.type_counts()
    collections = {}
    for memory_type in MemoryType:
        limit = settings.max_items_for(memory_type)
        count = counts.get(memory_type.value, 0)
        collections[memory_type.collection] = {
            "count": count,
            "quota": limit,
            "usage_percent": round(100 * count / limit, 2),
        }
    size_mb = state.size_mb(max_age_s=0)
    quota_mb = settings.storage.max_size_mb
    sessions = catalog.read("SELECT count(*) FROM sessions")[0][0]
    spool = catalog.read("SELECT count(*) FROM spool")[0][0]
    embedder = state._embedder
    cache = embedder.stats() if embedder is not None and hasattr(embedder, "stats") else {}
    search_ms = list(state.search_ms)
    store_ms = list(state.store_ms)
    return {
        "total_memories": sum(counts.values()),
        "collections": collections,
        "storage": {
            "path": str(state.path),
            "total_size_mb": round(size_mb, 3),
            "quota_limit_mb": quota_mb,
            "usage_percent": round(100 * size_mb / quota_mb, 2),
        },
        "sessions": sessions,
        "spool_pending": spool,
        "last_cleanup": _last_cleanup(state),
        "capture": _capture_counts(catalog),
        "learning": _learning(state),
        "index": {
            "opened": state._index_opened,
            "available": state._index is not None if state._index_opened else None,
            "error": state._index_error,
            "unindexed": catalog.count(SqlFilter("indexed = 0")),
        },
        "performance": {
            "stores": state.stores,
            "searches": state.searches,
            "avg_store_ms": round(sum(store_ms) / len(store_ms), 3) if store_ms else None,
            "avg_search_ms": round(sum(search_ms) / len(search_ms), 3) if search_ms else None,
            "p50_search_ms": _percentile(search_ms, 0.5),
            "p95_search_ms": _percentile(search_ms, 0.95),
            "embedding_cache": cache,
        },
    }


def _capture_counts(catalog: Any) -> dict[str, int]:
    """Redactions and skipped captures per reason (capture filters), summed over every process."""
    from remindful.capture.filters import read_counts

    return read_counts(catalog.read)


def _learning(state: StoreState) -> dict[str, Any]:
    """Conversation capture, corrections, workflows, reinforcement and LLM use (remindful.learning)."""
    from remindful.learning.metrics import learning_stats

    return learning_stats(state)


def _last_cleanup(state: StoreState) -> dict[str, Any] | None:
    """The last retention run: when, how many deleted by reason, MB freed (None if never)."""
    from remindful.policy.retention import last_cleanup

    report = last_cleanup(state)
    if report is None:
        return None
    keys = ("at", "deleted", "by_reason", "freed_mb", "clusters", "seconds")
    return {k: report.get(k) for k in keys}
