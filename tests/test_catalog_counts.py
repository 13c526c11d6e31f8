"""How many memories each type holds, kept by triggers: exact through every write, and never
counted by scanning on the search or store path (a GROUP BY read a whole index, 10-15 ms at 100k
memories, on the first search or store after each idle second)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from catalog_trace import traced
from remindful.api import MemoryManager
from remindful.testing import open_fake


def counted(path: Path) -> dict[str, int]:
    """The counts as a scan of the table gives them."""
    with sqlite3.connect(path / "catalog.sqlite3") as conn:
        return dict(conn.execute("SELECT type, count(*) FROM memories GROUP BY type").fetchall())


def check(memory: MemoryManager) -> dict[str, int]:
    kept = memory.engine.type_counts()
    assert kept == counted(memory.path)
    stats = memory.stats().collections
    assert {t: stats[f"{t}_memories"].count for t in kept} == kept
    return kept


def test_the_counts_follow_every_write(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", **{"storage.max_items": {"action": 5}}) as memory:
        assert check(memory) == {}
        first = [memory.store(f"step {i}", type="action", session_id="a") for i in range(3)]
        assert check(memory) == {"action": 3}
        batch = memory.store_batch(
            [{"content": f"fact {i}", "type": "knowledge"} for i in range(4)]
            + [{"content": f"more {i}", "type": "action"} for i in range(3)]
        )
        assert check(memory) == {"action": 5, "knowledge": 4}  # the quota evicted one action
        memory.update(batch[0], content="fact zero, revised")
        assert memory.delete(batch[1])
        assert check(memory) == {"action": 5, "knowledge": 3}
        still_there = sum(1 for r in memory.get_batch(first) if r is not None)  # the eviction took one action
        assert memory.delete_many([*first, *batch[2:4]]) == still_there + 2
        assert check(memory) == {"action": 5 - still_there, "knowledge": 1}
        memory.clear_all(confirm=True)
        assert check(memory) == {}


def test_search_and_store_do_not_scan_for_the_counts(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        statements: list[str] = []
        with traced(memory.engine.catalog, statements.append):
            memory.store("the deploy needs AWS_PROFILE=prod", type="knowledge")
            memory.search("deploy profile")
            memory.search("deploy profile", types=["knowledge"])
    assert statements, "the trace saw nothing: the test would pass on any code"
    assert not [s for s in statements if "GROUP BY" in s.upper()]


def test_an_upgraded_catalog_starts_from_the_rows_present(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with open_fake(path) as memory:
        memory.store_batch([{"content": f"x {i}", "type": "action" if i % 3 else "workflow"} for i in range(9)])
    # A schema-5 catalog: no counts table, no triggers.
    with sqlite3.connect(path / "catalog.sqlite3") as conn:
        conn.executescript(
            "DROP TRIGGER memories_count_ai; DROP TRIGGER memories_count_ad; DROP TRIGGER memories_count_au;"
            "DROP TABLE type_counts; PRAGMA user_version = 5;"
        )
    with open_fake(path) as memory:
        assert check(memory) == {"action": 6, "workflow": 3}
        memory.store("one more", type="workflow")
        assert check(memory) == {"action": 6, "workflow": 4}


def test_a_search_reads_the_type_counts_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """They were read once per searched type, and once more for the index: seven queries a search."""
    with open_fake(tmp_path / "s") as memory:
        memory.store("the deploy needs AWS_PROFILE=prod", type="knowledge")
        memory.search("deploy profile")
        # Every read of the catalog, from any thread, on any of its connections. (A trace callback on
        # the connections deadlocked when it was unset: the call waits for the connection's mutex,
        # holding the GIL, while the indexer thread holds that mutex and its callback waits for the GIL.)
        catalog = memory.engine.catalog
        statements: list[str] = []
        read = catalog.read

        def recording(sql: str, params: Any = (), **options: Any) -> list[Any]:
            statements.append(sql)
            return read(sql, params, **options)

        monkeypatch.setattr(catalog, "read", recording)
        memory.search("deploy profile")
        monkeypatch.undo()
    assert len([s for s in statements if "FROM type_counts" in s]) == 1, statements
