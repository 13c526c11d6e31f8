"""The ranking pipeline: candidates from each retrieval space, fused, boosted.

Spaces (each weighted in ``search.*_weight``; weight 0 turns a space off):
- ``dense``: cosine similarity of the memory's MiniLM vector. Unrestricted searches ask the HNSW
  index; restricted ones whose matching set is small (``search.exact_filter_max``) are scored
  exactly from the catalog's stored vectors. Rows the index may not hold yet (stored by another
  process, or not yet indexed) are always scored exactly.
- ``context``: the memory's vector plus ``context_neighbour_weight`` times each adjacent memory's
  vector in its session, normalised. Computed at query time around the first
  ``context_candidates`` dense candidates (10: on the LoCoMo dev split 20 found no more and read
  twice the neighbourhoods, the largest cost of a search after the model and the index), so it
  costs nothing at ingest.
- ``lexical``: BM25 over the memory's text (FTS5, porter stemming), query terms OR-ed.
- ``lexical_context``: BM25 over the memory's session window: its text, its neighbours' and its
  date (see :mod:`remindful.engine.windows`).

Fusion (``search.fusion``): ``score`` sums each space's scores min-max normalised over its
candidates, weighted, divided by the total weight, so a memory that tops every space scores 1;
``rrf`` is weighted reciprocal rank, normalised the same way. Boosts then multiply the fused score
by at most ``1 + importance_boost`` (importance), ``1 + session_boost`` (the resumed session) and
``1 + recency_boost`` (the recency prior: ``recency_boost * 0.5 ** (age / half-life)``, with the
half-life ``search.recency_half_life_days``, 0 turning it off). That orders the candidates, and
the first of them are re-ordered by a fitted linear model of their cosine, context BM25, term and
name overlap (:mod:`remindful.engine.retrieval.rerank`; ``search.rerank``), its score multiplied by the
same boosts.

Then near-duplicates collapse and newer versions of a subject move above older ones
(:mod:`remindful.engine.retrieval.diversity`), over a pool that grows until ``limit`` distinct hits are
found (at least ``BEST_OF``, and as many again in reserve); and each hit gets its calibrated score
(:mod:`remindful.engine.retrieval.calibration`), an absolute relevance in [0, 1] comparable across queries.
Hits below ``min_score`` are dropped and the reserve fills their places: the order is kept, the
score says how much to trust each hit.
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np

from remindful.config import SearchSettings
from remindful.engine.catalog import Catalog, MemoryRow
from remindful.engine.retrieval import calibration, diversity, rerank
from remindful.engine.sqlfilter import SqlFilter

# Words too common to carry meaning in a lexical match; the dense spaces still see them.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of
    off on once only or other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up very was we were what
    when where which while who whom why will with would you your yours yourself yourselves""".split()  # noqa: SIM905
)
_WORD = re.compile(r"\w+", re.UNICODE)
SPACES = ("dense", "context", "lexical", "lexical_context")
LEXICAL_TABLES = {"lexical": "memories_fts", "lexical_context": "context_fts"}
#: Restricted searches: sets up to this size are scored exactly (a few milliseconds), and larger
#: ones (up to ``search.exact_filter_max``) when they are less than INDEX_SHARE of the searched types.
EXACT_ALWAYS = 1000
INDEX_SHARE = 0.2
#: A restriction whose size is known beforehand (a scope: its count is kept): the index is asked for
#: this many times the candidates that would leave k passing at its share of the memories, up to
#: INDEX_FETCH_MAX (asking an HNSW index for 1,000 neighbours costs little more than for 50, for
#: 2,000 three times as much at 100,000); a smaller share is scored exactly.
OVERFETCH_MARGIN = 2.5
INDEX_FETCH_MAX = 2000


def lexical_terms(text: str) -> list[str]:
    """The query's distinct terms for BM25: lowercased words, without stopwords and single letters
    (unless nothing else is left), at most 64."""
    words = list(dict.fromkeys(_WORD.findall(text.lower())))
    terms = [w for w in words if w not in STOPWORDS and (len(w) > 1 or w.isdigit())]
    return (terms or words)[:64]


@dataclass(slots=True)
class Candidates:
    """Scored ids per space, best first."""

    by_space: dict[str, list[tuple[str, float]]] = field(default_factory=dict)

    def add(self, space: str, ranked: Iterable[tuple[str, float]]) -> None:
        self.by_space[space] = list(ranked)


