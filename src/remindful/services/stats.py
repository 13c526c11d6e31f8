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

import json
import logging
import os
import re
import shutil
import threading
import time
import weakref
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from remindful.engine import perf
from remindful.engine.repositories.labels import ACTION_KEYS, SCREEN_KEYS
from remindful.errors import MemoryDisabledError, StorageFullError
from remindful.model import CaptureStatus, CollectionUsage, MemoryType, Stats, StorageUsage
from remindful.services.backup import list_backups
from remindful.services.learning.actions import call_name, short_words
from remindful.services.learning.metrics import learning_stats

if TYPE_CHECKING:
    from remindful.config import Settings
    from remindful.engine.repositories import Repositories, SessionRepository, StatsRepository

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
_aggregates: weakref.WeakKeyDictionary[StatsRepository, tuple[tuple[Any, ...], float, dict[str, Any]]] = (
    weakref.WeakKeyDictionary()
)
_aggregates_lock = threading.Lock()
#: Free space under which the disk counts as full: SQLite cannot grow the catalog by a page.
FULL_BELOW_BYTES = 64 * 1024
_FULL_WARNING = (
    "The disk holding {path} is full ({free}); new memories cannot be saved. "
    "Run `remindful cleanup` to apply retention, or free disk space"
)


class StoreFigures(Protocol):
    """What the statistics read of the store besides its catalog: its directory, settings, this
    process's counters and latencies, the index and embedding cache as loaded (nothing is opened
    for them). :class:`~remindful.engine.store.Store` is one."""

    @property
    def path(self) -> Path: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def stores(self) -> int: ...

    @property
    def searches(self) -> int: ...

    @property
    def store_ms(self) -> Sequence[float]: ...

    @property
    def search_ms(self) -> Sequence[float]: ...

    def ready(self) -> object:
        """Open the catalog (MemoryDisabledError when memory is off, StorageFullError on a full disk)."""

    def type_counts(self) -> dict[str, int]: ...

    def size_mb(self, *, max_age_s: float = ...) -> float: ...

    def index_state(self) -> dict[str, Any]: ...

    def embedding_cache_stats(self) -> dict[str, Any]: ...


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def capture_status(stats: StatsRepository) -> CaptureStatus:
    """What automatic capture is doing: hook events waiting in the spool, redaction and skip counts
    by reason, and the number of Markdown files indexed."""
    return CaptureStatus(
        spool_pending=stats.spool_pending(),
        capture=stats.capture_counts(),
        files_indexed=stats.files_indexed(),
    )


def build_stats(store: StoreFigures, repos: Repositories) -> Stats:
    """Everything ``MemoryManager.stats()`` reports, read from ``store`` without loading the
    embedder or opening the vector index.

    Raises MemoryDisabledError when memory is disabled, except on a full disk: then the report
    says ``storage.storage_full: true`` (with a warning) instead of failing.
    """
    free = _free_bytes(store.path)
    disk_full = free is not None and free < FULL_BELOW_BYTES
    try:
        store.ready()
        return _full_report(store, repos, free, disk_full)
    except (StorageFullError, MemoryDisabledError) as exc:
        if isinstance(exc, MemoryDisabledError) and (not disk_full or not store.settings.enabled):
            raise
        log.warning("stats on a full disk: %s", exc)
        return _report_without_catalog(store, free)


