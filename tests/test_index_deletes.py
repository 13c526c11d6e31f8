"""The delete path: one catalog transaction (rows, FTS, windows, audit log, vector queue), then the
vectors leave the index, at once for a few and in the background for many."""

from __future__ import annotations

import itertools
import sqlite3
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from remindful.engine.background import DeleteFinisher
from remindful.engine.catalog import SCHEMA_VERSION, Catalog
from remindful.errors import StorageError
from remindful.index import InMemoryIndex
from remindful.testing import open_fake


class GatedDeleteIndex(InMemoryIndex):
    """Deletes wait for ``gate`` (open by default) and fail while ``broken``; calls are recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.broken = False
        self.calls: list[int] = []

    def delete(self, collection: str, ids: Any) -> None:
        self.gate.wait(30)
        if self.broken:
            raise StorageError("index unavailable")
        self.calls.append(len(list(ids)))
        super().delete(collection, ids)


def queued(memory: Any) -> list[str]:
    return [r[0] for r in memory.engine.catalog.read("SELECT memory_id FROM index_deletes")]


@pytest.fixture
def inline_up_to_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deletes of more than two memories go to the background deleter."""
    monkeypatch.setattr("remindful.engine.store.INLINE_DELETE", 2)
    monkeypatch.setattr("remindful.engine.index_deletes.FINISH_CHUNK", 2)


def test_a_small_delete_removes_the_vector_before_it_returns(tmp_path: Path) -> None:
    index = GatedDeleteIndex()
    with open_fake(tmp_path / "s", index=index) as memory:
        gone = memory.store("the old wifi password hint")
        memory.flush()
        assert memory.delete(gone)
        assert index.count("action_memories") == 0
        assert queued(memory) == []


@pytest.mark.usefixtures("inline_up_to_two")
def test_a_large_delete_returns_before_the_index_catches_up(tmp_path: Path) -> None:
    index = GatedDeleteIndex()
    with open_fake(tmp_path / "s", index=index) as memory:
        doomed = memory.store_batch([{"content": f"wifi password hint number {i}"} for i in range(5)])
        kept = memory.store("the wifi password hint is on the fridge")
        memory.flush()
        index.gate.clear()
        try:
            assert memory.delete_many(doomed) == 5  # would wait for the gate if the vectors went inline
            assert sorted(queued(memory)) == sorted(doomed)  # returned with the vectors still queued
            assert memory.index_status().pending_deletes == 5
            assert index.count("action_memories") == 6
            assert [h.id for h in memory.search("wifi password hint", limit=10)] == [kept]
            assert memory.get_batch(doomed) == [None] * 5
        finally:
            index.gate.set()
        assert memory.flush(timeout=30)
        assert index.ids("action_memories") == [kept]
        assert queued(memory) == []
        assert memory.index_status().pending_deletes == 0
        assert max(index.calls) <= 2  # in chunks


@pytest.mark.usefixtures("inline_up_to_two")
def test_dense_search_makes_up_for_hits_still_queued_for_deletion(tmp_path: Path) -> None:
    index = GatedDeleteIndex()
    dense_only = {
        "search.candidates": 3,
        "search.lexical_weight": 0,
        "search.lexical_context_weight": 0,
        "search.context_weight": 0,
    }
    with open_fake(tmp_path / "s", index=index, **dense_only) as memory:
        doomed = memory.store_batch([{"content": "quarterly alpha report draft"} for _ in range(6)])
        live = memory.store_batch([{"content": f"quarterly alpha report final {i}"} for i in range(3)])
        memory.flush()
        index.gate.clear()
        try:
            memory.delete_many(doomed)
            # The index's 3 nearest are deleted ones: without asking for more, dense search finds nothing.
            assert sorted(h.id for h in memory.search("quarterly alpha report draft", limit=3)) == sorted(live)
        finally:
            index.gate.set()


@pytest.mark.usefixtures("inline_up_to_two")
def test_queued_vector_deletes_survive_a_failure_and_are_finished_at_the_next_open(tmp_path: Path) -> None:
    path = tmp_path / "s"
    index = GatedDeleteIndex()
    with open_fake(path, index=index) as memory:
        doomed = memory.store_batch([{"content": f"secret token {i}"} for i in range(4)])
        kept = memory.store("public note")
        memory.flush()
        index.broken = True
        assert memory.delete_many(doomed) == 4
        memory.flush(timeout=30)
        assert {h.id for h in memory.search("secret token", limit=10)} <= {kept}
    # Closed while the index still failed: the vectors are still there, and still queued.
    assert index.count("action_memories") == 5
    assert sorted(r[0] for r in Catalog(path / "catalog.sqlite3").pending_index_deletes(100)) == sorted(doomed)
    index.broken = False
    with open_fake(path, index=index) as memory:
        assert {h.id for h in memory.search("secret token", limit=10)} <= {kept}  # never back, even now
        assert memory.flush(timeout=30)
        assert index.ids("action_memories") == [kept]
        assert queued(memory) == []


