"""``remindful install-hooks``: merge remindful's hook block into one of Claude Code's settings files.

Which file (``--project DIR``, default the current directory):

- ``<project>/.claude/settings.local.json`` by default: this user's, on this machine, not committed
  (it is added to the repository's ``.git/info/exclude`` when git does not ignore it yet). The
  command is this installation's absolute ``remindful``, which runs whatever PATH the agent has.
- ``<project>/.claude/settings.json`` with ``--shared``: committed, for everyone who clones the
  project. The command is ``remindful`` as found on PATH, so that it resolves on every machine
  where remindful is installed (``pipx install remindful`` puts it there); no absolute path of
  this machine is written, and a storage path under the home directory is written with ``~``.
- ``~/.claude/settings.json`` with ``--user``: every project of this user.

Other keys and other hooks are kept; our entries are recognised by their command
(``… remindful … hook <Event>``), replaced on reinstall and the only ones removed by
``--uninstall``. The file is written atomically; invalid JSON in it is an error and the file is
left untouched. Timeouts are the specification's (spec/hook-and-file-capture.md), in seconds as
Claude Code reads them (a number: 0.5 is 500 ms).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from remindful.engine.atomic import replaced_atomically
from remindful.errors import ValidationError
from remindful.owned import private_dir, refuse_untrusted

#: Event → timeout in seconds: the specification's, plus PostToolUseFailure as PostToolUse (a
#: failed tool call is captured as a failure, not counted as a success).
HOOK_TIMEOUTS: dict[str, float] = {
    "SessionStart": 5,
    "UserPromptSubmit": 2,
    "PreToolUse": 0.5,
    "PostToolUse": 3,
    "PostToolUseFailure": 3,
    "Stop": 3,
    "SessionEnd": 30,
}
TOOL_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure")
_OURS = re.compile(r"remindful\S*\s+(?:.*\s)?hook\s+\w+")
LOCAL_FILE = "settings.local.json"
SHARED_FILE = "settings.json"


def settings_file(project: str | os.PathLike[str] | None, *, user: bool = False, shared: bool = False) -> Path:
    """The settings file to write (see the module docstring). Raises ValidationError for
    ``--user`` with ``--project`` or ``--shared``."""
    if user and (project is not None or shared):
        raise ValidationError("--user", "expected --user alone, or --project DIR and/or --shared")
    if user:
        return Path("~/.claude/settings.json").expanduser()
    root = Path(project or ".").expanduser().resolve()
    return root / ".claude" / (SHARED_FILE if shared else LOCAL_FILE)


def hook_command(event: str, storage: str | None = None, *, portable: bool = False) -> str:
    """The command line for one event. ``portable``: ``remindful`` from PATH and a storage path
    under the home directory written with ``~`` (left for the hook to expand), for a file other
    machines read; else the absolute ``remindful`` script of this installation."""
    if portable:
        script = "remindful"
        if storage:
            storage = _home_relative(storage)
    else:
        script = shutil.which("remindful") or str(Path(sys.executable).with_name("remindful"))
    parts = [script] + (["--path", storage] if storage else []) + ["hook", event]
    return " ".join(shlex.quote(p) for p in parts)  # a quoted ~ is expanded by the hook itself


def _home_relative(storage: str) -> str:
    home = Path("~").expanduser()
    path = Path(os.path.expandvars(storage)).expanduser()
    try:
        return "~/" + path.resolve().relative_to(home.resolve()).as_posix()
    except ValueError:
        return storage


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


def install(
    path: Path, *, storage: str | None = None, uninstall: bool = False, portable: bool | None = None
) -> dict[str, Any]:
    """Merge (or remove) our hooks in ``path``. ``portable`` (default: whether ``path`` is a
    shared ``settings.json`` of a project): see :func:`hook_command`. Returns ``{"path", "events",
    "action", "command", "warnings"}``."""
    if portable is None:
        portable = path.name == SHARED_FILE and path.parent != Path("~/.claude").expanduser()
    data = _load(path)
    hooks: dict[str, Any] = dict(data.get("hooks") or {})
    for event in list(hooks):
        cleaned = _without_ours(hooks[event])
        if cleaned:
            hooks[event] = cleaned
        else:
            del hooks[event]
    warnings: list[str] = []
    if not uninstall:
        for event, timeout in HOOK_TIMEOUTS.items():
            command = hook_command(event, storage, portable=portable)
            entry: dict[str, Any] = {"hooks": [{"type": "command", "command": command, "timeout": timeout}]}
            if event in TOOL_EVENTS:
                entry = {"matcher": "*", **entry}
            hooks[event] = [*hooks.get(event, []), entry]
        if portable and shutil.which("remindful") is None:
            warnings.append(
                "`remindful` is not on this PATH; the hooks run `remindful` from the PATH Claude Code "
                "starts with (`pipx install` puts it there)"
            )
        if portable and storage and not _home_relative(storage).startswith("~/"):
            warnings.append(f"the storage path {storage} is written as is: every machine must have it")
    if hooks:
        data["hooks"] = hooks
    else:
        data.pop("hooks", None)
    _write_settings(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    if path.name == LOCAL_FILE and not uninstall:
        _exclude_from_git(path)
    return {
        "path": str(path),
        "events": list(HOOK_TIMEOUTS),
        "action": "uninstalled" if uninstall else "installed",
        "command": hook_command("EVENT", storage, portable=portable),
        "warnings": warnings,
    }


def _write_settings(path: Path, text: str) -> None:
    """Replace the settings file ``path`` with ``text`` atomically. The hook commands in it run as
    this user: the file is refused if another user owns it or can write it, or the directory it is
    in (:func:`remindful.owned.refuse_untrusted`); a new file is 0600 and a new directory 0700
    whatever the umask, an existing file keeps its mode less any group or other write bit."""
    private_dir(path.parent, "the directory of the Claude Code settings", tighten=False)
    refuse_untrusted(path, "Claude Code settings file")
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode) & ~0o022
    except FileNotFoundError:
        mode = 0o600
    with replaced_atomically(path, "w", encoding="utf-8") as out:
        out.write(text)
        os.fchmod(out.fileno(), mode)


def _exclude_from_git(path: Path) -> None:
    """Keep this user's settings file out of commits: add it to the repository's
    ``info/exclude`` unless git ignores it already (nothing happens outside a git work tree, or
    without git)."""
    git = shutil.which("git")
    if git is None:
        return
    cwd = path.parent
    try:
        ignored = subprocess.run(
            [git, "check-ignore", "-q", "--no-index", str(path)], cwd=cwd, capture_output=True, timeout=10, check=False
        )
        if ignored.returncode != 1:  # 0: ignored already; 128: not a work tree (or git failed)
            return
        found = subprocess.run(
            [git, "rev-parse", "--show-toplevel", "--git-path", "info/exclude"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return
    if len(found) != 2:
        return
    top, exclude = Path(found[0]), Path(found[1])
    exclude = exclude if exclude.is_absolute() else cwd / exclude
    try:
        pattern = "/" + path.resolve().relative_to(Path(top).resolve()).as_posix()
        exclude.parent.mkdir(parents=True, exist_ok=True)
        existing = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
        if pattern not in existing.splitlines():
            with exclude.open("a", encoding="utf-8") as f:
                f.write(("" if not existing or existing.endswith("\n") else "\n") + pattern + "\n")
    except (OSError, ValueError):
        return


__all__ = ["HOOK_TIMEOUTS", "LOCAL_FILE", "SHARED_FILE", "hook_command", "install", "is_ours", "settings_file"]
