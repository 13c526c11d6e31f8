"""The MCP server in-process, through the SDK's own client: every core tool, tool errors, disabled memory."""

from __future__ import annotations

import functools
import json
import re
import threading
import time
from pathlib import Path
from typing import Any, get_args

import anyio
import anyio.to_thread
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from remindful.engine.deferred import SHARED_ROWS, writer
from remindful.model import MemoryType
from remindful.shells.mcp.server import LazyManager, build_server
from remindful.shells.mcp.tools.common import ArrivalOrder, MemoryTypeName
from remindful.testing import open_fake
from test_background import HoldingEmbedder

pytestmark = pytest.mark.anyio

CORE_TOOLS = {
    "memory_store",
    "memory_store_batch",
    "memory_search",
    "memory_get",
    "memory_get_batch",
    "memory_update",
    "memory_delete",
    "memory_list",
    "memory_stats",
}


@pytest.fixture
def lazy(tmp_path: Path) -> LazyManager:
    manager = LazyManager(factory=lambda: open_fake(tmp_path / "store"))
    yield manager
    manager.close()


@pytest.fixture
def server(lazy: LazyManager) -> Any:
    return build_server(lazy)


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured answer; fails the test if the SDK reports a tool error."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    # The text content carries the same answer, for clients that ignore structured content.
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


