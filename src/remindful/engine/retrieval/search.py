"""The ranking pipeline: candidates from each retrieval space, each judged by its own evidence.

Spaces (``search.*_weight``; weight 0 turns a space off) only find candidates:
- ``dense``: cosine similarity of the memory's MiniLM vector. Unrestricted searches ask the HNSW
  index; restricted ones whose matching set is small (``search.exact_filter_max``) are scored
  exactly from the catalog's stored vectors. Rows the index may not hold yet (stored by another
  process, or not yet indexed) are always scored exactly.
- ``lexical``: BM25 over the memory's text (FTS5, porter stemming), query terms OR-ed.
- ``lexical_context``: BM25 over the memory's session window: its text, its neighbours' and its
  date (see :mod:`remindful.engine.windows`).
- ``context`` (off by default): the memory's vector plus ``context_neighbour_weight`` times each
  adjacent memory's vector in its session, normalised, computed at query time around the first
  ``context_candidates`` dense candidates.

Every candidate (the first ``search.candidates`` of each space) is then read, with its vector and
its window, and judged on its own: its evidence (:mod:`remindful.engine.retrieval.rerank`: its cosine with
the query, a long memory's its best part's where higher (:mod:`remindful.engine.chunks`), plus what
its words and its window's words hold of the query's terms when they share at least two of them)
plus the boosts (:func:`boost`: importance, the resumed session, recency, and the query's time
anchor (:data:`ANCHOR_BOOST`), in the same units) gives its calibrated score
(:mod:`remindful.engine.retrieval.calibration`), an absolute relevance in [0, 1], and the candidates
are ordered by it. No score is normalised per query or read from a
rank, so a space whose matches are weak cannot outvote the cosine, and a score means the same in
every store.

Then near-duplicates collapse into the member that best matches the query, and newer versions of
a subject move above older ones (:mod:`remindful.engine.retrieval.diversity`); when near-duplicates leave
fewer than ``limit`` hits, the spaces are asked for more candidates, whose hits follow the first
ones (the first pool is ``search.candidates`` whatever ``limit`` is, so the first hits do not depend
on how many are asked for). Hits below ``min_score`` are dropped (or, with ``floor_best``, all when
the best is below it). Stored prompts (:func:`is_prompt`) follow every other hit: a question is not
its own answer. The order shown is the order of the scores.
"""

from __future__ import annotations

import functools
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np

from remindful.config import SearchSettings
from remindful.engine import chunks
from remindful.engine.backend import CatalogBackend
from remindful.engine.catalog import MemoryRow
from remindful.engine.lexical import LEXICAL_MAX_MATCHES
from remindful.engine.retrieval import anchors, calibration, diversity, rerank
from remindful.engine.sqlfilter import SqlFilter, build_filter
from remindful.engine.windows import WINDOW

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
#: "this project", "our repo", "the current codebase": in a question an agent asks in a project, the
#: word names no topic but the place, which all of the project's memories share. As a term it would
#: be one of the two a memory's words must hold (:data:`rerank.MIN_SHARED_TERMS`): "how do I deploy
#: this project?" ranked a build log that said "project" over every deploy fact, which did not.
WORKSPACE = re.compile(
    r"\b(?:this|our|my|the[ \t]+current|current)[ \t]+(project|repo|repository|codebase|workspace|app)\b"
)
#: How far the memories holding a query's term are counted for its share of the store
#: (:meth:`rerank.QueryTerms.chance`; its weight reads the count up to LEXICAL_MAX_MATCHES + 1 only):
#: exact in a store of up to this many memories, and a common word is common enough past it.
#: Counting walks the term's list of rows (about 26 ns a row) once until the store grows by a tenth.
SPREAD_COUNT = 5000
#: The neighbours a session window joins to its memory (:mod:`remindful.engine.windows`): what they
#: add to its words is as likely by chance as this many memories holding it.
NEIGHBOURS = 2 * WINDOW
SPACES = ("dense", "context", "lexical", "lexical_context")
LEXICAL_TABLES = {"lexical": "memories_fts", "lexical_context": "context_fts"}
#: Restricted searches: sets up to this size are scored exactly (a few milliseconds), and larger
#: ones (up to ``search.exact_filter_max``) when they are less than INDEX_SHARE of the searched types.
EXACT_ALWAYS = 1000
INDEX_SHARE = 0.2
#: A restriction whose size is known beforehand (a scope: its count is kept): the index is asked for
#: OVERFETCH_MARGIN times the candidates that would leave k passing at its share of the memories, up
#: to INDEX_FETCH_MAX. At 100,000 memories asking the index for 200 / 1,000 / 2,000 neighbours took
#: 2.2 / 6.9 / 13.6 ms, reading the vectors of a 7,000-row scope to score them exactly 66 ms, of a
#: 29,000-row one 284 ms (bench/perf.py's store): the index is asked wherever INDEX_FETCH_MAX
#: candidates should hold enough of the scope, and only smaller shares are scored exactly.
OVERFETCH_MARGIN = 2.5
INDEX_FETCH_MAX = 2000
#: Rows a copy of a scope's vectors is asked for beyond ``k``, for those the filter drops.
EXACT_MARGIN = 16
#: The most candidates asked of a space when near-duplicates fold the first ones into few hits.
MAX_CANDIDATES = 1000
#: A later pool of candidates holds what the hits found so far say ``limit`` of them need
#: (candidates per hit), with this margin: from twice to four times the pool before.
POOL_MARGIN = 2.0
#: Candidates stored without a vector embedded during one search, at most (see :func:`rank`).
EMBED_AT_SEARCH = 32
#: What a memory created in the window a query's time anchor names ("what did I buy 10 days ago?",
#: :mod:`remindful.engine.retrieval.anchors`) gains at most, in the evidence's units (a cosine),
#: fading to nothing over the window's margin, and less the share of the first candidates inside
#: the window (one holding them all tells nothing of which is meant): a soft preference (the
#: anchor is approximate, and a memory may speak of another day than its own), large enough to lift
#: a weak match said then above a same-topic one said months before, not an unrelated memory above
#: a match. Chosen on the LongMemEval dev questions that name a time (bench/longmemeval.py).
ANCHOR_BOOST = 0.2


