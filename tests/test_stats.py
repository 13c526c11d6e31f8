"""stats(): the spec's most frequent actions and screens and average session length, captures per
day, the last backup; a full disk is reported, not raised (a real full filesystem: a small tmpfs)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from remindful.api import MemoryManager
from remindful.services import stats as stats_module
from remindful.shells.cli import app
from remindful.testing import open_fake
from small_disk import fill, mounted


@pytest.fixture(autouse=True)
def fresh_aggregates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every stats() call recounts (the reuse window is tested on its own)."""
    monkeypatch.setattr(stats_module, "AGGREGATE_MAX_AGE_S", 0.0, raising=False)
    monkeypatch.setattr(stats_module, "AGGREGATE_KEEP_S", 0.0, raising=False)


def _activity(memory: MemoryManager) -> None:
    t0 = time.time() - 3600
    items = []
    for i, verb in enumerate(["click", "click", "click", "type", "type", "scroll"]):
        items.append(
            {"content": f"{verb} something {i}", "type": "action", "session_id": "a", "timestamp": t0 + 60 * i}
        )
        items[-1]["metadata"] = {"action": verb}
    items += [
        {
            "content": "Inbox with 3 mails",
            "type": "screen",
            "session_id": "b",
            "timestamp": t0,
            "metadata": {"app": "Mail"},
        },
        {
            "content": "Inbox again",
            "type": "screen",
            "session_id": "b",
            "timestamp": t0 + 1200,
            "metadata": {"app": "Mail"},
        },
        {"content": "Login form", "type": "screen", "session_id": "b", "timestamp": t0 + 600},
    ]
    memory.store_batch(items)


def test_most_frequent_actions_and_screens(memory: MemoryManager) -> None:
    _activity(memory)
    activity = memory.stats().activity
    assert activity["actions"][:3] == [
        {"name": "click", "count": 3},
        {"name": "type", "count": 2},
        {"name": "scroll", "count": 1},
    ]
    assert activity["screens"] == [{"name": "Mail", "count": 2}, {"name": "Login form", "count": 1}]


def test_most_frequent_groups_tool_calls_by_command_and_file_and_like_texts_together(memory: MemoryManager) -> None:
    """Issue 35: entries cut mid-word (``"DB_PORT=5432" → "D``) and every distinct text counted
    once (200 "step N: opened the billing page" rows of 1 each)."""
    t0 = time.time() - 3600

    def call(i: int, tool: str, args: dict[str, str], content: str) -> dict[str, object]:
        meta = {"tool_name": tool, "arguments": args, "success": True, "hook_event": "PostToolUse"}
        return {"content": content, "type": "action", "timestamp": t0 + i, "metadata": meta}

    items = [call(i, "Bash", {"command": "pnpm test"}, f"Ran `pnpm test`: ok: {i} passed") for i in range(5)]
    staging = {"file_path": "/work/shop/.env.staging"}
    items += [call(10 + i, "Edit", staging, f'Edited .env.staging: "DB_PORT=54{i}" → "DB_PORT=5432"') for i in range(3)]
    items += [{"content": f"step {i}: opened the billing page and waited", "type": "action", "timestamp": t0 + 20 + i}
              for i in range(7)]  # fmt: skip
    long = "The staging database listens on DB_PORT=5432 behind the bastion host of the billing cluster"
    items.append({"content": long, "type": "action", "timestamp": t0 + 40})
    memory.store_batch(items)
    names = {a["name"]: a["count"] for a in memory.stats().activity["actions"]}
    assert names["step N: opened the billing page and waited"] == 7
    assert names["pnpm test"] == 5 and names["Edit .env.staging"] == 3
    (cut,) = [n for n in names if n.startswith("The staging")]
    assert cut.endswith("…") and long.startswith(cut[:-1]) and long[len(cut) - 1] == " "  # cut between words


def test_average_session_length_in_memories_and_minutes(memory: MemoryManager) -> None:
    _activity(memory)  # session a: 6 memories over 5 minutes; session b: 3 over 20 minutes
    length = memory.stats().session_length
    assert length["sessions"] == 2
    assert length["avg_memories"] == 4.5
    assert length["avg_minutes"] == 12.5


def test_empty_store_reports_no_averages(memory: MemoryManager) -> None:
    report = memory.stats()
    assert report.session_length == {"sessions": 0, "avg_memories": None, "avg_minutes": None}
    assert report.activity["actions"] == [] and report.last_backup is None
    assert report.storage.storage_full is False and report.warnings == ()


