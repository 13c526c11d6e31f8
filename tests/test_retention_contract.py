"""The retention repository's contract on both catalog backends (embedded SQLite, PostgreSQL 15 on a
throwaway cluster): what retention and dedup read and record means the same, and a cleanup planned
and applied over either one deletes the same memories for the same reasons, reports the same shape
(its dry run too), records the same consolidation and leaves the same audit entries, queued vector
deletions and counts. The catalog's connection here is the store's single user (no token): its
policy governs every memory, as on SQLite; what a team member's governs is
``test_postgres_retention.py``'s."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from remindful.config import Settings, load_settings
from remindful.engine import vectors
from remindful.engine.catalog import MemoryRow
from remindful.engine.repositories.retention import created_window
from remindful.services.policy.dedup import dedup
from remindful.services.policy.retention import Policy, cleanup, plan
from test_catalog_contract import SECRET, Backend, open_backend

backend = pytest.fixture(params=["sqlite", "postgres"], name="backend")(open_backend)

NOW = 1_750_000_000.0
DAY = 86_400.0


def unit(seed: int, nudge: float = 0.0) -> np.ndarray:
    vector = np.zeros(384, dtype=np.float32)
    vector[seed] = 1.0
    vector[(seed + 1) % 384] = nudge
    return vector / np.linalg.norm(vector)


def memory(
    mid: str,
    *,
    age_days: float,
    type: str = "knowledge",
    scope: str | None = "user",
    source: str = "hook",
    metadata: Mapping[str, Any] | None = None,
    bookmarked: bool = False,
    expires_at: float | None = None,
    vector: np.ndarray | None = None,
    access_count: int = 0,
) -> MemoryRow:
    return MemoryRow(
        id=mid,
        type=type,
        content=f"memory {mid}",
        metadata=json.dumps(dict(metadata or {})),
        source=source,
        memory_class="semantic",
        session_id=None,
        created_at=NOW - age_days * DAY,
        content_hash=f"hash-{mid}",
        scope=scope,
        bookmarked=bookmarked,
        expires_at=expires_at,
        embedding=vector,
        access_count=access_count,
    )


#: One memory for each rule of the policy, and each that protects from it.
STORE = [
    memory("recent", age_days=1),
    memory("old", age_days=40),
    memory("ancient", age_days=400),
    memory("expired", age_days=2, expires_at=NOW - 60),
    memory("by-hand", age_days=40, source="manual"),
    memory("kept-bookmark", age_days=40, bookmarked=True),
    memory("good-workflow", age_days=40, type="workflow", metadata={"success": True}),
    memory("bad-workflow", age_days=40, type="workflow", metadata={"success": False}),
    # Near-duplicates in the medium tier (7 to 30 days): the most important one (bookmarked)
    # represents them; the copy in another project is that project's own.
    memory("dup-a", age_days=10, vector=unit(3), access_count=9, metadata={"reinforcement_count": 2}),
    memory("dup-b", age_days=11, vector=unit(3, 0.01)),
    memory("dup-c", age_days=12, vector=unit(3, 0.02), bookmarked=True),
    memory("dup-elsewhere", age_days=10, vector=unit(3), scope="project:other-1234abcd"),
    memory("lonely", age_days=10, vector=unit(40)),
    # Two actions for a quota of one: the less important goes.
    memory("act-used", age_days=2, type="action", access_count=20, metadata={"success": True}),
    memory("act-idle", age_days=3, type="action"),
]


class Retainer:
    """What a cleanup does to a store, over a bare catalog: deletes through the catalog's named
    method (the Store's path to it), re-indexing recorded."""

    def __init__(self, backend: Backend, settings: Settings) -> None:
        self.backend, self.settings = backend, settings
        self.reindexed: list[str] = []
        self.disabled_reason: str | None = None

    def type_counts(self) -> dict[str, int]:
        return dict(self.backend.catalog.type_counts())

    def size_mb(self, *, max_age_s: float = 0.0) -> float:
        return 0.0

    def vectors_ready(self) -> object:
        return None

    def delete_many(self, ids: Sequence[str], *, reason: str | Mapping[str, str] = "delete") -> int:
        return len(self.backend.catalog.delete_ids(ids, reason=reason))

    def index_rows(self, rows: Sequence[MemoryRow]) -> None:
        self.reindexed += [r.id for r in rows]


def policy_of(backend: Backend, tmp_path: Path) -> tuple[Policy, Retainer]:
    settings = load_settings(tmp_path, **{"storage.max_items": {"action": 1}})
    retainer = Retainer(backend, settings)
    return Policy(retainer, backend.repos.memories, backend.repos.retention), retainer  # type: ignore[arg-type]


EXPECTED = {
    "old": "retention",
    "ancient": "too_old",
    "expired": "expired",
    "bad-workflow": "retention",
    "dup-a": "dedup",
    "dup-b": "dedup",
    "act-idle": "quota",
}


def test_what_retention_reads(backend: Backend) -> None:
    backend.insert(STORE)
    retention = backend.repos.retention
    candidates = {c.id: c for c in retention.candidates()}
    assert set(candidates) == {r.id for r in STORE if not r.bookmarked}
    assert candidates["good-workflow"].success and not candidates["bad-workflow"].success
    assert candidates["by-hand"].manual and not candidates["old"].manual
    assert candidates["expired"].expires_at == NOW - 60
    assert candidates["old"].created_at == NOW - 40 * DAY and candidates["old"].type == "knowledge"
    assert all(c.size > 0 for c in candidates.values())
    assert retention.protected_before(NOW - 30 * DAY) == 2  # by hand, bookmarked
    assert retention.total_bytes() >= sum(c.size for c in candidates.values())
    assert retention.counts_in_reach() is None  # (every memory: the store's type counts)

    inputs = retention.importance_inputs(["dup-a", "good-workflow", "bad-workflow", "by-hand", "missing"])
    assert set(inputs) == {"dup-a", "good-workflow", "bad-workflow", "by-hand"}
    assert inputs["dup-a"].access_count == 9 and inputs["dup-a"].reinforcement == 2
    assert inputs["good-workflow"].success is True and inputs["bad-workflow"].success is False
    assert inputs["dup-a"].success is None and inputs["by-hand"].manual and not inputs["dup-a"].manual

    assert sorted(retention.types(created_window(NOW - 50 * DAY, NOW - 7 * DAY))) == ["knowledge", "workflow"]
    medium = created_window(NOW - 30 * DAY, NOW - 7 * DAY)
    assert retention.types(medium) == ["knowledge"]
    embedded = {e.id: e for e in retention.embedded("knowledge", medium)}
    assert set(embedded) == {"dup-a", "dup-b", "dup-c", "dup-elsewhere", "lonely"}
    assert embedded["dup-c"].bookmarked and embedded["dup-elsewhere"].scope == "project:other-1234abcd"
    got = vectors.decode(embedded["dup-b"].vector)
    np.testing.assert_allclose(got, unit(3, 0.01), atol=1 / 127)


def test_a_consolidation_and_a_cleanup_report_are_recorded(backend: Backend) -> None:
    backend.insert(STORE[:2])
    retention = backend.repos.retention
    assert retention.last_cleanup() is None
    meta = json.dumps({"consolidation": {"count": 2, "merged_ids": ["x", "y"]}, "note": f"key {SECRET}"})
    retention.record_consolidations([(meta, NOW, "recent")])
    stored = backend.repos.memories.rows(["recent"])["recent"]
    assert json.loads(stored.metadata)["consolidation"] == {"count": 2, "merged_ids": ["x", "y"]}
    assert SECRET not in stored.metadata and stored.updated_at == NOW and not stored.indexed
    retention.record_cleanup({"deleted": 3, "at": NOW})
    retention.record_cleanup({"deleted": 4, "at": NOW + 1})
    assert retention.last_cleanup() == {"deleted": 4, "at": NOW + 1}


def test_a_cleanup_deletes_the_same_memories_for_the_same_reasons(backend: Backend, tmp_path: Path) -> None:
    backend.insert(STORE)
    policy, retainer = policy_of(backend, tmp_path)

    dry = cleanup(policy, dry_run=True, now=NOW)
    assert plan(policy, now=NOW)[0] == EXPECTED and sorted(dry.ids) == sorted(EXPECTED)
    assert dry.to_dict().keys() == {
        "dry_run", "deleted", "by_reason", "by_type", "freed_bytes", "freed_mb", "clusters", "protected_kept",
        "seconds", "phases", "ids",
    }  # fmt: skip
    assert (dry.deleted, dry.clusters, dry.protected_kept) == (7, 1, 2)
    assert dry.by_reason == {"retention": 2, "too_old": 1, "expired": 1, "dedup": 2, "quota": 1}
    assert dry.by_type == {"knowledge": 5, "workflow": 1, "action": 1}
    assert backend.repos.memories.count() == len(STORE) and retention_untouched(backend)

    done = cleanup(policy, now=NOW)
    assert sorted(done.ids) == sorted(EXPECTED) and done.deleted == 7 and done.by_reason == dry.by_reason
    assert backend.repos.memories.existing_ids(list(EXPECTED)) == set()
    assert backend.repos.memories.count() == len(STORE) - 7
    assert backend.catalog.type_counts() == {"knowledge": 6, "workflow": 1, "action": 1}
    assert sum(backend.repos.scopes.counts().values()) == len(STORE) - 7
    assert sorted(i for i, _ in backend.catalog.pending_index_deletes(50)) == sorted(EXPECTED)
    consolidated = json.loads(backend.repos.memories.rows(["dup-c"])["dup-c"].metadata)["consolidation"]
    assert consolidated["count"] == 2 and sorted(consolidated["merged_ids"]) == ["dup-a", "dup-b"]
    assert retainer.reindexed == ["dup-c"]
    last = backend.repos.retention.last_cleanup()
    assert last is not None and last["deleted"] == 7 and last["at"] == NOW
    assert backend.repos.captures.tombstones() == 0  # housekeeping leaves no tombstone


def retention_untouched(backend: Backend) -> bool:
    return backend.repos.retention.last_cleanup() is None


def test_dedup_merges_within_a_scope_and_reports_the_same(backend: Backend, tmp_path: Path) -> None:
    backend.insert(STORE)
    policy, retainer = policy_of(backend, tmp_path)
    dry = dedup(retainer, policy.memories, policy.retention, threshold=0.95, dry_run=True)
    assert (dry.clusters, dry.deleted) == (1, 2)
    assert {k: sorted(v) for k, v in dry.representatives.items()} == {"dup-c": ["dup-a", "dup-b"]}
    done = dedup(retainer, policy.memories, policy.retention, threshold=0.95, types=["knowledge"])
    assert (done.clusters, done.deleted, done.representatives) == (1, 2, dry.representatives)
    found = backend.repos.memories.existing_ids(["dup-a", "dup-b", "dup-c", "dup-elsewhere"])
    assert found == {"dup-c", "dup-elsewhere"}
    assert dedup(retainer, policy.memories, policy.retention, threshold=0.95).clusters == 0
