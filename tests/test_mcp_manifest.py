"""The MCP manifest shipped in the package: current, applicable only when exact, byte for byte the SDK's answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from remindful.shells.mcp import manifest as mcp_manifest
from remindful.shells.mcp import modern as mcp_modern
from remindful.shells.mcp.fast_start import plain_initialize, serve_lines
from remindful.shells.mcp.server import LazyManager, build_server

REGENERATE = "run `python -m remindful.shells.mcp.manifest` and commit src/remindful/shells/mcp_manifest.json"


@pytest.fixture(scope="module")
def shipped() -> dict[str, Any]:
    data = mcp_manifest.load()
    assert data is not None, f"the shipped manifest does not apply to this installation: {REGENERATE}"
    return data


def test_the_shipped_manifest_is_what_the_server_answers_now() -> None:
    with open(mcp_manifest.manifest_file(), encoding="utf-8") as f:
        on_disk = json.load(f)
    assert mcp_manifest.generate() == on_disk, f"the shipped MCP manifest is stale: {REGENERATE}"


def sdk_lines(requests: list[dict[str, Any]]) -> list[str]:
    """The SDK's own answer lines to ``requests`` (one session, the real server)."""
    lines = [json.dumps(r, ensure_ascii=False) for r in requests]
    answers: list[str] = []
    expected = sum(1 for r in requests if "id" in r)

    async def next_line() -> str | None:
        if lines:
            return lines.pop(0)
        with anyio.fail_after(30):
            while len(answers) < expected:
                await anyio.sleep(0.01)
        return None

    anyio.run(serve_lines, build_server(LazyManager(factory=_no_store)), next_line, answers.append)
    return answers


def _no_store() -> Any:
    raise AssertionError("listing tools must not open the store")


@pytest.mark.parametrize(
    "requested", [*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS, "1999-01-01", "not a version"]
)
def test_early_answers_are_the_sdk_answers_byte_for_byte(shipped: dict[str, Any], requested: str) -> None:
    params = {"protocolVersion": requested, "capabilities": {"roots": {}}, "clientInfo": {"name": "c", "version": "1"}}
    requests = [
        {"jsonrpc": "2.0", "id": "init-ü", "method": "initialize", "params": params},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 7, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {}},
    ]
    assert plain_initialize(params) == requested
    init_line, *tools_lines = sdk_lines(requests)
    init = mcp_manifest.initialize_answer(shipped, requested)
    assert mcp_manifest.render("init-ü", init) == init_line
    tools = mcp_manifest.tools_answer(shipped, init["protocolVersion"])
    assert [mcp_manifest.render(i, tools) for i in (7, 8)] == tools_lines


def test_the_manifest_applies_only_to_the_exact_installation(tmp_path: Path, shipped: dict[str, Any]) -> None:
    def variant(**changes: Any) -> str:
        path = tmp_path / f"m{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps({**shipped, **changes}))
        return str(path)

    assert mcp_manifest.load(variant()) == shipped
    assert mcp_manifest.load(variant(environment={**shipped["environment"], "mcp": "2.99.0"})) is None
    assert mcp_manifest.load(variant(environment={**shipped["environment"], "python": "3.99"})) is None
    edited = {**shipped["sources"], "sha256": "0" * 64}  # a tool module changed since it was recorded
    assert mcp_manifest.load(variant(sources=edited)) is None
    fewer = {**shipped["sources"], "files": shipped["sources"]["files"][:-1]}  # a tool module was added
    assert mcp_manifest.load(variant(sources=fewer)) is None
    assert mcp_manifest.load(variant(format=0)) is None
    (tmp_path / "bad.json").write_text("{not json")
    assert mcp_manifest.load(str(tmp_path / "bad.json")) is None
    assert mcp_manifest.load(str(tmp_path / "missing.json")) is None


def test_the_environment_reads_the_installed_versions() -> None:
    import mcp_types
    import pydantic

    env = mcp_manifest.environment()
    assert env["pydantic"] == pydantic.VERSION
    assert env["mcp"] and env["mcp_types"] and env["pydantic_core"]
    assert mcp_types  # imported: the folder found is the one imported


