"""Issue 31: the first hits of a search do not depend on how many it asks for (each space gave
max(candidates, limit) candidates and newer versions were looked for among 2 x limit hits, so the top 5
of limit=10 and limit=50 differed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from remindful.testing import open_fake


def test_the_top_hits_are_the_same_whatever_the_limit(tmp_path: Path) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with open_fake(tmp_path / "s", **{"search.min_score": 0.0}) as memory:
        memory.store("staging port alpha beta gamma", timestamp=start)
        memory.store_batch(
            [
                {
                    # Each a weaker match than the one before (no ties: a tie's order is arbitrary).
                    "content": "staging port " + " ".join(f"filler{i}x{j}" for j in range(i + 1)),
                    "timestamp": start + timedelta(hours=i + 1),
                }
                for i in range(40)
            ]
        )
        # A newer version of the first memory, itself a weaker match of the query than the fillers.
        memory.store("alpha beta gamma delta staging", timestamp=start + timedelta(days=5))
        query = "staging port"
        small = [hit.id for hit in memory.search(query, limit=5)]
        for limit in (10, 50, 200):
            assert [hit.id for hit in memory.search(query, limit=limit)][:5] == small, limit


def test_the_default_floor_asks_it_of_the_best_hit_and_an_explicit_one_of_every_hit(tmp_path: Path) -> None:
    # Issue 31: a multi-session question's second session scored under the default floor and was
    # dropped (LongMemEval recall_all@5 0.941 -> 0.882); whether the store answers is the best hit's to say.
    with open_fake(tmp_path / "s", **{"search.min_score": 0.8}) as memory:
        best = memory.store("alpha beta gamma delta")
        part = memory.store("alpha zeta eta theta iota kappa")
        assert [hit.id for hit in memory.search("alpha beta gamma delta")] == [best, part]
        assert [hit.id for hit in memory.search("alpha beta gamma delta", min_score=0.8)] == [best]
        assert memory.search("omega sigma") == []
