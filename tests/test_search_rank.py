"""The ranking pipeline's pure parts: boosts, the choice of the best eligible candidates, and how
few rows they take."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from remindful.config import SearchSettings
from remindful.engine.catalog import MemoryRow
from remindful.engine.retrieval.diversity import Candidate, collapse, supersede
from remindful.engine.retrieval.search import _dense, _distinct, _scored_exactly, best_eligible, boost
from remindful.engine.sqlfilter import SqlFilter

ANY = SqlFilter("1", ())


def row(mid: str, importance: float = 0.5, session: str | None = None) -> MemoryRow:
    return MemoryRow(mid, "action", mid, "{}", "manual", "episodic", session, 0.0, importance=importance)


class RowsCatalog:
    """Just what :func:`best_eligible` reads: rows by id, some of them filtered out; counts reads."""

    def __init__(self, rows: dict[str, MemoryRow], passing: set[str]) -> None:
        self.rows, self.passing, self.reads = rows, passing, 0
        self.asked: list[str] = []  # the ids of the last read

    def rows_passing(
        self, ids: Sequence[str], flt: SqlFilter, *, vectors: dict[str, np.ndarray] | None = None
    ) -> dict[str, MemoryRow]:
        self.reads += 1
        self.asked = list(ids)
        return {mid: self.rows[mid] for mid in ids if mid in self.passing}


def test_boost_is_bounded_and_rewards_importance_and_the_resumed_session() -> None:
    settings = SearchSettings(importance_boost=0.1, session_boost=0.15)
    assert boost(row("a", 0.5), settings, None) == 1.0
    assert boost(row("a", 1.0), settings, None) == 1.1
    assert boost(row("a", 0.0), settings, None) == 0.9
    assert boost(row("a", 7.0), settings, None) == 1.1  # importance is clamped to [0, 1]
    assert boost(row("a", 1.0, "s"), settings, "s") == 1.1 * 1.15
    assert boost(row("a", 1.0, "s"), settings, "other") == 1.1


def test_a_strongly_boosted_candidate_further_down_still_makes_the_top() -> None:
    settings = SearchSettings(importance_boost=0.5, session_boost=0.5)
    fused = {f"m{i:03d}": 1.0 - i * 0.001 for i in range(100)}  # near-ties all the way down
    rows = {mid: row(mid) for mid in fused}
    rows["m090"] = row("m090", 1.0, "resumed")
    catalog = RowsCatalog(rows, set(fused))
    best = best_eligible(catalog, fused, ANY, settings, "resumed", 5)  # type: ignore[arg-type]
    assert best[0][0].id == "m090" and len(best) == 5


def test_clear_leaders_are_settled_in_one_read_and_filtered_rows_are_skipped() -> None:
    settings = SearchSettings(importance_boost=0.1, session_boost=0.15)
    fused = {f"m{i:03d}": 1.0 / (i + 1) for i in range(300)}
    catalog = RowsCatalog({mid: row(mid) for mid in fused}, set(fused) - {"m000", "m002"})
    best = best_eligible(catalog, fused, ANY, settings, None, 3)  # type: ignore[arg-type]
    assert [r.id for r, _ in best] == ["m001", "m003", "m004"]
    assert catalog.reads == 1


def test_a_larger_pool_reads_only_the_rows_it_adds() -> None:
    settings = SearchSettings(importance_boost=0.1, session_boost=0.15)
    fused = {f"m{i:03d}": 1.0 / (i + 1) for i in range(300)}
    catalog = RowsCatalog({mid: row(mid) for mid in fused}, set(fused) - {"m001"})
    read: dict[str, MemoryRow | None] = {}
    first = best_eligible(catalog, fused, ANY, settings, None, 20, read=read)  # type: ignore[arg-type]
    assert catalog.reads == 1 and len(read) == 25 and read["m001"] is None  # the rows that failed are kept too
    second = best_eligible(catalog, fused, ANY, settings, None, 40, read=read)  # type: ignore[arg-type]
    assert catalog.reads == 2 and catalog.asked == [f"m{i:03d}" for i in range(25, 50)]
    assert [r.id for r, _ in second][:20] == [r.id for r, _ in first] and "m001" not in {r.id for r, _ in second}


def test_near_ties_are_read_in_one_more_read_not_a_chunk_at_a_time() -> None:
    # Every candidate could still reach the 20th boosted score: the second read takes all of them.
    settings = SearchSettings(importance_boost=0.1, session_boost=0.15)
    fused = {f"m{i:03d}": 1.0 - i * 0.0001 for i in range(300)}
    catalog = RowsCatalog({mid: row(mid) for mid in fused}, set(fused))
    best = best_eligible(catalog, fused, ANY, settings, None, 20)  # type: ignore[arg-type]
    assert [r.id for r, _ in best] == [f"m{i:03d}" for i in range(20)]
    assert catalog.reads == 2 and len(catalog.asked) == 275


@settings(max_examples=300)
@given(
    scores=st.lists(st.sampled_from([0.1, 0.5, 0.6, 0.9]) | st.floats(0, 1), min_size=0, max_size=40),
    importances=st.lists(st.sampled_from([0.0, 0.5, 1.0]) | st.floats(0, 1), min_size=40, max_size=40),
    sessions=st.lists(st.sampled_from(["a", "b", None]), min_size=40, max_size=40),
    passing=st.lists(st.booleans(), min_size=40, max_size=40),
    limit=st.integers(1, 6),
    resumed=st.sampled_from(["a", None]),
    chunk=st.sampled_from([None, 1, 2, 3]),
)
def test_best_eligible_equals_boosting_and_sorting_every_candidate(
    scores: list[float],
    importances: list[float],
    sessions: list[str | None],
    passing: list[bool],
    limit: int,
    resumed: str | None,
    chunk: int | None,
) -> None:
    config = SearchSettings(importance_boost=0.3, session_boost=0.4)
    fused = {f"m{i:03d}": score for i, score in enumerate(scores)}
    rows = {mid: row(mid, importances[i], sessions[i]) for i, mid in enumerate(fused)}
    eligible = {mid for i, mid in enumerate(fused) if passing[i]}
    catalog = RowsCatalog(rows, eligible)
    best = best_eligible(catalog, fused, ANY, config, resumed, limit, chunk=chunk)  # type: ignore[arg-type]
    everything = sorted(
        ((mid, fused[mid] * boost(rows[mid], config, resumed)) for mid in eligible), key=lambda x: (-x[1], x[0])
    )
    assert [(r.id, score) for r, score in best] == everything[:limit]


def test_restrictions_are_scored_exactly_when_small_or_a_small_share() -> None:
    settings = SearchSettings(exact_filter_max=10_000)
    assert _scored_exactly(3_000, 100_000, settings)  # 3 %: the index's candidates would hold too few
    assert not _scored_exactly(3_000, 10_000, settings)  # 30 %: the index finds enough
    assert not _scored_exactly(10_001, 100_000, settings)  # too many to score exactly
    assert _scored_exactly(8_000, None, settings)  # the searched size unknown: up to exact_filter_max
    assert not _scored_exactly(5, 10, SearchSettings(exact_filter_max=0))


class VectorsCatalog(RowsCatalog):
    """:class:`RowsCatalog` that also gives the rows' vectors, and counts every row it reads."""

    def __init__(self, rows: dict[str, MemoryRow], vectors: dict[str, np.ndarray]) -> None:
        super().__init__(rows, set(rows))
        self.vectors, self.rows_read = vectors, 0

    def rows_passing(  # type: ignore[override]
        self, ids: Sequence[str], flt: SqlFilter, *, vectors: dict[str, np.ndarray] | None = None
    ) -> dict[str, MemoryRow]:
        found = super().rows_passing(ids, flt)
        self.rows_read += len(ids)
        if vectors is not None:
            vectors.update((mid, self.vectors[mid]) for mid in found)
        return found