def test_captures_per_day_covers_every_day_including_empty_ones(memory: MemoryManager) -> None:
    now = time.time()
    memory.store_batch([{"content": f"n{i}", "type": "knowledge", "timestamp": now - 2 * 86400} for i in range(3)])
    memory.store("today", type="knowledge")
    days = memory.stats().captures_per_day
    assert len(days) == stats_module.DAYS_CHARTED
    assert days[-1] == {"day": time.strftime("%Y-%m-%d", time.gmtime(now)), "count": 1}
    assert days[-3]["count"] == 3 and days[-2]["count"] == 0
    assert sum(d["count"] for d in days) == 4


def test_last_backup_is_reported(memory: MemoryManager) -> None:
    memory.store("x", type="knowledge")
    made = memory.backup(name="first")
    last = memory.stats().last_backup
    assert last is not None and last["path"] == made.path and last["automatic"] is False and last["at"]


def test_aggregates_are_reused_while_nothing_changes_and_recounted_after_a_store(
    memory: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stats_module, "AGGREGATE_KEEP_S", 3600.0)
    _activity(memory)
    first = memory.stats().activity
    calls = []
    real = stats_module.most_frequent
    monkeypatch.setattr(stats_module, "most_frequent", lambda c: calls.append(1) or real(c))
    assert memory.stats().activity == first and calls == []  # nothing changed: reused
    memory.store("drag it", type="action", metadata={"action": "drag"})
    assert {"name": "drag", "count": 1} in memory.stats().activity["actions"] and calls == [1]


def test_cli_stats_prints_the_new_figures(tmp_path: Path) -> None:
    with open_fake(tmp_path / "store") as memory:
        _activity(memory)
    runner = CliRunner()
    # The CLI opens the real embedder lazily; stats loads no model.
    out = runner.invoke(app, ["--path", str(tmp_path / "store"), "stats"])
    assert out.exit_code == 0, out.output
    assert "average session: 4.5 memories, 12.5 minutes" in out.output
    assert "most frequent actions: click x3, type x2, scroll x1" in out.output
    data = json.loads(runner.invoke(app, ["--path", str(tmp_path / "store"), "stats", "--json"]).output)
    assert data["session_length"]["avg_memories"] == 4.5


# -- a full disk ----------------------------------------------------------------------------------


def test_stats_on_a_full_disk_reports_it_while_the_store_is_open(tmp_path: Path) -> None:
    with mounted(tmp_path / "disk", "2m") as disk, open_fake(disk / "store") as memory:
        memory.store("before the disk filled", type="knowledge")
        fill(disk)
        report = memory.stats()
        assert report.storage.storage_full is True
        assert report.total_memories == 1
        assert any("full" in w and "cleanup" in w for w in report.warnings)


def test_stats_on_a_full_disk_reports_it_when_the_store_cannot_open_for_writing(tmp_path: Path) -> None:
    with mounted(tmp_path / "disk", "2m") as disk:
        with open_fake(disk / "store") as memory:
            memory.store("before the disk filled", type="knowledge")
        fill(disk)
        with open_fake(disk / "store") as memory:
            # SQLite cannot make the -shm file on a full disk: the catalog is opened for reading only
            # (it could not be read at all before: the report had no counts)
            report = memory.stats()
            assert report.storage.storage_full is True and report.total_memories == 1
            assert any("full" in w and "cleanup" in w for w in report.warnings)
            runner = CliRunner()
            out = runner.invoke(app, ["--path", str(disk / "store"), "stats"])
            assert out.exit_code == 0, out.output


def test_store_wide_latency_percentiles_are_within_ten_percent() -> None:
    from collections import Counter

    from remindful.engine import perf

    latencies = [0.1, 0.3, *(float(ms) for ms in range(1, 1001))]
    counts = Counter(perf.bucket(ms) for ms in latencies)
    for q in (0.5, 0.95, 0.99):
        true = sorted(latencies)[max(0, int(q * len(latencies)) - 1)]
        found = perf.percentile(counts, q)
        assert found is not None and abs(found - true) <= 0.1 * true, (q, found, true)
    assert perf.percentile({}, 0.5) is None and perf.percentile({"redacted_email": 3}, 0.5) is None
