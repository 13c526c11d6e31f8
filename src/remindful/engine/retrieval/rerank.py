"""The relevance model: how much evidence a candidate memory holds that it answers a query.

The retrieval spaces (:mod:`remindful.engine.retrieval.search`) only find candidates; every candidate is then
ordered by one absolute quantity, its evidence, read from the relation between the query and that
memory, never from ranks or from scores normalised per query (a normalised keyword score makes the
one word a paraphrase happens to share with a distractor look like a perfect match):

``own = cosine + lexical_weight * lexical(memory's text)``

``evidence = own + lexical_context_weight * lexical(memory's session window)
+ context_weight * max(context cosine - cosine, 0)``

- ``cosine``: MiniLM's cosine between the query and the memory. It is the floor of the ranking:
  the other terms only add to it, and only where the query's words say something.
- ``lexical(text)``: the share of the query's terms the text holds, each term weighted by its
  inverse document frequency in the store (:func:`idf`), raised to :data:`COVERAGE_POWER`; and 0
  unless the text holds at least :data:`MIN_SHARED_TERMS` distinct terms of the query (all of them
  when the query has fewer). One shared word is what a paraphrase and an unrelated memory have in
  common by chance ("i enjoy oldies music" / "my favourite music is country music"); two or more
  are what a question and its answer share ("When did Melanie paint a sunrise?" / "Melanie: I
  painted that lake sunrise last year"). Words are compared by their Porter stems, the stemmer
  the lexical spaces' FTS5 tables use ("going" holds "go", "painted" holds "painting").
- the session window: the memory's text, its ``windows.WINDOW`` neighbours on each side in its
  session and its date (:mod:`remindful.engine.windows`): the answer to a question often sits in
  the turn after the one that names its topic. What the window adds to the memory's own words is
  taken as far as it is more than chance: multiplied by the odds that as many memories drawn from
  the store at random would not hold every term the window holds (:meth:`QueryTerms.chance`).
  Four neighbours hold a word that half the store holds almost surely: in a project whose every
  log says "deploy", "The build passed." no longer rides on a neighbour's "deploy" into the answer
  to "how do I deploy?".
- ``context cosine``: the cosine of the memory's vector averaged with its neighbours' (the
  ``context`` space; off by default: on the dev sets it added nothing the window does not).

``own`` is what the memory itself holds; :mod:`remindful.engine.retrieval.calibration` turns ``evidence``
into the score and keeps a hit whose ``own`` is weak below every floor, so a memory that only sits
next to a match (a same-session neighbour) never passes as relevant.

The weights are settings (``search.lexical_weight``, ``search.lexical_context_weight``,
``search.context_weight``), chosen on the two dev sets together by ``bench/fit_ranking.py``
(LoCoMo conversations, where questions share words with their evidence, and PersonaChat persona
facts queried by paraphrases that avoid them), which prints them held out by data set and by
conversation or persona. :data:`COVERAGE_POWER` and :data:`MIN_SHARED_TERMS` are set by hand.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import snowballstemmer

#: The share of the query's term weight a text holds is raised to this power: half the query's
#: weight is worth 0.35 of all of it, so a partial match adds little and a full one much.
COVERAGE_POWER = 1.5
#: Distinct query terms a text must hold for its words to count (fewer when the query has fewer).
MIN_SHARED_TERMS = 2

#: A number, or an array of them (a batch of candidates).
Numbers = TypeVar("Numbers", float, np.ndarray)

_WORD = re.compile(r"\w+", re.UNICODE)
_STEMMER = snowballstemmer.stemmer("porter")
_STEM_LOCK = threading.Lock()


def idf(doc_freq: int, size: int) -> float:
    """BM25's inverse document frequency of a term found in ``doc_freq`` of ``size`` memories (> 0)."""
    size = max(size, doc_freq, 1)
    return math.log(1.0 + (size - doc_freq + 0.5) / (doc_freq + 0.5))