def test_a_pool_grown_past_many_duplicates_is_grouped_as_a_whole_pool_would_be_reading_fewer_rows() -> None:
    # The first 100 candidates are near-copies of one memory, 200 distinct ones follow: the pool grows
    # from 20 to 200, and 20 groups are complete some way into it. Ranking the pool a part at a time
    # gives the same groups as ranking all of it, without the rows past the part the grouping took.
    rng = np.random.default_rng(5)
    base = rng.standard_normal(384)
    raw = [base + rng.normal(0, 0.05, 384) for _ in range(100)] + [rng.standard_normal(384) for _ in range(200)]
    vectors = {f"m{i:03d}": (v / np.linalg.norm(v)).astype(np.float32) for i, v in enumerate(raw)}
    fused = {mid: 0.98**i for i, mid in enumerate(vectors)}  # the boosts cannot reorder beyond ~10 places
    rows = {mid: row(mid) for mid in fused}
    config = SearchSettings()

    catalog = VectorsCatalog(rows, vectors)
    groups, _, shown = _distinct(catalog, fused, ANY, config, None, 10)  # type: ignore[arg-type]

    whole = VectorsCatalog(rows, vectors)
    read: dict[str, np.ndarray] = {}
    best = best_eligible(whole, fused, ANY, config, None, 200, vectors=read)  # type: ignore[arg-type]
    ranked = [Candidate(r.id, r.content, r.created_at) for r, _ in best]
    expected, _ = collapse(ranked, read, config.collapse_similarity, stop_at=20)
    expected = supersede(expected, read, config.supersede_similarity)

    assert [(g.shown.id, g.similar) for g in groups] == [(g.shown.id, g.similar) for g in expected]
    assert len(groups) == 20 and groups[0].similar == 99 and set(shown) >= {g.shown.id for g in groups}
    assert catalog.rows_read < whole.rows_read


