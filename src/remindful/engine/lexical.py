"""BM25 search over the catalog's FTS5 tables, with a bounded cost as the store grows.

FTS5's ``bm25()`` scores every row a query matches, so a common term would make a query's cost grow
with the store. Here the rarest query terms are kept (document frequencies counted once per process
and remembered), and when even the rarest matches too many rows only its newest matches are ranked
(of a search restricted by a filter, its newest passing the filter, among a bounded number of its
newest: a small project's own matches, not the few of them among the store's newest). What still
grows with the store is ``bm25()``'s IDF: FTS5 counts every row each phrase matches (its whole
doclist, once per statement) whatever rows are ranked (issue 34, measured at 1,000,000 memories).

The relevance model (:mod:`remindful.engine.retrieval.rerank`) reads two more things from here: the query
terms' document frequencies (:meth:`LexicalSearch.doc_freqs`, from the same remembered counts) and
the session-window texts of its candidates (:meth:`LexicalSearch.windows`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from remindful.engine import windows as context
from remindful.engine.sqlfilter import SqlFilter


class Rows(Protocol):
    """What lexical search reads through: the catalog's two read methods."""

    def read(self, sql: str, params: Sequence[Any] = (), *, private: bool = False) -> list[Any]: ...

    def ids_by_rowid(self, rowids: Sequence[int], flt: SqlFilter, *, private: bool = False) -> dict[int, str]: ...


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


class LexicalSearch:
    """BM25 queries on one catalog, and the document frequencies they have counted."""

    def __init__(self, catalog: Rows) -> None:
        self._catalog = catalog
        # (table, term) -> (rows counted, table size, how far it was counted)
        self._doc_freqs: dict[tuple[str, str], tuple[int, int, int]] = {}

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
        if restricted and matches > LEXICAL_MAX_MATCHES:
            return self._newest_passing(table, match, flt, limit)
        floor = self._floor(table, match) if matches > LEXICAL_MAX_MATCHES else 0
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

    def _floor(self, table: str, match: str) -> int:
        """The smallest rowid ranked for ``match``: its ``LEXICAL_MAX_MATCHES``-th newest match."""
        # FTS5 walks a doclist backwards by rowid cheaply; the floor bounds what bm25() scores.
        newest = self._catalog.read(
            f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET ?",
            [match, LEXICAL_MAX_MATCHES - 1],
            private=True,
        )
        return int(newest[0][0]) if newest else 0

    def _newest_passing(self, table: str, match: str, flt: SqlFilter, limit: int) -> list[tuple[str, float]]:
        """:meth:`search` of a restricted search whose terms match too many rows: the newest
        ``LEXICAL_MAX_MATCHES`` matches passing ``flt`` among the newest ``LEXICAL_SCAN_MAX``
        matches, ranked. A small project's matches are then its own newest, not the few of them
        among the store's newest (issue 34). Each row is checked against the filter once: the
        ranking walks the index alone and keeps the rows found."""
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
        if not passing:
            return []
        # "+rowid": the set is checked row by row, not handed to FTS5 as a lookup per rowid.
        ranked = self._catalog.read(
            f"SELECT rowid, -bm25({table}) FROM {table} WHERE {table} MATCH ? AND rowid >= ? "
            f"AND +rowid IN (SELECT value FROM json_each(?)) ORDER BY bm25({table}) LIMIT ?",
            [match, passing[-1], json.dumps(passing), limit],
            private=True,
        )
        ids = self._catalog.ids_by_rowid([r[0] for r in ranked], flt, private=True)
        return [(ids[rowid], float(score)) for rowid, score in ranked if rowid in ids]

    def doc_freqs(self, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """How many memories hold each of ``terms`` in their text (counted up to
        ``LEXICAL_MAX_MATCHES + 1``: rarer terms are told apart exactly, common ones tie), and the
        store's size (its largest rowid). Counts are remembered, as :meth:`search`'s are."""
        size = self._size()
        return {t: self._doc_freq("memories_fts", t, size, LEXICAL_MAX_MATCHES + 1) for t in terms}, size

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
        if known is not None and size <= known[1] * 1.1 + 100:
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
        if len(self._doc_freqs) > 50_000:
            self._doc_freqs.clear()
        self._doc_freqs[(table, term)] = (count, size, cap)
        return count


def fts_or(terms: Sequence[str]) -> str:
    """An FTS5 expression matching any of the terms (each quoted, so no operator can be injected)."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