def lexical_terms(text: str) -> list[str]:
    """The query's distinct terms for BM25: lowercased words, without stopwords and single letters,
    nor a word that only points at the workspace the agent works in ("how do I deploy this
    project?": :data:`WORKSPACE`), unless nothing else is left; at most 64."""
    lowered = text.lower()
    words = list(dict.fromkeys(_WORD.findall(lowered)))
    terms = [w for w in words if w not in STOPWORDS and (len(w) > 1 or w.isdigit())]
    pointing = {m.group(1) for m in WORKSPACE.finditer(lowered)}
    return ([t for t in terms if t not in pointing] or terms or words)[:64]


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
    catalog: CatalogBackend, query: np.ndarray, dense: Sequence[tuple[str, float]], neighbour_weight: float
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


def boost(row: MemoryRow, settings: SearchSettings, resumed_session: str | None, now: float | None = None) -> float:
    """What a memory's evidence gains from the documented preferences, in the evidence's units (a
    cosine): ``importance_boost`` times its importance above or below the default 0.5, times two
    (a confirmed memory gains, up to ``importance_boost`` at importance 1), ``session_boost`` for
    the resumed session, and ``recency_boost`` halving every ``recency_half_life_days`` of age
    (``now``: the epoch ages are measured from, default the current time). Small beside what a
    real match holds, so a boost reorders near-ties but does not lift an irrelevant memory above a
    relevant one."""
    gain = settings.importance_boost * (min(max(row.importance, 0.0), 1.0) - 0.5) * 2
    if resumed_session is not None and row.session_id == resumed_session:
        gain += settings.session_boost
    if settings.recency_half_life_days > 0 and settings.recency_boost > 0:
        age_days = max((time.time() if now is None else now) - row.created_at, 0.0) / 86400
        gain += settings.recency_boost * 0.5 ** (age_days / settings.recency_half_life_days)
    return gain


@dataclass(slots=True)
class Ranked:
    """One result of :func:`rank`: the memory shown, its calibrated score, the spaces that found
    it, the ids of the near-duplicates it stands for and the newer memory that supersedes it, if any."""

    row: MemoryRow
    score: float
    spaces: tuple[str, ...]
    similar_ids: tuple[str, ...] = ()
    superseded_by: str | None = None

    @property
    def similar(self) -> int:
        """How many other memories this hit stands for."""
        return len(self.similar_ids)


@dataclass(slots=True)
class Scored:
    """One candidate as the model sees it: its row, ``own`` and full ``evidence``
    (:func:`remindful.engine.retrieval.rerank.evidence`), its boost and calibrated score."""

    row: MemoryRow
    own: float
    evidence: float
    boost: float
    score: float