def weights_of(settings: SearchSettings) -> dict[str, float]:
    return {
        "dense": settings.dense_weight,
        "context": settings.context_weight,
        "lexical": settings.lexical_weight,
        "lexical_context": settings.lexical_context_weight,
    }


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


def context_scores(
    catalog: Catalog, query: np.ndarray, dense: Sequence[tuple[str, float]], neighbour_weight: float
) -> list[tuple[str, float]]:
    """The context space around the dense candidates: for each candidate and its adjacent memories,
    cos(query, v + w * (v_prev + v_next)), best first."""
    if not dense:
        return []
    rows: dict[str, int] = {}  # memory id -> row of the matrix below; row 0 is "no neighbour"
    blobs: list[bytes] = [bytes(4 * len(query))]  # float32 zeros
    by_pos: dict[tuple[str, int], int] = {}  # (candidate, offset in its session) -> row
    for cand, nid, offset, blob in catalog.neighbourhoods([mid for mid, _ in dense], radius=2):
        row = rows.get(nid)
        if row is None:
            row = rows[nid] = len(blobs)
            blobs.append(blob)
        by_pos[(cand, offset)] = row
    ids: list[str] = []
    own: list[int] = []
    sides: list[int] = []
    names = {row: nid for nid, row in rows.items()}
    seen: set[int] = set()
    for (cand, offset), row in by_pos.items():
        if abs(offset) > 1 or row in seen:
            continue
        seen.add(row)
        ids.append(names[row])
        own.append(row)
        sides += [by_pos.get((cand, offset - 1), 0), by_pos.get((cand, offset + 1), 0)]
    scored: dict[str, float] = {}
    if ids:
        matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1)
        pairs = np.asarray(sides).reshape(-1, 2)
        summed = matrix[own] + neighbour_weight * (matrix[pairs[:, 0]] + matrix[pairs[:, 1]])
        norms = np.linalg.norm(summed, axis=1)
        sims = (summed @ query) / np.where(norms > 0, norms, 1.0)
        scored = dict(zip(ids, sims.tolist(), strict=True))
    # Memories without a session position keep their plain similarity.
    for mid, score in dense:
        scored.setdefault(mid, score)
    return sorted(scored.items(), key=lambda item: -item[1])


def fuse(candidates: Candidates, weights: dict[str, float], *, method: str, rrf_k: int) -> dict[str, float]:
    """Weighted fusion normalised to [0, 1] (see the module docstring)."""
    total = sum(w for space, w in weights.items() if w > 0 and candidates.by_space.get(space)) or 1.0
    fused: dict[str, float] = {}
    for space, ranked in candidates.by_space.items():
        weight = weights.get(space, 0.0)
        if weight <= 0 or not ranked:
            continue
        if method == "rrf":
            for rank, (mid, _) in enumerate(ranked, start=1):
                fused[mid] = fused.get(mid, 0.0) + weight * (rrf_k + 1) / (rrf_k + rank)
            continue
        values = [score for _, score in ranked]
        high, low = max(values), min(values)
        spread = high - low
        for mid, score in ranked:
            fused[mid] = fused.get(mid, 0.0) + weight * ((score - low) / spread if spread > 1e-9 else 1.0)
    return {mid: score / total for mid, score in fused.items()}


def boost(row: MemoryRow, settings: SearchSettings, resumed_session: str | None, now: float | None = None) -> float:
    """The factor a memory's fused score is multiplied by: importance, the resumed session and
    the recency prior (``now``: the epoch ages are measured from, default the current time).
    Multiplicative and bounded, so a boost reorders near-ties but cannot lift an irrelevant memory
    above a clearly relevant one."""
    factor = 1.0 + settings.importance_boost * (min(max(row.importance, 0.0), 1.0) - 0.5) * 2
    if resumed_session is not None and row.session_id == resumed_session:
        factor *= 1.0 + settings.session_boost
    if settings.recency_half_life_days > 0 and settings.recency_boost > 0:
        age_days = max((time.time() if now is None else now) - row.created_at, 0.0) / 86400
        factor *= 1.0 + settings.recency_boost * 0.5 ** (age_days / settings.recency_half_life_days)
    return factor


def boost_ceiling(settings: SearchSettings, resumed_session: str | None) -> float:
    """The largest factor :func:`boost` can give."""
    recency = settings.recency_boost if settings.recency_half_life_days > 0 else 0.0
    session = settings.session_boost if resumed_session else 0.0
    return (1.0 + settings.importance_boost) * (1.0 + session) * (1.0 + recency)