@pytest.mark.parametrize(
    "params",
    [
        None,
        [],
        {"protocolVersion": "2025-06-18", "capabilities": {}},
        {"protocolVersion": 20250618, "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}},
        {"protocolVersion": "2025-06-18", "capabilities": {"roots": True}, "clientInfo": {"name": "c", "version": "1"}},
        {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c"}},
        {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}, "x": 1},
    ],
)
def test_an_unusual_initialize_is_left_to_the_sdk(params: Any) -> None:
    assert plain_initialize(params) is None


# -- the 2026-07-28 era (the SDK client's default mode="auto") ------------------------------------

SDK_CLIENT_INFO = {"name": "mcp", "version": "0.1.0"}  # what the SDK's Client stamps by default


@pytest.mark.parametrize(
    "version", [*MODERN_PROTOCOL_VERSIONS, "2099-01-01", HANDSHAKE_PROTOCOL_VERSIONS[-1], "2026-é"]
)
@pytest.mark.parametrize(
    ("info", "capabilities"),
    [(SDK_CLIENT_INFO, {}), (None, {"roots": {}}), ({"name": "c", "version": "1", "title": "C"}, {"sampling": {}})],
)
def test_early_modern_answers_are_the_sdk_answers_byte_for_byte(
    shipped: dict[str, Any], version: str, info: dict[str, str] | None, capabilities: dict[str, Any]
) -> None:
    """server/discover and tools/list in the 2026 envelope: the SDK's result at a version it serves,
    its -32022 error at any other (a handshake version included)."""
    params = {"_meta": mcp_modern.envelope(version, info, capabilities)}
    requests = [
        {"jsonrpc": "2.0", "id": "d-ü", "method": "server/discover", "params": params},
        {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": params},
    ]
    assert mcp_modern.opening_era(requests[0]) == "modern"
    early = []
    for request in requests:
        plain = mcp_modern.plain_request(request)
        assert plain == (request["method"], version)
        answer = mcp_modern.answer(shipped, *plain)
        assert answer is not None
        if "result" in answer:
            early.append(mcp_manifest.render(request["id"], answer["result"]))
        else:
            early.append(mcp_manifest.render_error(request["id"], answer["error"]))
    assert early == sdk_lines(requests)
    assert ("error" in json.loads(early[0])) == (version not in MODERN_PROTOCOL_VERSIONS)


def modern(method: str = "tools/list", **changes: Any) -> dict[str, Any]:
    params = {"_meta": mcp_modern.envelope(MODERN_PROTOCOL_VERSIONS[-1], SDK_CLIENT_INFO, {})}
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params, **changes}


def with_meta(**meta: Any) -> dict[str, Any]:
    request = modern()
    request["params"]["_meta"].update(meta)
    return request


@pytest.mark.parametrize(
    "request_",
    [
        modern("tools/call"),
        modern("initialize"),  # never the 2026 era, envelope or not
        modern(params={"_meta": modern()["params"]["_meta"], "cursor": "x"}),
        modern(id=1.5),
        modern(jsonrpc="1.0"),
        modern(extra=1),
        modern(params={"_meta": {mcp_modern.VERSION_KEY: MODERN_PROTOCOL_VERSIONS[-1]}}),  # no capabilities
        with_meta(**{mcp_modern.VERSION_KEY: 20260728}),
        with_meta(**{mcp_modern.INFO_KEY: {"name": "c", "version": "1", "icons": "bad"}}),  # the SDK refuses it
        with_meta(**{mcp_modern.INFO_KEY: {"name": 3, "version": "1"}}),
        with_meta(**{mcp_modern.CAPABILITIES_KEY: {"roots": True}}),
        with_meta(**{"io.modelcontextprotocol/logLevel": "debug"}),
    ],
)
def test_an_unusual_modern_request_is_left_to_the_sdk(request_: dict[str, Any]) -> None:
    assert mcp_modern.plain_request(request_) is None


def test_the_first_request_decides_the_era_as_in_the_sdk() -> None:
    assert mcp_modern.opening_era(modern("server/discover")) == "modern"
    assert mcp_modern.opening_era(modern("tools/call")) == "modern"
    assert mcp_modern.opening_era(modern("initialize")) == "legacy"
    assert mcp_modern.opening_era({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) == "legacy"
    assert mcp_modern.opening_era({"jsonrpc": "2.0", "method": "notifications/initialized"}) is None
    assert mcp_modern.opening_era({"jsonrpc": "2.0", "id": 1, "result": {}}) is None  # a response
    assert mcp_modern.opening_era(None) is None  # a line that is not JSON
    assert mcp_modern.opening_era(modern(id=None)) == "unknown"  # parsed who knows how: no early answers
