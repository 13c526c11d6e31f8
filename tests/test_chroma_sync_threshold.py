"""How often the embedded Chroma saves a collection's files follows the collection's size (issue 34).

Chroma saves a collection's HNSW files every ``sync_threshold`` vectors added, and a save costs
with the collection's size: at 1,000,000 vectors its default (1,000) doubled the cost of adding
one. The store tells the index the catalog's counts before a collection loads (at the index's
open, and before a reindex makes the collections anew), and the index sets the threshold then.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import remindful
from remindful.index import chroma
from remindful.index.chroma import ChromaEmbeddedIndex, sync_threshold
from remindful.testing import FakeEmbedder

COLLECTION = "conversation_memories"


def stored_threshold(path: Path, name: str = COLLECTION) -> int | None:
    """The sync threshold chromadb keeps in its own file for collection ``name`` (chromadb 1.x keeps
    the HNSW configuration in the collection's schema, older ones in its configuration)."""
    conn = sqlite3.connect(f"file:{path / 'chroma.sqlite3'}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT * FROM collections WHERE name = ?", (name,)).fetchone()
        columns = [c[0] for c in conn.execute("SELECT * FROM collections LIMIT 0").description]
    finally:
        conn.close()
    if row is None:
        return None
    found: set[int] = set()

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "sync_threshold" and isinstance(item, int):
                    found.add(item)
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for column, value in zip(columns, row, strict=True):
        if column in ("config_json_str", "schema_str") and value:
            walk(json.loads(value))
    assert len(found) <= 1, found
    return found.pop() if found else None


def vectors(n: int, seed: int = 0) -> np.ndarray:
    found = np.random.default_rng(seed).standard_normal((n, 8)).astype(np.float32)
    return found / np.linalg.norm(found, axis=1, keepdims=True)


def add(index: ChromaEmbeddedIndex, n: int, prefix: str) -> None:
    index.upsert(COLLECTION, [f"{prefix}{i}" for i in range(n)], vectors(n), [{} for _ in range(n)])


def test_the_threshold_grows_with_the_size_between_its_bounds() -> None:
    assert sync_threshold(0) == chroma.SYNC_MIN
    assert sync_threshold(100_000) == chroma.SYNC_MIN
    assert sync_threshold(500_000) == 2000
    assert sync_threshold(1_000_000) == chroma.SYNC_MAX
    assert sync_threshold(50_000_000) == chroma.SYNC_MAX


def test_a_collection_made_for_a_large_size_saves_less_often(tmp_path: Path) -> None:
    index = ChromaEmbeddedIndex(tmp_path / "chroma")
    index.expect_sizes({COLLECTION: 1_000_000})
    add(index, 3, "a")
    index.close()
    assert stored_threshold(tmp_path / "chroma") == 4000


def test_an_existing_collection_is_changed_before_it_loads(tmp_path: Path) -> None:
    index = ChromaEmbeddedIndex(tmp_path / "chroma")
    add(index, 3, "a")  # made without a size: chromadb's default
    index.close()
    assert stored_threshold(tmp_path / "chroma") == 1000
    index = ChromaEmbeddedIndex(tmp_path / "chroma")
    index.expect_sizes({COLLECTION: 800_000})
    assert index.count(COLLECTION) == 3
    add(index, 2, "b")
    index.close()
    assert stored_threshold(tmp_path / "chroma") == 3200
    # a size near the last one does not rewrite it
    index = ChromaEmbeddedIndex(tmp_path / "chroma")
    index.expect_sizes({COLLECTION: 850_000})
    assert index.count(COLLECTION) == 5
    index.close()
    assert stored_threshold(tmp_path / "chroma") == 3200


def test_the_setting_wins(tmp_path: Path) -> None:
    index = ChromaEmbeddedIndex(tmp_path / "chroma", hnsw={"sync_threshold": 1500})
    index.expect_sizes({COLLECTION: 1_000_000})
    add(index, 3, "a")
    index.close()
    assert stored_threshold(tmp_path / "chroma") == 1500
    # an existing collection keeps its threshold when the setting gives one
    index = ChromaEmbeddedIndex(tmp_path / "chroma", hnsw={"sync_threshold": 2500})
    index.expect_sizes({COLLECTION: 1_000_000})
    assert index.count(COLLECTION) == 3
    index.close()
    assert stored_threshold(tmp_path / "chroma") == 1500


def test_a_store_tells_its_index_the_catalogs_counts_at_open_and_at_reindex(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a real store: the threshold follows the catalog's count when a fresh process's
    index opens, and when a reindex makes the collections anew."""
    monkeypatch.setattr(chroma, "SYNC_SHARE", 1)
    monkeypatch.setattr(chroma, "SYNC_MIN", 10)
    path = tmp_path / "store"
    with remindful.open(path, embedder=FakeEmbedder()) as memory:
        memory.store_batch([{"content": f"note {i} about the pier", "type": "conversation"} for i in range(40)])
        memory.flush()
    # the first process made the collection as it opened the index: 0 or 40, not chromadb's default
    assert stored_threshold(path / "chroma") in (10, 40)
    with remindful.open(path, embedder=FakeEmbedder()) as memory:
        memory.store_batch([{"content": f"more {i} about the walrus", "type": "conversation"} for i in range(60)])
        memory.search("walrus")
        memory.flush()
    with remindful.open(path, embedder=FakeEmbedder()) as memory:
        memory.search("pier")
        memory.flush()
    assert stored_threshold(path / "chroma") == 100
    with remindful.open(path, embedder=FakeEmbedder()) as memory:
        memory.search("pier")
        memory.flush()  # the index open, told 100
        memory.store_batch([{"content": f"last {i} about the harbour", "type": "conversation"} for i in range(50)])
        memory.flush()
        memory.reindex()
        assert stored_threshold(path / "chroma") == 150
        assert memory.search("harbour", limit=3)
