"""What the MCP tests ask of the SDK's client: a tool's answer, or the tool error it must give."""

from __future__ import annotations

from typing import Any

from mcp import Client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured answer; fails the test if the SDK reports a tool error."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def tool_error(client: Client, tool: str, **arguments: Any) -> str:
    """The message of a tool call that must fail as an MCP tool error."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return str(result.content[0].text)  # type: ignore[union-attr]
