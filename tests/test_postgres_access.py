"""What each person of a team store may see and change, refused by PostgreSQL itself (row-level
security, schema version 6), and the person's token as every shell uses it (``catalog.token``):
on connections of a member role (no superuser, not the tables' owner), through the Store, the
CLI's processes and the MCP server under the SDK's client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

import remindful
from conftest_chroma import chroma_server  # noqa: F401  (session fixture)
from remindful.api import MemoryManager
from remindful.engine.catalog import MemoryRow
from remindful.engine.postgres.catalog import PostgresCatalog
from remindful.engine.postgres.repositories import PostgresRepositories
from remindful.engine.postgres.team import PersonalView, TeamRepository, token_hash
from remindful.errors import AccessDeniedError, NotFoundError
from remindful.testing import FakeEmbedder

psycopg = pytest.importorskip("psycopg")


def memory(mid: str, content: str, scope: str | None, session: str | None = None, at: float = 0.0) -> MemoryRow:
    return MemoryRow(
        id=mid,
        type="knowledge",
        content=content,
        metadata="{}",
        source="manual",
        memory_class="semantic",
        session_id=session,
        created_at=1_700_000_000.0 + at,
        content_hash=mid,
        scope=scope,
    )


def as_member(url: str, token: str | None) -> Any:
    """A raw connection of the member role, naming ``token``'s person as the catalog does."""
    conn = psycopg.connect(url, autocommit=True, connect_timeout=5)
    if token is not None:
        conn.execute("SELECT set_config('remindful.token', %s, false)", (token,))
    return conn


def test_the_database_itself_refuses_a_member_what_the_token_does_not_allow(
    admin: PostgresCatalog, member_url: str, tmp_path: Path
) -> None:
    team = TeamRepository(admin)
    alice_token, bob_token = team.add("alice"), team.add("bob")
    alice_catalog = PostgresCatalog(member_url, redaction=admin.redaction, token=alice_token)
    alice = PersonalView(alice_catalog)
    alice.store(
        [
            memory("a-proj", "The staging deploy uses port 8081", "project:shop-1234abcd", "s-alice", 1),
            memory("a-pref", "Alice prefers tabs for indentation", "user", "s-alice", 2),
            memory("a-loose", "Alice noted the office wifi name", None, "s-alice", 3),
        ]
    )
    assert alice_catalog.await_windows()  # (her sessions' windows, built after the commit)
    with as_member(member_url, bob_token) as bob:
        seen = [r[0] for r in bob.execute("SELECT id FROM memories ORDER BY id")]
        assert seen == ["a-loose", "a-proj"]  # never alice's private memory
        # Nor its text in a session window: its own is hidden with it, and the windows of its
        # neighbours (alice's shared memories of the same session) do not hold it.
        assert bob.execute("SELECT count(*) FROM context_windows").fetchone()[0] == 2
        assert "tabs" not in " ".join(r[0] for r in bob.execute("SELECT text FROM context_windows"))
        assert bob.execute("DELETE FROM memories WHERE id IN ('a-pref', 'a-loose')").rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="not one this token may correct"):
            bob.execute("UPDATE memories SET content = 'overwritten' WHERE id = 'a-loose'")
        bob.execute("UPDATE memories SET content = 'The staging deploy uses port 8082' WHERE id = 'a-proj'")
        bob.execute("UPDATE memories SET access_count = access_count + 1 WHERE id = 'a-loose'")  # bookkeeping is
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="keeps its author"):
            bob.execute("UPDATE memories SET author = 'bob' WHERE id = 'a-proj'")
        # A memory is written as the token's person, or not at all.
        insert = (
            "INSERT INTO memories (id, type, content, source, memory_class, created_at, content_hash, scope, author) "
            "VALUES ('b-1', 'knowledge', 'Bob writes this', 'manual', 'semantic', 0, 'h', 'user', %s::text)"
        )
        for claimed in ("alice", None):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
                bob.execute(insert, (claimed,))
        bob.execute(insert, ("bob",))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            bob.execute("SELECT token_hash FROM people")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            bob.execute("ALTER TABLE memories DISABLE ROW LEVEL SECURITY")
        # The hash of a token (a stolen backup of `people`) names nobody: the token itself is hashed.
        bob.execute("SELECT set_config('remindful.token', %s, false)", (token_hash(alice_token),))
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="unknown or revoked"):
            bob.execute("SELECT id FROM memories")
        bob.execute("SELECT set_config('remindful.token', '', false)")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=r"this store has a team: set catalog.token"):
            bob.execute("SELECT id FROM memories")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="this store has a team"):
            bob.execute("SELECT n FROM type_counts")  # every table of the team's, not only memories
    assert alice.get(["a-loose", "a-proj", "b-1"]).keys() == {"a-loose", "a-proj"}
    assert alice.get(["a-proj"])["a-proj"][0].content == "The staging deploy uses port 8082"
    alice_catalog.close()


