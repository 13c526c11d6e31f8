"""Every shell takes a scope: the command line (typer's CliRunner, run in a project's directory), the
MCP tools (the SDK's client against the server in-process), the dashboard (Starlette's TestClient)
and the statistics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from starlette.testclient import TestClient
from typer.testing import CliRunner

from mcp_client import call, tool_error
from remindful.shells.cli.app import app
from remindful.shells.mcp.server import LazyManager, build_server
from remindful.testing import open_fake
from remindful.web import build_app
from test_scopes import repository

TOKEN = "test-token-0123456789"


@pytest.fixture
def projects(tmp_path: Path) -> tuple[Path, Path]:
    return repository(tmp_path / "projA"), repository(tmp_path / "projB")


# -- the command line ------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_command_line_stores_in_its_directory_and_reads_any_scope(
    tmp_path: Path, projects: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = projects
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    monkeypatch.setenv("REMINDFUL_SEARCH__MIN_SCORE", "0")
    monkeypatch.setenv("REMINDFUL_CONTEXT__MIN_SCORE", "0")
    monkeypatch.setenv("MEMORY_STORAGE_PATH", str(tmp_path / "store"))
    runner = CliRunner()

    def cli(*args: str, code: int = 0) -> Any:
        result = runner.invoke(app, list(args))
        assert result.exit_code == code, result.output
        return json.loads(result.output) if "--json" in args and code == 0 else result.output

    monkeypatch.chdir(a)
    pnpm = cli("store", "The web app installs packages with pnpm", "--type", "knowledge", "--json")
    rule = cli("store", "Never add emojis to commit messages", "--type", "knowledge", "--json")
    monkeypatch.chdir(b)
    cargo = cli("store", "The engine installs packages with cargo", "--type", "knowledge", "--json")
    note = cli("store", "A note for projA from elsewhere", "--type", "knowledge", "--scope", "project:projA", "--json")
    assert rule["scope"] == "user"
    assert pnpm["scope"] == note["scope"] != cargo["scope"]
    assert cli("get", cargo["memory_id"], "--json")["scope"] == cargo["scope"]

    everything = {m["id"] for m in cli("search", "installs packages", "--json")["memories"]}
    assert {pnpm["memory_id"], cargo["memory_id"]} <= everything  # search reads every scope by default
    here = {m["id"] for m in cli("search", "installs packages", "--scope", "here", "--json")["memories"]}
    assert cargo["memory_id"] in here and pnpm["memory_id"] not in here
    assert [m["id"] for m in cli("list", "--scope", "user", "--json")] == [rule["memory_id"]]
    context = cli("context", "how are packages installed? any commit rules?", "--json")["context"]
    assert "cargo" in context and "emojis" in context and "pnpm" not in context  # a hook here would inject
    listed = cli("scopes", "--json")
    assert listed["here"]["name"] == "projB"
    assert {s["name"] for s in listed["scopes"] if s["kind"] == "project"} == {"projA", "projB"}
    stats = cli("stats", "--scope", "project:projA", "--json")
    assert stats["scope"] == {"selection": pnpm["scope"], "memories": 2, "by_type": {"knowledge": 2}}
    assert {s["scope"]: s["count"] for s in stats["scopes"]}["user"] == 1
    assert "user (a rule stated as always/never)" in cli("scopes", "--explain", "Always answer briefly")
    assert "no user-level rule" in cli("scopes", "--explain", "We always deploy on Mondays")
    assert "moved" in cli("move", cargo["memory_id"], "user")
    assert cli("get", cargo["memory_id"], "--json")["scope"] == "user"
    assert cli("move-all", "user", "project", "--json") == {"success": True, "moved": 2}
    assert {m["scope"] for m in cli("list", "--scope", "here", "--json")} == {cargo["scope"]}
    assert "moved 0 memories" in cli("move-all", "unscoped", "user")
    assert "from" in cli("move-all", "all", "user", code=2)
    assert "scope" in cli("search", "x", "--scope", "team", code=2)
    assert "no project 'ghost'" in cli("list", "--scope", "project:ghost", code=2)


# -- MCP -------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_mcp_tools_read_the_servers_project_and_take_a_scope(
    tmp_path: Path, projects: tuple[Path, Path]
) -> None:
    a, b = projects
    with open_fake(tmp_path / "store", project=b) as other:
        other.store("projB keeps its secrets in vault", type="knowledge")
    lazy = LazyManager(factory=lambda: open_fake(tmp_path / "store", project=a))
    try:
        async with Client(build_server(lazy)) as client:
            fact = await call(client, "memory_store", content="projA keeps its secrets in sops", type="knowledge")
            rule = await call(client, "memory_store", content="Never print secrets in logs", type="knowledge")
            shared = await call(client, "memory_store", content="Secrets rotate monthly", scope="user")
            assert (rule["scope"], shared["scope"]) == ("user", "user") and fact["scope"].startswith("project:proja-")
            found = await call(client, "memory_search", query="where are secrets kept", min_score=0)
            assert {m["id"] for m in found["memories"]} == {fact["memory_id"], rule["memory_id"], shared["memory_id"]}
            assert all(m["scope"] for m in found["memories"])
            # Every project's memories are the user's to read, not an MCP client's.
            for everything in ("all", "user,all", ["here", "all"]):
                assert "only for the user" in await tool_error(
                    client, "memory_search", query="where are secrets kept", scope=everything
                )
            assert "only for the user" in await tool_error(client, "memory_list", scope="ALL")
            assert "only for the user" in await tool_error(client, "memory_stats", scope="all")
            assert "only for the user" in await tool_error(client, "memory_context", task="secrets", scope="all")
            only_b = await call(client, "memory_list", scope=["project:projB"])
            assert [m["content"] for m in only_b["memories"]] == ["projB keeps its secrets in vault"]
            context = await call(client, "memory_context", task="where are secrets kept", min_score=0)
            assert "sops" in context["context"] and "vault" not in context["context"]
            listed = await call(client, "memory_scopes")
            assert listed["here"]["name"] == "projA"
            assert {s["scope"]: s["count"] for s in listed["scopes"]}["user"] == 2
            stats = await call(client, "memory_stats", scope="user")
            assert stats["scope"]["memories"] == 2
            moved = await call(client, "memory_update", memory_id=fact["memory_id"], scope="project:projB")
            assert moved["memory"]["scope"] == only_b["memories"][0]["scope"]
            batch = await call(
                client, "memory_store_batch", items=[{"content": "a", "scope": "user"}, {"content": "b"}]
            )
            stored = [(await call(client, "memory_get", memory_id=i))["memory"]["scope"] for i in batch["memory_ids"]]
            assert stored == ["user", fact["scope"]]
            assert "scope" in await tool_error(client, "memory_search", query="x", scope="team")
            assert "scope" in await tool_error(client, "memory_store", content="x", scope="everywhere")
    finally:
        lazy.close()


# -- the dashboard ----------------------------------------------------------------------------------


def test_the_dashboard_filters_by_scope_and_shows_each_memorys(tmp_path: Path, projects: tuple[Path, Path]) -> None:
    a, _b = projects
    with open_fake(tmp_path / "store", project=a) as memory:  # a manager working in A, as `serve`'s is
        fact = memory.store("projA renders on the server", type="knowledge")
        memory.store("projB renders in the browser", type="knowledge", scope="project:projB")
        rule = memory.store("I prefer dark mode in every editor", type="knowledge")
        client = TestClient(
            build_app(memory, TOKEN, hosts=["testserver"]), headers={"Authorization": f"Bearer {TOKEN}"}
        )
        listing = client.get("/memories").text  # the dashboard reads every scope
        assert "projB renders in the browser" in listing and 'id="scope-filter"' in listing
        user_only = client.get("/memories", params={"scope": "user"}).text
        assert "dark mode" in user_only and "renders" not in user_only
        searched = client.get("/memories", params={"q": "renders", "scope": memory.project.scope}).text
        assert "projA renders on the server" in searched and "browser" not in searched
        assert "projB renders in the browser" in client.get("/memories", params={"q": "renders"}).text
        page = client.get(f"/memories/{fact}").text
        assert f'id="memory-scope"><a href="/memories?scope=project%3A{memory.project.key}' in page
        assert "user" in client.get(f"/memories/{rule}").text
        overview = client.get("/").text
        assert 'id="scopes"' in overview and "projA" in overview and str(a.resolve()) in overview
        bad = client.get("/memories", params={"scope": "team"})
        assert bad.status_code == 400 and "scope" in bad.text


def test_capture_turn_learns_into_its_directory_s_project(
    tmp_path: Path, projects: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`remindful capture-turn` goes where `remindful store` from the same directory goes, and what
    the user stated comes back for the question it answers, with its origin."""
    a, _ = projects
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    monkeypatch.setenv("REMINDFUL_CONTEXT__MIN_SCORE", "0")
    monkeypatch.setenv("MEMORY_STORAGE_PATH", str(tmp_path / "store"))
    monkeypatch.chdir(a)
    runner = CliRunner()
    result = runner.invoke(app, ["capture-turn", "Our CI always runs on Node 20.", "--json"])
    assert result.exit_code == 0, result.output
    (learned,) = json.loads(result.output)["memories"]
    stored = json.loads(runner.invoke(app, ["store", "x y z", "--type", "knowledge", "--json"]).output)
    assert learned["scope"] == stored["scope"] and learned["scope"].startswith("project:")
    assert learned["origin"] == "user" and learned["type"] == "knowledge"
    result = runner.invoke(app, ["capture-turn", "The staging database listens on port 6543.", "--json"])
    assert json.loads(result.output)["count"] == 1
    shown = runner.invoke(app, ["get", learned["id"]]).output
    assert "you said" in shown