def rank(
    catalog: CatalogBackend,
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
    floor_best: bool = False,
    embed_missing: Callable[[Sequence[tuple[str, str]]], Mapping[str, np.ndarray]] | None = None,
    now: datetime | None = None,
    scoped: Callable[[np.ndarray, int], list[tuple[str, float]] | None] | None = None,
) -> list[Ranked]:
    """Run the pipeline; returns at most ``limit`` hits best first, none scoring below
    ``min_score`` (``floor_best``: none when the best scores under it, else the first ``limit``
    whose own evidence reaches the gate (``calibration.GATE_EVIDENCE``): whether the store holds
    an answer is the best hit's to say, what follows must only bear on the query itself; a memory
    that answers one part of a question is still shown when its other parts score lower, such
    as the second session a multi-session question needs). ``diverse``: collapse near-duplicates
    and put newer versions first (callers that count repeats, such as failure warnings, turn it
    off). ``resumed_session``: the session whose memories this search ranks higher (None: none).

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
    ``embed_missing((id, content) pairs)`` returns (and keeps) the vectors of candidates stored
    without one (a process that stored them ended before embedding them); without it they are
    judged by their words alone. ``now`` (an aware datetime; None: the current time) is the moment
    the search is asked at: ages (the recency boost) and the query's time anchors ("10 days ago",
    "last week": :mod:`remindful.engine.retrieval.anchors`) are measured from it, and memories
    created in an anchor's window gain up to ``ANCHOR_BOOST`` (a window no memory passing ``flt``
    reaches is ignored, its words included). ``scoped(vector, k)``: the rows of the searched scopes
    scored exactly from a copy kept in memory (None: not kept), for a restriction to scopes alone.
    """
    weights = weights_of(settings)
    asked_at = now if now is not None else datetime.now().astimezone()
    # A window the searched memories do not reach (a date long past, a replay's "last week" asked
    # of today's store) changes nothing: the query is read as if it named no time.
    anchored = tuple(
        w
        for w in anchors.windows(query_text, asked_at)
        if catalog.count(flt & build_filter(since=w.start - w.margin, until=w.end + w.margin), at_most=1)
    )
    # The words of a time anchor name a time, not a subject: they are not matched as words.
    terms = lexical_terms(anchors.without(query_text, anchored) if anchored else query_text)
    floor = min_score
    # The first pool does not depend on ``limit``: a search asking for more hits sees the same first
    # ones (issue 31: with max(candidates, limit) the top 5 of limit=10 and limit=50 differed).
    k = first = settings.candidates
    tables = {space: table for space, table in LEXICAL_TABLES.items() if terms and weights[space] > 0}

    # One task runs both lexical queries, one after the other, from the start: the query is
    # embedded meanwhile on the other cores (embed_query leaves one), then the vector index is asked.
    def ask(known: frozenset[str] = frozenset()) -> Future[Lexical] | None:
        """The lexical task for the current ``k`` (None: no lexical space is on)."""
        if not tables:
            return None
        return _pool().submit(_lexical, catalog, terms, flt, k, tables, restricted or typed, known)

    lexical = ask()
    vector = embed_query()
    model = Model(catalog, vector, terms, settings, resumed_session, embed_missing, keep=max(settings.candidates, 20))
    model.now, model.anchors = asked_at.timestamp(), anchored
    settled: list[tuple[diversity.Group, float]] = []
    checked: dict[str, bool] = {}  # dense candidates checked against flt: a later round asks for more
    found_in: dict[str, set[str]] = {}  # the ids each space gave, in any round
    while True:
        candidates = Candidates()
        if weights["dense"] > 0 or weights["context"] > 0:
            dense = _dense(
                catalog,
                vector,
                flt,
                k,
                dense_from_index,
                restricted,
                searched,
                pending_after,
                settings,
                passing,
                first,
                scoped,
                checked,
            )[:k]
            if weights["dense"] > 0:
                candidates.add("dense", dense)
            if weights["context"] > 0:
                around = dense[: settings.context_candidates]
                candidates.add("context", context_scores(catalog, vector, around, settings.context_neighbour_weight))
        if lexical is not None:
            found, doc_freqs, rows, vectors = lexical.result()
            model.weigh(doc_freqs)
            model.absorb(rows, vectors)
            for space, ranked in found.items():
                candidates.add(space, ranked)
        scored = model.score(candidates, flt)
        for space, ranked in candidates.by_space.items():
            found_in.setdefault(space, set()).update(mid for mid, _ in ranked)
        # Only the first ``limit`` hits are shown (the scores fall down the list, so the floor
        # cuts from the end): newer versions are looked for among twice as many.
        groups = _after(settled, _groups(scored, model.vectors, settings, diverse, keep=model.keep))
        # Near-duplicates may fold a full candidate list into fewer hits than asked for: look further.
        full = any(len(ranked) >= k for ranked in candidates.by_space.values())
        if len(groups) >= limit or not full or len(groups) == len(scored) or k >= MAX_CANDIDATES:
            break
        k = next_pool(k, limit, len(groups))
        settled = groups
        lexical = ask(frozenset(model.rows))
    # A hit an earlier round settled keeps its place though a later round's candidates may lack it
    # (the index changed between them: rows indexed meanwhile): every row scored in any round.
    scored = model.scored
    result: list[Ranked] = []
    prompts: list[Ranked] = []
    # floor_best: once the best hit reaches the floor, the next ones need only bear on the query
    # themselves (their own evidence at the gate: not a neighbour's, not noise).
    follow = floor_best and bool(groups) and groups[0][1] >= floor
    for group, score in groups:
        if len(result) + len(prompts) >= limit:
            break
        if score < floor and not (follow and scored[group.shown.id].own >= calibration.GATE_EVIDENCE):
            if follow:
                continue
            break
        row = scored[group.shown.id].row
        similar = tuple(group.similar_ids)
        if is_prompt(row):
            # A statement learned from a prompt can be its near-duplicate: it is shown, on its own score.
            stated = [scored[m] for m in similar if m in scored and not is_prompt(scored[m].row)]
            if stated:
                best = max(stated, key=lambda s: s.score)
                similar = tuple(m for m in (row.id, *similar) if m != best.row.id)
                row, score = best.row, min(best.score, score)
        spaces = tuple(space for space, ids in found_in.items() if row.id in ids)
        (prompts if is_prompt(row) else result).append(Ranked(row, score, spaces, similar, group.superseded_by))
    # A question is not its own answer: stored prompts follow every other hit, their scores capped
    # at the lowest shown above them (so scores still fall down the list).
    lowest = result[-1].score if result else 1.0
    return result + [replace(hit, score=min(hit.score, lowest)) for hit in prompts]


