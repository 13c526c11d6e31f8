"""``stats()`` answered a dict in 0.1.0 and answers a :class:`remindful.model.Stats` now: scripts
written against the dict keep working for a release, each access warning (DeprecationWarning)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from remindful.api import MemoryManager

#: Every key of the dict ``stats()`` returned in 0.1.0 (services/stats.py before the typed records).
OLD_KEYS = {
    "total_memories",
    "collections",
    "storage",
    "sessions",
    "session_length",
    "activity",
    "captures_per_day",
    "spool_pending",
    "last_cleanup",
    "last_backup",
    "capture",
    "learning",
    "index",
    "performance",
    "warnings",
}


def test_stats_answers_every_key_of_the_old_dict_with_a_deprecation_warning(memory: MemoryManager) -> None:
    memory.store("The deploy script needs AWS_PROFILE=prod", type="knowledge")
    stats = memory.stats()
    for key in sorted(OLD_KEYS):
        with pytest.warns(DeprecationWarning, match=r"Stats\[") as caught:
            value = stats[key]
        assert caught[0].filename == __file__  # the warning names the caller's line
        assert value == stats.to_dict()[key]
    with pytest.warns(DeprecationWarning):
        assert stats["total_memories"] == 1 == stats.total_memories
    with pytest.warns(DeprecationWarning):
        assert stats["collections"]["knowledge_memories"]["count"] == 1
    with pytest.warns(DeprecationWarning):
        assert stats["collections"].keys() == stats.collections.keys()


def test_the_old_dicts_methods_answer_too(memory: MemoryManager) -> None:
    stats = memory.stats()
    with pytest.warns(DeprecationWarning):
        assert set(stats.keys()) >= OLD_KEYS
    with pytest.warns(DeprecationWarning):
        assert "collections" in stats
    with pytest.warns(DeprecationWarning):
        assert stats.get("total_memories") == 0 and stats.get("no such key", "x") == "x"
    with pytest.warns(DeprecationWarning):
        assert dict(stats.items()) == stats.to_dict()
    with pytest.warns(DeprecationWarning):
        assert list(stats.values()) == list(stats.to_dict().values())
    with pytest.warns(DeprecationWarning):
        assert set(dict(stats)) >= OLD_KEYS
    with pytest.warns(DeprecationWarning), pytest.raises(KeyError):
        stats["no such key"]


def test_attribute_access_does_not_warn(memory: MemoryManager) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats = memory.stats()
        assert (
            stats.total_memories == 0 and "knowledge_memories" in stats.collections and stats.to_dict()["sessions"] == 0
        )


def test_every_record_that_was_a_dict_answers_as_one(memory: MemoryManager, tmp_path: Path) -> None:
    """The other methods that answered dicts in 0.1.0 (export, backup, doctor, ...) keep answering
    their old keys for a release, with the same warning."""
    memory.store("The deploy script needs AWS_PROFILE=prod", type="knowledge")
    result = memory.export(output_path=str(tmp_path / "out.json"))
    with pytest.warns(DeprecationWarning, match=r"ExportResult\['count'\]") as caught:
        assert result["count"] == 1 == result.count
    assert caught[0].filename == __file__
    with pytest.warns(DeprecationWarning):
        assert dict(result.items()) == result.to_dict()
