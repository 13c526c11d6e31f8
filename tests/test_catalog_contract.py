"""One contract for every catalog backend: each repository's named queries mean the same on the
embedded SQLite catalog and on PostgreSQL (a throwaway PostgreSQL 15 cluster, ``conftest_postgres``).

A backend is reached through :class:`Backend`: the catalog's named methods (insert, delete, the
lexical spaces, sessions, projects) and the repositories; the tests never write SQL.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from remindful.engine import spool
from remindful.engine.captures import FileRecord, SessionEvent, forget_key
from remindful.engine.catalog import Catalog, MemoryRow
from remindful.engine.projects import Project
from remindful.engine.redact import StoreRedactor, build_redactor
from remindful.engine.repositories import Repositories
from remindful.engine.sqlfilter import build_filter

SECRET = "sk-" + "a1B2c3D4e5F6g7H8i9J0" * 2


@dataclass
class Backend:
    name: str
    catalog: Any
    repos: Any
    redaction: StoreRedactor
    spool_one: Callable[[str, str, dict[str, Any], float], None]

    @property
    def mark(self) -> str:
        """The backend's parameter placeholder."""
        return "?" if self.name == "sqlite" else "%s"

    def insert(self, rows: Sequence[MemoryRow]) -> None:
        catalog = self.catalog

        def run(conn: Any) -> None:
            catalog.insert_memories(conn, rows)
            for session_id, at in sorted({(r.session_id, r.created_at) for r in rows if r.session_id}):
                catalog.ensure_session(conn, session_id, at)

        catalog.write(run)


def _sqlite(tmp_path: Path) -> Iterator[Backend]:
    redaction = StoreRedactor(build_redactor(), tmp_path)
    catalog = Catalog(tmp_path / "catalog.sqlite3", redaction=redaction)

    def spool_one(key: str, kind: str, record: dict[str, Any], at: float) -> None:
        catalog.write(lambda conn: spool.append(conn, key, kind, record, at, redaction=redaction))

    try:
        yield Backend("sqlite", catalog, Repositories.over(catalog), redaction, spool_one)
    finally:
        catalog.close()


def _postgres(tmp_path: Path, url: str) -> Iterator[Backend]:
    from remindful.engine.postgres.catalog import PostgresCatalog
    from remindful.engine.postgres.repositories import PostgresRepositories

    redaction = StoreRedactor(build_redactor(), tmp_path)
    catalog = PostgresCatalog(url, redaction=redaction)
    repos = PostgresRepositories.over(catalog)

    def spool_one(key: str, kind: str, record: dict[str, Any], at: float) -> None:
        repos.captures.append(key, kind, record, at, redaction=redaction)

    try:
        yield Backend("postgres", catalog, repos, redaction, spool_one)
    finally:
        catalog.close()