def is_prompt(row: MemoryRow) -> bool:
    """Whether a memory is a prompt the user typed (its metadata ``kind`` is ``intent``; stored
    before kinds were recorded: a conversation turn whose ``role`` is ``user`` or whose
    ``hook_event`` is UserPromptSubmit)."""
    text = row.metadata
    if "intent" not in text and not (row.type == "conversation" and ("user" in text or "UserPrompt" in text)):
        return False
    try:
        metadata = json.loads(text)
    except ValueError:
        return False
    if not isinstance(metadata, dict):
        return False
    kind = metadata.get("kind")
    if kind is not None:
        return kind == "intent"
    return row.type == "conversation" and (
        metadata.get("role") == "user" or metadata.get("hook_event") == "UserPromptSubmit"
    )


def _after(
    settled: list[tuple[diversity.Group, float]], groups: list[tuple[diversity.Group, float]]
) -> list[tuple[diversity.Group, float]]:
    """A later, larger pool's hits after the ones an earlier pool ``settled`` (so the first hits of
    a search do not depend on how many it asks for), each new one scoring at most the last settled
    one. A settled hit keeps its place and score and takes the near-duplicates the larger pool
    found of it."""
    if not settled:
        return groups
    holding = {mid: index for index, (group, _) in enumerate(groups) for mid in (group.shown.id, *group.similar_ids)}
    used: set[int] = set()
    result = []
    for group, score in settled:
        index = holding.get(group.shown.id)
        if index is not None and index not in used:
            used.add(index)
            group = groups[index][0]
        result.append((group, score))
    last = settled[-1][1]
    taken = {mid for group, _ in result for mid in (group.shown.id, *group.similar_ids)}
    for index, (group, score) in enumerate(groups):
        if index not in used and group.shown.id not in taken and not taken.intersection(group.similar_ids):
            result.append((group, min(score, last)))
    return result


