"""The learning layer through its shells: CLI commands, MCP tools (in-process SDK client), and
the hook-side turn builder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from typer.testing import CliRunner

from remindful.services.learning.conversation import turn_from_hook_events
from remindful.shells.cli.app import app
from remindful.shells.mcp.server import LazyManager, build_server
from remindful.testing import open_fake

runner = CliRunner()
LEARNING_TOOLS = {
    "memory_capture_turn",
    "memory_capture_correction",
    "memory_capture_config_change",
    "memory_capture_workflow",
    "memory_create_workflow_from_session",
    "memory_confirm",
    "memory_suggest",
    "memory_analyze_patterns",
    "memory_context",
}


@pytest.fixture
def store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    path = tmp_path / "cli-store"
    monkeypatch.setenv("MEMORY_STORAGE_PATH", str(path))
    return path


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


@pytest.mark.slow
def test_cli_learning_commands(store_path: Path, tmp_path: Path) -> None:
    code, out = invoke("capture-turn", "Remember that we deploy on Fridays only.", "--json")
    assert code == 0, out
    (turn_memory,) = json.loads(out)["memories"]
    assert turn_memory["content"] == "We deploy on Fridays only." and turn_memory["importance"] > 0.5
    code, out = invoke("capture-correction", "API uses OAuth", "API uses API keys", "--json")
    assert code == 0 and "not OAuth" in json.loads(out)["memories"][0]["content"]
    code, out = invoke("capture-config", "theme", "dark", "--old", "light")
    assert code == 0 and "User prefers dark mode." in out
    code, out = invoke("confirm", "when do we deploy", turn_memory["id"])
    assert code == 0 and "importance 0.90" in out
    actions = [
        {"action_type": "command", "description": d, "timestamp": f"2026-01-01T10:0{i}:00Z"}
        for i, d in enumerate(["run tests", "build", "push"])
    ]
    (tmp_path / "actions.json").write_text(json.dumps(actions))
    code, out = invoke("capture-workflow", str(tmp_path / "actions.json"), "--json")
    assert (
        code == 0 and json.loads(out)["memories"][0]["content"] == "To ship changes: 1) Run tests, 2) Build, 3) Push."
    )
    code, out = invoke("suggest", "run tests and build then push", "--json")
    assert code == 0 and json.loads(out)["suggestions"][0]["type"] == "workflow"
    code, out = invoke("patterns", "--json")
    assert code == 0 and json.loads(out)["analyzed"] == 0
    code, out = invoke("stats", "--json")
    assert json.loads(out)["learning"]["capture_events"]["conversation"] == 1
    # bad input: exit 2 naming the field
    code, out = invoke("capture-correction", "same", "same")
    assert code == 2 and "'corrected'" in out
    code, out = invoke("patterns", "--metric", "speed")
    assert code == 2 and "'metric'" in out
    code, out = invoke("workflow-from-session", "nope", "x")
    assert code == 2 and "no action memories" in out


@pytest.fixture
def lazy(tmp_path: Path) -> Any:
    manager = LazyManager(factory=lambda: open_fake(tmp_path / "store"))
    yield manager
    manager.close()


async def _call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


@pytest.mark.anyio
async def test_mcp_learning_tools(lazy: Any) -> None:
    async with Client(build_server(lazy)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) >= LEARNING_TOOLS
        assert tools["memory_suggest"].annotations.read_only_hint is True
        assert tools["memory_capture_turn"].annotations.read_only_hint is False
        turn = await _call(client, "memory_capture_turn", user_message="From now on, always use pnpm instead of npm.")
        assert turn["success"] and turn["count"] == 1
        memory_id = turn["memories"][0]["id"]
        confirmed = await _call(client, "memory_confirm", query="which package manager", memory_id=memory_id)
        assert confirmed["memory"]["access_count"] >= 2
        change = await _call(client, "memory_capture_config_change", key="theme", new_value="dark", old_value="light")
        assert change["memory"]["content"].startswith("User prefers dark mode.")
        fix = await _call(client, "memory_capture_correction", original="uses npm", corrected="uses pnpm")
        assert fix["success"] and "pnpm" in fix["memory"]["content"]
        actions = [
            {"action_type": "click", "description": d, "timestamp": f"2026-01-01T10:0{i}:00Z"}
            for i, d in enumerate(["navigate to login page", "fill login form", "click submit"])
        ]
        wf = await _call(client, "memory_capture_workflow", actions=actions)
        assert wf["captured"] and wf["memory"]["content"].startswith("To submit the form:")
        context = await _call(client, "memory_context", task="set up the package manager", budget_tokens=200)
        assert "pnpm" in context["context"] and context["tokens"] <= 200
        assert (await _call(client, "memory_analyze_patterns", metric="sequences"))["patterns"] == []
        suggestion = await _call(client, "memory_suggest", context="fill the login form and submit")
        assert suggestion["suggestions"][0]["memory_id"] == wf["memory"]["id"]
        bad = await client.call_tool("memory_confirm", {"query": "x", "memory_id": "knowledge_nope"})
        assert bad.is_error and "Memory not found" in bad.content[0].text
        bad = await client.call_tool("memory_create_workflow_from_session", {"session_id": "none", "name": "x"})
        assert bad.is_error and "Invalid 'session_id'" in bad.content[0].text


def test_turn_from_hook_events(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    lines = [
        {"type": "user", "message": {"role": "user", "content": "we use uv, not pip"}},
        {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]}},
        {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "Done: uv."}]}},
    ]
    transcript.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "abc", "prompt": "we use uv, not pip", "cwd": "/p"}
    stop = {"hook_event_name": "Stop", "session_id": "abc", "transcript_path": str(transcript)}
    turn = turn_from_hook_events(prompt, stop)
    assert (turn.user_message, turn.assistant_response, turn.conversation_id) == (
        "we use uv, not pip",
        "Done: uv.",
        "abc",
    )
    assert turn.project_id == "/p"
    direct = turn_from_hook_events(prompt, {**stop, "last_assistant_message": "Final answer"})
    assert direct.assistant_response == "Final answer"
    with open_fake(tmp_path / "s") as store:
        (m,) = store.capture_conversation(turn, automatic=True)
        assert m.content == "We use uv, not pip." and m.session_id == "abc"
