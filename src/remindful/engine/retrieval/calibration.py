"""Calibrated relevance: what ``SearchHit.score`` means.

A hit's score is an estimate, in [0, 1], of how likely it is to be a memory the query asks for
(at even prior odds): a function of that hit's own evidence (:mod:`remindful.engine.retrieval.rerank`) and
of nothing else, so it means the same in every store and for every query. It does not depend on
the store's size, on the other hits or on their ranks, and the list a search returns is ordered by
it, best first:

``score = sigmoid(SLOPE * (evidence + boosts - CENTRE)) * sigmoid(GATE_SLOPE * (own - GATE_EVIDENCE))``

- ``evidence``: the memory's cosine with the query plus what its words and its session window add
  (:func:`remindful.engine.retrieval.rerank.evidence`); ``boosts``: the documented preferences, in the same
  units (``search.importance_boost``, ``search.session_boost``, ``search.recency_boost``: see
  :func:`remindful.engine.retrieval.search.boost`), so a confirmed memory, a memory of the resumed session
  or a newer one scores (and ranks) higher by that much;
- the second factor, the gate, asks that the memory itself be about the query (``own``: its cosine
  and its own words, not its neighbours'): under ``GATE_EVIDENCE`` a hit scores under half of what
  its evidence says, and far under it below. A memory that only sits next to a match ("Google
  search workflow" stored in the same session as "The user prefers dark mode", asked "dark mode")
  is kept out of every floor.

``SLOPE`` and ``CENTRE`` are fitted by ``bench/fit_ranking.py`` on both dev sets together (LoCoMo
conversations and PersonaChat persona facts queried by paraphrases): a logistic regression of
"this hit is one the question asks for" on the boosted evidence of the first ten hits of every
question, whose negatives are the other hits of the same questions and the hits of questions the
store cannot answer (another conversation's, another persona's), classes and data sets weighted
equally (fitted 2.69 / 0.66; each data set alone gives 6.4 / 0.48 for the paraphrases, 3.9 / 0.91
for LoCoMo, whose answers share words with their questions). Negatives that are near misses of
real questions keep the slope gentle: scores stay graded among the top hits instead of all
reading 1.0. The gate is set by hand: a step about 0.1 wide at 0.15, under the own evidence of
nearly every relevant hit ranked in the first five on both dev sets (their 1st percentile:
0.27-0.32) and above what an unrelated memory shows.

Two floors read this score: ``search.min_score`` (0.25) for explicit searches, where a
paraphrase (a cosine of 0.3, no shared word) scores 0.27 (by default only the best hit must reach
it: see :func:`remindful.engine.retrieval.search.rank`'s ``floor_best``), and ``context.min_score``
(0.5: more likely than not) for the context a hook injects unasked, with a lower tier of standing
knowledge from ``context.maybe_min_score`` (:mod:`remindful.services.context`). bench/fit_ranking.py prints what each
costs and gives on both dev sets, and bench/locomo.py and bench/personachat.py measure them end to
end.

The constants hold for all-MiniLM-L6-v2 (the default embedder); another embedder's cosines have
another scale, so with one its scores still order hits but the floors may need setting.
"""

from __future__ import annotations

import numpy as np

#: The logistic's slope and centre, in units of evidence (fitted; see the module docstring).
SLOPE = 2.7
CENTRE = 0.66
#: The gate: the evidence a hit needs of its own (see the module docstring), and how steep it is.
GATE_EVIDENCE = 0.15
GATE_SLOPE = 30.0


def relevance(evidence: float, own: float | None = None) -> float:
    """The calibrated score in [0, 1] of a hit with this ``evidence`` (boosts included) whose own
    evidence is ``own`` (default: ``evidence``)."""
    own = evidence if own is None else own
    return float(relevances(np.asarray([evidence], dtype=np.float64), np.asarray([own], dtype=np.float64))[0])


def relevances(evidence: np.ndarray, own: np.ndarray) -> np.ndarray:
    """:func:`relevance` of each of a batch of hits."""
    return _sigmoid(SLOPE * (evidence - CENTRE)) * _sigmoid(GATE_SLOPE * (own - GATE_EVIDENCE))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    # Far below the centre the score is 0 (and exp does not overflow).
    return np.where(z < -60, 0.0, 1.0 / (1.0 + np.exp(-np.maximum(z, -60.0))))


__all__ = ["CENTRE", "GATE_EVIDENCE", "GATE_SLOPE", "SLOPE", "relevance", "relevances"]
