"""A project is who it is (issue 32, item 3): a ``.remindful`` marker a cloned repository ships
cannot put its directory into a project already bound to another directory (a repository's key is a
name and 8 hex digits of a path: computable from a guessed path); the user can bind it
(``remindful scopes bind DIR PROJECT``, or ``scopes.projects`` in the user's own config). Through the
library here; through the real hooks in tests/test_project_claims_agents.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from remindful.shells.cli.app import app
from remindful.testing import open_fake
from test_scopes import repository


def clone_claiming(path: Path, key: str) -> Path:
    """A directory whose checked-in marker names the project ``key``."""
    path.mkdir(parents=True)
    (path / ".remindful").write_text(f"project = {key}\n")
    return path


def test_a_marker_naming_another_repositorys_key_is_refused(tmp_path: Path) -> None:
    victim = repository(tmp_path / "billing")
    with open_fake(tmp_path / "s") as memory:
        mine = memory.project_of(victim)
        assert mine is not None
        memory.store("the prod billing DB is db-billing.internal:6543", metadata={"cwd": str(victim)})
        clone = clone_claiming(tmp_path / "evil-clone", mine.key)
        theirs = memory.project_of(clone)
        assert theirs is not None and theirs.key != mine.key  # a project of its own
        assert memory.refused_markers() == {str(clone.resolve()): (mine.key, str(victim.resolve()))}
        planted = memory.store("Ran make: failed", metadata={"cwd": str(clone)})
        assert memory.get(planted).scope == theirs.scope
        assert all("6543" not in h.content for h in memory.search("billing DB", scope=[theirs]))
        assert any("6543" in h.content for h in memory.search("billing DB", scope=[mine]))


def test_a_place_key_recorded_nowhere_cannot_be_claimed_first(tmp_path: Path) -> None:
    """The attacker's clone may be opened before the victim's repository ever was: a marker naming
    a key shaped like a place's (``name-`` and 8 hex digits) is honoured only where it is recorded."""
    victim = tmp_path / "billing"
    with open_fake(tmp_path / "s") as memory:
        guessed = memory.project_of(victim.parent) and f"billing-{'0' * 8}"
        assert guessed
        clone = clone_claiming(tmp_path / "clone", guessed)
        found = memory.project_of(clone)
        assert found is not None and found.key != guessed
        assert memory.refused_markers()[str(clone.resolve())] == (guessed, "")


def test_a_named_project_stays_with_its_first_directory(tmp_path: Path) -> None:
    first = clone_claiming(tmp_path / "mine", "billing")
    with open_fake(tmp_path / "s") as memory:
        assert memory.project_of(first).key == "billing"  # type: ignore[union-attr]
        memory.store("the prod billing DB is db-billing.internal:6543", metadata={"cwd": str(first)})
    second = clone_claiming(tmp_path / "cloned", "billing")
    with open_fake(tmp_path / "s") as memory:  # another process: what it knows is the catalog's
        assert memory.project_of(first).key == "billing"  # type: ignore[union-attr]
        assert memory.project_of(second).key != "billing"  # type: ignore[union-attr]


def test_a_new_name_and_a_marker_without_one_are_honoured(tmp_path: Path) -> None:
    named = clone_claiming(tmp_path / "a", "Shop API")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / ".remindful").write_text("")
    with open_fake(tmp_path / "s") as memory:
        assert memory.project_of(named).key == "shop-api"  # type: ignore[union-attr]
        memory.store("x", metadata={"cwd": str(named)})
        assert memory.project_of(named / "sub").key == "shop-api"  # type: ignore[union-attr]
        assert memory.project_of(tmp_path / "b").root == str((tmp_path / "b").resolve())  # type: ignore[union-attr]
        assert memory.refused_markers() == {}


def test_the_user_binds_a_directory_and_unbinds_it(tmp_path: Path) -> None:
    victim = repository(tmp_path / "billing")
    with open_fake(tmp_path / "s") as memory:
        mine = memory.project_of(victim)
        assert mine is not None
        memory.store("the prod billing DB is db-billing.internal:6543", metadata={"cwd": str(victim)})
        checkout = clone_claiming(tmp_path / "second-checkout", mine.key)
        assert memory.project_of(checkout).key != mine.key  # type: ignore[union-attr]
        bound = memory.bind_project(checkout, mine.name)  # by name: the project the store knows
        assert bound.key == mine.key
        assert memory.project_of(checkout / "deeper").key == mine.key  # type: ignore[union-attr]
        assert memory.unbind_project(checkout)
        assert memory.project_of(checkout).key != mine.key  # type: ignore[union-attr]


def test_the_cli_binds_and_says_which_marker_it_refused(
    tmp_path: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    store = tmp_path / "s"
    victim = repository(tmp_path / "billing")
    runner = CliRunner()
    monkeypatch.chdir(victim)
    assert runner.invoke(app, ["--path", str(store), "store", "the prod billing DB is on port 6543"]).exit_code == 0
    key = json.loads(runner.invoke(app, ["--path", str(store), "scopes", "--json"]).stdout)["here"]["key"]
    clone = clone_claiming(tmp_path / "clone", key)
    monkeypatch.chdir(clone)
    listed = runner.invoke(app, ["--path", str(store), "scopes"])
    assert listed.exit_code == 0
    assert f"names project {key}, which is bound to {victim.resolve()}: not honoured" in listed.stderr
    assert f"remindful scopes bind {clone.resolve()} {key}" in listed.stderr
    done = runner.invoke(app, ["--path", str(store), "scopes", "bind", str(clone), key, "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["project"]["key"] == key
    here = json.loads(runner.invoke(app, ["--path", str(store), "scopes", "--json"]).stdout)
    assert here["here"]["key"] == key and here["refused_markers"] == []
    missing = runner.invoke(app, ["--path", str(store), "scopes", "bind", str(tmp_path / "nowhere"), key])
    assert missing.exit_code != 0 and "'directory': expected an existing directory" in missing.stderr
