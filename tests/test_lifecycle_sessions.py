"""Sessions: auto id, list with summaries, resume, delete (with backup), delete-on-exit."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from remindful.api import MemoryManager
from remindful.errors import NotFoundError, ValidationError
from remindful.testing import open_fake


def test_first_store_generates_one_session_for_the_process(memory: MemoryManager) -> None:
    a = memory.store("first")
    b = memory.store("second")
    session = memory.get(a).session_id
    assert session is not None and re.fullmatch(r"session_\d{8}_\d{6}_[0-9a-f]{4}", session)
    assert memory.get(b).session_id == session == memory.session_id
    assert memory.get(memory.store("agent's own", session_id="agent-42")).session_id == "agent-42"


def test_list_sessions_has_times_counts_and_summary(memory: MemoryManager) -> None:
    for _ in range(3):
        memory.store("clicked submit", type="action", metadata={"action": "click", "tool_name": "hands"})
    memory.store("typed the password", type="action", metadata={"action": "type"})
    memory.store("login page", type="screen", metadata={"app": "Firefox"})
    memory.store("old work", type="screen", session_id="session_20231026_123456", timestamp="2023-10-26T12:34:56Z")
    sessions = memory.list_sessions()
    assert [s.id for s in sessions] == [memory.session_id, "session_20231026_123456"]  # newest first
    current = sessions[0]
    assert current.memory_count == 5 and current.current and not current.resumed
    assert current.by_type == {"action": 4, "screen": 1}
    assert current.summary["actions"][0] == {"name": "click", "count": 3}
    assert current.summary["screens"] == [{"name": "Firefox", "count": 1}]
    assert current.summary["tools"] == [{"name": "hands", "count": 3}]
    assert "click x3" in current.text
    old = sessions[1]
    assert old.started_at == old.ended_at == datetime(2023, 10, 26, 12, 34, 56, tzinfo=UTC)
    assert old.summary["screens"] == [{"name": "old work", "count": 1}]  # content when no metadata names it


def test_resume_session_boosts_its_memories_until_another_is_resumed(memory: MemoryManager) -> None:
    memory.store("configure the build pipeline", session_id="old")
    memory.store("configure the build pipeline", session_id="other")
    assert memory.resume_session("old") == 1
    assert memory.search("build pipeline")[0].session_id == "old"  # the copy shown is the boosted one
    assert [s.id for s in memory.list_sessions() if s.resumed] == ["old"]
    memory.resume_session("other")
    assert memory.search("build pipeline")[0].session_id == "other"
    with pytest.raises(NotFoundError):
        memory.resume_session("never-existed")


def test_delete_session_needs_confirm_backs_up_and_deletes_every_collection(memory: MemoryManager) -> None:
    ids = [
        memory.store(f"sensitive {t}", type=t, session_id="session_abc123") for t in ("screen", "action", "workflow")
    ]
    keep = memory.store("other work", session_id="keep")
    with pytest.raises(ValidationError, match="confirm=True") as refused:
        memory.delete_session("session_abc123")
    assert "3 memories" in str(refused.value) and all(memory.get_batch(ids))
    memory.resume_session("session_abc123")
    result = memory.delete_session("session_abc123", confirm=True)
    assert result.deleted == 3 and Path(result.backup_path).exists()
    assert "_auto-before-delete-session" in result.backup_path
    assert memory.get_batch(ids) == [None, None, None] and memory.get(keep)
    assert "session_abc123" not in [s.id for s in memory.list_sessions()]
    assert all(h.session_id != "session_abc123" for h in memory.search("sensitive"))
    assert memory.resumed_session is None
    with pytest.raises(NotFoundError, match="Session not found"):
        memory.delete_session("session_abc123", confirm=True)


def test_delete_on_exit_only_when_configured(tmp_path: Path) -> None:
    with open_fake(tmp_path / "a") as memory:
        memory.store("kept")
        assert memory.delete_on_exit() == 0
        assert memory.stats().total_memories == 1
    with open_fake(tmp_path / "b", **{"privacy.delete_on_exit": True}) as memory:
        memory.store("ephemeral one")
        memory.store("agent event", session_id="agent-7")
        memory.store("unrelated", session_id="other")
        assert memory.delete_on_exit() == 1
        assert memory.delete_on_exit(["agent-7"]) == 1
        assert [m.content for m in memory.list()] == ["unrelated"]
        assert not list((memory.path / "backups").glob("*")) if (memory.path / "backups").exists() else True


def test_sessions_page_and_pick_one(tmp_path: Path) -> None:
    from datetime import timedelta

    base = datetime(2026, 1, 1, tzinfo=UTC)
    with open_fake(tmp_path / "s") as memory:
        for i in range(5):
            for j in range(i + 1):
                memory.store(
                    f"step {j} of run {i}",
                    type="action",
                    session_id=f"run{i}",
                    timestamp=base + timedelta(days=i, minutes=j),
                    metadata={"action": f"act{j}"},
                )
        everything = memory.list_sessions()
        assert [s.id for s in everything] == ["run4", "run3", "run2", "run1", "run0"]
        assert memory.session_count() == 5
        page = memory.list_sessions(limit=2, offset=1)
        assert page == everything[1:3]
        assert memory.list_sessions(session_id="run2") == [everything[2]]
        assert everything[2].memory_count == 3 and everything[2].by_type == {"action": 3}
        assert memory.list_sessions(session_id="nope") == [] and memory.list_sessions(offset=9) == []