class Model:
    """The relevance model (:mod:`remindful.engine.retrieval.rerank`) and the calibrated score
    (:mod:`remindful.engine.retrieval.calibration`) applied to one query's candidates; what it read of them
    (rows, vectors, windows) is kept for a second, larger pool."""

    def __init__(
        self,
        catalog: CatalogBackend,
        vector: np.ndarray,
        terms: Sequence[str],
        settings: SearchSettings,
        resumed_session: str | None,
        embed_missing: Callable[[Sequence[tuple[str, str]]], Mapping[str, np.ndarray]] | None,
        keep: int = 20,
    ) -> None:
        self.catalog = catalog
        self.vector = vector
        self.terms = terms
        self.settings = settings
        self.resumed_session = resumed_session
        self.embed_missing = embed_missing
        self.query = rerank.QueryTerms.of(terms)
        self.rows: dict[str, MemoryRow | None] = {}  # None: the row did not pass the filter
        self.vectors: dict[str, np.ndarray] = {}
        self.scored: dict[str, Scored] = {}
        self.now = time.time()
        #: The query's time anchors (:mod:`remindful.engine.retrieval.anchors`), measured from :attr:`now`.
        self.anchors: tuple[anchors.Window, ...] = ()
        #: What a memory inside them gains (:data:`ANCHOR_BOOST` less the share of the first pool
        #: inside them; None: not yet known).
        self.anchor_gain: float | None = None
        #: Candidates sure to be ranked this high or higher have their windows read (see :meth:`features`).
        self.keep = keep

    def weigh(self, doc_freqs: tuple[dict[str, int], int]) -> None:
        """Weigh the query's terms by their inverse document frequency in the store."""
        counts, size = doc_freqs
        if counts:
            # the weights tie past LEXICAL_MAX_MATCHES as they were chosen with; a word's share of
            # the store is counted further (SPREAD_COUNT)
            self.query = rerank.QueryTerms.of(
                self.terms,
                {t: rerank.idf(min(n, LEXICAL_MAX_MATCHES + 1), size) for t, n in counts.items()},
                {t: n / size for t, n in counts.items()} if size > 0 else None,
            )

    def absorb(self, rows: Mapping[str, MemoryRow | None], vectors: Mapping[str, np.ndarray]) -> None:
        """Rows and vectors the lexical task read meanwhile (:func:`_lexical`)."""
        self.rows = {**rows, **self.rows}
        self.vectors = {**vectors, **self.vectors}

    def score(self, candidates: Candidates, flt: SqlFilter) -> dict[str, Scored]:
        """Every candidate that exists and passes ``flt``, scored, best first."""
        wanted = list(dict.fromkeys(mid for ranked in candidates.by_space.values() for mid, _ in ranked))
        unread = [mid for mid in wanted if mid not in self.rows]
        if unread:
            found = self.catalog.rows_passing(unread, flt, vectors=self.vectors)
            self.rows.update((mid, found.get(mid)) for mid in unread)
        fresh = [row for mid in wanted if mid not in self.scored and (row := self.rows.get(mid)) is not None]
        if fresh:
            if self.anchors and self.anchor_gain is None:
                # A window holding every candidate tells nothing of which one is meant ("what did I
                # do today?" in a store of today's memories): the boost is the share left out of it,
                # among the first pool (a larger pool, asked for more hits, keeps it).
                held = sum(anchors.weight(row.created_at, self.anchors) for row in fresh) / len(fresh)
                self.anchor_gain = ANCHOR_BOOST * (1.0 - held)
            self._embed([row for row in fresh if row.id not in self.vectors])
            self._score(fresh, candidates)
        ranked = [self.scored[mid] for mid in wanted if mid in self.scored]
        ranked.sort(key=lambda s: (-s.score, -s.evidence, s.row.id))
        return {s.row.id: s for s in ranked}

    def _embed(self, rows: Sequence[MemoryRow]) -> None:
        if rows and self.embed_missing is not None:
            self.vectors.update(self.embed_missing([(row.id, row.content) for row in rows[:EMBED_AT_SEARCH]]))

    def features(self, rows: Sequence[MemoryRow], candidates: Candidates) -> list[Features]:
        """What the model reads of each of ``rows`` (candidates of this query). A window holds its
        memory's words and more, so its lexical evidence is at least the memory's own: a candidate
        that could not reach the first :attr:`keep` even if its window held every query term is
        given that lower bound and its window is not read."""
        settings = self.settings
        window_weight = settings.lexical_context_weight if self.query.stems else 0.0
        zero = np.zeros_like(self.vector)
        cosines = (diversity.stacked([self.vectors.get(row.id, zero) for row in rows]) @ self.vector).tolist()
        # A long memory is as close as its best part (remindful.engine.chunks).
        cosines = chunks.best_cosines(self.catalog, [(row.id, row.content) for row in rows], self.vector, cosines)
        context = dict(candidates.by_space.get("context", ()))
        result = []
        query, needed = self.query, self.query.needed
        for row, cosine in zip(rows, cosines, strict=True):
            held = query.held(row.content, needed) if settings.lexical_weight > 0 or window_weight > 0 else []
            own_lexical = query.lexical_of(held) if settings.lexical_weight > 0 else 0.0
            gain = boost(row, settings, self.resumed_session, self.now)
            if self.anchor_gain:
                gain += self.anchor_gain * anchors.weight(row.created_at, self.anchors)
            result.append(Features(row, cosine, own_lexical, own_lexical, context.get(row.id), gain, tuple(held)))
        if window_weight > 0 and result:
            # Scored with their own words as their windows' (a lower bound: a window holds its
            # memory's text), then with windows holding every term (an upper bound).
            own, total = self._evidence(result, window_weight)
            gains = np.fromiter((f.gain for f in result), np.float64, len(result))
            owned = np.fromiter((f.own_lexical for f in result), np.float64, len(result))
            sure = np.sort(calibration.relevances(total + gains, own))[::-1]
            threshold = sure[self.keep - 1] if len(sure) >= self.keep else -1.0
            could = calibration.relevances(total + window_weight * (1.0 - owned) + gains, own) >= threshold
            read = [f for f, reads in zip(result, could.tolist(), strict=True) if reads]
            # A window holds its memory's text: the terms found there are not looked for again, and
            # a text holding every term leaves its window nothing to add.
            for f in read:
                if len(f.held) == len(query.stems):
                    f.window_lexical = query.lexical_of(f.held)
            read = [f for f in read if len(f.held) < len(query.stems)]
            windows = self.catalog.windows([f.row.id for f in read])
            for f in read:
                window = windows.get(f.row.id)
                if window is not None:
                    f.window_lexical = query.window_lexical_of(query.held(window, needed, f.held), f.held, NEIGHBOURS)
        return result

    def _evidence(self, seen: Sequence[Features], window_weight: float) -> tuple[np.ndarray, np.ndarray]:
        """``(own, evidence)`` of each of ``seen``, as arrays."""
        settings, n = self.settings, len(seen)
        cosines = np.fromiter((f.cosine for f in seen), np.float64, n)
        context = None
        if settings.context_weight > 0:
            context = np.fromiter(
                (f.cosine if f.context_cosine is None else f.context_cosine for f in seen), np.float64, n
            )
        return rerank.evidence(
            cosines,
            np.fromiter((f.own_lexical for f in seen), np.float64, n),
            np.fromiter((f.window_lexical for f in seen), np.float64, n),
            context,
            dense_weight=settings.dense_weight,
            lexical_weight=settings.lexical_weight,
            lexical_context_weight=window_weight,
            context_weight=settings.context_weight,
        )

    def _score(self, rows: Sequence[MemoryRow], candidates: Candidates) -> None:
        window_weight = self.settings.lexical_context_weight if self.query.stems else 0.0
        seen = self.features(rows, candidates)
        if not seen:
            return
        own, evidence = self._evidence(seen, window_weight)
        gains = np.fromiter((f.gain for f in seen), np.float64, len(seen))
        scores = calibration.relevances(evidence + gains, own)
        for f, o, e, score in zip(seen, own.tolist(), evidence.tolist(), scores.tolist(), strict=True):
            self.scored[f.row.id] = Scored(f.row, o, e, f.gain, score)


