"""``stats()``: counts per collection, storage size and quota use, latencies, cache hit rate.

Built from a handful of indexed SQL aggregates and a directory walk cached for a few seconds,
so it stays well under the spec's 100 ms at 100k memories.
"""

from __future__ import annotations

from typing import Any

from remindful.engine.catalog import Catalog
from remindful.engine.sqlfilter import SqlFilter
from remindful.engine.store import Store
from remindful.model import MemoryType
from remindful.services.capture.filters import read_counts
from remindful.services.capture.watcher import files_indexed
from remindful.services.learning.metrics import learning_stats
from remindful.services.policy.retention import last_cleanup


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def capture_status(store: Store) -> dict[str, Any]:
    """What automatic capture is doing: hook events waiting in the spool, redaction and skip counts
    by reason, and the number of Markdown files indexed."""
    catalog = store.ready().catalog
    return {
        "spool_pending": _spool_pending(catalog),
        "capture": _capture_counts(catalog),
        "files_indexed": files_indexed(store),
    }


def build_stats(store: Store) -> dict[str, Any]:
    """Everything ``MemoryManager.stats()`` reports, read from ``store`` without loading the
    embedder or opening the vector index. Raises MemoryDisabledError."""
    settings = store.settings
    catalog = store.ready().catalog
    counts = store.type_counts()
    collections = {}
    for memory_type in MemoryType:
        limit = settings.max_items_for(memory_type)
        count = counts.get(memory_type.value, 0)
        collections[memory_type.collection] = {
            "count": count,
            "quota": limit,
            "usage_percent": round(100 * count / limit, 2),
        }
    size_mb = store.size_mb(max_age_s=0)
    quota_mb = settings.storage.max_size_mb
    sessions = catalog.read("SELECT count(*) FROM sessions")[0][0]
    spool = _spool_pending(catalog)
    search_ms = list(store.search_ms)
    store_ms = list(store.store_ms)
    return {
        "total_memories": sum(counts.values()),
        "collections": collections,
        "storage": {
            "path": str(store.path),
            "total_size_mb": round(size_mb, 3),
            "quota_limit_mb": quota_mb,
            "usage_percent": round(100 * size_mb / quota_mb, 2),
        },
        "sessions": sessions,
        "spool_pending": spool,
        "last_cleanup": _last_cleanup(store),
        "capture": _capture_counts(catalog),
        "learning": learning_stats(store),
        "index": {**store.index_state(), "unindexed": catalog.count(SqlFilter("indexed = 0"))},
        "performance": {
            "stores": store.stores,
            "searches": store.searches,
            "avg_store_ms": round(sum(store_ms) / len(store_ms), 3) if store_ms else None,
            "avg_search_ms": round(sum(search_ms) / len(search_ms), 3) if search_ms else None,
            "p50_search_ms": _percentile(search_ms, 0.5),
            "p95_search_ms": _percentile(search_ms, 0.95),
            "embedding_cache": store.embedding_cache_stats(),
        },
    }


def _spool_pending(catalog: Catalog) -> int:
    """Hook events and captured tool calls waiting in the spool."""
    return int(catalog.read("SELECT count(*) FROM spool")[0][0])


def _capture_counts(catalog: Catalog) -> dict[str, int]:
    """Redactions and skipped captures per reason (capture filters), summed over every process."""
    return read_counts(catalog.read)


def _last_cleanup(store: Store) -> dict[str, Any] | None:
    """The last retention run: when, how many deleted by reason, MB freed (None if never)."""
    report = last_cleanup(store)
    if report is None:
        return None
    keys = ("at", "deleted", "by_reason", "freed_mb", "clusters", "seconds")
    return {k: report.get(k) for k in keys}
