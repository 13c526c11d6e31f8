"""A small scope's vectors kept in memory for exact scoring (remindful.engine.exact.ScopedScorer):
a search restricted to it gives what reading its rows from the catalog gives, after every kind of
change to them (a store, an update, a move into the scope, a delete, a vector that arrives late)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from remindful.engine.exact import ScopedScorer
from remindful.model import MemoryType
from remindful.testing import open_fake

SCOPE = "project:small"
TOPICS = ["deploy", "lunch", "invoice", "backup", "kernel", "garden", "piano", "ferry", "tax", "oven"]
QUERIES = ["kernel item3", "garden week", "the ferry", "deploy note 40", "zeppelin hangar", "walrus pier"]


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Any]:
    with open_fake(tmp_path / "s") as manager:
        manager.store_batch(
            [
                {"content": f"note {i} about the {TOPICS[i % 10]} and item{i} in week {i // 7}", "scope": scope}
                for i in range(60)
                for scope in ([SCOPE] if i % 3 == 0 else ["project:large"])
            ]
        )
        manager.flush()
        yield manager


@pytest.fixture
def used(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of rows each use of the kept copies returned."""
    seen: list[int] = []
    query = ScopedScorer.query

    def counting(self: ScopedScorer, *args: Any, **kwargs: Any) -> Any:
        found = query(self, *args, **kwargs)
        seen.append(-1 if found is None else len(found))
        return found

    monkeypatch.setattr(ScopedScorer, "query", counting)
    return seen


def results(memory: Any) -> list[list[tuple[str, float]]]:
    return [[(h.id, round(h.score, 4)) for h in memory.search(q, limit=5, scope=[SCOPE])] for q in QUERIES]


def from_catalog(memory: Any, monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[str, float]]]:
    with monkeypatch.context() as m:
        m.setattr(ScopedScorer, "query", lambda *args, **kwargs: None)
        return results(memory)


def test_a_scoped_search_scores_the_kept_copy_as_the_catalog_does(
    memory: Any, used: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = results(memory)
    assert used and all(n > 0 for n in used)
    assert kept == from_catalog(memory, monkeypatch)


def test_the_kept_copy_follows_every_change(memory: Any, used: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    results(memory)  # the copy is made
    in_scope = [h.id for h in memory.search("kernel item3", limit=3, scope=[SCOPE])]
    memory.store("the zeppelin hangar opens on friday", scope=SCOPE)
    memory.update(in_scope[0], content="the walrus sleeps on the pier")
    outside = memory.store("the ferry leaves from the walrus pier", scope="project:large")
    moved = memory.store("the oven timer rings at the walrus pier", scope="project:other")
    memory.flush()
    memory.update(outside, scope=SCOPE)
    memory.move_scope(["project:other"], SCOPE)
    memory.delete(in_scope[1])
    memory.flush()
    used.clear()
    kept = results(memory)
    assert used and all(n > 0 for n in used)
    assert kept == from_catalog(memory, monkeypatch)
    found = {mid for hits in kept for mid, _ in hits}
    assert {outside, moved, in_scope[0]} <= found and in_scope[1] not in found


def test_a_vector_that_arrives_after_the_copy_was_made_is_scored(
    memory: Any, used: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    late = memory.store("the zeppelin hangar opens on friday", scope=SCOPE)
    memory.flush()
    catalog = memory.engine.catalog
    vector = catalog.embeddings([late])[late]
    catalog.write(lambda conn: conn.execute("UPDATE memories SET embedding = NULL WHERE id = ?", (late,)))
    results(memory)  # the copy is made without its vector
    catalog.set_embeddings({late: vector})
    used.clear()
    kept = results(memory)
    assert used and kept == from_catalog(memory, monkeypatch)
    assert kept[QUERIES.index("zeppelin hangar")][0][0] == late


def test_the_kept_copys_cosines_are_those_of_the_catalogs_vectors(memory: Any) -> None:
    """Each kept vector is the catalog's (int8 codes and their scale, read many at once)."""
    catalog = memory.engine.catalog
    query = memory.engine.embedder.embed(["the garden in week 4"])[0]
    found = ScopedScorer(catalog).query([SCOPE], {SCOPE: 20}, list(MemoryType), query, 20)
    assert found is not None and len(found) == 20
    stored = catalog.embeddings([mid for mid, _ in found])
    assert [score for _, score in found] == pytest.approx(
        [float(np.dot(stored[mid], query)) for mid, _ in found], abs=1e-5
    )
    assert len({round(score, 4) for _, score in found}) > 3