def test_a_revoked_token_is_refused_from_its_next_statement_on_every_table(
    admin: PostgresCatalog, member_url: str
) -> None:
    token = TeamRepository(admin).add("carol")
    with as_member(member_url, token) as carol:
        carol.execute("INSERT INTO sessions (id, started_at) VALUES ('s1', 0)")
        assert carol.execute("SELECT count(*) FROM sessions").fetchone()[0] == 1
        TeamRepository(admin).revoke("carol")  # while carol's connection is open
        for statement in (
            "SELECT count(*) FROM sessions",
            "INSERT INTO sessions (id, started_at) VALUES ('s2', 0)",
            "DELETE FROM sessions",
            "UPDATE sessions SET ended_at = 1",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="unknown or revoked"):
                carol.execute(statement)


def test_before_the_team_has_people_the_store_is_its_single_users_and_the_first_person_takes_it_over(
    admin: PostgresCatalog, member_url: str
) -> None:
    with as_member(member_url, None) as solo:
        solo.execute(
            "INSERT INTO memories (id, type, content, source, memory_class, created_at, content_hash, scope) "
            "VALUES ('old-pref', 'preference', 'I like dark mode', 'manual', 'semantic', 0, 'h', 'user')"
        )
        assert solo.execute("SELECT author FROM memories").fetchone()[0] is None
    dana, erin = TeamRepository(admin).add("dana"), TeamRepository(admin).add("erin")
    with as_member(member_url, dana) as conn:
        assert conn.execute("SELECT id, author FROM memories").fetchall() == [("old-pref", "dana")]
    with as_member(member_url, erin) as conn:
        assert conn.execute("SELECT id FROM memories").fetchall() == []  # dana's private memory now
    with as_member(member_url, None) as anonymous, pytest.raises(psycopg.errors.InsufficientPrivilege):
        anonymous.execute("SELECT id FROM memories")


def test_a_members_full_text_search_can_use_the_gin_index_under_row_level_security(
    admin: PostgresCatalog, member_url: str
) -> None:
    """Row-level security lets the planner use an index only for a LEAKPROOF condition: the
    superuser's migration marks full-text matching so (else every lexical search scans)."""
    token = TeamRepository(admin).add("gina")
    with as_member(member_url, token) as gina:
        gina.execute("SET enable_seqscan = off")
        for table, column in (("memories", "content_tsv"), ("context_windows", "tsv")):
            plan = "\n".join(
                r[0] for r in gina.execute(f"EXPLAIN SELECT 1 FROM {table} WHERE {column} @@ to_tsquery('port')")
            )
            assert "Index Cond" in plan and "Seq Scan" not in plan, plan


def test_a_members_reads_of_windows_and_of_the_rows_to_index_go_by_key(
    admin: PostgresCatalog, member_url: str, postgres_url: str
) -> None:
    """A window is read with its memory: it carries its memory's author and scope. Its policy once
    looked the memory up, planned as a hash of every memory the person sees, built for each
    statement that read a window (100 ms a count of a term's windows at 100,000 memories, as a
    team member; 3 ms looked up by key; none now). And
    the first row not yet indexed (the index view's floor, at each indexing batch) was found by
    walking the primary key from the oldest row, checking each (136 ms at 100,000)."""
    token = TeamRepository(admin).add("wanda")
    catalog = PostgresCatalog(member_url, redaction=admin.redaction, token=token)
    try:
        rows = [
            MemoryRow(
                id=f"w{i}", type="conversation", content=f"turn {i}: the deploy waits for review",
                metadata="{}", source="test", memory_class="episodic", session_id=f"s{i // 20}",
                created_at=1_700_000_000.0 + i, content_hash=f"w{i}", scope="project:shop",
            )
            for i in range(2000)
        ]  # fmt: skip
        catalog.write(lambda conn: catalog.insert_memories(conn, rows))
    finally:
        catalog.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE memories SET indexed = 1 WHERE rowid < (SELECT max(rowid) - 5 FROM memories)")
        conn.execute("ANALYZE memories")
        conn.execute("ANALYZE context_windows")
    with as_member(member_url, token) as wanda:
        plan = "\n".join(
            r[0]
            for r in wanda.execute(
                "EXPLAIN SELECT count(*) FROM (SELECT 1 FROM context_windows "
                "WHERE tsv @@ plainto_tsquery('english', 'deploy') LIMIT 301) x"
            )
        )
        first = "\n".join(r[0] for r in wanda.execute("EXPLAIN SELECT min(rowid) FROM memories WHERE indexed = 0"))
    assert "SubPlan" not in plan and "memories" not in plan, plan  # (read by its own author and scope)
    assert "idx_memories_unindexed_rowid" in first, first


