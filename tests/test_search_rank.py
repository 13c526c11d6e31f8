"""The ranking pipeline's pure parts: boosts, the order of the hits and their scores, and looking
further when near-duplicates fold the first candidates into few hits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from remindful.config import SearchSettings
from remindful.engine.catalog import MemoryRow
from remindful.engine.retrieval import calibration
from remindful.engine.retrieval.search import (
    MAX_CANDIDATES,
    Scored,
    _dense,
    _groups,
    _scored_exactly,
    boost,
    next_pool,
)
from remindful.engine.sqlfilter import SqlFilter

ANY = SqlFilter("1", ())


def row(mid: str, importance: float = 0.5, session: str | None = None, created: float = 0.0) -> MemoryRow:
    return MemoryRow(mid, "action", mid, "{}", "manual", "episodic", session, created, importance=importance)


def test_boost_is_bounded_and_rewards_importance_and_the_resumed_session() -> None:
    settings = SearchSettings(importance_boost=0.1, session_boost=0.15, recency_half_life_days=0)
    assert boost(row("a", 0.5), settings, None) == 0.0
    assert boost(row("a", 1.0), settings, None) == 0.1
    assert boost(row("a", 0.0), settings, None) == -0.1
    assert boost(row("a", 7.0), settings, None) == 0.1  # importance is clamped to [0, 1]
    assert boost(row("a", 1.0, "s"), settings, "s") == 0.1 + 0.15
    assert boost(row("a", 1.0, "s"), settings, "other") == 0.1
    recent = SearchSettings(recency_boost=0.04, recency_half_life_days=10)
    assert boost(row("a", created=1000.0), recent, None, now=1000.0) == 0.04
    assert boost(row("a", created=1000.0), recent, None, now=1000.0 + 10 * 86400) == 0.02


def _unit(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(8).astype(np.float32)
    return vector / np.linalg.norm(vector)


@given(
    evidence=st.lists(st.floats(-0.2, 2.0), min_size=1, max_size=12),
    gains=st.lists(st.sampled_from([0.0, 0.05, -0.1, 0.2]), min_size=12, max_size=12),
    copies=st.lists(st.integers(0, 3), min_size=12, max_size=12),
    days=st.lists(st.sampled_from([0, 1, 400, 900]), min_size=12, max_size=12),
)
def test_scores_never_rise_down_the_list(
    evidence: list[float], gains: list[float], copies: list[int], days: list[int]
) -> None:
    # Near-duplicates (the same vector), newer versions of a subject ("moved to X", stored days
    # apart) moved up, boosts that reorder: whatever happens, the list reads best first.
    scored: dict[str, Scored] = {}
    vectors: dict[str, np.ndarray] = {}
    contents = ["The user moved to Berlin", "The user moved to Lisbon", "The user moved to Paris", "Lunch at noon"]
    for i, value in enumerate(evidence):
        mid = f"m{i:02d}"
        memory = row(mid, created=days[i] * 86400.0)
        memory.content = contents[copies[i]]
        score = calibration.relevance(value + gains[i], value)
        scored[mid] = Scored(memory, value, value, gains[i], score)
        vectors[mid] = _unit(copies[i])
    ordered = dict(sorted(scored.items(), key=lambda item: (-item[1].score, -item[1].evidence, item[0])))
    for diverse in (True, False):
        groups = _groups(ordered, vectors, SearchSettings(), diverse)
        scores = [score for _, score in groups]
        assert scores == sorted(scores, reverse=True)
        assert sorted(mid for group, _ in groups for mid in group.ids) == sorted(scored)


def test_the_group_shows_its_best_match_and_lists_the_others() -> None:
    vectors = {mid: _unit(1) for mid in ("a", "b", "c")}
    scored = {
        "a": Scored(row("a", 1.0), 0.40, 0.40, 0.1, calibration.relevance(0.50, 0.40)),  # boosted first
        "b": Scored(row("b"), 0.45, 0.45, 0.0, calibration.relevance(0.45, 0.45)),  # the best match
        "c": Scored(row("c"), 0.30, 0.30, 0.0, calibration.relevance(0.30, 0.30)),
    }
    [(group, score)] = _groups(scored, vectors, SearchSettings(), True)
    assert group.shown.id == "b" and group.similar_ids == ["a", "c"] and score == scored["b"].score


def test_restrictions_are_scored_exactly_when_small_or_a_small_share() -> None:
    settings = SearchSettings(exact_filter_max=10_000)
    assert _scored_exactly(3_000, 100_000, settings)  # 3 %: the index's candidates would hold too few
    assert not _scored_exactly(3_000, 10_000, settings)  # 30 %: the index finds enough
    assert not _scored_exactly(10_001, 100_000, settings)  # too many to score exactly
    assert _scored_exactly(8_000, None, settings)  # the searched size unknown: up to exact_filter_max
    assert not _scored_exactly(5, 10, SearchSettings(exact_filter_max=0))


def test_near_duplicates_filling_the_first_candidates_make_the_search_look_further(tmp_path: Path) -> None:
    from remindful.testing import open_fake

    with open_fake(tmp_path / "s", **{"search.candidates": 5}) as memory:
        memory.store_batch([{"content": "disk full on node seven", "type": "action"} for _ in range(12)])
        distinct = memory.store_batch(
            [{"content": f"disk {word} report", "type": "action"} for word in ("quota", "usage", "alert", "audit")]
        )
        # once every vector is computed (its own flush, not the search's timed wait): a row still
        # without one cannot be folded with its copies
        assert memory.flush(300), "the stores were not indexed within 300 s"
        hits = memory.search("disk full on node seven", limit=5, min_score=0)
        assert len(hits) == 5 and hits[0].similar == 11 and len(hits[0].similar_ids) == 11
        assert set(distinct) <= {hit.id for hit in hits}


class DenseCatalog:
    """What :func:`_dense` reads: the ids ``passes`` keeps (by their rank in the index) pass the
    filter; records an exact scoring."""

    def __init__(self, passes: Callable[[int], bool] = lambda i: i % 3 == 0) -> None:
        self.passes = passes
        self.exact = False

    def filtered_embeddings(self, flt: SqlFilter) -> tuple[list[str], np.ndarray | None]:
        self.exact = True
        return ["x"], np.ones((1, 2), dtype=np.float32)

    def ids_passing(self, ids: Sequence[str], flt: SqlFilter) -> set[str]:
        return {mid for mid in ids if self.passes(int(mid[1:]))}

    def pending_embeddings(self, flt: SqlFilter, after: int | None) -> tuple[list[str], None]:
        return [], None


def test_a_scope_of_known_size_asks_the_index_for_enough_candidates_or_is_scored_exactly() -> None:
    """A scope's count is known without a read: the index is asked for the candidates its share
    needs for k to pass (with a margin, at least the ten-fold, at most INDEX_FETCH_MAX), for
    INDEX_FETCH_MAX when too few of those pass (neighbours cluster), and a share too small for
    INDEX_FETCH_MAX candidates is scored exactly."""
    asked: list[int] = []

    def index(vector: np.ndarray, n: int) -> list[tuple[str, float]]:
        asked.append(n)
        return [(f"m{i}", 1.0 - i / n) for i in range(n)]

    vector = np.ones(2, dtype=np.float32)

    def dense(
        passing: int, k: int = 10, at_least: int | None = None, passes: Callable[[int], bool] = lambda i: i % 3 == 0
    ) -> tuple[list[int], bool]:
        asked.clear()
        catalog = DenseCatalog(passes)
        found = _dense(catalog, vector, ANY, k, index, True, 100_000, None, SearchSettings(), passing, at_least)  # type: ignore[arg-type]
        assert found
        return list(asked), catalog.exact

    assert dense(60_000) == ([100], False)  # a large share: the ten-fold is enough
    assert dense(5_000) == ([500], False)  # 5 %: k * 2.5 / 0.05 candidates
    assert dense(2_000, k=20) == ([], True)  # 2,000 candidates would hold 40 of them: exact
    assert dense(1_000) == ([], True)  # few rows are always scored exactly
    # The first candidates are another project's: the index is asked for the most, then they pass.
    assert dense(5_000, passes=lambda i: i >= 600) == ([500, 2000], False)
    # None pass among the most: every row of the scope is scored.
    assert dense(5_000, passes=lambda i: False) == ([500, 2000], True)
    # A later round looking further (k 80, the first round's 20): 50 of the most are enough.
    assert dense(5_000, k=80, at_least=20, passes=lambda i: i % 40 == 0) == ([2000], False)
    assert dense(5_000, k=80) == ([], True)  # without it, 2,000 would not hold 80 with the margin: exact


def test_a_later_pool_holds_what_the_hits_so_far_say_the_limit_needs() -> None:
    """Ten near copies of each text fold 80 candidates into about 8 hits: 10 hits need about 100,
    200 with the margin, not 320; from twice to four times the pool before, at most MAX_CANDIDATES."""
    assert next_pool(80, 10, 8) == 200
    assert next_pool(20, 10, 3) == 80  # at most four times
    assert next_pool(20, 10, 9) == 45
    assert next_pool(40, 10, 20) == 80  # at least twice
    assert next_pool(100, 10, 0) == 400
    assert next_pool(400, 50, 2) == MAX_CANDIDATES


def test_the_rounds_of_one_search_check_each_dense_candidate_against_the_filter_once() -> None:
    """Each round asks for more candidates than the round before, most of them checked then (at
    1,000,000 memories a check is a row read from anywhere in the file)."""
    checked_ids: list[str] = []

    class Counting(DenseCatalog):
        def ids_passing(self, ids: Sequence[str], flt: SqlFilter) -> set[str]:
            checked_ids.extend(ids)
            return super().ids_passing(ids, flt)

    def index(vector: np.ndarray, n: int) -> list[tuple[str, float]]:
        return [(f"m{i}", 1.0 - i / n) for i in range(n)]

    catalog = Counting()
    vector = np.ones(2, dtype=np.float32)
    checked: dict[str, bool] = {}
    rounds = [
        _dense(catalog, vector, ANY, k, index, True, 100_000, None, SearchSettings(), 60_000, 20, None, checked)[:k]  # type: ignore[arg-type]
        for k in (20, 80)
    ]
    assert len(checked_ids) == len(set(checked_ids)) == 800  # 200, then the 600 new of 800
    assert [m for m, _ in rounds[1][:20]] == [m for m, _ in rounds[0]] and len(rounds[1]) == 80
    assert all(int(mid[1:]) % 3 == 0 for mid, _ in rounds[1])  # only those passing, as without the memo
    fresh = _dense(Counting(), vector, ANY, 80, index, True, 100_000, None, SearchSettings(), 60_000, 20)  # type: ignore[arg-type]
    assert fresh[:80] == rounds[1]
