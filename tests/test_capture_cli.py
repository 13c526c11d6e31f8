"""CLI capture commands through typer's CliRunner: watch, context, hook, and the fast entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from remindful.shells.cli.app import app
from remindful.shells.entry import _is_hook


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    # The relevance floors are calibrated on MiniLM's cosines, not the fake embedder's.
    monkeypatch.setenv("REMINDFUL_SEARCH__MIN_SCORE", "0")
    monkeypatch.setenv("REMINDFUL_CONTEXT__MIN_SCORE", "0")
    return CliRunner()


def test_watch_once_and_context(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "deploy.md").write_text("To deploy, run make release from the repository root. " * 20)
    store = str(tmp_path / "store")
    result = runner.invoke(app, ["--path", store, "watch", str(docs), "--once", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"success": True, "scan": {"indexed": 1}}
    monkeypatch.chdir(docs)  # a file's memories are its directory's project's: context here finds them
    result = runner.invoke(app, ["--path", store, "context", "how do I deploy", "--budget", "200", "--json"])
    assert result.exit_code == 0, result.output
    assert "make release" in json.loads(result.output)["context"]
    assert runner.invoke(app, ["--path", store, "context", "x", "--budget", "0"]).exit_code == 2
    missing = runner.invoke(app, ["--path", store, "watch", str(tmp_path / "nope"), "--once"])
    assert missing.exit_code == 2 and "Watch directory does not exist" in missing.output  # bad input


def test_hook_command_through_typer(runner: CliRunner, tmp_path: Path) -> None:
    payload = {"session_id": "cli", "tool_name": "Grep", "tool_input": {"pattern": "TODO"}}
    store = str(tmp_path / "store")
    result = runner.invoke(app, ["--path", store, "hook", "PostToolUse"], input=json.dumps(payload))
    assert result.exit_code == 0, result.output
    listed = runner.invoke(app, ["--path", store, "list", "--json"])
    assert [m["content"] for m in json.loads(listed.output)] == ["Searched for 'TODO' in ."]
    assert runner.invoke(app, ["--path", store, "hook", "PreToolUse"], input="{}").exit_code == 1


@pytest.mark.parametrize(
    ("argv", "fast"),
    [
        (["hook", "PreToolUse"], True),
        (["--path", "/x", "hook", "Stop"], True),
        (["-v", "hook", "Stop"], True),
        (["hook", "--help"], False),
        (["--help"], False),
        (["search", "hook"], False),
        (["--path", "hook", "list"], False),
        ([], False),
    ],
)
def test_entry_point_dispatch(argv: list[str], fast: bool) -> None:
    assert _is_hook(argv) is fast
