"""Fit the re-ranking model (remindful.engine.retrieval.rerank) on a LoCoMo-format split, and measure it held out.

For each conversation: a fresh store built as bench/locomo.py builds it; each of its questions
(categories 1-4) searched through the real pipeline, recording the features the re-ranking reads of
the first ``rerank.DEPTH`` fused candidates (in fused order) and whether each is an evidence turn.
Then plain logistic regression (Newton's method, classes weighted equally, L2 1e-3, features
standardised), its weights printed in raw units: those are ``rerank.WEIGHTS``.

The baseline in the same run: fitted on all conversations but one and measured on that one, in
turn, R@5 / R@10 of the re-ranked order against the fused order, within the recorded candidates and
with no relevance floor (bench/locomo.py measures the whole pipeline with the floor).

    python bench/fit_rerank.py [--data PATH] [--conversations N] [--json]
"""

from __future__ import annotations

import sys
from typing import Any
from unittest import mock

import numpy as np

import remindful
from common import add_data_option, emit, load_locomo, logistic, machine, parser, scratch_dir
from locomo import turns

L2 = 1e-3


def record(data: list[dict[str, Any]]) -> list[list[tuple[np.ndarray, np.ndarray, int]]]:
    """Per conversation, per question: (features of the first candidates, evidence labels, evidence count)."""
    from remindful.engine.retrieval import search

    recorded: list[list[tuple[np.ndarray, np.ndarray, int]]] = []
    seen: list[tuple[list[tuple[float, ...]], list[str | None]]] = []

    def keep_order(self: Any, best: list[Any], vectors: Any) -> list[Any]:
        head = best[: search.rerank.DEPTH]
        seen.append((self.features(head, vectors), [_dia_id(row.metadata) for row, _ in head]))
        return list(best)

    for sample in data:
        questions = [qa for qa in sample["qa"] if qa.get("category") in (1, 2, 3, 4) and qa.get("evidence")]
        rows = []
        with scratch_dir() as tmp, remindful.open(tmp) as memory:
            memory.store_batch(turns(sample["conversation"]))
            memory.flush()
            with mock.patch.object(search.Reorder, "__call__", keep_order):
                for qa in questions:
                    seen.clear()
                    memory.search(qa["question"], limit=10, min_score=0)
                    features, ids = seen[0]
                    evidence = set(qa["evidence"])
                    labels = np.array([i in evidence for i in ids], dtype=float)
                    rows.append(
                        (
                            np.array(features, dtype=float).reshape(-1, len(search.rerank.FEATURES)),
                            labels,
                            len(evidence),
                        )
                    )
        recorded.append(rows)
        print(f"conversation {len(recorded)} of {len(data)}: {len(rows)} questions", file=sys.stderr, flush=True)
    return recorded


def _dia_id(metadata: str) -> str | None:
    import json

    value = json.loads(metadata).get("dia_id")
    return value if isinstance(value, str) else None


def fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Raw-unit weights of a class-balanced, L2-regularised logistic regression (no bias: it does not
    change the order)."""
    weights: np.ndarray = logistic(x, y, L2)[0]
    return weights


def recall(rows: list[tuple[np.ndarray, np.ndarray, int]], weights: np.ndarray | None) -> dict[str, float]:
    """R@5 / R@10 of the recorded candidates ordered by ``weights`` (None: the fused order)."""
    found: dict[int, list[float]] = {5: [], 10: []}
    for x, y, evidence in rows:
        order = np.arange(len(y)) if weights is None else np.argsort(-(x @ weights), kind="stable")
        for k in found:
            found[k].append(float(y[order[:k]].sum()) / evidence)
    return {f"R@{k}": round(float(np.mean(v)), 4) for k, v in found.items()}


def main(argv: list[str] | None = None) -> int:
    from remindful.engine.retrieval import rerank

    args_parser = parser(__doc__)
    add_data_option(args_parser, conversations=True)
    args = args_parser.parse_args(argv)
    recorded = record(load_locomo(args.data)[: args.conversations])
    every = [row for rows in recorded for row in rows]
    weights = fit(np.vstack([x for x, _, _ in every]), np.concatenate([y for _, y, _ in every]))
    result = {
        "data": str(args.data),
        "questions": len(every),
        "weights": dict(zip(rerank.FEATURES, (round(float(v), 3) for v in weights), strict=True)),
        "shipped": rerank.WEIGHTS,
        "fused_order": recall(every, None),
        "in_sample": recall(every, weights),
        "held_out": _held_out(recorded),
        "machine": machine(),
    }
    emit(result, args.json, lines)
    return 0


def _held_out(recorded: list[list[tuple[np.ndarray, np.ndarray, int]]]) -> dict[str, float]:
    """Fitted on all conversations but one, measured on that one, in turn; averaged over questions."""
    total: dict[str, float] = {}
    for index, own in enumerate(recorded):
        train = [row for other, rows in enumerate(recorded) if other != index for row in rows]
        weights = fit(np.vstack([x for x, _, _ in train]), np.concatenate([y for _, y, _ in train]))
        for k, v in recall(own, weights).items():
            total[k] = total.get(k, 0.0) + v * len(own)
    questions = sum(len(rows) for rows in recorded)
    return {k: round(v / questions, 4) for k, v in total.items()}


def lines(result: dict[str, Any]) -> list[str]:
    weights = "  ".join(f"{k} {v}" for k, v in result["weights"].items())
    shipped = "  ".join(f"{k} {v}" for k, v in result["shipped"].items())
    return [
        f"re-ranking model fitted on {result['data']}: {result['questions']} questions",
        f"  weights: {weights}",
        f"  shipped: {shipped}",
        "  R@5 / R@10 within the first candidates, no floor:",
        f"    held out (fitted on the other conversations): {result['held_out']['R@5']:.3f} / "
        f"{result['held_out']['R@10']:.3f}",
        f"    in sample: {result['in_sample']['R@5']:.3f} / {result['in_sample']['R@10']:.3f}",
        f"    baseline, the fused order: {result['fused_order']['R@5']:.3f} / {result['fused_order']['R@10']:.3f}",
    ]


if __name__ == "__main__":
    sys.exit(main())
