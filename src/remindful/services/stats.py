"""``stats()``: counts per collection, storage size and quota use, latencies, cache hit rate, the
most frequent actions and screens, the average session length, captures per day, the last cleanup
and the last backup.

Built from a handful of indexed SQL aggregates and a directory walk, so it stays well under the
spec's 100 ms at 100k memories: the most frequent actions and screens are counted over the newest
:data:`ACTIVITY_WINDOW` memories of each type, and captures per day over the last
:data:`DAYS_CHARTED` days (both read from the time indexes). Those and the session lengths read
many rows (tens of milliseconds at 100k), so they are kept while the store's rows stay the same,
and recounted at most every :data:`AGGREGATE_MAX_AGE_S` seconds while they change.

A full disk is reported, never raised: ``storage.storage_full`` is true, ``warnings`` says what to
do, and whatever the catalog could still answer is filled in (a catalog that cannot even be opened
leaves the counts ``None``).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import weakref
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from remindful.engine.catalog import Catalog
from remindful.engine.sqlfilter import SqlFilter
from remindful.engine.store import Store
from remindful.errors import MemoryDisabledError, StorageFullError
from remindful.model import MemoryType
from remindful.services.backup import list_backups
from remindful.services.capture.filters import read_counts
from remindful.services.capture.watcher import files_indexed
from remindful.services.learning.metrics import learning_stats
from remindful.services.policy.retention import last_cleanup
from remindful.services.sessions import ACTION_KEYS, SCREEN_KEYS

log = logging.getLogger("remindful")

#: The most frequent actions / screens are counted over this many newest memories of the type.
ACTIVITY_WINDOW = 10_000
#: How many of the most frequent actions / screens are reported.
TOP_ACTIVITY = 10
#: Days of captures per day reported (today included).
DAYS_CHARTED = 30
#: How stale the aggregates over many rows may be while memories are being added or deleted.
AGGREGATE_MAX_AGE_S = 5.0
#: How long they are kept when nothing was added or deleted (an update can rename an action).
AGGREGATE_KEEP_S = 60.0
_aggregates: weakref.WeakKeyDictionary[Store, tuple[tuple[Any, ...], float, dict[str, Any]]] = (
    weakref.WeakKeyDictionary()
)
_aggregates_lock = threading.Lock()
#: Free space under which the disk counts as full: SQLite cannot grow the catalog by a page.
FULL_BELOW_BYTES = 64 * 1024
_FULL_WARNING = (
    "The disk holding {path} is full ({free}); new memories cannot be saved. "
    "Run `remindful cleanup` to apply retention, or free disk space"
)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def capture_status(store: Store) -> dict[str, Any]:
    """What automatic capture is doing: hook events waiting in the spool, redaction and skip counts
    by reason, and the number of Markdown files indexed."""
    catalog = store.catalog
    return {
        "spool_pending": _spool_pending(catalog),
        "capture": _capture_counts(catalog),
        "files_indexed": files_indexed(store),
    }


def build_stats(store: Store) -> dict[str, Any]:
    """Everything ``MemoryManager.stats()`` reports, read from ``store`` without loading the
    embedder or opening the vector index.

    Raises MemoryDisabledError when memory is disabled, except on a full disk: then the report
    says ``storage.storage_full: true`` (with a warning) instead of failing.
    """
    free = _free_bytes(store.path)
    disk_full = free is not None and free < FULL_BELOW_BYTES
    try:
        catalog = store.catalog
        return _full_report(store, catalog, free, disk_full)
    except (StorageFullError, MemoryDisabledError) as exc:
        if isinstance(exc, MemoryDisabledError) and (not disk_full or not store.settings.enabled):
            raise
        log.warning("stats on a full disk: %s", exc)
        return _report_without_catalog(store, free)


def _full_report(store: Store, catalog: Catalog, free: int | None, disk_full: bool) -> dict[str, Any]:
    settings = store.settings
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
    search_ms = list(store.search_ms)
    store_ms = list(store.store_ms)
    heavy = _heavy_aggregates(store, catalog, sum(counts.values()))
    lengths = heavy["session_length"]
    report = {
        "total_memories": sum(counts.values()),
        "collections": collections,
        "storage": _storage(store, free, disk_full),
        "sessions": lengths["sessions"],
        "session_length": lengths,
        "activity": heavy["activity"],
        "captures_per_day": heavy["captures_per_day"],
        "spool_pending": _spool_pending(catalog),
        "last_cleanup": _last_cleanup(store),
        "last_backup": last_backup(store.path),
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
            "p99_search_ms": _percentile(search_ms, 0.99),
            "embedding_cache": store.embedding_cache_stats(),
        },
        "warnings": [],
    }
    if disk_full:
        report["warnings"].append(_FULL_WARNING.format(path=store.path, free=_size(free)))
    return report


def _heavy_aggregates(store: Store, catalog: Catalog, total: int) -> dict[str, Any]:
    """Session lengths, the most frequent actions and screens, captures per day: reused as the
    module docstring says. The key notices any insert or delete (the newest rowid and the count)."""
    key = (catalog.read("SELECT max(rowid) FROM memories")[0][0], total, time.strftime("%Y-%m-%d", time.gmtime()))
    now = time.monotonic()
    with _aggregates_lock:
        cached = _aggregates.get(store)
    if cached is not None:
        cached_key, at, values = cached
        age = now - at
        if age < AGGREGATE_MAX_AGE_S or (cached_key == key and age < AGGREGATE_KEEP_S):
            return values
    values = {
        "session_length": session_lengths(catalog),
        "activity": most_frequent(catalog),
        "captures_per_day": captures_per_day(catalog),
    }
    with _aggregates_lock:
        _aggregates[store] = (key, now, values)
    return values


def _report_without_catalog(store: Store, free: int | None) -> dict[str, Any]:
    """What can be said of a store whose catalog cannot be read because the disk is full."""
    return {
        "total_memories": None,
        "collections": {t.collection: {"count": None, "quota": store.settings.max_items_for(t)} for t in MemoryType},
        "storage": _storage(store, free, True),
        "sessions": None,
        "last_backup": last_backup(store.path),
        "warnings": [_FULL_WARNING.format(path=store.path, free=_size(free))],
    }


def _storage(store: Store, free: int | None, disk_full: bool) -> dict[str, Any]:
    size_mb = store.size_mb(max_age_s=0)
    quota_mb = store.settings.storage.max_size_mb
    return {
        "path": str(store.path),
        "total_size_mb": round(size_mb, 3),
        "quota_limit_mb": quota_mb,
        "usage_percent": round(100 * size_mb / quota_mb, 2),
        "disk_free_mb": None if free is None else round(free / 1_048_576, 3),
        "storage_full": disk_full,
    }


def _free_bytes(path: Path) -> int | None:
    """Free bytes on the filesystem holding ``path`` (its nearest existing parent); None if unknown."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def _size(free: int | None) -> str:
    return "unknown free space" if free is None else f"{free / 1024:.0f} kB free"


