"""Every MCP tool's input schema passes a strict JSON Schema validator (issue 35: optional strings
were declared ``"type": "string"`` with ``"default": null``, a default their own schema refuses)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from mcp import Client

from conftest import open_fake
from remindful.shells.mcp.server import LazyManager, build_server

pytestmark = pytest.mark.anyio


@pytest.fixture
async def tools(tmp_path: Path) -> list[Any]:
    lazy = LazyManager(factory=lambda: open_fake(tmp_path / "store"))
    async with Client(build_server(lazy), mode="legacy") as client:
        return list((await client.list_tools()).tools)


def _defaults(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any], Any]]:
    """``(where, property schema, default)`` of every property with a default, nested ones too."""
    out = []
    for holder_name, holder in [("", schema), *((f"$defs.{k}.", v) for k, v in schema.get("$defs", {}).items())]:
        for name, prop in (holder.get("properties") or {}).items():
            if "default" in prop:
                out.append((holder_name + name, prop, prop["default"]))
    return out


async def test_every_tool_input_schema_is_valid_and_accepts_its_defaults(tools: list[Any]) -> None:
    assert len(tools) > 10
    problems = []
    for tool in tools:
        schema = tool.input_schema
        Draft202012Validator.check_schema(schema)
        for where, prop, default in _defaults(schema):
            check = Draft202012Validator({"$defs": schema.get("$defs", {}), **prop})
            errors = [e.message for e in check.iter_errors(default)]
            if errors:
                problems.append(f"{tool.name}.{where}: default {default!r}: {errors[0]}")
    assert problems == []


async def test_optional_strings_are_declared_as_string_or_null(tools: list[Any]) -> None:
    by_name = {t.name: t.input_schema for t in tools}
    for tool, field in (("memory_store", "session_id"), ("memory_update", "content"), ("memory_search", "session_id")):
        prop = by_name[tool]["properties"][field]
        assert prop.get("anyOf") == [{"type": "string"}, {"type": "null"}], (tool, field, prop)
        assert prop.get("default") is None and "type" not in prop
