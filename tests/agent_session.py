"""Claude Code, simulated for tests: runs the hook commands that ``remindful install-hooks`` wrote, the
way Claude Code runs them (through a shell, in the project, the hook JSON on stdin, killed at the
hook's timeout), keeps a transcript as Claude Code does, and stops the daemons the hooks started.

    agent = ClaudeCode(project, env)                 # reads <project>/.claude/settings.local.json
    session = agent.session("s1")
    session.start(); context = session.prompt("How do I install the dependencies?")
    session.tool("Bash", {"command": "pnpm install"}, {"stdout": "done"}); session.answer("Use pnpm.")
    session.end()
    stop_daemons(store)
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCRIPT = str(Path(sys.executable).with_name("remindful"))
BIN = str(Path(sys.executable).parent)
STARTED = re.compile(r"started the daemon of .* \(pid (\d+)\)")
#: Hook processes wait for their context however busy the machine, as in-process hooks do in tests
#: (conftest's ``patient_hooks``): the deadline is a speed target, measured by bench/hook_latency.py.
PATIENT = "import remindful.shells.hook as h\nh.CONTEXT_DEADLINE_S.update(UserPromptSubmit=600.0, SessionStart=600.0)\n"


def agent_env(home: Path, *, patient: bool = False, **extra: str) -> dict[str, str]:
    """The environment Claude Code gives its hooks here: this user's HOME, a PATH with this
    installation's ``remindful``, no remindful variable but ``extra``. ``patient``: the hooks wait
    for their context (:data:`PATIENT`, through a ``sitecustomize`` under ``home``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMINDFUL_") and k != "MEMORY_STORAGE_PATH"}
    env.update(HOME=str(home), PATH=f"{BIN}:/usr/bin:/bin", **extra)
    if patient:
        site = home / ".patient-hooks"
        site.mkdir(parents=True, exist_ok=True)
        (site / "sitecustomize.py").write_text(PATIENT)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return env


def load_factor() -> float:
    """How much busier than one process per core the machine is now (at least 1): the hooks'
    timeouts are Claude Code's on a machine that is not oversubscribed, stretched by this."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


@dataclass
class Call:
    """One hook run: what it was given, how long it took, what it printed."""

    event: str
    seconds: float
    timeout: float
    returncode: int
    stdout: str
    stderr: str

    @property
    def context(self) -> str:
        """The additionalContext printed ("" for none)."""
        if not self.stdout.strip():
            return ""
        return str(json.loads(self.stdout)["hookSpecificOutput"]["additionalContext"])


@dataclass
class ClaudeCode:
    """The hooks of one project as Claude Code runs them (a hook over its timeout, stretched by the
    machine's :func:`load_factor`, raises ``subprocess.TimeoutExpired``: Claude Code would have
    cancelled it)."""

    project: Path
    env: dict[str, str]
    settings: str = "settings.local.json"
    calls: list[Call] = field(default_factory=list)

    def __post_init__(self) -> None:
        data = json.loads((self.project / ".claude" / self.settings).read_text())
        self.commands = {
            event: (groups[0]["hooks"][0]["command"], float(groups[0]["hooks"][0]["timeout"]))
            for event, groups in data["hooks"].items()
        }

    def fire(self, event: str, payload: dict[str, Any]) -> Call:
        command, timeout = self.commands[event]
        body = {"cwd": str(self.project), "hook_event_name": event, **payload}
        started = time.monotonic()
        done = subprocess.run(
            ["sh", "-c", command],
            input=json.dumps(body),
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout * load_factor(),
            check=False,
        )
        call = Call(event, time.monotonic() - started, timeout, done.returncode, done.stdout, done.stderr)
        self.calls.append(call)
        assert done.returncode == 0, f"{event}: exit {done.returncode}: {done.stderr}"
        return call

    def session(self, session_id: str) -> Session:
        return Session(self, session_id, self.project / f".transcript-{session_id}.jsonl")


@dataclass
class Session:
    """One Claude Code session: its hook payloads and its transcript (JSONL, as Claude Code writes it)."""

    agent: ClaudeCode
    session_id: str
    transcript: Path
    tools: int = 0

    def _payload(self, **fields: Any) -> dict[str, Any]:
        return {"session_id": self.session_id, "transcript_path": str(self.transcript), **fields}

    def _write(self, role: str, content: Any) -> None:
        entry = {"type": role, "uuid": str(uuid.uuid4()), "message": {"role": role, "content": content}}
        with self.transcript.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")

    def start(self, source: str = "startup") -> Call:
        return self.agent.fire("SessionStart", self._payload(source=source, model="claude-sonnet-4-5"))

    def prompt(self, text: str) -> Call:
        call = self.agent.fire("UserPromptSubmit", self._payload(prompt=text, permission_mode="default"))
        self._write("user", text)
        return call

    def tool(self, name: str, tool_input: dict[str, Any], response: Any, *, error: str | None = None) -> None:
        """A tool call: PreToolUse, then PostToolUse, or PostToolUseFailure with ``error``."""
        self.tools += 1
        tool_use_id = f"toolu_{self.session_id}_{self.tools:03d}"
        common = self._payload(tool_name=name, tool_input=tool_input, tool_use_id=tool_use_id)
        self.agent.fire("PreToolUse", common)
        self._write("assistant", [{"type": "tool_use", "id": tool_use_id, "name": name, "input": tool_input}])
        if error is None:
            self.agent.fire("PostToolUse", {**common, "tool_response": response})
        else:
            self.agent.fire("PostToolUseFailure", {**common, "error": error, "is_interrupt": False})
        result = error if error is not None else json.dumps(response)
        self._write("user", [{"type": "tool_result", "tool_use_id": tool_use_id, "content": result}])

    def answer(self, text: str) -> Call:
        """The assistant's answer, then Stop as older Claude Code versions send it: without
        ``last_assistant_message`` (the hook reads the answer from the transcript)."""
        self._write("assistant", [{"type": "text", "text": text}])
        return self.agent.fire("Stop", self._payload(permission_mode="default", stop_hook_active=False))

    def end(self, reason: str = "prompt_input_exit") -> Call:
        return self.agent.fire("SessionEnd", self._payload(reason=reason))


def teach_pnpm_and_port(session: Session) -> None:
    """A first session in a project: installing its dependencies (npm fails, the project pins pnpm)
    and finding the staging database's port (6543), each prompt with its tool calls and answer."""
    session.prompt("How do I install the dependencies for this repo?")
    session.tool(
        "Read", {"file_path": "package.json"}, {"type": "text", "file": {"content": '"packageManager": "pnpm"'}}
    )
    session.tool(
        "Bash",
        {"command": "npm install", "description": "Install dependencies"},
        None,
        error="npm ERR! code EUNSUPPORTEDPROTOCOL: this project pins pnpm in packageManager",
    )
    session.tool("Bash", {"command": "pnpm install", "description": "Install with pnpm"}, {"stdout": "Done in 4.2s"})
    session.answer("This repository uses pnpm, not npm: run `pnpm install` to install the dependencies.")
    session.prompt("Which port does the staging database listen on?")
    session.tool("Bash", {"command": "grep DB_PORT .env.staging"}, {"stdout": "DB_PORT=6543"})
    session.answer("The staging database listens on port 6543 (DB_PORT in .env.staging).")


def daemon_pids(store: Path) -> list[int]:
    """The daemons the hooks started for ``store`` (from its hooks.log)."""
    log = store / "logs" / "hooks.log"
    return [int(m.group(1)) for m in STARTED.finditer(log.read_text())] if log.exists() else []


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(0.05)


def stop_daemons(store: Path) -> None:
    """SIGTERM each daemon the hooks started for ``store`` (by its pid), SIGKILL after 30 s."""
    for pid in daemon_pids(store):
        if not alive(pid):
            continue
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def spool_empty(store: Path) -> bool:
    """Whether the store's spool is drained (read-only; a missing catalog counts as not), the
    fallback file included: a hook that found the catalog busy (a loaded machine) kept its event
    there, and the next drain imports it."""
    import sqlite3

    from remindful.engine.spool import FALLBACK_NAME

    if (store / FALLBACK_NAME).exists() or any(store.glob(f"{FALLBACK_NAME}.*.draining")):
        return False

    try:
        conn = sqlite3.connect(f"file:{store / 'catalog.sqlite3'}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return False
    try:
        return int(conn.execute("SELECT count(*) FROM spool").fetchone()[0]) == 0
    except sqlite3.Error:
        return False
    finally:
        conn.close()
