"""Near pairs for dedup (issue 34): a large group is not compared pair by pair (a million memories
took hours), yet the pairs found agree with comparing every pair. Work is counted, never timed."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from remindful.services.policy import near_pairs
from remindful.services.policy.near_pairs import NearPairs, band_keys, chance_similarities, plan
from remindful.testing import open_fake
from requirements import bench_data, missing

LOCOMO = bench_data("locomo")


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def planted(n: int, copies: int = 5, noise: float = 0.01, seed: int = 1) -> np.ndarray:
    """``n`` unit rows: ``n // copies`` texts, each with ``copies - 1`` near-copies (cosine ~0.98
    to each other), skewed like real embeddings (unrelated rows at cosine ~0.2)."""
    rng = np.random.default_rng(seed)
    base = unit(rng.standard_normal((n // copies, 64)).astype(np.float32) + 0.5)
    rows = base[np.arange(n) % len(base)] + rng.standard_normal((n, 64)).astype(np.float32) * noise
    return unit(rows)


def pairs(found: NearPairs) -> set[tuple[int, int]]:
    """Every (row, neighbour) pair, row < neighbour, lists held or not."""
    out = set()
    for row, cols in found.neighbours.items():
        for col in found.of(row) if cols is None else cols:
            if row < col:
                out.add((row, int(col)))
    return out


def at_cosine(x: np.ndarray, cosine: float, rng: np.random.Generator) -> np.ndarray:
    """A unit vector at exactly ``cosine`` to each row of ``x`` (unit rows)."""
    z = rng.standard_normal(x.shape).astype(np.float32)
    z -= (z * x).sum(axis=1, keepdims=True) * x
    z = unit(z)
    return unit(cosine * x + math.sqrt(1 - cosine**2) * z)


def test_a_large_group_compares_far_fewer_pairs_than_every_pair_and_finds_the_same_ones() -> None:
    matrix = planted(12_000)
    hashed = NearPairs(matrix, 0.95, max_stored=10**7, exact_rows=1_000)
    every = NearPairs(matrix, 0.95, max_stored=10**7, exact_rows=len(matrix))
    assert every.compared == len(matrix) ** 2
    assert hashed.compared < len(matrix) ** 2 / 2 / 50
    assert pairs(hashed) == pairs(every)
    assert len(pairs(every)) == 12_000 // 5 * 10  # the planted pairs, and only they


def test_a_group_up_to_the_exact_size_compares_every_pair() -> None:
    matrix = planted(2_000)
    found = NearPairs(matrix, 0.95, max_stored=10**7, exact_rows=2_000)
    assert found.compared == 2_000**2
    assert len(pairs(found)) == 2_000 // 5 * 10


def test_the_hyperplanes_are_fixed_so_two_runs_agree() -> None:
    matrix = planted(3_000)
    assert np.array_equal(band_keys(matrix, 16, 4), band_keys(matrix.copy(), 16, 4))
    first = NearPairs(matrix, 0.95, max_stored=10**7, exact_rows=0)
    second = NearPairs(matrix.copy(), 0.95, max_stored=10**7, exact_rows=0)
    assert first.neighbours.keys() == second.neighbours.keys()
    assert all(np.array_equal(v, second.neighbours[k]) for k, v in first.neighbours.items())  # type: ignore[arg-type]


@pytest.mark.parametrize("exact_rows", [0, 10**6])
def test_past_the_stored_bound_a_rows_neighbours_are_found_again_alike(exact_rows: int) -> None:
    matrix = planted(3_000)
    held = NearPairs(matrix, 0.95, max_stored=10**7, exact_rows=exact_rows)
    bounded = NearPairs(matrix, 0.95, max_stored=1_000, exact_rows=exact_rows)
    assert sum(v is None for v in bounded.neighbours.values()) > 2_000
    assert bounded.neighbours.keys() == held.neighbours.keys()
    for row, cols in held.neighbours.items():
        assert np.array_equal(bounded.of(row), cols)  # type: ignore[arg-type]


def test_a_bucket_of_many_near_identical_rows_is_compared_within_itself() -> None:
    rng = np.random.default_rng(2)
    same = unit(np.ones((near_pairs.BIG_BUCKET + 500, 64), dtype=np.float32) + rng.standard_normal((1, 64)) * 0.001)
    matrix = np.vstack([same, planted(4_000)])
    found = NearPairs(matrix, 0.95, max_stored=10**8, banding=plan(len(matrix), 0.95))  # listed, not asked for
    big = len(same)
    assert len(pairs(found)) == big * (big - 1) // 2 + 4_000 // 5 * 10
    assert found.neighbours[0] is not None and len(found.neighbours[0]) == big


@pytest.mark.parametrize("threshold", [0.8, 0.85, 0.9, 0.95, 0.98, 0.99])
@pytest.mark.parametrize("n", [30_000, 250_000, 1_000_000])
def test_the_banding_finds_a_pair_at_the_threshold_with_the_stated_probability(n: int, threshold: float) -> None:
    banding = plan(n, threshold, np.full(100, 0.2, dtype=np.float32))
    if banding is None:  # every pair compared: exact
        return
    bits, bands = banding
    p = 1 - math.acos(threshold) / math.pi
    assert 1 - (1 - p**bits) ** bands >= near_pairs.RECALL


def test_pairs_exactly_at_the_threshold_are_found_as_often_as_promised() -> None:
    rng = np.random.default_rng(3)
    x = unit(rng.standard_normal((4_000, 64)).astype(np.float32) + 0.3)
    matrix = np.vstack([x, at_cosine(x, 0.9502, rng)])  # just above 0.95 (float32 rounding)
    banding = plan(len(matrix), 0.95, chance_similarities(matrix))
    assert banding is not None
    found = pairs(NearPairs(matrix, 0.95, max_stored=10**7, banding=banding))
    hits = sum((i, i + 4_000) in found for i in range(4_000))
    assert hits >= 4_000 * 0.997  # 0.999 promised: 4 misses expected, 12 allowed


@pytest.mark.slow
def test_on_real_embeddings_hashing_finds_the_pairs_every_pair_finds(onnx_embedder: object) -> None:
    """LoCoMo turns, their light rewrites (real near-paraphrases) and planted near-copies at cosine
    0.95-0.99, embedded by the real model: at 0.95 and 0.85, with the banding used for a million
    memories, the pairs hashing finds are ≥ 99.9 % of those comparing every pair finds."""
    if not LOCOMO.exists():
        missing(f"the LoCoMo data at {LOCOMO}")
    samples = json.loads(LOCOMO.read_text(encoding="utf-8"))
    turns = [
        t["text"]
        for s in samples
        for k, v in s["conversation"].items()
        if k.startswith("session_") and isinstance(v, list)
        for t in v
    ]
    texts = list(dict.fromkeys(turns))[:4_000]
    rnd = random.Random(4)
    rewrites = [
        rnd.choice(["Well, ", "So ", "Oh, ", ""]) + t.rstrip(".!?") + rnd.choice(["!", ".", " :)", "?"])
        for t in rnd.sample(texts, 1_500)
    ]
    vectors = unit(np.asarray(onnx_embedder.embed(texts + rewrites), dtype=np.float32))  # type: ignore[attr-defined]
    rng = np.random.default_rng(5)
    originals = vectors[rng.choice(len(texts), 2_000, replace=False)]
    copies = np.vstack([at_cosine(originals[i : i + 1], c, rng) for i, c in enumerate(rng.uniform(0.95, 0.99, 2_000))])
    matrix = np.vstack([vectors, copies])
    for threshold in (0.95, 0.85):
        banding = plan(1_000_000, threshold, chance_similarities(matrix))
        assert banding is not None
        every = pairs(NearPairs(matrix, threshold, max_stored=10**8, exact_rows=len(matrix)))
        hashed = pairs(NearPairs(matrix, threshold, max_stored=10**8, banding=banding))
        assert hashed <= every  # verified: never a false pair
        assert len(every) > 2_000
        agreement = len(hashed) / len(every)
        print(f"threshold {threshold}: {len(every)} pairs, hashing found {len(hashed)} ({agreement:.4%})")
        assert agreement >= 0.999


def test_rows_with_too_many_pairs_to_list_are_asked_for_one_by_one_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = planted(6_000, copies=30)  # 30 copies a text: 87,000 pairs
    listed_all = NearPairs(matrix, 0.95, max_stored=10**7, exact_rows=0)
    monkeypatch.setattr(near_pairs, "MAX_CANDIDATES", 10_000)
    asked = NearPairs(matrix, 0.95, max_stored=10**7, exact_rows=0)
    assert all(v is None for v in asked.neighbours.values())
    assert asked.compared < listed_all.compared / 5
    assert pairs(asked) == pairs(listed_all)
    assert len(pairs(asked)) == 6_000 // 30 * (30 * 29 // 2)


@pytest.mark.parametrize("listing", [True, False])
def test_dedup_of_a_hashed_group_reports_what_comparing_every_pair_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listing: bool
) -> None:
    """The whole path (catalog, importance order, bookmarks) with groups hashed, pairs listed or
    asked for one by one: the same clusters, representatives and duplicates."""
    with open_fake(tmp_path / "store") as memory:
        rnd = random.Random(6)
        for i in range(60):
            memory.store_batch(
                [
                    {"content": f"screen {i}: the settings dialog", "type": "screen", "metadata": meta}
                    for meta in [
                        {"importance": rnd.random(), "bookmarked": rnd.random() < 0.1} for _ in range(i % 6 + 1)
                    ]
                ]
            )
        every = memory.dedup(dry_run=True)
        monkeypatch.setattr(near_pairs, "EXACT_ROWS", 0)
        if not listing:
            monkeypatch.setattr(near_pairs, "MAX_CANDIDATES", 0)
        hashed = memory.dedup(dry_run=True)
    assert every.clusters > 40 and every.deleted > 100  # (a cluster of bookmarks alone deletes nothing)
    assert hashed.representatives == every.representatives
