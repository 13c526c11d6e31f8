"""install-hooks: merge into Claude Code's settings without touching other hooks; uninstall only ours."""

from __future__ import annotations

import json
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
    assert settings_file(tmp_path, False) == tmp_path.resolve() / ".claude" / "settings.json"
    assert settings_file(None, True) == Path("~/.claude/settings.json").expanduser()
    with pytest.raises(ValidationError, match="not both"):
        settings_file(tmp_path, True)


def test_cli_install_hooks_with_storage_path(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["--path", str(tmp_path / "store"), "install-hooks", "--project", str(tmp_path)])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / ".claude" / "settings.json").read_text())
    command = data["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    assert f"--path {tmp_path / 'store'} hook PreToolUse" in command
    result = runner.invoke(app, ["install-hooks", "--project", str(tmp_path), "--uninstall"])
    assert result.exit_code == 0 and json.loads((tmp_path / ".claude" / "settings.json").read_text()) == {}
    assert runner.invoke(app, ["install-hooks", "--project", str(tmp_path), "--user"]).exit_code == 2