# -- the Store, with the token from the settings --------------------------------------------------


@pytest.fixture
def chroma(chroma_server: tuple[str, int]) -> tuple[str, int]:  # noqa: F811
    return chroma_server


def person(root: Path, url: str, chroma: tuple[str, int], token: str | None) -> MemoryManager:
    host, port = chroma
    return remindful.open(
        root,
        embedder=FakeEmbedder(),
        **{
            "catalog.url": url,
            "catalog.token": token,
            "storage.chromadb.mode": "server",
            "storage.chromadb.host": host,
            "storage.chromadb.port": port,
            "search.min_score": 0.0,
        },
    )


def test_the_store_acts_as_the_tokens_person(
    admin: PostgresCatalog, member_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    team = TeamRepository(admin)
    alice = person(tmp_path / "alice", member_url, chroma, team.add("alice"))
    bob = person(tmp_path / "bob", member_url, chroma, team.add("bob"))
    try:
        private = alice.store("alice prefers the solarized colour theme", type="knowledge", scope="user")
        shared = alice.store("the colour theme of the shop's dashboard is teal", type="knowledge", scope="project:shop")
        loose = alice.store("the colour printer is on the second floor", type="knowledge")  # (in no project)
        alice.flush()
        bob.flush()
        assert {h.id for h in alice.search("colour theme", limit=10, scope="all")} >= {private, shared}
        found = {h.id for h in bob.search("colour theme", limit=10, scope="all")}
        assert private not in found and shared in found
        assert bob.get_batch([private]) == [None]
        with pytest.raises(NotFoundError):
            bob.update(private, content="bob overwrote it")
        with pytest.raises(AccessDeniedError) as refused:
            bob.delete(loose)
        assert "\n" not in str(refused.value) and loose in str(refused.value)
        with pytest.raises(AccessDeniedError, match="not one this token may correct"):
            bob.update(loose, content="bob overwrote it")
        bob.update(shared, content="the colour theme of the shop's dashboard is navy")
        assert alice.get(shared).content == "the colour theme of the shop's dashboard is navy"
        assert bob.delete(shared)
        assert alice.get(loose).content == "the colour printer is on the second floor"
        assert alice.get(private).content.startswith("alice prefers")

        team.revoke("alice")  # mid-session: alice's store is open
        for attempt in (
            lambda: alice.search("colour", limit=3),
            lambda: alice.store("written after the revocation"),
            lambda: alice.get(loose),
        ):
            with pytest.raises(AccessDeniedError, match=r"catalog.token is unknown or revoked") as gone:
                attempt()
            assert "\n" not in str(gone.value)
    finally:
        alice.close()
        bob.close()


def test_the_hooks_events_are_delivered_by_the_machines_drain_as_its_person(
    admin: PostgresCatalog, member_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    """Hooks spool on the machine without the server; the drain that delivers their events holds
    the machine's token: the memories are its person's, a user-scope one private to them."""
    import io

    from remindful.shells.hook import run

    team = TeamRepository(admin)
    hana = person(tmp_path / "hana", member_url, chroma, team.add("hana"))
    ivan = person(tmp_path / "ivan", member_url, chroma, team.add("ivan"))
    try:
        hana.store("opened before the hooks ran")
        payload = {"session_id": "sess-h", "prompt": "remember that I always want terse answers", "cwd": str(tmp_path)}
        argv = ["--path", str(tmp_path / "hana"), "hook", "UserPromptSubmit", "--no-context"]
        assert run(argv, stdin=io.StringIO(json.dumps(payload))) == 0
        assert hana.drain_spool() == 1
        rows = admin.read("SELECT id, author, scope FROM memories WHERE content LIKE %s", ("%terse answers%",))
        assert {author for _, author, _ in rows} == {"hana"}
        # The prompt (the project's conversation) and the preference it states (the user scope: hana's).
        private = {mid for mid, _, scope in rows if scope == "user"}
        shared = {mid for mid, _, scope in rows if scope != "user"}
        assert private and shared
        seen = {m.id for m in ivan.list(limit=50, scope="all")}
        assert shared <= seen and not private & seen
        assert private <= {m.id for m in hana.list(limit=50, scope="all")}
    finally:
        hana.close()
        ivan.close()


def test_every_http_surface_answers_a_refused_token_403() -> None:
    from remindful.errors import http_status

    assert http_status(AccessDeniedError("the token of catalog.token is unknown or revoked")) == 403


def test_without_a_token_a_team_store_is_refused_with_one_line(
    admin: PostgresCatalog, member_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    TeamRepository(admin).add("frank")
    anonymous = person(tmp_path / "anon", member_url, chroma, None)
    try:
        with pytest.raises(AccessDeniedError, match=r"this store has a team: set catalog.token") as refused:
            anonymous.store("who am I")
        assert "\n" not in str(refused.value)
    finally:
        anonymous.close()
    with pytest.raises(AccessDeniedError, match="unknown or revoked"):
        person(tmp_path / "wrong", member_url, chroma, "rmf_not-a-token").stats()


# -- the token's setting: where it may come from, where it never shows --------------------------


def test_the_token_comes_from_the_environment_or_a_private_file_and_is_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from remindful.config import load_settings
    from remindful.engine.backend import catalog_token
    from remindful.errors import ConfigError

    secret = "rmf_" + "s3cr3t-t0ken-" * 3
    monkeypatch.setenv("REMINDFUL_CATALOG__TOKEN", secret)
    settings = load_settings(tmp_path)
    assert catalog_token(settings) == secret
    assert secret not in repr(settings) and secret not in settings.model_dump_json()
    monkeypatch.delenv("REMINDFUL_CATALOG__TOKEN")

    holder = tmp_path / "token"
    holder.write_text(secret + "\n")
    os.chmod(holder, 0o644)
    monkeypatch.setenv("REMINDFUL_CATALOG__TOKEN_FILE", str(holder))
    with pytest.raises(ConfigError, match=r"catalog.token_file") as loose:
        catalog_token(load_settings(tmp_path))
    assert "chmod 600" in str(loose.value) and secret not in str(loose.value)
    os.chmod(holder, 0o600)
    assert catalog_token(load_settings(tmp_path)) == secret

    monkeypatch.setenv("REMINDFUL_CATALOG__TOKEN", "two\nlines")
    with pytest.raises(ConfigError) as bad:
        load_settings(tmp_path)
    assert "two" not in str(bad.value)


def test_the_token_never_reaches_config_the_dashboards_settings_or_a_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from remindful.config import load_settings
    from remindful.shells.cli import app
    from remindful.web.provenance import setting_rows

    secret = "rmf_" + "n3ver-sh0wn-" * 3
    monkeypatch.setenv("MEMORY_STORAGE_PATH", str(tmp_path / "store"))
    monkeypatch.setenv("REMINDFUL_CATALOG__TOKEN", secret)
    shown = CliRunner().invoke(app, ["config", "--json"])
    assert shown.exit_code == 0 and secret not in shown.output
    assert json.loads(shown.output)["catalog"]["token"] == "**********"
    assert secret not in repr(setting_rows(load_settings(tmp_path / "store")))
    with remindful.open(tmp_path / "store", embedder=FakeEmbedder()) as local:  # (no catalog.url: local)
        local.store("something to back up")
        backup = local.backup("with-a-token")
    with tarfile.open(backup.path) as archive:
        members = [archive.extractfile(m) for m in archive.getmembers() if m.isfile()]
        contents = [member.read() for member in members if member is not None]
    assert any(b"**********" in c for c in contents)  # settings.json, the token masked
    assert not [c for c in contents if secret.encode() in c]
    written = [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
    assert written and not [p for p in written if secret.encode() in p.read_bytes()]


@pytest.mark.slow
def test_two_peoples_cli_processes_on_one_team_store(
    admin: PostgresCatalog, member_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    """``remindful`` processes of two people (two HOMEs, each token in the environment): alice's
    private memory is hers, bob may not delete it; the tokens reach no command line, no output, no
    file under either home, no doctor or export; a revoked token's next command fails with one line."""
    from agent_session import SCRIPT, agent_env

    team = TeamRepository(admin)
    tokens = {"alice": team.add("alice"), "bob": team.add("bob")}
    host, port = chroma
    homes = {name: tmp_path / name for name in tokens}
    outputs: list[str] = []

    def cli(name: str, *argv: str, ok: bool = True) -> str:
        env = agent_env(
            homes[name],
            REMINDFUL_CATALOG__URL=member_url,
            REMINDFUL_CATALOG__TOKEN=tokens[name],
            REMINDFUL_STORAGE__CHROMADB__MODE="server",
            REMINDFUL_STORAGE__CHROMADB__HOST=host,
            REMINDFUL_STORAGE__CHROMADB__PORT=str(port),
        )
        done = subprocess.run(
            [SCRIPT, *argv], env=env, capture_output=True, text=True, timeout=300, check=False, cwd=homes[name]
        )
        outputs.append(done.stdout + done.stderr)
        assert (done.returncode == 0) == ok, done.stdout + done.stderr
        running = [p.read_bytes() for p in Path("/proc").glob("[0-9]*/cmdline") if p.exists()]
        assert not any(token.encode() in cmdline for cmdline in running for token in tokens.values())
        return done.stdout + done.stderr

    for home in homes.values():
        home.mkdir()
    stored = cli("alice", "store", "alice's own shell alias for deploys is dpl", "--scope", "user", "--json")
    private = json.loads(stored)["memory_id"]
    assert "dpl" not in cli("bob", "search", "shell alias for deploys", "--limit", "5")
    assert "dpl" in cli("alice", "search", "shell alias for deploys", "--limit", "5")
    refused = cli("bob", "delete", private, ok=False)
    assert len(refused.strip().splitlines()) == 1
    cli("bob", "doctor")
    cli("bob", "config")
    cli("alice", "export", str(tmp_path / "alice.jsonl"))
    assert "dpl" in (tmp_path / "alice.jsonl").read_text()
    team.revoke("alice")
    gone = cli("alice", "search", "shell alias", ok=False)
    assert "unknown or revoked" in gone and len(gone.strip().splitlines()) == 1
    everything = "".join(outputs) + (tmp_path / "alice.jsonl").read_text()
    assert not [token for token in tokens.values() if token in everything]
    written = [p for home in homes.values() for p in home.rglob("*") if p.is_file()]
    assert written and not [p for p in written for t in tokens.values() if t.encode() in p.read_bytes()]


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_mcp_server_acts_as_its_tokens_person_until_the_token_is_revoked(
    admin: PostgresCatalog, member_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    from mcp import Client, StdioServerParameters

    from mcp_client import call, tool_error

    team = TeamRepository(admin)
    alice_catalog = PostgresCatalog(member_url, redaction=admin.redaction, token=team.add("alice"))
    alice = PersonalView(alice_catalog)
    alice.store([memory("a-pref", "alice keeps her dotfiles in a private repository", "user")])
    alice.store([memory("a-proj", "the dotfiles of the team live in the infra repository", "project:infra-1234")])
    alice_catalog.close()
    token = team.add("bob")
    host, port = chroma
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMINDFUL_")}
    env.update(
        HOME=str(tmp_path / "home"),
        MEMORY_STORAGE_PATH=str(tmp_path / "store"),
        REMINDFUL_CATALOG__URL=member_url,
        REMINDFUL_CATALOG__TOKEN=token,
        REMINDFUL_STORAGE__CHROMADB__MODE="server",
        REMINDFUL_STORAGE__CHROMADB__HOST=host,
        REMINDFUL_STORAGE__CHROMADB__PORT=str(port),
        REMINDFUL_DAEMON__SERVE_START_DELAY_S="600",
    )
    server = StdioServerParameters(command=str(Path(sys.executable).parent / "remindful"), args=["serve"], env=env)
    async with Client(server, read_timeout_seconds=120) as client:
        shared = await call(
            client, "memory_search", query="dotfiles repository", min_score=0, scope="project:infra-1234"
        )
        assert [hit["id"] for hit in shared["memories"]] == ["a-proj"]
        private = await call(client, "memory_search", query="dotfiles repository", min_score=0, scope="user")
        assert private["memories"] == []  # alice's user scope is hers
        team.revoke("bob")  # mid-session
        message = await tool_error(client, "memory_search", query="dotfiles", scope="project:infra-1234")
        assert "unknown or revoked" in message and "\n" not in message and token not in message


def test_the_stores_term_counts_are_shared_by_every_process_and_count_no_private_memory(
    admin: PostgresCatalog, member_url: str, postgres_url: str
) -> None:
    """A fresh process's search counts each new term's matches (a heap read each): the store keeps
    the counts for every process and machine. They count only what every person sees (a count of
    private texts would tell whether someone's private memory holds a word), and only the store's
    own function writes them."""
    team = TeamRepository(admin)
    alice_token, bob_token = team.add("alice"), team.add("bob")

    def opened(token: str) -> PostgresCatalog:
        return PostgresCatalog(member_url, redaction=admin.redaction, token=token)

    alice = opened(alice_token)
    try:
        rows = [
            MemoryRow(
                id=f"z{i}", type="knowledge", content=f"note {i}: the zebra crossing" + (" at dusk" if i < 4 else ""),
                metadata="{}", source="test", memory_class="semantic", session_id="s",
                created_at=1_700_000_000.0 + i, content_hash=f"z{i}", scope="user" if i < 4 else "project:shop",
            )
            for i in range(10)
        ]  # fmt: skip
        alice.write(lambda conn: alice.insert_memories(conn, rows))
        counts, _ = alice.doc_freqs(["zebra", "dusk"])
        assert counts == {"zebra": 6, "dusk": 0}  # (alice's private four are hers, not the team's count)
        windows = alice.read("SELECT term, n FROM remindful_term_counts('context_fts', ARRAY['zebra', 'dusk'], 301)")
        assert sorted(windows) == [("dusk", 0), ("zebra", 6)]  # (nor are their windows)
    finally:
        alice.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # (the admin marks the kept count)
        conn.execute("UPDATE term_counts SET n = 5 WHERE term = 'zebra'")
    bob = opened(bob_token)
    try:
        counts, _ = bob.doc_freqs(["zebra"])
        assert counts == {"zebra": 5}  # read, not counted again
    finally:
        bob.close()
    with as_member(member_url, bob_token) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("UPDATE term_counts SET n = 0")
    counts, _ = admin.doc_freqs(["zebra"])  # (the admin's process, without a token)
    assert counts == {"zebra": 5}
    PostgresRepositories.over(admin).memories.clear_side_tables({})  # a store cleared forgets them
    assert admin.read("SELECT count(*) FROM term_counts") == [(0,)]


def test_the_counts_made_before_the_team_had_people_are_forgotten_when_its_first_person_comes(
    admin: PostgresCatalog, member_url: str
) -> None:
    """Before a store has people, its single user's counts count every memory, private ones too.
    Kept after the first person came, they would tell the team whether that person's private
    memories hold a word."""
    rows = [memory(f"p{i}", f"a private note {i} about the zebra", "user", at=i) for i in range(3)]
    admin.write(lambda conn: admin.insert_memories(conn, rows))
    assert admin.doc_freqs(["zebra"])[0] == {"zebra": 3}  # (the single user's own count, kept)
    team = TeamRepository(admin)
    team.add("alice")  # (who takes over the single user's memories)
    bob = PostgresCatalog(member_url, redaction=admin.redaction, token=team.add("bob"))
    try:
        assert bob.doc_freqs(["zebra"])[0] == {"zebra": 0}
    finally:
        bob.close()


def test_the_count_trigger_runs_as_the_owner_and_still_counts_a_members_rows(
    admin: PostgresCatalog, member_url: str, postgres_url: str
) -> None:
    """The type and scope counts are kept by a trigger after a row passed the memories' policies;
    run as the schema's owner, its upserts are not checked by the counts' policies a second time (a
    member's acknowledgement: 4.6 -> 3.9 ms)."""
    token = TeamRepository(admin).add("carol")
    carol = PostgresCatalog(member_url, redaction=admin.redaction, token=token)
    try:
        row = MemoryRow(
            id="c1", type="knowledge", content="the printer is on the second floor", metadata="{}", source="test",
            memory_class="semantic", session_id="s", created_at=1_700_000_000.0, content_hash="c1", scope="user",
        )  # fmt: skip
        carol.write(lambda conn: carol.insert_memories(conn, [row]))
        assert carol.type_counts() == {"knowledge": 1} and carol.scope_counts().get("user") == 1
    finally:
        carol.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        definer = conn.execute("SELECT prosecdef FROM pg_proc WHERE proname = 'remindful_count_rows'").fetchone()
    assert definer == (True,)
