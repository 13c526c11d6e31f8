"""MCP capture tools: memory_capture_status and memory_index_file, in-process with the SDK client."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from remindful.services.hooks.fast import run
from remindful.shells.mcp.server import LazyManager, build_server
from remindful.testing import open_fake

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def test_capture_status_and_index_file(tmp_path: Path) -> None:
    store = tmp_path / "store"
    payload = {"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "echo bob@example.com"}}
    assert run(["--path", str(store), "hook", "PreToolUse"], stdin=io.StringIO(json.dumps(payload))) == 0
    note = tmp_path / "guide.md"
    note.write_text("Deploys go through the staging cluster first. " * 30)
    lazy = LazyManager(factory=lambda: open_fake(store))
    try:
        async with Client(build_server(lazy)) as client:
            status = await call(client, "memory_capture_status")
            assert status["success"] is True and status["spool_pending"] == 0  # drained when the store opened
            assert status["capture"]["redacted_email"] == 1
            indexed = await call(client, "memory_index_file", path=str(note))
            assert indexed == {"success": True, "outcome": "indexed", "chunks": 2}
            again = await call(client, "memory_index_file", path=str(note))
            assert again["outcome"] == "unchanged"
            assert (await call(client, "memory_capture_status"))["files_indexed"] == 1
            bad = await call(client, "memory_index_file", path=str(tmp_path / "x.txt"))
            assert bad["success"] is False and bad["field"] == "path" and ".md" in bad["error"]
            missing = await call(client, "memory_index_file", path=str(tmp_path / "missing.md"))
            assert missing["success"] is False and "no such file" in missing["error"]
    finally:
        lazy.close()
