"""Memories stay in their project, through the real path: two git projects (and a worktree of the
first) captured by Claude Code's hook payloads and by the API, stored by the store's owner, and
injected back by the hooks (the real MiniLM, the hook's own exact scoring, and the daemon)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

import remindful
from remindful.daemon import start_daemon_threads
from remindful.shells.hook import run
from remindful.testing import open_fake
from test_daemon_http import request
from test_scopes import repository, worktree

A_FACTS = ("pnpm", "5433")
B_FACTS = ("cargo",)
USER_RULE = "emojis"


def hook(store: Path, event: str, cwd: Path, session: str, *, context: bool = False, **fields: Any) -> str:
    """Run the hook for ``event`` as Claude Code would, in ``cwd``; the context it printed ("")."""
    data = {"session_id": session, "hook_event_name": event, "cwd": str(cwd), "transcript_path": "", **fields}
    out = io.StringIO()
    argv = ["--path", str(store), "hook", event] + ([] if context else ["--no-context"])
    assert run(argv, stdin=io.StringIO(json.dumps(data)), stdout=out) == 0
    printed = out.getvalue().strip()
    return json.loads(printed)["hookSpecificOutput"]["additionalContext"] if printed else ""


def say(store: Path, cwd: Path, session: str, prompt: str) -> None:
    """A turn: the prompt, then the Stop of the assistant's answer (a prompt is kept as intent and
    injected only through what its turn taught). Distinct answers: two Stops of one session with
    the same answer are one replayed event."""
    hook(store, "UserPromptSubmit", cwd, session, prompt=prompt)
    hook(store, "Stop", cwd, session, stop_hook_active=False, last_assistant_message=f"Noted ({len(prompt)}).")


def session_in_a(store: Path, a: Path) -> None:
    hook(store, "SessionStart", a, "s1", source="startup")
    say(store, a, "s1", "Remember that this repo installs its dependencies with pnpm")
    hook(
        store,
        "PostToolUse",
        a / "web",
        "s1",
        tool_name="Bash",
        tool_use_id="toolu_a1",
        tool_input={"command": "pnpm install --frozen-lockfile", "description": "Install the dependencies with pnpm"},
        tool_response={"stdout": "Done in 4.2s", "exit_code": 0},
    )
    say(store, a, "s1", "From now on, never put emojis in commit messages")
    hook(store, "SessionEnd", a, "s1", reason="exit")


def session_in_b(store: Path, b: Path) -> None:
    hook(store, "SessionStart", b, "s2", source="startup")
    say(store, b, "s2", "Remember that this repo builds and installs its crates with cargo")
    hook(store, "SessionEnd", b, "s2", reason="exit")


@pytest.fixture
def projects(tmp_path: Path) -> tuple[Path, Path, Path]:
    a = repository(tmp_path / "projA")
    (a / "web").mkdir()
    b = repository(tmp_path / "projB")
    (b / "src").mkdir()
    return a, b, worktree(a, tmp_path / "projA-hotfix")


@pytest.mark.slow
def test_hooks_inject_their_project_and_the_user_never_another_project(
    tmp_path: Path, projects: tuple[Path, Path, Path], onnx_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, tree = projects
    store = tmp_path / "store"
    session_in_a(store, a)
    session_in_b(store, b)
    with remindful.open(store, embedder=onnx_embedder, project=a) as memory:  # the API, working in A
        memory.store("The staging database of this service listens on port 5433", type="knowledge")
    with remindful.open(store, embedder=onnx_embedder) as owner:  # whoever owns the store drains the spool
        assert owner.drain_spool() > 0
        scope_a, scope_b = owner.project_of(a).scope, owner.project_of(b).scope
        assert owner.project_of(tree).scope == scope_a
        scopes = {m.content: m.scope for m in owner.list(limit=100)}
        assert scopes["From now on, never put emojis in commit messages"] == "user"
        assert {s for text, s in scopes.items() if "pnpm" in text or "5433" in text} == {scope_a}
        assert {s for text, s in scopes.items() if "cargo" in text} == {scope_b}

    # With no relevance floor every memory a project sees is injected: exactly its own and the user's.
    monkeypatch.setenv("REMINDFUL_CONTEXT__MIN_SCORE", "0")
    # ... and every one of them is a candidate (the first pool is search.candidates, whatever the limit).
    monkeypatch.setenv("REMINDFUL_SEARCH__CANDIDATES", "200")
    in_b = hook(store, "UserPromptSubmit", b / "src", "s3", context=True, prompt="How do I install the dependencies?")
    assert in_b and USER_RULE in in_b and "cargo" in in_b
    assert not [fact for fact in A_FACTS if fact in in_b], in_b
    in_tree = hook(store, "UserPromptSubmit", tree, "s4", context=True, prompt="How do I install the dependencies?")
    assert USER_RULE in in_tree and all(fact in in_tree for fact in A_FACTS)
    assert "cargo" not in in_tree
    elsewhere = hook(store, "UserPromptSubmit", tmp_path, "s5", context=True, prompt="How do I install things?")
    assert not [fact for fact in (*A_FACTS, *B_FACTS) if fact in elsewhere]

    # With the default floor, what is relevant: the worktree gets A's package manager.
    monkeypatch.delenv("REMINDFUL_CONTEXT__MIN_SCORE")
    monkeypatch.delenv("REMINDFUL_SEARCH__CANDIDATES")
    question = "How do I install the dependencies for this repo?"
    found = hook(store, "UserPromptSubmit", tree / "web", "s6", context=True, prompt=question)
    assert "pnpm" in found and "cargo" not in found
    rule = hook(store, "UserPromptSubmit", b, "s7", context=True, prompt="Write the commit message, any emojis?")
    assert USER_RULE in rule and "pnpm" not in rule


def test_the_daemon_answers_a_hook_with_the_scopes_of_its_directory(
    tmp_path: Path, projects: tuple[Path, Path, Path]
) -> None:
    a, b, tree = projects
    store = tmp_path / "store"
    memory = open_fake(store)
    handle = start_daemon_threads(memory)
    try:
        memory.store("projA deploys with the blue pipeline", type="knowledge", metadata={"cwd": str(a)})
        memory.store("projB deploys with the green pipeline", type="knowledge", metadata={"cwd": str(b)})
        memory.store("I prefer one-line summaries", type="knowledge")
        memory.store("An unscoped note about pipelines", type="knowledge")

        def context(**body: Any) -> str:
            status, answer = request(handle, "POST", "/context", {"query": "pipeline summaries", **body})
            assert status == 200, answer
            return str(answer["context"])

        from_tree = context(cwd=str(tree))
        assert "blue" in from_tree and "one-line" in from_tree
        assert "green" not in from_tree and "unscoped" not in from_tree
        anonymous = context()  # no directory: the user's and the unscoped, no project's
        assert "one-line" in anonymous and "unscoped" in anonymous
        assert "blue" not in anonymous and "green" not in anonymous
        assert "green" in context(scope="project:projB")
        assert request(handle, "POST", "/context", {"query": "x", "cwd": 5})[0] == 400
        assert request(handle, "POST", "/context", {"query": "x", "scope": "team"})[0] == 400
        # A hook asks the daemon (no model of its own) and prints its answer.
        printed = hook(store, "UserPromptSubmit", b, "s1", context=True, prompt="which pipeline deploys?")
        assert "green" in printed and "blue" not in printed
    finally:
        handle.stop()
        memory.close()


def test_the_session_start_brief_keeps_to_the_project_and_the_user(tmp_path: Path) -> None:
    # The brief reads the scopes seen from the session's directory, as a prompt's context does: a
    # preference another project's MCP client stored (no project_id) stays there, and a rule the
    # user stated in one project is told in every project.
    from remindful.services.context import hook_request

    a, b = repository(tmp_path / "projA"), repository(tmp_path / "projB")
    with open_fake(tmp_path / "s", project=a) as memory:
        memory.store("We prefer pnpm for this app", type="knowledge", metadata={"category": "preference"})
        memory.store(
            "Never add emojis to commit messages",
            type="knowledge",
            metadata={"category": "preference", "project_id": str(a)},
        )

        def brief(directory: Path) -> str:
            request = hook_request("SessionStart", {"session_id": "s", "cwd": str(directory)}, None)
            return memory.hook_context(request).text

        assert "pnpm" in brief(a) and "emojis" in brief(a)
        assert "pnpm" not in brief(b)
        assert "emojis" in brief(b)