@dataclass(frozen=True, slots=True)
class QueryTerms:
    """The query's lexical terms as the model compares them: their stems, weights, what every word
    with each stem begins with (:func:`_start`), and the share of the store's memories that hold
    each (``spread``; 0 where not known)."""

    stems: tuple[str, ...]
    weights: tuple[float, ...]
    starts: tuple[str, ...]
    spread: tuple[float, ...] = ()

    @classmethod
    def of(
        cls, terms: Sequence[str], weights: Mapping[str, float] | None = None, spread: Mapping[str, float] | None = None
    ) -> QueryTerms:
        """``terms`` (lowercased words, such as :func:`remindful.engine.retrieval.search.lexical_terms`), each
        weighted by ``weights`` (by term; 1 where missing), held by the share ``spread`` of the
        store's memories (by term; 0 where missing). Terms sharing a stem count once, at the highest
        of their weights and shares."""
        by_stem: dict[str, float] = {}
        spread_by_stem: dict[str, float] = {}
        for term in terms:
            stem = stem_of(term)
            weight = (weights or {}).get(term, 1.0)
            by_stem[stem] = max(by_stem.get(stem, 0.0), weight)
            spread_by_stem[stem] = max(spread_by_stem.get(stem, 0.0), (spread or {}).get(term, 0.0))
        return cls(
            tuple(by_stem),
            tuple(by_stem.values()),
            tuple(_start(stem) for stem in by_stem),
            tuple(min(1.0, max(0.0, spread_by_stem[stem])) for stem in by_stem),
        )

    def held(self, text: str, at_least: int = 0, known: Collection[int] = ()) -> list[int]:
        """The positions of the terms ``text`` holds; none once fewer than ``at_least`` could be
        (a word's beginning is looked for first: most texts hold few of a query's words, and
        stemming the words that begin alike is the cost). ``known``: positions of terms ``text``
        is known to hold (those of a text it contains), not looked for again."""
        lowered = text.lower()
        present = [i for i, start in enumerate(self.starts) if i in known or start in lowered]
        if len(present) < at_least:
            return []
        return [i for i in present if i in known or _holds(lowered, self.stems[i], self.starts[i])]

    @property
    def needed(self) -> int:
        """The terms a text must hold for its words to count (:data:`MIN_SHARED_TERMS`, fewer when
        the query has fewer)."""
        return min(MIN_SHARED_TERMS, len(self.stems))

    def match(self, text: str) -> tuple[int, float]:
        """How many of the terms ``text`` holds, and their share of the terms' weight."""
        held = self.held(text)
        return len(held), self._share(held)

    def lexical(self, text: str) -> float:
        """The lexical evidence of ``text`` (see the module docstring), in [0, 1]."""
        return self.lexical_of(self.held(text, self.needed)) if self.stems else 0.0

    def lexical_of(self, held: Sequence[int]) -> float:
        """The lexical evidence of a text holding the terms at the positions ``held``."""
        return lexical(len(held), self._share(held), len(self.stems))

    def window_lexical_of(self, held: Sequence[int], own: Sequence[int], neighbours: int) -> float:
        """The lexical evidence of a session window holding the terms at the positions ``held``,
        its memory holding those at ``own`` (whose evidence is the memory's own, :meth:`lexical_of`)
        among ``neighbours`` other memories: what the window adds to the memory's own is taken as
        far as it is more than chance, the chance that as many memories drawn at random would hold
        every term the window holds (:meth:`chance`)."""
        mine = self.lexical_of(own)
        found = self.lexical_of(held)
        if found <= mine:
            return mine
        return mine + (found - mine) * (1.0 - self.chance(held, neighbours))

    def chance(self, held: Sequence[int], parts: int = 1) -> float:
        """How likely ``parts`` memories drawn from the store at random would hold the terms at the
        positions ``held`` between them (each term independently; 0 where the store's counts are
        not known): four neighbours hold a word that half the store holds almost surely (0.94), and
        then their holding it says little of the memory among them. The counts are the search's
        (:meth:`remindful.engine.lexical.LexicalSearch.doc_freqs`, counted up to
        :data:`remindful.engine.retrieval.search.SPREAD_COUNT` rows, over the largest rowid), so
        past that a common word's share is a lower bound and less is taken off."""
        if not self.spread:
            return 0.0
        odds = 1.0
        for i in held:
            odds *= 1.0 - (1.0 - self.spread[i]) ** parts
        return odds

    def _share(self, held: Sequence[int]) -> float:
        total = sum(self.weights)
        return sum(self.weights[i] for i in held) / total if total > 0 else 0.0


def lexical(count: int, share: float, terms: int) -> float:
    """The lexical evidence of a text holding ``count`` of a query's ``terms`` terms, ``share`` of
    their weight: ``share ** COVERAGE_POWER``, or 0 below ``min(MIN_SHARED_TERMS, terms)`` terms."""
    if terms == 0 or count < min(MIN_SHARED_TERMS, terms):
        return 0.0
    return share**COVERAGE_POWER


def evidence(
    cosine: Numbers,
    own_lexical: Numbers,
    window_lexical: Numbers,
    context_cosine: Numbers | None,
    *,
    lexical_weight: float,
    lexical_context_weight: float,
    context_weight: float,
    dense_weight: float = 1.0,
) -> tuple[Numbers, Numbers]:
    """``(own, evidence)`` of one candidate (see the module docstring), or of each of a batch
    given as arrays (``context_cosine`` then holds the cosine itself where a candidate has none)."""
    own = dense_weight * cosine + lexical_weight * own_lexical
    total = own + lexical_context_weight * window_lexical
    if context_cosine is not None and context_weight > 0:
        total = total + context_weight * np.maximum(context_cosine - cosine, 0.0)
    return own, total


# -- comparing words ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=65536)
def stem_of(word: str) -> str:
    """The Porter stem of a lowercased word (what FTS5's ``porter`` tokenizer indexes)."""
    with _STEM_LOCK:  # a stemmer object keeps state between calls
        stem: str = _STEMMER.stemWord(word)
    return stem


def _start(stem: str) -> str:
    """What every word with this Porter stem begins with: a Porter stem is the word's beginning but
    for its last few letters ("happy" -> "happi", "making" -> "make", "sensibility" -> "sensibl"),
    so only the words of a text that begin so need stemming to tell whether it holds the stem."""
    base = stem[:-1] if len(stem) > 1 and stem[-1] in "ei" else stem
    return base[: max(3, len(base) - 2)]


def _holds(text: str, stem: str, start: str) -> bool:
    """Whether a word of ``text`` that begins with ``start`` has the stem ``stem``."""
    at = text.find(start)
    while at >= 0:
        if at == 0 or not _word_char(text[at - 1]):
            word = _WORD.match(text, at)
            if word is not None and stem_of(word.group(0)) == stem:
                return True
        at = text.find(start, at + 1)
    return False


def _word_char(char: str) -> bool:
    """What ``\\w`` matches (in str patterns): letters, digits and numerals of any script, and ``_``."""
    return char.isalnum() or char == "_"


__all__ = [
    "COVERAGE_POWER",
    "MIN_SHARED_TERMS",
    "QueryTerms",
    "evidence",
    "idf",
    "lexical",
    "stem_of",
]