def _full_report(store: StoreFigures, repos: Repositories, free: int | None, disk_full: bool) -> Stats:
    settings = store.settings
    counts = store.type_counts()
    collections = {}
    for memory_type in MemoryType:
        limit = settings.max_items_for(memory_type)
        count = counts.get(memory_type.value, 0)
        collections[memory_type.collection] = CollectionUsage(count, limit, round(100 * count / limit, 2))
    search_ms = list(store.search_ms)
    store_ms = list(store.store_ms)
    heavy = _heavy_aggregates(repos, sum(counts.values()))
    lengths = heavy["session_length"]
    return Stats(
        total_memories=sum(counts.values()),
        collections=collections,
        storage=_storage(store, free, disk_full),
        sessions=lengths["sessions"],
        session_length=lengths,
        activity=heavy["activity"],
        captures_per_day=heavy["captures_per_day"],
        spool_pending=repos.stats.spool_pending(),
        last_cleanup=_last_cleanup(repos.retention.last_cleanup()),
        last_backup=last_backup(store.path),
        capture=repos.stats.capture_counts(),
        learning=learning_stats(repos.learning, settings),
        index={**store.index_state(), "unindexed": repos.stats.unindexed()},
        performance={
            "stores": store.stores,
            "searches": store.searches,
            "avg_store_ms": round(sum(store_ms) / len(store_ms), 3) if store_ms else None,
            "avg_search_ms": round(sum(search_ms) / len(search_ms), 3) if search_ms else None,
            "p50_search_ms": _percentile(search_ms, 0.5),
            "p95_search_ms": _percentile(search_ms, 0.95),
            "p99_search_ms": _percentile(search_ms, 0.99),
            "embedding_cache": store.embedding_cache_stats(),
            # Every process's searches, as the store counted them (this one's are written within a second).
            "store": perf.store_figures(repos.stats.perf_counts()),
        },
        injection=injection_stats(repos),
        warnings=(_FULL_WARNING.format(path=store.path, free=_size(free)),) if disk_full else (),
    )


#: Projects and sessions the injection figures list.
TOP_INJECTION = 10


def injection_stats(repos: Repositories) -> dict[str, Any]:
    """The ledger of injected context: blocks, tokens and memories in all, per project (most
    tokens first) and per session (most recent first), and how many memories stay forgotten
    (tombstones)."""

    def row(total: Any) -> dict[str, Any]:
        at = total.last_at
        last = datetime.fromtimestamp(at, UTC).isoformat() if at is not None else None
        return {"injections": total.injections, "tokens": total.tokens, "memories": total.memories, "last_at": last}

    ledger = repos.ledger
    return {
        **row(ledger.total()),
        "by_project": [{"project": t.key, **row(t)} for t in ledger.by_project(TOP_INJECTION)],
        "by_session": [{"session_id": t.key, **row(t)} for t in ledger.by_session(TOP_INJECTION)],
        "forgotten": repos.captures.tombstones(),
    }


def _heavy_aggregates(repos: Repositories, total: int) -> dict[str, Any]:
    """Session lengths, the most frequent actions and screens, captures per day: reused as the
    module docstring says. The key notices any insert or delete (the newest rowid and the count)."""
    stats = repos.stats
    key = (stats.newest_rowid(), total, time.strftime("%Y-%m-%d", time.gmtime()))
    now = time.monotonic()
    with _aggregates_lock:
        cached = _aggregates.get(stats)
    if cached is not None:
        cached_key, at, values = cached
        age = now - at
        if age < AGGREGATE_MAX_AGE_S or (cached_key == key and age < AGGREGATE_KEEP_S):
            return values
    values = {
        "session_length": session_lengths(repos.sessions),
        "activity": most_frequent(stats),
        "captures_per_day": captures_per_day(stats),
    }
    with _aggregates_lock:
        _aggregates[stats] = (key, now, values)
    return values


def _report_without_catalog(store: StoreFigures, free: int | None) -> Stats:
    """What can be said of a store whose catalog cannot be read because the disk is full."""
    return Stats(
        total_memories=None,
        collections={t.collection: CollectionUsage(None, store.settings.max_items_for(t)) for t in MemoryType},
        storage=_storage(store, free, True),
        sessions=None,
        last_backup=last_backup(store.path),
        warnings=(_FULL_WARNING.format(path=store.path, free=_size(free)),),
        partial=True,
    )


def _storage(store: StoreFigures, free: int | None, disk_full: bool) -> StorageUsage:
    size_mb = store.size_mb(max_age_s=0)
    quota_mb = store.settings.storage.max_size_mb
    return StorageUsage(
        path=str(store.path),
        total_size_mb=round(size_mb, 3),
        quota_limit_mb=quota_mb,
        usage_percent=round(100 * size_mb / quota_mb, 2),
        disk_free_mb=None if free is None else round(free / 1_048_576, 3),
        storage_full=disk_full,
    )


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