@dataclass(slots=True)
class Features:
    """What the relevance model reads of one candidate (:func:`remindful.engine.retrieval.rerank.evidence`)."""

    row: MemoryRow
    cosine: float
    own_lexical: float
    window_lexical: float
    context_cosine: float | None
    gain: float  # its boost
    held: tuple[int, ...] = ()  # positions of the query's terms its text holds, ascending (QueryTerms.held)


def _groups(
    scored: Mapping[str, Scored],
    vectors: Mapping[str, np.ndarray],
    settings: SearchSettings,
    diverse: bool,
    keep: int | None = None,
) -> list[tuple[diversity.Group, float]]:
    """The scored candidates (best first) as hits with their scores, best first: near-duplicates
    collapsed and newer versions of a subject put first when ``diverse`` (among the first ``keep``
    hits, all by default: the rest follow as they are). A hit's score is its shown member's; a
    newer version moved above an older one takes the older one's score if that is higher, so
    scores never rise down the list."""
    ranked = [diversity.Candidate(s.row.id, s.row.content, s.row.created_at, s.evidence) for s in scored.values()]
    similarity = settings.collapse_similarity if diverse else float("inf")
    groups, _ = diversity.collapse(ranked, vectors, similarity)
    groups.sort(key=lambda g: (-scored[g.shown.id].score, -scored[g.shown.id].evidence, g.shown.id))
    if not diverse:
        return [(g, scored[g.shown.id].score) for g in groups]
    cut = len(groups) if keep is None else keep
    groups = diversity.supersede(groups[:cut], vectors, settings.supersede_similarity) + groups[cut:]
    result: list[tuple[diversity.Group, float]] = []
    for index, group in enumerate(groups):
        score = scored[group.shown.id].score
        if group.superseded_by is not None and index > 0 and groups[index - 1].shown.id == group.superseded_by:
            result[-1] = (result[-1][0], max(result[-1][1], score))  # the newer version, just above
        result.append((group, score))
    return result


