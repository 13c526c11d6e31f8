"""Re-ranking the first fused candidates with a fitted linear model.

Fusion (:mod:`remindful.engine.retrieval.search`) adds each space's scores min-max normalised per query: it
knows how a memory ranks in each space, not how much of the query it holds. The first
:data:`DEPTH` candidates (by boosted fused score) are therefore re-ordered by the boost factor times

``WEIGHTS["fused"] * fused + WEIGHTS["cosine"] * cosine + WEIGHTS["lexical_context"] * lexical_context
+ WEIGHTS["coverage"] * coverage + WEIGHTS["entities"] * entities``

- ``fused``: the fused score before the boosts (the order so far); the model's score is then
  multiplied by the candidate's boost factor (importance, the resumed session, recency), as the
  fused score was, so a boost reorders near-ties here too;
- ``cosine``: MiniLM's cosine between the query and the memory, absolute where fusion kept only its
  rank in the dense list;
- ``lexical_context``: the memory's BM25 in the ``lexical_context`` space over the query's best
  there (0 when that space did not find it);
- ``coverage``: the share of the query's lexical terms the memory holds
  (:func:`remindful.engine.retrieval.calibration.coverage`): BM25 OR-s the terms, so one rare term can
  outweigh all the others;
- ``entities``: the share of the query's names (its capitalised words after the first, stopwords
  aside) that the memory holds. A name the store repeats often ("Anna", a project) weighs little
  in BM25 and is dropped from it when too common, yet a question naming it is about it.

Candidates past :data:`DEPTH` keep their fused order below the re-ranked ones, so the model
re-orders what fusion found and never reaches further down.

The weights were fitted on the LoCoMo dev split (shared/data/locomo_dev.json, each turn one
memory), as the calibration was, by ``bench/fit_rerank.py``: for each conversation's own questions
(categories 1-4), the features of the first :data:`DEPTH` candidates of the pipeline, labelled by
whether they are evidence turns; plain logistic regression, classes weighted equally, L2 1e-3,
features standardised, the weights then expressed in raw units (the bias does not change the
order and is dropped). Fitted on four conversations and measured on the fifth, in turn, the
re-ranked order found R@5 0.701 / R@10 0.778 within those candidates, against 0.662 / 0.758 for
the fused order (with the context space around the first 10 dense candidates, the default since
the weights were fitted around 20: refitted, they moved by at most 0.26); bench/locomo.py
measures the whole pipeline (``--baseline search.rerank=false``: the same run without the model).
The features read no wording of the data: cosines, BM25, term and name overlap.
"""

from __future__ import annotations

import re
from collections.abc import Container, Sequence

import numpy as np

#: How many of the first fused candidates are re-ranked.
DEPTH = 20
#: What the model reads of a candidate, in order (see the module docstring).
FEATURES = ("fused", "cosine", "lexical_context", "coverage", "entities")
#: The fitted weights (see the module docstring; bench/fit_rerank.py fits them).
WEIGHTS = {"fused": 3.701, "cosine": 1.465, "lexical_context": 1.977, "coverage": 1.383, "entities": 1.322}
_WEIGHTS = np.array([WEIGHTS[name] for name in FEATURES])

_WORD = re.compile(r"\w+", re.UNICODE)


def entities(query: str, stopwords: Container[str]) -> list[str]:
    """The query's names: its capitalised words after the first (which any sentence capitalises),
    lowercased, ``stopwords`` left out."""
    words = _WORD.findall(query)[1:]
    return list(dict.fromkeys(w.lower() for w in words if w[:1].isupper() and w.lower() not in stopwords))


def scores(features: Sequence[Sequence[float]]) -> list[float]:
    """The re-ranking score of each candidate from its :data:`FEATURES`, in that order."""
    if not features:
        return []
    result: list[float] = (np.asarray(features, dtype=np.float64) @ _WEIGHTS).tolist()
    return result


__all__ = ["DEPTH", "FEATURES", "WEIGHTS", "entities", "scores"]
