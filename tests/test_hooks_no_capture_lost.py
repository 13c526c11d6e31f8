"""No capture lost (issue 32 item 5): the hooks Claude Code runs, as real processes through the
commands ``remindful install-hooks`` wrote.

- A prompt hook looked for context before it spooled the prompt: killed at its 2 s timeout (as
  Claude Code kills it) while it waited, the prompt was lost (12 at once with no daemon: 1 of 12).
- A payload over ``limits.hook_payload_bytes`` (a failing build's long log) was dropped whole.
- After a kill -9 of the daemon, the 30 s start back-off left events unstored for over 35 s.

The full disk is tests/reliability/test_full_disk_hooks.py (a real small tmpfs, root only).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_session import SCRIPT, ClaudeCode, agent_env, alive, daemon_pids, stop_daemons, wait_until

#: Claude Code's timeout of the prompt hook, as install-hooks writes it.
PROMPT_TIMEOUT_S = 2.0


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "shop-api"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


@pytest.fixture
def store(isolated_env: Path) -> Path:
    return isolated_env / ".remindful" / "memory"


def install(project: Path, env: dict[str, str]) -> ClaudeCode:
    done = subprocess.run([SCRIPT, "install-hooks"], cwd=project, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return ClaudeCode(project, env)


def spooled(store: Path, kind: str | None = None) -> list[dict[str, Any]]:
    """The records waiting in the store's spool (of ``kind``), oldest first."""
    if not (store / "catalog.sqlite3").exists():
        return []
    conn = sqlite3.connect(f"file:{store / 'catalog.sqlite3'}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute("SELECT kind, payload FROM spool ORDER BY seq").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()
    return [json.loads(payload) for k, payload in rows if kind is None or k == kind]


def stored(store: Path, where: str = "1", params: tuple[Any, ...] = ()) -> list[tuple[str, str]]:
    if not (store / "catalog.sqlite3").exists():
        return []
    conn = sqlite3.connect(f"file:{store / 'catalog.sqlite3'}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(f"SELECT content, metadata FROM memories WHERE {where}", params).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def popen_hook(agent: ClaudeCode, event: str, payload: dict[str, Any]) -> subprocess.Popen[str]:
    """The hook's command as Claude Code starts it (not waited for: the caller kills it)."""
    command, _timeout = agent.commands[event]
    proc = subprocess.Popen(
        ["sh", "-c", f"exec {command}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=agent.project,
        env=agent.env,
        text=True,
        start_new_session=True,
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"cwd": str(agent.project), "hook_event_name": event, **payload}))
    proc.stdin.close()
    return proc


def kill_at(proc: subprocess.Popen[str], seconds: float) -> None:
    """Wait up to ``seconds``, then kill the hook as Claude Code does at its timeout."""
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


@pytest.fixture
def silent_daemon(store: Path) -> Iterator[socket.socket]:
    """A daemon socket that accepts and never answers: a context that never comes (a daemon stuck
    behind a long search, a machine too busy to answer in time)."""
    store.mkdir(parents=True, mode=0o700, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(store / "daemon.sock"))
    sock.listen(64)
    yield sock
    sock.close()


def test_a_prompt_hook_killed_while_it_waits_for_context_has_spooled_its_prompt(
    project: Path, store: Path, isolated_env: Path, silent_daemon: socket.socket
) -> None:
    env = agent_env(isolated_env, patient=True, REMINDFUL_HOOKS__START_DAEMON="false")
    agent = install(project, env)
    proc = popen_hook(agent, "UserPromptSubmit", {"session_id": "s1", "prompt": "how do I deploy to staging?"})
    kill_at(proc, PROMPT_TIMEOUT_S)
    assert proc.returncode == -signal.SIGKILL  # it was waiting for its context: killed, as Claude Code does
    prompts = [r["memories"][0]["content"] for r in spooled(store, "UserPromptSubmit")]
    assert prompts == ["how do I deploy to staging?"]  # was []: the prompt went with the process


@pytest.mark.slow
def test_twelve_prompts_at_once_without_a_daemon_are_all_captured(
    project: Path, store: Path, isolated_env: Path
) -> None:
    """No daemon, a store that holds memories (so each hook loads the model for its context), twelve
    prompts at once, each killed at its timeout (stretched by the machine's load, as agent_session
    does): every prompt is kept (was 1 of 12)."""
    env = agent_env(isolated_env, patient=True, REMINDFUL_HOOKS__START_DAEMON="false")
    agent = install(project, env)
    done = subprocess.run(
        [SCRIPT, "store", "Deploys to staging go through `pnpm run deploy:staging`."],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    procs = [
        popen_hook(agent, "UserPromptSubmit", {"session_id": f"p{i}", "prompt": f"question number {i} about deploys"})
        for i in range(12)
    ]
    for proc in procs:
        kill_at(proc, PROMPT_TIMEOUT_S * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1)))
    prompts = {r["memories"][0]["content"] for r in spooled(store, "UserPromptSubmit")}
    assert prompts == {f"question number {i} about deploys" for i in range(12)}


# -- an oversized payload -------------------------------------------------------------------------


