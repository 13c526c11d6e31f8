"""The session-window index holds no text (a contentless FTS5 table, :mod:`remindful.engine.windows`):
whatever happens to the memories (appends, a back-dated insert, an edit, deletes mended at once or
later, a rowid taken again), what it indexes is exactly the windows' text as rebuilt from their
recipes, so a removed window leaves no token behind."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from remindful.engine.catalog import SCHEMA_VERSION, Catalog
from remindful.engine.sqlfilter import build_filter
from remindful.testing import open_fake


def indexed_tokens(catalog: Catalog) -> set[tuple[str, int, int]]:
    """(term, rowid, offset) of every token the window index holds."""
    catalog.write(
        lambda c: c.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.ctx_vocab USING fts5vocab(main, context_fts, instance)"
        ),
        what="test vocabulary",
    )
    return {(t, int(d), int(o)) for t, d, o in catalog.read("SELECT term, doc, offset FROM temp.ctx_vocab")}


def expected_tokens(catalog: Catalog) -> set[tuple[str, int, int]]:
    """The same, for an index rebuilt from the windows' recipes."""
    rowids = [r[0] for r in catalog.read("SELECT rowid FROM context_members")]
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE w USING fts5(text, tokenize='porter unicode61 remove_diacritics 2')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(w, instance)")
    texts = catalog.write(
        lambda c: __import__("remindful.engine.windows", fromlist=["texts"]).texts(c, rowids), what="t"
    )
    conn.executemany("INSERT INTO w (rowid, text) VALUES (?, ?)", list(texts.items()))
    return {(t, int(d), int(o)) for t, d, o in conn.execute("SELECT term, doc, offset FROM v")}


def test_the_index_matches_the_windows_through_every_change(tmp_path: Path) -> None:
    start = datetime(2024, 3, 1, tzinfo=UTC)
    with open_fake(tmp_path / "s", **{"performance.async_indexing": False}) as memory:
        catalog = memory.engine.catalog
        items = [
            {"content": f"turn {i} about apples{i}", "session_id": "s", "timestamp": start + timedelta(minutes=i)}
            for i in range(12)
        ]
        ids = list(memory.store_batch(items))
        memory.store("loose note without a session")
        assert indexed_tokens(catalog) == expected_tokens(catalog)
        # back-dated into the middle: renumbers the rows after it
        memory.store("late pears", session_id="s", timestamp=start + timedelta(minutes=5, seconds=30))
        assert indexed_tokens(catalog) == expected_tokens(catalog)
        memory.update(ids[3], content="edited cherries")
        assert indexed_tokens(catalog) == expected_tokens(catalog)
        assert memory.delete(ids[6])
        assert indexed_tokens(catalog) == expected_tokens(catalog)
        catalog.delete_ids([ids[1], ids[9], ids[11]], mend_later=True)  # ids[11]: the newest session row
        assert indexed_tokens(catalog) == expected_tokens(catalog)  # the queued windows are still indexed whole
        memory.store("newcomer plums", session_id="s")  # may take a deleted row's rowid
        assert indexed_tokens(catalog) == expected_tokens(catalog)
        while catalog.mend_windows(2):
            assert indexed_tokens(catalog) == expected_tokens(catalog)
        words = " ".join(catalog.windows(list(dict(catalog.read("SELECT id, 1 FROM memories")))).values())
        assert "apples1 " not in words and "apples9" not in words and "apples6" not in words
        assert "edited cherries" in words and "apples3" not in words
        assert catalog.read("SELECT count(*) FROM context_gone")[0][0] == 0  # nothing left to mend: nothing kept
        hits = catalog.lexical(
            ["cherries"],
            build_filter(),
            10,
            table="context_fts",
        )
        assert ids[3] in {mid for mid, _ in hits}


def test_a_catalog_with_stored_window_text_is_upgraded_to_the_contentless_index(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with open_fake(path) as memory:
        memory.store_batch([{"content": f"w{i} bananas", "session_id": "s"} for i in range(5)])
    conn = sqlite3.connect(path / "catalog.sqlite3")
    conn.executescript(
        "DROP TABLE context_fts; DROP TABLE context_members;"
        "CREATE VIRTUAL TABLE context_fts USING fts5(text, tokenize='porter unicode61 remove_diacritics 2');"
        "INSERT INTO context_fts (rowid, text) SELECT rowid, content FROM memories;"
        "PRAGMA user_version=11;"
    )
    conn.close()
    with open_fake(path) as memory:
        catalog = memory.engine.catalog
        assert catalog.read("PRAGMA user_version")[0][0] == SCHEMA_VERSION
        sql = catalog.read("SELECT sql FROM sqlite_master WHERE name = 'context_fts'")[0][0]
        assert "content=''" in sql
        assert indexed_tokens(catalog) == expected_tokens(catalog)
        assert len(catalog.read("SELECT rowid FROM context_members")) == 5


def test_a_recipe_names_a_run_of_rowids_by_offset_and_length() -> None:
    from remindful.engine.windows import members_of, recipe

    assert recipe(105, [103, 104, 105, 106, 107]) == "-2+5"
    assert recipe(7, [7]) == "0+1"
    assert recipe(50, [12, 50, 51]) == "12,50,51"  # not a run (a back-dated row, a rowid taken again)
    for rowid, members in [(105, [103, 104, 105, 106, 107]), (7, [7]), (50, [12, 50, 51]), (3, [3, 4, 5])]:
        assert members_of(rowid, recipe(rowid, members)) == members
    assert members_of(105, "103,104,105") == [103, 104, 105]  # the form written before schema 15


def test_windows_written_before_schema_15_stay_readable_and_are_removed_whole(tmp_path: Path) -> None:
    """A catalog of schema 14 keeps its windows' recipes as lists of rowids: they are read, mended
    and removed as before, and the windows written from then on use runs."""
    path = tmp_path / "s"
    start = datetime(2024, 3, 1, tzinfo=UTC)
    with open_fake(path, **{"performance.async_indexing": False}) as memory:
        items = [
            {"content": f"turn {i} about figs{i}", "session_id": "s", "timestamp": start + timedelta(minutes=i)}
            for i in range(8)
        ]
        ids = list(memory.store_batch(items))
        recipes = memory.engine.catalog.read("SELECT members FROM context_members")
        assert recipes and all("+" in r[0] for r in recipes)  # 5 characters where a list took up to 40
    conn = sqlite3.connect(path / "catalog.sqlite3")
    members = {
        rowid: ",".join(str(rowid + int(o) + k) for k in range(int(n)))
        for rowid, (o, n) in ((r, m.split("+")) for r, m in conn.execute("SELECT rowid, members FROM context_members"))
    }
    conn.executemany("UPDATE context_members SET members = ? WHERE rowid = ?", [(m, r) for r, m in members.items()])
    conn.execute("PRAGMA user_version=14")
    conn.commit()
    conn.close()
    with open_fake(path, **{"performance.async_indexing": False}) as memory:
        catalog = memory.engine.catalog
        assert catalog.read("PRAGMA user_version")[0][0] == SCHEMA_VERSION
        assert indexed_tokens(catalog) == expected_tokens(catalog)
        assert memory.delete(ids[3])
        memory.update(ids[5], content="edited dates")
        assert indexed_tokens(catalog) == expected_tokens(catalog)
        words = " ".join(catalog.windows(list(dict(catalog.read("SELECT id, 1 FROM memories")))).values())
        assert "figs3" not in words and "edited dates" in words and "figs5" not in words
