"""What the PostgreSQL catalog does beyond the shared contract (``test_catalog_contract.py``): its
schema versions, its advisory locks, a server that goes away, and a password that is never shown."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest_postgres import PostgresCluster
from remindful.engine.catalog import MemoryRow
from remindful.engine.redact import StoreRedactor, build_redactor
from remindful.engine.sqlfilter import SqlFilter, build_filter
from remindful.errors import StorageError

psycopg = pytest.importorskip("psycopg")

from remindful.engine.postgres.catalog import PostgresCatalog, shown_url  # noqa: E402
from remindful.engine.postgres.schema import MIGRATIONS, SCHEMA_VERSION, VERSION_DDL  # noqa: E402


def open_catalog(url: str, tmp_path: Path) -> PostgresCatalog:
    return PostgresCatalog(url, redaction=StoreRedactor(build_redactor(), tmp_path))


def memory(mid: str, at: float = 1_700_000_000.0) -> MemoryRow:
    return MemoryRow(
        id=mid,
        type="fact",
        content=f"memory {mid}",
        metadata="{}",
        source="test",
        memory_class="semantic",
        session_id="s",
        created_at=at,
        content_hash=mid,
        scope="user",
    )


def insert(catalog: PostgresCatalog, *rows: MemoryRow) -> None:
    catalog.write(lambda conn: catalog.insert_memories(conn, rows))


def columns(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'memories'")
        return {r[0] for r in rows}


# -- the schema -----------------------------------------------------------------------------------


def test_an_older_schema_is_migrated_at_open_keeping_its_rows(postgres_url: str, tmp_path: Path) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # a database left at version 1
        conn.execute(VERSION_DDL)
        for statement in MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version (version) VALUES (1)")
        conn.execute(
            "INSERT INTO memories (id, type, content, metadata, source, memory_class, created_at, content_hash, scope) "
            "VALUES ('old', 'fact', 'written before origin', '{\"role\": \"assistant\"}', 'hook', 'semantic', 1.0, "
            "'h', 'user')"
        )
    assert "origin" not in columns(postgres_url)

    catalog = open_catalog(postgres_url, tmp_path)
    try:
        assert catalog.schema_version() == SCHEMA_VERSION == 12
        assert "origin" in columns(postgres_url)
        options = dict(catalog.read("SELECT relname, reloptions FROM pg_class WHERE relname LIKE 'idx_%%_fts'"))
        assert options == {name: ["gin_pending_list_limit=256"] for name in ("idx_memories_fts", "idx_context_fts")}
        assert catalog.read("SELECT count(*) FROM project_bindings") == [(0,)]
        old = catalog.get_rows(["old"])["old"]
        assert old.content == "written before origin"
        assert old.origin == "assistant"  # derived from its source and metadata, as SQLite's upgrade does
        assert catalog.type_counts() == {"fact": 1}
    finally:
        catalog.close()


def test_processes_opening_a_new_database_at_once_create_it_once(postgres_url: str, tmp_path: Path) -> None:
    errors: list[BaseException] = []
    opened: list[PostgresCatalog] = []

    def run() -> None:
        try:
            opened.append(open_catalog(postgres_url, tmp_path))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    for catalog in opened:
        catalog.close()


def test_a_newer_schema_is_refused_with_one_line(postgres_url: str, tmp_path: Path) -> None:
    open_catalog(postgres_url, tmp_path).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(StorageError, match=rf"newer remindful \(schema {SCHEMA_VERSION + 1} > {SCHEMA_VERSION}\)"):
        open_catalog(postgres_url, tmp_path)


# -- advisory locks -------------------------------------------------------------------------------


def test_one_holder_of_each_advisory_lock_across_processes(postgres_url: str, tmp_path: Path) -> None:
    first, second = open_catalog(postgres_url, tmp_path), open_catalog(postgres_url, tmp_path)
    try:
        with first.exclusive("drain") as held:
            assert held
            with second.exclusive("drain", wait=False) as again:
                assert not again
            with second.exclusive("reindex", wait=False) as other:
                assert other  # another job's lock is another lock
        with second.exclusive("drain", wait=False) as after:
            assert after
    finally:
        first.close()
        second.close()


def test_a_restore_holding_the_store_lock_stops_writes_until_it_lets_go(postgres_url: str, tmp_path: Path) -> None:
    writer, restorer = open_catalog(postgres_url, tmp_path), open_catalog(postgres_url, tmp_path)
    done = threading.Event()
    try:
        with restorer.exclusive("store"):
            thread = threading.Thread(target=lambda: (insert(writer, memory("w")), done.set()))
            thread.start()
            assert not done.wait(0.5)  # the write waits for the restore
            assert restorer.existing_ids(["w"]) == set()
        thread.join(30)
        assert done.is_set() and writer.existing_ids(["w"]) == {"w"}
    finally:
        writer.close()
        restorer.close()


# -- a server that goes away --------------------------------------------------------------------------


def test_a_write_after_the_server_restarted_reconnects(
    postgres_cluster: PostgresCluster, postgres_url: str, tmp_path: Path
) -> None:
    catalog = open_catalog(postgres_url, tmp_path)
    try:
        insert(catalog, memory("before"))
        postgres_cluster.kill()
        postgres_cluster.start()
        insert(catalog, memory("after"))  # the broken connection is replaced, the write retried
        assert catalog.existing_ids(["before", "after"]) == {"before", "after"}
        assert catalog.type_counts() == {"fact": 2}
    finally:
        catalog.close()


def test_a_server_that_does_not_answer_is_one_clear_error_without_the_password(tmp_path: Path) -> None:
    from conftest_chroma import free_port

    url = f"postgresql://alice:hunter2-secret@127.0.0.1:{free_port()}/memory"
    with pytest.raises(StorageError) as caught:
        PostgresCatalog(url, redaction=StoreRedactor(build_redactor(), tmp_path), connect_timeout=1)
    assert "does not answer" in str(caught.value)
    assert "hunter2" not in str(caught.value) and "postgresql://alice:***@127.0.0.1" in str(caught.value)


def test_the_password_is_never_shown(postgres_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert shown_url("postgresql://bob:s3cr3t@db.example:5432/mem?sslmode=require") == (
        "postgresql://bob:***@db.example:5432/mem?sslmode=require"
    )
    assert shown_url("postgresql://bob@db.example/mem") == "postgresql://bob@db.example/mem"
    # trust authentication accepts any password: the catalog's own messages must not carry it
    with_password = postgres_url.replace("remindful@", "remindful:p4ssw0rd-xyz@")
    caplog.set_level(logging.DEBUG)
    catalog = open_catalog(with_password, tmp_path)
    try:
        assert "p4ssw0rd" not in catalog.shown_url
        with pytest.raises(StorageError) as caught:
            catalog.count(SqlFilter("json_each(metadata) = ?", ("x",)))
        assert "p4ssw0rd" not in str(caught.value)
        with pytest.raises(StorageError) as failed:
            catalog.read("SELECT * FROM no_such_table")
        assert "p4ssw0rd" not in str(failed.value) and "***" in str(failed.value)
    finally:
        catalog.close()
    assert "p4ssw0rd" not in caplog.text


def test_a_filter_on_a_path_the_catalog_cannot_read_is_one_line(postgres_url: str, tmp_path: Path) -> None:
    catalog = open_catalog(postgres_url, tmp_path)
    try:
        assert catalog.count(build_filter(filters={"tool": "Bash"})) == 0  # (metadata filters are read)
        with pytest.raises(StorageError, match="a filter the PostgreSQL catalog cannot read") as refused:
            catalog.count(SqlFilter("json_each(metadata) = ?", ("x",)))
        assert "\n" not in str(refused.value)
    finally:
        catalog.close()


def test_author_is_recorded(postgres_url: str, tmp_path: Path) -> None:
    catalog = open_catalog(postgres_url, tmp_path)
    try:
        catalog.write(lambda conn: catalog.insert_memories(conn, [memory("a")], author="alice"))
        assert catalog.read("SELECT author, version FROM memories WHERE id = 'a'") == [("alice", 1)]
        assert json.loads(catalog.get_rows(["a"])["a"].metadata) == {}
    finally:
        catalog.close()


def test_the_catalog_url_setting_takes_postgres_urls_and_never_repeats_a_bad_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from remindful.config import load_settings
    from remindful.errors import ConfigError

    assert load_settings().catalog.url is None  # the embedded default
    monkeypatch.setenv("REMINDFUL_CATALOG__URL", "postgresql://team@db.example:5432/memory")
    assert load_settings().catalog.url == "postgresql://team@db.example:5432/memory"
    monkeypatch.setenv("REMINDFUL_CATALOG__URL", "mysql://team:hunter2@db.example/memory")
    with pytest.raises(ConfigError, match=r"catalog\.url.*postgresql://USER@HOST") as caught:
        load_settings()
    assert "hunter2" not in str(caught.value)


def test_a_delivery_replayed_after_a_lost_answer_stores_nothing_twice(postgres_url: str, tmp_path: Path) -> None:
    catalog = open_catalog(postgres_url, tmp_path)
    try:
        assert catalog.deliver([("laptop-1", [memory("e1")]), ("laptop-2", [memory("e2"), memory("e3")])]) == 2
        # the machine never heard the answer: it hands over the same batch again, plus a new event
        assert catalog.deliver([("laptop-2", [memory("e2"), memory("e3")]), ("laptop-3", [memory("e4")])]) == 1
        assert catalog.existing_ids(["e1", "e2", "e3", "e4"]) == {"e1", "e2", "e3", "e4"}
        assert catalog.type_counts() == {"fact": 4}
    finally:
        catalog.close()


def test_a_delivery_does_not_bring_back_what_was_forgotten(postgres_url: str, tmp_path: Path) -> None:
    from remindful.engine.captures import forget_key
    from remindful.engine.postgres.repositories import PostgresCaptureRepository

    catalog = open_catalog(postgres_url, tmp_path)
    try:
        forgotten = memory("f1")
        PostgresCaptureRepository(catalog).bury({forget_key(forgotten.content): ("old", "forget")}, 1.0)
        assert catalog.deliver([("desktop-1", [forgotten, memory("kept")])]) == 1
        assert catalog.existing_ids(["f1", "kept"]) == {"kept"}
    finally:
        catalog.close()


@pytest.mark.parametrize("answered", [False, True], ids=["error-in-flight", "error-waiting-at-commit"])
@pytest.mark.parametrize("pipelined", [False, True], ids=["tail-pipelined", "all-pipelined"])
def test_a_write_failing_in_its_pipelined_tail_rolls_back_whole_and_says_so(
    postgres_url: str, tmp_path: Path, answered: bool, pipelined: bool
) -> None:
    """The failed statement's error is raised by the commit, whether the server's answer has come by
    then or not; the connection leaves its pipeline either way (a CI run's next read on it failed
    with "pipeline aborted", about one run in seven). So too when the whole write is pipelined from
    its BEGIN (a new memory's store)."""
    from remindful.engine.postgres.catalog import CommitUnknownError

    catalog = open_catalog(postgres_url, tmp_path)
    try:
        insert(catalog, memory("m1"))

        def run(conn: object) -> None:
            catalog.insert_memories(conn, [memory("m2", at=1_700_000_010.0)])  # the rest is pipelined
            catalog.ensure_session(conn, "s", 1_700_000_010.0)
            conn.execute("INSERT INTO memories (id) VALUES ('no-type')")  # type: ignore[attr-defined]
            if answered:
                conn.execute("SELECT 1")  # type: ignore[attr-defined]  (sent: the server answers the batch)
                time.sleep(0.3)

        with pytest.raises(StorageError) as raised:
            catalog.write(run, pipelined=pipelined)
        assert not isinstance(raised.value, CommitUnknownError) and "null value" in str(raised.value)
        assert catalog.existing_ids(["m1", "m2", "no-type"]) == {"m1"}
        insert(catalog, memory("m3", at=1_700_000_020.0))  # the connection is usable again
        assert catalog.existing_ids(["m3"]) == {"m3"}
        assert "memory m1" in catalog.windows(["m3"])["m3"]
    finally:
        catalog.close()


def test_two_writers_of_one_session_number_it_one_after_the_other(postgres_url: str, tmp_path: Path) -> None:
    first, second = (open_catalog(postgres_url, tmp_path) for _ in range(2))  # two machines
    try:
        with first.transaction() as conn:  # the first write is still open when the second comes
            early = memory("early", at=1_700_000_000.0)
            early.scope = "project:one-1234abcd"  # (a private text stays out of a shared memory's window)
            first.insert_memories(conn, [early])
            late = memory("late", at=1_700_000_010.0)
            late.type, late.scope = "decision", "project:other-1234abcd"  # no count row shared with the first
            later = threading.Thread(target=insert, args=(second, late))
            later.start()
            later.join(timeout=1.0)  # it waits for the first write's commit (or, unlocked, does not)
        later.join()
        assert first.await_windows() and second.await_windows()  # (each numbers after its commit)
        seqs = first.read("SELECT id, seq FROM memories ORDER BY created_at")
        assert [tuple(r) for r in seqs] == [("early", 0), ("late", 1)]
        assert "memory early" in first.windows(["late"])["late"]
    finally:
        first.close()
        second.close()


def test_only_what_is_derived_again_commits_without_waiting_for_the_flush(postgres_url: str, tmp_path: Path) -> None:
    import numpy as np

    catalog = open_catalog(postgres_url, tmp_path)
    plain = catalog.transaction
    calls: list[bool] = []
    numbering: list[bool] = []  # (a session's new rows are numbered after the commit, by a thread of their own)

    def spy(*, durable: bool = True, pipelined: bool = False) -> object:
        mine = threading.current_thread() is threading.main_thread()
        (calls if mine else numbering).append(durable)
        return plain(durable=durable, pipelined=pipelined)

    try:
        with catalog.transaction(durable=False) as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "off"
        with catalog.transaction() as conn:  # that transaction's setting only
            assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
        catalog.transaction = spy  # type: ignore[method-assign]
        seen: list[tuple[str, bool]] = []
        for what, write in [
            ("store", lambda: insert(catalog, memory("m1"))),
            ("deliver", lambda: catalog.deliver([("k1", [memory("m2", at=1_700_000_001.0)])])),
            ("delete", lambda: catalog.delete_ids(["m2"])),
            ("unmark", lambda: catalog.mark_indexed(["m1"], value=False)),
            ("vectors", lambda: catalog.set_embeddings({"m1": np.ones(4, np.float32)})),
            ("vectors now", lambda: catalog.set_embeddings({"m1": np.ones(4, np.float32)}, wait=False)),
            ("mark", lambda: catalog.mark_indexed(["m1"])),
            ("access", lambda: catalog.touch(["m1"], 1_700_000_100.0)),
            ("cache", lambda: catalog.put_cached_embeddings("model", {"h": np.ones(4, np.float32)})),
        ]:
            calls.clear()
            write()
            assert calls, what
            seen.append((what, all(calls)))
        assert seen == [
            ("store", True), ("deliver", True), ("delete", True), ("unmark", True),
            ("vectors", False), ("vectors now", False), ("mark", False), ("access", False), ("cache", False),
        ]  # fmt: skip
        assert catalog.embeddings(["m1"])["m1"].tolist() == [1.0] * 4
        assert numbering and not any(numbering)  # (the windows are derived again too)
    finally:
        catalog.transaction = plain  # type: ignore[method-assign]
        catalog.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_search_asks_a_catalog_server_for_both_lexical_spaces_at_once(
    backend: str, postgres_url: str, tmp_path: Path
) -> None:
    import numpy as np

    from remindful.config import SearchSettings
    from remindful.engine.catalog import Catalog
    from remindful.engine.retrieval.search import rank

    redaction = StoreRedactor(build_redactor(), tmp_path)
    catalog: Any = (
        Catalog(tmp_path / "catalog.sqlite3", redaction=redaction)
        if backend == "sqlite"
        else PostgresCatalog(postgres_url, redaction=redaction)
    )
    rows = [memory(f"m{i}", at=1_700_000_000.0 + i) for i in range(3)]
    rows[1].content = "the staging server listens on port 8443"
    for row in rows:
        row.embedding = np.eye(384, dtype=np.float32)[int(row.id[1:])]
    catalog.write(lambda conn: catalog.insert_memories(conn, rows))
    both = threading.Barrier(2, timeout=10)  # passed only by two calls at once
    asked: list[str] = []
    plain = catalog.lexical

    def lexical(*args: Any, **kwargs: Any) -> list[tuple[str, float]]:
        asked.append(kwargs["table"])
        if backend == "postgres":
            both.wait()
        return plain(*args, **kwargs)

    catalog.lexical = lexical
    try:
        hits = rank(
            catalog, lambda: np.eye(384, dtype=np.float32)[1], "staging port", build_filter(),
            settings=SearchSettings(), limit=3, dense_from_index=None, restricted=False,
            resumed_session=None, min_score=0.0, diverse=False,
        )  # fmt: skip
        assert hits[0].row.id == "m1" and {"lexical", "lexical_context"} <= set(hits[0].spaces)
        assert sorted(asked) == ["context_fts", "memories_fts"]  # SQLite: one after the other, on one thread
    finally:
        catalog.close()


def test_the_type_counts_come_back_with_a_stores_commit_and_a_write_of_another_machine_is_counted(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from remindful.engine.postgres import catalog as module

    here, there = open_catalog(postgres_url, tmp_path), open_catalog(postgres_url, tmp_path)
    reads: list[str] = []
    plain = here.read

    def read(sql: str, params: Any = (), **kw: Any) -> list[Any]:
        reads.append(sql)
        return plain(sql, params, **kw)

    here.read = read  # type: ignore[method-assign]
    try:
        insert(here, memory("m1"))
        assert here.type_counts() == {"fact": 1} and reads == []  # read with the commit
        insert(there, memory("m2", at=1_700_000_001.0))  # another machine
        monkeypatch.setattr(module, "COUNTS_REUSE_S", 0.0)  # (its write is counted that much later)
        assert here.type_counts() == {"fact": 2} and reads == [module.TYPE_COUNTS]
        monkeypatch.setattr(module, "COUNTS_REUSE_S", 60.0)
        here.delete_ids(["m1"])  # a write without the counts: those read before are dropped
        assert here.type_counts() == {"fact": 1} and len(reads) == 2
        here.mark_indexed(["m2"])  # what changes no count keeps them
        assert here.type_counts() == {"fact": 1} and len(reads) == 2
    finally:
        here.close()
        there.close()


def test_a_search_repeated_on_one_connection_is_planned_for_its_own_terms_each_time(
    postgres_url: str, tmp_path: Path
) -> None:
    """psycopg prepares a statement run five times; PostgreSQL then plans it once for any term (a
    generic plan). Full-text queries differ by their terms: a generic plan walked the primary key
    backwards, filtering every row, for a term a few hundred rows hold (125 ms at 100,000 memories
    against 1.5 ms planned for the term). Each is planned with its parameters."""
    catalog = open_catalog(postgres_url, tmp_path)
    try:
        rows = [memory(f"m{i:05d}", at=1_700_000_000.0 + i) for i in range(3000)]
        for i, row in enumerate(rows):
            row.content = f"note {i} about the release" + (" and how to destress" if i % 7 == 0 else "")
        insert(catalog, *rows)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("ANALYZE memories")
        flt = build_filter()
        for _ in range(8):
            for terms in (["destress"], ["release"]):
                assert catalog.lexical(terms, flt, 10, table="memories_fts")
        plans = catalog.read("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
        searched = [(generic, custom) for statement, generic, custom in plans if "@@" in statement]
        assert searched and all(generic == 0 for generic, _ in searched), plans
    finally:
        catalog.close()


def test_a_write_repeated_on_one_connection_is_planned_once_for_any_keys(postgres_url: str, tmp_path: Path) -> None:
    """A write's statements differ by their keys, not by how many rows their values match: planning
    each for its own values again at every store cost the numbering of a session's windows 0.4 ms
    of its 0.9. After psycopg prepared them, PostgreSQL plans them once (generic plans); reads
    are still planned for their own values (the test above). (The numbering itself runs after the
    commit, on a connection of its own: the rows' insert is the statement looked at.)"""
    catalog = open_catalog(postgres_url, tmp_path)
    try:
        for i in range(12):
            insert(catalog, memory(f"w{i:03d}", at=1_700_000_000.0 + i))
        plans = catalog.read("SELECT statement, generic_plans FROM pg_prepared_statements")
        inserts = [generic for statement, generic in plans if statement.startswith("INSERT INTO memories")]
        assert inserts and all(generic > 0 for generic in inserts), plans
    finally:
        catalog.close()


def test_a_store_is_acknowledged_before_its_session_is_numbered_and_reads_its_own_windows(
    postgres_url: str, tmp_path: Path
) -> None:
    """The numbering of a session and the windows it rewrites were most of an acknowledged
    transaction's work (a member's acknowledgement 4.5-6.6 ms with them, 2.8-3.2 without). They are
    derived from the rows: they run after the commit, in a transaction of their own. The store
    returns while another writer holds the session's numbering; the process's own reads of the
    windows wait for its numbering, and another process sees the window once it is done."""
    catalog = open_catalog(postgres_url, tmp_path)
    try:
        insert(catalog, memory("first", at=1_700_000_000.0))
        assert catalog.await_windows()
        with psycopg.connect(postgres_url, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(hashtextextended('remindful:session:' || 's', 0))")
            storing = threading.Thread(target=insert, args=(catalog, memory("second", at=1_700_000_001.0)))
            storing.start()
            storing.join(5.0)
            acknowledged = not storing.is_alive()
            if not acknowledged:
                other.execute("SELECT pg_advisory_unlock_all()")
                storing.join()
            assert acknowledged  # the numbering waits for the session, not the store
            assert other.execute("SELECT seq FROM memories WHERE id = 'second'").fetchone() == (None,)
            assert not catalog.await_windows(0.2)  # (its numbering waits for the session)
            # A read of another table's own seq (the audit log's: a search's change marks) does not.
            marks = threading.Thread(target=catalog.read, args=("SELECT coalesce(max(seq), 0) FROM audit_log",))
            marks.start()
            marks.join(5.0)
            read_at_once = not marks.is_alive()
            other.execute("SELECT pg_advisory_unlock_all()")
            marks.join()
        assert read_at_once
        texts = dict(catalog.read("SELECT m.id, w.text FROM memories m JOIN context_windows w ON w.rowid = m.rowid"))
        assert texts["first"].startswith("memory first\nmemory second")  # (read after its numbering)
        with psycopg.connect(postgres_url, autocommit=True) as other:
            numbered = other.execute("SELECT id, seq FROM memories ORDER BY seq").fetchall()
            assert numbered == [("first", 0), ("second", 1)]
    finally:
        catalog.close()


def test_the_counts_each_store_updates_do_not_pile_up_dead_versions_for_its_reads(
    postgres_url: str, tmp_path: Path
) -> None:
    """Each store updates its type's count; every update leaves a dead version of the row on its
    page, and each read of the counts (one with every acknowledgement) walked them all until the
    page filled: 0.12-0.17 ms for six rows. The counts' pages are kept nine tenths free, so they are
    pruned at nearly every visit."""
    catalog = open_catalog(postgres_url, tmp_path)
    try:
        for i in range(300):
            row = memory(f"m{i}", at=1_700_000_000.0 + i)
            row.session_id = None
            insert(catalog, row)
            catalog.type_counts()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
            versions = conn.execute(
                "SELECT count(*) FROM heap_page_items(get_raw_page('type_counts', 0)) WHERE t_data IS NOT NULL"
            ).fetchone()[0]
        assert catalog.type_counts()["fact"] == 300
        assert versions <= 40, versions  # (135 before)
    finally:
        catalog.close()


def test_a_stream_of_stores_is_numbered_in_one_job_and_a_read_of_the_windows_does_not_wait_for_it(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a stream of stores a session is numbered at most once a pace (each store's own job
    competed with the next store's acknowledgement); a read of the windows hurries the job."""
    monkeypatch.setattr("remindful.engine.postgres.numbering.PACE_S", 60.0)
    catalog = open_catalog(postgres_url, tmp_path)
    try:
        insert(catalog, memory("first", at=1_700_000_000.0))
        assert catalog.await_windows()  # (its job began the pace)
        insert(catalog, memory("second", at=1_700_000_001.0))
        insert(catalog, memory("third", at=1_700_000_002.0))
        time.sleep(0.3)
        with psycopg.connect(postgres_url, autocommit=True) as other:
            unnumbered = other.execute("SELECT id FROM memories WHERE seq IS NULL ORDER BY id").fetchall()
        assert unnumbered == [("second",), ("third",)]  # gathered, within a pace of the first job
        started = time.monotonic()
        texts = dict(catalog.read("SELECT m.id, w.text FROM memories m JOIN context_windows w ON w.rowid = m.rowid"))
        assert time.monotonic() - started < 30  # (the pace is 60 s)
        assert texts["first"].startswith("memory first\nmemory second\nmemory third")
    finally:
        catalog.close()


def test_rows_a_stopped_process_left_unnumbered_are_numbered_by_the_next_catalog_opened(
    postgres_url: str, tmp_path: Path
) -> None:
    """A process that stopped between a store's commit and its session's numbering left rows with a
    session and no ``seq``, and no windows: the next catalog opened on the store numbers them."""
    open_catalog(postgres_url, tmp_path).close()  # (the schema)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for i, mid in enumerate(["a", "b", "c"]):
            conn.execute(
                "INSERT INTO memories (id, type, content, metadata, source, memory_class, session_id, created_at, "
                "updated_at, content_hash) VALUES (%s, 'fact', %s, '{}', 'test', 'semantic', 's', %s, %s, %s)",
                (mid, f"memory {mid}", 1_700_000_000.0 + i, 1_700_000_000.0 + i, mid),
            )
        assert conn.execute("SELECT count(*) FROM context_windows").fetchone() == (0,)
    catalog = open_catalog(postgres_url, tmp_path)
    try:
        assert catalog.await_windows()
        assert catalog.read("SELECT id, seq FROM memories ORDER BY seq") == [("a", 0), ("b", 1), ("c", 2)]
        assert catalog.read("SELECT count(*) FROM context_windows") == [(3,)]
    finally:
        catalog.close()
