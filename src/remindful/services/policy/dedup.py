"""Dedup: near-identical memories of one type collapse into one representative.

Clustering is greedy "leader" clustering over cosine similarity, which is deterministic and bounded
in memory: memories are visited most important first (then newest, see
:mod:`remindful.engine.importance`); each one not yet in a cluster starts a cluster and takes every
unclustered memory of the same type and scope with similarity ≥ ``threshold`` (two projects' copies
of a memory are each their project's). The leader is therefore the cluster's most important member
(ties: the newest) and is kept; the others are deleted, except bookmarked / manual_save ones, which
are never deleted. The representative's metadata records the consolidation: ``consolidation =
{"count": n, "merged_ids": [...], "at": ISO time, "threshold": t}`` (counts accumulate over runs;
the id list keeps the latest :data:`MAX_RECORDED_IDS`).

The pairs at or above the threshold come from :class:`~remindful.services.policy.near_pairs.NearPairs`:
every pair, in blocks of :data:`BLOCK` rows (memory ``BLOCK x n`` floats), for a group of up to
20,000 memories; random-hyperplane LSH with every candidate verified beyond (a million memories in
minutes, not hours; a pair at the threshold is found with probability ≥ 0.999, a closer one more surely).
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

import numpy as np

from remindful.engine import vectors as stored_vectors
from remindful.engine.importance import score
from remindful.engine.sqlfilter import SqlFilter
from remindful.model import DedupReport
from remindful.services.policy.near_pairs import BLOCK, NearPairs

if TYPE_CHECKING:
    from remindful.config import Settings
    from remindful.engine.catalog import MemoryRow
    from remindful.engine.repositories import MemoryRepository, RetentionRepository
    from remindful.engine.repositories.retention import Embedded

#: Neighbour pairs kept in memory at once (beyond, a leader's neighbours are recomputed).
MAX_STORED_PAIRS = 5_000_000
MAX_RECORDED_IDS = 100


class Pruner(Protocol):
    """What dedup (and retention) do to the store: delete memories and re-index the ones whose
    metadata changed (:class:`~remindful.engine.store.Store` is one)."""

    @property
    def settings(self) -> Settings: ...

    def delete_many(self, ids: Sequence[str], *, reason: str | Mapping[str, str] = "delete") -> int: ...

    def index_rows(self, rows: Sequence[MemoryRow]) -> None: ...


@dataclass(slots=True)
class Cluster:
    """One cluster: the kept representative and the members to delete."""

    representative: str
    type: str
    duplicates: list[str] = field(default_factory=list)
    kept_protected: list[str] = field(default_factory=list)


def find_clusters(
    retention: RetentionRepository,
    *,
    threshold: float,
    flt: SqlFilter | None = None,
    exclude: Collection[str] = (),
    now: float | None = None,
) -> list[Cluster]:
    """Clusters (with at least one duplicate) among embedded memories matching ``flt``, per type
    and scope.

    ``exclude`` ids (already planned for deletion) take no part."""
    now = time.time() if now is None else now
    flt = flt or SqlFilter()
    skip = set(exclude)
    clusters: list[Cluster] = []
    for type_value in sorted(retention.types(flt)):
        by_scope: dict[str | None, list[Embedded]] = {}
        for r in retention.embedded(type_value, flt):
            if r.id not in skip:
                by_scope.setdefault(r.scope, []).append(r)
        for rows in by_scope.values():
            if len(rows) >= 2:
                clusters += _cluster_type(retention, type_value, rows, threshold, now)
    return clusters


def _cluster_type(
    retention: RetentionRepository, type_value: str, rows: list[Embedded], threshold: float, now: float
) -> list[Cluster]:
    raw = stored_vectors.matrix([r.vector for r in rows])
    norms = np.linalg.norm(raw, axis=1, keepdims=True)
    matrix = (raw / np.where(norms == 0, 1.0, norms)).astype(np.float32)
    near = NearPairs(matrix, threshold, max_stored=MAX_STORED_PAIRS)
    neighbours = near.neighbours
    if not neighbours:
        return []
    # Only rows with a neighbour are scored (a lone row is nobody's neighbour either: similarity
    # is symmetric). Most important first, then newest: a cluster's first member represents it.
    ids = [rows[i].id for i in neighbours]
    inputs = retention.importance_inputs(ids)
    position = {mid: i for i, mid in enumerate(ids)}
    order = sorted(
        neighbours,
        key=lambda i: (-score(inputs[rows[i].id], now), -inputs[rows[i].id].created_at, position[rows[i].id]),
    )
    taken = np.zeros(len(rows), dtype=bool)
    clusters: list[Cluster] = []
    for leader in order:
        if taken[leader]:
            continue
        members = neighbours[leader]
        members = near.of(leader, skip=taken) if members is None else members[~taken[members]]
        taken[members] = True
        cluster = Cluster(representative=rows[leader].id, type=type_value)
        for m in members:
            if m != leader:
                (cluster.kept_protected if rows[m].bookmarked else cluster.duplicates).append(rows[m].id)
        if cluster.duplicates:
            clusters.append(cluster)
    return clusters


def apply_clusters(
    store: Pruner,
    memories: MemoryRepository,
    retention: RetentionRepository,
    clusters: list[Cluster],
    *,
    threshold: float,
    now: float | None = None,
) -> int:
    """Delete each cluster's duplicates and record the consolidation on its representative.
    Returns the number of memories deleted."""
    if not clusters:
        return 0
    updated = record_consolidation(memories, retention, clusters, threshold=threshold, now=now)
    deleted = store.delete_many([d for c in clusters for d in c.duplicates], reason="dedup")
    refresh_index(store, memories, updated)
    return deleted


def record_consolidation(
    memories: MemoryRepository,
    retention: RetentionRepository,
    clusters: list[Cluster],
    *,
    threshold: float,
    now: float | None = None,
) -> list[str]:
    """Record each cluster's consolidation in its representative's metadata (one transaction);
    returns the representatives updated (those still stored). The duplicates are not deleted."""
    if not clusters:
        return []
    now = time.time() if now is None else now
    at = datetime.fromtimestamp(now, UTC).isoformat()
    reps = memories.rows([c.representative for c in clusters])
    updates: list[tuple[str, float, str]] = []
    for cluster in clusters:
        row = reps.get(cluster.representative)
        if row is None:  # deleted meanwhile: nothing to record on
            continue
        meta = json.loads(row.metadata)
        previous = meta.get("consolidation") if isinstance(meta.get("consolidation"), dict) else {}
        merged = [*previous.get("merged_ids", []), *cluster.duplicates][-MAX_RECORDED_IDS:]
        meta["consolidation"] = {
            "count": int(previous.get("count", 0)) + len(cluster.duplicates),
            "merged_ids": merged,
            "at": at,
            "threshold": threshold,
        }
        updates.append((json.dumps(meta, ensure_ascii=False), now, row.id))
    retention.record_consolidations(updates)
    return [u[2] for u in updates]


def refresh_index(store: Pruner, memories: MemoryRepository, ids: list[str]) -> None:
    """Re-index the representatives so the index's copy of their metadata is current."""
    rows = list(memories.rows(ids).values())
    vectors = memories.embeddings([r.id for r in rows])
    rows = [r for r in rows if r.id in vectors]
    for r in rows:
        r.embedding = vectors[r.id]
    if rows:
        store.index_rows(rows)


