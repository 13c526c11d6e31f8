"""Quota eviction keeps each type's ranking between stores (ranking all of a type's rows on every
store past its quota cost writers most of their time under load): the victims must still be the
least important unbookmarked memories as they are at the store."""

from __future__ import annotations

import time
from pathlib import Path

from remindful.testing import open_fake

QUOTA = {"retention.max_items_per_collection": 3}


def present(memory: object, ids: list[str]) -> list[bool]:
    return [m is not None for m in memory.get_batch(ids)]  # type: ignore[attr-defined]


def test_a_memory_stored_after_the_ranking_can_be_the_next_victim(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", **QUOTA) as memory:
        a, b, c = (memory.store(f"note {i}", metadata={"importance": v}) for i, v in enumerate((0.9, 0.8, 0.7)))
        d = memory.store("note d", metadata={"importance": 0.2})  # ranks the type: c goes
        assert present(memory, [a, b, c, d]) == [True, True, False, True]
        memory.store("note e", metadata={"importance": 0.95})  # d came after the ranking, and is the least
        assert present(memory, [a, b, d]) == [True, True, False]


def test_a_memory_bookmarked_after_the_ranking_is_not_evicted(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", **QUOTA) as memory:
        low = memory.store("low", metadata={"importance": 0.1})
        mid = memory.store("mid", metadata={"importance": 0.3})
        high = memory.store("high", metadata={"importance": 0.9})
        memory.store("fourth", metadata={"importance": 0.8})  # ranks the type: low goes
        assert present(memory, [low]) == [False]
        fourth = memory.engine.catalog.read("SELECT id FROM memories WHERE content = 'fourth'")[0][0]
        memory.update(mid, metadata={"bookmarked": True})
        memory.store("fifth", metadata={"importance": 0.8})
        assert present(memory, [mid, high, fourth]) == [True, True, False]


def test_a_memory_used_after_the_ranking_ranks_higher(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", **QUOTA) as memory:
        low = memory.store("low", metadata={"importance": 0.1})
        used = memory.store("used", metadata={"importance": 0.50})
        other = memory.store("other", metadata={"importance": 0.52})
        memory.store("fourth", metadata={"importance": 0.9})  # ranks the type: low goes
        assert present(memory, [low]) == [False]
        memory.engine.catalog.touch([used], time.time())  # an access outweighs 0.02 of importance
        memory.store("fifth", metadata={"importance": 0.9})
        assert present(memory, [used, other]) == [True, False]
