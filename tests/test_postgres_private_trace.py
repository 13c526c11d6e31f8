"""A person's private memories leave no trace another person of the team can read, in any table of
the shared catalog: not their text, not the queries that found them, not what was injected or
audited about them (real PostgreSQL 15, row-level security, a member role's raw connections)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest_chroma import chroma_server  # noqa: F401  (session fixture)
from remindful.engine.postgres.catalog import PostgresCatalog
from remindful.engine.postgres.team import TeamRepository
from remindful.engine.redact import StoreRedactor, build_redactor
from test_postgres_access import as_member, person

psycopg = pytest.importorskip("psycopg")

MARK = "quokkamarmalade"


@pytest.fixture
def admin(postgres_url: str, tmp_path: Path) -> Iterator[PostgresCatalog]:
    opened = PostgresCatalog(postgres_url, redaction=StoreRedactor(build_redactor(), tmp_path))
    try:
        yield opened
    finally:
        opened.close()


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
