"""Hooks on a full disk (issue 32 item 5): a hook exited 0 and its event was gone (``could not spool …
Errno 28``); once space returned, 0 of 20 were stored and hooks.log was empty.

Now an event no file can take is handed to the running daemon, which keeps it in memory and spools it
once the disk has room (each hook says so on stderr); with no daemon to keep it, the hook says on
stderr that it is lost and exits 1 (Claude Code shows the user a non-blocking error).

A real small disk (a tmpfs mounted for the test: root only) holding HOME and so the store; the hooks
``remindful install-hooks`` wrote, run as Claude Code runs them (tests/agent_session.py); the daemon
they start; the fake model.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_session import SCRIPT, ClaudeCode, agent_env, stop_daemons, wait_until
from remindful import runtime
from requirements import is_root, requires
from small_disk import fill, mounted

pytestmark = [
    pytest.mark.slow,
    requires(is_root(), "root (to mount a small tmpfs)"),
]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with mounted(tmp_path / "disk", "64m") as mount:
        yield mount


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "shop-api"  # the project is elsewhere: only the store's disk is full
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def agent_on(disk: Path, project: Path, **extra: str) -> tuple[ClaudeCode, Path]:
    home = disk / "home"
    home.mkdir(exist_ok=True)
    env = agent_env(home, REMINDFUL_EMBEDDINGS__BACKEND="fake", **extra)
    done = subprocess.run([SCRIPT, "install-hooks"], cwd=project, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return ClaudeCode(project, env), home / ".remindful" / "memory"


def ran(store: Path, prefix: str) -> int:
    """How many stored memories record a run of a command starting with ``prefix``."""
    try:
        conn = sqlite3.connect(f"file:{store / 'catalog.sqlite3'}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error:
        return 0
    try:
        return int(
            conn.execute("SELECT count(*) FROM memories WHERE content LIKE ?", (f"Ran `{prefix}%",)).fetchone()[0]
        )
    except sqlite3.Error:
        return 0
    finally:
        conn.close()


def tool_event(n: int, prefix: str) -> dict[str, object]:
    return {
        "session_id": "s1",
        "tool_name": "Bash",
        "tool_input": {"command": f"{prefix} {n}"},
        "tool_response": {"stdout": f"step {n} done"},
        "tool_use_id": f"toolu_{prefix.replace(' ', '_')}_{n:03d}",
    }


def test_events_on_a_full_disk_are_kept_by_the_daemon_and_stored_once_there_is_room(disk: Path, project: Path) -> None:
    agent, store = agent_on(disk, project)
    try:
        agent.fire("SessionStart", {"session_id": "s1", "source": "startup"})  # starts the daemon
        wait_until(lambda: runtime.ask_daemon(store, {"op": "ping"}) is not None, 120, "the daemon answers")
        agent.fire("PostToolUse", tool_event(0, "echo warm"))
        wait_until(lambda: ran(store, "echo warm") == 1, 60, "a first event stored")

        filler = fill(disk)
        calls = [agent.fire("PostToolUse", tool_event(i, "echo full")) for i in range(20)]  # each exits 0
        for call in calls:
            said = [line for line in call.stderr.splitlines() if line.startswith("remindful:")]
            assert said and "keeps it in memory" in said[-1], call.stderr  # was nothing: exit 0, event gone
            assert "No space left on device" in said[-1] or "disk is full" in said[-1], said
        assert ran(store, "echo full") == 0

        filler.unlink()  # the disk has room again
        wait_until(lambda: ran(store, "echo full") == 20, 60, "the 20 events stored (was 0 of 20)")
        log = (store / "logs" / "hooks.log").read_text()
        assert "echo full" not in log  # the log holds no event's text, only that events were kept
    finally:
        stop_daemons(store)


def test_with_no_daemon_a_hook_on_a_full_disk_says_its_event_is_lost(disk: Path, project: Path) -> None:
    agent, store = agent_on(disk, project, REMINDFUL_HOOKS__START_DAEMON="false")
    agent.fire("PostToolUse", tool_event(0, "echo warm"))  # the store exists
    filler = fill(disk)
    command, _timeout = agent.commands["PostToolUse"]
    body = {"cwd": str(project), "hook_event_name": "PostToolUse", **tool_event(1, "echo lost")}
    done = subprocess.run(
        ["sh", "-c", command], input=json.dumps(body), cwd=project, env=agent.env, capture_output=True, text=True
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1, done.stderr  # was 0: Claude Code showed nothing
    assert lines and lines[-1].startswith("remindful: the PostToolUse event is lost"), lines
    assert "No space left on device" in lines[-1] and "free space" in lines[-1]
    assert "Traceback" not in done.stderr
    filler.unlink()
    log = (store / "logs" / "hooks.log").read_text()
    assert "echo lost" not in log
