"""The ranking pipeline: candidates from each retrieval space, fused, boosted.

Spaces:
- ``dense``: cosine similarity of MiniLM vectors. Unrestricted searches ask the HNSW index;
  restricted ones whose matching set is small (``search.exact_filter_max``) are scored exactly
  from the catalog's stored vectors, which is both faster and exact. Rows the index may not hold
  yet (stored by another process, or not yet indexed) are always scored exactly.
- ``lexical``: BM25 over the catalog's FTS5 index (porter stemming), query terms OR-ed.

Fusion is weighted reciprocal rank: ``sum_s w_s / (k + rank_s)``, normalised so that a memory
ranked first by every space scores 1. Boosts then multiply that score by at most
``1 + importance_boost`` (importance) and ``1 + session_boost`` (the resumed session).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from remindful.catalog import Catalog, MemoryRow
from remindful.config import SearchSettings
from remindful.filters import SqlFilter

# Words too common to carry meaning in a lexical match; the dense space still sees them.
STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
    ]
)
_WORD = re.compile(r"\w+", re.UNICODE)


def lexical_query(text: str) -> str | None:
    """An FTS5 MATCH expression: the query's distinct non-stopword terms, quoted, OR-ed."""
    terms: list[str] = []
    for word in _WORD.findall(text.lower()):
        if word not in STOPWORDS and word not in terms:
            terms.append(word)
    if not terms:  # a query of stopwords only: use them rather than nothing
        terms = list(dict.fromkeys(_WORD.findall(text.lower())))
    return " OR ".join(f'"{t}"' for t in terms[:64]) or None


@dataclass(slots=True)
class Candidates:
    """Ranked ids per space, best first, with each space's raw score."""

    by_space: dict[str, list[tuple[str, float]]] = field(default_factory=dict)

    def add(self, space: str, ranked: Iterable[tuple[str, float]]) -> None:
        self.by_space[space] = list(ranked)

    def ids(self) -> set[str]:
        return {mid for ranked in self.by_space.values() for mid, _ in ranked}


def top_k_exact(query: np.ndarray, ids: Sequence[str], matrix: np.ndarray, k: int) -> list[tuple[str, float]]:
    """Exact cosine top-k (rows are unit vectors)."""
    scores = matrix @ query
    if len(ids) > k:
        part = np.argpartition(-scores, k)[:k]
        order = part[np.argsort(-scores[part])]
    else:
        order = np.argsort(-scores)
    return [(ids[i], float(scores[i])) for i in order]


def merge_dense(*lists: Sequence[tuple[str, float]], k: int) -> list[tuple[str, float]]:
    """Union of dense candidate lists (max similarity per id), best first, top k."""
    best: dict[str, float] = {}
    for ranked in lists:
        for mid, score in ranked:
            if score > best.get(mid, -2.0):
                best[mid] = score
    return sorted(best.items(), key=lambda item: -item[1])[:k]


def fuse(candidates: Candidates, weights: dict[str, float], rrf_k: int) -> dict[str, float]:
    """Weighted reciprocal-rank fusion, normalised to [0, 1]."""
    total = sum(w for space, w in weights.items() if space in candidates.by_space) or 1.0
    best = total / (rrf_k + 1)
    fused: dict[str, float] = {}
    for space, ranked in candidates.by_space.items():
        weight = weights.get(space, 0.0)
        if weight <= 0:
            continue
        for rank, (mid, _) in enumerate(ranked, start=1):
            fused[mid] = fused.get(mid, 0.0) + weight / (rrf_k + rank)
    return {mid: score / best for mid, score in fused.items()}


def boost(
    fused: dict[str, float], rows: dict[str, MemoryRow], settings: SearchSettings, resumed_session: str | None
) -> dict[str, float]:
    """Importance and resumed-session boosts. Multiplicative and bounded, so a boost reorders
    near-ties but cannot lift an irrelevant memory above a clearly relevant one."""
    out: dict[str, float] = {}
    for mid, score in fused.items():
        row = rows.get(mid)
        if row is None:
            continue
        factor = 1.0 + settings.importance_boost * (min(max(row.importance, 0.0), 1.0) - 0.5) * 2
        if resumed_session is not None and row.session_id == resumed_session:
            factor *= 1.0 + settings.session_boost
        out[mid] = score * factor
    return out


def rank(
    catalog: Catalog,
    query_vector: np.ndarray,
    query_text: str,
    flt: SqlFilter,
    *,
    settings: SearchSettings,
    limit: int,
    dense_from_index: Callable[[int], list[tuple[str, float]]] | None,
    restricted: bool,
    pending_sql: str = "AND indexed = 0",
    resumed_session: str | None = None,
) -> list[tuple[MemoryRow, float, tuple[str, ...]]]:
    """Run the pipeline; returns (row, score, spaces that found it) best first, at most ``limit``.

    ``dense_from_index(k)`` asks the vector index (None when it is unavailable); its results are
    re-checked against ``flt`` here, so an index that over-returns is harmless. ``pending_sql``
    selects the rows the index may lack; they are scored exactly.
    """
    k = max(settings.candidates, limit)
    candidates = Candidates()

    exact = None
    if dense_from_index is None or (restricted and catalog.count(flt) <= settings.exact_filter_max):
        ids, matrix = catalog.filtered_embeddings(flt)
        exact = top_k_exact(query_vector, ids, matrix, k) if matrix is not None else []
    if exact is None:
        assert dense_from_index is not None
        from_index = dense_from_index(k * 2 if restricted else k)
        # Rows the index may lack: never indexed, or written by another process since we opened it.
        ids, matrix = catalog.filtered_embeddings(flt, extra=pending_sql)
        pending = top_k_exact(query_vector, ids, matrix, k) if matrix is not None else []
        exact = merge_dense(from_index, pending, k=k * 2)
    candidates.add("dense", exact)

    match = lexical_query(query_text)
    if match and settings.lexical_weight > 0:
        candidates.add("lexical", catalog.lexical(match, flt, k))

    rows = _hydrate(catalog, candidates.ids(), flt)
    for space, ranked in list(candidates.by_space.items()):
        candidates.by_space[space] = [(mid, s) for mid, s in ranked if mid in rows][:k]
    weights = {"dense": settings.dense_weight, "lexical": settings.lexical_weight}
    scores = boost(fuse(candidates, weights, settings.rrf_k), rows, settings, resumed_session)
    found_by: dict[str, list[str]] = {}
    for space, ranked in candidates.by_space.items():
        for mid, _ in ranked:
            found_by.setdefault(mid, []).append(space)
    ordered = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:limit]
    return [(rows[mid], min(score, 1.0), tuple(found_by.get(mid, ()))) for mid, score in ordered]


def _hydrate(catalog: Catalog, ids: set[str], flt: SqlFilter) -> dict[str, MemoryRow]:
    """Catalog rows for candidate ids that still exist and pass the filter."""
    if not ids:
        return {}
    ordered = sorted(ids)
    marks = ",".join("?" * len(ordered))
    found = catalog.select_rows(SqlFilter(f"id IN ({marks})", tuple(ordered)) & flt, limit=len(ordered), order="rowid")
    return {row.id: row for row in found}