@functools.cache
def _pool() -> ThreadPoolExecutor:
    """Threads for the lexical queries of concurrent searches (SQLite releases the GIL while it works)."""
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="remindful-lexical")


@functools.cache
def _space_pool() -> ThreadPoolExecutor:
    """Threads asking a catalog server for one lexical space while a :func:`_pool` thread asks the
    other (each thread has its own connection, so the server works on both at once)."""
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="remindful-lexical-space")


#: What :func:`_lexical` gives: each space's candidates, the terms' document frequencies, and the
#: rows (None: not passing the filter) and vectors of the candidates it read, by id.
Lexical = tuple[
    dict[str, list[tuple[str, float]]], tuple[dict[str, int], int], dict[str, MemoryRow | None], dict[str, np.ndarray]
]


def _lexical(
    catalog: CatalogBackend,
    terms: list[str],
    flt: SqlFilter,
    k: int,
    tables: dict[str, str],
    restricted: bool,
    known: frozenset[str] = frozenset(),
) -> Lexical:
    """Each space's BM25 candidates and the terms' document frequencies; then the rows and vectors
    of those candidates not ``known`` (already read), which the searching thread would read next:
    this thread is done before it needs them. The spaces are asked one after the other of a
    catalog file (SQLite), at once of a catalog server (``catalog.path`` None), which works on
    each of its connections in a process of its own: the search then waits for the longer of the
    two, not for both."""
    if catalog.path is None and len(tables) > 1:
        first, *others = tables.items()
        asked = {
            space: _space_pool().submit(catalog.lexical, terms, flt, k, table=t, restricted=restricted)
            for space, t in others
        }
        own = {first[0]: catalog.lexical(terms, flt, k, table=first[1], restricted=restricted)}
        spaces = {space: own[space] if space in own else asked[space].result() for space in tables}
    else:
        spaces = {space: catalog.lexical(terms, flt, k, table=t, restricted=restricted) for space, t in tables.items()}
    ids = [mid for mid in dict.fromkeys(mid for ranked in spaces.values() for mid, _ in ranked) if mid not in known]
    vectors: dict[str, np.ndarray] = {}
    found = catalog.rows_passing(ids, flt, vectors=vectors) if ids else {}
    return spaces, catalog.doc_freqs(terms, SPREAD_COUNT), {mid: found.get(mid) for mid in ids}, vectors


def _dense(
    catalog: CatalogBackend,
    vector: np.ndarray,
    flt: SqlFilter,
    k: int,
    dense_from_index: Callable[[np.ndarray, int], list[tuple[str, float]]] | None,
    restricted: bool,
    searched: int | None,
    pending_after: int | None,
    settings: SearchSettings,
    passing: int | None = None,
    at_least: int | None = None,
    scoped: Callable[[np.ndarray, int], list[tuple[str, float]] | None] | None = None,
    checked: dict[str, bool] | None = None,
) -> list[tuple[str, float]]:
    """Dense candidates, best first; when ``restricted``, only rows passing ``flt``. A restriction
    that leaves few rows, or a small share of the ``searched`` ones, is scored exactly; otherwise
    the index is asked without the filter (filtered HNSW queries are slow) for ten times more
    candidates, which are checked against the filter here; if too few pass, everything matching
    is scored.

    ``passing`` (at most that many rows pass, known without reading them: a scope's count) makes
    the choice without a read. Up to EXACT_ALWAYS rows, or a share too small for INDEX_FETCH_MAX
    candidates to hold ``at_least`` of them (with the margin), are scored exactly. Otherwise the
    index is asked for as many candidates as the share needs for ``k`` (at least the ten-fold, at
    most INDEX_FETCH_MAX); neighbours cluster, so when too few pass it is asked for INDEX_FETCH_MAX
    before every matching row is read. The rows passing among INDEX_FETCH_MAX candidates are the
    best of them all: when they are ``at_least`` (the first round's k: a later round of the ranking
    is looking further) they are enough, though fewer than ``k``. ``checked``: which candidates
    passed ``flt``, remembered from round to round of one search (:func:`passing_ids`)."""
    if dense_from_index is None:
        return _exact(catalog, vector, flt, k)
    wanted = min(k * 10, 1000) if restricted else k
    enough = k
    if restricted and passing is not None:
        share = passing / searched if searched else 1.0
        enough = min(k, at_least or k)
        if passing <= EXACT_ALWAYS or share * INDEX_FETCH_MAX < enough * OVERFETCH_MARGIN:
            return _exact_in_scopes(catalog, vector, flt, k, scoped, checked)
        wanted = min(max(wanted, math.ceil(k * OVERFETCH_MARGIN / share)), INDEX_FETCH_MAX)
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
        passed = passing_ids(catalog, [mid for mid, _ in from_index], flt, checked)
        if len(passed) < k and passing is not None and wanted < INDEX_FETCH_MAX:
            wanted = INDEX_FETCH_MAX
            from_index = dense_from_index(vector, wanted)
            passed = passing_ids(catalog, [mid for mid, _ in from_index], flt, checked)
        if len(passed) < (enough if passing is not None and wanted >= INDEX_FETCH_MAX else k):
            return _exact(catalog, vector, flt, k)
        from_index = [(mid, score) for mid, score in from_index if mid in passed]
    # Rows the index may lack: never indexed, or written by another process since we opened it.
    ids, matrix = catalog.pending_embeddings(flt, pending_after)
    pending = top_k_exact(vector, ids, matrix, k) if matrix is not None else []
    return merge_dense(from_index, pending, k=wanted)


