"""People on a team store (real PostgreSQL 15): tokens issued once and revoked, the user scope private
to its owner, project memories shared, who may delete or correct what enforced in the SQL, and a
correction of a stale copy refused."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remindful.engine.catalog import MemoryRow
from remindful.engine.postgres.catalog import PostgresCatalog
from remindful.engine.postgres.team import (
    AccessDeniedError,
    PersonalView,
    StaleVersionError,
    TeamRepository,
    token_hash,
)
from remindful.engine.redact import StoreRedactor, build_redactor
from remindful.errors import ValidationError


@pytest.fixture
def catalog(postgres_url: str, tmp_path: Path) -> Iterator[PostgresCatalog]:
    """The admin's catalog (the database's superuser: creates the schema, issues tokens)."""
    opened = PostgresCatalog(postgres_url, redaction=StoreRedactor(build_redactor(), tmp_path))
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def person(member_url: str, tmp_path: Path, catalog: PostgresCatalog) -> Iterator[Callable[[str], PersonalView]]:
    """``person(token)``: that person's view, on a connection of the member role (no superuser, not
    the owner: row-level security applies to it)."""
    opened: list[PostgresCatalog] = []

    def view(token: str) -> PersonalView:
        member = PostgresCatalog(member_url, redaction=StoreRedactor(build_redactor(), tmp_path), token=token)
        opened.append(member)
        return PersonalView(member)

    try:
        yield view
    finally:
        for member in opened:
            member.close()


def memory(mid: str, content: str, scope: str) -> MemoryRow:
    return MemoryRow(
        id=mid,
        type="knowledge",
        content=content,
        metadata=json.dumps({}),
        source="manual",
        memory_class="semantic",
        session_id=None,
        created_at=1_700_000_000.0,
        content_hash=mid,
        scope=scope,
    )


def test_a_token_is_shown_once_kept_as_a_hash_and_names_its_person(
    catalog: PostgresCatalog, person: Callable[[str], PersonalView]
) -> None:
    team = TeamRepository(catalog)
    token = team.add("alice")
    assert token.startswith("rmf_") and len(token) > 40
    assert catalog.read("SELECT token_hash FROM people") == [(token_hash(token),)]
    assert person(token).whoami() == "alice"
    with pytest.raises(ValidationError, match="alice is on the team already"):
        team.add("alice")
    with pytest.raises(ValidationError, match="name"):
        team.add("bob; DROP TABLE people")


def test_the_user_scope_is_private_and_a_project_is_shared(
    catalog: PostgresCatalog, person: Callable[[str], PersonalView]
) -> None:
    team = TeamRepository(catalog)
    alice, bob = person(team.add("alice")), person(team.add("bob"))
    alice.store([memory("a-pref", "Alice prefers tabs for indentation", "user")])
    alice.store([memory("a-proj", "The staging deploy uses port 8081", "project:shop-12345678")])
    bob.store([memory("b-pref", "Bob prefers spaces for indentation", "user")])

    assert set(alice.get(["a-pref", "a-proj", "b-pref"])) == {"a-pref", "a-proj"}
    assert set(bob.get(["a-pref", "a-proj", "b-pref"])) == {"a-proj", "b-pref"}
    assert bob.get(["a-proj"])["a-proj"][1] == "alice"  # the memory records its author
    assert alice.search(["indentation"]) == ["a-pref"]
    assert bob.search(["indentation", "deploying"]) != [] and "a-pref" not in bob.search(["indentation"])


def test_who_may_delete_what_is_enforced_in_the_query(
    catalog: PostgresCatalog, person: Callable[[str], PersonalView]
) -> None:
    team = TeamRepository(catalog)
    alice, bob = person(team.add("alice")), person(team.add("bob"))
    alice.store([memory("a-pref", "Alice prefers tabs", "user"), memory("a-proj", "Port 8081", "project:shop")])
    bob.store([memory("b-unscoped", "Something bob noted", "")])
    alice.store([memory("a-unscoped", "Something alice noted", "")])
    catalog.write(lambda conn: conn.execute("UPDATE memories SET scope = NULL WHERE scope = ''"))

    with pytest.raises(AccessDeniedError, match="not deleted: a-unscoped"):  # seen, but alice's
        bob.delete(["a-unscoped", "b-unscoped"])
    assert catalog.existing_ids(["a-unscoped", "b-unscoped"]) == {"a-unscoped", "b-unscoped"}  # none of them
    assert bob.delete(["a-pref", "b-unscoped"]) == ["b-unscoped"]  # never another's private memory
    assert catalog.existing_ids(["a-pref"]) == {"a-pref"}
    assert bob.delete(["a-proj"]) == ["a-proj"]  # the project's memory is the team's
    assert catalog.type_counts() == {"knowledge": 2}


def test_a_revoked_token_reads_and_writes_nothing_from_then_on(
    catalog: PostgresCatalog, person: Callable[[str], PersonalView]
) -> None:
    team = TeamRepository(catalog)
    token = team.add("carol")
    carol = person(token)
    carol.store([memory("c1", "Carol's note about caching", "project:shop")])
    assert set(carol.get(["c1"])) == {"c1"}

    assert team.revoke("carol") and not team.revoke("carol")
    # From now on every statement of carol's is refused by the database, with one line naming the setting.
    for attempt in (
        lambda: carol.get(["c1"]),
        lambda: carol.search(["caching"]),
        lambda: carol.delete(["c1"]),
        lambda: carol.store([memory("c2", "written after the revocation", "project:shop")]),
        lambda: carol.correct("c1", "changed after the revocation", 1),
        carol.whoami,
    ):
        with pytest.raises(AccessDeniedError, match=r"catalog.token is unknown or revoked") as refused:
            attempt()
        assert "\n" not in str(refused.value)
    assert catalog.existing_ids(["c1", "c2"]) == {"c1"}
    assert catalog.get_rows(["c1"])["c1"].content == "Carol's note about caching"
    fresh = person(team.add("carol"))  # a new token for the same person
    assert fresh.whoami() == "carol" and set(fresh.get(["c1"])) == {"c1"}


def test_a_correction_of_a_stale_copy_is_refused_with_one_line(
    catalog: PostgresCatalog, person: Callable[[str], PersonalView]
) -> None:
    team = TeamRepository(catalog)
    alice, bob = person(team.add("alice")), person(team.add("bob"))
    alice.store([memory("p", "The staging port is 8080", "project:shop")])
    (_, _, version) = bob.get(["p"])["p"]
    assert alice.correct("p", "The staging port is 8081", version) == 2
    with pytest.raises(StaleVersionError) as stale:
        bob.correct("p", "The staging port is 9090", version)  # made on version 1
    assert str(stale.value).count("\n") == 0 and "at version 2" in str(stale.value) and "version 1" in str(stale.value)
    row, _, now = alice.get(["p"])["p"]
    assert (row.content, now) == ("The staging port is 8081", 2)
    assert alice.search(["8081"]) == ["p"] and alice.search(["8080"]) == []
    alice.store([memory("private", "Alice's private note", "user")])
    with pytest.raises(AccessDeniedError):
        bob.correct("private", "overwritten", 1)


def test_team_commands(tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from remindful.shells.cli import app

    monkeypatch.setenv("MEMORY_STORAGE_PATH", str(tmp_path / "store"))
    monkeypatch.setenv("REMINDFUL_CATALOG__URL", postgres_url)
    runner = CliRunner()
    added = runner.invoke(app, ["team", "add", "dana"])
    assert added.exit_code == 0, added.output
    token = added.output.split()[-1]
    assert token.startswith("rmf_")
    listed = runner.invoke(app, ["team", "list"])
    assert listed.output.strip() == "dana" and token not in listed.output
    assert runner.invoke(app, ["team", "revoke", "dana"]).exit_code == 0
    assert runner.invoke(app, ["team", "list"]).output.strip() == "dana (revoked)"
    assert runner.invoke(app, ["team", "revoke", "dana"]).exit_code == 1
    with pytest.raises(AccessDeniedError, match="unknown or revoked"):
        PostgresCatalog(postgres_url, redaction=StoreRedactor(build_redactor(), tmp_path), token=token)


def test_team_commands_need_a_team_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from remindful.shells.cli import app

    monkeypatch.setenv("MEMORY_STORAGE_PATH", str(tmp_path / "store"))
    result = CliRunner().invoke(app, ["team", "add", "erin"])
    assert result.exit_code != 0 and "catalog.url" in result.output


def test_the_catalog_password_is_never_shown_by_config_or_the_settings_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from remindful.config import load_settings
    from remindful.shells.cli import app
    from remindful.web.provenance import setting_rows

    monkeypatch.setenv("MEMORY_STORAGE_PATH", str(tmp_path / "store"))
    monkeypatch.setenv("REMINDFUL_CATALOG__URL", "postgresql://team:pa55-w0rd@db.example:5432/memory")
    for argv in (["config"], ["config", "--json"]):
        shown = CliRunner().invoke(app, argv)
        assert shown.exit_code == 0 and "pa55-w0rd" not in shown.output
        assert "postgresql://team:***@db.example:5432/memory" in shown.output
    rows = {row.name: row.value for row in setting_rows(load_settings())}
    assert "pa55-w0rd" not in rows["catalog.url"]