def _label(keys: tuple[str, ...]) -> str:
    """SQL naming a memory's action or screen: the first metadata key set, else its first words."""
    names = [f"json_extract(metadata, '$.{k}')" for k in keys]
    return f"coalesce({', '.join(names)}, substr(content, 1, 40))"


_TOP_SQL = """
SELECT label, count(*) FROM (
    SELECT {label} AS label FROM memories WHERE type = ? ORDER BY created_at DESC LIMIT ?
) WHERE label IS NOT NULL GROUP BY label ORDER BY 2 DESC, 1 LIMIT ?
"""


def most_frequent(catalog: Catalog, window: int = ACTIVITY_WINDOW, top: int = TOP_ACTIVITY) -> dict[str, Any]:
    """``{"actions": [{name, count}], "screens": [...], "window": n}``: the most frequent actions
    and screens among the newest ``window`` memories of each type, most frequent first. An action
    is named by its ``action`` / ``action_type`` / ``command`` metadata, a screen by ``screen_name``
    / ``screen`` / ``app`` / ``window_title`` / ``title`` / ``url``, else by the first 40
    characters of the content (the same names as the session summaries)."""
    out: dict[str, Any] = {"window": window}
    for kind, memory_type, keys in (("actions", "action", ACTION_KEYS), ("screens", "screen", SCREEN_KEYS)):
        rows = catalog.read(_TOP_SQL.format(label=_label(keys)), (memory_type, window, top))
        out[kind] = [{"name": " ".join(str(name).split()), "count": int(n)} for name, n in rows]
    return out


def session_lengths(catalog: Catalog) -> dict[str, Any]:
    """``{"sessions", "avg_memories", "avg_minutes"}``: how many sessions the store knows, and the
    average session's memory count and span (first to last memory, or the recorded start to end),
    over the sessions that have memories. The averages are None when no session has any."""
    sessions = int(catalog.read("SELECT count(*) FROM sessions")[0][0])
    row = catalog.read(
        "SELECT count(*), avg(n), avg(span) FROM (SELECT count(*) AS n, max(created_at) - min(created_at) AS span "
        "FROM memories WHERE session_id IS NOT NULL GROUP BY session_id)"
    )[0]
    with_memories, avg_n, avg_span = row
    return {
        "sessions": max(sessions, int(with_memories)),
        "avg_memories": round(avg_n, 2) if avg_n is not None else None,
        "avg_minutes": round(avg_span / 60, 2) if avg_span is not None else None,
    }


def captures_per_day(catalog: Catalog, days: int = DAYS_CHARTED, *, now: float | None = None) -> list[dict[str, Any]]:
    """Memories created on each of the last ``days`` UTC days, oldest first, days without any
    included: ``[{"day": "YYYY-MM-DD", "count": n}, ...]``."""
    now = time.time() if now is None else now
    today = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today.timestamp() - (days - 1) * 86400
    found = dict(
        catalog.read(
            "SELECT date(created_at, 'unixepoch'), count(*) FROM memories WHERE created_at >= ? GROUP BY 1",
            (start,),
        )
    )
    out = []
    for i in range(days):
        day = datetime.fromtimestamp(start + i * 86400, UTC).strftime("%Y-%m-%d")
        out.append({"day": day, "count": int(found.get(day, 0))})
    return out


def last_backup(storage: Path) -> dict[str, Any] | None:
    """The newest backup archive of the store: ``{path, automatic, bytes, at}`` (None if none)."""
    try:
        found = list_backups(storage)
    except OSError:
        return None
    newest: dict[str, Any] | None = None
    newest_at = -1.0
    for entry in found:
        try:
            at = os.stat(entry["path"]).st_mtime
        except OSError:
            continue
        if at > newest_at:
            newest, newest_at = entry, at
    if newest is None:
        return None
    return {**newest, "at": datetime.fromtimestamp(newest_at, UTC).isoformat()}


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
