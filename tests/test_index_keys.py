"""The Chroma backends key vectors by packed memory ids (remindful.index.keys); older collections keep whole ids."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from remindful.index import ChromaEmbeddedIndex
from remindful.index.keys import pack, unpack
from remindful.model import MemoryType, new_memory_id

COL = MemoryType.CONVERSATION.collection


def unit(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, 16)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def stored_keys(path: Path) -> list[str]:
    conn = sqlite3.connect(path / "chroma.sqlite3")
    try:
        return [r[0] for r in conn.execute("SELECT embedding_id FROM embeddings")]
    finally:
        conn.close()


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(UTC)))
def test_a_memory_id_packs_into_20_characters_and_back(at: datetime) -> None:
    memory_id = new_memory_id(MemoryType.CONVERSATION, at)
    key = pack(COL, memory_id)
    assert len(key) == 20 and "~" not in key
    assert unpack(COL, key) == memory_id


@given(st.text(min_size=1, max_size=60))
def test_any_other_id_is_kept_whole(memory_id: str) -> None:
    assert unpack(COL, pack(COL, memory_id)) == memory_id


def test_an_id_of_another_type_is_kept_whole() -> None:
    """A memory whose type an update changed sits in its new type's collection under its old id."""
    memory_id = new_memory_id(MemoryType.ACTION)
    assert pack(COL, memory_id) == "~" + memory_id
    assert unpack(COL, pack(COL, memory_id)) == memory_id


def test_packed_keys_keep_the_order_of_the_ids() -> None:
    ids = sorted(new_memory_id(MemoryType.CONVERSATION) for _ in range(200))
    assert sorted(pack(COL, i) for i in ids) == [pack(COL, i) for i in ids]


def test_the_embedded_index_stores_packed_keys_and_answers_with_memory_ids(tmp_path: Path) -> None:
    path = tmp_path / "chroma"
    ids = [new_memory_id(MemoryType.CONVERSATION) for _ in range(20)] + ["odd-id", "knowledge_x"]
    vectors = unit(len(ids))
    index = ChromaEmbeddedIndex(path)
    index.upsert(COL, ids, vectors, [{} for _ in ids])
    assert sorted(index.ids(COL)) == sorted(ids)
    assert [index.query(COL, vectors[i], 1)[0][0] for i in (0, 20, 21)] == [ids[0], "odd-id", "knowledge_x"]
    index.upsert(COL, [ids[3]], unit(1, seed=5), [{}])  # replaced, not added beside
    assert index.count(COL) == len(ids)
    index.delete(COL, [ids[0], "odd-id"])
    assert sorted(index.ids(COL)) == sorted([*ids[1:20], "knowledge_x"])
    index.close()
    keys = stored_keys(path)
    assert len(keys) == 20
    assert sum(len(k) == 20 for k in keys) == 19 and "~knowledge_x" in keys


def test_a_collection_made_before_keeps_whole_ids_and_works(tmp_path: Path) -> None:
    """A store written by an earlier version: its collections hold whole memory ids, no metadata."""
    import chromadb
    from chromadb.config import Settings

    path = tmp_path / "chroma"
    old = [new_memory_id(MemoryType.CONVERSATION) for _ in range(10)]
    vectors = unit(12)
    client = chromadb.PersistentClient(str(path), settings=Settings(anonymized_telemetry=False))
    col = client.get_or_create_collection(COL, configuration={"hnsw": {"space": "cosine"}}, embedding_function=None)
    col.upsert(ids=old, embeddings=vectors[:10])
    client.close()

    index = ChromaEmbeddedIndex(path)
    assert sorted(index.ids(COL)) == sorted(old)
    new = [new_memory_id(MemoryType.CONVERSATION) for _ in range(2)]
    index.upsert(COL, new, vectors[10:], [{}, {}])
    assert index.query(COL, vectors[11], 1)[0][0] == new[1]
    assert index.query(COL, vectors[4], 1)[0][0] == old[4]
    index.delete(COL, [old[4]])
    assert sorted(index.ids(COL)) == sorted(old[:4] + old[5:] + new)
    index.close()
    assert sorted(stored_keys(path)) == sorted(old[:4] + old[5:] + new)  # whole, as before

    index = ChromaEmbeddedIndex(path)
    index.reset()  # a reindex makes the collections anew: packed from then on
    index.upsert(COL, new, vectors[10:], [{}, {}])
    assert sorted(index.ids(COL)) == sorted(new)
    index.close()
    assert sorted(stored_keys(path)) == sorted(pack(COL, i) for i in new)


def test_keys_a_query_returned_before_are_not_decoded_again(tmp_path: Path, monkeypatch: Any) -> None:
    """A search of a small collection returns every key of it, each time."""
    import remindful.index.chroma_base as base

    decoded: list[str] = []
    monkeypatch.setattr(base, "unpack", lambda collection, key: decoded.append(key) or unpack(collection, key))
    ids = [new_memory_id(MemoryType.CONVERSATION) for _ in range(30)]
    vectors = unit(30)
    index = ChromaEmbeddedIndex(tmp_path / "chroma")
    index.upsert(COL, ids, vectors, [{} for _ in ids])
    first = index.query(COL, vectors[0], 30)
    assert sorted(i for i, _ in first) == sorted(ids) and len(decoded) == 30
    assert index.query(COL, vectors[1], 30)[0][0] == ids[1]
    assert len(decoded) == 30
    index.close()