def by_fused(fused: Mapping[str, float]) -> list[tuple[str, float]]:
    """``fused`` best first, ties by id: the order :func:`best_eligible` reads candidates in."""
    # Two sorts on C-level keys: by id, then (stable) by score descending.
    return sorted(sorted(fused.items()), key=itemgetter(1), reverse=True)


def best_eligible(
    catalog: Catalog,
    fused: Mapping[str, float],
    flt: SqlFilter,
    settings: SearchSettings,
    resumed_session: str | None,
    limit: int,
    *,
    chunk: int | None = None,
    read: dict[str, MemoryRow | None] | None = None,
    vectors: dict[str, np.ndarray] | None = None,
    order: Sequence[tuple[str, float]] | None = None,
) -> list[tuple[MemoryRow, float]]:
    """The ``limit`` candidates with the best boosted scores among those that still exist and pass
    ``flt``, best first, with their rows.

    No boost multiplies a score by more than ``ceiling``, so rows are read in fused order only
    until the next candidate could not reach the ``limit``-th boosted score: first ``chunk``
    (default ``limit + limit // 4``, at least 20) rows, then, once ``limit`` rows passed, in one
    read every further candidate that still could (another ``chunk`` while fewer passed): one or
    two reads as a rule, whatever the number of candidates.
    ``read``: the rows of earlier calls with the same filter, by id (None: the row did not pass),
    which are not read again; the rows read are added to it. ``vectors``: the embeddings of the
    rows read are added to it. ``order``: :func:`by_fused` of ``fused``, if the caller has it.
    """
    order = by_fused(fused) if order is None else order
    ceiling = boost_ceiling(settings, resumed_session)
    now = time.time()
    kept: list[tuple[MemoryRow, float]] = []
    chunk = chunk or max(limit + limit // 4, 20)
    start, size = 0, chunk
    known = {} if read is None else read
    while start < len(order):
        batch = order[start : start + size]
        unread = [mid for mid, _ in batch if mid not in known]
        if unread:
            found = catalog.rows_passing(unread, flt, vectors=vectors)
            known.update((mid, found.get(mid)) for mid in unread)
        rows = {mid: row for mid, _ in batch if (row := known[mid]) is not None}
        kept += [
            (rows[mid], score * boost(rows[mid], settings, resumed_session, now)) for mid, score in batch if mid in rows
        ]
        kept.sort(key=lambda item: (-item[1], item[0].id))
        del kept[limit:]
        start += len(batch)
        if len(kept) < limit:
            size = chunk
            continue
        end = start
        while end < len(order) and order[end][1] * ceiling >= kept[-1][1]:
            end += 1
        if end == start:
            break
        size = end - start
    return kept


@dataclass(slots=True)
class Ranked:
    """One result of :func:`rank`: the memory shown, its calibrated score, the spaces that found
    it, how many near-duplicates it stands for and the newer memory that supersedes it, if any."""

    row: MemoryRow
    score: float
    spaces: tuple[str, ...]
    similar: int = 0
    superseded_by: str | None = None


def rank(
    catalog: Catalog,
    embed_query: Callable[[], np.ndarray],
    query_text: str,
    flt: SqlFilter,
    *,
    settings: SearchSettings,
    limit: int,
    dense_from_index: Callable[[np.ndarray, int], list[tuple[str, float]]] | None,
    restricted: bool,
    typed: bool = False,
    searched: int | None = None,
    pending_after: int | None = None,
    resumed_session: str | None,
    min_score: float,
    diverse: bool,
    passing: int | None = None,
) -> list[Ranked]:
    """Run the pipeline; returns at most ``limit`` hits best first, none scoring below
    ``min_score``. ``diverse``: collapse near-duplicates and put newer versions first (callers
    that count repeats, such as failure warnings, turn it off). ``resumed_session``: the session
    whose memories this search ranks higher (None: none).

    One worker thread runs the lexical queries on its own connection while this thread calls
    ``embed_query()`` (which should leave a core free for them) and asks the vector index.
    ``dense_from_index(vector, k)`` asks the vector index, unfiltered (None when it is
    unavailable); its results are checked against ``flt`` here. ``restricted`` says that ``flt``
    narrows what the vector index is asked (anything but types and expiry); ``typed`` that it
    narrows the searched types, which the lexical tables mix but ``dense_from_index`` asks only
    for; ``searched`` is how many memories those types hold (None: not known). Rows the index may
    lack (not marked indexed, or above rowid ``pending_after``) are scored exactly. ``passing``:
    at most how many rows pass ``flt``, when the caller knows it without reading them (a scope's
    count): the choice between exact scoring and the index is made from it, no row read first.
    """
    k = max(settings.candidates, limit)
    weights = weights_of(settings)
    candidates = Candidates()
    terms = lexical_terms(query_text)
    # One task runs both lexical queries, one after the other, from the start: the query is
    # embedded meanwhile on the other cores (embed_query leaves one), then the vector index is asked.
    tables = {space: table for space, table in LEXICAL_TABLES.items() if terms and weights[space] > 0}
    lexical = _pool().submit(_lexical, catalog, terms, flt, k, tables, restricted or typed) if tables else None
    # The vector is needed for the calibrated score even when both dense spaces are off.
    vector = embed_query()

    if weights["dense"] > 0 or weights["context"] > 0:
        dense = _dense(
            catalog, vector, flt, k, dense_from_index, restricted, searched, pending_after, settings, passing
        )[:k]
        if weights["dense"] > 0:
            candidates.add("dense", dense)
        if weights["context"] > 0:
            around = dense[: settings.context_candidates]
            candidates.add("context", context_scores(catalog, vector, around, settings.context_neighbour_weight))
    for space, ranked in (lexical.result() if lexical is not None else {}).items():
        candidates.add(space, ranked)

    # Candidates are checked against the filter (and for still existing) only among the best
    # fused ones; lexical candidates were checked in SQL, dense ones in _dense when restricted.
    fused = fuse(candidates, weights, method=settings.fusion, rrf_k=settings.rrf_k)
    wanted = max(limit, calibration.BEST_OF)
    covered: dict[str, float] = {}  # term coverage by memory id, computed once per search
    names = rerank.entities(query_text, STOPWORDS) if settings.rerank else []
    find = calibration.finder([*terms, *names])
    reorder = (
        Reorder(vector, terms, names, fused, candidates.by_space.get("lexical_context"), covered, find)
        if settings.rerank
        else None
    )
    groups, vectors, rows = _distinct(catalog, fused, flt, settings, resumed_session, wanted, diverse, reorder)
    known = dict(candidates.by_space.get("context", ()))
    scores = calibration.scores(_evidence(vector, terms, groups, vectors, known, covered, find))
    kept = [(g, score) for g, score in zip(groups, scores, strict=True) if score >= min_score][:limit]
    found_in = {space: {mid for mid, _ in ranked} for space, ranked in candidates.by_space.items()}
    return [
        Ranked(
            rows[g.shown.id],
            score,
            tuple(space for space, ids in found_in.items() if g.shown.id in ids),
            g.similar,
            g.superseded_by,
        )
        for g, score in kept
    ]


@dataclass(slots=True)
class Reorder:
    """The re-ranking of the first fused candidates (:mod:`remindful.engine.retrieval.rerank`) for one query.
    The model reads the fused score before the boosts, and its score is multiplied by the same
    boost factor, so importance, the resumed session and recency reorder near-ties as before."""

    vector: np.ndarray
    terms: Sequence[str]
    names: Sequence[str]
    fused: Mapping[str, float]
    lexical_context: Sequence[tuple[str, float]] | None
    covered: dict[str, float]
    find: Callable[[str], frozenset[str]]  # a calibration.finder of the terms and the names
    named: dict[str, float] = field(default_factory=dict)
    bm25: dict[str, float] = field(init=False)
    top: float = field(init=False)

    def __post_init__(self) -> None:
        self.bm25 = dict(self.lexical_context or ())
        self.top = max(self.bm25.values(), default=0.0)

    def __call__(
        self, best: list[tuple[MemoryRow, float]], vectors: Mapping[str, np.ndarray]
    ) -> list[tuple[MemoryRow, float]]:
        head, tail = best[: rerank.DEPTH], best[rerank.DEPTH :]
        features = self.features(head, vectors)
        scored = []
        for position, ((row, boosted), model, (fused, *_)) in enumerate(
            zip(head, rerank.scores(features), features, strict=True)
        ):
            scored.append((-model * (boosted / fused if fused > 0 else 1.0), position, row, boosted))
        scored.sort(key=lambda item: item[:2])
        return [(row, boosted) for _, _, row, boosted in scored] + tail

    def features(
        self, head: Sequence[tuple[MemoryRow, float]], vectors: Mapping[str, np.ndarray]
    ) -> list[tuple[float, ...]]:
        """Each candidate's :data:`remindful.engine.retrieval.rerank.FEATURES`, in order."""
        if not head:
            return []
        bm25, top = self.bm25, self.top
        zero = np.zeros_like(self.vector)
        cosines = (diversity.stacked([vectors.get(row.id, zero) for row, _ in head]) @ self.vector).tolist()
        result: list[tuple[float, ...]] = []
        for (row, _), cosine in zip(head, cosines, strict=True):
            if row.id not in self.named:  # a larger pool re-reads the same first candidates
                found = self.find(row.content)
                self.covered[row.id] = calibration.covered(self.terms, found)
                self.named[row.id] = calibration.covered(self.names, found)
            lexical = bm25.get(row.id, 0.0) / top if top > 0 else 0.0
            result.append((self.fused.get(row.id, 0.0), cosine, lexical, self.covered[row.id], self.named[row.id]))
        return result


def _distinct(
    catalog: Catalog,
    fused: Mapping[str, float],
    flt: SqlFilter,
    settings: SearchSettings,
    resumed_session: str | None,
    wanted: int,
    diverse: bool = True,
    reorder: Callable[[list[tuple[MemoryRow, float]], Mapping[str, np.ndarray]], list[tuple[MemoryRow, float]]]
    | None = None,
) -> tuple[list[diversity.Group], dict[str, np.ndarray], dict[str, MemoryRow]]:
    """Up to twice ``wanted`` distinct hits (near-duplicates collapsed, newer versions first), at
    least ``wanted`` where the candidates allow, with the rows and their vectors (read together):
    the hits past ``wanted`` fill the places of those the relevance floor drops. The pool of
    boosted candidates, ``reorder``-ed (the re-ranking) before they are grouped, starts at twice
    ``wanted`` and grows (at least doubles) while duplicates leave fewer than ``wanted`` groups and
    more candidates remain; a larger pool reads only the rows it adds.

    The grouping stops at twice ``wanted`` groups, and what it gives depends only on the candidates
    it took: so a pool is ranked a part at a time (the part doubling from the last pool's size),
    and a part the grouping stopped within gives what the whole pool would, without reading the
    rows of the rest."""
    pool = size = max(2 * wanted, 20)
    vectors: dict[str, np.ndarray] = {}
    rows_read: dict[str, MemoryRow | None] = {}
    order = by_fused(fused)
    similarity = settings.collapse_similarity if diverse else float("inf")
    while True:
        best = best_eligible(
            catalog, fused, flt, settings, resumed_session, size, read=rows_read, vectors=vectors, order=order
        )
        rows = {row.id: row for row, _ in best}
        if reorder is not None:
            best = reorder(best, vectors)
        ranked = [diversity.Candidate(row.id, row.content, row.created_at) for row, _ in best]
        groups, consumed = diversity.collapse(ranked, vectors, similarity, stop_at=2 * wanted)
        if size < pool and consumed == len(ranked) == size:  # the grouping may take more of the pool
            size = min(pool, 2 * size)
            continue
        if len(groups) >= wanted or len(best) < size or pool >= len(fused):
            break
        # At the rate these candidates gave distinct hits, how many would give ``wanted``: at least twice as many.
        grown = pool * max(2, -(-wanted // max(len(groups), 1)))
        size, pool = min(grown, 2 * pool), grown
    if diverse:
        groups = diversity.supersede(groups, vectors, settings.supersede_similarity)
    return groups, vectors, rows


def _evidence(
    vector: np.ndarray,
    terms: Sequence[str],
    groups: Sequence[diversity.Group],
    vectors: Mapping[str, np.ndarray],
    known: Mapping[str, float],
    covered: dict[str, float],
    find: Callable[[str], frozenset[str]],
) -> list[float]:
    """Each group's evidence (:func:`remindful.engine.retrieval.calibration.evidence`), in ranked order: the
    higher of its cosine and its context cosine where the search computed one (``known``), plus its
    term coverage. ``covered``: term coverage already computed, by memory id; ``find``: a
    :func:`remindful.engine.retrieval.calibration.finder` of ``terms``, for the others."""
    own = []
    for group in groups:
        shown = group.shown
        memory = vectors.get(shown.id)
        cosine = float(memory @ vector) if memory is not None else 0.0
        covers = covered.get(shown.id)
        if covers is None:
            covers = calibration.covered(terms, find(shown.content))
        own.append(calibration.evidence(max(cosine, known.get(shown.id, cosine)), covers))
    return own


@functools.cache
def _pool() -> ThreadPoolExecutor:
    """Threads for the lexical queries of concurrent searches (SQLite releases the GIL while it works)."""
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="remindful-lexical")


def _lexical(
    catalog: Catalog, terms: list[str], flt: SqlFilter, k: int, tables: dict[str, str], restricted: bool
) -> dict[str, list[tuple[str, float]]]:
    """Each space's BM25 candidates, one query after the other."""
    return {space: catalog.lexical(terms, flt, k, table=t, restricted=restricted) for space, t in tables.items()}


def _dense(
    catalog: Catalog,
    vector: np.ndarray,
    flt: SqlFilter,
    k: int,
    dense_from_index: Callable[[np.ndarray, int], list[tuple[str, float]]] | None,
    restricted: bool,
    searched: int | None,
    pending_after: int | None,
    settings: SearchSettings,
    passing: int | None = None,
) -> list[tuple[str, float]]:
    """Dense candidates, best first; when ``restricted``, only rows passing ``flt``. A restriction
    that leaves few rows, or a small share of the ``searched`` ones, is scored exactly; otherwise
    the index is asked without the filter (filtered HNSW queries are slow) for ten times more
    candidates, which are checked against the filter here; if too few pass, everything matching
    is scored. ``passing`` (at most that many rows pass, known without reading them) makes the
    choice without a read: up to EXACT_ALWAYS rows, or a share too small for the index to give k
    of them among INDEX_FETCH_MAX candidates, are scored exactly; otherwise the index is asked for
    as many candidates as the share needs (at least the ten-fold)."""
    if dense_from_index is None:
        return _exact(catalog, vector, flt, k)
    wanted = min(k * 10, 1000) if restricted else k
    if restricted and passing is not None:
        # A known share of the searched memories: the index is asked for enough candidates that k
        # of them pass, as expected, with a margin; a share too small for that is scored exactly.
        share = passing / searched if searched else 1.0
        needed = math.ceil(k * OVERFETCH_MARGIN / share) if share > 0 else INDEX_FETCH_MAX + 1
        if passing <= EXACT_ALWAYS or needed > INDEX_FETCH_MAX:
            return _exact(catalog, vector, flt, k)
        wanted = max(wanted, needed)
    elif restricted:
        # Few rows are read and scored in one pass: a filter no index serves (metadata) reads the table.
        few = min(EXACT_ALWAYS, settings.exact_filter_max)
        exact = catalog.filtered_embeddings_if(
            flt, few, settings.exact_filter_max + 1, lambda n: _scored_exactly(n, searched, settings)
        )
        if exact is not None:
            ids, matrix = exact
            return top_k_exact(vector, ids, matrix, k) if matrix is not None else []
    from_index = dense_from_index(vector, wanted)
    if restricted:
        passed = catalog.ids_passing([mid for mid, _ in from_index], flt)
        if len(passed) < k:
            return _exact(catalog, vector, flt, k)
        from_index = [(mid, score) for mid, score in from_index if mid in passed]
    # Rows the index may lack: never indexed, or written by another process since we opened it.
    ids, matrix = catalog.pending_embeddings(flt, pending_after)
    pending = top_k_exact(vector, ids, matrix, k) if matrix is not None else []
    return merge_dense(from_index, pending, k=wanted)


def _exact(catalog: Catalog, vector: np.ndarray, flt: SqlFilter, k: int) -> list[tuple[str, float]]:
    """The top ``k`` of every embedded row passing ``flt``, scored exactly."""
    ids, matrix = catalog.filtered_embeddings(flt)
    return top_k_exact(vector, ids, matrix, k) if matrix is not None else []


def _scored_exactly(n: int, searched: int | None, settings: SearchSettings) -> bool:
    """Whether ``n`` rows passing a filter (more than ``EXACT_ALWAYS``) are better scored exactly
    than found through the index: up to ``exact_filter_max`` if they are less than ``INDEX_SHARE``
    of the ``searched`` memories (the index's ten-fold candidates would hold too few of them)."""
    return n <= settings.exact_filter_max and (searched is None or n < searched * INDEX_SHARE)
