"""Retention, quota eviction by importance, dedup, and the cleanup scheduler."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remindful.api import MemoryManager
from remindful.engine.importance import ImportanceInputs, score
from remindful.errors import ConfigError, ValidationError
from remindful.services.policy.scheduler import next_run, start_scheduler
from remindful.testing import open_fake

NOW = 1_800_000_000.0
DAY = 86_400.0


def ago(days: float) -> datetime:
    return datetime.now(UTC) - timedelta(days=days)


# -- importance: a pure, documented function --------------------------------------------------------

inputs = st.builds(
    ImportanceInputs,
    type=st.sampled_from(["screen", "action", "workflow", "conversation", "document", "knowledge"]),
    created_at=st.floats(NOW - 1000 * DAY, NOW),
    bookmarked=st.booleans(),
    manual=st.booleans(),
    success=st.sampled_from([True, False, None]),
    reinforcement=st.integers(0, 1000),
    access_count=st.integers(0, 10**6),
    last_accessed=st.none() | st.floats(NOW - 1000 * DAY, NOW),
    base=st.floats(0, 1),
)


@given(inputs)
def test_score_is_bounded_and_bookmarks_dominate(item: ImportanceInputs) -> None:
    value = score(item, NOW)
    assert 0 <= value < 2
    assert (value >= 1) == item.bookmarked


@given(inputs, st.integers(1, 100))
def test_score_never_drops_when_an_input_improves(item: ImportanceInputs, more: int) -> None:
    base = score(item, NOW)
    fields = ImportanceInputs.__dataclass_fields__
    values = {name: getattr(item, name) for name in fields}
    better = [
        {**values, "access_count": item.access_count + more},
        {**values, "reinforcement": item.reinforcement + more},
        {**values, "bookmarked": True},
        {**values, "manual": True},
        {**values, "success": True},
        {**values, "last_accessed": NOW},
    ]
    for changed in better:
        assert score(ImportanceInputs(**changed), NOW) >= base - 1e-12
    assert score(item, NOW + more * DAY) <= base + 1e-12  # time passing never raises it


def test_score_orders_the_obvious_cases() -> None:
    fresh_success = ImportanceInputs(type="workflow", created_at=NOW, success=True, access_count=10)
    old_failure = ImportanceInputs(type="screen", created_at=NOW - 200 * DAY, success=False)
    assert score(fresh_success, NOW) > score(old_failure, NOW)


# -- retention -----------------------------------------------------------------------------------------


def test_cleanup_deletes_old_unprotected_and_keeps_bookmarks(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with open_fake(tmp_path / "s") as memory:
        old = memory.store("old auto capture", type="action", source="hook", timestamp=ago(40))
        bookmarked = memory.store("old bookmark", type="action", metadata={"bookmarked": True}, timestamp=ago(100))
        manual = memory.store("old manual save", type="screen", metadata={"manual_save": True}, timestamp=ago(100))
        recent = memory.store("recent capture", type="action", timestamp=ago(2))
        caplog.set_level(logging.INFO, logger="remindful")
        report = memory.cleanup()
        assert report.deleted == 1 and report.by_reason == {"retention": 1}
        assert report.freed_bytes > 0 and report.protected_kept == 2
        assert [m is not None for m in memory.get_batch([old, bookmarked, manual, recent])] == [False, True, True, True]
        stats = memory.stats()
        assert stats.total_memories == 3
        assert stats.last_cleanup["deleted"] == 1 and stats.last_cleanup["by_reason"] == {"retention": 1}
        assert any("deleted 1 memories" in r.getMessage() and "freed" in r.getMessage() for r in caplog.records)


def test_dry_run_reports_without_deleting(memory: MemoryManager) -> None:
    doomed = memory.store("old thing", source="hook", timestamp=ago(45))
    report = memory.cleanup(dry_run=True)
    assert report.dry_run and report.deleted == 1 and report.ids == [doomed]
    assert memory.get(doomed).id == doomed


def test_expired_memories_are_deleted(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", **{"privacy.auto_delete_days": 2}) as memory:
        stale = memory.store("expires soon", timestamp=ago(3))
        fresh = memory.store("still valid")
        stored = memory.get(stale)
        assert stored.expires_at == stored.created_at + timedelta(days=2)  # auto_delete_days after its time
        assert memory.cleanup().by_reason == {"expired": 1}
        assert memory.get_batch([stale, fresh])[0] is None


def test_long_term_keeps_successful_workflows_and_drops_the_ancient(memory: MemoryManager) -> None:
    kept = memory.store("deploy workflow", type="workflow", metadata={"success": True}, timestamp=ago(90))
    failed = memory.store(
        "broken workflow", type="workflow", source="hook", metadata={"success": False}, timestamp=ago(90)
    )
    ancient = memory.store(
        "ancient workflow", type="workflow", source="hook", metadata={"success": True}, timestamp=ago(400)
    )
    report = memory.cleanup()
    assert report.by_reason == {"retention": 1, "too_old": 1}
    assert [m is not None for m in memory.get_batch([kept, failed, ancient])] == [True, False, False]


def test_medium_tier_cap_keeps_the_most_important(tmp_path: Path) -> None:
    tiers = {"medium": {"max_age_days": 30, "max_items": 2, "keep_successful": True}}
    with open_fake(tmp_path / "s", **{"retention.tiers": tiers}) as memory:
        ids = [
            memory.store(
                f"note {word}", type="knowledge", source="hook", metadata={"importance": imp}, timestamp=ago(10)
            )
            for word, imp in [("alpha", 0.9), ("beta", 0.1), ("gamma", 0.8), ("delta", 0.2)]
        ]
        success = memory.store("succeeded", type="knowledge", metadata={"success": True}, timestamp=ago(10))
        assert memory.cleanup().by_reason == {"tier_cap": 2}
        alive = [m is not None for m in memory.get_batch([*ids, success])]
        assert alive == [True, False, True, False, True]


def test_design_yaml_keep_criteria_list_form_is_accepted(tmp_path: Path) -> None:
    criteria = [{"successful_workflows": False}, {"unique_screens": False}]
    tier = {"max_age_days": 365, "max_items": 500, "keep_criteria": criteria}
    with open_fake(tmp_path / "s", **{"retention.tiers": {"long_term": tier}}) as memory:
        keep = memory.settings.retention.tiers.long_term.keep_criteria
        assert keep is not None and not keep.successful_workflows and not keep.unique_screens
    with pytest.raises(ConfigError, match="max_age_days"):
        open_fake(tmp_path / "t", **{"retention.tiers": {"recent": {"max_age_days": 0}}})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 500), st.sampled_from(["screen", "action", "workflow"]), st.booleans()),
        min_size=1,
        max_size=25,
    ),
    st.integers(1, 5),
)
def test_retention_never_deletes_a_bookmarked_memory(
    tmp_path_factory: pytest.TempPathFactory, items: list[tuple[bool, int, str, bool]], quota: int
) -> None:
    path = tmp_path_factory.mktemp("prop")
    overrides = {"retention.max_items_per_collection": 10_000, "privacy.auto_delete_days": 1}
    with open_fake(path, **overrides) as memory:
        ids = memory.store_batch(
            [
                {
                    "content": "same words every time" if dup else f"memory {i}",
                    "type": kind,
                    "metadata": {"bookmarked": True} if marked else {},
                    "timestamp": ago(age),
                }
                for i, (marked, age, kind, dup) in enumerate(items)
            ]
        )
        memory.settings.retention.max_items_per_collection = quota  # quota pressure on the cleanup
        memory.settings.storage.max_size_mb = 0.0001  # and size pressure
        memory.store_batch([{"content": f"newcomer {kind}", "type": kind} for kind in ("screen", "action", "workflow")])
        memory.cleanup()
        memory.dedup(threshold=0.5)
        for memory_id, (marked, *_rest) in zip(ids, items, strict=True):
            if marked:
                assert memory.get(memory_id).bookmarked


# -- quota ----------------------------------------------------------------------------------------------


def test_quota_evicts_by_importance_score(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", **{"retention.max_items_per_collection": 3}) as memory:
        reinforced = memory.store("reinforced", type="screen", metadata={"reinforcement_count": 5})
        plain = memory.store("plain", type="screen", source="mcp_tool", metadata={"success": False})
        manual = memory.store("manual", type="screen")
        newest = memory.store("newest", type="screen", source="mcp_tool")
        alive = [m is not None for m in memory.get_batch([reinforced, plain, manual, newest])]
        assert alive == [True, False, True, True]


def test_size_quota_evicts_least_important(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        keep = memory.store("precious", metadata={"bookmarked": True})
        rest = memory.store_batch([{"content": f"filler {i} " * 50, "source": "hook"} for i in range(50)])
        memory.settings.storage.max_size_mb = memory.stats().storage.total_size_mb / 2
        report = memory.cleanup()
        assert report.by_reason.get("size_quota", 0) > 0
        assert memory.get(keep).bookmarked
        assert sum(m is None for m in memory.get_batch(rest)) == report.by_reason["size_quota"]


# -- dedup ---------------------------------------------------------------------------------------------


def test_dedup_keeps_one_of_fifty_and_records_the_consolidation(memory: MemoryManager) -> None:
    ids = memory.store_batch(
        [
            {"content": "Login screen with username and password fields", "type": "screen", "timestamp": ago(i / 1e4)}
            for i in range(50, 0, -1)
        ]
    )
    other = memory.store("Dashboard with charts", type="screen")
    action = memory.store("Login screen with username and password fields", type="action")
    report = memory.dedup()
    assert report.clusters == 1 and report.deleted == 49
    (rep,) = report.representatives
    assert rep == ids[-1]  # equally important: the newest is kept
    consolidation = memory.get(rep).metadata["consolidation"]
    assert consolidation["count"] == 49 and len(consolidation["merged_ids"]) == 49 and consolidation["at"]
    assert memory.get(other) and memory.get(action)  # other content, other type: untouched
    assert memory.stats().collections["screen_memories"].count == 2
    assert memory.search("login username password", types=["screen"])[0].id == rep


def test_dedup_prefers_the_important_member_and_spares_bookmarks(memory: MemoryManager) -> None:
    text = "Checkout page with the payment form"
    plain = memory.store(text, type="screen", source="hook")
    important = memory.store(text, type="screen", metadata={"importance": 1.0})
    marked = memory.store(text, type="screen", metadata={"bookmarked": True})
    dry = memory.dedup(dry_run=True)
    assert dry.deleted == 2 and memory.get(plain)
    report = memory.dedup()
    assert report.representatives == {marked: [important, plain]} or report.representatives == {
        marked: [plain, important]
    }
    with pytest.raises(ValidationError, match="threshold"):
        memory.dedup(threshold=1.5)


def test_cleanup_dedups_the_medium_tier(memory: MemoryManager) -> None:
    old = [memory.store("Settings dialog opened", type="screen", timestamp=ago(10 + i / 10)) for i in range(5)]
    young = [memory.store("Settings dialog opened", type="screen", timestamp=ago(1)) for _ in range(2)]
    report = memory.cleanup()
    assert report.by_reason == {"dedup": 4} and report.clusters == 1
    assert sum(m is not None for m in memory.get_batch(old)) == 1
    assert all(memory.get_batch(young))  # the recent tier keeps everything


def test_cleanup_audits_each_deletion_with_its_reason_and_reports_its_phases(memory: MemoryManager) -> None:
    old = memory.store("old auto capture", source="hook", timestamp=ago(40))
    dups = [memory.store("Settings dialog opened", type="screen", timestamp=ago(10 + i / 10)) for i in range(3)]
    report = memory.cleanup()
    assert report.deleted == 3 and report.by_reason == {"retention": 1, "dedup": 2}
    assert set(report.phases) == {"plan", "consolidate", "delete", "record"} and "ids" not in report.to_dict()
    (kept,) = [m for m in memory.get_batch(dups) if m is not None]
    assert kept.metadata["consolidation"]["count"] == 2
    audit = memory.engine.catalog.read("SELECT action, memory_id FROM audit_log WHERE memory_id IS NOT NULL")
    assert sorted(audit) == sorted([("retention:retention", old), *[("dedup", d) for d in dups if d != kept.id]])
    assert memory.cleanup(dry_run=True).phases.keys() == {"plan"}


# -- scheduler -----------------------------------------------------------------------------------------


def test_next_run_daily_and_weekly() -> None:
    now = datetime(2026, 1, 10, 4, 0)
    assert next_run("03:00", "daily", now, None) == datetime(2026, 1, 11, 3, 0)
    assert next_run("05:30", "daily", now, None) == datetime(2026, 1, 10, 5, 30)
    assert next_run("03:00", "weekly", now, datetime(2026, 1, 9, 3, 0)) == datetime(2026, 1, 16, 3, 0)


def test_scheduler_runs_cleanup_when_due_and_survives_errors(memory: MemoryManager) -> None:
    memory.store("old capture", source="hook", timestamp=ago(50))
    ran = threading.Event()
    calls: list[Any] = []

    def job() -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        ran.set()
        return memory.cleanup()

    clock = [datetime(2026, 1, 10, 2, 59, 59)]
    scheduler = memory.cleanup_scheduler(job=job, clock=lambda: clock[0])
    assert scheduler.due_at(clock[0]) == datetime(2026, 1, 10, 3, 0)
    assert isinstance(scheduler.run_once(), RuntimeError)  # logged, not raised
    scheduler.run_once()
    assert ran.is_set() and memory.stats().total_memories == 0


def test_scheduler_runs_the_retention_cleanup_by_default(memory: MemoryManager) -> None:
    memory.store("old capture", source="hook", timestamp=ago(50))
    memory.store("fresh capture")
    result = memory.cleanup_scheduler().run_once()
    assert result["deleted"] == 1 and result["by_reason"] == {"retention": 1}
    assert [m.content for m in memory.list()] == ["fresh capture"]


def test_start_scheduler_respects_settings(tmp_path: Path) -> None:
    with open_fake(tmp_path / "a", **{"retention.cleanup.schedule": "manual"}) as memory:
        assert start_scheduler(memory.cleanup_scheduler()) is None
    with open_fake(tmp_path / "b") as memory:
        scheduler = start_scheduler(memory.cleanup_scheduler())
        assert scheduler is not None and scheduler._thread is not None and scheduler._thread.is_alive()
        scheduler.stop()
        assert scheduler._thread is None


def test_confirmations_recorded_by_learning_count_as_reinforcement(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", **{"retention.max_items_per_collection": 2}) as memory:
        helped = memory.store("helpful answer", type="knowledge", source="hook")
        plain = memory.store("plain answer", type="knowledge", source="hook")
        catalog = memory.engine.catalog
        catalog.write(
            lambda c: c.execute(
                "CREATE TABLE IF NOT EXISTS reinforcements (seq INTEGER PRIMARY KEY, memory_id TEXT NOT NULL, "
                "at REAL NOT NULL, reason TEXT NOT NULL, query TEXT, importance REAL NOT NULL)"
            )
        )
        catalog.write(
            lambda c: c.executemany(
                "INSERT INTO reinforcements (memory_id, at, reason, importance) VALUES (?, 0, 'confirm', 0.5)",
                [(helped,)] * 3,
            )
        )
        memory.store("newcomer", type="knowledge", source="hook")
        assert memory.get(helped) and memory.get_batch([plain]) == [None]
