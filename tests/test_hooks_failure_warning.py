"""A warning before the same mistake (issue 31 item 7), through the hooks ``remindful install-hooks``
wrote and the daemon they start: three failed ``pnpm run deploy:staging`` runs were followed by a
fourth with nothing said. Now a PreToolUse for a call that failed before in the project, and has not
succeeded since, prints the failure's line as ``additionalContext`` (no permission decision: the
call is not stopped), within the hook's timeout; after a success, nothing; another project, nothing."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_session import SCRIPT, ClaudeCode, Session, agent_env, stop_daemons, wait_until
from conftest_chroma import chroma_server  # noqa: F401  (session fixture)

pytestmark = pytest.mark.slow

DEPLOY = {"command": "pnpm run deploy:staging", "description": "Deploy to staging"}
FAILED = "ERR_PNPM_RECURSIVE_RUN_FIRST_FAIL deploy:staging: Error: STAGING_DEPLOY_KEY is not set\nExit status 1"


def outcomes_stored(store: Path) -> bool:
    """Whether no call's outcome waits in the spool (the starts of the probes below, which never
    get one, wait there on purpose: a start is held for its outcome)."""
    import sqlite3

    conn = sqlite3.connect(f"file:{store / 'catalog.sqlite3'}?mode=ro", uri=True, timeout=5)
    try:
        return not conn.execute("SELECT 1 FROM spool WHERE kind != 'PreToolUse' LIMIT 1").fetchall()
    finally:
        conn.close()


def git_project(root: Path) -> Path:
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


@pytest.fixture
def store(isolated_env: Path) -> Path:
    return isolated_env / ".remindful" / "memory"


@pytest.fixture
def agents(tmp_path: Path, isolated_env: Path, store: Path) -> Iterator[tuple[ClaudeCode, ClaudeCode]]:
    env = agent_env(isolated_env, REMINDFUL_EMBEDDINGS__BACKEND="fake")
    found = []
    for name in ("shop-api", "billing"):
        project = git_project(tmp_path / name)
        done = subprocess.run(
            [SCRIPT, "install-hooks"], cwd=project, env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        found.append(ClaudeCode(project, env))
    try:
        yield found[0], found[1]
    finally:
        stop_daemons(store)


def about_to(session: Session, tool_input: dict[str, str]) -> str:
    """The context a PreToolUse for ``tool_input`` gives the agent ("" for none)."""
    call = session.agent.fire(
        "PreToolUse",
        {
            "session_id": session.session_id,
            "transcript_path": str(session.transcript),
            "tool_name": "Bash",
            "tool_input": tool_input,
            "tool_use_id": f"toolu_probe_{len(session.agent.calls)}",
        },
    )
    if call.stdout.strip():
        out = json.loads(call.stdout)["hookSpecificOutput"]
        assert out["hookEventName"] == "PreToolUse"
        assert "permissionDecision" not in out  # a warning, never a decision that stops or waves through
    return call.context


def test_a_command_that_failed_before_is_warned_about_until_it_succeeds(
    agents: tuple[ClaudeCode, ClaudeCode], store: Path
) -> None:
    shop, billing = agents
    s1 = shop.session("s1")
    s1.start()
    assert about_to(s1, DEPLOY) == ""  # never run: nothing to say
    for _ in range(3):
        s1.tool("Bash", DEPLOY, None, error=FAILED)

    warned = about_to(s1, DEPLOY)  # at once, whether or not the daemon stored the failures yet
    assert "pnpm run deploy:staging" in warned and "STAGING_DEPLOY_KEY is not set" in warned, warned
    assert "failed before in this project" in warned and "3 failures recorded" in warned, warned
    assert "not an instruction" in warned

    wait_until(lambda: outcomes_stored(store), 120, "the daemon stores the failures")
    s2 = shop.session("s2")  # a later session of the same project
    s2.start()
    warned = about_to(s2, DEPLOY)
    assert "STAGING_DEPLOY_KEY is not set" in warned and "failed before in this project" in warned, warned
    assert about_to(s2, {"command": "pnpm run test"}) == ""  # another command: nothing
    assert about_to(billing.session("b1"), DEPLOY) == ""  # another project never sees it

    s2.tool("Bash", DEPLOY, {"stdout": "Deployed to staging in 41s"})  # fixed: it succeeds
    assert about_to(s2, DEPLOY) == ""
    wait_until(lambda: outcomes_stored(store), 120, "the daemon stores the success")
    assert about_to(shop.session("s3"), DEPLOY) == ""


@pytest.mark.usefixtures("isolated_env")
def test_on_a_team_store_a_failure_on_one_machine_is_warned_about_on_another(
    tmp_path: Path,
    postgres_url: str,
    chroma_server: tuple[str, int],  # noqa: F811
) -> None:
    """Two machines (their own HOMEs, spools and daemons, hooks installed in their own clones of
    one repository) on one shared catalog: the calls are stored on the server once drained, so
    the PreToolUse warning comes from there (the daemon's answer): a teammate's failed deploy
    warns before the same deploy elsewhere, and its success later silences both."""
    host, port = chroma_server
    shared = {
        "REMINDFUL_EMBEDDINGS__BACKEND": "fake",
        "REMINDFUL_CATALOG__URL": postgres_url,
        "REMINDFUL_STORAGE__CHROMADB__MODE": "server",
        "REMINDFUL_STORAGE__CHROMADB__HOST": host,
        "REMINDFUL_STORAGE__CHROMADB__PORT": str(port),
    }
    machines: list[tuple[ClaudeCode, Path]] = []
    for name in ("laptop", "desktop"):
        home = tmp_path / name
        home.mkdir()
        clone = git_project(home / "shop-api")
        subprocess.run(["git", "-C", str(clone), "remote", "add", "origin", "git@example.com:team/shop-api.git"],
                       check=True)  # fmt: skip
        env = agent_env(home, **shared)
        done = subprocess.run([SCRIPT, "install-hooks"], cwd=clone, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        machines.append((ClaudeCode(clone, env), home / ".remindful" / "memory"))
    (laptop, laptop_store), (desktop, desktop_store) = machines
    try:
        s1 = laptop.session("s1")
        s1.start()
        for _ in range(3):
            s1.tool("Bash", DEPLOY, None, error=FAILED)
        wait_until(lambda: outcomes_stored(laptop_store), 120, "the laptop's daemon delivers the failures")

        d1 = desktop.session("d1")
        d1.start()
        wait_until(lambda: about_to(d1, DEPLOY) != "", 60, "the desktop's daemon answers from the server")
        warned = about_to(d1, DEPLOY)
        assert "STAGING_DEPLOY_KEY is not set" in warned and "failed before in this project" in warned, warned
        assert about_to(d1, {"command": "pnpm run test"}) == ""  # another command: nothing

        d1.tool("Bash", DEPLOY, {"stdout": "Deployed to staging in 41s"})  # fixed on the desktop
        wait_until(lambda: outcomes_stored(desktop_store), 120, "the desktop's daemon delivers the success")
        assert about_to(laptop.session("s2"), DEPLOY) == ""
    finally:
        stop_daemons(laptop_store)
        stop_daemons(desktop_store)
