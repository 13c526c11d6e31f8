"""Calibrated relevance: what ``SearchHit.score`` means.

The fused ranking (:mod:`remindful.engine.search`) normalises each space per query, so its top hit
always scores 1 whatever it is. The score a caller sees is instead an absolute estimate, the same
for every query and store: the probability that a hit is a genuine match rather than noise, at
even prior odds.

It is a logistic function of two absolute quantities:

- ``evidence`` of one memory: ``dense cosine + COVERAGE_WEIGHT * coverage``, where the cosine is
  MiniLM's between the query and the memory and ``coverage`` is the share of the query's lexical
  terms that the memory's text contains (compared on their first :data:`STEM_CHARS` characters,
  a cheap stemmer).
- ``best``: the highest evidence among the query's first :data:`BEST_OF` ranked hits, where a
  hit's cosine may also be its context cosine (the memory with its session neighbours, as the
  ``context`` space computes it), if higher. A query whose best match is weak is off topic for
  this store, and so is every hit it has; a moderate hit beside a strong one is more likely a real
  (partial) answer than the same hit alone.

``score = sigmoid(W_EVIDENCE * evidence + W_BEST * best + BIAS) * sigmoid(GATE_SLOPE * (evidence - GATE_EVIDENCE))``

where sigmoid is the logistic function. The first factor says the query is about something this store
holds; the second, the gate, that this hit itself is about the query: without it an unrelated
memory would share a strong hit's score ("when is the meeting with Anna" lifting "User prefers dark
mode"). Below ``GATE_EVIDENCE`` a hit scores under half, whatever else matched.

Fitted on the LoCoMo dev split (shared/data/locomo_dev.json, five conversations, each turn one
memory): positives are the evidence turns among the first ten hits of each conversation's own
questions (categories 1-4); negatives are the first ten hits of the next conversation's questions
asked against it (questions the store cannot answer). Classes weighted equally, plain logistic
regression (Newton's method, L2 1e-4). The gate was set by hand, not fitted: 0.3 is about the
lowest evidence of an evidence turn ranked in the first five (1 % lower), and its slope makes it
a step about 0.1 wide. At a floor of 0.4 the dev split then had 91.6 % of the foreign questions
without a hit while the own questions lost 0.0072 of R@5 (bench/locomo.py prints both for the
current code). Nothing in
the features reads the wording of the data: only cosines and term overlap.

The constants hold for all-MiniLM-L6-v2 (the default embedder); another embedder's cosines have
another scale, so with one its scores are still comparable across queries but the floor may need
setting (``search.min_score``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

#: Logistic weights fitted on the dev split (see the module docstring).
W_EVIDENCE = 9.339
W_BEST = 18.571
BIAS = -14.326
#: The gate: the evidence a hit needs of its own (see the module docstring), and how steep it is.
GATE_EVIDENCE = 0.3
GATE_SLOPE = 30.0
#: Weight of the lexical coverage in a memory's evidence.
COVERAGE_WEIGHT = 0.2
#: Characters of a word compared for coverage: "deploys" and "deployment" both match "deploy".
STEM_CHARS = 5
#: ``best`` is taken over this many ranked hits (at least), whatever the limit asked for.
BEST_OF = 10

_WORD = re.compile(r"\w+", re.UNICODE)


def coverage(terms: Sequence[str], text: str) -> float:
    """The share of ``terms`` (the query's lexical terms) found in ``text``, in [0, 1]."""
    if not terms:
        return 0.0
    stems = {word[:STEM_CHARS] for word in _WORD.findall(text.lower())}
    return sum(term[:STEM_CHARS] in stems for term in terms) / len(terms)


def evidence(cosine: float, covered: float) -> float:
    """Absolute evidence of matching the query: a cosine plus the weighted term coverage."""
    return cosine + COVERAGE_WEIGHT * covered


def relevance(own: float, best: float) -> float:
    """The calibrated score in [0, 1] of a hit with evidence ``own`` in a query whose best is ``best``."""
    return _sigmoid(W_EVIDENCE * own + W_BEST * max(best, own) + BIAS) * _sigmoid(GATE_SLOPE * (own - GATE_EVIDENCE))


def _sigmoid(z: float) -> float:
    return 0.0 if z < -60 else 1.0 / (1.0 + math.exp(-z))


__all__ = ["BEST_OF", "coverage", "evidence", "relevance"]
