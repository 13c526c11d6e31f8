"""A flush returns when this process's writes are indexed: it never waits out the watch of a
backlog (rows another process may be indexing), whatever that watch's length."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from remindful.engine import mirror
from remindful.testing import InMemoryIndex, catalog_rows, open_fake


def test_flush_of_a_fresh_store_does_not_wait_for_the_backlog_watch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mirror, "BACKLOG_WATCH_S", 3600.0)  # a flush that waited for it would time out
    with open_fake(tmp_path) as memory:
        for i in range(5):
            memory.store(f"note {i} about the staging port")
        assert memory.flush(120)
        assert catalog_rows(memory, "SELECT count(*) FROM memories WHERE indexed = 0") == [(0,)]


def test_rows_a_stopped_process_left_are_indexed_without_a_watch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_fake(tmp_path) as memory:
        ids = [memory.store(f"left behind {i}") for i in range(3)]
        memory.flush()
    monkeypatch.setattr(mirror, "BACKLOG_WATCH_S", 3600.0)
    conn = sqlite3.connect(tmp_path / "catalog.sqlite3")
    conn.execute("UPDATE memories SET indexed = 0")
    conn.commit()
    conn.close()
    with open_fake(tmp_path, index=InMemoryIndex()) as memory:
        memory.search("left behind")  # opens the index, which queues the backlog
        assert memory.flush(120)
        assert catalog_rows(memory, "SELECT count(*) FROM memories WHERE indexed = 0") == [(0,)]
        assert {hit.id for hit in memory.search("left behind", limit=10)} >= set(ids)
