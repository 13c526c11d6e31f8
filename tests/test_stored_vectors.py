"""Vectors in the catalog as int8 with a scale (:mod:`remindful.engine.vectors`): a quarter of the
bytes, the same neighbours, and rows written as float32 before still read."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from remindful.engine import vectors
from remindful.testing import catalog_rows, open_fake


def unit(rng: np.random.Generator, d: int = 384) -> np.ndarray:
    v = rng.standard_normal(d).astype(np.float32)
    return v / np.linalg.norm(v)


def test_a_vector_takes_a_quarter_of_the_bytes_and_keeps_its_cosines() -> None:
    rng = np.random.default_rng(1)
    a, b = unit(rng), unit(rng)
    blob = vectors.encode(a)
    assert blob is not None and len(blob) == 384 + 5
    back = vectors.decode(blob)
    assert back.dtype == np.float32 and back.shape == (384,)
    assert abs(float(back @ b) - float(a @ b)) < 0.002
    assert vectors.dimension(blob) == 384


@settings(max_examples=50, deadline=None)
@given(arrays(np.float32, st.sampled_from([4, 8, 384]), elements=st.floats(-10, 10, width=32)))
@example(np.full(4, 1e-45, dtype=np.float32))  # its scale underflowed to zero: a division by zero
def test_every_component_is_within_half_a_step(vector: np.ndarray) -> None:
    blob = vectors.encode(vector)
    assert blob is not None
    back = vectors.decode(blob)
    step = float(np.max(np.abs(vector))) / 127 if np.any(vector) else 1.0
    assert np.all(np.abs(back - vector) <= step / 2 + 1e-6 * max(1.0, step))


def test_float32_blobs_written_before_are_read_as_they_were() -> None:
    rng = np.random.default_rng(2)
    old = unit(rng).tobytes()
    assert not vectors.is_quantised(old)
    assert np.array_equal(vectors.decode(old), np.frombuffer(old, dtype=np.float32))
    assert vectors.dimension(old) == 384
    new = vectors.encode(unit(rng))
    assert new is not None
    matrix = vectors.matrix([old, new])
    assert matrix.shape == (2, 384)
    assert np.array_equal(vectors.decode_bytes(old), old)


def test_a_matrix_of_int8_blobs_is_their_rows_decoded() -> None:
    rng = np.random.default_rng(3)
    blobs = [vectors.encode(unit(rng) * scale) for scale in (1.0, 0.5, 3.0, 1e-3)]
    assert all(b is not None and vectors.is_quantised(b) for b in blobs)
    expected = np.stack([vectors.decode(b) for b in blobs if b is not None])
    found = vectors.matrix([b for b in blobs if b is not None])
    assert found.dtype == np.float32
    assert np.array_equal(found, expected)


def test_an_odd_length_vector_is_stored_as_float32() -> None:
    odd = np.arange(3, dtype=np.float32)
    blob = vectors.encode(odd)
    assert blob == odd.tobytes()
    assert np.array_equal(vectors.decode(blob), odd)


def test_a_store_keeps_int8_and_still_finds_rows_stored_as_float32(tmp_path: Path) -> None:
    with open_fake(tmp_path, **{"performance.async_indexing": False}) as memory:
        mid = memory.store("the staging port is 8443")
        other = memory.store("lunch was pasta on friday")
        (length,) = catalog_rows(memory, "SELECT length(embedding) FROM memories WHERE id = ?", (mid,))[0]
        assert length % 4 == 1  # quantised
        dim = length - 5
    # A row written by an earlier release: plain float32.
    conn = sqlite3.connect(tmp_path / "catalog.sqlite3")
    (blob,) = conn.execute("SELECT embedding FROM memories WHERE id = ?", (other,)).fetchone()
    conn.execute(
        "UPDATE memories SET embedding = ? WHERE id = ?", (vectors.decode(blob).astype("<f4").tobytes(), other)
    )
    conn.commit()
    conn.close()
    with open_fake(tmp_path, **{"performance.async_indexing": False}) as memory:
        (length,) = catalog_rows(memory, "SELECT length(embedding) FROM memories WHERE id = ?", (other,))[0]
        assert length == 4 * dim
        found = [hit.id for hit in memory.search("pasta lunch friday", limit=2)]
        assert found[0] == other
        exported = memory.engine.catalog.embeddings([mid, other])
        assert {v.shape for v in exported.values()} == {(dim,)}


@pytest.mark.parametrize("rows", [1, 2047, 2048, 5000])
def test_int8_rows_are_scored_a_part_at_a_time_as_they_would_be_whole(rows: int) -> None:
    """The int8 codes (a scope's copy, or a field of the snapshot's records) are made float32 a
    part at a time (vectors.SCORE_ROWS): the same dot products, to the bit, across the parts'
    boundaries."""
    rng = np.random.default_rng(rows)
    codes = rng.integers(-127, 128, (rows, 384), dtype=np.int8)
    query = rng.standard_normal(384).astype(np.float32)
    whole = np.einsum("ij,j->i", codes.astype(np.float32), query)
    assert np.array_equal(vectors.cosines(codes, query), whole)
    records = np.zeros(rows, dtype=[("rowid", "<i8"), ("codes", "i1", (384,)), ("scale", "<f4")])
    records["codes"] = codes
    assert np.array_equal(vectors.cosines(records["codes"], query), whole)


def test_blobs_read_at_once_are_the_records_read_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot's records of a batch of catalog rows (``index_snapshot.records``: a rebuild reads
    a million) take the int8 blobs at once; the same bytes as one blob at a time."""
    from remindful.engine import index_snapshot
    from remindful.model import MemoryType

    rng = np.random.default_rng(11)
    blobs = [vectors.encode(unit(rng)) or b"" for _ in range(300)]
    rowids = list(range(1, 301))
    ids = [f"conversation_20260101000000{n:06d}_abcdef12" for n in rowids]
    kinds = [t.value for t in MemoryType]
    types = [kinds[n % len(kinds)] for n in range(300)]
    assert vectors.int8_codes(blobs) is not None
    at_once = index_snapshot.records(rowids, ids, types, blobs)
    with monkeypatch.context() as m:
        m.setattr(vectors, "int8_codes", lambda blobs: None)
        one_by_one = index_snapshot.records(rowids, ids, types, blobs)
    assert at_once.tobytes() == one_by_one.tobytes()
    assert list(at_once["hash"][:3]) == [index_snapshot.id_hash(i) for i in ids[:3]]
    # A row stored as float32 (written before vectors were int8), or a blob not as encode() makes
    # it: none is read at once, and the records are the same.
    old = [*blobs[:5], vectors.decode(blobs[5]).astype("<f4").tobytes()]
    assert vectors.int8_codes(old) is None
    assert vectors.int8_codes([*blobs[:5], b"x" + blobs[5][1:]]) is None
    mixed = index_snapshot.records(rowids[:6], ids[:6], types[:6], old)
    assert mixed.tobytes() == at_once[:6].tobytes()
