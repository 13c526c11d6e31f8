"""Calibrated relevance: what ``SearchHit.score`` means.

The fused ranking (:mod:`remindful.engine.retrieval.search`) normalises each space per query, so its top hit
always scores 1 whatever it is. The score a caller sees is instead an absolute estimate, the same
for every query and store: the probability that a hit is a genuine match rather than noise, at
even prior odds.

It is a logistic function of two absolute quantities and the hit's place:

- ``evidence`` of one memory: ``cosine + COVERAGE_WEIGHT * coverage``, where the cosine is
  MiniLM's between the query and the memory, or its context cosine (the memory with its session
  neighbours, as the ``context`` space computes it) where the search computed one and it is
  higher, and ``coverage`` is the share of the query's lexical terms that the memory's text
  contains (compared on their first :data:`STEM_CHARS` characters, a cheap stemmer). The answer
  to a question often sits in the turn after the one that names its topic: its context cosine
  says so where its own does not.
- ``best``: the highest evidence among the hits the search ranked (at least twice
  :data:`BEST_OF`, see :func:`remindful.engine.retrieval.search.rank`). A query whose best match is weak is
  off topic for this store, and so is every hit it has; a moderate hit beside a strong one is
  more likely a real (partial) answer than the same hit alone.
- ``first``: whether the hit is the one the ranking put first. The ranking read more than the
  evidence does (BM25 over the memory and its session window, the re-ranking model), and the hit
  it chose over all others is more often a real match than its cosine alone says.

``score = sigmoid(W_EVIDENCE * evidence + W_BEST * max(best, evidence) + W_FIRST * first + BIAS)
* sigmoid(GATE_SLOPE * (evidence - GATE_EVIDENCE))``

where sigmoid is the logistic function. The first factor says the query is about something this store
holds; the second, the gate, that this hit itself is about the query: without it an unrelated
memory would share a strong hit's score ("when is the meeting with Anna" lifting "User prefers dark
mode"). Below ``GATE_EVIDENCE`` a hit scores under half, whatever else matched.

Fitted on the LoCoMo dev split (shared/data/locomo_dev.json, five conversations, each turn one
memory) by ``bench/fit_calibration.py``: positives are the evidence turns among the first five
hits of each conversation's own questions (categories 1-4), what R@5 counts; negatives are the
first ten hits of the next conversation's questions asked against it (questions the store cannot
answer). Classes weighted equally, plain logistic regression (Newton's method, L2 1e-4). The gate
is set by hand, not fitted: a step about 0.1 wide (its slope) at 0.25, under nearly every evidence
turn ranked in the first five (their 1st percentile is about 0.35) and above what an unrelated
memory shows (a cosine near 0 and no shared term).

On the dev split at the default floor of 0.4, the next conversation's questions then got no hit in
90.8-91.2 % of cases while the own questions lost 0.0077-0.0090 of R@5 (four runs; the weights
shipped before, fitted without ``first`` on the first ten hits, gave 90.0 % and 0.0096 in one of
them). Fitted on four conversations and measured on the fifth, in turn: 89.6-89.9 % and
0.0090-0.0096. bench/locomo.py prints both figures for the current code; the embeddings depend a
little on how texts are batched, so a change to the embedder moves them. Nothing in the features
reads the wording of the data: only cosines, term overlap and the ranking's first place.

The constants hold for all-MiniLM-L6-v2 (the default embedder); another embedder's cosines have
another scale, so with one its scores are still comparable across queries but the floor may need
setting (``search.min_score``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence

#: Logistic weights fitted on the dev split (see the module docstring).
W_EVIDENCE = 6.425
W_BEST = 31.176
W_FIRST = 1.811
BIAS = -20.535
#: The gate: the evidence a hit needs of its own (see the module docstring), and how steep it is.
GATE_EVIDENCE = 0.25
GATE_SLOPE = 30.0
#: Weight of the lexical coverage in a memory's evidence.
COVERAGE_WEIGHT = 0.2
#: Characters of a word compared for coverage: "deploys" and "deployment" both match "deploy".
STEM_CHARS = 5
#: Searches rank at least this many distinct hits, whatever the limit asked for, and twice as many
#: in reserve for those the floor drops; ``best`` is taken over all of them.
BEST_OF = 10

_WORD = re.compile(r"\w+", re.UNICODE)


def coverage(terms: Sequence[str], text: str) -> float:
    """The share of ``terms`` (the query's lexical terms) found in ``text``, in [0, 1]."""
    return covered(terms, stems(text)) if terms else 0.0


def stems(text: str) -> frozenset[str]:
    """The words of ``text`` as :func:`coverage` compares them."""
    return frozenset(word[:STEM_CHARS] for word in _WORD.findall(text.lower()))


def finder(words: Iterable[str]) -> Callable[[str], frozenset[str]]:
    """A function giving the :func:`stems` of a text that are stems of ``words`` (lowercased words,
    such as a query's lexical terms): all :func:`covered` needs to know of the text, for less than
    splitting it into words costs. A stem of :data:`STEM_CHARS` characters is found at the start of
    a word, a shorter one as a whole word."""
    # A stem holding characters no word holds is no word's stem (``stems`` splits at them).
    wanted = [stem for stem in dict.fromkeys(word[:STEM_CHARS] for word in words) if _WORD.fullmatch(stem)]

    def find(text: str) -> frozenset[str]:
        lowered = text.lower()
        return frozenset(stem for stem in wanted if stem in lowered and _starts_word(lowered, stem))

    return find


def _starts_word(text: str, stem: str) -> bool:
    """Whether a word of ``text`` (a run of ``\\w`` characters) starts with ``stem`` or, for a stem
    shorter than :data:`STEM_CHARS`, is ``stem``."""
    whole = len(stem) < STEM_CHARS
    at = text.find(stem)
    while at >= 0:
        end = at + len(stem)
        if (at == 0 or not _word_char(text[at - 1])) and not (whole and end < len(text) and _word_char(text[end])):
            return True
        at = text.find(stem, at + 1)
    return False


def _word_char(char: str) -> bool:
    """What ``\\w`` matches (in str patterns): letters, digits and numerals of any script, and ``_``."""
    return char.isalnum() or char == "_"


def covered(terms: Sequence[str], found: frozenset[str]) -> float:
    """:func:`coverage` of a text whose :func:`stems` are ``found`` (or those a :func:`finder` of
    ``terms`` found in it)."""
    if not terms:
        return 0.0
    return sum(term[:STEM_CHARS] in found for term in terms) / len(terms)


def evidence(cosine: float, covered: float) -> float:
    """Absolute evidence of matching the query: a cosine plus the weighted term coverage."""
    return cosine + COVERAGE_WEIGHT * covered


def relevance(own: float, best: float, first: bool = False) -> float:
    """The calibrated score in [0, 1] of a hit with evidence ``own`` in a query whose best is
    ``best``; ``first``: the ranking put this hit first."""
    z = W_EVIDENCE * own + W_BEST * max(best, own) + W_FIRST * first + BIAS
    return _sigmoid(z) * _sigmoid(GATE_SLOPE * (own - GATE_EVIDENCE))


def scores(evidence: Sequence[float]) -> list[float]:
    """The calibrated score of each of a search's ranked hits, from their ``evidence`` in ranked
    order: ``best`` is the highest of them, and the first is the ranking's first."""
    best = max(evidence, default=0.0)
    return [relevance(own, best, first=place == 0) for place, own in enumerate(evidence)]


def _sigmoid(z: float) -> float:
    return 0.0 if z < -60 else 1.0 / (1.0 + math.exp(-z))


__all__ = ["BEST_OF", "coverage", "covered", "evidence", "finder", "relevance", "scores", "stems"]
