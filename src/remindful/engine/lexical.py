"""BM25 search over the catalog's FTS5 tables, with a bounded cost as the store grows.

FTS5's ``bm25()`` scores every row a query matches, so a common term would make a query's cost grow
with the store. Here the rarest query terms are kept (document frequencies counted once per process
and remembered), and when even the rarest matches too many rows only its newest matches are ranked
(of a search restricted by a filter, its newest passing the filter, among a bounded number of its
newest: a small project's own matches, not the few of them among the store's newest). ``bm25()``
itself would still grow with the store: for its IDF, FTS5 counts every row each phrase matches (the
whole doclist, once per statement) whatever rows are ranked. A term that common is the only one
kept, and one term's IDF is the same for every row: its rows are then ranked by the rest of BM25,
each row's own occurrences and length read alone (:class:`OneTerm`), in bm25()'s order. How common
it is, is estimated from a sample of its doclist (:func:`estimated_rows`): counting it is the cost
avoided.

The relevance model (:mod:`remindful.engine.retrieval.rerank`) reads two more things from here: the query
terms' document frequencies (:meth:`LexicalSearch.doc_freqs`, from the same remembered counts) and
the session-window texts of its candidates (:meth:`LexicalSearch.windows`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from itertools import pairwise
from typing import Any, Protocol, TypeVar

from remindful.engine import windows as context
from remindful.engine.schema import FTS_TOKENIZE
from remindful.engine.sqlfilter import SqlFilter


class Rows(Protocol):
    """What lexical search reads through: the catalog's two read methods, and its change marks
    (the newest audit entry and memory)."""

    def read(self, sql: str, params: Sequence[Any] = (), *, private: bool = False) -> list[Any]: ...

    def ids_by_rowid(self, rowids: Sequence[int], flt: SqlFilter, *, private: bool = False) -> dict[int, str]: ...

    def change_marks(self, *, private: bool = False) -> tuple[int, int]: ...


#: Above this many rows matching a lexical query, its most common terms are dropped; if its rarest
#: term alone matches more, only that term's newest LEXICAL_MAX_MATCHES rows are ranked.
LEXICAL_MAX_MATCHES = 300
#: A restricted search ranks the newest LEXICAL_MAX_MATCHES of its matches that pass its filter,
#: looked for among this many of the newest matches (each checked against the filter): a small
#: project's own matches, not the few of them among the store's newest, at a bounded cost.
LEXICAL_SCAN_MAX = 1000
#: Document frequencies are counted up to this many rows (counting walks the term's doclist), and
#: past LEXICAL_MAX_MATCHES only when every query term is that common; terms past it tie, and the
#: longer one counts as rarer.
DOC_FREQ_CAP = 1000
#: A term estimated to match more rows than this many times the rows to rank (:func:`estimated_rows`)
#: is ranked without ``bm25()`` (:class:`OneTerm`). On a 2-core laptop at 1,000,000 memories,
#: ``bm25()`` costs about 0.8 ms and 26 ns a row of the term's doclist; :class:`OneTerm` about 8 us
#: a memory and 11 us a window it ranks: even at about 250 times the rows to rank. The 300 rows of
#: an unrestricted search: past 75,000 rows (a term in 90 % of the windows: 23 -> 3 ms; a name in a
#: third of them: 9 -> 3.6 ms); the ~20 of a small project among the newest 1,000 matches: past 5,000.
ONE_TERM_RATIO = 250
#: A term's rows are estimated from its newest LEXICAL_MAX_MATCHES matches and this many samples
#: of the older rowids. A sample costs FTS5 a seek, about what counting 700 rows does, and a term is
#: rarely spread evenly (a name is dense in the sessions about its person): a few long samples...
ONE_TERM_SAMPLES = 4
#: ...each of up to this many matches: longer than a cluster (a session, a conversation), which a
#: sample then measures with the sparser rows around it rather than alone.
ONE_TERM_SAMPLE_ROWS = 1000
#: Terms whose counts and estimates a search remembers, at most (then they are counted afresh).
REMEMBERED_MAX = 50_000
#: Restricted searches whose passing rows are remembered, at most: a search that looks further
#: (near-duplicates folded its hits) asks again with the same terms and filter.
PASSING_REMEMBERED = 64

K = TypeVar("K")
V = TypeVar("V")


class LexicalSearch:
    """BM25 queries on one catalog, and the document frequencies they have counted."""

    def __init__(self, catalog: Rows) -> None:
        self._catalog = catalog
        # (table, term) -> (rows counted, table size, how far it was counted)
        self._doc_freqs: dict[tuple[str, str], tuple[int, int, int]] = {}
        # (table, term) -> (rows estimated, table size)
        self._estimates: dict[tuple[str, str], tuple[float, int]] = {}
        # (table, match, filter) -> (the catalog's change marks then, the passing rowids)
        self._passing: dict[tuple[str, str, str, tuple[Any, ...]], tuple[tuple[int, ...], list[int]]] = {}

    def search(
        self, terms: Sequence[str], flt: SqlFilter, limit: int, *, table: str = "memories_fts", restricted: bool = True
    ) -> list[tuple[str, float]]:
        """BM25 matches (any of ``terms``) among rows passing ``flt``: (id, score > 0) best first.

        ``table`` is ``memories_fts`` (the memory's text) or ``context_fts`` (its session window).
        BM25 scores every row matching any term, so when the terms match more than
        ``LEXICAL_MAX_MATCHES`` rows the most common terms are dropped (they weigh least in BM25)
        until the rarest ones fit; when the rarest term alone matches more, only its newest
        ``LEXICAL_MAX_MATCHES`` rows are ranked (of a restricted search, its newest passing ``flt``
        among its ``LEXICAL_SCAN_MAX`` newest): the cost stays bounded as the store grows.
        Unrestricted searches rank in the FTS index alone and check the filter (and that the memory
        still exists) on the top rows only.
        """
        if table not in ("memories_fts", "context_fts"):
            raise ValueError(f"unknown lexical table {table!r}")
        if not terms:
            return []
        kept, matches = self._rarest_terms(table, terms)
        match = fts_or(kept)
        if restricted and matches > LEXICAL_MAX_MATCHES:  # then one term is kept
            return self._newest_passing(table, match, kept[0], flt, limit)
        newest = self._newest(table, match) if matches > LEXICAL_MAX_MATCHES else []
        floor = newest[-1] if len(newest) == LEXICAL_MAX_MATCHES else 0
        if restricted:
            sql = (
                f"SELECT m.id, -bm25({table}) FROM {table} JOIN memories m ON m.rowid = {table}.rowid "
                f"WHERE {table} MATCH ? AND {table}.rowid >= ? AND {flt.sql} ORDER BY bm25({table}) LIMIT ?"
            )
            return [
                (r[0], float(r[1])) for r in self._catalog.read(sql, [match, floor, *flt.params, limit], private=True)
            ]
        fetch = limit + limit // 4  # a margin for expired rows, which the filter drops below
        if table == "context_fts":
            # Windows of deleted memories still queued for removal may crowd the top: fetch more.
            waiting = int(self._catalog.read("SELECT count(*) FROM context_drop", private=True)[0][0])
            fetch += min(waiting, limit * 8)
        one = self._one_term(table, kept[0], newest) if floor else None
        if one is not None:
            ranked = one.rank(newest, fetch)
        else:
            ranked = self._catalog.read(
                f"SELECT rowid, -bm25({table}) FROM {table} WHERE {table} MATCH ? AND rowid >= ? "
                f"ORDER BY bm25({table}) LIMIT ?",
                [match, floor, fetch],
                private=True,
            )
        if not ranked:
            return []
        ids = self._catalog.ids_by_rowid([r[0] for r in ranked], flt, private=True)
        return [(ids[rowid], float(score)) for rowid, score in ranked if rowid in ids][:limit]

    def _newest(self, table: str, match: str) -> list[int]:
        """The rowids of the ``LEXICAL_MAX_MATCHES`` newest rows matching ``match``, newest first (the
        last is the floor of what bm25() scores; a term's estimate counts them)."""
        # FTS5 walks a doclist backwards by rowid cheaply.
        return [
            int(r[0])
            for r in self._catalog.read(
                f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT ?",
                [match, LEXICAL_MAX_MATCHES],
                private=True,
            )
        ]

    def _newest_passing(self, table: str, match: str, term: str, flt: SqlFilter, limit: int) -> list[tuple[str, float]]:
        """:meth:`search` of a restricted search whose terms match too many rows: the newest
        ``LEXICAL_MAX_MATCHES`` matches passing ``flt`` among the newest ``LEXICAL_SCAN_MAX``
        matches, ranked. A small project's matches are then its own newest, not the few of them
        among the store's newest (issue 34). Each row is checked against the filter once: the
        ranking walks the index alone and keeps the rows found."""
        passing = self._passing_rows(table, match, flt)
        if not passing:
            return []
        one = self._one_term(table, term, self._newest(table, match), len(passing))
        if one is not None:
            ranked = one.rank(passing, limit)
        else:  # "+rowid": the set is checked row by row, not handed to FTS5 as a lookup per rowid.
            ranked = self._catalog.read(
                f"SELECT rowid, -bm25({table}) FROM {table} WHERE {table} MATCH ? AND rowid >= ? "
                f"AND +rowid IN (SELECT value FROM json_each(?)) ORDER BY bm25({table}) LIMIT ?",
                [match, passing[-1], json.dumps(passing), limit],
                private=True,
            )
        ids = self._catalog.ids_by_rowid([r[0] for r in ranked], flt, private=True)
        return [(ids[rowid], float(score)) for rowid, score in ranked if rowid in ids]

    def _passing_rows(self, table: str, match: str, flt: SqlFilter) -> list[int]:
        """The rowids of the newest ``LEXICAL_MAX_MATCHES`` matches passing ``flt`` among the newest
        ``LEXICAL_SCAN_MAX`` matches, newest first (each a lookup in the memories table: 2-4 ms a
        query at 1,000,000 memories). Remembered until the catalog changes (a memory stored; a
        delete, update or move of scope, which the audit log records): a search whose hits folded
        into near-duplicates asks again for more candidates, with the same terms and filter. A
        window's text also changes when a large delete's neighbours are mended after it commits
        (:func:`remindful.engine.windows.mend_pending`): the windows still to mend count too."""
        now: tuple[int, ...] = self._catalog.change_marks(private=True)
        if table == "context_fts":
            now += tuple(
                self._catalog.read(
                    "SELECT (SELECT count(*) FROM context_mend), (SELECT count(*) FROM context_drop)", private=True
                )[0]
            )
        key = (table, match, flt.sql, (*flt.params, LEXICAL_SCAN_MAX, LEXICAL_MAX_MATCHES))
        known = self._passing.get(key)
        if known is not None and known[0] == now:
            return known[1]
        passing = [
            int(r[0])
            for r in self._catalog.read(
                f"SELECT newest.rowid FROM (SELECT rowid FROM {table} WHERE {table} MATCH ? "
                f"ORDER BY rowid DESC LIMIT ?) AS newest JOIN memories ON memories.rowid = newest.rowid "
                f"WHERE {flt.sql} ORDER BY newest.rowid DESC LIMIT ?",
                [match, LEXICAL_SCAN_MAX, *flt.params, LEXICAL_MAX_MATCHES],
                private=True,
            )
        ]
        remember(self._passing, key, (now, passing), at_most=PASSING_REMEMBERED)
        return passing

    def _one_term(self, table: str, term: str, newest: Sequence[int], ranked: int | None = None) -> OneTerm | None:
        """The ranking of ``term``'s rows without ``bm25()`` when it is that common (more than
        ``ONE_TERM_RATIO`` times the ``ranked`` rows to rank, all of ``newest`` by default), as
        estimated from its ``newest`` matches (:meth:`_newest`) and a sample of the older ones
        (:func:`estimated_rows`, remembered until the table grows by a tenth); else None."""
        rows, tokens = averages(self._catalog, table)
        if not rows or len(newest) < LEXICAL_MAX_MATCHES:
            return None
        bar = ONE_TERM_RATIO * (len(newest) if ranked is None else ranked)
        if rows <= bar:  # no term matches more rows than the table has: nothing to estimate
            return None
        size = self._size()
        known = self._estimates.get((table, term))
        if known is not None and still_current(known[1], size):
            estimated = known[0]
        else:
            estimated = estimated_rows(self._catalog, table, term, newest)
            remember(self._estimates, (table, term), (estimated, size))
        if estimated <= bar:
            return None
        return OneTerm(self._catalog, table, term, rows, tokens)

    def doc_freqs(self, terms: Sequence[str], upto: int | None = None) -> tuple[dict[str, int], int]:
        """How many memories hold each of ``terms`` in their text (counted up to ``upto``, by default
        ``LEXICAL_MAX_MATCHES + 1``: rarer terms are told apart exactly, common ones tie), and the
        store's size (its largest rowid). Counts are remembered, as :meth:`search`'s are."""
        size = self._size()
        cap = upto or LEXICAL_MAX_MATCHES + 1
        return {t: self._doc_freq("memories_fts", t, size, cap) for t in terms}, size

    def windows(self, ids: Sequence[str]) -> dict[str, str]:
        """The session-window text (what the ``lexical_context`` space matches: the memory, its
        neighbours and its date) of each of ``ids`` that has one, by id."""
        if not ids:
            return {}
        rowids = self._catalog.read(
            "SELECT wanted, memories.rowid FROM (SELECT value AS wanted FROM json_each(?)) "
            "CROSS JOIN memories ON memories.id = wanted",
            [json.dumps(list(ids))],
        )
        found = context.read_texts(self._catalog.read, [r[1] for r in rowids])
        return {str(mid): found[rowid] for mid, rowid in rowids if rowid in found}

    def _size(self) -> int:
        return int(self._catalog.read("SELECT coalesce(max(rowid), 0) FROM memories", private=True)[0][0])

    def _rarest_terms(self, table: str, terms: Sequence[str]) -> tuple[list[str], int]:
        """The terms to match: all of them if their rows add up to at most ``LEXICAL_MAX_MATCHES``,
        else the rarest that fit (at least one); and how many rows they match (at most
        ``DOC_FREQ_CAP`` per term)."""
        size = self._size()
        # Counting past LEXICAL_MAX_MATCHES only matters when every term is that common: then the
        # rarest one is kept alone, and telling which needs the longer count.
        counted = sorted((self._doc_freq(table, t, size, LEXICAL_MAX_MATCHES + 1), -len(t), t) for t in terms)
        if counted[0][0] > LEXICAL_MAX_MATCHES:
            counted = sorted((self._doc_freq(table, t, size, DOC_FREQ_CAP), -len(t), t) for t in terms)
        kept: list[str] = []
        total = 0
        for count, _, term in counted:
            if kept and total + count > LEXICAL_MAX_MATCHES:
                break
            kept.append(term)
            total += count
        return kept, total

    def _doc_freq(self, table: str, term: str, size: int, cap: int) -> int:
        """Rows of ``table`` matching ``term``, counted up to ``cap``; remembered until the table
        (``size``, its largest rowid) grows by a tenth."""
        known = self._doc_freqs.get((table, term))
        if known is not None and still_current(known[1], size):
            count, _, counted_to = known
            if count < counted_to or counted_to >= cap:  # exact, or counted at least as far
                return min(count, cap)
        count = int(
            self._catalog.read(
                f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {table} MATCH ? LIMIT ?)",
                [fts_or([term]), cap],
                private=True,
            )[0][0]
        )
        remember(self._doc_freqs, (table, term), (count, size, cap))
        return count


def still_current(size_then: int, size: int) -> bool:
    """Whether what was counted of a table of ``size_then`` rows (its largest rowid) still stands
    for it at ``size``: until it grows by a tenth."""
    return size <= size_then * 1.1 + 100


def remember(known: dict[K, V], key: K, value: V, *, at_most: int = REMEMBERED_MAX) -> None:
    """``known[key] = value``, forgetting everything first when it holds ``at_most`` entries."""
    if len(known) >= at_most:
        known.clear()
    known[key] = value


def estimated_rows(catalog: Rows, table: str, term: str, newest: Sequence[int]) -> float:
    """How many rows of ``table`` match ``term``, estimated from its ``newest`` matches (newest
    first, as :meth:`LexicalSearch._newest` reads them: every match from the last of them up) and a
    sample of the rowids below: cut into ``ONE_TERM_SAMPLES`` equal stretches, each stretch's matches
    are counted from its start (FTS5 seeks to a rowid) up to ``ONE_TERM_SAMPLE_ROWS``: all of them if
    fewer, else their density over the rowids they span stands for the stretch's. At most
    ``ONE_TERM_SAMPLES`` queries of ``ONE_TERM_SAMPLE_ROWS`` rows each, whatever the table's size.
    How far back the newest matches reach, alone, would take a term dense among the newest rows (a
    name in this week's sessions) for one as dense in all of them."""
    if not newest:
        return 0.0
    below = newest[-1] - 1  # rowids 1 to below
    bounds = [1 + below * i // ONE_TERM_SAMPLES for i in range(ONE_TERM_SAMPLES + 1)]
    estimated = float(len(newest))
    for start, end in pairwise(bounds):  # each stretch from start to end - 1
        if start >= end:
            continue
        count, last = catalog.read(
            f"SELECT count(*), max(rowid) FROM (SELECT rowid FROM {table} WHERE {table} MATCH ? "
            f"AND rowid >= ? AND rowid < ? ORDER BY rowid LIMIT ?)",
            [fts_or([term]), start, end, ONE_TERM_SAMPLE_ROWS],
            private=True,
        )[0]
        estimated += count if count < ONE_TERM_SAMPLE_ROWS else count * (end - start) / (last - start + 1)
    return estimated


def fts_or(terms: Sequence[str]) -> str:
    """An FTS5 expression matching any of the terms (each quoted, so no operator can be injected)."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


class OneTerm:
    """BM25 of one term over given rows, in ``bm25()``'s order, without counting the term's doclist.

    FTS5's bm25 of a row: IDF * f * (k1 + 1) / (f + k1 * (1 - b + b * D / avgdl)), f the term's
    occurrences in the row, D its length in tokens, avgdl the table's mean length (k1 = 1.2,
    b = 0.75). With one term the IDF is one factor for every row: the order is that of the rest,
    which reads each row alone. D is the row's own record in the table's ``docsize``; avgdl comes
    from the table's totals (FTS5's averages record); f is what ``highlight()`` marks:

    - of a memory's text, ``highlight()`` on ``memories_fts`` itself (its content is the memories
      table's: read and tokenized for the rows asked for only);
    - of a session window (``context_fts`` keeps no text), the sum over its parts, which the
      window's text joins a line each (:mod:`remindful.engine.windows`): its members' counts from
      ``memories_fts`` as above, a member's kept former content (``context_gone``) and the
      window's date words indexed afresh in an in-memory FTS5 table with the same tokenizer. (A
      phrase a query term makes of several tokens is not counted across two parts.)

    The scores leave the IDF out: they order the rows, which is all a lexical space's candidates
    are used for. About 8 us a memory and 13 us a window ranked (2-core laptop, 1,000,000 memories).
    """

    K1 = 1.2
    B = 0.75

    def __init__(self, catalog: Rows, table: str, term: str, rows: int, tokens: int) -> None:
        self._catalog = catalog
        self._table = table
        self._term = term
        self._mean = tokens / rows

    def rank(self, rowids: Sequence[int], limit: int) -> list[tuple[int, float]]:
        """The best ``limit`` of ``rowids``: (rowid, score > 0), best first."""
        if not rowids:
            return []
        counts = self._windows(rowids) if self._table == "context_fts" else self._memories(rowids)
        lengths = self._lengths([rowid for rowid, f in counts.items() if f])
        k1, b = self.K1, self.B
        scored = [
            (rowid, f * (k1 + 1) / (f + k1 * (1 - b + b * lengths[rowid] / self._mean)))
            for rowid, f in counts.items()
            if f and rowid in lengths
        ]
        scored.sort(key=lambda item: (-item[1], -item[0]))
        return scored[:limit]

    def _read(self, sql: str, params: Sequence[Any]) -> list[Any]:
        return self._catalog.read(sql, params, private=True)

    def _memories(self, rowids: Sequence[int]) -> dict[int, int]:
        """The term's occurrences in each of the memories ``rowids`` whose text holds it."""
        found = self._read(
            "SELECT rowid, highlight(memories_fts, 0, char(1), '') FROM memories_fts WHERE memories_fts MATCH ? "
            "AND rowid >= ? AND +rowid IN (SELECT value FROM json_each(?))",
            [fts_or([self._term]), min(rowids), json.dumps(list(rowids))],
        )
        return {int(rowid): str(marked).count("\x01") for rowid, marked in found}

    def _windows(self, rowids: Sequence[int]) -> dict[int, int]:
        """The term's occurrences in each of the windows ``rowids``: its parts' (this class's docstring)."""
        recipes = context.read_recipes(self._read, rowids)
        members = sorted({m for parts, _ in recipes.values() for m in parts})
        gone = context.read_contents(self._read, members, tables=("context_gone",))
        own = self._memories([m for m in members if m not in gone]) if len(gone) < len(members) else {}
        dates = sorted({date for _, date in recipes.values()})
        fresh = self._fresh([*(f"({d})" for d in dates), *gone.values()])
        per_date = dict(zip(dates, fresh[: len(dates)], strict=True))
        per_gone = dict(zip(gone, fresh[len(dates) :], strict=True))
        return {
            rowid: per_date[date] + sum(per_gone.get(m, own.get(m, 0)) for m in parts)
            for rowid, (parts, date) in recipes.items()
        }

    def _fresh(self, texts: Sequence[str]) -> list[int]:
        """The term's occurrences in each of ``texts``, indexed afresh."""
        if not texts:
            return []
        scratch = sqlite3.connect(":memory:")
        try:
            scratch.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{FTS_TOKENIZE}')")
            scratch.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)", enumerate(texts))
            found = dict(
                scratch.execute(
                    "SELECT rowid, highlight(t, 0, char(1), '') FROM t WHERE t MATCH ?", [fts_or([self._term])]
                ).fetchall()
            )
        finally:
            scratch.close()
        return [str(found.get(i, "")).count("\x01") for i in range(len(texts))]

    def _lengths(self, rowids: Sequence[int]) -> dict[int, int]:
        """Each row's length in tokens, as the table recorded it when it indexed the row."""
        if not rowids:
            return {}
        found = self._read(
            f"SELECT id, sz FROM {self._table}_docsize WHERE id IN (SELECT value FROM json_each(?))",
            [json.dumps(list(rowids))],
        )
        return {int(rowid): sum(varints(size)) for rowid, size in found}


def averages(catalog: Rows, table: str) -> tuple[int, int]:
    """The rows of the FTS5 ``table`` and their tokens in all: its averages record (the row of id
    1 in ``<table>_data``: the row count, then each column's token total, as varints)."""
    found = catalog.read(f"SELECT block FROM {table}_data WHERE id = 1", private=True)
    if not found or not found[0][0]:
        return 0, 0
    values = varints(found[0][0])
    return (values[0], sum(values[1:])) if len(values) > 1 else (0, 0)


def varints(blob: bytes) -> list[int]:
    """The SQLite varints in ``blob``, in order (big-endian groups of 7 bits, the ninth byte whole)."""
    out: list[int] = []
    i = 0
    while i < len(blob):
        value = 0
        for j in range(9):
            byte = blob[i]
            i += 1
            if j == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        out.append(value)
    return out
