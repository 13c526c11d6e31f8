"""How the catalog lays its rows out on disk (issue 34): a row committed without its vector keeps
the room the vector will take, the content hash index holds a prefix, and ``size_bytes`` counts a
vector as it is stored."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from remindful.engine.catalog import SCHEMA_VERSION
from remindful.testing import open_fake
from test_background import GatedEmbedder


def rows(path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(path / "catalog.sqlite3") as conn:
        return conn.execute(sql).fetchall()


def test_a_row_committed_without_its_vector_keeps_room_for_it(tmp_path: Path) -> None:
    embedder = GatedEmbedder()
    embedder.gate.set()
    with open_fake(tmp_path / "s", embedder=embedder) as memory:
        memory.store("the first memory, embedded")
        assert memory.flush()
        embedder.gate.clear()
        later = memory.store("committed while the embedder waits")
        catalog = memory.engine.catalog
        room, vector = catalog.read("SELECT length(vector_room), embedding FROM memories WHERE id = ?", [later])[0]
        assert vector is None and room == 384 + 5  # what the int8 vector will take
        embedder.gate.set()
        assert memory.flush()
        room, size = catalog.read("SELECT vector_room, length(embedding) FROM memories WHERE id = ?", [later])[0]
        assert room is None and size == 384 + 5


def test_a_fresh_stores_first_rows_keep_room_for_their_vectors_and_its_pages_stay_full(tmp_path: Path) -> None:
    """Before any vector is stored, the room is the embedder's: a bulk import into a new store
    had none, and every row grew in place when its vector came (the table's pages split, 2.6 times
    as many)."""
    embedder = GatedEmbedder()  # closed: nothing is embedded before the rows are all committed
    with open_fake(tmp_path / "s", embedder=embedder) as memory:
        ids = memory.store_batch(
            [
                {"content": f"turn {i} of the import, about the deploy and the lunch", "session_id": f"s{i // 20}"}
                for i in range(1500)
            ]
        )
        catalog = memory.engine.catalog
        assert catalog.read("SELECT length(vector_room) FROM memories WHERE id = ?", [ids[0]]) == [(384 + 5,)]
        pages = "SELECT count(*) FROM dbstat WHERE name = 'memories'"
        [(written,)] = catalog.read(pages)
        embedder.gate.set()
        assert memory.flush()
        [(embedded,)] = catalog.read(pages)
        assert catalog.read("SELECT count(*) FROM memories WHERE embedding IS NULL OR vector_room IS NOT NULL") == [
            (0,)
        ]
    assert embedded <= written + 1


def test_a_row_stored_with_its_vector_keeps_no_room(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", **{"performance.defer_embedding": False}) as memory:
        memory.store("one")
        memory.store("two")
    assert rows(tmp_path / "s", "SELECT vector_room FROM memories") == [(None,), (None,)]


def test_content_hashes_are_looked_up_through_a_prefix_index(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        memory.store("the deploy needs AWS_PROFILE=prod")
        assert memory.flush()
        catalog = memory.engine.catalog
        [chash] = [r[0] for r in catalog.read("SELECT content_hash FROM memories")]
        assert list(catalog.vectors_by_hash([chash, "0" * 64])) == [chash]
        with sqlite3.connect(tmp_path / "s" / "catalog.sqlite3") as conn:
            plan = " ".join(
                str(r[-1])
                for r in conn.execute(
                    "EXPLAIN QUERY PLAN SELECT embedding FROM memories WHERE substr(content_hash, 1, 16) IN (?)",
                    [chash[:16]],
                )
            )
    assert "idx_memories_hash16" in plan
    assert not rows(tmp_path / "s", "SELECT name FROM sqlite_master WHERE name = 'idx_memories_hash'")


def test_the_upgrade_to_13_recounts_vectors_as_stored_and_adds_the_room(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with open_fake(path) as memory:
        memory.store_batch([{"content": f"note {i}"} for i in range(3)])
        assert memory.flush()
    stored = rows(path, "SELECT id, size_bytes FROM memories ORDER BY id")
    # A schema-12 catalog: no room column, the full-hash index, vectors counted as float32.
    with sqlite3.connect(path / "catalog.sqlite3") as conn:
        conn.executescript(
            "ALTER TABLE memories DROP COLUMN vector_room; DROP INDEX idx_memories_hash16;"
            "CREATE INDEX idx_memories_hash ON memories(content_hash);"
            "UPDATE memories SET size_bytes = size_bytes - 389 + 1536; PRAGMA user_version = 12;"
        )
    with open_fake(path) as memory:
        assert memory.search("note 1")
    assert rows(path, "SELECT id, size_bytes FROM memories ORDER BY id") == stored
    assert rows(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    names = {r[0] for r in rows(path, "SELECT name FROM sqlite_master WHERE name LIKE 'idx_memories_hash%'")}
    assert names == {"idx_memories_hash16"}
    assert "vector_room" in {r[1] for r in rows(path, "PRAGMA table_info(memories)")}


def test_a_new_catalog_gives_its_free_pages_back_when_it_closes(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with open_fake(path) as memory:
        ids = memory.store_batch([{"content": f"note {i} " + "about the deploy " * 20} for i in range(600)])
        assert memory.flush()
        memory.delete_many(ids[:500])
        assert rows(path, "PRAGMA freelist_count")[0][0] > 50  # still open: free, for later writes
    assert rows(path, "PRAGMA auto_vacuum") == [(2,)]  # incremental
    assert rows(path, "PRAGMA freelist_count") == [(0,)]


def test_an_older_catalog_keeps_its_free_pages_and_closes_as_before(tmp_path: Path) -> None:
    path = tmp_path / "s"
    path.mkdir()
    with sqlite3.connect(path / "catalog.sqlite3") as conn:  # made as before: no auto-vacuum
        conn.execute("PRAGMA journal_mode=WAL")
    with open_fake(path) as memory:
        ids = memory.store_batch([{"content": f"note {i} " + "about the deploy " * 20} for i in range(600)])
        assert memory.flush()
        memory.delete_many(ids[:500])
    assert rows(path, "PRAGMA auto_vacuum") == [(0,)]
    assert rows(path, "PRAGMA freelist_count")[0][0] > 50
    with open_fake(path) as memory:
        assert len(memory.list(limit=1000)) == 100