def open_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The catalog of ``request.param`` ("sqlite", "postgres"), with its repositories."""
    if request.param == "sqlite":
        yield from _sqlite(tmp_path)
    else:
        yield from _postgres(tmp_path, request.getfixturevalue("postgres_url"))


backend = pytest.fixture(params=["sqlite", "postgres"], name="backend")(open_backend)


def row(
    mid: str,
    content: str,
    *,
    at: float,
    type: str = "fact",
    session: str | None = "s1",
    scope: str | None = "user",
    metadata: dict[str, Any] | None = None,
    vector: np.ndarray | None = None,
) -> MemoryRow:
    return MemoryRow(
        id=mid,
        type=type,
        content=content,
        metadata=json.dumps(metadata or {}),
        source="test",
        memory_class="semantic",
        session_id=session,
        created_at=at,
        content_hash=f"hash-{mid}",
        scope=scope,
        embedding=vector,
    )


CONVERSATION = [
    row("m0", "We were deploying the staging server on Friday", at=1_700_000_000.0),
    row("m1", "The build needs node twenty", at=1_700_000_010.0),
    row("m2", "Postgres listens on port 5433 in staging", at=1_700_000_020.0, type="decision"),
    row("m3", "Lunch was pizza", at=1_700_000_030.0, session="s2", scope="project:demo-1234abcd"),
    row("m4", "Nothing about anything", at=1_700_000_040.0, session=None, scope=None),
]


def fresh(rows: Sequence[MemoryRow]) -> list[MemoryRow]:
    return [MemoryRow(**{f: getattr(r, f) for f in MemoryRow.__slots__}) for r in rows]  # type: ignore[attr-defined]


# -- memories and their counts ------------------------------------------------------------------


def test_rows_round_trip_with_their_counts(backend: Backend) -> None:
    vector = np.arange(384, dtype=np.float32) / 384
    rows = fresh(CONVERSATION)
    rows[0].embedding = vector
    backend.insert(rows)

    got = backend.repos.memories.rows(["m0", "m3", "nope"])
    assert set(got) == {"m0", "m3"}
    assert got["m0"].content == CONVERSATION[0].content
    assert got["m0"].created_at == CONVERSATION[0].created_at
    assert got["m3"].scope == "project:demo-1234abcd" and got["m3"].session_id == "s2"
    # The SQLite catalog keeps vectors as int8 with a scale: within half a step of 1/127 of the largest.
    np.testing.assert_allclose(backend.repos.memories.embeddings(["m0", "m1"])["m0"], vector, atol=1 / 254 + 1e-6)
    assert backend.repos.memories.embedding_dimension() == 384
    assert backend.catalog.type_counts() == {"fact": 4, "decision": 1}
    assert backend.repos.scopes.counts() == {"user": 3, "project:demo-1234abcd": 1, None: 1}
    assert backend.repos.memories.count(build_filter(types=["fact"], scopes=["user"])) == 2
    assert backend.repos.memories.count(build_filter(session_id="s1", since=1_700_000_005.0)) == 2
    assert backend.repos.memories.existing_ids(["m1", "m9"]) == {"m1"}
    assert backend.repos.memories.newest_ids("fact", 0.0, 2) == ["m4", "m3"]
    assert backend.repos.scopes.by_type(["user"]) == {"fact": 2, "decision": 1}
    assert backend.repos.stats.unindexed() == 5


def test_a_failed_batch_writes_nothing_not_even_its_counts(backend: Backend) -> None:
    backend.insert(fresh(CONVERSATION[:2]))
    clash = fresh([CONVERSATION[2], CONVERSATION[0]])  # m0 exists: the whole batch must fail
    with pytest.raises(Exception):  # noqa: B017 - each backend raises its own StorageError subclass
        backend.insert(clash)
    assert backend.repos.memories.existing_ids(["m2"]) == set()
    assert backend.catalog.type_counts() == {"fact": 2}
    assert backend.repos.scopes.counts() == {"user": 2}


def test_a_secret_is_redacted_before_it_is_written_and_counted(backend: Backend) -> None:
    backend.insert([row("k", f"my key is {SECRET}", at=1_700_000_000.0, metadata={"note": SECRET})])
    stored = backend.repos.memories.rows(["k"])["k"]
    assert SECRET not in stored.content and SECRET not in stored.metadata
    assert sum(n for name, n in backend.repos.stats.capture_counts().items() if name.startswith("redacted_")) >= 2


def test_delete_takes_rows_counts_and_windows_and_queues_the_vectors(backend: Backend) -> None:
    backend.insert(fresh(CONVERSATION))
    assert "node twenty" in backend.catalog.windows(["m0"])["m0"]

    gone = backend.catalog.delete_ids(["m1", "missing"], reason="forget")
    assert gone == [("m1", "fact")]
    assert backend.repos.memories.existing_ids(["m1"]) == set()
    assert backend.catalog.type_counts() == {"fact": 3, "decision": 1}
    assert backend.catalog.pending_index_deletes(10) == [("m1", "fact")]
    assert "node twenty" not in backend.catalog.windows(["m0"])["m0"]  # the neighbour's window mended
    assert backend.catalog.lexical(["node"], build_filter(), 10, table="context_fts") == []
    backend.catalog.finish_index_deletes(["m1"])
    assert backend.catalog.pending_index_deletes(10) == []


def test_export_pages_and_import_round_trip(backend: Backend) -> None:
    backend.insert(fresh(CONVERSATION))
    pages, after = [], 0
    while page := backend.repos.memories.page(after, 2):
        pages += [r for _, r in page]
        after = page[-1][0]
    assert [r.id for r in pages] == [r.id for r in CONVERSATION]
    backend.catalog.delete_ids([r.id for r in pages])
    backend.repos.memories.insert_imported(pages, {"source": "test"})
    assert backend.repos.memories.count() == len(CONVERSATION)
    assert backend.catalog.type_counts() == {"fact": 4, "decision": 1}


# -- the lexical spaces ---------------------------------------------------------------------------


def test_lexical_search_stems_english_in_the_memory_text(backend: Backend) -> None:
    backend.insert(fresh(CONVERSATION))
    hits = backend.catalog.lexical(["deployed"], build_filter(), 10)
    assert [mid for mid, _ in hits] == ["m0"] and hits[0][1] > 0
    both = backend.catalog.lexical(["staging", "pizza"], build_filter(), 10)
    assert {mid for mid, _ in both} == {"m0", "m2", "m3"}
    only_user = backend.catalog.lexical(["staging", "pizza"], build_filter(scopes=["user"], types=["decision"]), 10)
    assert [mid for mid, _ in only_user] == ["m2"]
    assert backend.catalog.lexical(["absent"], build_filter(), 10) == []
    freqs, size = backend.catalog.doc_freqs(["staging", "pizza", "absent"])
    assert freqs == {"staging": 2, "pizza": 1, "absent": 0} and size >= 5


def test_a_scoped_lexical_search_ranks_its_scopes_own_newest_matches(backend: Backend, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 34: a term matching more than LEXICAL_MAX_MATCHES rows in the store floored a scoped
    search at the store's newest matches, where a small project's older matches never were."""
    from remindful.engine import lexical
    from remindful.engine.postgres import lexical as pg_lexical

    small = [
        row(f"s{i}", f"deploy of the small project {i}", at=1_700_000_000.0 + i, scope="project:small")
        for i in range(3)
    ]
    big = [row(f"b{i}", f"deploy number {i} went fine", at=1_700_000_100.0 + i, scope="project:big") for i in range(12)]
    backend.insert(fresh(small + big))
    for module in (lexical, pg_lexical):
        monkeypatch.setattr(module, "LEXICAL_MAX_MATCHES", 4)
        monkeypatch.setattr(module, "DOC_FREQ_CAP", 8)
        monkeypatch.setattr(module, "LEXICAL_SCAN_MAX", 100)
    scoped = build_filter(scopes=["project:small"])
    for table in ("memories_fts", "context_fts"):
        assert {mid for mid, _ in backend.catalog.lexical(["deploy"], scoped, 10, table=table)} == {"s0", "s1", "s2"}
    # Without a restriction, only the store's newest matches are ranked.
    assert {mid for mid, _ in backend.catalog.lexical(["deploy"], build_filter(), 10)} <= {f"b{i}" for i in range(12)}
    for module in (lexical, pg_lexical):
        monkeypatch.setattr(module, "LEXICAL_SCAN_MAX", 14)  # the look is bounded: two of them are among the 14 newest
    assert {mid for mid, _ in backend.catalog.lexical(["deploy"], scoped, 10)} == {"s1", "s2"}


