"""Lifecycle commands through the CLI runner and lifecycle tools through the MCP SDK's client."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from mcp import Client
from typer.testing import CliRunner

from mcp_client import call, tool_error
from remindful.shells.cli.app import app
from remindful.shells.mcp.server import LazyManager, build_server
from remindful.testing import open_fake

runner = CliRunner()
LIFECYCLE_TOOLS = {
    "memory_list_sessions",
    "memory_resume_session",
    "memory_delete_session",
    "memory_cleanup",
    "memory_dedup",
    "memory_export",
    "memory_import",
    "memory_backup",
    "memory_restore",
    "memory_clear_all",
}


def invoke(*args: str, input: str | None = None) -> tuple[int, str]:
    result = runner.invoke(app, list(args), input=input)
    return result.exit_code, result.output


@pytest.fixture
def store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    path = tmp_path / "cli-store"
    monkeypatch.setenv("MEMORY_STORAGE_PATH", str(path))
    return path


@pytest.mark.slow
def test_cli_lifecycle_end_to_end(store_path: Path, tmp_path: Path) -> None:
    old = (datetime.now(UTC) - timedelta(days=60)).isoformat()
    assert invoke("store", "old capture", "--timestamp", old, "--session", "s-old", "--source", "hook")[0] == 0
    assert invoke("store", "Login screen", "--type", "screen", "--session", "s1")[0] == 0
    assert invoke("store", "Login screen", "--type", "screen", "--session", "s1")[0] == 0
    code, out = invoke("sessions", "--json")
    assert code == 0, out
    assert {s["id"] for s in json.loads(out)["sessions"]} == {"s-old", "s1"}
    code, out = invoke("cleanup", "--dry-run", "--json")
    assert code == 0 and json.loads(out)["deleted"] == 1, out
    code, out = invoke("cleanup")
    assert code == 0 and "deleted 1 memories (retention 1)" in out, out
    code, out = invoke("dedup", "--json")
    assert code == 0 and json.loads(out)["deleted"] == 1, out
    code, out = invoke("export", str(tmp_path / "out.json"))
    assert code == 0 and "exported 1 memories" in out, out
    code, out = invoke("backup", "before_experiment", "--json")
    assert code == 0, out
    archive = json.loads(out)["path"]
    assert archive.endswith("_before_experiment.tar.gz")
    code, out = invoke("clear-all", input="n\n")
    assert code == 1 and "nothing was changed" in out
    code, out = invoke("clear-all", "--yes")
    assert code == 0 and "deleted 1 memories" in out, out
    code, out = invoke("import", str(tmp_path / "out.json"), "--json")
    assert code == 0 and json.loads(out)["imported"] == 1, out
    code, out = invoke("restore", archive, "--yes")
    assert code == 0 and "restored 1 memories" in out, out
    code, out = invoke("delete-session", "s1", "--yes", "--json")
    assert code == 0 and json.loads(out)["deleted"] == 1, out
    code, out = invoke("restore", str(tmp_path / "out.json"), "--yes")
    assert code == 2 and "refusing to restore" in out


@pytest.mark.anyio
async def test_mcp_lifecycle_tools(tmp_path: Path) -> None:
    lazy = LazyManager(factory=lambda: open_fake(tmp_path / "store"))
    try:
        async with Client(build_server(lazy)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools.keys() >= LIFECYCLE_TOOLS
            for name in ("memory_delete_session", "memory_restore", "memory_clear_all", "memory_cleanup"):
                assert tools[name].annotations is not None and tools[name].annotations.destructive_hint
            assert tools["memory_list_sessions"].annotations.read_only_hint  # type: ignore[union-attr]
            await call(client, "memory_store", content="Clicked login", session_id="session_abc123")
            await call(client, "memory_store", content="Another thing", session_id="keep")
            listed = await call(client, "memory_list_sessions")
            assert listed["success"] and {s["id"] for s in listed["sessions"]} == {"session_abc123", "keep"}
            assert (await call(client, "memory_resume_session", session_id="keep"))["memory_count"] == 1
            refused = await tool_error(client, "memory_delete_session", session_id="session_abc123")
            assert "call again with confirm=true" in refused
            deleted = await call(client, "memory_delete_session", session_id="session_abc123", confirm=True)
            assert deleted["success"] and deleted["deleted"] == 1 and Path(deleted["backup_path"]).exists()
            exported = await call(client, "memory_export", output_path=str(tmp_path / "store" / "m.json"))
            assert exported["count"] == 1
            assert (await call(client, "memory_cleanup", dry_run=True))["deleted"] == 0
            assert (await call(client, "memory_dedup", dry_run=True))["clusters"] == 0
            backup = await call(client, "memory_backup", name="before_experiment")
            assert backup["success"] and backup["path"].endswith("_before_experiment.tar.gz")
            assert "Invalid 'name'" in await tool_error(client, "memory_backup", name="../x")
            assert "confirm=true" in await tool_error(client, "memory_clear_all")
            cleared = await call(client, "memory_clear_all", confirm=True)
            assert cleared["deleted"] == 1
            assert (await call(client, "memory_import", path=str(tmp_path / "store" / "m.json")))["imported"] == 1
            assert "confirm=true" in await tool_error(client, "memory_restore", backup_path=backup["path"])
            restored = await call(client, "memory_restore", backup_path=backup["path"], confirm=True)
            assert restored["success"] and restored["total"] == 1
            missing = await tool_error(
                client, "memory_restore", backup_path=str(tmp_path / "store" / "nope.tar.gz"), confirm=True
            )
            assert "no file" in missing and "expected a backup" in missing
    finally:
        lazy.close()
