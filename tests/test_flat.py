"""The catalog's vectors held in memory for exact scoring while the vector index is not open
(remindful.engine.flat): each query reads only what changed, and still sees every row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from remindful.engine import flat as flat_module
from remindful.engine.flat import FlatVectors
from remindful.testing import open_fake


def nearest(flat: FlatVectors, memory: Any, text: str, k: int = 1) -> list[str]:
    vector = memory.engine.embedder.embed([text])[0]
    found = flat.query(["action", "knowledge"], memory.engine.type_counts(), vector, k)
    assert found is not None
    return [mid for mid, _score in found]


def test_rows_stored_after_the_first_query_are_found(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        memory.store("the deploy script needs the prod profile")
        flat = FlatVectors(memory.engine.catalog)
        later = memory.store("lunch is served at noon", type="knowledge")
        memory.flush()
        assert nearest(flat, memory, "deploy script prod profile") != [later]
        assert nearest(flat, memory, "lunch served noon") == [later]


def test_a_vector_that_arrives_later_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flat_module, "RECHECK_S", 0.0)
    with open_fake(tmp_path / "s") as memory:
        memory.store("the deploy script needs the prod profile")
        late = memory.store("lunch is served at noon")
        memory.flush()
        catalog = memory.engine.catalog
        vector = catalog.embeddings([late])[late]
        catalog.write(lambda conn: conn.execute("UPDATE memories SET embedding = NULL WHERE id = ?", (late,)))
        flat = FlatVectors(catalog)
        assert nearest(flat, memory, "lunch served noon", k=2) != [late]  # read without its vector
        catalog.set_embeddings({late: np.asarray(vector)})
        assert nearest(flat, memory, "lunch served noon") == [late]


def test_a_row_that_takes_the_rowid_of_a_deleted_newest_one_is_found(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        memory.store("the deploy script needs the prod profile")
        newest = memory.store("the office closes at six")
        memory.flush()
        flat = FlatVectors(memory.engine.catalog)
        assert nearest(flat, memory, "office closes six") == [newest]
        memory.delete(newest)
        successor = memory.store("lunch is served at noon")  # SQLite gives it the deleted row's rowid
        memory.flush()
        assert nearest(flat, memory, "lunch served noon") == [successor]


def test_a_store_too_large_to_hold_is_left_to_the_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flat_module, "MAX_ROWS", 2)
    with open_fake(tmp_path / "s") as memory:
        memory.store_batch([{"content": f"note {i}"} for i in range(3)])
        flat = FlatVectors(memory.engine.catalog)
        vector = memory.engine.embedder.embed(["note"])[0]
        assert flat.query(["action"], memory.engine.type_counts(), vector, 1) is None


def test_a_fresh_process_waits_for_the_index_of_a_store_too_large_to_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scoring a large store exactly reads every vector from the catalog, each search: a fresh
    process's first search of 100,000 memories took 8 s so, where opening the index took under 2."""
    from remindful.engine.catalog import Catalog
    from remindful.index import ChromaEmbeddedIndex

    monkeypatch.setattr(flat_module, "MAX_ROWS", 2)
    with open_fake(tmp_path / "s", index=ChromaEmbeddedIndex(tmp_path / "s" / "chroma")) as memory:
        wanted = memory.store_batch([{"content": f"note {i} about the deploy"} for i in range(3)])[1]
        assert memory.flush()

    def read_every_vector(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("every vector read from the catalog for one search")

    monkeypatch.setattr(Catalog, "filtered_embeddings", read_every_vector)
    with open_fake(tmp_path / "s", index=ChromaEmbeddedIndex(tmp_path / "s" / "chroma")) as memory:
        hits = memory.search("note 1 about the deploy", limit=1)
    assert [h.id for h in hits] == [wanted]
