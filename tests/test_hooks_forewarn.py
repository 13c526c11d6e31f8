"""The PreToolUse failure warning in-process (issue 31 item 7; the real hooks and daemon are
tests/test_hooks_failure_warning.py): what counts as the same call, and where no warning is given."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from remindful.engine.projects import Resolver
from remindful.shells.hook import run
from remindful.testing import open_fake

FAILED = "Error: STAGING_DEPLOY_KEY is not set"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "shop-api"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def fire(store: Path, event: str, cwd: Path, command: str, n: int, **extra: Any) -> str:
    """Run one hook in-process; what it printed as additionalContext ("" for nothing)."""
    body = {
        "session_id": "s1",
        "cwd": str(cwd),
        "hook_event_name": event,
        "tool_name": "Bash",
        "tool_input": {"command": command},
        "tool_use_id": f"toolu_{event}_{n}",
        **extra,
    }
    out = io.StringIO()
    assert run(["--path", str(store), "hook", event], stdin=io.StringIO(json.dumps(body)), stdout=out) == 0
    if not out.getvalue():
        return ""
    printed = json.loads(out.getvalue())["hookSpecificOutput"]
    assert printed["hookEventName"] == "PreToolUse" and "permissionDecision" not in printed
    return str(printed["additionalContext"])


def fail_twice(store: Path, project: Path, command: str = "pnpm run deploy:staging") -> None:
    for n in range(2):
        fire(store, "PostToolUseFailure", project, command, n, error=FAILED)


def test_the_same_command_is_warned_about_another_is_not(tmp_path: Path, project: Path) -> None:
    store = tmp_path / "s"
    assert fire(store, "PreToolUse", project, "pnpm run deploy:staging", 10) == ""  # no catalog yet
    fail_twice(store, project)
    warned = fire(store, "PreToolUse", project, "pnpm run deploy:staging", 11)
    assert FAILED in warned and "2 failures recorded" in warned and "not an instruction" in warned
    assert fire(store, "PreToolUse", project, "pnpm run deploy:production", 12) == ""
    assert FAILED in fire(store, "PreToolUse", project, "pnpm  run deploy:staging", 13)  # the same, spaced out
    fire(store, "PostToolUse", project, "pnpm run deploy:staging", 14, tool_response={"stdout": "deployed"})
    assert fire(store, "PreToolUse", project, "pnpm run deploy:staging", 15) == ""  # it worked since


def test_no_warning_outside_a_project_or_where_injection_is_off(
    tmp_path: Path, project: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "s"
    home_store = tmp_path / "h"
    for n in range(2):  # in the home directory: no project, calls there cannot be told apart
        fire(home_store, "PostToolUseFailure", isolated_env, "make", n, error=FAILED)
    assert fire(home_store, "PreToolUse", isolated_env, "make", 5) == ""

    fail_twice(store, project)
    config = tmp_path / "config.yaml"
    config.write_text("memory:\n  hooks:\n    projects:\n      'shop-*': {inject: false}\n")
    monkeypatch.setenv("REMINDFUL_CONFIG", str(config))
    assert fire(store, "PreToolUse", project, "pnpm run deploy:staging", 20) == ""
    config.write_text("memory:\n  hooks:\n    inject: false\n")
    assert fire(store, "PreToolUse", project, "pnpm run deploy:staging", 21) == ""
    monkeypatch.delenv("REMINDFUL_CONFIG")
    assert FAILED in fire(store, "PreToolUse", project, "pnpm run deploy:staging", 22)


def test_a_planted_marker_naming_the_project_gets_no_warning(tmp_path: Path, project: Path) -> None:
    """A cloned repository's ``.remindful`` names the victim project's key (issue 32: "one project
    posing as another"): its PreToolUse must not be told the victim's failures."""
    store = tmp_path / "s"
    fail_twice(store, project)
    with open_fake(store) as memory:
        memory.drain_spool()  # stored: the catalog records the project at its directory
    victim = Resolver()(str(project))
    assert victim is not None
    assert FAILED in fire(store, "PreToolUse", project, "pnpm run deploy:staging", 30)
    clone = tmp_path / "cloned"
    clone.mkdir()
    (clone / ".remindful").write_text(f"project = {victim.key}\n")
    assert fire(store, "PreToolUse", clone, "pnpm run deploy:staging", 31) == ""
