"""Diversity and supersession over ranked candidates.

:func:`collapse` folds near-duplicates (cosine of their MiniLM vectors at least
``search.collapse_similarity``) into one group, in ranked order: a candidate joins the group of
the member it is most similar to if that one is a near-duplicate, else it starts a new group
(single linkage: thirty log lines that differ in a number each resemble their neighbours more
than the first line). A group is shown once, by the member that best matches the query (its
``match``: the evidence without the boosts, so "zebra4x3 turbine" shows note 3 among 900 notes
alike, not the note the boosts put first), or, among members matching as well as it within
:data:`COPY_TOLERANCE`, by the newest if that one was stored at least :data:`SUPERSEDE_AFTER`
later (the current copy of a fact repeated over time; copies stored together keep the ranking's
choice, boosts included). It lists the ids of the others (``SearchHit.similar_ids``; their count
is ``SearchHit.similar``: "+29 similar"). So thirty log lines saying the same thing take one
place in the top k and in the context budget, and the distinct memories behind them move up.

:func:`supersede` then looks for pairs of groups about the same subject with different content:
cosine at least ``search.supersede_similarity``, word sets overlapping at least
:data:`SUBJECT_JACCARD` ("The user moved to Berlin" / "The user moved to Lisbon") and stored at
least :data:`SUPERSEDE_AFTER` apart. The newer one
is moved just above the older, and the older is marked superseded by it
(``SearchHit.superseded_by``).

Both are pure functions of the candidates; the caller reads the vectors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

#: Word-set overlap (Jaccard) two memories need to be about the same subject.
SUBJECT_JACCARD = 0.5
#: Seconds a newer version must follow an older one to supersede it: memories stored together are
#: alternatives (or a list), not an update, and keep the order the ranking gave them.
SUPERSEDE_AFTER = 3600.0
#: Members of a group whose match is this close to the best one's match as well (copies of one text).
COPY_TOLERANCE = 0.02

_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(slots=True)
class Candidate:
    """One ranked candidate: what collapse and supersession read. ``match``: how well it matches
    the query, without the boosts (its evidence; the ranking's order where not given)."""

    id: str
    content: str
    created_at: float
    match: float = 0.0


@dataclass(slots=True)
class Group:
    """Near-duplicates shown as one hit: ``members`` in ranked order (the first is the leader),
    ``shown`` the one chosen to stand for them (see the module docstring)."""

    members: list[Candidate]
    shown: Candidate = field(init=False)
    superseded_by: str | None = None
    words: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        self.choose()

    @property
    def leader(self) -> Candidate:
        """The best-ranked member."""
        return self.members[0]

    @property
    def ids(self) -> list[str]:
        """Every member's id, in ranked order."""
        return [m.id for m in self.members]

    @property
    def similar(self) -> int:
        """How many other memories this hit stands for."""
        return len(self.members) - 1

    @property
    def similar_ids(self) -> list[str]:
        """The ids of the other memories this hit stands for, in ranked order."""
        return [m.id for m in self.members if m.id != self.shown.id]

    def choose(self) -> None:
        """Choose ``shown``: the best match, or among the members matching as well as it (within
        :data:`COPY_TOLERANCE`) the first ranked, or the newest if it was stored at least
        :data:`SUPERSEDE_AFTER` after that one."""
        if len(self.members) == 1:
            self.shown = self.members[0]
            return
        best = max(m.match for m in self.members)
        alike = [m for m in self.members if m.match >= best - COPY_TOLERANCE]
        first, newest = alike[0], max(alike, key=lambda m: m.created_at)
        self.shown = newest if newest.created_at >= first.created_at + SUPERSEDE_AFTER else first


def words_of(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower()))


