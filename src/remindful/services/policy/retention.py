"""Retention: the cleanup that keeps the store from growing without bound.

``cleanup(state, dry_run=False)`` first plans, then (unless ``dry_run``) deletes. Bookmarked and
``manual_save`` memories are never deleted by any step. Memories a user stored by hand (source
``manual``) are not deleted for their age (steps 2, 3 and 5: the spec deletes "only auto-captured,
non-important old memories"); the expiry they were given and the quotas still apply. The steps,
each on what the previous ones left:

1. ``expired``: ``expires_at`` (set from ``privacy.auto_delete_days``) has passed.
2. ``too_old``: older than ``tiers.long_term.max_age_days`` (365).
3. ``retention``: older than ``default_retention_days`` (30) and not meeting the long-term
   ``keep_criteria``: a workflow with ``success: true`` (``successful_workflows``), a screen that
   represents a consolidated dedup cluster (``unique_screens``).
4. ``dedup``: near-duplicates (cosine ≥ ``dedup_threshold``) among memories in a tier with
   ``discard_repetitive`` (medium: 7 to 30 days) collapse into their most important member
   (:mod:`remindful.services.policy.dedup`).
5. ``tier_cap``: a tier's ``max_items`` per type (medium 1000, long_term 500), the least important
   going first; with ``keep_successful``, memories with ``success: true`` are exempt. Age tiers:
   recent ≤ 7 days < medium ≤ 30 days < long_term ≤ 365 days.
6. ``quota``: per-type item quota (``retention.max_items_per_collection`` or
   ``storage.max_items``), least important first.
7. ``size_quota``: when the storage exceeds ``storage.max_size_mb``, the least important memories
   go until the rows' own bytes have shrunk by the share needed to get back to 90 % of the quota
   (index files shrink later, as Chroma compacts).

The run is logged (count and freed bytes) and recorded in the catalog's ``meta`` table under
``last_cleanup``; the counts in ``stats()`` are current afterwards.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from remindful.engine.importance import columns, inputs_from_row, score
from remindful.engine.sqlfilter import SqlFilter
from remindful.model import CleanupReport, MemoryType
from remindful.services.policy.dedup import Cluster, find_clusters, record_consolidation, refresh_index

if TYPE_CHECKING:
    from remindful.config import RetentionTier, Settings
    from remindful.engine.store import Store

log = logging.getLogger("remindful")

DAY_S = 86_400.0
SIZE_TARGET = 0.9


@dataclass(slots=True)
class _Row:
    id: str
    type: str
    created_at: float
    expires_at: float | None
    size: int
    success: bool
    consolidated: bool
    manual: bool = False  # stored by hand: not deleted for its age
    score: float | None = None  # computed only for rows a cap or quota has to rank


def _load(state: Store) -> list[_Row]:
    rows = state.catalog.read(
        "SELECT id, type, created_at, expires_at, size_bytes, json_type(metadata, '$.success') = 'true', "
        "CASE WHEN type = 'screen' THEN json_type(metadata, '$.consolidation') IS NOT NULL ELSE 0 END, "
        "source = 'manual' FROM memories WHERE bookmarked = 0"
    )
    return [_Row(r[0], r[1], r[2], r[3], r[4], bool(r[5]), bool(r[6]), bool(r[7])) for r in rows]


def _ranked(state: Store, rows: list[_Row], now: float) -> list[_Row]:
    """``rows`` least important first (ties: older first), scoring those not scored yet."""
    missing = {r.id: r for r in rows if r.score is None}
    if missing:
        cols = columns(state.catalog)
        for r in state.catalog.read_in(f"SELECT {cols} FROM memories WHERE id IN ({{marks}})", list(missing)):
            missing[r[0]].score = score(inputs_from_row(r), now)
    return sorted(rows, key=lambda r: (r.score or 0.0, r.created_at))


def _long_term_keeper(settings: Settings) -> Callable[[_Row], bool]:
    """Whether a row past the default retention meets the long-term ``keep_criteria``."""
    criteria = settings.retention.tiers.long_term.keep_criteria
    workflows = bool(criteria and criteria.successful_workflows)
    screens = bool(criteria and criteria.unique_screens)
    workflow, screen = MemoryType.WORKFLOW.value, MemoryType.SCREEN.value

    def keep(row: _Row) -> bool:
        return (workflows and row.success and row.type == workflow) or (
            screens and row.consolidated and row.type == screen
        )

    return keep


def plan(state: Store, now: float | None = None) -> tuple[dict[str, str], list[Cluster]]:
    """``{id: reason}`` of every memory cleanup would delete, and the dedup clusters."""
    doomed, clusters, _rows = _plan(state, time.time() if now is None else now)
    return doomed, clusters


def _plan(state: Store, now: float) -> tuple[dict[str, str], list[Cluster], list[_Row]]:
    settings = state.settings
    retention = settings.retention
    tiers = retention.tiers
    rows = _load(state)
    doomed: dict[str, str] = {}
    # Ages as creation-time bounds: "older than d days" is created_at < now - d days.
    too_old = now - tiers.long_term.max_age_days * DAY_S
    past_retention = now - retention.default_retention_days * DAY_S
    keep = _long_term_keeper(settings)
    for row in rows:
        if row.expires_at is not None and row.expires_at <= now:
            doomed[row.id] = "expired"
        elif row.manual:
            continue
        elif row.created_at < too_old:
            doomed[row.id] = "too_old"
        elif row.created_at < past_retention and not keep(row):
            doomed[row.id] = "retention"

    clusters: list[Cluster] = []
    lower = 0.0
    for tier in (tiers.recent, tiers.medium, tiers.long_term):
        if tier.discard_repetitive:
            window = SqlFilter(
                "created_at < ? AND created_at >= ?", (now - lower * DAY_S, now - tier.max_age_days * DAY_S)
            )
            found = find_clusters(state, threshold=retention.dedup_threshold, flt=window, exclude=doomed, now=now)
            for cluster in found:
                doomed.update(dict.fromkeys(cluster.duplicates, "dedup"))
            clusters += found
        lower = tier.max_age_days

    lower = 0.0
    for tier in (tiers.recent, tiers.medium, tiers.long_term):
        if tier.max_items is not None:  # lower < age <= max_age_days
            newest, oldest = now - lower * DAY_S, now - tier.max_age_days * DAY_S
            in_tier = [r for r in rows if oldest <= r.created_at < newest and r.id not in doomed and not r.manual]
            _cap(state, in_tier, tier, doomed, now)
        lower = tier.max_age_days

    live = [r for r in rows if r.id not in doomed]
    counts = state.type_counts()
    gone = Counter(r.type for r in rows if r.id in doomed)
    for type_value, count in counts.items():
        excess = count - gone.get(type_value, 0) - settings.max_items_for(MemoryType(type_value))
        if excess > 0:
            victims = _ranked(state, [r for r in live if r.type == type_value], now)
            doomed.update(dict.fromkeys((r.id for r in victims[:excess]), "quota"))

    _size_quota(state, rows, doomed, now)
    return doomed, clusters, rows


def _cap(state: Store, in_tier: list[_Row], tier: RetentionTier, doomed: dict[str, str], now: float) -> None:
    if tier.max_items is None:
        return
    by_type: dict[str, list[_Row]] = {}
    for row in in_tier:
        if tier.keep_successful and row.success:
            continue
        by_type.setdefault(row.type, []).append(row)
    for group in by_type.values():
        if len(group) > tier.max_items:
            ranked = _ranked(state, group, now)
            doomed.update(dict.fromkeys((r.id for r in ranked[: len(group) - tier.max_items]), "tier_cap"))


def _size_quota(state: Store, rows: list[_Row], doomed: dict[str, str], now: float) -> None:
    quota = state.settings.storage.max_size_mb
    used = state.size_mb(max_age_s=0)
    if used <= quota:
        return
    total = int(state.catalog.read("SELECT coalesce(sum(size_bytes), 0) FROM memories")[0][0])
    target = total * (1 - SIZE_TARGET * quota / used)
    freed = sum(r.size for r in rows if r.id in doomed)
    for row in _ranked(state, [r for r in rows if r.id not in doomed], now):
        if freed >= target:
            break
        doomed[row.id] = "size_quota"
        freed += row.size


def cleanup(state: Store, *, dry_run: bool = False, now: float | None = None) -> CleanupReport:
    """Apply the retention policy (see the module docstring); ``dry_run`` only reports.

    Everything planned is deleted in one catalog transaction (audit action ``retention:<reason>``,
    or ``dedup``), after the dedup consolidations are recorded. When it returns, the memories are
    gone from the catalog, FTS and every search; their vectors, and their words in the session
    windows of the memories next to them, may still be leaving in the background (``flush()``
    waits for that; a crash leaves it to the next open)."""
    started = time.perf_counter()
    mark = started
    report = CleanupReport(dry_run=dry_run)

    def lap(phase: str) -> None:
        nonlocal mark
        at = time.perf_counter()
        report.phases[phase] = round(at - mark, 4)
        mark = at

    now = time.time() if now is None else now
    doomed, clusters, rows = _plan(state, now)
    ids = list(doomed)
    report.ids = ids
    report.by_reason = dict(Counter(doomed.values()))
    report.clusters = len(clusters)
    report.protected_kept = int(
        state.catalog.read(
            "SELECT count(*) FROM memories WHERE (bookmarked = 1 OR source = 'manual') AND created_at < ?",
            (now - state.settings.retention.default_retention_days * DAY_S,),
        )[0][0]
    )
    planned = [r for r in rows if r.id in doomed]  # (a duplicate stored after the plan began is not counted)
    report.freed_bytes = sum(r.size for r in planned)
    report.by_type = dict(Counter(r.type for r in planned))
    lap("plan")
    if not dry_run and ids:
        threshold = state.settings.retention.dedup_threshold
        representatives = record_consolidation(state, clusters, threshold=threshold, now=now)
        lap("consolidate")
        reasons = {mid: "dedup" if why == "dedup" else f"retention:{why}" for mid, why in doomed.items()}
        report.deleted = state.delete_many(ids, reason=reasons)
        lap("delete")
        refresh_index(state, representatives)
    else:
        report.deleted = len(ids)
    report.seconds = round(time.perf_counter() - started, 4)
    if not dry_run:
        summary = json.dumps({**report.to_dict(), "at": now})
        state.catalog.write(
            lambda c: c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('last_cleanup', ?)", (summary,)),
            what="recording the cleanup",
        )
        lap("record")
    log.info(
        "retention%s: %s %d memories (%s), freed %.2f MB in %.2f s",
        " (dry run)" if dry_run else "",
        "would delete" if dry_run else "deleted",
        report.deleted,
        ", ".join(f"{k} {v}" for k, v in sorted(report.by_reason.items())) or "nothing to do",
        report.freed_bytes / 1_048_576,
        report.seconds,
    )
    return report


def last_cleanup(state: Store) -> dict[str, Any] | None:
    """The report of the last (non-dry) cleanup, or None if none ran."""
    rows = state.catalog.read("SELECT value FROM meta WHERE key = 'last_cleanup'")
    return json.loads(rows[0][0]) if rows else None


__all__ = ["cleanup", "last_cleanup", "plan"]
