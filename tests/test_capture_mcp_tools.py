"""MCP capture tools: memory_capture_status and memory_index_file, in-process with the SDK client."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from mcp import Client

from conftest import open_fake
from mcp_client import call, tool_error
from remindful.shells.hook import run
from remindful.shells.mcp.server import LazyManager, build_server

pytestmark = pytest.mark.anyio

#: The MemoryManager method each tool needs to be one call (and to report its count).
NEEDS = {"files_indexed": "capture_status", "chunks": "index_file"}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store with one hook event spooled (its command holds an email address)."""
    store = tmp_path / "store"
    payload = {"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "echo bob@example.com"}}
    assert run(["--path", str(store), "hook", "PostToolUse"], stdin=io.StringIO(json.dumps(payload))) == 0
    return store


@pytest.fixture
def note(tmp_path: Path) -> Path:
    note = tmp_path / "guide.md"
    note.write_text("Deploys go through the staging cluster first. " * 30)  # 240 words: 2 chunks
    return note


async def test_capture_status_and_index_file(store: Path, note: Path, tmp_path: Path) -> None:
    lazy = LazyManager(factory=lambda: open_fake(store, **{"security.allowed_paths": [note.parent]}))
    try:
        async with Client(build_server(lazy)) as client:
            status = await call(client, "memory_capture_status")
            assert status["success"] is True and status["spool_pending"] == 0  # the server drained it at its open
            assert status["capture"]["redacted_email"] == 1
            indexed = await call(client, "memory_index_file", path=str(note))
            assert indexed["success"] is True and indexed["outcome"] == "indexed"
            again = await call(client, "memory_index_file", path=str(note))
            assert again["outcome"] == "unchanged"
            found = await call(client, "memory_search", query="staging cluster deploys", memory_types=["document"])
            assert {m["metadata"]["file_path"] for m in found["memories"]} == {str(note.resolve())}
            bad = await tool_error(client, "memory_index_file", path=str(tmp_path / "x.txt"))
            assert "Invalid 'path'" in bad and ".md" in bad
            missing = await tool_error(client, "memory_index_file", path=str(tmp_path / "missing.md"))
            assert "Invalid 'path'" in missing and "no such file" in missing
    finally:
        lazy.close()


@pytest.mark.parametrize("count", sorted(NEEDS))
async def test_the_tools_report_their_counts(store: Path, note: Path, count: str) -> None:
    lazy = LazyManager(factory=lambda: open_fake(store, **{"security.allowed_paths": [note.parent]}))
    try:
        async with Client(build_server(lazy)) as client:
            indexed = await call(client, "memory_index_file", path=str(note))
            status = await call(client, "memory_capture_status")
    finally:
        lazy.close()
    assert {"chunks": indexed, "files_indexed": status}[count][count] == {"chunks": 2, "files_indexed": 1}[count]
