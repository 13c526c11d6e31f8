"""Retention: the cleanup that keeps the store from growing without bound.

``cleanup(policy, dry_run=False)`` first plans, then (unless ``dry_run``) deletes. Bookmarked and
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

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from remindful.engine.importance import score
from remindful.engine.repositories.retention import RetentionCandidate, created_window
from remindful.model import CleanupReport, MemoryType
from remindful.services.policy.dedup import Cluster, Pruner, find_clusters, record_consolidation, refresh_index

if TYPE_CHECKING:
    from remindful.config import RetentionTier, Settings
    from remindful.engine.repositories import MemoryRepository, RetentionRepository

log = logging.getLogger("remindful")

DAY_S = 86_400.0
SIZE_TARGET = 0.9


class Retainer(Pruner, Protocol):
    """What a cleanup reads of the store besides its catalog, and does to it
    (:class:`~remindful.engine.store.Store` is one)."""

    @property
    def disabled_reason(self) -> str | None: ...

    def type_counts(self) -> dict[str, int]: ...

    def size_mb(self, *, max_age_s: float = ...) -> float: ...

    def vectors_ready(self) -> object:
        """Wait (up to a minute) for the vectors this process has yet to compute."""


@dataclass(frozen=True, slots=True)
class Policy:
    """A cleanup's parts: the store it deletes from and the repositories it reads and records with."""

    store: Retainer
    memories: MemoryRepository
    retention: RetentionRepository


class _Importance:
    """The importance scores of the candidates a cap or a quota has to rank, each read and computed once."""

    def __init__(self, retention: RetentionRepository, now: float) -> None:
        self.retention, self.now = retention, now
        self.scores: dict[str, float] = {}

    def ranked(self, rows: list[RetentionCandidate]) -> list[RetentionCandidate]:
        """``rows`` least important first (ties: older first)."""
        missing = [r.id for r in rows if r.id not in self.scores]
        if missing:
            for mid, inputs in self.retention.importance_inputs(missing).items():
                self.scores[mid] = score(inputs, self.now)
        return sorted(rows, key=lambda r: (self.scores.get(r.id, 0.0), r.created_at))


def _long_term_keeper(settings: Settings) -> Callable[[RetentionCandidate], bool]:
    """Whether a row past the default retention meets the long-term ``keep_criteria``."""
    criteria = settings.retention.tiers.long_term.keep_criteria
    workflows = bool(criteria and criteria.successful_workflows)
    screens = bool(criteria and criteria.unique_screens)
    workflow, screen = MemoryType.WORKFLOW.value, MemoryType.SCREEN.value

    def keep(row: RetentionCandidate) -> bool:
        return (workflows and row.success and row.type == workflow) or (
            screens and row.consolidated and row.type == screen
        )

    return keep


def plan(policy: Policy, now: float | None = None) -> tuple[dict[str, str], list[Cluster]]:
    """``{id: reason}`` of every memory cleanup would delete, and the dedup clusters."""
    doomed, clusters, _rows = _plan(policy, time.time() if now is None else now)
    return doomed, clusters


def _plan(policy: Policy, now: float) -> tuple[dict[str, str], list[Cluster], list[RetentionCandidate]]:
    settings = policy.store.settings
    retention = settings.retention
    tiers = retention.tiers
    rows = policy.retention.candidates()
    importance = _Importance(policy.retention, now)
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
            window = created_window(now - tier.max_age_days * DAY_S, now - lower * DAY_S)
            found = find_clusters(
                policy.retention, threshold=retention.dedup_threshold, flt=window, exclude=doomed, now=now
            )
            for cluster in found:
                doomed.update(dict.fromkeys(cluster.duplicates, "dedup"))
            clusters += found
        lower = tier.max_age_days

    lower = 0.0
    for tier in (tiers.recent, tiers.medium, tiers.long_term):
        if tier.max_items is not None:  # lower < age <= max_age_days
            newest, oldest = now - lower * DAY_S, now - tier.max_age_days * DAY_S
            in_tier = [r for r in rows if oldest <= r.created_at < newest and r.id not in doomed and not r.manual]
            _cap(importance, in_tier, tier, doomed)
        lower = tier.max_age_days

    live = [r for r in rows if r.id not in doomed]
    counts = policy.retention.counts_in_reach()
    counts = policy.store.type_counts() if counts is None else counts
    gone = Counter(r.type for r in rows if r.id in doomed)
    for type_value, count in counts.items():
        excess = count - gone.get(type_value, 0) - settings.max_items_for(MemoryType(type_value))
        if excess > 0:
            victims = importance.ranked([r for r in live if r.type == type_value])
            doomed.update(dict.fromkeys((r.id for r in victims[:excess]), "quota"))

    _size_quota(policy, importance, rows, doomed)
    return doomed, clusters, rows


def _cap(
    importance: _Importance, in_tier: list[RetentionCandidate], tier: RetentionTier, doomed: dict[str, str]
) -> None:
    if tier.max_items is None:
        return
    by_type: dict[str, list[RetentionCandidate]] = {}
    for row in in_tier:
        if tier.keep_successful and row.success:
            continue
        by_type.setdefault(row.type, []).append(row)
    for group in by_type.values():
        if len(group) > tier.max_items:
            ranked = importance.ranked(group)
            doomed.update(dict.fromkeys((r.id for r in ranked[: len(group) - tier.max_items]), "tier_cap"))


def _size_quota(
    policy: Policy, importance: _Importance, rows: list[RetentionCandidate], doomed: dict[str, str]
) -> None:
    quota = policy.store.settings.storage.max_size_mb
    used = policy.store.size_mb(max_age_s=0)
    if used <= quota:
        return
    total = policy.retention.total_bytes()
    target = total * (1 - SIZE_TARGET * quota / used)
    freed = sum(r.size for r in rows if r.id in doomed)
    for row in importance.ranked([r for r in rows if r.id not in doomed]):
        if freed >= target:
            break
        doomed[row.id] = "size_quota"
        freed += row.size


def cleanup(policy: Policy, *, dry_run: bool = False, now: float | None = None) -> CleanupReport:
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
    store, settings = policy.store, policy.store.settings
    doomed, clusters, rows = _plan(policy, now)
    ids = list(doomed)
    report.ids = ids
    report.by_reason = dict(Counter(doomed.values()))
    report.clusters = len(clusters)
    report.protected_kept = policy.retention.protected_before(now - settings.retention.default_retention_days * DAY_S)
    planned = [r for r in rows if r.id in doomed]  # (a duplicate stored after the plan began is not counted)
    report.freed_bytes = sum(r.size for r in planned)
    report.by_type = dict(Counter(r.type for r in planned))
    lap("plan")
    if not dry_run and ids:
        threshold = settings.retention.dedup_threshold
        representatives = record_consolidation(
            policy.memories, policy.retention, clusters, threshold=threshold, now=now
        )
        lap("consolidate")
        reasons = {mid: "dedup" if why == "dedup" else f"retention:{why}" for mid, why in doomed.items()}
        report.deleted = store.delete_many(ids, reason=reasons)
        lap("delete")
        refresh_index(store, policy.memories, representatives)
    else:
        report.deleted = len(ids)
    report.seconds = round(time.perf_counter() - started, 4)
    if not dry_run:
        policy.retention.record_cleanup({**report.to_dict(), "at": now})
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


def last_cleanup(retention: RetentionRepository) -> dict[str, Any] | None:
    """The report of the last (non-dry) cleanup, or None if none ran."""
    return retention.last_cleanup()


__all__ = ["Policy", "Retainer", "cleanup", "last_cleanup", "plan"]
