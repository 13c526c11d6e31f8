"""Fit the calibrated score (remindful.engine.retrieval.calibration) on a LoCoMo-format split, and measure it held out.

For each conversation: a fresh store built as bench/locomo.py builds it; each of its questions
(categories 1-4) and each of the next conversation's questions searched through the real pipeline
(``limit=10``, no floor), recording every ranked hit's evidence (cosine or context cosine, plus the
weighted term coverage), in ranked order. Then plain logistic regression (Newton's method, classes
weighted equally, L2 1e-4, features standardised) of ``evidence``, ``max(best, evidence)`` and
``first`` (the ranking's first hit): positives are the evidence turns among the first five hits of
the own questions, negatives the first ten hits of the next conversation's questions. The weights and
bias printed in raw units are ``W_EVIDENCE``, ``W_BEST``, ``W_FIRST`` and ``BIAS``; the gate is
kept as shipped.

Printed for the fitted weights at the shipped floor (``search.min_score``), and as the baseline in
the same run for the shipped ones: the R@5 the floor costs the own questions and the share of the
next conversation's questions left with no hit (bench/locomo.py's two floor figures), in sample
and held out (fitted on all conversations but one and measured on that one, in turn).

    python bench/fit_calibration.py [--data PATH] [--conversations N] [--json]
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any
from unittest import mock

import numpy as np

import remindful
from common import add_data_option, emit, load_locomo, logistic, machine, parser, scratch_dir
from locomo import turns

L2 = 1e-4
FEATURES = ("evidence", "best", "first")
#: Hits of the own questions that count as positives (R@5's), and of the others as negatives.
POSITIVE_DEPTH = 5
NEGATIVE_DEPTH = 10


@dataclass
class Question:
    """One search: its hits' evidence in ranked order, which are evidence turns, how many there are
    (0 for a question from another conversation)."""

    evidence: np.ndarray
    labels: np.ndarray
    wanted: int


def record(data: list[dict[str, Any]]) -> list[list[Question]]:
    """Per conversation: its own questions, then the next conversation's."""
    from remindful.engine.retrieval import search

    recorded: list[list[Question]] = []
    seen: list[tuple[list[str], list[float]]] = []
    evidence_of = search._evidence

    def spy(vector: Any, terms: Any, groups: Any, *rest: Any) -> list[float]:
        own = evidence_of(vector, terms, groups, *rest)
        seen.append(([group.shown.id for group in groups], own))
        return own

    for index, sample in enumerate(data):
        following = data[(index + 1) % len(data)]
        own = [qa for qa in sample["qa"] if qa.get("category") in (1, 2, 3, 4) and qa.get("evidence")]
        others = [qa for qa in following["qa"] if qa.get("category") in (1, 2, 3, 4)]
        questions: list[Question] = []
        with scratch_dir() as tmp, remindful.open(tmp) as memory:
            memory.store_batch(turns(sample["conversation"]))
            memory.flush()
            catalog = memory.engine.catalog
            dia = {
                mid: json.loads(meta).get("dia_id") for mid, meta in catalog.read("SELECT id, metadata FROM memories")
            }
            with mock.patch.object(search, "_evidence", spy):
                for qa, is_own in [(qa, True) for qa in own] + [(qa, False) for qa in others]:
                    seen.clear()
                    memory.search(qa["question"], limit=10, min_score=0)
                    ids, evidence = seen[-1]
                    wanted = set(qa["evidence"]) if is_own else set()
                    questions.append(
                        Question(
                            np.array(evidence), np.array([dia[i] in wanted for i in ids], dtype=float), len(wanted)
                        )
                    )
        recorded.append(questions)
        print(f"conversation {index + 1} of {len(data)}: {len(questions)} questions", file=sys.stderr, flush=True)
    return recorded


def rows(questions: list[Question]) -> tuple[np.ndarray, np.ndarray]:
    """The training rows (FEATURES) and labels of these questions' hits (see the module docstring)."""
    x: list[list[float]] = []
    y: list[float] = []
    for q in questions:
        if not len(q.evidence):
            continue
        best = float(q.evidence.max())
        for place, own in enumerate(q.evidence[:NEGATIVE_DEPTH].tolist()):
            if q.wanted and not (place < POSITIVE_DEPTH and q.labels[place]):
                continue
            x.append([own, max(best, own), float(place == 0)])
            y.append(1.0 if q.wanted else 0.0)
    return np.array(x), np.array(y)


def fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Raw-unit weights and bias of a class-balanced, L2-regularised logistic regression."""
    return logistic(x, y, L2)


def scores(q: Question, weights: np.ndarray, bias: float) -> np.ndarray:
    """The calibrated score of each hit, as calibration.relevance computes it with these weights."""
    from remindful.engine.retrieval import calibration

    if not len(q.evidence):
        return q.evidence
    own = q.evidence
    first = np.arange(len(own)) == 0
    z = weights[0] * own + weights[1] * np.maximum(own.max(), own) + weights[2] * first + bias
    gate = calibration.GATE_SLOPE * (own - calibration.GATE_EVIDENCE)
    result: np.ndarray = 1 / (1 + np.exp(-np.clip(z, -60, 60))) / (1 + np.exp(-np.clip(gate, -60, 60)))
    return result


def at_floor(questions: list[Question], weights: np.ndarray, bias: float, floor: float) -> tuple[float, int, int, int]:
    """(R@5 lost to the floor summed over the own questions, their count, the other questions with
    no hit, their count)."""
    lost = 0.0
    own = abstained = others = 0
    for q in questions:
        s = scores(q, weights, bias)
        if q.wanted:
            kept = np.nonzero(s >= floor)[0][:5]
            lost += (q.labels[:5].sum() - q.labels[kept].sum()) / q.wanted
            own += 1
        else:
            abstained += not (s >= floor).any()
            others += 1
    return lost, own, abstained, others


def figures(parts: list[tuple[float, int, int, int]]) -> dict[str, float]:
    lost, own, abstained, others = (sum(column) for column in zip(*parts, strict=True))
    return {"R@5 loss": round(lost / max(own, 1), 4), "abstention": round(abstained / max(others, 1), 4)}


def main(argv: list[str] | None = None) -> int:
    from remindful.config import SearchSettings
    from remindful.engine.retrieval import calibration

    args_parser = parser(__doc__)
    add_data_option(args_parser, conversations=True)
    args = args_parser.parse_args(argv)
    recorded = record(load_locomo(args.data)[: args.conversations])
    floor = SearchSettings().min_score
    every = [q for questions in recorded for q in questions]
    weights, bias = fit(*rows(every))
    shipped = np.array([calibration.W_EVIDENCE, calibration.W_BEST, calibration.W_FIRST]), calibration.BIAS
    held_out = []
    for index, questions in enumerate(recorded):
        train = [q for other, qs in enumerate(recorded) if other != index for q in qs]
        held_out.append(at_floor(questions, *fit(*rows(train)), floor))
    result = {
        "data": str(args.data),
        "questions": len(every),
        "floor": floor,
        "weights": {name: round(float(v), 3) for name, v in zip(FEATURES, weights, strict=True)}
        | {"bias": round(bias, 3)},
        "shipped": {name: round(float(v), 3) for name, v in zip(FEATURES, shipped[0], strict=True)}
        | {"bias": shipped[1]},
        "in_sample": figures([at_floor(every, weights, bias, floor)]),
        "held_out": figures(held_out),
        "shipped_in_sample": figures([at_floor(every, *shipped, floor)]),
        "machine": machine(),
    }
    emit(result, args.json, lines)
    return 0


def lines(result: dict[str, Any]) -> list[str]:
    def show(values: dict[str, float]) -> str:
        return "  ".join(f"{k} {v}" for k, v in values.items())

    def floor(values: dict[str, float]) -> str:
        return f"R@5 lost to the floor {values['R@5 loss']:.4f}, abstention {values['abstention']:.1%}"

    return [
        f"calibration fitted on {result['data']}: {result['questions']} searches, floor {result['floor']}",
        f"  weights: {show(result['weights'])}",
        f"  shipped: {show(result['shipped'])}",
        f"    in sample: {floor(result['in_sample'])}",
        f"    held out (fitted on the other conversations): {floor(result['held_out'])}",
        f"    baseline, the shipped weights: {floor(result['shipped_in_sample'])}",
    ]


if __name__ == "__main__":
    sys.exit(main())