def test_a_memory_stored_again_keeps_its_vector(tmp_path: Path) -> None:
    index = GatedDeleteIndex()
    with open_fake(tmp_path / "s", index=index) as memory:
        mid = memory.store("imported twice")
        memory.flush()
        state = memory.engine
        catalog = state.catalog
        # Queued but not applied, then the same id comes back (an import keeps ids).
        catalog.write(
            lambda c: c.execute("INSERT INTO index_deletes (memory_id, type) VALUES (?, 'action')", (mid,)),
            what="test",
        )
        assert state.mirror.drain_index_deletes(10) == 1
        assert index.ids("action_memories") == [mid]
        assert queued(memory) == []


def test_delete_writes_one_audit_entry_per_memory_with_its_reason(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        a, b, c = memory.store_batch([{"content": "a"}, {"content": "b", "type": "screen"}, {"content": "c"}])
        state = memory.engine
        assert state.delete_many([a, b, "missing"], reason={a: "retention:too_old", b: "dedup"}) == 2
        assert state.delete(c) is True
        rows = state.catalog.read("SELECT action, memory_id, detail FROM audit_log WHERE memory_id IS NOT NULL")
        assert sorted(rows) == [
            ("dedup", b, '{"type":"screen"}'),
            ("delete", c, '{"type":"action"}'),
            ("retention:too_old", a, '{"type":"action"}'),
        ]


def test_reindex_drops_the_queue(tmp_path: Path) -> None:
    index = GatedDeleteIndex()
    with open_fake(tmp_path / "s", index=index) as memory:
        kept, gone = memory.store_batch([{"content": "kept"}, {"content": "gone"}])
        memory.flush()
        index.broken = True
        memory.delete(gone)
        assert queued(memory) == [gone]
        index.broken = False
        memory.reindex()
        assert queued(memory) == []
        assert index.ids("action_memories") == [kept]


def test_delete_finisher_drains_in_chunks_and_pauses_between_them() -> None:
    left = [5]
    stamps: list[tuple[float, float]] = []

    def drain(limit: int) -> int:
        started = time.perf_counter()
        n = min(limit, left[0])
        left[0] -= n
        if n:
            time.sleep(0.05)
            stamps.append((started, time.perf_counter()))
        return n

    deleter = DeleteFinisher(drain, chunk=2, pause_ratio=1.0, first_delay=0.1)
    kicked = time.perf_counter()
    deleter.kick()
    assert deleter.flush(10)
    deleter.close()
    assert left == [0] and len(stamps) == 3
    assert stamps[0][0] - kicked >= 0.09  # the call that queued the work returns first
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(stamps)]
    assert all(gap >= 0.04 for gap in gaps)  # other threads get the interpreter between chunks


def test_delete_finisher_survives_a_failing_drain() -> None:
    calls: list[int] = []

    def drain(limit: int) -> int:
        calls.append(limit)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return 0

    deleter = DeleteFinisher(drain)
    deleter.kick()
    assert deleter.flush(10)
    deleter.kick()
    assert deleter.flush(10)
    deleter.close()
    assert len(calls) == 2


def windows(catalog: Catalog) -> dict[str, str]:
    contents = dict(catalog.read("SELECT id, content FROM memories"))
    return {contents[mid]: text for mid, text in catalog.windows(list(contents)).items()}


def session_of_nine(memory: Any) -> list[str]:
    start = datetime.now(UTC)
    items = [{"content": f"w{i}", "session_id": "s", "timestamp": start + timedelta(seconds=i)} for i in range(9)]
    return list(memory.store_batch(items))


def fts_rows(catalog: Catalog) -> int:
    return int(catalog.read("SELECT count(*) FROM context_members")[0][0])  # one a window in context_fts