def dedup(
    store: Pruner,
    memories: MemoryRepository,
    retention: RetentionRepository,
    *,
    threshold: float | None = None,
    types: Collection[str] | None = None,
    dry_run: bool = False,
) -> DedupReport:
    """Deduplicate every memory (of ``types``, default all) at ``threshold`` (default
    ``retention.dedup_threshold``); ``dry_run`` deletes nothing."""
    threshold = store.settings.retention.dedup_threshold if threshold is None else threshold
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold <= 1:
        from remindful.errors import ValidationError

        raise ValidationError("threshold", f"expected a cosine similarity in (0, 1], got {threshold!r}")
    flt = None
    if types:
        from remindful.engine.sqlfilter import build_filter
        from remindful.engine.validation import validate_item

        values = [validate_item({"content": "x", "type": t}, "")["type"].value for t in types]
        flt = build_filter(types=values)
    started = time.perf_counter()
    clusters = find_clusters(retention, threshold=float(threshold), flt=flt)
    total = sum(len(c.duplicates) for c in clusters)
    deleted = total if dry_run else apply_clusters(store, memories, retention, clusters, threshold=float(threshold))
    return DedupReport(
        dry_run=dry_run,
        threshold=float(threshold),
        clusters=len(clusters),
        deleted=deleted,
        seconds=round(time.perf_counter() - started, 4),
        representatives={c.representative: c.duplicates for c in clusters},
    )


__all__ = [
    "BLOCK",
    "Cluster",
    "Pruner",
    "apply_clusters",
    "dedup",
    "find_clusters",
    "record_consolidation",
    "refresh_index",
]