def collapse(
    ranked: Sequence[Candidate], vectors: Mapping[str, np.ndarray], similarity: float, *, stop_at: int | None = None
) -> tuple[list[Group], int]:
    """Groups of near-duplicates in ranked order; a candidate without a vector leads its own
    group. Stops once ``stop_at`` groups exist and the next candidate would start another;
    returns the groups and how many candidates were consumed."""
    # The candidates with a vector get rows in ranked order, and every candidate before the current
    # one was consumed: its earlier rows are the ones to compare with.
    rank_of = {c.id: i for i, c in enumerate(ranked)}
    rows = {c.id: i for i, c in enumerate(c for c in ranked if c.id in vectors)} if similarity <= 1.0 else {}
    stack = [vectors[c.id] for c in ranked if c.id in rows]
    earlier = _near_earlier(stacked(stack), similarity) if stack else {}
    group_of: list[int] = []  # for each row consumed, the index of its group
    groups: list[Group] = []
    consumed = merged = 0
    for cand in ranked:
        row = rows.get(cand.id)
        near = sorted({group_of[i] for i in earlier.get(row, ())}) if row is not None else []
        if not near and stop_at is not None and len(groups) - merged >= stop_at:
            break
        consumed += 1
        if not near:
            home = len(groups)
            groups.append(Group([cand]))
        else:
            home = near[0]
            members = groups[home].members
            members.append(cand)
            for other in near[1:]:  # the candidate links groups that were apart: they become one
                members += groups[other].members
                groups[other].members = []
                group_of = [home if g == other else g for g in group_of]
                merged += 1
        if row is not None:
            group_of.append(home)
    kept = [g for g in groups if g.members]
    for group in kept:
        if len(group.members) > 1:  # a group of one was chosen when it was made
            group.members.sort(key=lambda m: rank_of[m.id])
            group.choose()
    return kept, consumed


def stacked(vectors: Sequence[np.ndarray]) -> np.ndarray:
    """Equal-length vectors as the rows of one matrix (``np.stack`` costs several times more)."""
    return np.concatenate(vectors).reshape(len(vectors), -1)


#: Matrix products of at most this many multiply-adds: OpenBLAS shares larger ones among its
#: threads, and on a busy machine waiting for the second thread costs milliseconds, far more than
#: the product (its threshold is 65536 * 4).
_ONE_THREAD_PRODUCT = 65536 * 4


def _near_earlier(matrix: np.ndarray, similarity: float) -> dict[int, list[int]]:
    """For each row of ``matrix`` (unit vectors), the earlier rows at cosine ``similarity`` or more.
    The products are tiles on and below the diagonal, square and small enough to run on one
    thread (26 x 26 at 384 dimensions): a strip of rows as wide would be one row at 600
    candidates, a matrix-vector product a row, 1.5 times slower in all."""
    n, dim = matrix.shape
    side = max(1, math.isqrt(_ONE_THREAD_PRODUCT // dim))
    near = np.zeros((n, n), dtype=bool)  # filled on and below the diagonal: all tril reads
    for start in range(0, n, side):
        stop = start + side
        rows = matrix[start:stop]
        for column in range(0, min(stop, n), side):
            near[start:stop, column : column + side] = rows @ matrix[column : column + side].T >= similarity
    # Only the pairs below the diagonal (earlier columns), as Python ints in one conversion each.
    rows_at, columns = np.nonzero(np.tril(near, k=-1))
    earlier: dict[int, list[int]] = {}
    for row, column in zip(rows_at.tolist(), columns.tolist(), strict=True):
        earlier.setdefault(row, []).append(column)
    return earlier


def supersede(groups: list[Group], vectors: Mapping[str, np.ndarray], similarity: float) -> list[Group]:
    """``groups`` with each newer version of a subject moved above its older one, which is marked
    superseded (see the module docstring). One pass, in ranked order."""
    for group in groups:
        group.words = frozenset()
    order = list(groups)
    i = 0
    while i < len(order):
        older = order[i]
        vector = vectors.get(older.shown.id)
        if vector is not None and older.superseded_by is None:
            for j in range(i + 1, len(order)):
                newer = order[j]
                other = vectors.get(newer.shown.id)
                # Cheapest test first: most pairs differ in time or meaning, and words are read only then.
                if (
                    other is not None
                    and newer.shown.created_at > older.shown.created_at + SUPERSEDE_AFTER
                    and float(vector @ other) >= similarity
                    and _same_subject(newer, older)
                ):
                    older.superseded_by = newer.shown.id
                    order.insert(i, order.pop(j))
                    i += 1  # the older one now sits at i + 1; check it no further
                    break
        i += 1
    return order


def _same_subject(a: Group, b: Group) -> bool:
    """Mostly the same words, not all of them (see the module docstring); each group's words are
    read once."""
    for group in (a, b):
        if not group.words:
            group.words = words_of(group.shown.content)
    return a.words != b.words and _jaccard(a.words, b.words) >= SUBJECT_JACCARD


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


__all__ = ["COPY_TOLERANCE", "Candidate", "Group", "collapse", "stacked", "supersede"]
