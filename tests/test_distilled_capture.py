"""Distilled capture: what a coding agent's tool call becomes (one line with its outcome), one memory
per call, what a newer call makes out of date or resolves, prompts kept as intent, tombstones, the
signature failure warnings match on, and the project a directory belongs to."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from agent_in_process import AgentSession
from killed_drain import drain_killed_at
from remindful.api import MemoryManager
from remindful.engine.projects import Resolver
from remindful.engine.redact import build_redactor
from remindful.services.ingest.distill import EDIT_SIDE_CHARS, compact_change, excerpt, tool_memory
from remindful.services.ingest.drainer import drain_spool
from remindful.services.ingest.middleware import capture_tools
from remindful.services.learning.actions import signature
from remindful.testing import open_fake

CWD = "/home/dev/shop"


def line(event: str, tool: str, tool_input: dict[str, Any], **payload: Any) -> dict[str, Any]:
    memory = tool_memory(event, {"cwd": CWD, "tool_name": tool, "tool_input": tool_input, **payload}, build_redactor())
    assert memory is not None
    return memory


# -- one call, one line ------------------------------------------------------------------------------


def test_each_tool_is_distilled_to_what_it_did_and_how_it_ended() -> None:
    read = line(
        "PostToolUse",
        "Read",
        {"file_path": f"{CWD}/.env"},
        tool_response={"type": "text", "file": {"filePath": f"{CWD}/.env", "content": "A=1\nB=2\n", "numLines": 2}},
    )
    assert read["content"] == "Read .env (2 lines): A=1 B=2"
    assert read["metadata"]["kind"] == "activity" and read["metadata"]["file"] == f"{CWD}/.env"
    assert read["metadata"]["importance"] < 0.5  # raw activity ranks under what was said or changed
    edit = line("PostToolUse", "Edit", {"file_path": f"{CWD}/a.py", "old_string": "x = 1", "new_string": "x = 2"})
    assert edit["content"] == 'Edited a.py: "x = 1" → "x = 2"' and edit["metadata"]["kind"] == "change"
    assert edit["metadata"]["change"] == {"old": "x = 1", "new": "x = 2"}
    multi = line(
        "PostToolUse",
        "MultiEdit",
        {"file_path": "/elsewhere/b.py", "edits": [{"old_string": f"v{i}", "new_string": f"w{i}"} for i in range(5)]},
    )
    assert multi["content"].startswith('Edited /elsewhere/b.py (5 changes): "v0" → "w0"; "v1" → "w1"')
    assert multi["content"].endswith("; and 2 more")
    write = line("PostToolUse", "Write", {"file_path": f"{CWD}/new.md", "content": "# Title\n\nBody\n"})
    assert write["content"] == "Wrote new.md (4 lines): # Title Body"
    ok = line("PostToolUse", "Bash", {"command": "make", "description": "Build"}, tool_response={"stdout": "done"})
    assert ok["content"] == "Ran `make` (Build): ok: done" and ok["metadata"]["success"] is True
    assert ok["metadata"]["arguments"] == {"command": "make"}
    failed = line("PostToolUseFailure", "Bash", {"command": "make test"}, error="Exit code 1\nFAILED test_x")
    assert failed["content"] == "Ran `make test`: failed: Exit code 1 FAILED test_x"
    assert failed["metadata"]["kind"] == "failure" and failed["metadata"]["error"] == "Exit code 1 FAILED test_x"
    grep = line("PostToolUse", "Grep", {"pattern": "TODO", "path": f"{CWD}/src"}, tool_response={"numFiles": 3})
    assert grep["content"] == "Searched for 'TODO' in src: 3 found"
    started = line("PreToolUse", "Bash", {"command": "make"})
    assert started["content"] == "Ran `make` (started; no outcome recorded)" and "success" not in started["metadata"]
    other = line("PostToolUse", "mcp__db__query", {"sql": "select 1"})
    assert other["content"] == 'mcp__db__query: {"sql": "select 1"}'


def test_an_edit_keeps_the_lines_it_changed_and_a_long_log_its_head_and_tail() -> None:
    block = "\n".join(f"line {i}" for i in range(20))
    assert compact_change(block, block.replace("line 7", "line seven")) == ("line 7", "line seven")
    long = "x" * 5000
    edit = line("PostToolUse", "Edit", {"file_path": f"{CWD}/big.txt", "old_string": long, "new_string": long + "y"})
    assert len(edit["metadata"]["change"]["old"]) <= EDIT_SIDE_CHARS
    log = "Compiling\n" + "noise line\n" * 500 + "error: the port must be a number\n"
    short = excerpt(log, 120, None, None)
    assert short.startswith("Compiling noise") and short.endswith("error: the port must be a number")
    assert len(short) <= 120


def test_secrets_in_a_call_are_redacted_before_anything_is_cut() -> None:
    key = "AKIAIOSFODNN7EXAMPLE"
    edit = line(
        "PostToolUse", "Edit", {"file_path": f"{CWD}/.env", "old_string": f"KEY={key}", "new_string": "KEY=none"}
    )
    assert key not in str(edit) and "AWS_KEY_REDACTED" in edit["content"]
    ran = line("PostToolUse", "Bash", {"command": f"deploy --key {key}"}, tool_response={"stdout": f"used {key}"})
    assert key not in str(ran)


# -- one memory per call ------------------------------------------------------------------------------


def calls(memory: MemoryManager) -> list[Any]:
    return [m for m in memory.list(source="hook", limit=100) if m.type.value == "action"]


def test_a_call_is_one_memory_whichever_drain_sees_its_start_and_its_outcome(tmp_path: Path) -> None:
    store = tmp_path / "s"
    s = AgentSession(store, tmp_path)
    s.bash("make one", "ok")  # start and outcome in one drain
    s.tool("Bash", {"command": "make two"}, post=False)  # the start alone: held for its outcome
    with open_fake(store) as memory:
        memory.drain_spool()
        assert [m.content for m in calls(memory)] == ["Ran `make one`: ok: ok"]
        assert memory.stats().spool_pending == 1
    s.fire(
        "PostToolUseFailure",
        tool_name="Bash",
        tool_input={"command": "make two"},
        tool_use_id=f"toolu_{s.session_id[-6:]}_002",
        error="boom",
    )
    with open_fake(store) as memory:
        memory.drain_spool()  # the outcome consumes the start still waiting in the spool
        assert sorted(m.content for m in calls(memory)) == ["Ran `make one`: ok: ok", "Ran `make two`: failed: boom"]
        assert memory.stats().spool_pending == 0
        # A start that waited longer than drainer.HOLD_S is stored as started ...
        third = s.tool("Bash", {"command": "make three"}, post=False)
        assert drain_spool(memory.engine, resolve=memory.project_of, hold_s=0) == 1
        (started,) = [m for m in calls(memory) if m.metadata["tool_use_id"] == third]
        assert started.content == "Ran `make three` (started; no outcome recorded)"
        # ... and its outcome, arriving later, completes that memory in place.
        s.fire(
            "PostToolUse",
            tool_name="Bash",
            tool_input={"command": "make three"},
            tool_use_id=third,
            tool_response={"stdout": "built"},
        )
        memory.drain_spool()
        (done,) = [m for m in calls(memory) if m.metadata["tool_use_id"] == third]
        assert done.id == started.id and done.content == "Ran `make three`: ok: built"
        assert done.metadata["success"] is True and done.metadata["hook_event"] == "PostToolUse"
        assert len(calls(memory)) == 3


# -- what a newer call changes about the older ones ----------------------------------------------------


def test_an_edit_supersedes_the_reads_and_edits_it_makes_out_of_date(tmp_path: Path) -> None:
    store, s = tmp_path / "s", AgentSession(tmp_path / "s", tmp_path)
    env, other = str(tmp_path / ".env"), str(tmp_path / "other.txt")
    first_read = s.read(env, "PORT=1111\n")
    second_read = s.read(env, "PORT=1111\nHOST=db\n")  # (the same read again within 5 s is a repeat, skipped)
    other_read = s.read(other, "unrelated\n")
    first_edit = s.edit(env, "PORT=1111", "PORT=2222")
    second_edit = s.edit(env, "PORT=2222", "PORT=3333")
    with open_fake(store) as memory:
        memory.drain_spool()
        by_call = {m.metadata["tool_use_id"]: m for m in calls(memory)}
        assert by_call[first_read].metadata["superseded_by"] == by_call[second_read].id  # the newer read
        assert by_call[second_read].metadata["superseded_by"] in (by_call[first_edit].id, by_call[second_edit].id)
        assert by_call[first_edit].metadata["superseded_by"] == by_call[second_edit].id  # its value replaced
        assert "superseded_by" not in by_call[second_edit].metadata
        assert "superseded_by" not in by_call[other_read].metadata


def test_a_replaced_value_retires_what_was_said_with_it_in_the_project_only(tmp_path: Path) -> None:
    store = tmp_path / "s"
    shop, blog = tmp_path / "shop", tmp_path / "blog"
    shop.mkdir()
    blog.mkdir()
    here, there = AgentSession(store, shop), AgentSession(store, blog)
    here.prompt("Which port?")
    here.answer("The staging database listens on port 5432.", in_payload=True)
    here.prompt("We decided to keep port 5432 for local runs.")  # the user's decision (d622e2a: not the assistant's)
    here.answer("Noted: port 5432 stays for local runs.", in_payload=True)
    there.prompt("Which port?")
    there.answer("The blog database listens on port 5432.", in_payload=True)
    here.edit(str(shop / ".env"), "DB_PORT=5432", "DB_PORT=6543")
    with open_fake(store) as memory:
        memory.drain_spool()
        answers = {m.content: m for m in memory.list(source="response", limit=20)}
        assert "superseded_by" in answers["The staging database listens on port 5432."].metadata
        assert "superseded_by" not in answers["The blog database listens on port 5432."].metadata  # another project
        decided = [m for m in memory.list(type="knowledge", limit=20) if "decided" in m.content]
        assert decided and all(m.origin == "user" and m.metadata.get("category") == "decision" for m in decided)
        assert all("superseded_by" not in m.metadata for m in decided)  # a decision is the user's: not retired


def test_a_success_resolves_the_failures_of_the_same_call_only(tmp_path: Path) -> None:
    store, s = tmp_path / "s", AgentSession(tmp_path / "s", tmp_path)
    s.bash("pnpm run build", error="Exit code 2")
    s.bash("pnpm test", error="1 failed")
    s.bash("pnpm run build", "Build succeeded")
    with open_fake(store) as memory:
        memory.drain_spool()
        by_command = {}
        for m in calls(memory):
            by_command.setdefault((m.metadata["arguments"]["command"], m.metadata["success"]), m)
        success = by_command[("pnpm run build", True)]
        assert by_command[("pnpm run build", False)].metadata["resolved_by"] == success.id
        assert "resolved_by" not in by_command[("pnpm test", False)].metadata


# -- prompts, answers, tombstones -----------------------------------------------------------------------


def test_a_prompt_is_kept_as_intent_listing_what_its_turn_taught(tmp_path: Path) -> None:
    store, s = tmp_path / "s", AgentSession(tmp_path / "s", tmp_path)
    s.prompt("We deploy with Fly.io, not Heroku. Can you check the deploy script?")
    s.answer("The deploy script calls flyctl deploy.", in_payload=True)
    with open_fake(store) as memory:
        memory.drain_spool()
        (prompt,) = memory.list(source="hook", type="conversation")
        project = memory.project_of(tmp_path)
        assert project is not None and prompt.scope == project.scope
        assert prompt.metadata["kind"] == "intent" and prompt.metadata["project_id"] == project.key
        (fact,) = memory.get_batch(prompt.metadata["learned"])
        assert fact is not None and fact.content == "We deploy with Fly.io, not Heroku."
        assert fact.metadata["project_id"] == project.key and fact.scope == project.scope


def test_a_deleted_memory_is_not_captured_again(tmp_path: Path) -> None:
    store, s = tmp_path / "s", AgentSession(tmp_path / "s", tmp_path)
    s.bash("rm -rf build", "gone")
    with open_fake(store) as memory:
        memory.drain_spool()
        (call,) = calls(memory)
        assert memory.delete(call.id)
        # The same call in a later session: forgotten, not learned again; counted.
        later = AgentSession(store, tmp_path)
        later.bash("rm -rf build", "gone")
        memory.drain_spool()
        assert calls(memory) == []
        assert memory.stats().capture["skipped_forgotten"] == 1
        # Storing it yourself is never refused.
        assert memory.get(memory.store(call.content, type="action")).content == call.content
        # Housekeeping deletes leave no tombstone.
        assert memory.stats().injection["forgotten"] == 1  # type: ignore[index]
        memory.clear_all(confirm=True)
        assert memory.stats().injection["forgotten"] == 1  # type: ignore[index]


def test_a_tombstone_keeps_the_hash_never_the_text(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        memory.delete(memory.store("The vault passphrase hint is the dog's name", type="knowledge"))
        rows = memory.engine.catalog.read("SELECT key, reason, memory_id FROM tombstones")
    assert len(rows) == 1 and rows[0][1] == "deleted" and "vault" not in str(rows)


def test_a_correction_retires_what_it_replaces(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with open_fake(store) as memory:
        old = memory.store("We deploy with Heroku.", type="knowledge")
        rule = memory.capture_correction("We deploy with Heroku", "We deploy with Fly.io")
        assert memory.get(old).metadata["superseded_by"] == rule.id
    s = AgentSession(store, tmp_path)  # a later transcript says the old thing again
    s.prompt("We deploy with Heroku. Where is the deploy script?")
    s.answer("In scripts/deploy.sh.", in_payload=True)
    with open_fake(store) as memory:
        memory.drain_spool()
        knowledge = sorted(m.content for m in memory.list(type="knowledge", limit=20))
        assert knowledge == ["We deploy with Fly.io, not Heroku.", "We deploy with Heroku."]  # nothing learned again
        assert memory.stats().learning["dropped"]["forgotten"] == 1


# -- failure warnings for captured calls ---------------------------------------------------------------


def hands() -> MCPServer:
    mcp: MCPServer = MCPServer("hands")

    @mcp.tool()
    def mouse_click(x: int, y: int) -> str:
        """Click at a point of the screen."""
        raise ToolError(f"nothing clickable at ({x}, {y})")

    return mcp


@pytest.mark.anyio
async def test_failed_calls_through_the_middleware_raise_a_warning(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", **{"auto_capture.filters.min_interval_seconds": 0}) as memory:
        server = hands()
        worker = capture_tools(server, lambda: memory.engine)
        async with Client(server) as client:
            for _ in range(5):
                await client.call_tool("mouse_click", {"x": 13, "y": 13})
        assert worker.flush(timeout=30)
        worker.close()
        for context, action in (
            ("mouse_click(13,13)", None),
            ("mouse_click(x=13, y=13)", None),
            ("about to click", {"tool": "mouse_click", "arguments": {"x": 13, "y": 13}}),
            ("click", {"action": "click", "target": {"x": 13, "y": 13}}),
            ("about to click at (13, 13)", None),
        ):
            (warning,) = memory.suggest(context, action=action).warnings
            assert warning.failures == 5 and warning.success_rate == 0.0, context
        assert memory.suggest("mouse_click(14,13)").warnings == ()


@pytest.mark.anyio
async def test_warnings_count_every_recorded_call_of_the_tool(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        memory.store_batch(
            [{"content": f"deploy note {i}: the release train leaves on Fridays", "type": "action"} for i in range(80)]
        )
        memory.store(
            "Tool mouse_click failed: nothing there (2 ms).",
            type="action",
            metadata={"tool": "mouse_click", "arguments": {"x": 1, "y": 2}, "success": False},
        )
        assert memory.suggest("mouse_click(1, 2)").warnings[0].failures == 1


def test_signatures_of_the_capture_paths_agree() -> None:
    middleware = {"tool": "mouse_click", "arguments": {"x": 13, "y": 13}, "success": False}
    hook = {"tool_name": "Bash", "arguments": {"command": "pnpm  run build"}, "success": False}
    assert signature("Tool mouse_click failed", middleware) == signature("mouse_click(13, 13)") == "click (13,13)"
    assert signature("Ran `pnpm run build`: failed", hook) == signature("Bash(pnpm run build)")
    assert signature("x", {"tool": "browser_navigate", "arguments": {"url": "https://a.test"}}) == (
        "navigat https://a.test"
    )


# -- projects ----------------------------------------------------------------------------------------------


def test_a_project_is_the_git_root_and_worktrees_are_one(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src" / "deep").mkdir(parents=True)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run([*git, "-C", str(repo), "worktree", "add", "-q", str(tmp_path / "wt")], check=True)
    project_of = Resolver()
    project = project_of(repo / "src" / "deep")
    assert project is not None and project.root == str(repo.resolve())
    assert project_of(tmp_path / "wt") == project
    plain = tmp_path / "plain"
    plain.mkdir()
    found = project_of(plain)
    assert found is not None and found.root == str(plain.resolve()) and found != project


def test_a_session_is_summarised_at_its_end_when_an_llm_is_configured(tmp_path: Path) -> None:
    from remindful.services.learning.llm import FakeLLM, set_llm

    store = tmp_path / "s"
    for with_llm in (False, True):
        s = AgentSession(store, tmp_path)
        s.start()
        s.edit(str(tmp_path / "db.ts"), "port: string", "port: number")
        s.bash("pnpm run build", "ok")
        s.end()
        with open_fake(store) as memory:
            fake = FakeLLM(replies=['{"summary": "The port is typed as a number now; the build passes."}'])
            if with_llm:
                set_llm(memory.engine, fake)
            memory.drain_spool()
            summaries = [m for m in memory.list(type="knowledge", limit=20) if m.metadata.get("kind") == "summary"]
            if not with_llm:
                assert summaries == []
                continue
            (summary,) = summaries
            assert summary.content == "The port is typed as a number now; the build passes."
            assert (
                summary.session_id == s.session_id and summary.metadata["project_id"] == memory.project_of(tmp_path).key
            )  # type: ignore[union-attr]
            assert (
                "Edited db.ts" in fake.prompts[0] and "Ran `pnpm run build`" not in fake.prompts[0]
            )  # no raw activity


def test_a_drain_killed_before_relating_a_call_relates_it_when_the_row_is_replayed(tmp_path: Path) -> None:
    """The drain finished a call's spool row before relating it to the calls before it: killed in
    between (the success stored, the failure it resolves not marked yet), the failure stayed open
    for good and warned before every later build."""
    import remindful.services.ingest.drainer as drainer

    store, s = tmp_path / "s", AgentSession(tmp_path / "s", tmp_path)
    s.bash("pnpm run build", error="Exit code 2")
    with open_fake(store) as memory:
        memory.drain_spool()
    s.bash("pnpm run build", "Build succeeded")
    with open_fake(store) as memory:
        drain_killed_at(memory, drainer, "relate")
        memory.drain_spool()
        failed = [m for m in calls(memory) if m.metadata["success"] is False]
        succeeded = [m for m in calls(memory) if m.metadata["success"] is True]
        assert len(failed) == 1 and len(succeeded) == 1  # nothing stored twice by the replay
        assert failed[0].metadata.get("resolved_by") == succeeded[0].id
        assert memory.stats().spool_pending == 0