def test_a_scoped_window_search_after_a_large_delete_finds_what_a_fresh_one_finds(
    backend: Backend, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A large delete leaves its neighbours' windows to mend after it commits: until then they
    still hold the deleted memory's words. A scoped search asked meanwhile and again after the mend
    finds what a fresh one finds (the SQLite catalog remembers a scoped search's newest passing
    matches: the windows still to mend count in what it checks)."""
    from remindful.engine import lexical
    from remindful.engine.postgres import lexical as pg_lexical

    words = ["zebra" if i in (3, 9) else f"plain{i}" for i in range(14)]
    backend.insert(fresh([row(f"w{i}", f"note {words[i]}", at=1_700_000_000.0 + i, session="s9") for i in range(14)]))
    for module in (lexical, pg_lexical):
        monkeypatch.setattr(module, "LEXICAL_MAX_MATCHES", 4)  # "zebra" is in 10 windows: the newest 4 passing
        monkeypatch.setattr(module, "DOC_FREQ_CAP", 8)
    scoped = build_filter(scopes=["user"])

    def found() -> set[str]:
        return {mid for mid, _ in backend.catalog.lexical(["zebra"], scoped, 10, table="context_fts")}

    assert found() == {"w8", "w9", "w10", "w11"}  # the windows within two of w9
    backend.catalog.delete_ids(["w9"], mend_later=True)
    # Not mended yet, the windows still hold w9's words (SQLite); or mended with the delete.
    assert found() in ({"w7", "w8", "w10", "w11"}, {"w2", "w3", "w4", "w5"})
    while backend.catalog.mend_windows(100):
        pass
    assert found() == {"w2", "w3", "w4", "w5"}  # mended: the windows around w3 are the newest left


def test_the_size_after_a_write_here_includes_it(backend: Backend) -> None:
    backend.insert(fresh(CONVERSATION))
    backend.catalog.lexical(["staging"], build_filter(), 10, table="context_fts")
    _, size = backend.catalog.doc_freqs(["staging"])
    backend.insert([row(f"more{i}", f"more on staging {i}", at=1_700_000_100.0 + i) for i in range(200)])
    _, grown = backend.catalog.doc_freqs(["staging"])
    assert grown >= size + 200  # read again, not the size remembered from before the write


def test_the_session_window_space_finds_a_memory_by_its_neighbours_words(backend: Backend) -> None:
    backend.insert(fresh(CONVERSATION))
    hits = {mid for mid, _ in backend.catalog.lexical(["node"], build_filter(), 10, table="context_fts")}
    assert hits == {"m0", "m1", "m2"}  # m1's word is in the windows of its neighbours in s1
    window = backend.catalog.windows(["m4"])["m4"]
    assert window.startswith("Nothing about anything") and "2023" in window  # its date, for questions naming one
    dated = {mid for mid, _ in backend.catalog.lexical(["November"], build_filter(), 10, table="context_fts")}
    assert dated == {"m0", "m1", "m2", "m3", "m4"}


def test_back_dated_rows_are_numbered_into_their_session(backend: Backend) -> None:
    backend.insert(fresh(CONVERSATION[:3]))
    backend.insert([row("early", "Kickoff meeting about caching", at=1_699_999_990.0)])
    window = backend.catalog.windows(["m0"])["m0"]
    assert window.index("Kickoff meeting") < window.index("deploying")  # it sits before m0 now
    assert "Postgres listens" in window


def test_a_row_dated_inside_its_session_mends_the_windows_on_both_sides(backend: Backend) -> None:
    backend.insert(fresh(CONVERSATION[:3]))
    backend.insert([row("late", "Someone asked about caching", at=1_700_000_015.0)])  # between m1 and m2
    text = backend.catalog.windows(["m0", "m1", "late", "m2"])
    assert "caching" in text["m0"] and "Postgres" not in text["m0"]  # m2 is three places on now
    assert text["m1"].index("node twenty") < text["m1"].index("caching") < text["m1"].index("Postgres")
    assert text["late"].startswith("We were deploying") and "Postgres listens" in text["late"]
    assert text["m2"].startswith("The build needs") and "caching" in text["m2"]


def test_window_texts_are_the_neighbours_words_and_the_date_exactly(backend: Backend) -> None:
    from remindful.engine.windows import date_words

    late_may, june, new_year_eve, new_year = 1_685_577_599.9, 1_685_577_600.0, 1_704_067_199.0, 1_704_067_200.5
    backend.insert([row("a", "Alpha", at=late_may, session="s9"), row("c", "Gamma", at=new_year_eve, session="s9"),
                    row("e", "Epsilon", at=946_684_800.0, session=None)])  # fmt: skip
    backend.insert([row("b", "Beta", at=june, session="s9"), row("d", "Delta", at=new_year, session="s9")])
    assert backend.catalog.windows(["a", "b", "c", "d", "e"]) == {
        "a": f"Alpha\nBeta\nGamma\n({date_words(late_may)})",
        "b": f"Alpha\nBeta\nGamma\nDelta\n({date_words(june)})",
        "c": f"Alpha\nBeta\nGamma\nDelta\n({date_words(new_year_eve)})",
        "d": "Beta\nGamma\nDelta\n(1 January 2024)",
        "e": "Epsilon\n(1 January 2000)",
    }
    assert [date_words(t) for t in (late_may, june, new_year_eve)] == ["31 May 2023", "1 June 2023", "31 December 2023"]


# -- sessions, scopes, the ledger ------------------------------------------------------------------


def test_sessions_spans_and_lengths(backend: Backend) -> None:
    backend.insert(fresh(CONVERSATION))
    backend.catalog.write(lambda conn: backend.catalog.upsert_session(conn, "s3", 1_700_000_100.0, ended=True))
    spans = {s.id: s for s in backend.repos.sessions.spans()}
    assert set(spans) == {"s1", "s2", "s3"}
    assert spans["s1"].memory_count == 3 and spans["s1"].start == 1_700_000_000.0
    assert spans["s3"].memory_count == 0 and spans["s3"].end == 1_700_000_100.0
    assert backend.repos.sessions.count() == 3
    assert backend.repos.sessions.type_counts(["s1"]) == {"s1": {"fact": 2, "decision": 1}}
    lengths = backend.repos.sessions.lengths()
    assert (lengths.recorded, lengths.with_memories, lengths.avg_memories) == (3, 2, 2.0)
    assert backend.repos.sessions.exists("s3")
    backend.repos.sessions.delete("s3")
    assert not backend.repos.sessions.exists("s3")


def test_session_events_merge_metadata(backend: Backend) -> None:
    backend.repos.captures.update_session(SessionEvent("s9", 5.0, {"cwd": "/x", "prompt": "hi"}))
    backend.repos.captures.update_session(SessionEvent("s9", 6.0, {"prompt": None}, ended=True))
    assert backend.repos.captures.session_metadata("s9") == {"cwd": "/x"}
    (span,) = backend.repos.sessions.spans("s9")
    assert (span.start, span.end) == (5.0, 6.0)


def test_projects_and_finding_a_scope(backend: Backend) -> None:
    backend.insert(fresh(CONVERSATION))
    project = Project(key="demo-1234abcd", name="Demo", root="/work/demo")
    backend.catalog.write(lambda conn: backend.catalog.record_projects(conn, [project], 10.0))
    assert backend.repos.scopes.projects() == {"project:demo-1234abcd": ("Demo", "/work/demo")}
    assert backend.repos.scopes.find("demo") == "project:demo-1234abcd"
    assert backend.repos.scopes.find("other") is None


def test_the_project_registry_a_resolver_asks(backend: Backend) -> None:
    """What a marker may claim (:mod:`remindful.engine.projects`, *Claims*): the root recorded for a
    key (a name-only project takes the first root seen), and the directories the user bound."""
    scopes = backend.repos.scopes
    named = Project(key="billing", name="billing", root="")
    backend.catalog.write(lambda conn: backend.catalog.record_projects(conn, [named], 10.0))
    assert scopes.project_root("billing") == "" and scopes.project_root("nothing") is None
    placed = Project(key="billing", name="billing", root="/work/billing")
    backend.catalog.write(lambda conn: backend.catalog.record_projects(conn, [placed], 11.0))
    assert scopes.project_root("billing") == "/work/billing"
    assert scopes.bindings() == {}
    scopes.bind("/work/clone", "billing", "billing")
    scopes.bind("/work/clone", "billing-2", "second")  # over the first
    assert scopes.bindings() == {"/work/clone": ("billing-2", "second")}
    # What the catalog records (names, roots, bound directories and names) is its own clean form.
    assert [scopes.recorded(t) for t in ("billing", "/work/billing", "/work/clone", "second")] == [True] * 4
    assert not scopes.recorded("/work") and not scopes.recorded("") and not scopes.recorded("billing-2")
    assert scopes.unbind("/work/clone") and not scopes.unbind("/work/clone")
    assert scopes.bindings() == {} and not scopes.recorded("/work/clone")


def test_the_ledger_sums_injections(backend: Backend) -> None:
    ledger = backend.repos.ledger
    ledger.record(at=1.0, session_id="s1", project="p", event="SessionStart", tokens=100, memory_ids=["a", "b"])
    ledger.record(at=2.0, session_id="s1", project="p", event="UserPromptSubmit", tokens=50, memory_ids=["c"])
    ledger.record(at=3.0, session_id="s2", project=None, event="SessionStart", tokens=10, memory_ids=[])
    total = ledger.total()
    assert (total.injections, total.tokens, total.memories, total.last_at) == (3, 160, 3, 3.0)
    assert [(t.key, t.tokens) for t in ledger.by_project()] == [("p", 150), (None, 10)]
    assert [t.key for t in ledger.by_session()] == ["s2", "s1"]


# -- the spool, tombstones, files, stats ------------------------------------------------------------


def test_the_spool_takes_each_key_once_even_after_the_drain(backend: Backend) -> None:
    backend.spool_one("k1", "PostToolUse", {"tool": "Bash", "secret": SECRET}, 1.0)
    backend.spool_one("k1", "PostToolUse", {"tool": "Bash"}, 1.0)  # a replay
    backend.spool_one("k2", "Stop", {}, 2.0)
    assert backend.repos.stats.spool_pending() == 2
    claimed = backend.repos.captures.claim(after=0, limit=10, max_attempts=3, payload_limit=10_000)
    assert [c[1] for c in claimed] == ["k1", "k2"]
    assert SECRET not in claimed[0][3]
    backend.repos.captures.finish_spooled(done=[(claimed[0][0], "k1")], failures={claimed[1][0]: "boom"}, at=3.0)
    backend.spool_one("k1", "PostToolUse", {"tool": "Bash"}, 1.0)  # a replay after the drain
    again = backend.repos.captures.claim(after=0, limit=10, max_attempts=3, payload_limit=10_000)
    assert [(c[1], c[5]) for c in again] == [("k2", 1)]
    assert not backend.repos.captures.spool_waiting(max_attempts=1)
    backend.repos.captures.finish_spooled(done=(), failures={again[0][0]: "x"}, hopeless=[again[0][0]], at=4.0)
    backend.spool_one("k2", "Stop", {}, 2.0)
    assert backend.repos.stats.spool_pending() == 0


def test_tombstones(backend: Backend) -> None:
    captures = backend.repos.captures
    key = forget_key("Use tabs, not spaces!")
    captures.bury({key: ("m1", "forget"), forget_key("other"): (None, "correct")}, 1.0)
    captures.bury({key: ("m2", "again")}, 2.0)  # a key already buried keeps its first
    assert captures.buried([key, forget_key("use TABS not spaces"), "nope"]) == {key}
    assert captures.tombstones() == 2
    assert captures.unbury([key, "nope"]) == 1
    assert captures.tombstones() == 1


def test_tombstones_are_salted_and_bare_ones_migrated(backend: Backend) -> None:
    captures = backend.repos.captures
    bare = forget_key("a statement forgotten before tombstones were salted")
    backend.catalog.write(
        lambda conn: conn.execute(
            "INSERT INTO tombstones (key, buried_at, reason, memory_id) VALUES (" + ", ".join([backend.mark] * 4) + ")",
            (bare, 1.0, "deleted", None),
        )
    )
    assert captures.buried([bare]) == {bare}  # read as it is while there is no salt
    key = forget_key("Use tabs, not spaces!")
    captures.bury({key: ("m1", "forget")}, 2.0)  # the salt is made, the bare tombstone re-keyed
    stored = {str(r[0]) for r in backend.catalog.read("SELECT key FROM tombstones")}
    assert len(stored) == 2 and not stored & {key, bare}
    assert captures.buried([key, bare, forget_key("other")]) == {key, bare}
    (salt,) = backend.catalog.read("SELECT value FROM meta WHERE key = 'tombstone_salt'")
    captures.bury({forget_key("other"): (None, "correct")}, 3.0)
    assert backend.catalog.read("SELECT value FROM meta WHERE key = 'tombstone_salt'") == [salt]
    assert captures.unbury([bare]) == 1 and captures.tombstones() == 2


def test_file_records(backend: Backend) -> None:
    captures = backend.repos.captures
    captures.record_file(FileRecord("/a.md", "abc", ("x", "y")), 1.0)
    captures.record_file(FileRecord("/a.md", "def", ("z",)), 2.0)
    assert captures.file_record("/a.md") == FileRecord("/a.md", "def", ("z",))
    assert captures.file_paths() == ["/a.md"] and captures.files_indexed() == 1
    captures.forget_file("/a.md")
    assert captures.file_record("/a.md") is None


def test_stats_counts(backend: Backend) -> None:
    assert backend.repos.stats.newest_rowid() is None
    backend.insert(fresh(CONVERSATION))
    assert backend.repos.stats.newest_rowid() is not None
    assert backend.repos.stats.captures_per_day(0.0) == {"2023-11-14": 5}
    backend.catalog.mark_indexed(["m0", "m1"])
    assert backend.repos.stats.unindexed() == 3


# -- metadata filters ----------------------------------------------------------------------------

FILTERED = [
    row("f0", "clicked the save button", at=1_700_000_000.0,
        metadata={"success": True, "attempt": 1, "tool": "click", "target": {"x": 5}}),
    row("f1", "typed the password", at=1_700_000_010.0, metadata={"success": False, "attempt": 2, "tool": "type"}),
    row("f2", "scrolled the results page", at=1_700_000_020.0, session="s2",
        metadata={"success": True, "attempt": 3.5, "tool": "scroll", "target": {"x": 50}}),
    row("f3", "zoomed into the chart", at=1_700_000_030.0, scope="project:demo-1234abcd",
        metadata={"attempt": 4, "note": None, "tool": "Zeta"}),
    row("f4", "an odd one", at=1_700_000_040.0, type="decision",
        metadata={"success": 1, "attempt": "5", "odd key?%'": "yes", "target": [{"x": 5}]}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ({"success": True}, ["f0", "f2"]),  # a JSON true, never the number 1
        ({"success": 1}, ["f4"]),
        ({"success": {"$ne": True}}, ["f1", "f3", "f4"]),  # $ne matches a missing key too
        ({"attempt": {"$gt": 1, "$lte": 3.5}}, ["f1", "f2"]),  # numbers with numbers only
        ({"attempt": {"$gte": "5"}}, ["f4"]),  # text with text only
        ({"tool": {"$in": ["click", "type"]}}, ["f0", "f1"]),
        ({"tool": {"$nin": ["click"]}}, ["f1", "f2", "f3", "f4"]),
        ({"tool": {"$lt": "a"}}, ["f3"]),  # bytewise: capitals before small letters
        ({"target.x": {"$gte": 10}}, ["f2"]),
        ({"target.x": 5}, ["f0"]),  # a path through an array finds nothing
        ({"tool": None}, ["f4"]),
        ({"note": None}, ["f0", "f1", "f2", "f3", "f4"]),  # JSON null and a missing key alike
        ({"note": {"$ne": None}}, []),
        ({"odd key?%'": "yes"}, ["f4"]),
        ({"$or": [{"tool": "click"}, {"attempt": 4}]}, ["f0", "f3"]),
        ({"$and": [{"success": True}, {"tool": {"$ne": "click"}}]}, ["f2"]),
        ({"type": "decision"}, ["f4"]),
        ({"importance": {"$gt": 0.4}}, ["f0", "f1", "f2", "f3", "f4"]),
        ({"importance": "high"}, []),
        ({"importance": {"$ne": "high"}}, ["f0", "f1", "f2", "f3", "f4"]),
        ({"created_at": {"$gt": "2023-11-14T22:13:30Z"}}, ["f2", "f3", "f4"]),  # a date as text
        ({"created_at": {"$lte": 1_700_000_010}}, ["f0", "f1"]),
        ({"bookmarked": False, "session_id": "s2"}, ["f2"]),
        ({"session_id": {"$in": ["s2"]}, "tool": {"$gt": "a"}}, ["f2"]),
    ],
)
def test_metadata_filters_mean_the_same_on_both_backends(
    backend: Backend, where: dict[str, Any], expected: list[str]
) -> None:
    backend.insert(fresh(FILTERED))
    where = dict(where)
    if "session_id" in where:  # named as the caller names it; the catalog stores it mapped
        from remindful.engine.sqlfilter import with_stored_sessions

        where = dict(with_stored_sessions(where, backend.catalog.stored_session_id))
    flt = build_filter(filters=where)
    assert sorted(r.id for r in backend.catalog.select_rows(flt, limit=100)) == expected
    assert backend.catalog.count(flt) == len(expected)
    scoped = build_filter(filters=where, scopes=["user"])
    assert sorted(r.id for r in backend.catalog.select_rows(scoped, limit=100)) == [i for i in expected if i != "f3"]


def test_a_metadata_filter_narrows_the_lexical_space(backend: Backend) -> None:
    backend.insert(fresh(FILTERED))
    assert {mid for mid, _ in backend.catalog.lexical(["clicked", "scrolled", "typed"], build_filter(), 10)} == {
        "f0", "f1", "f2"
    }  # fmt: skip
    assert {mid for mid, _ in backend.catalog.lexical(
        ["clicked", "scrolled", "typed"], build_filter(filters={"success": True}), 10
    )} == {"f0", "f2"}  # fmt: skip


def test_stored_with_names_each_memory_of_a_session_holding_a_text(backend: Backend) -> None:
    """What a replayed spool row finds it had stored: the memory's id, with its metadata."""
    first = row("h1", "ran the build", at=1_700_000_100.0, session="s7", metadata={"spool_key": "k1"})
    other = row("h2", "ran the build", at=1_700_000_110.0, session="s8", metadata={"spool_key": "k2"})
    first.content_hash = other.content_hash = "hash-ran-the-build"
    backend.insert([first, other])
    assert backend.repos.captures.stored_with("hash-ran-the-build", "s7") == [("h1", {"spool_key": "k1"})]
    assert backend.repos.captures.stored_with("hash-other", "s7") == []
