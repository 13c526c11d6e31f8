"""A term too common for ``bm25()`` to stay cheap (FTS5 counts its whole doclist for the IDF, a cost
that grows with the store: issue 34 at 1,000,000 memories) is ranked by the rest of BM25, each row's
occurrences and length read alone (remindful.engine.lexical.OneTerm): the same order as bm25(), in both full-text
tables, for unrestricted and restricted searches alike."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from remindful.engine import lexical
from remindful.engine.lexical import LEXICAL_MAX_MATCHES, OneTerm, averages
from remindful.engine.sqlfilter import SqlFilter, build_filter
from remindful.testing import open_fake

FILLER = ["lunch at noon", "the ferry was late", "a long note about the garden and the roses", "tax forms"]


def text(i: int) -> str:
    """Rows that hold the term 1 to 3 times, at lengths from 4 to 20 words, and rows without it."""
    if i % 5 == 4:
        return f"{FILLER[i % 4]} number {i}"
    return " ".join(["deploy"] * (1 + i % 3) + [FILLER[(i // 3) % 4]] * (1 + i % 4) + [f"item{i}"])


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = tmp_path_factory.mktemp("one-term") / "s"
    with open_fake(path) as memory:
        memory.store_batch(
            [
                {"content": text(i), "session_id": f"s{i // 10}", "scope": "project:small" if i % 7 == 0 else None}
                for i in range(900)
            ]
        )
        assert memory.flush()
        yield memory


def newest(catalog: Any, table: str, n: int = LEXICAL_MAX_MATCHES) -> list[int]:
    return [
        r[0]
        for r in catalog.read(f"SELECT rowid FROM {table} WHERE {table} MATCH 'deploy' ORDER BY rowid DESC LIMIT {n}")
    ]


@pytest.mark.parametrize("table", ["memories_fts", "context_fts"])
def test_the_rows_scores_are_bm25s_but_for_the_one_idf_factor(memory: Any, table: str) -> None:
    catalog = memory.engine.catalog
    rowids = newest(catalog, table)
    assert len(rowids) == LEXICAL_MAX_MATCHES
    want = dict(
        catalog.read(
            f"SELECT rowid, -bm25({table}) FROM {table} WHERE {table} MATCH 'deploy' "
            f"AND +rowid IN (SELECT value FROM json_each(?))",
            [json.dumps(rowids)],
        )
    )
    rows, tokens = averages(catalog, table)
    assert rows == catalog.read(f"SELECT count(*) FROM {table}_docsize")[0][0] and tokens > rows
    got = dict(OneTerm(catalog, table, "deploy", rows, tokens).rank(rowids, len(rowids)))
    assert got.keys() == want.keys()
    ratios = {f"{want[r] / got[r]:.9e}" for r in got}
    assert len(ratios) == 1  # one factor: the term's IDF (here below zero, which FTS5 makes 1e-6)
    assert len({f"{s:.9e}" for s in got.values()}) > 5  # and the rows do differ


def test_only_the_best_are_kept_best_first(memory: Any) -> None:
    catalog = memory.engine.catalog
    rows, tokens = averages(catalog, "memories_fts")
    ranked = OneTerm(catalog, "memories_fts", "deploy", rows, tokens).rank(newest(catalog, "memories_fts"), 20)
    assert len(ranked) == 20
    assert [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)


@pytest.mark.parametrize("table", ["memories_fts", "context_fts"])
@pytest.mark.parametrize("flt", [SqlFilter(), build_filter(scopes=["project:small"])], ids=["all", "small project"])
def test_a_search_finds_what_bm25_finds(
    memory: Any, monkeypatch: pytest.MonkeyPatch, table: str, flt: SqlFilter
) -> None:
    catalog = memory.engine.catalog
    restricted = flt.sql != "1"

    def search(ratio: int) -> list[tuple[str, float]]:
        monkeypatch.setattr(lexical, "ONE_TERM_RATIO", ratio)
        return catalog.lexical(["deploy"], flt, LEXICAL_MAX_MATCHES, table=table, restricted=restricted)

    ranked = lexical.OneTerm.rank
    used: list[int] = []
    monkeypatch.setattr(lexical.OneTerm, "rank", lambda self, *a: used.append(1) or ranked(self, *a))
    with_bm25 = search(10**12)
    assert not used
    without = search(0)
    assert used  # every term past LEXICAL_MAX_MATCHES rows counts as that common now
    assert len(without) == len(with_bm25) > 100  # every row ranked: the whole order is compared
    # The same rows in the same order, but for rows tied in BM25, which either may order its own way.
    every = dict(
        catalog.read(
            f"SELECT m.id, -bm25({table}) FROM {table} JOIN memories m ON m.rowid = {table}.rowid "
            f"WHERE {table} MATCH 'deploy'"
        )
    )
    assert [every[mid] for mid, _ in without] == pytest.approx([s for _, s in with_bm25], rel=1e-9)
    assert len({f"{s:.6e}" for _, s in with_bm25}) > 1


def test_a_term_that_is_not_that_common_is_ranked_by_bm25(memory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[int] = []
    ranked = lexical.OneTerm.rank
    monkeypatch.setattr(lexical.OneTerm, "rank", lambda self, *a: used.append(1) or ranked(self, *a))
    memory.engine.catalog.lexical(["deploy"], SqlFilter(), 20, table="memories_fts", restricted=False)
    assert not used  # 720 rows, 300 to rank: far from ONE_TERM_RATIO times them


def test_varints_read_as_sqlite_writes_them() -> None:
    assert lexical.varints(bytes([0x05, 0x81, 0x00, 0xFF, 0x7F])) == [5, 128, 16383]
    assert lexical.varints(bytes([0xFF] * 8 + [0x01])) == [(2**56 - 1) << 8 | 1]


def test_the_bar_is_set_by_the_rows_to_rank(memory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranking without bm25() costs by the row ranked: a small project's few matches clear the bar where
    an unrestricted search's 300 do not ('deploy' is in about 720 rows of 900)."""
    used: list[int] = []
    ranked = lexical.OneTerm.rank
    monkeypatch.setattr(
        lexical.OneTerm, "rank", lambda self, rowids, limit: used.append(len(rowids)) or ranked(self, rowids, limit)
    )
    monkeypatch.setattr(lexical, "ONE_TERM_RATIO", 3)
    search = memory.engine.catalog.lexical
    search(["deploy"], SqlFilter(), 20, table="memories_fts", restricted=False)
    assert not used  # about 720 < 3 x 300
    search(["deploy"], build_filter(scopes=["project:small"]), 20, table="memories_fts", restricted=True)
    assert used and used[0] < 200  # the project's own: about one in seven


