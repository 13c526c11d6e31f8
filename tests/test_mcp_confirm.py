"""The shared confirmation helper for destructive tools: elicitation when supported, else confirm=true."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp_types import ElicitResult

from remindful.shells.mcp.tools.common import DESTRUCTIVE, tool
from remindful.shells.mcp.tools.confirm import Approval, approved, confirmation, not_confirmed

pytestmark = pytest.mark.anyio

CONFIRM_WIPE = confirmation("Wipe the test store?")


@pytest.fixture
def wiped() -> list[bool]:
    return []


@pytest.fixture
def server(wiped: list[bool]) -> MCPServer:
    mcp: MCPServer = MCPServer("confirm-test")

    @tool(mcp, DESTRUCTIVE)
    def memory_wipe(confirm: bool = False, approval: Annotated[Approval, CONFIRM_WIPE] = None) -> dict[str, Any]:
        """Wipe everything (test tool)."""
        if not approved(approval):
            raise not_confirmed("wipe the store", approval)
        wiped.append(True)
        return {"success": True}

    return mcp


def answering(action: str, confirm: bool | None = None) -> Any:
    async def callback(ctx: Any, params: Any) -> ElicitResult:
        assert params.message == "Wipe the test store?"
        return ElicitResult(action=action, content=None if confirm is None else {"confirm": confirm})

    return callback


async def test_approval_is_not_a_tool_argument(server: MCPServer) -> None:
    async with Client(server) as client:
        (listed,) = (await client.list_tools()).tools
    assert set(listed.input_schema["properties"]) == {"confirm"}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_without_elicitation_confirm_true_is_required(server: MCPServer, wiped: list[bool], mode: str) -> None:
    async with Client(server, mode=mode) as client:
        refused = await client.call_tool("memory_wipe", {})
        assert refused.is_error and not wiped
        assert refused.content[0].text == (
            "Error executing tool memory_wipe: Confirmation required to wipe the store: "
            "call again with confirm=true (nothing was changed)"
        )
        done = (await client.call_tool("memory_wipe", {"confirm": True})).structured_content
        assert done == {"success": True} and wiped == [True]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize(
    ("action", "confirm", "expected"),
    [("accept", True, True), ("accept", False, False), ("decline", None, False), ("cancel", None, False)],
)
async def test_elicitation_asks_the_user(
    server: MCPServer, wiped: list[bool], mode: str, action: str, confirm: bool | None, expected: bool
) -> None:
    async with Client(server, mode=mode, elicitation_callback=answering(action, confirm)) as client:
        answer = await client.call_tool("memory_wipe", {})
    assert answer.is_error is not expected and bool(wiped) is expected
    if expected:
        assert answer.structured_content == {"success": True}
    else:
        assert "Not confirmed: the user did not agree to wipe the store" in answer.content[0].text


# -- the user's words, confirmed by the user ----------------------------------------------------------


def answering_whose_words(action: str, confirm: bool | None = None) -> Any:
    async def callback(ctx: Any, params: Any) -> ElicitResult:
        assert params.message.startswith("Are these your words")
        assert "Deploy only on Tuesdays" in params.message
        return ElicitResult(action=action, content=None if confirm is None else {"confirm": confirm})

    return callback


@pytest.mark.parametrize(
    ("elicit", "origin", "kind"),
    [
        (answering_whose_words("accept", True), "user_confirmed", "decision"),
        (answering_whose_words("accept", False), "assistant", "observation"),
        (answering_whose_words("decline"), "assistant", "observation"),
        (None, "assistant", "observation"),  # no one to ask: the agent's say-so is not the user's
    ],
)
async def test_only_the_user_can_make_a_stored_memory_theirs(
    tmp_path: Any, elicit: Any, origin: str, kind: str
) -> None:
    from remindful.services.context import kind_of
    from remindful.shells.mcp.server import LazyManager, build_server
    from remindful.testing import open_fake

    lazy = LazyManager(factory=lambda: open_fake(tmp_path / "store"))
    try:
        async with Client(build_server(lazy), elicitation_callback=elicit) as client:
            stored = await client.call_tool(
                "memory_store",
                {
                    "content": "We decided: Deploy only on Tuesdays.",
                    "type": "knowledge",
                    "metadata": {"category": "decision"},
                },
            )
            memory_id = stored.structured_content["memory_id"]
            assert stored.structured_content["origin"] == "assistant"
            answer = await client.call_tool("memory_confirm_users_words", {"memory_id": memory_id})
            assert answer.is_error is (origin != "user_confirmed")
            missing = await client.call_tool("memory_confirm_users_words", {"memory_id": "knowledge_x"})
            assert missing.is_error and "not found" in missing.content[0].text.lower()
        memory = lazy().get(memory_id)
        assert memory.origin == origin
        assert kind_of(memory.type.value, memory.source.value, memory.metadata, memory.origin) == kind
    finally:
        lazy.close()
