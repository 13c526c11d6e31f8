"""install-hooks: merge into Claude Code's settings without touching other hooks; uninstall only ours;
this user's settings.local.json by default, the committed settings.json with a portable command with
--shared; the specification's timeouts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from remindful.errors import ValidationError
from remindful.services.ingest.install import HOOK_TIMEOUTS, install, is_ours, settings_file
from remindful.shells.cli.app import app

OTHER = {"type": "command", "command": "npx prettier --write", "timeout": 30}


def test_merge_keeps_other_hooks_and_keys_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"model": "opus", "hooks": {"PostToolUse": [{"matcher": "Edit", "hooks": [OTHER]}]}}))
    install(path)
    install(path)  # again: still one entry of ours per event
    data = json.loads(path.read_text())
    assert data["model"] == "opus"
    assert set(data["hooks"]) == set(HOOK_TIMEOUTS)
    post = data["hooks"]["PostToolUse"]
    assert post[0] == {"matcher": "Edit", "hooks": [OTHER]}
    assert len(post) == 2 and post[1]["matcher"] == "*"
    for event, groups in data["hooks"].items():
        ours = [h for g in groups for h in g["hooks"] if is_ours(h)]
        assert len(ours) == 1 and ours[0]["command"].endswith(f"hook {event}")
        assert ours[0]["timeout"] == HOOK_TIMEOUTS[event]
    install(path, uninstall=True)
    assert json.loads(path.read_text()) == {
        "model": "opus",
        "hooks": {"PostToolUse": [{"matcher": "Edit", "hooks": [OTHER]}]},
    }


def test_mixed_group_keeps_the_other_command(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    install(path)
    data = json.loads(path.read_text())
    data["hooks"]["Stop"][0]["hooks"].append(OTHER)
    path.write_text(json.dumps(data))
    install(path, uninstall=True)
    assert json.loads(path.read_text()) == {"hooks": {"Stop": [{"hooks": [OTHER]}]}}


def test_invalid_json_is_an_error_and_the_file_is_untouched(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text("{broken")
    with pytest.raises(ValidationError, match="expected a JSON object"):
        install(path)
    assert path.read_text() == "{broken"


def test_settings_file_choice(tmp_path: Path) -> None:
    assert settings_file(tmp_path) == tmp_path.resolve() / ".claude" / "settings.local.json"
    assert settings_file(tmp_path, shared=True) == tmp_path.resolve() / ".claude" / "settings.json"
    assert settings_file(None, user=True) == Path("~/.claude/settings.json").expanduser()
    with pytest.raises(ValidationError, match="--user alone"):
        settings_file(tmp_path, user=True)
    with pytest.raises(ValidationError, match="--user alone"):
        settings_file(None, user=True, shared=True)


def test_timeouts_are_the_specifications_and_failures_are_hooked(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    install(path)
    data = json.loads(path.read_text())
    timeouts = {event: groups[0]["hooks"][0]["timeout"] for event, groups in data["hooks"].items()}
    assert timeouts == {
        "SessionStart": 5,
        "UserPromptSubmit": 2,
        "PreToolUse": 0.5,  # seconds, as Claude Code reads them: 500 ms
        "PostToolUse": 3,
        "PostToolUseFailure": 3,
        "Stop": 3,
        "SessionEnd": 30,
    }
    assert data["hooks"]["PostToolUseFailure"][0]["matcher"] == "*"


def test_cli_installs_in_the_local_file_with_this_installations_path(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["--path", str(tmp_path / "store"), "install-hooks", "--project", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / ".claude" / "settings.json").exists()
    data = json.loads((tmp_path / ".claude" / "settings.local.json").read_text())
    command = data["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    script = command.split()[0]
    assert Path(script).is_absolute() and os.access(script, os.X_OK)
    assert command.endswith(f"--path {tmp_path / 'store'} hook PreToolUse")
    result = runner.invoke(app, ["install-hooks", "--project", str(tmp_path), "--uninstall"])
    assert result.exit_code == 0 and json.loads((tmp_path / ".claude" / "settings.local.json").read_text()) == {}
    assert runner.invoke(app, ["install-hooks", "--project", str(tmp_path), "--user"]).exit_code == 2


def test_shared_file_has_a_command_that_resolves_on_any_machine(tmp_path: Path, isolated_env: Path) -> None:
    store = isolated_env / ".remindful" / "team-store"  # under HOME: written with ~
    result = CliRunner().invoke(app, ["--path", str(store), "install-hooks", "--project", str(tmp_path), "--shared"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / ".claude" / "settings.json").read_text()
    assert str(isolated_env) not in text and sys.prefix not in text  # nothing of this machine
    command = json.loads(text)["hooks"]["PostToolUse"][0]["hooks"][0]["command"]
    assert command == "remindful --path '~/.remindful/team-store' hook PostToolUse"
    # What Claude Code does with it: a shell, on the PATH the agent has (here: this venv's bin).
    env = {"HOME": str(isolated_env), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    env["REMINDFUL_HOOKS__START_DAEMON"] = "false"
    payload = {"session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {}}
    payload["tool_input"] = {"command": "ls"}
    done = subprocess.run(["sh", "-c", command], input=json.dumps(payload), env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (store / "catalog.sqlite3").exists()  # the hook expanded ~ itself


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_local_file_is_kept_out_of_commits(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    install(tmp_path / ".claude" / "settings.local.json")
    install(tmp_path / ".claude" / "settings.local.json")  # once in the exclude file
    exclude = (tmp_path / ".git" / "info" / "exclude").read_text().splitlines()
    assert exclude.count("/.claude/settings.local.json") == 1
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert ".claude" not in status.stdout
    install(tmp_path / ".claude" / "settings.json")  # the shared file is for committing
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert ".claude/" in status.stdout
