"""The spec's storage error scenarios, each through the real SQLite catalog."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from remindful import MemoryDisabledError, StorageFullError, StorageLockedError
from remindful.api import MemoryManager
from remindful.embed import FakeEmbedder
from remindful.engine import catalog as catalog_module
from remindful.engine.catalog import Catalog, with_retries
from remindful.index import InMemoryIndex
from remindful.testing import open_fake


def test_unwritable_storage_path_disables_memory_with_a_clear_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    memory = open_fake(blocker / "memory")  # opening never raises
    with pytest.raises(MemoryDisabledError) as info:
        memory.store("x")
    assert "not usable" in str(info.value) and "MEMORY_STORAGE_PATH" in str(info.value)
    with pytest.raises(MemoryDisabledError):  # stays disabled, the host keeps running
        memory.search("x")
    memory.close()


def test_writability_probe_is_private_to_each_opener(tmp_path: Path) -> None:
    # Processes opening one path at once each probe with a file of their own: a fixed probe name
    # let one process remove another's probe between its write and its unlink (a CI failure).
    store = tmp_path / "memory"
    (store / ".write-test").mkdir(parents=True)  # a fixed name taken by something else
    memory = open_fake(store)
    assert memory.get(memory.store("stored anyway")).content == "stored anyway"
    memory.close()
    assert [p.name for p in store.iterdir() if p.name.startswith(".write-test")] == [".write-test"]


def test_disk_full_says_storage_full_and_keeps_working_after(memory: MemoryManager) -> None:
    memory.store("small first memory")
    conn = memory.engine.catalog._conn
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")  # the database can grow no more: SQLITE_FULL
    with pytest.raises(StorageFullError) as info:
        memory.store("x" * 200_000)
    assert "Storage full, unable to save memory" in str(info.value)
    assert "cleanup" in str(info.value)
    conn.execute("PRAGMA max_page_count = 1073741823")
    assert memory.get(memory.store("after space was freed")).content == "after space was freed"


def _hold_write_lock(path: Path, seconds: float, started: threading.Event) -> None:
    other = sqlite3.connect(str(path), isolation_level=None, timeout=0)
    other.execute("BEGIN IMMEDIATE")
    started.set()
    time.sleep(seconds)
    other.execute("ROLLBACK")
    other.close()


def test_lock_contention_is_retried_then_succeeds(memory: MemoryManager) -> None:
    memory.store("first")
    memory.flush()  # the background indexer's writes are done: the holder gets the lock at once
    catalog = memory.engine.catalog
    catalog._conn.execute("PRAGMA busy_timeout = 20")
    started = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(catalog.path, 0.15, started))
    holder.start()
    assert started.wait(30)
    memory_id = memory.store("second")  # first attempts hit the lock; a retry goes through
    holder.join()
    assert memory.get(memory_id).content == "second"


def test_lock_contention_gives_up_after_three_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    pauses: list[float] = []

    def always_locked() -> None:
        calls.append("attempt")
        raise sqlite3.OperationalError("database is locked")

    def sleep(seconds: float) -> None:  # the back-off it asks for, not the time a busy machine takes
        calls.append("pause")
        pauses.append(seconds)

    monkeypatch.setattr(catalog_module.time, "sleep", sleep)
    with pytest.raises(StorageLockedError, match="3 retries"):
        with_retries(always_locked)
    assert calls == ["attempt", "pause"] * 3 + ["attempt"]  # the attempt and three retries, each after a pause
    assert pauses[0] > 0 and pauses[1] == 2 * pauses[0] and pauses[2] == 2 * pauses[1]  # exponential backoff


class FlakyIndex(InMemoryIndex):
    """An index whose writes fail while ``broken`` is set."""

    broken = True

    def upsert(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if self.broken:
            from remindful.errors import StorageError

            raise StorageError("index down")
        return super().upsert(*args, **kwargs)


def test_store_is_acknowledged_after_catalog_commit_and_indexed_at_next_open(tmp_path: Path) -> None:
    path = tmp_path / "s"
    flaky = FlakyIndex()
    with open_fake(path, index=flaky) as memory:
        memory_id = memory.store("the index was down when I was stored")
        assert memory.index_status().unindexed == 1
        assert memory.search("index was down")[0].id == memory_id  # still found: scored from the catalog
    flaky.broken = False
    with open_fake(path, index=flaky) as memory:
        memory.search("anything")  # opens the index (in the background), which indexes pending rows
        memory.flush()  # ... in the background too: what the opener left is not indexed on its thread
        assert memory.index_status().unindexed == 0
        assert flaky.count("action_memories") == 1


def test_index_rows_of_deleted_memories_are_removed_at_open(tmp_path: Path) -> None:
    index = InMemoryIndex()
    with open_fake(tmp_path / "s", index=index) as memory:
        memory_id = memory.store("ghost")
    # Simulate a crash between the catalog delete and the index delete.
    Catalog(tmp_path / "s" / "catalog.sqlite3").delete_ids([memory_id])
    assert index.count("action_memories") == 1
    with open_fake(tmp_path / "s", index=index) as memory:
        assert memory.search("ghost") == []
        assert memory.flush(timeout=30)  # the vector deletion the delete queued is applied in the background
        assert index.count("action_memories") == 0


def test_fake_embedder_is_deterministic_enough_for_these_tests() -> None:
    a, b = FakeEmbedder().embed(["login button", "login button"])
    assert np.allclose(a, b)