@pytest.mark.slow
def test_an_oversized_payload_keeps_a_truncated_memory_saying_so_with_the_secret_redacted(
    project: Path, store: Path, isolated_env: Path
) -> None:
    env = agent_env(isolated_env, REMINDFUL_HOOKS__START_DAEMON="false", REMINDFUL_EMBEDDINGS__BACKEND="fake")
    agent = install(project, env)
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    # A failing build's log of 5 MB, a token in its middle (where a cut at 4 MB would not fall).
    log = "".join(f"step {i}: compiling module_{i}.ts\n" for i in range(140_000))
    middle = len(log) // 2
    log = log[:middle] + f"export GITHUB_TOKEN={secret}\n" + log[middle:] + "error TS2322: 'string' is not 'number'"
    assert len(log) > 4 * 1024 * 1024
    payload = {
        "session_id": "big",
        "tool_name": "Bash",
        "tool_input": {"command": "pnpm run build"},
        "tool_use_id": "toolu_big_001",
        "error": log,
        "is_interrupt": False,
    }
    call = agent.fire("PostToolUseFailure", payload)
    assert call.returncode == 0
    records = spooled(store, "PostToolUseFailure")
    assert len(records) == 1, f"nothing kept (was dropped whole): {call.stderr}"
    memory = records[0]["memories"][0]
    assert memory["content"].startswith("Ran `pnpm run build`: failed")
    assert "truncated" in json.dumps(memory["metadata"]) or "truncated" in memory["content"]
    assert memory["metadata"].get("truncated", {}).get("bytes", 0) > 4 * 1024 * 1024
    text = json.dumps(records[0])
    assert secret not in text and secret[:12] not in text  # redacted whole, before any cut
    assert len(text) < 1024 * 1024
    assert "over limits.hook_payload_bytes" in (store / "logs" / "hooks.log").read_text()


@pytest.mark.slow
def test_an_oversized_prompt_is_redacted_whole_before_it_is_cut(project: Path, store: Path, isolated_env: Path) -> None:
    """A pasted log of 5 MB as a prompt, a token straddling the place where the kept text ends: no
    piece of it is kept (the cut comes after the redaction of the whole text)."""
    from remindful.shells.hook import OVERSIZED_KEEP_CHARS

    env = agent_env(isolated_env, REMINDFUL_HOOKS__START_DAEMON="false", REMINDFUL_EMBEDDINGS__BACKEND="fake")
    agent = install(project, env)
    secret = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
    head = "why does this fail? " + "x" * (OVERSIZED_KEEP_CHARS - 40) + " GITHUB_TOKEN="
    prompt = head + secret + " " + "log line\n" * 600_000
    assert len(prompt) > 4 * 1024 * 1024 and len(head) < OVERSIZED_KEEP_CHARS < len(head) + len(secret)
    call = agent.fire("UserPromptSubmit", {"session_id": "big", "prompt": prompt})
    assert call.returncode == 0
    records = spooled(store, "UserPromptSubmit")
    assert len(records) == 1, f"nothing kept: {call.stderr}"
    content = records[0]["memories"][0]["content"]
    assert content.startswith("why does this fail?") and "[truncated: the hook input was" in content
    assert secret[:8] not in json.dumps(records[0])  # not even the head of the token
    assert len(content) < OVERSIZED_KEEP_CHARS + 300


# -- the daemon's start back-off ------------------------------------------------------------------


@pytest.mark.slow
def test_after_a_kill_9_of_the_daemon_the_next_hook_restarts_it_at_once(
    project: Path, store: Path, isolated_env: Path
) -> None:
    """A daemon killed seconds after it started: the next hook starts another (was: none for 30 s
    after the first start, the events waiting in the spool)."""
    env = agent_env(isolated_env, REMINDFUL_EMBEDDINGS__BACKEND="fake")
    agent = install(project, env)
    try:
        session = agent.session("s1")
        session.start()
        wait_until(lambda: len(daemon_pids(store)) == 1 and (store / "daemon.sock").exists(), 120, "a daemon up")
        first = daemon_pids(store)[0]
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: not alive(first), 10, "the daemon gone")
        time.sleep(3)  # past a short back-off: the daemon had been up, this is no crash loop
        for i in range(5):
            session.tool("Bash", {"command": f"echo step {i}"}, {"stdout": f"step {i}"})
        wait_until(lambda: len(daemon_pids(store)) == 2, 10, "a second daemon started by the next hook")
        wait_until(lambda: len(stored(store, "content LIKE 'Ran `echo step %'")) == 5, 60, "the events stored by it")
    finally:
        stop_daemons(store)


def test_a_daemon_that_dies_at_start_is_not_restarted_by_every_hook(store: Path) -> None:
    """The back-off still holds off a crash loop: starts that never came up back off longer."""
    from remindful import runtime as hook

    store.mkdir(parents=True, mode=0o700)
    now = 1_000_000.0
    waits = []
    for _ in range(6):
        waits.append(hook.start_backoff_s(str(store), now))
        hook.note_start(str(store), now)
        now += 0.5
    assert waits[0] == 0.0  # never started: start at once
    assert waits[1] <= 2.0  # started moments ago, and not yet up: a short wait
    assert waits[-1] >= 16.0 and waits == sorted(waits)  # never up: longer and longer, up to the cap
    hook.note_ready(str(store))  # a daemon came up
    assert hook.start_backoff_s(str(store), now) <= 2.0
