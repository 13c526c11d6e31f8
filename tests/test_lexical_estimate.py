"""Whether a term is common enough to rank without ``bm25()`` (remindful.engine.lexical.OneTerm) is
decided from an estimate of how many rows it matches, read at a bounded cost (counting them is the
cost being avoided): its newest matches and a sample of the rowids below them. A term dense among the
newest rows only (a name in this week's sessions) is not taken for a common one, and a term spread in
clusters (sessions) is estimated within a factor of its true count."""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from remindful.engine import lexical
from remindful.engine.lexical import LEXICAL_MAX_MATCHES, LexicalSearch
from remindful.engine.schema import MEMORIES_FTS_DDL
from remindful.engine.sqlfilter import SqlFilter


class Rows:
    """The catalog's two read methods over a bare memories table and its full-text index, as the
    catalog creates it: tens of thousands of rows in a fraction of a second. ``reads`` counts the
    queries run."""

    def __init__(self, texts: Sequence[str]) -> None:
        self._conn = sqlite3.connect(":memory:")
        self._conn.execute("CREATE TABLE memories (id TEXT NOT NULL, content TEXT NOT NULL)")
        self._conn.executemany(
            "INSERT INTO memories (rowid, id, content) VALUES (?, ?, ?)",
            [(rowid, f"m{rowid}", text) for rowid, text in enumerate(texts, start=1)],
        )
        # Indexed at once, which is some ten times faster than row by row through the triggers.
        self._conn.executescript(f"{MEMORIES_FTS_DDL}\nINSERT INTO memories_fts(memories_fts) VALUES ('rebuild');")
        self.reads = 0

    def read(self, sql: str, params: Sequence[Any] = (), *, private: bool = False) -> list[Any]:
        self.reads += 1
        return self._conn.execute(sql, params).fetchall()

    def ids_by_rowid(self, rowids: Sequence[int], flt: SqlFilter, *, private: bool = False) -> dict[int, str]:
        sql = f"SELECT rowid, id FROM memories WHERE rowid IN (SELECT value FROM json_each(?)) AND {flt.sql}"
        return dict(self.read(sql, [json.dumps(list(rowids)), *flt.params]))

    def change_marks(self, *, private: bool = False) -> tuple[int, int]:
        return 0, int(self._conn.execute("SELECT coalesce(max(rowid), 0) FROM memories").fetchone()[0])

    def matches(self, term: str) -> list[int]:
        """The rowids matching ``term``, newest first (all of them: what the estimate does not read)."""
        sql = "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rowid DESC"
        return [r[0] for r in self._conn.execute(sql, [lexical.fts_or([term])])]


def table(size: int, holds: Callable[[int], bool]) -> Rows:
    """``size`` rows; those whose rowid ``holds`` hold 'caroline', the others only filler."""
    return Rows([f"{'caroline ' if holds(rowid) else ''}lunch at noon, item {rowid}" for rowid in range(1, size + 1)])


def ranks_with_one_term(rows: Rows, monkeypatch: pytest.MonkeyPatch, *, restricted: bool) -> bool:
    """Whether a search for 'caroline' ranks its rows with OneTerm (else with bm25())."""
    used: list[int] = []
    rank = lexical.OneTerm.rank
    monkeypatch.setattr(lexical.OneTerm, "rank", lambda self, *a: used.append(1) or rank(self, *a))
    found = LexicalSearch(rows).search(["caroline"], SqlFilter(), 20, table="memories_fts", restricted=restricted)
    assert len(found) == 20
    return bool(used)


@pytest.mark.parametrize("restricted", [False, True], ids=["unrestricted", "restricted"])
def test_a_term_dense_among_the_newest_rows_only_is_not_taken_for_a_common_one(
    monkeypatch: pytest.MonkeyPatch, restricted: bool
) -> None:
    """The newest 400 of 30,000 rows hold the term, and one in a thousand of the others: 429 rows,
    below the bar of 10 x 300 rows to rank. Its newest 300 matches reach back 300 rows only, which
    extrapolated to the table make 30,000: how far they reach back does not tell."""
    monkeypatch.setattr(lexical, "ONE_TERM_RATIO", 10)
    rows = table(30_000, lambda rowid: rowid > 29_600 or rowid % 1000 == 0)
    assert len(rows.matches("caroline")) == 429
    assert not ranks_with_one_term(rows, monkeypatch, restricted=restricted)


@pytest.mark.parametrize("restricted", [False, True], ids=["unrestricted", "restricted"])
def test_a_term_spread_evenly_that_is_that_common_is_ranked_with_one_term(
    monkeypatch: pytest.MonkeyPatch, restricted: bool
) -> None:
    """One row in five of 30,000 (6,000): twice the bar of 10 x 300 rows to rank."""
    monkeypatch.setattr(lexical, "ONE_TERM_RATIO", 10)
    rows = table(30_000, lambda rowid: rowid % 5 == 0)
    assert ranks_with_one_term(rows, monkeypatch, restricted=restricted)


def sessions(size: int, share: float, seed: int) -> Rows:
    """Sessions of 20 to 60 rows; a ``share`` of them about the term (4 rows in 5 hold it), the
    newest ones among them."""
    rng = random.Random(seed)
    holds: set[int] = set()
    start = 1
    while start <= size:
        length = rng.randint(20, 60)
        if start + length > size - 500 or rng.random() < share:
            holds.update(r for r in range(start, start + length) if rng.random() < 0.8)
        start += length
    return table(size, holds.__contains__)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("share", [0.1, 0.3, 0.6])
def test_a_term_in_sessions_is_estimated_within_a_factor_of_two(share: float, seed: int) -> None:
    rows = sessions(40_000, share, seed)
    matches = rows.matches("caroline")
    newest = matches[:LEXICAL_MAX_MATCHES]
    if share < 0.5:  # the newest matches are a cluster: how far back they reach tells over twice the count
        assert LEXICAL_MAX_MATCHES * 40_000 / (40_000 - newest[-1] + 1) > 2 * len(matches)
    estimated = lexical.estimated_rows(rows, "memories_fts", "caroline", newest)
    assert 0.5 < estimated / len(matches) < 2


def test_a_term_rare_below_its_newest_matches_is_counted_exactly() -> None:
    rows = table(30_000, lambda rowid: rowid > 29_000 or rowid % 97 == 0)
    matches = rows.matches("caroline")
    assert lexical.estimated_rows(rows, "memories_fts", "caroline", matches[:LEXICAL_MAX_MATCHES]) == len(matches)


def test_the_estimate_is_a_few_queries_made_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """ONE_TERM_SAMPLES queries (of at most ONE_TERM_SAMPLE_ROWS rows each), remembered as the
    document frequencies are: the next search of the term makes none."""
    monkeypatch.setattr(lexical, "ONE_TERM_RATIO", 10)
    rows = table(30_000, lambda rowid: rowid % 2 == 0)
    made: list[int] = []
    estimate = lexical.estimated_rows

    def counted(*args: Any) -> float:
        before = rows.reads
        found = estimate(*args)
        made.append(rows.reads - before)
        return found

    monkeypatch.setattr(lexical, "estimated_rows", counted)
    search = LexicalSearch(rows)
    for _ in range(2):
        search.search(["caroline"], SqlFilter(), 20, table="memories_fts", restricted=False)
    assert made == [lexical.ONE_TERM_SAMPLES]