class DenseCatalog:
    """What :func:`_dense` reads: every third id passes the filter; records an exact scoring."""

    def __init__(self) -> None:
        self.exact = False

    def filtered_embeddings(self, flt: SqlFilter) -> tuple[list[str], np.ndarray | None]:
        self.exact = True
        return ["x"], np.ones((1, 2), dtype=np.float32)

    def ids_passing(self, ids: Sequence[str], flt: SqlFilter) -> set[str]:
        return {mid for mid in ids if int(mid[1:]) % 3 == 0}

    def pending_embeddings(self, flt: SqlFilter, after: int | None) -> tuple[list[str], None]:
        return [], None


def test_a_scope_of_known_size_asks_the_index_for_enough_candidates_or_is_scored_exactly() -> None:
    """A scope's count is known without a read: the index is asked for the candidates its share
    needs for k to pass (with a margin, at least the ten-fold), and a share too small is scored
    exactly."""
    asked: list[int] = []

    def index(vector: np.ndarray, n: int) -> list[tuple[str, float]]:
        asked.append(n)
        return [(f"m{i}", 1.0 - i / n) for i in range(n)]

    vector = np.ones(2, dtype=np.float32)

    def dense(passing: int, k: int = 10) -> tuple[int | None, bool]:
        asked.clear()
        catalog = DenseCatalog()
        found = _dense(catalog, vector, ANY, k, index, True, 100_000, None, SearchSettings(), passing)  # type: ignore[arg-type]
        assert found
        return (asked[0] if asked else None), catalog.exact

    assert dense(60_000) == (100, False)  # a large share: the ten-fold is enough
    assert dense(5_000) == (500, False)  # 5 %: k * 2.5 / 0.05 candidates
    assert dense(2_000, k=20) == (None, True)  # 2,500 candidates would be needed: exact
    assert dense(1_000) == (None, True)  # few rows are always scored exactly
