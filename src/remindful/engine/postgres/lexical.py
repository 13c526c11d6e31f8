"""Full-text search over the PostgreSQL catalog's two lexical spaces, with a bounded cost.

The spaces are those of :mod:`remindful.engine.lexical`: ``memories_fts`` (a memory's own text,
``memories.content_tsv``) and ``context_fts`` (its session window, ``context_windows.tsv``), both
``tsvector`` columns of the ``english`` configuration under a GIN index, so that "deploying"
finds "deployed". A query matches any of its terms (each term's ``plainto_tsquery``, OR-ed) and is
ranked by ``ts_rank``. As on SQLite the cost stays bounded as the store grows: the rarest terms
are kept (:data:`~remindful.engine.lexical.LEXICAL_MAX_MATCHES` matches at most, their document
frequencies counted up to a cap and remembered), and when the rarest term alone matches more,
only its newest matches passing the filter (among its newest
:data:`~remindful.engine.lexical.LEXICAL_SCAN_MAX`) are ranked.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from remindful.engine.lexical import DOC_FREQ_CAP, LEXICAL_MAX_MATCHES, LEXICAL_SCAN_MAX
from remindful.engine.postgres.dialect import pg_filter
from remindful.engine.postgres.schema import TEXT_SEARCH_CONFIG
from remindful.engine.sqlfilter import SqlFilter


class Rows(Protocol):
    """What full-text search reads through: the catalog's read."""

    def read(self, sql: str, params: Sequence[Any] = (), *, private: bool = False) -> list[Any]: ...


#: Each lexical space: (its table, the column holding its tsvector, how it joins ``memories``).
SPACES = {
    "memories_fts": ("memories", "content_tsv", "memories m"),
    "context_fts": ("context_windows", "tsv", "context_windows w JOIN memories m ON m.rowid = w.rowid"),
}


def tsquery(count: int) -> str:
    """SQL for a tsquery matching any of ``count`` terms (each a ``%s`` parameter)."""
    one = f"plainto_tsquery('{TEXT_SEARCH_CONFIG}', %s)"
    return "(" + " || ".join([one] * count) + ")"


#: How long (seconds) the store's size last read stands in for a new read when every count a call
#: needs is remembered: a search's two spaces and its document frequencies then share one read. The
#: catalog forgets it when it commits a write (:meth:`PostgresLexicalSearch.forget_size`); another
#: machine's writes are seen this much later at most, as if the read had come that much sooner.
SIZE_REUSE_S = 0.25