def most_frequent(stats: StatsRepository, window: int = ACTIVITY_WINDOW, top: int = TOP_ACTIVITY) -> dict[str, Any]:
    """``{"actions": [{name, count}], "screens": [...], "window": n}``: the most frequent actions
    and screens among the newest ``window`` memories of each type, most frequent first, each named
    by :func:`activity_name` (a tool call by its command or file: ``pnpm test``, ``Edit .env.staging``;
    an action by its ``action`` / ``action_type`` / ``command`` metadata, a screen by ``screen_name``
    / ``screen`` / ``app`` / ``window_title`` / ``title`` / ``url``; else by its text with its numbers
    left out, so that "step 1: opened the billing page" and "step 2: …" count together), never cut
    inside a word."""
    out: dict[str, Any] = {"window": window}
    for kind, memory_type, keys in (("actions", "action", ACTION_KEYS), ("screens", "screen", SCREEN_KEYS)):
        counts: Counter[str] = Counter()
        wordings: dict[str, set[str]] = {}
        for row in stats.recent_names(memory_type, keys, window):
            name, wording = activity_name(*row)
            if name:
                counts[name] += 1
                wordings.setdefault(name, set()).add(wording)
        # A text seen with one set of numbers only is shown as written ("port 8443", not "port N").
        shown = {name: next(iter(w)) if len(w) == 1 else name for name, w in wordings.items()}
        ranked = sorted(counts.items(), key=lambda item: (-item[1], shown[item[0]]))[:top]
        out[kind] = [{"name": shown[name], "count": n} for name, n in ranked]
    return out


_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")


def activity_name(keyed: Any, tool: Any, arguments: Any, file: Any, content: Any) -> tuple[str, str]:
    """``(name, as written)``: the name one row of :meth:`StatsRepository.recent_names` is counted
    under (see :func:`most_frequent`), and its own wording (the text with its numbers)."""
    if isinstance(tool, str) and tool.strip():
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else {}
        except ValueError:
            parsed = {}
        name = call_name({"tool_name": tool, "arguments": parsed if isinstance(parsed, dict) else {}, "file": file})
        if name:
            return name, name
    if keyed is not None and str(keyed).strip():
        return short_words(str(keyed)), short_words(str(keyed))
    text = str(content or "")
    return short_words(_NUMBER.sub("N", text)), short_words(text)


def session_lengths(sessions: SessionRepository) -> dict[str, Any]:
    """``{"sessions", "avg_memories", "avg_minutes"}``: how many sessions the store knows, and the
    average session's memory count and span (first to last memory, or the recorded start to end),
    over the sessions that have memories. The averages are None when no session has any."""
    recorded, with_memories, avg_n, avg_span = sessions.lengths()
    return {
        "sessions": max(recorded, with_memories),
        "avg_memories": round(avg_n, 2) if avg_n is not None else None,
        "avg_minutes": round(avg_span / 60, 2) if avg_span is not None else None,
    }


def captures_per_day(
    stats: StatsRepository, days: int = DAYS_CHARTED, *, now: float | None = None
) -> list[dict[str, Any]]:
    """Memories created on each of the last ``days`` UTC days, oldest first, days without any
    included: ``[{"day": "YYYY-MM-DD", "count": n}, ...]``."""
    now = time.time() if now is None else now
    today = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today.timestamp() - (days - 1) * 86400
    found = stats.captures_per_day(start)
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


def _last_cleanup(report: dict[str, Any] | None) -> dict[str, Any] | None:
    """The last retention run: when, how many deleted by reason, MB freed (None if never)."""
    if report is None:
        return None
    keys = ("at", "deleted", "by_reason", "freed_mb", "clusters", "seconds")
    found = {k: report.get(k) for k in keys}
    if isinstance(found["at"], int | float):  # kept as epoch seconds; shown as last_backup's is: ISO 8601
        found["at"] = datetime.fromtimestamp(found["at"], UTC).isoformat()
    return found
