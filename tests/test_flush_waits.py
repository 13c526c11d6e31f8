"""A flush returns when this process's writes are indexed: it never waits out the watch of a
backlog (rows another process may be indexing), whatever that watch's length."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from remindful.embed.fake import FakeEmbedder
from remindful.engine import backlog
from remindful.testing import InMemoryIndex, catalog_rows, open_fake
from test_background import SlowOpeningIndex


def test_flush_of_a_fresh_store_does_not_wait_for_the_backlog_watch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backlog, "BACKLOG_WATCH_S", 3600.0)  # a flush that waited for it would time out
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
    monkeypatch.setattr(backlog, "BACKLOG_WATCH_S", 3600.0)
    conn = sqlite3.connect(tmp_path / "catalog.sqlite3")
    conn.execute("UPDATE memories SET indexed = 0")
    conn.commit()
    conn.close()
    with open_fake(tmp_path, index=InMemoryIndex()) as memory:
        memory.search("left behind")  # opens the index, which queues the backlog
        assert memory.flush(120)
        assert catalog_rows(memory, "SELECT count(*) FROM memories WHERE indexed = 0") == [(0,)]
        assert {hit.id for hit in memory.search("left behind", limit=10)} >= set(ids)


class CountingEmbedder(FakeEmbedder):
    """Counts how often each text is embedded, and on which threads."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[str] = Counter()
        self.threads: set[str] = set()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.seen.update(texts)
        self.threads.add(threading.current_thread().name)
        return super().embed(texts)


def test_a_fresh_stores_rows_in_its_own_indexer_are_not_taken_again_as_a_backlog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index's open queues the rows marked un-indexed as a backlog; those this process's own
    indexer holds are its to embed and index, not the backlog's (a fresh store's first flush
    embedded and upserted them twice, on two threads, at once)."""
    monkeypatch.setattr("remindful.engine.mirror.INDEX_PACE_S", 60.0)  # the stream stays in the indexer
    index, embedder = SlowOpeningIndex(), CountingEmbedder()
    texts = [f"note {i} about the staging port" for i in range(4)]
    with open_fake(tmp_path, index=index, embedder=embedder) as memory:
        memory.store(texts[0])  # embedded at once; the index opens meanwhile
        assert index.opening.wait(10)
        for text in texts[1:]:
            memory.store(text)  # gathered by the paced indexer
        index.gate.set()
        mirror = memory.engine.mirror
        deadline = time.monotonic() + 10
        while mirror.state()["available"] is not True and time.monotonic() < deadline:
            time.sleep(0.01)
        assert mirror._backlog.wait(30)  # the open's backlog is done
        assert memory.flush(30)
        assert catalog_rows(memory, "SELECT count(*) FROM memories WHERE indexed = 0") == [(0,)]
    assert all(embedder.seen[text] == 1 for text in texts), embedder.seen
    assert "remindful-index-backlog" not in embedder.threads, embedder.threads