class PostgresLexicalSearch:
    """Ranked full-text queries on one PostgreSQL catalog, and the document frequencies counted."""

    def __init__(self, catalog: Rows) -> None:
        self._catalog = catalog
        self._doc_freqs: dict[tuple[str, str], tuple[int, int, int]] = {}
        self._size = 0  # the store's size (largest rowid) when last read: remembered counts age with it
        self._size_at = float("-inf")  # when (time.monotonic()) it was read

    def search(
        self, terms: Sequence[str], flt: SqlFilter, limit: int, *, table: str = "memories_fts"
    ) -> list[tuple[str, float]]:
        """Matches (any of ``terms``, stemmed) among rows passing ``flt``: (id, score > 0) best first."""
        if table not in SPACES:
            raise ValueError(f"unknown lexical table {table!r}")
        if not terms:
            return []
        source, column, joined = SPACES[table]
        alias = "m" if source == "memories" else "w"
        kept, matches = self._rarest_terms(table, terms)
        query = tsquery(len(kept))
        # The filter names memories' columns unqualified: no window column shares their names.
        where, params = pg_filter(flt)
        if matches > LEXICAL_MAX_MATCHES:
            # The newest LEXICAL_MAX_MATCHES matches passing the filter among the newest
            # LEXICAL_SCAN_MAX (as on SQLite: a small project's own, not the few of them among the
            # store's newest), ranked, in one statement: found by one walk down the key, where a
            # second statement ranking the rows above the last one found walked them again, testing
            # each against the query (for a term of a few hundred matches, every row above it).
            rows = self._catalog.read(
                f"SELECT ranked.id, ts_rank(ranked.v, {query}) AS score FROM (SELECT m.id, m.rowid, newest.v "
                f"FROM (SELECT rowid, {column} AS v FROM {source} WHERE {column} @@ {query} "
                f"ORDER BY rowid DESC LIMIT %s) AS newest JOIN memories m ON m.rowid = newest.rowid "
                f"WHERE {where} ORDER BY newest.rowid DESC LIMIT %s) AS ranked "
                "ORDER BY score DESC, ranked.rowid DESC LIMIT %s",
                [*kept, *kept, LEXICAL_SCAN_MAX, *params, LEXICAL_MAX_MATCHES, limit],
            )
        else:
            # The query written out where it is matched (not joined from a subquery): the planner
            # then reads the GIN index for it, where a joined tsquery made it scan the table.
            rows = self._catalog.read(
                f"SELECT m.id, ts_rank({alias}.{column}, {query}) AS score FROM {joined} "
                f"WHERE {alias}.{column} @@ {query} AND {where} "
                "ORDER BY score DESC, m.rowid DESC LIMIT %s",
                [*kept, *kept, *params, limit],
            )
        return [(str(mid), max(float(score), 1e-9)) for mid, score in rows]

    def doc_freqs(self, terms: Sequence[str], upto: int | None = None) -> tuple[dict[str, int], int]:
        """How many memories hold each term in their text (counted up to ``upto``, by default
        ``LEXICAL_MAX_MATCHES + 1``), and the store's size (its largest rowid)."""
        cap = upto or LEXICAL_MAX_MATCHES + 1
        size = self._counts("memories_fts", terms, cap)
        return {t: self._known("memories_fts", t, cap) for t in terms}, size

    def windows(self, ids: Sequence[str]) -> dict[str, str]:
        """The session-window text of each of ``ids`` that has one, by id."""
        if not ids:
            return {}
        rows = self._catalog.read(
            "SELECT m.id, w.text FROM memories m JOIN context_windows w ON w.rowid = m.rowid WHERE m.id = ANY(%s)",
            (list(ids),),
        )
        return {str(mid): str(text) for mid, text in rows}

    def _rarest_terms(self, table: str, terms: Sequence[str]) -> tuple[list[str], int]:
        """As on SQLite (:mod:`remindful.engine.lexical`); the counts a search needs are read in
        one statement with the store's size (a round trip to the server costs more than a count)."""
        size = self._counts(table, terms, LEXICAL_MAX_MATCHES + 1)
        counted = sorted((self._known(table, t, LEXICAL_MAX_MATCHES + 1), -len(t), t) for t in terms)
        if counted[0][0] > LEXICAL_MAX_MATCHES:
            self._counts(table, terms, DOC_FREQ_CAP, size)
            counted = sorted((self._known(table, t, DOC_FREQ_CAP), -len(t), t) for t in terms)
        kept: list[str] = []
        total = 0
        for count, _, term in counted:
            if kept and total + count > LEXICAL_MAX_MATCHES:
                break
            kept.append(term)
            total += count
        return kept, total

    def _known(self, table: str, term: str, cap: int) -> int:
        count, _, _ = self._doc_freqs[(table, term)]
        return min(count, cap)

    def _fresh(self, table: str, term: str, size: int, cap: int) -> bool:
        known = self._doc_freqs.get((table, term))
        if known is None or size > known[1] * 1.1 + 100:
            return False
        count, _, counted_to = known
        return count < counted_to or counted_to >= cap

    def forget_size(self) -> None:
        """The store changed (a write committed here): the next call reads its size again."""
        self._size_at = float("-inf")

    def _counts(self, table: str, terms: Sequence[str], cap: int, size: int | None = None) -> int:
        """The counts (up to ``cap``) of the rows of ``table`` holding each of ``terms`` not
        remembered, and the store's size, in one statement; remember them; the size. The store
        keeps the counts every process made (``remindful_term_counts``, schema 10: on a team store
        of the memories every person sees); only a term none counted lately is counted now. Each
        space asks for its own: a search asks the two at once, each on its connection
        (:mod:`remindful.engine.retrieval.search`). With nothing to ask, a size read less than
        :data:`SIZE_REUSE_S` ago is the answer."""
        known = self._size if size is None else size
        wanted = [t for t in sorted(set(terms)) if not self._fresh(table, t, known, cap)]
        if not wanted and size is None and time.monotonic() - self._size_at < SIZE_REUSE_S:
            return self._size
        read_at = time.monotonic()
        if wanted:
            # The store's counts (schema 10's term_counts, shared by every process): only terms
            # no process counted since the store grew by a tenth are counted now.
            rows = self._catalog.read(
                "SELECT term, n, size FROM remindful_term_counts(%s, %s, %s)", [table, wanted, cap]
            )
            size = self._size = int(rows[0][2])
        else:
            rows = []
            size = self._size = int(self._catalog.read("SELECT coalesce(max(rowid), 0) FROM memories")[0][0])
        self._size_at = read_at
        if len(self._doc_freqs) > 50_000:
            self._doc_freqs.clear()
        for term, count, _ in rows:
            self._doc_freqs[(table, str(term))] = (int(count), size, cap)
        return size
