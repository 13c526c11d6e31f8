"""Search latencies and embedding-cache counts of every process that uses a store, kept in the
store: a dashboard or ``stats()`` in one process reports the searches the MCP server, the daemon
and the hooks made in theirs.

Each process adds its figures to the catalog's ``capture_stats`` counters (names under
:data:`PREFIX`) with its access counts, off the search path (:class:`remindful.engine.background.AccessRecorder`):
the number of searches, a histogram of their latencies (buckets a quarter of an octave wide, so a
percentile read back is within 10 % of the true one) and the embedding cache's hits and misses.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

PREFIX = "perf."
SEARCHES = PREFIX + "searches"
CACHE_HITS = PREFIX + "embedding_cache_hits"
CACHE_MISSES = PREFIX + "embedding_cache_misses"
_BUCKET = PREFIX + "search_ms."
#: The upper bound of bucket 0, in milliseconds; bucket i ends at ``FIRST_MS * 2 ** (i / 4)``.
FIRST_MS = 0.25
LAST_BUCKET = 100  # about 8 minutes


def bucket(ms: float) -> str:
    """The counter a search of ``ms`` milliseconds is counted under."""
    index = 0 if ms <= FIRST_MS else math.ceil(4 * math.log2(ms / FIRST_MS))
    return f"{_BUCKET}{min(index, LAST_BUCKET):03d}"


def percentile(counts: Mapping[str, int], q: float) -> float | None:
    """The ``q`` quantile (0-1) of the latencies counted in ``counts`` (every counter of the store;
    others are ignored), in milliseconds rounded to 3 digits, or None when none was counted. A
    bucket stands for its geometric middle."""
    buckets = sorted((int(k[len(_BUCKET) :]), n) for k, n in counts.items() if k.startswith(_BUCKET) and n > 0)
    total = sum(n for _, n in buckets)
    if not total:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for index, n in buckets:
        seen += n
        if seen >= rank:
            low = FIRST_MS * 2 ** ((index - 1) / 4) if index else 0.0
            high = FIRST_MS * 2 ** (index / 4)
            return round(math.sqrt(low * high) if low else high / 2, 3)
    return None  # not reached


class PendingFigures:
    """What this process measured since it last wrote its figures (thread-safe). ``cache`` returns
    the embedding cache's running ``{"hits", "store_hits", "misses"}`` (or {}); :meth:`take`
    turns what is new since the last take into counter increments."""

    def __init__(self, cache: Callable[[], Mapping[str, Any]] | None = None) -> None:
        self._cache = cache
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._cache_seen = (0, 0)

    def search(self, ms: float) -> None:
        with self._lock:
            self._counts[SEARCHES] += 1
            self._counts[bucket(ms)] += 1

    def take(self) -> dict[str, int]:
        with self._lock:
            out = dict(self._counts)
            self._counts.clear()
            figures = self._cache() if self._cache is not None else {}
            hits = int(figures.get("hits", 0) or 0) + int(figures.get("store_hits", 0) or 0)
            misses = int(figures.get("misses", 0) or 0)
            seen_hits, seen_misses = self._cache_seen
            if hits >= seen_hits and misses >= seen_misses:  # a new embedder starts from 0: skip once
                out[CACHE_HITS] = hits - seen_hits
                out[CACHE_MISSES] = misses - seen_misses
            self._cache_seen = (hits, misses)
        return {k: v for k, v in out.items() if v}


def store_figures(counts: Mapping[str, int]) -> dict[str, Any]:
    """The store-wide figures from its counters: ``searches``, ``p50/p95/p99_search_ms`` and
    ``embedding_cache`` (``hits``, ``misses``, ``hit_rate``)."""
    hits, misses = counts.get(CACHE_HITS, 0), counts.get(CACHE_MISSES, 0)
    return {
        "searches": counts.get(SEARCHES, 0),
        "p50_search_ms": percentile(counts, 0.5),
        "p95_search_ms": percentile(counts, 0.95),
        "p99_search_ms": percentile(counts, 0.99),
        "embedding_cache": {
            "hits": hits,
            "misses": misses,
            "hit_rate": round(hits / (hits + misses), 3) if hits + misses else None,
        },
    }


__all__ = ["PREFIX", "PendingFigures", "bucket", "percentile", "store_figures"]
