"""Retention and dedup on a team store (PostgreSQL + a Chroma server): what a member's cleanup and
dedup may delete (their own memories outside projects), what only the store's admin connection
cleans (the projects' memories, by its settings), refused by the database itself for a member's
policy deletions; and what the other people then see: rows, vectors on the Chroma server, the
audit log with who deleted, the scope counts, a dedup merge's record."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest_chroma import chroma_server  # noqa: F401  (session fixture)
from remindful.engine.postgres.catalog import PostgresCatalog
from remindful.engine.postgres.repositories import PostgresRetentionRepository
from remindful.engine.postgres.team import TeamRepository
from remindful.engine.redact import StoreRedactor, build_redactor
from remindful.errors import AccessDeniedError
from test_postgres_store import machine

psycopg = pytest.importorskip("psycopg")

DAY = 86_400.0


@pytest.fixture
def chroma(chroma_server: tuple[str, int]) -> tuple[str, int]:  # noqa: F811
    return chroma_server


def env_of(home: Path, url: str, chroma: tuple[str, int], token: str | None) -> dict[str, str]:
    from agent_session import agent_env

    host, port = chroma
    extra = {
        "REMINDFUL_CATALOG__URL": url,
        "REMINDFUL_STORAGE__CHROMADB__MODE": "server",
        "REMINDFUL_STORAGE__CHROMADB__HOST": host,
        "REMINDFUL_STORAGE__CHROMADB__PORT": str(port),
    }
    if token is not None:
        extra["REMINDFUL_CATALOG__TOKEN"] = token
    return agent_env(home, **extra)


def cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    from agent_session import SCRIPT

    return subprocess.run([SCRIPT, *argv], env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_remindful_cleanup_runs_on_a_shared_catalog(postgres_url: str, chroma: tuple[str, int], tmp_path: Path) -> None:
    """The defect: every method of the PostgreSQL retention repository refused, so `remindful
    cleanup` (and dedup, the daemon's schedule) failed on any store with ``catalog.url``."""
    home = tmp_path / "one"
    home.mkdir()
    env = env_of(home, postgres_url, chroma, None)
    assert cli(env, "store", "the staging database listens on port 6543", "--type", "knowledge").returncode == 0
    for argv in (("cleanup", "--dry-run", "--json"), ("cleanup", "--json"), ("dedup", "--json")):
        done = cli(env, *argv)
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["success"] is True


# -- whose policy deletes what: a person's catalog (member role + token) and the admin's ----------


@pytest.fixture
def people(admin: PostgresCatalog, member_url: str, tmp_path: Path) -> Iterator[dict[str, PostgresCatalog]]:
    """alice's and bob's catalogs: the member role (row-level security binds it), each one's token."""
    team = TeamRepository(admin)
    opened = {
        name: PostgresCatalog(member_url, redaction=StoreRedactor(build_redactor(), tmp_path), token=team.add(name))
        for name in ("alice", "bob")
    }
    try:
        yield opened
    finally:
        for catalog in opened.values():
            catalog.close()


def stored(catalog: PostgresCatalog, rows: list[Any]) -> None:
    catalog.write(lambda conn: catalog.insert_memories(conn, rows))


def policy_over(catalog: PostgresCatalog, tmp_path: Path) -> Any:
    from remindful.engine.postgres.repositories import PostgresRepositories
    from test_catalog_contract import Backend
    from test_retention_contract import policy_of

    backend = Backend("postgres", catalog, PostgresRepositories.over(catalog), catalog.redaction, lambda *a: None)
    return policy_of(backend, tmp_path)[0]


def test_a_persons_cleanup_deletes_only_what_they_wrote_outside_projects(
    admin: PostgresCatalog, people: dict[str, PostgresCatalog], tmp_path: Path
) -> None:
    from remindful.services.policy.retention import cleanup
    from test_retention_contract import NOW, memory

    alice, bob = people["alice"], people["bob"]
    stored(alice, [
        memory("alice-old", age_days=40),
        memory("alice-loose", age_days=40, scope=None),
        memory("alice-new", age_days=1),
        memory("alice-in-shop", age_days=40, scope="project:shop"),
        memory("alice-act-used", age_days=1, type="action", access_count=9),
        memory("alice-act-idle", age_days=1, type="action"),
    ])  # fmt: skip
    stored(bob, [memory("bob-old", age_days=40), memory("bob-in-shop", age_days=40, scope="project:shop")])
    stored(bob, [memory(f"bob-act-{n}", age_days=1, type="action") for n in range(3)])
    # (The quota of one action each counts each person's own: alice keeps one, bob's are his.)

    dry = cleanup(policy_over(bob, tmp_path), dry_run=True, now=NOW)
    assert dry.ids[0] == "bob-old" and dry.by_reason == {"retention": 1, "quota": 2}
    assert set(dry.ids[1:]) < {"bob-act-0", "bob-act-1", "bob-act-2"}
    done = cleanup(policy_over(alice, tmp_path), now=NOW)
    assert sorted(done.ids) == ["alice-act-idle", "alice-loose", "alice-old"] and done.deleted == 3
    left = {r[0] for r in admin.read("SELECT id FROM memories WHERE type = 'knowledge'")}
    assert left == {"alice-new", "alice-in-shop", "bob-old", "bob-in-shop"}
    assert len(admin.read("SELECT id FROM memories WHERE type = 'action'")) == 4
    assert sorted(admin.read("SELECT memory_id, action, person FROM audit_log WHERE action LIKE 'retention:%%'")) == [
        ("alice-act-idle", "retention:quota", "alice"),
        ("alice-loose", "retention:retention", "alice"),
        ("alice-old", "retention:retention", "alice"),
    ]
    # Each person's last cleanup is their own; the admin has not run one.
    assert PostgresRetentionRepository(alice).last_cleanup()["deleted"] == 3  # type: ignore[index]
    assert PostgresRetentionRepository(bob).last_cleanup() is None
    assert PostgresRetentionRepository(admin).last_cleanup() is None

    # The store's admin (no token: the owner role) governs every memory: the projects' too.
    done = cleanup(policy_over(admin, tmp_path), now=NOW)
    assert sorted(done.ids) == ["alice-in-shop", "bob-act-0", "bob-act-1", "bob-act-2", "bob-in-shop", "bob-old"]
    assert {r[0] for r in admin.read("SELECT id FROM memories")} == {"alice-new", "alice-act-used"}
    assert admin.scope_counts() == {"user": 2}
    persons = admin.read("SELECT DISTINCT person FROM audit_log WHERE memory_id = ANY(%s)", (done.ids,))
    assert persons == [(None,)]


def test_a_dedup_merge_raises_the_representatives_version(admin: PostgresCatalog) -> None:
    """A correction made on a copy read before the merge is refused (its version is older)."""
    from test_retention_contract import memory

    stored(admin, [memory("rep", age_days=1)])
    before = admin.version_of("rep")
    meta = json.dumps({"consolidation": {"count": 1, "merged_ids": ["gone"]}})
    PostgresRetentionRepository(admin).record_consolidations([(meta, 1.0, "rep")])
    assert admin.version_of("rep") == (before or 0) + 1
    assert json.loads(admin.get_rows(["rep"])["rep"].metadata)["consolidation"]["merged_ids"] == ["gone"]


def test_the_database_refuses_a_persons_policy_deletion_of_the_teams_memories(
    admin: PostgresCatalog, people: dict[str, PostgresCatalog], member_url: str
) -> None:
    """What a modified client would try: a deletion recorded as retention's or dedup's of a project's
    memory, or of another person's, is refused by PostgreSQL (schema 8); deleting a project's
    memory by hand stays allowed, with the person's name in the audit log, which nobody forges."""
    from test_retention_contract import memory

    alice, bob = people["alice"], people["bob"]
    stored(
        alice, [memory("shop-1", age_days=1, scope="project:shop"), memory("shop-2", age_days=1, scope="project:shop")]
    )
    stored(bob, [memory("bob-loose", age_days=1, scope=None), memory("bob-own", age_days=1)])
    for ids, reason in ((["shop-1"], "retention:quota"), (["shop-1"], "dedup"), (["bob-loose"], "retention:expired")):
        with pytest.raises(AccessDeniedError, match="retention or dedup may delete") as refused:
            alice.delete_ids(ids, reason=reason)
        assert "\n" not in str(refused.value)
    assert {r[0] for r in admin.read("SELECT id FROM memories")} == {"shop-1", "shop-2", "bob-loose", "bob-own"}
    assert alice.delete_ids(["bob-own"], reason="dedup") == []  # (hidden from her: private to bob)
    assert alice.delete_ids(["shop-1"], reason="delete") == [("shop-1", "knowledge")]
    assert bob.delete_ids(["bob-loose"], reason="retention:expired") == [("bob-loose", "knowledge")]

    token = TeamRepository(admin).add("carol")
    with psycopg.connect(member_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT set_config('remindful.token', %s, false)", (token,))
        conn.execute(
            "INSERT INTO audit_log (at, action, memory_id, detail, person) VALUES (0, 'note', NULL, '{}', 'alice')"
        )
    assert sorted(admin.read("SELECT action, memory_id, person FROM audit_log")) == [
        ("delete", "shop-1", "alice"),
        ("note", None, "carol"),
        ("retention:expired", "bob-loose", "bob"),
    ]


# -- the real path: two people's processes, the admin's, a Chroma server ------------------------


def vectors_present(chroma: tuple[str, int], ids: list[str]) -> set[str]:
    """Which of ``ids`` (knowledge memories) have a vector on the Chroma server."""
    from remindful.index.chroma import ChromaServerIndex

    index = ChromaServerIndex(*chroma)
    try:
        return set(index.ids("knowledge_memories")) & set(ids)
    finally:
        index.close()


@pytest.mark.slow
def test_two_peoples_cleanup_and_dedup_and_what_the_others_see(
    admin: PostgresCatalog, member_url: str, postgres_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    """alice's and bob's ``remindful`` processes (their own HOMEs and tokens, the member role) and
    the admin's (the owner, no token) on one PostgreSQL catalog and one ``chroma run`` server:
    each person's cleanup deletes their own old memories, rows and vectors, and none of the
    project's; the admin's cleans the project and its dedup merges two people's copies of a
    project memory, the merge's record seen from bob's machine; the audit log says who."""
    team = TeamRepository(admin)
    envs = {}
    for name, url, token in (
        ("alice", member_url, team.add("alice")),
        ("bob", member_url, team.add("bob")),
        ("admin", postgres_url, None),
    ):
        (tmp_path / name).mkdir()
        envs[name] = env_of(tmp_path / name, url, chroma, token)

    def run(name: str, *argv: str) -> Any:
        done = cli(envs[name], *argv, "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)

    old = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 40 * DAY))

    def store(name: str, content: str, scope: str, *, at: str | None = old) -> str:
        argv = ["store", content, "--type", "knowledge", "--scope", scope, "--source", "import"]
        return str(run(name, *argv, *(["--timestamp", at] if at else []))["memory_id"])

    alice_old = store("alice", "alice's editor font is Iosevka", "user")
    alice_new = store("alice", "alice's terminal theme is solarized", "user", at=None)
    shop_old = store("alice", "the shop's staging database listens on port 6543", "project:shop")
    bob_old = store("bob", "bob's editor font is Fira Code", "user")
    runner_a = store("alice", "The shop's CI runner is called bramble.", "project:shop", at=None)
    runner_b = store("bob", "the shop's CI runner is called bramble", "project:shop", at=None)
    everything = [alice_old, alice_new, shop_old, bob_old, runner_a, runner_b]
    assert vectors_present(chroma, [shop_old, runner_a, runner_b]) == {shop_old, runner_a, runner_b}

    dry = run("alice", "cleanup", "--dry-run")
    assert dry["ids"] == [alice_old] and dry["by_reason"] == {"retention": 1} and dry["dry_run"] is True
    assert run("alice", "cleanup")["deleted"] == 1
    assert run("alice", "dedup")["clusters"] == 0  # (the project's copies are not hers to merge)
    assert run("bob", "cleanup")["deleted"] == 1
    gone = {alice_old, bob_old}
    assert {r[0] for r in admin.read("SELECT id FROM memories")} == set(everything) - gone
    assert not vectors_present(chroma, everything) & gone
    assert run("bob", "get", shop_old)["id"] == shop_old  # the project's old memory: still the team's

    assert run("admin", "cleanup")["deleted"] == 1  # shop_old
    merged = run("admin", "dedup")
    assert merged["clusters"] == 1 and merged["deleted"] == 1
    ((kept, (dropped,)),) = merged["representatives"].items()
    assert {kept, dropped} == {runner_a, runner_b}
    gone |= {shop_old, dropped}
    assert {r[0] for r in admin.read("SELECT id FROM memories")} == set(everything) - gone
    assert not vectors_present(chroma, everything) & gone and kept in vectors_present(chroma, [kept])
    seen = run("bob", "get", kept)
    assert seen["metadata"]["consolidation"]["merged_ids"] == [dropped]
    assert [m["id"] for m in run("bob", "search", "what is the shop's CI runner called", "--scope", "all")["memories"]][
        :1
    ] == [kept]
    assert sorted(admin.read("SELECT memory_id, action, person FROM audit_log WHERE memory_id IS NOT NULL")) == sorted([
        (alice_old, "retention:retention", "alice"),
        (bob_old, "retention:retention", "bob"),
        (shop_old, "retention:retention", None),
        (dropped, "dedup", None),
    ])  # fmt: skip
    assert admin.scope_counts() == {"user": 1, "project:shop": 1}
    assert admin.read("SELECT count(*) FROM tombstones") == [(0,)]  # housekeeping buries nothing


def stored_by(root: Path, url: str, chroma: tuple[str, int], token: str | None, text: str) -> str:
    """A private knowledge memory stored by a process of ``token``'s person (its index opened and
    reconciled as it stores), flushed and closed."""
    from test_postgres_access import person

    memory = person(root, url, chroma, token)
    try:
        stored = memory.store(text, type="knowledge", scope="user")
        memory.flush()
    finally:
        memory.close()
    return stored


def test_no_private_vector_reaches_the_chroma_server_and_a_stale_one_goes_at_the_next_open(
    admin: PostgresCatalog, member_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    """The Chroma server has no people: whoever reaches it reads every vector it holds, and a
    vector gives its text away to a model inverting it. A private memory's vector stays in the
    catalog (row-level security); its owner's search scores it from there."""
    from test_postgres_access import person

    team = TeamRepository(admin)
    alice = person(tmp_path / "alice", member_url, chroma, team.add("alice"))
    try:
        private = alice.store("alice keeps her dotfiles in a bare git repository", type="knowledge", scope="user")
        shared = alice.store("the shop keeps its dotfiles in a stow tree", type="knowledge", scope="project:shop")
        alice.flush()
        hits = alice.search("alice keeps her dotfiles in a bare git repository", limit=3, types=["knowledge"])
        assert hits[0].id == private and "dense" in hits[0].sources
    finally:
        alice.close()
    assert vectors_present(chroma, [private, shared]) == {shared}
    bob_token = team.add("bob")
    bob = person(tmp_path / "bob", member_url, chroma, bob_token)
    try:
        gone = bob.store("bob kept the shop's dotfiles in a tarball once", type="knowledge", scope="project:shop")
        bob.flush()
        assert private not in {h.id for h in bob.search("alice keeps her dotfiles in a bare git repository")}
    finally:
        bob.close()
    assert vectors_present(chroma, [private, shared, gone]) == {shared, gone}
    # A vector the catalog lost track of (its row deleted without queueing the vector's deletion,
    # as by a restore of an older catalog) is stale for everyone: bob's next open removes it.
    admin.write(lambda conn: conn.execute("DELETE FROM memories WHERE id = %s", (gone,)))
    bob = person(tmp_path / "bob", member_url, chroma, bob_token)
    try:
        bob.store("bob moved his dotfiles to chezmoi", type="knowledge", scope="user")  # (the index opens)
        bob.flush()
    finally:
        bob.close()
    assert vectors_present(chroma, [private, shared, gone]) == {shared}


def test_a_memory_moved_into_the_user_scope_leaves_the_chroma_server_and_one_moved_out_joins_it(
    admin: PostgresCatalog, member_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    from test_postgres_access import person

    team = TeamRepository(admin)
    alice = person(tmp_path / "alice", member_url, chroma, team.add("alice"))
    try:
        note = alice.store("the release checklist lives in the wiki", type="knowledge", scope="project:shop")
        alice.flush()
        assert vectors_present(chroma, [note]) == {note}
        alice.update(note, scope="user")
        alice.flush()
        assert vectors_present(chroma, [note]) == set()
        assert alice.search("the release checklist lives in the wiki", types=["knowledge"])[0].id == note
        alice.update(note, scope="project:shop")
        alice.flush()
        assert vectors_present(chroma, [note]) == {note}
        assert alice.engine.move_scope(["project:shop"], "user") == 1  # (many at once)
        alice.flush()
        assert vectors_present(chroma, [note]) == set()
        assert alice.engine.move_scope(["user"], "project:shop") == 1
        alice.flush()
        assert vectors_present(chroma, [note]) == {note}
    finally:
        alice.close()


def test_an_older_stores_private_vectors_leave_the_chroma_server_at_the_next_open(
    admin: PostgresCatalog, member_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    """Schema 9 and before put private vectors on the Chroma server: the next open removes them."""
    import numpy as np

    from remindful.index.chroma import ChromaServerIndex

    team = TeamRepository(admin)
    token = team.add("alice")
    private = stored_by(tmp_path / "alice", member_url, chroma, token, "alice's locker code is in her notebook")
    index = ChromaServerIndex(*chroma)
    try:  # as an older version left it
        index.upsert("knowledge_memories", [private], np.ones((1, 384), dtype=np.float32), [{}])
    finally:
        index.close()
    assert vectors_present(chroma, [private]) == {private}
    stored_by(tmp_path / "alice", member_url, chroma, token, "alice's bike is blue")  # (the index opens)
    assert vectors_present(chroma, [private]) == set()


def test_a_store_with_no_team_indexes_its_private_memories_until_its_first_person_is_added(
    admin: PostgresCatalog, member_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    """A store with no team yet is one person's (their machines share it): its private memories'
    vectors go to the index as ever (HNSW, not an exact scan of every one of them at each search).
    Once the team has a person, the first process with a token removes them."""
    from test_postgres_access import person

    mine = stored_by(tmp_path / "alone", member_url, chroma, None, "my bike lock code is written inside the helmet")
    assert vectors_present(chroma, [mine]) == {mine}
    token = TeamRepository(admin).add("alice")  # (who takes over the memories written until then)
    alice = person(tmp_path / "alice", member_url, chroma, token)
    try:
        alice.store("alice's bike is blue", type="knowledge", scope="user")  # (the index opens)
        alice.flush()
        hits = alice.search("my bike lock code is written inside the helmet", limit=3, types=["knowledge"])
        assert hits[0].id == mine and "dense" in hits[0].sources
    finally:
        alice.close()
    assert vectors_present(chroma, [mine]) == set()


def test_a_persons_item_quota_evicts_only_what_they_wrote_outside_projects(
    admin: PostgresCatalog, member_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    """The item quota a store keeps as it stores (``retention.max_items_per_collection``) is a
    policy too: on a team store a person's process counts and evicts only their own memories
    outside projects, never the team's (whose count alone may pass any member's quota)."""
    team = TeamRepository(admin)

    def person(name: str) -> Any:
        quota = {"catalog.token": team.add(name), "retention.max_items_per_collection": 3}
        return machine(tmp_path / name, member_url, chroma, **quota)

    bob = person("bob")
    try:
        shared = [bob.store(f"shop fact {i}", type="knowledge", scope="project:shop") for i in range(3)]
    finally:
        bob.close()
    alice = person("alice")
    try:
        mine = [alice.store(f"alice's note {i}", type="knowledge", scope="user") for i in range(4)]
        alice.flush()
    finally:
        alice.close()
    left = {r[0] for r in admin.read("SELECT id FROM memories WHERE type = 'knowledge'")}
    assert set(shared) <= left  # the team's memories: not alice's quota's to evict
    assert len(left & set(mine)) == 3 and mine[-1] in left  # her own: down to her quota


def test_the_item_quota_evicts_on_a_shared_catalog_as_on_sqlite(
    postgres_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    """The store's single user (no team): a store past a type's quota evicts its least important
    memory in the same transaction (the eviction order read SQLite's own tables, and every store
    past the quota failed on PostgreSQL)."""
    with machine(tmp_path / "one", postgres_url, chroma, **{"retention.max_items_per_collection": 3}) as memory:
        kept = memory.store("kept: bookmarked", type="knowledge", metadata={"bookmarked": True})
        ids = [memory.store(f"note {i}", type="knowledge") for i in range(4)]
        memory.flush()
        left = {m.id for m in memory.list(type="knowledge", limit=10, scope="all")}
    assert len(left) == 3 and kept in left and ids[-1] in left


def test_a_persons_size_quota_counts_their_memories_on_the_server(
    admin: PostgresCatalog, member_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    """On a shared catalog the memories are on the server, not in the machine's directory: the size
    (``stats().storage``) and the size quota count the bytes of those the person's policy governs
    (their own outside projects), and the quota's cleanup evicts only those."""
    team = TeamRepository(admin)
    with machine(tmp_path / "bob", member_url, chroma, **{"catalog.token": team.add("bob")}) as bob:
        shared = [
            bob.store(f"shop runbook {i}: " + "x" * 10_000, type="knowledge", scope="project:shop") for i in range(5)
        ]
    alice_token = team.add("alice")
    with machine(tmp_path / "alice", member_url, chroma, **{"catalog.token": alice_token}) as alice:
        before = alice.stats().storage.total_size_mb
        mine = [alice.store(f"alice's draft {i}: " + "y" * 20_000, type="knowledge", scope="user") for i in range(10)]
        alice.flush()
        after = alice.stats().storage.total_size_mb
    assert after - before >= 0.19  # her 200 kB on the server (bob's project memories are not hers to count)
    quota = round(after - 0.1, 3)
    with machine(
        tmp_path / "alice", member_url, chroma, **{"catalog.token": alice_token, "storage.max_size_mb": quota}
    ) as alice:
        report = alice.cleanup(dry_run=True)
    assert report.by_reason.get("size_quota", 0) >= 5 and set(report.ids) <= set(mine), report
    assert not set(report.ids) & set(shared)
