"""One contract, three backends: InMemoryIndex, embedded Chroma and a real Chroma server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest_chroma import chroma_server  # noqa: F401  (session fixture used by the server backend)
from remindful.index import ChromaEmbeddedIndex, ChromaServerIndex, InMemoryIndex, VectorIndex

DIM = 8
COL = "test_memories"


@pytest.fixture(
    params=["memory", "embedded", pytest.param("server", marks=pytest.mark.integration)],
)
def index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorIndex]:
    ix: Any
    if request.param == "memory":
        ix = InMemoryIndex()
    elif request.param == "embedded":
        ix = ChromaEmbeddedIndex(tmp_path / "chroma")
    else:
        host, port = request.getfixturevalue("chroma_server")
        ix = ChromaServerIndex(host, port)
        ix.reset()  # the server outlives each test
    yield ix
    ix.close()


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(42)


def test_satisfies_protocol(index: VectorIndex) -> None:
    assert isinstance(index, VectorIndex)


def test_query_returns_nearest_first_with_similarity_one_for_same_vector(
    index: VectorIndex, rng: np.random.Generator
) -> None:
    vectors = unit(rng, 20)
    index.upsert(COL, [f"m{i}" for i in range(20)], vectors, [{"i": i} for i in range(20)])
    hits = index.query(COL, vectors[7], 5)
    assert len(hits) == 5
    assert hits[0][0] == "m7"
    assert hits[0][1] == pytest.approx(1.0, abs=1e-5)
    sims = [s for _, s in hits]
    assert sims == sorted(sims, reverse=True)
    expected = sorted(range(20), key=lambda i: -float(vectors[i] @ vectors[7]))[:5]
    assert [h[0] for h in hits] == [f"m{i}" for i in expected]
    assert all(
        s == pytest.approx(float(vectors[i] @ vectors[7]), abs=1e-4) for i, s in zip(expected, sims, strict=True)
    )


def test_upsert_replaces_the_vector(index: VectorIndex, rng: np.random.Generator) -> None:
    a, b = unit(rng, 2)
    index.upsert(COL, ["x", "y"], np.stack([a, b]), [{"kept": "v1"}, {}])
    assert index.query(COL, a, 1) == [("x", pytest.approx(1.0, abs=1e-5))]
    index.upsert(COL, ["x"], b[None, :], [{"kept": "v2"}])
    assert index.count(COL) == 2
    assert {i for i, s in index.query(COL, b, 2) if s == pytest.approx(1.0, abs=1e-5)} == {"x", "y"}
    assert index.query(COL, a, 1)[0][1] < 0.999  # a is nowhere any more


def test_delete_removes_and_ignores_unknown_ids(index: VectorIndex, rng: np.random.Generator) -> None:
    v = unit(rng, 3)
    index.upsert(COL, ["a", "b", "c"], v, [{}, {}, {}])
    index.delete(COL, ["b", "never-stored"])
    assert index.count(COL) == 2
    assert sorted(index.ids(COL)) == ["a", "c"]
    assert "b" not in [i for i, _ in index.query(COL, v[1], 3)]
    index.delete(COL, [])


def test_count_and_ids(index: VectorIndex, rng: np.random.Generator) -> None:
    ids = [f"id-{i:03d}" for i in range(37)]
    index.upsert(COL, ids, unit(rng, 37), [{} for _ in ids])
    assert index.count(COL) == 37
    assert sorted(index.ids(COL)) == ids


def test_k_larger_than_count(index: VectorIndex, rng: np.random.Generator) -> None:
    v = unit(rng, 3)
    index.upsert(COL, ["a", "b", "c"], v, [{}, {}, {}])
    assert len(index.query(COL, v[0], 50)) == 3


def test_empty_and_unknown_collections(index: VectorIndex, rng: np.random.Generator) -> None:
    q = unit(rng, 1)[0]
    assert index.query("never_used", q, 5) == []
    assert index.count("never_used") == 0
    assert index.ids("never_used") == []
    index.upsert(COL, ["a"], q[None, :], [{}])
    index.delete(COL, ["a"])
    assert index.query(COL, q, 5) == []


def test_metadata_types_and_none(index: VectorIndex, rng: np.random.Generator) -> None:
    v = unit(rng, 2)
    index.upsert(COL, ["a", "b"], v, [{"flag": np.bool_(True), "n": np.int64(3), "f": np.float32(0.5)}, {"x": None}])
    assert {i for i, _ in index.query(COL, v[0], 5)} == {"a", "b"}  # numpy scalars and None are accepted


def test_collections_are_isolated(index: VectorIndex, rng: np.random.Generator) -> None:
    v = unit(rng, 3)
    index.upsert("first_memories", ["a", "b"], v[:2], [{}, {}])
    index.upsert("second_memories", ["a"], v[2:], [{"only": "second"}])
    assert index.count("first_memories") == 2
    assert index.count("second_memories") == 1
    assert index.query("second_memories", v[0], 5) == [("a", pytest.approx(float(v[2] @ v[0]), abs=1e-5))]
    index.delete("first_memories", ["a"])
    assert index.ids("second_memories") == ["a"]


def test_reset_drops_everything(index: VectorIndex, rng: np.random.Generator) -> None:
    v = unit(rng, 2)
    index.upsert("first_memories", ["a"], v[:1], [{}])
    index.upsert("second_memories", ["b"], v[1:], [{}])
    index.reset()
    assert index.count("first_memories") == 0
    assert index.count("second_memories") == 0
    index.upsert("first_memories", ["c"], v[:1], [{}])  # usable afterwards
    assert index.ids("first_memories") == ["c"]


def test_batches_larger_than_the_max_batch_size(index: VectorIndex, rng: np.random.Generator) -> None:
    n = 6000  # chromadb 1.5's embedded max batch is 5461
    ids = [f"b{i}" for i in range(n)]
    vectors = unit(rng, n, dim=4)
    index.upsert(COL, ids, vectors, [{"i": i} for i in range(n)])
    assert index.count(COL) == n
    assert sorted(index.ids(COL)) == sorted(ids)
    assert index.query(COL, vectors[5999], 1)[0][0] == "b5999"
    index.delete(COL, ids[:5500])
    assert index.count(COL) == 500


def test_thread_safety_smoke(index: VectorIndex, rng: np.random.Generator) -> None:
    vectors = unit(rng, 200)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for b in range(5):
                rows = range(t * 50 + b * 10, t * 50 + b * 10 + 10)
                index.upsert(COL, [f"t{r}" for r in rows], vectors[list(rows)], [{"t": t} for _ in rows])
                assert index.query(COL, vectors[rows[0]], 3)[0][0] == f"t{rows[0]}"
                index.count(COL)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert index.count(COL) == 200


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda ix, v: ix.query(COL, v[0], 0), "k must be"),
        (lambda ix, v: ix.query("x", v[0], 3), "collection name"),
        (lambda ix, v: ix.upsert(COL, ["z"], np.ones((1, DIM + 1), np.float32), [{}]), "dimension|-d"),
        (lambda ix, v: ix.query(COL, np.ones(DIM + 1, np.float32), 3), "dimension|-d"),
        (lambda ix, v: ix.upsert(COL, ["z"], v[:1], [{"nested": {"a": 1}}]), "nested"),
        (lambda ix, v: ix.upsert(COL, ["z", "z"], v[:2], [{}, {}]), "unique"),
    ],
    ids=["k", "name", "upsert-dim", "query-dim", "nested", "duplicate"],
)
def test_bad_input_raises_value_error(index: VectorIndex, rng: np.random.Generator, call: Any, message: str) -> None:
    v = unit(rng, 2)
    index.upsert(COL, ["a", "b"], v, [{"n": 1}, {"n": 2}])
    with pytest.raises(ValueError, match=message):
        call(index, v)


def test_counting_a_collection_never_written_creates_nothing(tmp_path: Path, rng: np.random.Generator) -> None:
    """A fresh store's first open counts the collection of each of its six types against the
    catalog: creating them cost 5-15 ms each on the way to its first flush."""
    import sqlite3

    ix = ChromaEmbeddedIndex(tmp_path / "chroma")
    try:
        assert ix.count("never_used") == 0
        ix.upsert(COL, ["a"], unit(rng, 1), [{}])
        assert ix.count(COL) == 1
    finally:
        ix.close()
    with sqlite3.connect(tmp_path / "chroma" / "chroma.sqlite3") as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM collections")] == [COL]
