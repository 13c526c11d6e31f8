"""The catalog's lookups keep their query plans as the store grows.

SQLite has no statistics on a fresh catalog, so it guesses that ``type = ?`` or ``created_at >= ?``
is selective and prefers their index over a list of ids: at 100,000 memories of one type a search
filtered by that type read the whole table three times (580 ms). These tests read the plans SQLite
chooses for the lookups search makes, and check their answers.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from catalog_trace import traced
from remindful.api import MemoryManager
from remindful.engine.catalog import Catalog
from remindful.engine.sqlfilter import SqlFilter, build_filter
from remindful.testing import open_fake

LIVE = SqlFilter("(expires_at IS NULL OR expires_at > ?)", (0.0,))


@pytest.fixture
def stored(tmp_path: Any) -> Iterator[tuple[MemoryManager, list[str]]]:
    with open_fake(tmp_path / "s") as memory:
        ids = memory.store_batch(
            [{"content": f"note {i}", "type": "action" if i % 5 else "workflow", "session_id": "s"} for i in range(40)]
        )
        memory.flush()
        yield memory, ids


def plans_of(catalog: Catalog, call: Any) -> list[str]:
    """The query plan of every statement ``call(catalog)`` runs, one string per statement."""
    statements: list[tuple[str, Sequence[Any]]] = []
    read = catalog.read

    def recording(sql: str, params: Sequence[Any] = (), **kwargs: Any) -> list[Any]:
        statements.append((sql, params))
        return read(sql, params, **kwargs)

    catalog.read = recording  # type: ignore[method-assign]
    try:
        call(catalog)
    finally:
        del catalog.read
    return [" | ".join(row[-1] for row in read(f"EXPLAIN QUERY PLAN {sql}", params)) for sql, params in statements]


def test_rows_for_ids_are_looked_up_by_id_whatever_the_filter(stored: tuple[MemoryManager, list[str]]) -> None:
    memory, ids = stored
    catalog = memory.engine.catalog
    broad = build_filter(types=["action"]) & LIVE
    wanted = [*ids[:10], "action_0_missing", ids[1]]
    rows = catalog.rows_passing(wanted, broad)
    assert set(rows) == {mid for mid in ids[:10] if mid.startswith("action_")}
    assert catalog.ids_passing(wanted, broad) == set(rows)
    for plan in plans_of(catalog, lambda c: (c.rows_passing(wanted, broad), c.ids_passing(wanted, broad))):
        assert "sqlite_autoindex_memories_1 (id=?)" in plan and "idx_memories_type" not in plan, plan


def test_pending_rows_drive_their_lookup(stored: tuple[MemoryManager, list[str]]) -> None:
    memory, ids = stored
    catalog = memory.engine.catalog
    catalog.mark_indexed(ids[3:4], False)
    top = catalog.read("SELECT max(rowid) FROM memories")[0][0]
    broad = build_filter(types=["action"]) & LIVE
    found, matrix = catalog.pending_embeddings(broad, top - 2)
    assert sorted(found) == sorted([ids[3], *(mid for mid in ids[-2:] if mid.startswith("action_"))])
    assert matrix is not None and matrix.shape == (len(found), memory.engine.embedder.dimension)
    assert catalog.pending_embeddings(broad, None)[0] == [ids[3]]  # without an index view: unindexed rows only
    for plan in plans_of(catalog, lambda c: c.pending_embeddings(broad, top - 2)):
        assert "SCAN memories" not in plan and "idx_memories_type" not in plan, plan


def test_a_bounded_count_of_a_broad_filter_reads_an_index_only(stored: tuple[MemoryManager, list[str]]) -> None:
    catalog = stored[0].engine.catalog
    for flt in (build_filter(types=["action"]), build_filter(since=0), build_filter(session_id="s")):
        live = flt & LIVE
        assert catalog.count(live) == catalog.count(flt) > 10
        assert catalog.count(live, at_most=10) == 10
        for plan in plans_of(catalog, lambda c, live=live: c.count(live, at_most=10)):
            assert "COVERING INDEX" in plan, plan
    catalog.write(lambda c: c.execute("UPDATE memories SET expires_at = ? WHERE rowid % 2 = 0", (time.time(),)))
    a_minute_on = SqlFilter("(expires_at IS NULL OR expires_at > ?)", (time.time() + 60,))
    actions = build_filter(types=["action"])
    assert 0 < catalog.count(actions & a_minute_on) < catalog.count(actions)


def test_lexical_matches_are_checked_by_rowid(stored: tuple[MemoryManager, list[str]]) -> None:
    catalog = stored[0].engine.catalog
    broad = build_filter(types=["action"]) & LIVE
    found = catalog.lexical(["note"], broad, 50, restricted=False)
    assert len(found) == 32 and all(mid.startswith("action_") for mid, _ in found)
    plans = plans_of(catalog, lambda c: c.lexical(["note"], broad, 50, restricted=False))
    check = plans[-1]  # after the doc frequencies and the ranking in the FTS index
    assert "SEARCH memories USING INTEGER PRIMARY KEY (rowid=?)" in check and "idx_memories" not in check, plans


def test_a_catalog_of_schema_4_gets_the_covering_indexes(tmp_path: Any) -> None:
    path = tmp_path / "catalog.sqlite3"
    Catalog(path).close()
    conn = sqlite3.connect(path)
    conn.executescript(
        "DROP INDEX idx_memories_type_time; DROP INDEX idx_memories_session_time; DROP INDEX idx_memories_time;"
        "CREATE INDEX idx_memories_type_created ON memories(type, created_at);"
        "CREATE INDEX idx_memories_session ON memories(session_id, created_at);"
        "CREATE INDEX idx_memories_created ON memories(created_at); PRAGMA user_version = 4;"
    )
    conn.close()
    catalog = Catalog(path)
    names = {r[0] for r in catalog.read("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"idx_memories_type_time", "idx_memories_session_time", "idx_memories_time"} <= names
    assert not names & {"idx_memories_type_created", "idx_memories_session", "idx_memories_created"}
    catalog.close()


def test_newest_first_listings_come_straight_from_an_index(stored: tuple[MemoryManager, list[str]]) -> None:
    memory, ids = stored
    catalog = memory.engine.catalog
    for flt in (SqlFilter(), build_filter(types=["action"]), build_filter(session_id="s")):
        rows = catalog.select_rows(flt, limit=3, offset=2)
        expected = [mid for mid in reversed(ids) if catalog.ids_passing([mid], flt)][2:5]
        assert [r.id for r in rows] == expected
        for plan in plans_of(catalog, lambda c, flt=flt: c.select_rows(flt, limit=3, offset=2)):
            assert "TEMP B-TREE" not in plan, plan  # no sort: an offset deep into 100,000 rows stays cheap


def test_a_restriction_scored_exactly_reads_each_row_once(tmp_path: Any) -> None:
    """A search restricted to 1,001-10,000 rows read its first 1,001 rows, counted, then read all of
    them again (~3 ms of 29 at 100k with 4,000 rows). Now one statement reads them, before and
    after a bounded count; and the answer equals a plain read."""
    with open_fake(tmp_path / "s") as memory:
        # 1,167 of 7,000 in "busy": under a fifth of the searched ones, so scored exactly.
        sessions = ["busy" if i % 6 == 0 else "rare" if i % 15 == 1 else "other" for i in range(7_000)]
        memory.store_batch([{"content": f"note {i}", "session_id": s} for i, s in enumerate(sessions)])
        memory.flush()
        # Not the process's first search, and its background work done: a first search asks the
        # snapshot's keeper, whose reads then hold the shared connection at times, and a read of the
        # search that finds it held runs on the thread's own, which the trace does not see (about
        # one run in five).
        memory.search("note 1")
        memory.engine.mirror.settle()
        catalog = memory.engine.catalog
        busy = build_filter(session_id="busy")
        statements: list[str] = []
        counted: list[int] = []
        with traced(catalog, statements.append):
            taken = catalog.filtered_embeddings_if(busy, 1000, 10_001, lambda n: counted.append(n) or True)
            refused = catalog.filtered_embeddings_if(busy, 1000, 1_100, lambda n: counted.append(n) is not None)
            few = catalog.filtered_embeddings_if(build_filter(session_id="rare"), 1000, 10_001, counted.append)
        every = catalog.filtered_embeddings(busy)
        searched: list[str] = []
        with traced(catalog, searched.append):
            assert memory.search("note 7", session_id="busy")
    reads = [s for s in searched if s.startswith("SELECT id, embedding FROM memories")]
    # One read of the restricted rows; the only other is of the few hits shown (their vectors, for
    # the near-duplicate collapse and the calibrated score), by id.
    assert len([s for s in reads if "session_id = 'busy'" in s]) == 1, searched
    assert all("WHERE id IN (" in s for s in reads if "session_id = 'busy'" not in s), searched
    assert counted == [1_167, 1_100]  # the count stops at its bound; no count for 467 rows
    assert taken is not None and taken[0] == every[0] and (taken[1] == every[1]).all()
    assert refused is None and few is not None and len(few[0]) == 467
    rows_read = [s for s in statements if s.startswith("SELECT id, embedding FROM memories")]
    assert len(rows_read) == 3, rows_read  # one statement per call
