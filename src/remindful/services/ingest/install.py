"""``remindful install-hooks``: merge remindful's hook block into Claude Code's settings file.

The file is ``<project>/.claude/settings.json`` (``--project DIR``, default the current
directory) or ``~/.claude/settings.json`` (``--user``). Other keys and other hooks are kept; our
entries are recognised by their command (``… remindful … hook <Event>``), replaced on reinstall
and the only ones removed by ``--uninstall``. The file is written atomically; invalid JSON in it
is an error and the file is left untouched.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from remindful.errors import ValidationError

#: Event → timeout in seconds (the spec's budgets, 500 ms rounded up to Claude Code's 1 s unit).
HOOK_TIMEOUTS = {
    "SessionStart": 5,
    "UserPromptSubmit": 2,
    "PreToolUse": 1,
    "PostToolUse": 3,
    "Stop": 3,
    "SessionEnd": 30,
}
TOOL_EVENTS = ("PreToolUse", "PostToolUse")
_OURS = re.compile(r"remindful\S*\s+(?:.*\s)?hook\s+\w+")


def settings_file(project: str | os.PathLike[str] | None, user: bool) -> Path:
    if user and project is not None:
        raise ValidationError("--project/--user", "expected one of --project DIR or --user, not both")
    if user:
        return Path("~/.claude/settings.json").expanduser()
    return Path(project or ".").expanduser().resolve() / ".claude" / "settings.json"


def hook_command(event: str, storage: str | None = None) -> str:
    """The command line for one event: the absolute ``remindful`` script when it can be found."""
    script = shutil.which("remindful") or str(Path(sys.executable).with_name("remindful"))
    parts = [script] + (["--path", storage] if storage else []) + ["hook", event]
    return " ".join(shlex.quote(p) for p in parts)


def is_ours(hook: Any) -> bool:
    return isinstance(hook, dict) and isinstance(hook.get("command"), str) and bool(_OURS.search(hook["command"]))


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except ValueError as exc:
        raise ValidationError(str(path), f"expected a JSON object; fix or move the file first ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("hooks", {}), dict):
        raise ValidationError(str(path), "expected a JSON object whose 'hooks' is an object")
    return data


def _without_ours(groups: Any) -> list[Any]:
    kept = []
    for group in groups if isinstance(groups, list) else []:
        if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
            kept.append(group)
            continue
        hooks = [h for h in group["hooks"] if not is_ours(h)]
        if hooks:
            kept.append({**group, "hooks": hooks})
    return kept


def install(path: Path, *, storage: str | None = None, uninstall: bool = False) -> dict[str, Any]:
    """Merge (or remove) our hooks in ``path``. Returns ``{"path", "events", "action"}``."""
    data = _load(path)
    hooks: dict[str, Any] = dict(data.get("hooks") or {})
    for event in list(hooks):
        cleaned = _without_ours(hooks[event])
        if cleaned:
            hooks[event] = cleaned
        else:
            del hooks[event]
    if not uninstall:
        for event, timeout in HOOK_TIMEOUTS.items():
            entry: dict[str, Any] = {
                "hooks": [{"type": "command", "command": hook_command(event, storage), "timeout": timeout}]
            }
            if event in TOOL_EVENTS:
                entry = {"matcher": "*", **entry}
            hooks[event] = [*hooks.get(event, []), entry]
    if hooks:
        data["hooks"] = hooks
    else:
        data.pop("hooks", None)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.remindful-tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return {"path": str(path), "events": list(HOOK_TIMEOUTS), "action": "uninstalled" if uninstall else "installed"}


__all__ = ["HOOK_TIMEOUTS", "hook_command", "install", "is_ours", "settings_file"]
