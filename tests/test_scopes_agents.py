"""Scopes through the whole coding-agent loop (issue 27, item 2): ``remindful install-hooks`` in two
git projects and a worktree of the first, Claude Code sessions simulated through the hook commands
the installer wrote (real processes, the daemon the hooks start, the real model and index). What a
session in one project learned comes back in that project and its worktree, never in the other; a
rule the user stated comes back everywhere."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import remindful
from agent_session import SCRIPT, ClaudeCode, agent_env, spool_empty, stop_daemons, teach_pnpm_and_port, wait_until

pytestmark = pytest.mark.slow

SETTLE_S = 120


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def store(isolated_env: Path) -> Iterator[Path]:
    path = isolated_env / ".remindful" / "memory"
    try:
        yield path
    finally:
        stop_daemons(path)


def agent_in(directory: Path, env: dict[str, str]) -> ClaudeCode:
    done = subprocess.run([SCRIPT, "install-hooks"], cwd=directory, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return ClaudeCode(directory, env)


def test_each_project_gets_its_own_and_the_users_memories(tmp_path: Path, isolated_env: Path, store: Path) -> None:
    shop, blog = tmp_path / "shop-api", tmp_path / "blog"
    for root, manager in ((shop, "pnpm@9.1.0"), (blog, "npm@10.2.0")):
        root.mkdir()
        git("init", "-q", "-b", "main", cwd=root)
        (root / "package.json").write_text(json.dumps({"name": root.name, "packageManager": manager}))
        git("add", ".", cwd=root)
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init", cwd=root)
    feature = tmp_path / "shop-api-feature"
    git("worktree", "add", "-q", str(feature), "-b", "feature", cwd=shop)
    env = agent_env(isolated_env, patient=True)
    in_shop, in_blog, in_feature = agent_in(shop, env), agent_in(blog, env), agent_in(feature, env)

    s1 = in_shop.session("shop-1")
    s1.start()
    # The session of test_coding_agent_loop.py, whose facts come back in the project's next session.
    teach_pnpm_and_port(s1)
    s1.end()
    wait_until(lambda: spool_empty(store), SETTLE_S, "the hooks' daemon stores what was spooled")
    with remindful.open(store) as memory:
        # A rule the user stated for every project (the user's scope), as an MCP client or the
        # command line would store it.
        rule = memory.store("Never add emojis to commit messages", type="knowledge")
        assert memory.get(rule).scope == "user"

    there = in_blog.session("blog-1")
    brief = there.start().context
    assert "pnpm" not in brief and "6543" not in brief
    deps = there.prompt("what command installs the packages of this repo?").context
    port = there.prompt("I need to connect to staging postgres: what port?").context
    assert "pnpm" not in deps and "6543" not in port
    assert "emojis" in there.prompt("any rules for writing commit messages, like emojis?").context
    there.end()

    here = in_feature.session("feature-1")  # the shop's worktree: the shop's project
    here.start()
    assert "pnpm" in here.prompt("what command installs the packages of this repo?").context
    assert "6543" in here.prompt("I need to connect to staging postgres: what port?").context
    assert "emojis" in here.prompt("any rules for writing commit messages, like emojis?").context
    here.end()