def test_windows_mended_later_are_queued_in_the_delete_transaction(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with open_fake(path) as memory:
        ids = session_of_nine(memory)
    catalog = Catalog(path / "catalog.sqlite3")
    catalog.delete_ids([ids[1], ids[4], ids[7]], mend_later=True)
    assert fts_rows(catalog) == 9  # the deleted memories' own windows wait too (no search maps to them)
    assert "w1" in windows(catalog)["w0"]  # and so do their neighbours'
    assert catalog.read("SELECT count(*) FROM context_mend")[0][0] == 3
    steps = [catalog.mend_windows(2) for _ in range(5)]
    assert steps == [2, 1, 2, 1, 0]  # the deleted windows first, then the neighbours
    assert fts_rows(catalog) == 6
    assert not any(f"w{i}" in text for text in windows(catalog).values() for i in (1, 4, 7))
    assert windows(catalog)["w5"].startswith("w3\nw5\nw6\n")
    catalog.close()


def test_a_rowid_taken_again_before_the_mending_keeps_its_new_window(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with open_fake(path) as memory:
        ids = session_of_nine(memory)
        catalog = memory.engine.catalog
        catalog.delete_ids([ids[-1]], mend_later=True)  # the newest row: SQLite reuses its rowid
        newcomer = memory.store("fresh words", session_id="t")
        assert catalog.read("SELECT rowid FROM memories WHERE id = ?", (newcomer,))[0][0] == 9
        while catalog.mend_windows(10):
            pass
        assert windows(catalog)["fresh words"].startswith("fresh words\n")
        assert fts_rows(catalog) == 9  # eight old windows and the newcomer's


@pytest.mark.usefixtures("inline_up_to_two")
def test_a_large_delete_mends_the_neighbour_windows_after_it_returns(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        ids = session_of_nine(memory)
        assert memory.delete_many([ids[1], ids[4], ids[7]]) == 3
        assert memory.flush(timeout=30)
        catalog = memory.engine.catalog
        assert not any(f"w{i}" in text for text in windows(catalog).values() for i in (1, 4, 7))
        assert catalog.read("SELECT count(*) FROM context_mend")[0][0] == 0


def test_windows_left_unmended_by_a_crash_are_mended_when_the_store_opens(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with open_fake(path) as memory:
        ids = session_of_nine(memory)
    catalog = Catalog(path / "catalog.sqlite3")
    catalog.delete_ids(ids[2:5], mend_later=True)  # the process died before mending
    catalog.close()
    with open_fake(path) as memory:
        memory.list()  # opens the catalog only
        assert memory.flush(timeout=30)
        assert "w2" not in windows(memory.engine.catalog)["w1"]


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_catalog_gets_the_queues_when_opened(tmp_path: Path, version: int) -> None:
    path = tmp_path / "catalog.sqlite3"
    Catalog(path).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE context_mend")
    if version == 1:
        conn.execute("DROP TABLE index_deletes")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.commit()
    conn.close()
    catalog = Catalog(path)
    tables = {r[0] for r in catalog.read("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"index_deletes", "context_mend"} <= tables
    assert catalog.read("PRAGMA user_version")[0][0] == SCHEMA_VERSION
    catalog.close()


@pytest.mark.usefixtures("inline_up_to_two")
def test_close_finishes_what_the_background_has_not(tmp_path: Path) -> None:
    path = tmp_path / "s"
    index = GatedDeleteIndex()
    with open_fake(path, index=index) as memory:
        doomed = memory.store_batch([{"content": f"to go {i}", "session_id": "s"} for i in range(10)])
        kept = memory.store("stays", session_id="s")
        memory.flush()
        index.gate.clear()
        memory.delete_many(doomed)
        threading.Timer(0.3, index.gate.set).start()  # the finisher is stuck in its first chunk meanwhile
    assert index.ids("action_memories") == [kept]
    catalog = Catalog(path / "catalog.sqlite3")
    assert catalog.pending_index_deletes(100) == [] and not catalog.windows_to_mend()
    assert windows(catalog)["stays"].startswith("stays\n")
    catalog.close()


def test_lexical_context_makes_up_for_windows_still_queued_for_removal(tmp_path: Path) -> None:
    only_windows = {
        "search.candidates": 3,
        "search.dense_weight": 0,
        "search.context_weight": 0,
        "search.lexical_weight": 0,
    }
    with open_fake(tmp_path / "s", **only_windows) as memory:
        doomed = memory.store_batch([{"content": "zebra zebra crossing", "session_id": "a"} for _ in range(12)])
        live = memory.store_batch([{"content": f"a zebra note {i}", "session_id": f"b{i}"} for i in range(3)])
        memory.engine.catalog.delete_ids(doomed, mend_later=True)  # queued, nothing mended yet
        # The deleted windows rank first: without fetching more, the three best would all be gone.
        assert sorted(h.id for h in memory.search("zebra", limit=3)) == sorted(live)
