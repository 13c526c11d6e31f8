"""Full-text search over the PostgreSQL catalog's two lexical spaces, with a bounded cost.

The spaces are those of :mod:`remindful.engine.lexical`: ``memories_fts`` (a memory's own text,
``memories.content_tsv``) and ``context_fts`` (its session window, ``context_windows.tsv``), both
``tsvector`` columns of the ``english`` configuration under a GIN index, so that "deploying"
finds "deployed". A query matches any of its terms (each term's ``plainto_tsquery``, OR-ed) and is
ranked by ``ts_rank``. As on SQLite the cost stays bounded as the store grows: the rarest terms
are kept (:data:`~remindful.engine.lexical.LEXICAL_MAX_MATCHES` matches at most, their document
frequencies counted up to a cap and remembered), and when the rarest term alone matches more,
only its newest matches are ranked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from remindful.engine.lexical import DOC_FREQ_CAP, LEXICAL_MAX_MATCHES
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


class PostgresLexicalSearch:
    """Ranked full-text queries on one PostgreSQL catalog, and the document frequencies counted."""

    def __init__(self, catalog: Rows) -> None:
        self._catalog = catalog
        self._doc_freqs: dict[tuple[str, str], tuple[int, int, int]] = {}

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
        floor = 0
        if matches > LEXICAL_MAX_MATCHES:
            newest = self._catalog.read(
                f"SELECT rowid FROM {source} WHERE {column} @@ {query} ORDER BY rowid DESC LIMIT 1 OFFSET %s",
                [*kept, LEXICAL_MAX_MATCHES - 1],
            )
            floor = int(newest[0][0]) if newest else 0
        # The filter names memories' columns unqualified: no window column shares their names.
        where, params = pg_filter(flt)
        rows = self._catalog.read(
            f"SELECT m.id, ts_rank({alias}.{column}, t.q) AS score FROM {joined} CROSS JOIN (SELECT {query} AS q) t "
            f"WHERE {alias}.{column} @@ t.q AND {alias}.rowid >= %s AND {where} "
            "ORDER BY score DESC, m.rowid DESC LIMIT %s",
            [*kept, floor, *params, limit],
        )
        return [(str(mid), max(float(score), 1e-9)) for mid, score in rows]

    def doc_freqs(self, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """How many memories hold each term in their text (counted up to ``LEXICAL_MAX_MATCHES + 1``),
        and the store's size (its largest rowid)."""
        size = self._size()
        return {t: self._doc_freq("memories_fts", t, size, LEXICAL_MAX_MATCHES + 1) for t in terms}, size

    def windows(self, ids: Sequence[str]) -> dict[str, str]:
        """The session-window text of each of ``ids`` that has one, by id."""
        if not ids:
            return {}
        rows = self._catalog.read(
            "SELECT m.id, w.text FROM memories m JOIN context_windows w ON w.rowid = m.rowid WHERE m.id = ANY(%s)",
            (list(ids),),
        )
        return {str(mid): str(text) for mid, text in rows}

    def _size(self) -> int:
        return int(self._catalog.read("SELECT coalesce(max(rowid), 0) FROM memories")[0][0])

    def _rarest_terms(self, table: str, terms: Sequence[str]) -> tuple[list[str], int]:
        size = self._size()
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
        known = self._doc_freqs.get((table, term))
        if known is not None and size <= known[1] * 1.1 + 100:
            count, _, counted_to = known
            if count < counted_to or counted_to >= cap:
                return min(count, cap)
        source, column, _ = SPACES[table]
        count = int(
            self._catalog.read(
                f"SELECT count(*) FROM (SELECT 1 FROM {source} WHERE {column} @@ {tsquery(1)} LIMIT %s) x",
                [term, cap],
            )[0][0]
        )
        if len(self._doc_freqs) > 50_000:
            self._doc_freqs.clear()
        self._doc_freqs[(table, term)] = (count, size, cap)
        return count
