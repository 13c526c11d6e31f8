"""The specification's CLI verbs (spec/hook-and-file-capture.md): ``session start|end``,
``capture-memory --source hook|response`` and ``inject-context`` are aliases of ``hook EVENT``, on
the hooks' fast path."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_session import SCRIPT, agent_env
from remindful.shells.cli.app import app
from remindful.shells.entry import _is_hook
from remindful.shells.hook import parse_args, run
from remindful.testing import open_fake


@pytest.mark.parametrize(
    ("argv", "event", "accepts"),
    [
        (["hook", "PreToolUse"], "PreToolUse", None),
        (["session", "start"], "SessionStart", ()),
        (["--path", "/s", "session", "end"], "SessionEnd", ()),
        (["capture-memory"], None, ("PreToolUse", "PostToolUse", "PostToolUseFailure")),
        (["capture-memory", "--source", "hook"], None, ("PreToolUse", "PostToolUse", "PostToolUseFailure")),
        (["capture-memory", "--source=response"], None, ("Stop", "SubagentStop", "SessionEnd")),
        (["inject-context"], None, ("SessionStart", "UserPromptSubmit")),
    ],
)
def test_verbs_parse_as_hook_events(argv: list[str], event: str | None, accepts: tuple[str, ...] | None) -> None:
    _path, parsed, options = parse_args(argv)
    assert parsed == event and "usage" not in options
    assert options.get("accepts") == accepts
    assert _is_hook(argv)


def test_other_commands_stay_off_the_hook_path() -> None:
    for argv in (["session"], ["session", "bogus"], ["capture-memory", "--help"], ["store", "hook"], ["sessions"]):
        assert not _is_hook(argv), argv
    assert parse_args(["capture-memory", "--source", "file"])[2]["usage"].startswith("capture-memory --source file")


def spooled(store: Path) -> list[Any]:
    with open_fake(store) as memory:
        return memory.engine.catalog.read("SELECT kind FROM spool ORDER BY seq")


def verb(store: Path, words: list[str], payload: dict[str, Any]) -> tuple[int, str]:
    out = io.StringIO()
    return run(["--path", str(store), *words], stdin=io.StringIO(json.dumps(payload)), stdout=out), out.getvalue()


def test_each_verb_spools_its_event(tmp_path: Path) -> None:
    store = tmp_path / "store"
    tool = {"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "make"}, "tool_use_id": "t1"}
    assert verb(store, ["session", "start"], {"session_id": "s", "source": "startup"})[0] == 0
    assert verb(store, ["capture-memory", "--source", "hook"], {**tool, "hook_event_name": "PreToolUse"})[0] == 0
    failure = {**tool, "hook_event_name": "PostToolUseFailure", "error": "make: *** [all] Error 2"}
    assert verb(store, ["capture-memory", "--source", "hook"], failure)[0] == 0
    answer = {"session_id": "s", "last_assistant_message": "Built it."}  # no hook_event_name: Stop
    assert verb(store, ["capture-memory", "--source", "response"], answer)[0] == 0
    assert verb(store, ["inject-context"], {"session_id": "s", "prompt": "how do I build?"})[0] == 0
    assert verb(store, ["session", "end"], {"session_id": "s", "reason": "exit"})[0] == 0
    kinds = [row[0] for row in spooled(store)]
    assert kinds == ["SessionStart", "PreToolUse", "PostToolUseFailure", "Stop", "UserPromptSubmit", "SessionEnd"]


def test_a_verb_refuses_an_event_it_does_not_capture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    code, _ = verb(store, ["capture-memory", "--source", "hook"], {"session_id": "s", "hook_event_name": "Stop"})
    assert code == 1
    assert "hook_event_name: expected one of PreToolUse, PostToolUse, PostToolUseFailure" in capsys.readouterr().err
    code, _ = verb(store, ["capture-memory", "--source", "hook"], {"session_id": "s"})
    assert code == 1  # a tool event must say which
    assert spooled(store) == []


@pytest.mark.slow
def test_verbs_as_the_console_script_runs_them(tmp_path: Path) -> None:
    env = agent_env(tmp_path, REMINDFUL_HOOKS__START_DAEMON="false")
    payload = {"session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "Read", "tool_input": {"path": "x"}}
    done = subprocess.run(
        [SCRIPT, "--path", str(tmp_path / "s"), "capture-memory", "--source", "hook"],
        input=json.dumps(payload),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert [row[0] for row in spooled(tmp_path / "s")] == ["PostToolUse"]


def test_verbs_have_help() -> None:
    runner = CliRunner()
    for words in (["session", "--help"], ["session", "start", "--help"], ["capture-memory", "--help"]):
        result = runner.invoke(app, words)
        assert result.exit_code == 0 and "hook" in result.output.lower(), words
    assert runner.invoke(app, ["inject-context", "--help"]).exit_code == 0