async def tool_error(client: Client, tool: str, **arguments: Any) -> str:
    """The text of the tool error a call answers; fails the test if the call succeeds."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    (content,) = result.content
    return content.text


async def domain_error(client: Client, tool: str, **arguments: Any) -> str:
    """:func:`tool_error` for an error of remindful's (not the SDK's argument validation): one line."""
    text = await tool_error(client, tool, **arguments)
    assert text.startswith(f"Error executing tool {tool}: ") and "\n" not in text, text
    return text


async def test_listing_tools_loads_nothing(server: Any, lazy: LazyManager, tmp_path: Path) -> None:
    async with Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert not (tmp_path / "store").exists()  # the lifespan opens the manager, which touches nothing yet
        assert (await call(client, "memory_list"))["count"] == 0
        assert lazy.opened
    assert not lazy.opened  # closed when the server's lifespan ends
    assert set(tools) >= CORE_TOOLS
    for name, tool in tools.items():
        assert name.startswith("memory_") and re.fullmatch(r"[a-z_]+", name)
        assert tool.description and len(tool.description) > 40, name
        assert tool.annotations is not None and tool.annotations.read_only_hint is not None, name
    assert tools["memory_search"].annotations.read_only_hint is True
    assert tools["memory_delete"].annotations.destructive_hint is True
    assert tools["memory_store"].annotations.read_only_hint is False
    assert tools["memory_store"].input_schema["required"] == ["content"]
    assert tools["memory_store"].input_schema["properties"]["type"]["enum"] == [t.value for t in MemoryType]


def test_type_literal_matches_model() -> None:
    assert list(get_args(MemoryTypeName)) == [t.value for t in MemoryType]


async def test_store_search_get_update_delete(server: Any) -> None:
    async with Client(server) as client:
        stored = await call(
            client,
            "memory_store",
            content="Clicked the login button at (500, 300)",
            type="action",
            metadata={"action": "click", "success": True},
            importance=0.9,
            bookmark=True,
        )
        assert stored["success"] is True and stored["memory_id"].startswith("action_")
        memory_id = stored["memory_id"]

        found = await call(client, "memory_search", query="login button", memory_types=["action"], limit=5)
        assert found["count"] >= 1 and found["memories"][0]["id"] == memory_id
        assert 0 <= found["memories"][0]["score"] <= 1
        filtered = await call(client, "memory_search", query="login", filters={"success": False})
        assert filtered["count"] == 0

        got = await call(client, "memory_get", memory_id=memory_id)
        memory = got["memory"]
        assert memory["content"].startswith("Clicked the login")
        assert memory["metadata"]["action"] == "click"
        assert memory["bookmarked"] is True and memory["importance"] == 0.9

        updated = await call(client, "memory_update", memory_id=memory_id, metadata={"verified": True, "action": None})
        assert updated["memory"]["metadata"] == {
            "success": True,
            "bookmarked": True,
            "importance": 0.9,
            "verified": True,
        }
        updated = await call(client, "memory_update", memory_id=memory_id, content="Clicked sign-in")
        assert updated["memory"]["content"] == "Clicked sign-in"

        deleted = await call(client, "memory_delete", memory_id=memory_id)
        assert deleted == {"success": True, "deleted": True, "memory_id": memory_id}
        gone = await domain_error(client, "memory_get", memory_id=memory_id)
        assert "Memory not found" in gone and memory_id in gone and "memory_search" in gone


async def test_a_search_reads_a_large_batch_the_client_stored_before_it(tmp_path: Path) -> None:
    """Each tool call runs in a worker thread of its own, and a search waits only for the vectors
    of its writer's large writes (an import elsewhere in the process does not hold it up): every
    call of the server is one writer, so a client that stores a large batch and then searches
    finds it by meaning."""
    embedder = HoldingEmbedder()
    embedder.hold("imported")
    settings = {"performance.search_timeout_ms": 120_000}
    lazy = LazyManager(factory=lambda: open_fake(tmp_path / "store", embedder=embedder, **settings))
    found: dict[str, Any] = {}
    busy = threading.Event()
    try:
        async with Client(build_server(lazy)) as client:
            items = [{"content": f"imported note {i} about the ferry timetable"} for i in range(SHARED_ROWS + 1)]
            assert (await call(client, "memory_store_batch", items=items))["count"] == SHARED_ROWS + 1

            async def search() -> None:
                found.update(await call(client, "memory_search", query="boat schedule", limit=3))

            # The worker thread the batch ran in is kept busy: the search runs in another one.
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(functools.partial(anyio.to_thread.run_sync, busy.wait, abandon_on_cancel=True))
                await anyio.sleep(0.1)
                tasks.start_soon(search)
                await anyio.sleep(0.5)
                assert not found, "the search did not wait for the batch stored before it"
                embedder.let_go("imported")
                busy.set()
        assert found["count"] == 3  # no word in common: by meaning alone
        assert all("imported" in m["content"] for m in found["memories"])
    finally:
        busy.set()
        embedder.let_go("imported")
        lazy.close()


async def test_batch_list_and_stats(server: Any) -> None:
    async with Client(server) as client:
        batch = await call(
            client,
            "memory_store_batch",
            items=[
                {"content": "Step 1: open the form", "type": "workflow"},
                {"content": "Step 2: submit", "type": "workflow", "metadata": {"step": 2}},
                {"content": "Deploy needs AWS_PROFILE=prod", "type": "knowledge", "session_id": "other"},
            ],
        )
        assert batch["count"] == 3 and len(batch["memory_ids"]) == 3

        got = await call(client, "memory_get_batch", memory_ids=[batch["memory_ids"][1], "missing_id"])
        assert got["memories"][0]["content"] == "Step 2: submit" and got["memories"][1] is None
        assert got["found"] == 1 and got["missing"] == ["missing_id"]

        listed = await call(client, "memory_list", type="workflow")
        assert [m["content"] for m in listed["memories"]] == ["Step 2: submit", "Step 1: open the form"]
        current = await call(client, "memory_list", session_id="current")
        assert current["count"] == 2
        other = await call(client, "memory_list", session_id="other", limit=1)
        assert other["count"] == 1 and other["memories"][0]["type"] == "knowledge"
        page = await call(client, "memory_list", limit=1, offset=1)
        assert page["count"] == 1 and page["offset"] == 1
        assert (await call(client, "memory_list", since="2000-01-01T00:00:00Z"))["count"] == 3
        assert (await call(client, "memory_list", until="2000-01-01T00:00:00Z"))["count"] == 0

        stats = await call(client, "memory_stats")
        assert stats["success"] is True and stats["total_memories"] == 3
        assert stats["collections"]["workflow_memories"]["count"] == 2


async def test_resources(server: Any) -> None:
    async with Client(server) as client:
        stored = await call(client, "memory_store", content="remember the milk", type="knowledge")
        uris = {str(r.uri) for r in (await client.list_resources()).resources}
        assert {"memory://stats", "memory://recent"} <= uris
        stats = json.loads((await client.read_resource("memory://stats")).contents[0].text)
        assert stats["total_memories"] == 1
        recent = json.loads((await client.read_resource("memory://recent")).contents[0].text)
        assert recent["memories"][0]["content"] == "remember the milk"
        one = json.loads((await client.read_resource(f"memory://memories/{stored['memory_id']}")).contents[0].text)
        assert one["memory"]["id"] == stored["memory_id"]


async def test_missing_ill_typed_and_unknown_arguments_are_tool_errors(server: Any) -> None:
    async with Client(server) as client:
        assert "content" in await tool_error(client, "memory_store")
        assert "content" in await tool_error(client, "memory_store", content=5)
        assert "type" in await tool_error(client, "memory_store", content="x", type="bogus")
        assert "metadata" in await tool_error(client, "memory_store", content="x", metadata="not a dict")
        assert "importance" in await tool_error(client, "memory_store", content="x", importance=3)
        assert "limit" in await tool_error(client, "memory_search", query="x", limit=0)
        assert "limit" in await tool_error(client, "memory_search", query="x", limit="ten")
        assert "memory_ids" in await tool_error(client, "memory_get_batch", memory_ids="id")
        assert "items" in await tool_error(client, "memory_store_batch", items=[{"content": "x", "colour": "red"}])
        # A misspelt optional argument would silently fall back to its default: it is refused.
        typo = await domain_error(client, "memory_search", query="x", memory_typ=["action"])
        assert "unknown argument 'memory_typ'" in typo and "memory_types" in typo
        assert "it takes no arguments" in await domain_error(client, "memory_scopes", verbose=True)
        # The server is alive and well after all of that, and stored nothing.
        assert (await call(client, "memory_stats"))["total_memories"] == 0
        assert (await call(client, "memory_store", content="still here"))["success"] is True


async def test_bad_values_are_tool_errors_naming_the_field(server: Any) -> None:
    async with Client(server) as client:
        empty = await domain_error(client, "memory_store", content="   ")
        assert "Invalid 'content'" in empty and "non-empty" in empty
        assert "1,000,000" in await domain_error(client, "memory_store", content="x" * 1_000_001)
        assert "Invalid 'timestamp'" in await domain_error(client, "memory_store", content="x", timestamp="yesterday")
        assert "filter" in (await domain_error(client, "memory_search", query="x", filters={"$bogus": 1})).lower()
        nothing = await domain_error(client, "memory_update", memory_id="action_x")
        assert "Invalid 'content'" in nothing and "at least one" in nothing
        assert "Memory not found" in await domain_error(
            client, "memory_update", memory_id="action_missing", content="x"
        )
        assert "Memory not found" in await domain_error(client, "memory_delete", memory_id="action_missing")
        assert "Invalid 'items': expected 1 to 1000" in await domain_error(client, "memory_store_batch", items=[])
        bad_item = await domain_error(client, "memory_store_batch", items=[{"content": "ok"}, {"content": ""}])
        assert "items[1].content" in bad_item
        assert (await call(client, "memory_stats"))["total_memories"] == 0  # all-or-nothing: nothing stored
        assert (await call(client, "memory_store", content="still here"))["success"] is True


async def test_disabled_memory_is_a_tool_error_for_every_tool_and_keeps_serving(tmp_path: Path) -> None:
    lazy = LazyManager(factory=lambda: open_fake(tmp_path / "off", enabled=False))
    arguments = {
        "memory_store": {"content": "x"},
        "memory_store_batch": {"items": [{"content": "x"}]},
        "memory_search": {"query": "x"},
        "memory_get": {"memory_id": "x"},
        "memory_get_batch": {"memory_ids": ["x"]},
        "memory_update": {"memory_id": "x", "content": "y"},
        "memory_delete": {"memory_id": "x"},
        "memory_list": {},
        "memory_stats": {},
        # Destructive tools say so before any confirmation is asked for.
        "memory_delete_session": {"session_id": "s"},
        "memory_restore": {"backup_path": "/nonexistent.tar.gz"},
        "memory_clear_all": {},
        "memory_list_sessions": {},
        "memory_cleanup": {"dry_run": True},
        "memory_capture_turn": {"user_message": "Remember that I prefer tabs."},
        "memory_capture_status": {},
    }
    async with Client(build_server(lazy)) as client:
        for tool, args in arguments.items():
            error = await domain_error(client, tool, **args)
            assert error.endswith(": Memory features are disabled: disabled in configuration (enabled: false)"), error
        assert len((await client.list_tools()).tools) >= len(CORE_TOOLS)
    lazy.close()


async def test_unusable_storage_path_disables_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    lazy = LazyManager(factory=lambda: open_fake(blocker / "store"))
    async with Client(build_server(lazy)) as client:
        error = await domain_error(client, "memory_store", content="x")
        assert "Memory features are disabled" in error and "not usable" in error
        assert "Memory features are disabled" in await domain_error(client, "memory_stats")
    lazy.close()


async def test_invalid_config_is_a_tool_error_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMINDFUL_RETENTION__DEFAULT_RETENTION_DAYS", "-3")
    async with Client(build_server(path=tmp_path / "store")) as client:
        assert "retention.default_retention_days" in await domain_error(client, "memory_list")
        monkeypatch.delenv("REMINDFUL_RETENTION__DEFAULT_RETENTION_DAYS")
        # Each call tries again: once the setting is fixed, the tools work without a restart.
        assert (await call(client, "memory_list"))["count"] == 0


async def test_resources_answer_errors_as_protocol_errors(tmp_path: Path) -> None:
    lazy = LazyManager(factory=lambda: open_fake(tmp_path / "off", enabled=False))
    async with Client(build_server(lazy)) as client:
        with pytest.raises(MCPError, match="Memory features are disabled"):
            await client.read_resource("memory://stats")
    lazy.close()


async def test_legacy_handshake_client(server: Any) -> None:
    async with Client(server, mode="legacy") as client:
        assert client.server_info is not None and client.server_info.name == "remindful"
        stored = await call(client, "memory_store", content="legacy clients work too")
        assert stored["success"] is True


async def test_readme_lists_exactly_the_servers_tools(server: Any) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("### MCP server", 1)[1].split("\n### ", 1)[0]
    documented = re.findall(r"^\| `(memory_\w+)` \|", section, flags=re.MULTILINE)
    async with Client(server) as client:
        served = [t.name for t in (await client.list_tools()).tools]
    assert len(documented) == len(set(documented)), "a tool is listed twice in the README"
    assert sorted(documented) == sorted(served), "README's MCP tool table and the server's tools differ"


async def test_calls_sent_without_waiting_take_effect_in_order(server: Any, lazy: LazyManager) -> None:
    """The SDK runs requests at once, each in a thread: a search sent right after a store (a
    script piping both, parallel tool calls) could run first and miss it. Here the store is
    slowed down; the search, sent second, must still find it."""
    manager = lazy()
    store = manager.store

    def slow_store(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.3)
        return store(*args, **kwargs)

    manager.store = slow_store  # type: ignore[method-assign]
    answers: dict[str, dict[str, Any]] = {}

    async def send(tool: str, **arguments: Any) -> None:
        answers[tool] = await call(client, tool, **arguments)

    async with Client(server) as client, anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(send, "memory_store", content="Pipelined: the cache key includes the locale"))
        tg.start_soon(functools.partial(send, "memory_search", query="cache key locale"))
    hits = answers["memory_search"]["memories"]
    assert [h["id"] for h in hits][:1] == [answers["memory_store"]["memory_id"]]


async def test_arrival_order_lets_reads_overlap_and_holds_writes() -> None:
    """Reads in a row run together; a write waits for every earlier call, a read for earlier writes."""
    order = ArrivalOrder()
    log: list[str] = []

    def step(name: str, seconds: float) -> None:
        log.append(f"{name} start")
        time.sleep(seconds)
        log.append(f"{name} end")

    async def enter(writes: bool, name: str, seconds: float) -> None:
        await order.run(writes, step, {"name": name, "seconds": seconds})

    async with anyio.create_task_group() as tg:
        tg.start_soon(enter, False, "read1", 0.2)
        tg.start_soon(enter, False, "read2", 0.05)
        tg.start_soon(enter, True, "write", 0.05)
        tg.start_soon(enter, False, "read3", 0.0)
    assert log.index("read2 start") < log.index("read1 end")  # the reads overlapped
    assert log.index("write start") > max(log.index("read1 end"), log.index("read2 end"))
    assert log.index("read3 start") > log.index("write end")


async def test_every_call_of_a_server_is_one_writer() -> None:
    """Calls of one server run in worker threads of their own (two reads at once here), and are one
    writer (:data:`remindful.engine.deferred.WRITER`); another server's calls are another writer."""
    first, second = ArrivalOrder(), ArrivalOrder()
    both = threading.Barrier(2, timeout=20)
    seen: list[tuple[Any, threading.Thread]] = []

    def observe() -> None:
        seen.append((writer(), threading.current_thread()))
        both.wait()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(first.run, False, observe, {})
        tasks.start_soon(first.run, False, observe, {})
    assert seen[0][1] is not seen[1][1] and seen[0][0] is seen[1][0] is first
    await second.run(False, lambda: seen.append((writer(), threading.current_thread())), {})
    assert seen[2][0] is second
    assert writer() is threading.current_thread()  # outside any call: the thread
