"""A person's private memories leave no trace another person of the team can read, in any table of
the shared catalog: not their text, not the queries that found them, not what was injected or
audited about them (real PostgreSQL 15, row-level security, a member role's raw connections)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest_chroma import chroma_server  # noqa: F401  (session fixture)
from remindful.engine.postgres.catalog import PostgresCatalog
from remindful.engine.postgres.team import TeamRepository
from test_postgres_access import as_member, person

psycopg = pytest.importorskip("psycopg")

MARK = "quokkamarmalade"


@pytest.fixture
def chroma(chroma_server: tuple[str, int]) -> tuple[str, int]:  # noqa: F811
    return chroma_server


def every_row_as_text(conn: object) -> dict[str, str]:
    """Each table of the catalog's schema, every row a member may read, as one text."""
    tables = [
        name
        for (name,) in conn.execute(  # type: ignore[attr-defined]
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_type = 'BASE TABLE'"
        )
    ]
    seen = {}
    for table in tables:
        try:
            rows = conn.execute(f'SELECT t::text FROM "{table}" t').fetchall()  # type: ignore[attr-defined]
        except psycopg.errors.InsufficientPrivilege:
            continue  # (a table the member may not read at all: people)
        seen[table] = "\n".join(r[0] for r in rows)
    return seen


def test_a_private_memory_leaves_no_trace_another_person_can_read(
    admin: PostgresCatalog, member_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    team = TeamRepository(admin)
    alice_token, bob_token = team.add("alice"), team.add("bob")
    alice = person(tmp_path / "alice", member_url, chroma, alice_token)
    try:
        kept = alice.store(
            f"my {MARK} recipe uses two lemons",
            type="knowledge",
            scope="user",
            session_id="s-alice",
            metadata={"note": f"{MARK} for the fair"},
        )
        gone = alice.store(
            f"my {MARK} jar is in the left cupboard", type="knowledge", scope="user", session_id="s-alice"
        )
        alice.store("the shop's staging port is 8081", type="knowledge", scope="project:shop", session_id="s-shop")
        alice.flush()
        assert alice.search(f"where is the {MARK} jar", limit=3, scope="user")
        assert alice.context(f"how much lemon goes in the {MARK}", scope="user").hits
        alice.update(kept, content=f"my {MARK} recipe uses three lemons")
        alice.delete(gone)
        alice.flush()
    finally:
        alice.close()

    with as_member(member_url, alice_token) as conn:
        mine = {table for table, text in every_row_as_text(conn).items() if MARK in text}
        assert {"memories", "context_windows"} <= mine  # (the canary is there to be found)
    with as_member(member_url, bob_token) as conn:
        leaked = {table: text for table, text in every_row_as_text(conn).items() if MARK in text}
    assert leaked == {}, f"bob reads alice's private text in {sorted(leaked)}"


def test_memories_moved_into_the_user_scope_leave_their_neighbours_windows(
    admin: PostgresCatalog, member_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    """A session window holds a neighbour's text only if that neighbour is not private (or the
    window's memory is private too). A move of a whole scope into the user scope left the moved
    texts in the windows of their neighbours that stayed shared, which the team reads."""
    team = TeamRepository(admin)
    alice_token, bob_token = team.add("alice"), team.add("bob")
    alice = person(tmp_path / "alice", member_url, chroma, alice_token)
    try:
        alice.store("the shop's deploy starts at noon", type="knowledge", scope="project:shop", session_id="s")
        alice.store(f"my {MARK} plan for the weekend", type="knowledge", scope="project:draft", session_id="s")
        alice.store("the shop's deploy ends by two", type="knowledge", scope="project:shop", session_id="s")
        assert alice.move_scope("project:draft", "user") == 1
        alice.flush()
    finally:
        alice.close()
    with as_member(member_url, bob_token) as conn:
        windows = [r[0] for r in conn.execute("SELECT text FROM context_windows")]
    assert windows and not [w for w in windows if MARK in w]
