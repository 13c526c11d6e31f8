"""The store's two quotas: memories per type, and the size of the storage directory.

- Items (``retention.max_items_per_collection`` and its per-type overrides): a store that would
  pass a type's quota evicts that type's least important unprotected memories
  (:mod:`remindful.engine.importance`), in the insert's own transaction. Ranking a type reads
  all its rows (~50 ms a store at 10,000 memories on a quiet machine, and every store past the
  quota needs it), so each type's ranking is kept (:class:`EvictionOrder`): rows stored since
  are ranked into it, and each victim is read again before it goes.
- Size (``storage.max_size_mb``): near it, a store warns in the log, and stores anyway. The size
  is measured by walking the directory (a stat per file), at most every ``SIZE_MAX_AGE_S``
  seconds and in a thread of its own: the walk is not the store's to wait for. On a shared
  catalog the memories are on the server: the size adds the bytes of those the policy governs
  (``server_bytes``: a person's own outside projects, every memory for the store's admin).

The item quota is a policy: on a team's shared catalog a person's process counts and evicts only
what that person's retention governs (their own memories outside projects: the retention
repository's reach), never the team's, however many the team holds.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from remindful.config import Settings
from remindful.engine.catalog import MemoryRow
from remindful.engine.importance import ImportanceInputs, score
from remindful.errors import RemindfulError, ValidationError
from remindful.model import MemoryType

log = logging.getLogger("remindful")

SIZE_WARNING_RATIO = 0.9
#: Near the size quota, a store warns again only after this long, or when the usage grew by a point.
SIZE_WARNING_INTERVAL_S = 600.0
#: How long a measured storage size is used before the directory is walked again.
SIZE_MAX_AGE_S = 5.0
#: A type's eviction order is ranked afresh from all its rows at most this often (the recency
#: term moves on; in between, rows stored since are ranked in, and victims are read again).
RANKING_MAX_AGE_S = 30.0


class Evictable(Protocol):
    """What the item quota reads: the retention repository of either backend."""

    def unbookmarked(
        self, memory_type: str, *, above_rowid: int = 0, ids: Sequence[str] | None = None
    ) -> list[tuple[ImportanceInputs, str, int]]: ...
    def count_in_reach(self, memory_type: str) -> int | None: ...


class Quotas:
    """The quotas of one storage directory, and its size as last measured. Thread-safe."""

    def __init__(self, settings: Settings, path: Path) -> None:
        self.settings = settings
        self.path = path
        self._size_mb = 0.0
        self._size_at = 0.0  # monotonic time of the last measure (0: never)
        #: (monotonic time, percent) of the last warning near the size quota, or None.
        self.last_warning: tuple[float, int] | None = None
        self._measuring: threading.Thread | None = None
        self._measuring_lock = threading.Lock()
        self._orders: dict[str, EvictionOrder] = {}
        self._orders_lock = threading.Lock()
        #: On a shared catalog: the bytes of the memories on the server the size counts (see the
        #: module docstring); None on a local store, whose memories are in the directory.
        self.server_bytes: Callable[[], int] | None = None

    def make_room(self, retention: Evictable, counts: Mapping[str, int], rows: Sequence[MemoryRow]) -> list[str]:
        """The memories to evict (the least important unprotected ones the policy governs) so that
        ``rows`` fit the per-type item quotas, given the ``counts`` of each type stored now (the
        policy's own count where it governs fewer: ``retention.count_in_reach``); the caller deletes them
        in the insert's transaction. Warns when the storage nears its size quota. Raises
        ValidationError for a batch that alone holds more memories of a type than its quota: it
        could never be stored whole."""
        incoming: dict[str, int] = {}
        evict: list[str] = []
        for row in rows:
            incoming[row.type] = incoming.get(row.type, 0) + 1
        for type_value, n_new in incoming.items():
            limit = self.settings.max_items_for(MemoryType(type_value))
            if n_new > limit:
                raise ValidationError(
                    "items",
                    f"at most {limit} {type_value} memories (that type's quota), got {n_new}; nothing was stored: "
                    "store fewer at a time or raise the quota (retention.max_items_per_collection)",
                )
            excess = counts.get(type_value, 0) + n_new - limit
            if excess > 0:  # (the policy's count is at most the store's: asked only then)
                reach = retention.count_in_reach(type_value)
                excess = excess if reach is None else reach + n_new - limit
            if excess <= 0:
                continue
            with self._orders_lock:
                order = self._orders.get(type_value)
                if order is None or order.age_s() > RANKING_MAX_AGE_S:
                    order = self._orders[type_value] = EvictionOrder(retention, type_value)
                victims = order.take(retention, excess)
            if len(victims) < excess:
                log.warning(
                    "%s_memories is over its quota of %d but every remaining memory is bookmarked", type_value, limit
                )
            evict += victims
        self.warn_if_near_size_quota()
        return evict

    def size_mb(self, *, max_age_s: float = SIZE_MAX_AGE_S) -> float:
        """The storage directory's size without its backups (and on a shared catalog the bytes of
        the memories it counts on the server), measured again when older than ``max_age_s`` (a
        walk that stats every file: ~0.4 s with 10,000 attachment copies)."""
        if time.monotonic() - self._size_at > max_age_s:
            total = 0
            for root, _dirs, files in os.walk(self.path):
                if Path(root).name == "backups":
                    continue
                for name in files:
                    with contextlib.suppress(OSError):
                        total += os.stat(os.path.join(root, name)).st_size
            if self.server_bytes is not None:
                try:
                    total += self.server_bytes()
                except RemindfulError as exc:  # the server does not answer: the directory alone
                    log.debug("the memories on the server not counted in the size: %s", exc)
            self._size_mb = total / 1_048_576
            self._size_at = time.monotonic()
        return self._size_mb

    def forget_size(self) -> None:
        """Measure the size afresh when next asked, as after a pause longer than ``SIZE_MAX_AGE_S``."""
        self._size_at = 0.0

    def warn_if_near_size_quota(self) -> None:
        """Near the quota, warn: at once, then again after ``SIZE_WARNING_INTERVAL_S`` or when the
        usage grew by a percentage point (a warning on every store flooded the hook daemon's log).
        A size older than ``SIZE_MAX_AGE_S`` is measured again in a thread of its own, which then
        warns."""
        if time.monotonic() - self._size_at <= SIZE_MAX_AGE_S:
            self.check_size(self._size_mb)
            return
        with self._measuring_lock:
            if self._measuring is not None and self._measuring.is_alive():
                return
            self._measuring = threading.Thread(
                target=lambda: self.check_size(self.size_mb(max_age_s=0)), name="remindful-size", daemon=True
            )
            self._measuring.start()

    def wait_for_size(self, timeout: float | None = None) -> None:
        """Wait for a measure of the size running in the background, if one is."""
        measuring = self._measuring
        if measuring is not None:
            measuring.join(timeout)

    def check_size(self, used: float) -> None:
        """Warn if ``used`` MB is near the size quota (unless a warning was given just now)."""
        quota = self.settings.storage.max_size_mb
        if used < SIZE_WARNING_RATIO * quota:
            self.last_warning = None
            return
        percent, now, last = int(100 * used / quota), time.monotonic(), self.last_warning
        if last is None or percent > last[1] or now - last[0] >= SIZE_WARNING_INTERVAL_S:
            self.last_warning = (now, percent)
            log.warning(
                "Memory storage at %.0f%% of its quota (%s MB of %s MB): enable auto-cleanup "
                "(retention.cleanup.enabled) or increase storage.max_size_mb",
                100 * used / quota,
                megabytes(used),
                megabytes(quota),
            )


class EvictionOrder:
    """One type's unbookmarked memories (those the policy governs), least important first: ranked
    from all of them when made, then kept up to date by :meth:`take`. Not thread-safe (the quotas
    hold a lock).

    Rows stored since are found by rowid (above the newest one ranked). SQLite gives a new row the
    rowid of the newest one if that was deleted: when a victim taken here is the newest, the
    mark moves below it; a newest row deleted by someone else is not seen, and its successor
    waits for the next full ranking (``RANKING_MAX_AGE_S``) to be a candidate."""

    def __init__(self, retention: Evictable, type_value: str) -> None:
        self.type = type_value
        self._made = time.monotonic()
        now = time.time()
        self._order = sorted(_ranked(row, now) for row in retention.unbookmarked(type_value))  # least important first
        self._top = max((entry[3] for entry in self._order), default=0)  # the newest rowid ranked

    def age_s(self) -> float:
        return time.monotonic() - self._made

    def take(self, retention: Evictable, n: int) -> list[str]:
        """The ids of the ``n`` least important unbookmarked memories of the type (fewer if there
        are not that many), taken out of the order: rows stored since are ranked in first, and
        each one is read again before it is chosen (gone or bookmarked since: skipped; more
        important since, as after an access: ranked again)."""
        now = time.time()
        known = {entry[2] for entry in self._order}
        for row in retention.unbookmarked(self.type, above_rowid=self._top):
            entry = _ranked(row, now)
            self._top = max(self._top, entry[3])
            if entry[2] not in known:
                bisect.insort(self._order, entry)
        chosen: list[tuple[float, float, str, int]] = []
        while len(chosen) < n and self._order:
            cut = n - len(chosen) + 8  # a few more: some may be gone, or more important now
            head, self._order = self._order[:cut], self._order[cut:]
            current = {row[1]: row for row in retention.unbookmarked(self.type, ids=[entry[2] for entry in head])}
            for entry in head:
                now_row = current.get(entry[2])
                if now_row is None:
                    continue  # gone, or bookmarked since
                fresh = _ranked(now_row, now)
                if len(chosen) < n and fresh[0] <= entry[0] + 1e-9:
                    chosen.append(entry)
                else:
                    bisect.insort(self._order, fresh)  # more important since it was ranked, or not needed now
        if chosen and max(entry[3] for entry in chosen) >= self._top:  # the newest goes: see the class docstring
            self._top = max((entry[3] for entry in self._order), default=0)
        return [entry[2] for entry in chosen]


def _ranked(row: tuple[ImportanceInputs, str, int], now: float) -> tuple[float, float, str, int]:
    """``(score, created_at, id, rowid)`` of an ``unbookmarked`` row: sorted, least important first
    (ties: older first), by :func:`remindful.engine.importance.score`."""
    inputs, memory_id, rowid = row
    return score(inputs, now), float(inputs.created_at), memory_id, rowid


def megabytes(value: float) -> str:
    """A size in MB for a message: whole MB from 10 up, else two significant digits (0.4, not 0)."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


__all__ = ["SIZE_WARNING_INTERVAL_S", "EvictionOrder", "Quotas", "megabytes"]
