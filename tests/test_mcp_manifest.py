"""The shipped MCP manifest: what the stdio front answers before the SDK loads is what the SDK server answers."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import InitializeResult, ListToolsResult
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

from conftest import open_fake
from remindful.shells.mcp import manifest as mcp_manifest
from remindful.shells.mcp.fast_start import plain_initialize
from remindful.shells.mcp.server import LazyManager, build_server

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def shipped() -> dict[str, Any]:
    data = mcp_manifest.load()
    assert data is not None, "the shipped manifest does not apply here: python -m remindful.shells.mcp.manifest"
    return data


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
async def test_the_shipped_manifest_is_what_the_sdk_server_answers(
    shipped: dict[str, Any], tmp_path: Path, version: str
) -> None:
    """Through the SDK's own client: the tool list and the initialize result, at every protocol
    version the handshake accepts. A failure here means: python -m remindful.shells.mcp.manifest"""
    lazy = LazyManager(factory=lambda: open_fake(tmp_path / "store"))
    async with Client(build_server(lazy), mode="legacy") as client:
        listed = await client.list_tools()
        capabilities, info, instructions = client.server_capabilities, client.server_info, client.instructions
    assert ListToolsResult.model_validate(mcp_manifest.tools_result(shipped)) == listed
    early = InitializeResult.model_validate(mcp_manifest.initialize_result(shipped, version))
    assert early.protocol_version == version
    assert (early.capabilities, early.server_info, early.instructions) == (capabilities, info, instructions)
    assert shipped["handshake_versions"] == list(HANDSHAKE_PROTOCOL_VERSIONS)


def test_the_shipped_file_is_what_the_generator_writes(shipped: dict[str, Any]) -> None:
    assert mcp_manifest.generate() == shipped, "stale: run python -m remindful.shells.mcp.manifest"


def test_an_unknown_version_gets_the_sdks_latest(shipped: dict[str, Any]) -> None:
    assert mcp_manifest.initialize_result(shipped, "1999-01-01")["protocolVersion"] == LATEST_HANDSHAKE_VERSION


def test_the_manifest_applies_only_to_the_sdk_and_pydantic_it_was_recorded_with(
    tmp_path: Path, shipped: dict[str, Any]
) -> None:
    path = tmp_path / "manifest.json"
    mcp_manifest.write(shipped, str(path))
    assert mcp_manifest.load(str(path)) == shipped
    for changed in ({"versions": {**shipped["versions"], "mcp": "2.99.0"}}, {"format": 1}):
        mcp_manifest.write({**shipped, **changed}, str(path))
        assert mcp_manifest.load(str(path)) is None, changed
    path.write_text("{not json")
    assert mcp_manifest.load(str(path)) is None
    assert mcp_manifest.load(str(tmp_path / "missing.json")) is None


def test_the_installed_versions_are_read_from_the_dist_info() -> None:
    assert mcp_manifest.installed_versions() == {
        name: importlib.metadata.version(name) for name in mcp_manifest.DISTRIBUTIONS
    }


INITIALIZE = {
    "protocolVersion": "2025-06-18",
    "capabilities": {"roots": {}},
    "clientInfo": {"name": "c", "version": "1"},
}


@pytest.mark.parametrize(
    "params",
    [
        None,
        {**INITIALIZE, "protocolVersion": 20250618},
        {**INITIALIZE, "capabilities": {"roots": True}},
        {**INITIALIZE, "clientInfo": {"name": "c"}},
        {**INITIALIZE, "clientInfo": {"name": "c", "version": "1", "icons": "bad"}},  # the SDK would refuse it
        {**INITIALIZE, "extra": 1},
        {**INITIALIZE, "_meta": []},
    ],
)
def test_an_unusual_initialize_is_left_to_the_sdk(params: Any) -> None:
    assert plain_initialize({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}) is None


def test_a_plain_initialize_is_answered_early() -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE}
    assert plain_initialize(message) == "2025-06-18"
    with_title = {**INITIALIZE, "clientInfo": {"name": "c", "version": "1", "title": "C"}, "_meta": {}}
    assert plain_initialize({**message, "params": with_title}) == "2025-06-18"
    json.dumps(message)