def _exact(catalog: CatalogBackend, vector: np.ndarray, flt: SqlFilter, k: int) -> list[tuple[str, float]]:
    """The top ``k`` of every embedded row passing ``flt``, scored exactly."""
    ids, matrix = catalog.filtered_embeddings(flt)
    return top_k_exact(vector, ids, matrix, k) if matrix is not None else []


def _exact_in_scopes(
    catalog: CatalogBackend,
    vector: np.ndarray,
    flt: SqlFilter,
    k: int,
    scoped: Callable[[np.ndarray, int], list[tuple[str, float]] | None] | None,
    checked: dict[str, bool] | None = None,
) -> list[tuple[str, float]]:
    """:func:`_exact` for a restriction to scopes, from the copy of their vectors kept in memory
    when there is one (its best rows checked against ``flt``: expiry, types; if too few pass, every
    matching row is read)."""
    found = None if scoped is None else scoped(vector, k + EXACT_MARGIN)
    if found is None:
        return _exact(catalog, vector, flt, k)
    passed = passing_ids(catalog, [mid for mid, _ in found], flt, checked) if found else set()
    kept = [(mid, score) for mid, score in found if mid in passed]
    if len(kept) < k and len(found) == k + EXACT_MARGIN:
        return _exact(catalog, vector, flt, k)
    return kept[:k]


def next_pool(k: int, limit: int, hits: int) -> int:
    """The candidates a space is asked for after ``k`` of them folded into ``hits`` (fewer than
    ``limit``): as many as ``limit`` hits need at the candidates a hit took so far, with
    ``POOL_MARGIN``, from 2k to 4k. A store holding ten near copies of a text folds 80 candidates
    into about 8 hits: the next pool is 200, not 320 (the last round's reads and its pairs of
    near-duplicates are most of such a search)."""
    wanted = math.ceil(k * limit / max(hits, 1) * POOL_MARGIN)
    return min(max(wanted, 2 * k), 4 * k, MAX_CANDIDATES)


def passing_ids(
    catalog: CatalogBackend, ids: Sequence[str], flt: SqlFilter, checked: dict[str, bool] | None
) -> set[str]:
    """Those of ``ids`` that exist and pass ``flt``; ``checked`` (when given) remembers the answers
    for the rounds of one search: each asks the dense space for more candidates (2 to 4 times as many),
    most of which the round before checked (at 1,000,000 memories a check is a lookup of a row
    spread over the file: 20 us)."""
    if checked is None:
        return catalog.ids_passing(ids, flt)
    new = [mid for mid in ids if mid not in checked]
    if new:
        passed = catalog.ids_passing(new, flt)
        checked.update((mid, mid in passed) for mid in new)
    return {mid for mid in ids if checked[mid]}


def _scored_exactly(n: int, searched: int | None, settings: SearchSettings) -> bool:
    """Whether ``n`` rows passing a filter (more than ``EXACT_ALWAYS``) are better scored exactly
    than found through the index: up to ``exact_filter_max`` if they are less than ``INDEX_SHARE``
    of the ``searched`` memories (the index's ten-fold candidates would hold too few of them)."""
    return n <= settings.exact_filter_max and (searched is None or n < searched * INDEX_SHARE)