def test_a_restricted_searchs_passing_rows_are_read_once_while_the_catalog_is_unchanged(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search whose hits fold into near-duplicates asks again for more candidates with the same
    terms and filter (three rounds at 1,000,000 memories): the newest matches passing the filter,
    each a lookup in the memories table, were read anew each time. A store, a delete or a move of
    scope changes them: they are read again then, and match what a fresh read finds."""
    with open_fake(tmp_path / "s") as memory:
        ids = memory.store_batch(
            [{"content": text(i), "scope": "project:small" if i % 3 == 0 else None} for i in range(500)]
        )
        assert memory.flush()
        catalog = memory.engine.catalog
        reads: list[str] = []
        read = catalog.read
        monkeypatch.setattr(catalog, "read", lambda sql, *a, **k: reads.append(sql) or read(sql, *a, **k))
        flt = build_filter(scopes=["project:small"])

        def search(limit: int) -> list[tuple[str, float]]:
            found: list[tuple[str, float]] = catalog.lexical(
                ["deploy"], flt, limit, table="memories_fts", restricted=True
            )
            return found

        def scans() -> int:
            return sum("AS newest JOIN memories" in sql for sql in reads)

        first = search(10)
        assert scans() == 1 and first
        assert search(40)[:10] == first and scans() == 1  # the next round: remembered
        memory.delete(first[0][0])  # an audit entry
        again = search(10)
        assert scans() == 2 and first[0][0] not in [mid for mid, _ in again]
        memory.store("deploy deploy the new one", scope="project:small")
        newest = search(10)
        assert scans() == 3
        assert search(10) == newest and scans() == 3  # remembered again
        assert lexical.LexicalSearch(catalog).search(["deploy"], flt, 10) == newest  # as a fresh reader finds
        assert len(ids) == 500


def bm25_and_one_term(
    catalog: Any, table: str, term: str, rowids: list[int]
) -> tuple[dict[int, float], dict[int, float]]:
    want = dict(
        catalog.read(
            f"SELECT rowid, -bm25({table}) FROM {table} WHERE {table} MATCH ? "
            f"AND +rowid IN (SELECT value FROM json_each(?))",
            [lexical.fts_or([term]), json.dumps(rowids)],
        )
    )
    rows, tokens = averages(catalog, table)
    return want, dict(OneTerm(catalog, table, term, rows, tokens).rank(rowids, len(rowids)))


def test_a_windows_count_takes_its_date_words_and_the_content_it_was_indexed_with(tmp_path: Any) -> None:
    """A window's text is its members' contents and its date words, and a member deleted by a large
    delete stays in its neighbours' windows, with the content it had, until they are mended: the
    window is ranked by that text, as bm25() ranks it (the counts add up over the parts)."""
    with open_fake(tmp_path / "s") as memory:
        ids = memory.store_batch([{"content": text(i), "session_id": f"s{i // 10}"} for i in range(200)])
        assert memory.flush()
        catalog = memory.engine.catalog
        # Rows holding "deploy" 1 to 3 times, deleted with their windows' mending left for later.
        catalog.delete_ids([ids[i] for i in range(0, 200, 6)], mend_later=True)
        assert catalog.read("SELECT count(*) FROM context_gone")[0][0] > 20
        assert catalog.read("SELECT count(*) FROM context_mend")[0][0] > 0
        windows = [r[0] for r in catalog.read("SELECT rowid FROM context_fts WHERE context_fts MATCH 'deploy'")]
        want, got = bm25_and_one_term(catalog, "context_fts", "deploy", windows)
        assert got.keys() == want.keys() and len(got) > 100
        assert len({f"{want[r] / got[r]:.9e}" for r in got}) == 1
        month = catalog.read("SELECT date FROM context_members LIMIT 1")[0][0].split()[1].lower()
        rows = [r[0] for r in catalog.read("SELECT rowid FROM context_fts WHERE context_fts MATCH ?", [month])]
        want, got = bm25_and_one_term(catalog, "context_fts", month, rows)
        assert got.keys() == want.keys() and len(got) > 100
        assert len({f"{want[r] / got[r]:.9e}" for r in got}) == 1
        assert len({f"{s:.9e}" for s in got.values()}) > 5  # the windows' lengths differ
