"""The MCP manifest cache: what the stdio front answers before the SDK loads is what the SDK answers,
whatever release of the SDK or pydantic is installed (issue 24: a pydantic patch release turned the
shipped manifest off and failed these tests on every fresh install)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
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
def generated() -> dict[str, Any]:
    return mcp_manifest.generate()


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
async def test_the_generated_manifest_is_what_the_sdk_server_answers(
    generated: dict[str, Any], tmp_path: Path, version: str
) -> None:
    """Through the SDK's own client: the tool list and the initialize result, at every protocol
    version the handshake accepts."""
    lazy = LazyManager(factory=lambda: open_fake(tmp_path / "store"))
    async with Client(build_server(lazy), mode="legacy") as client:
        listed = await client.list_tools()
        capabilities, info, instructions = client.server_capabilities, client.server_info, client.instructions
    assert ListToolsResult.model_validate(mcp_manifest.tools_result(generated)) == listed
    early = InitializeResult.model_validate(mcp_manifest.initialize_result(generated, version))
    assert early.protocol_version == version
    assert (early.capabilities, early.server_info, early.instructions) == (capabilities, info, instructions)
    assert generated["handshake_versions"] == list(HANDSHAKE_PROTOCOL_VERSIONS)


def test_an_unknown_version_gets_the_sdks_latest(generated: dict[str, Any]) -> None:
    assert mcp_manifest.initialize_result(generated, "1999-01-01")["protocolVersion"] == LATEST_HANDSHAKE_VERSION


def test_the_cache_applies_only_to_what_it_was_built_from(tmp_path: Path, generated: dict[str, Any]) -> None:
    path = str(tmp_path / "manifest.json")
    mcp_manifest.write(generated, path)
    assert mcp_manifest.load(path) == generated
    versions = generated["versions"]
    for changed in (
        {"versions": {**versions, "mcp": versions["mcp"] + ".post1"}},
        {"versions": {**versions, "pydantic": "2.99.0"}},
        {"source": [0, 0, 0]},
        {"format": 3},
        {"tools": "not a list"},
        {"handshake_versions": []},
    ):
        mcp_manifest.write({**generated, **changed}, path)
        assert mcp_manifest.load(path) is None, changed
    Path(path).write_text("{not json")
    assert mcp_manifest.load(path) is None
    assert mcp_manifest.load(str(tmp_path / "missing.json")) is None


def test_the_cache_lives_in_the_users_cache_directory(isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert Path(mcp_manifest.manifest_file()).parent == isolated_env / ".cache" / "remindful"
    monkeypatch.setenv("XDG_CACHE_HOME", str(isolated_env / "xdg"))
    assert Path(mcp_manifest.manifest_file()).parent == isolated_env / "xdg" / "remindful"


def test_the_cache_command_writes_and_checks(isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(isolated_env / "xdg"))
    assert mcp_manifest.main(["--check"]) == 1  # nothing cached yet
    assert mcp_manifest.main([]) == 0
    assert mcp_manifest.main(["--check"]) == 0
    assert os.stat(mcp_manifest.cache_dir()).st_mode & 0o777 == 0o700


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


# -- the real process: `remindful serve` over stdio -----------------------------------------------

HANDSHAKE = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]


def serve_env(tmp_path: Path, pythonpath: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMINDFUL_") and k != "PYTHONPATH"}
    env.update(
        HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "cache"), MEMORY_STORAGE_PATH=str(tmp_path / "s")
    )
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def handshake(env: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any], str]:
    """``remindful serve``'s initialize and tools/list results, and what it wrote to stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "remindful.shells.entry", "serve"],
        input=b"".join(json.dumps(m).encode() + b"\n" for m in HANDSHAKE),
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    answers = {m["id"]: m["result"] for m in map(json.loads, done.stdout.splitlines())}
    return answers[1], answers[2], done.stderr.decode()


def cached(env: dict[str, str]) -> dict[str, Any] | None:
    files = list(Path(env["XDG_CACHE_HOME"], "remindful").glob("mcp-manifest-*.json"))
    assert len(files) <= 1
    return json.loads(files[0].read_text()) if files else None


@pytest.mark.slow
def test_the_first_start_fills_the_cache_and_the_next_answers_alike(tmp_path: Path) -> None:
    """Both paths (the SDK on a cold cache, the cache on the next start) answer the same handshake."""
    env = serve_env(tmp_path)
    assert cached(env) is None
    from_sdk = handshake(env)
    manifest = cached(env)
    assert manifest is not None and manifest["versions"] == mcp_manifest.installed_versions()
    from_cache = handshake(env)
    assert from_cache[:2] == from_sdk[:2]
    assert cached(env) == manifest and "dropped" not in from_cache[2]


@pytest.mark.slow
def test_an_early_answer_unlike_the_sdks_drops_the_cache(tmp_path: Path) -> None:
    """The cache cannot tell every change of the code apart: the SDK's own answer checks it."""
    env = serve_env(tmp_path)
    handshake(env)
    manifest = cached(env)
    assert manifest is not None
    manifest["initialize"]["instructions"] = "stale"
    path = next(Path(env["XDG_CACHE_HOME"], "remindful").glob("mcp-manifest-*.json"))
    path.write_text(json.dumps(manifest))
    initialize, _, err = handshake(env)
    assert initialize["instructions"] == "stale"  # the early answer came from the cache
    assert "differed from the SDK's answer; dropped" in err
    assert cached(env) is None
    assert handshake(env)[0]["instructions"] != "stale"


def newer_patch(version: str) -> str:
    major, minor, patch = version.split(".")[:3]
    return f"{major}.{minor}.{int(''.join(c for c in patch if c.isdigit())) + 1}"


@pytest.mark.slow
def test_a_newer_patch_release_of_mcp_and_pydantic_still_answers_correctly(tmp_path: Path) -> None:
    """Issue 24: a newer patch release of the SDK and of pydantic than the one the cache was built
    with. The packages are the installed ones, seen through a folder first on the path whose
    .dist-info names the next patch version, as pip leaves it after an upgrade."""
    env = serve_env(tmp_path)
    reference = handshake(env)  # the cache, built with the installed versions
    old = cached(env)
    assert old is not None
    upgraded = tmp_path / "upgraded"
    upgraded.mkdir()
    bumped = {}
    for name in ("mcp", "pydantic"):
        module = __import__(name)
        (upgraded / name).symlink_to(Path(module.__file__).parent)
        dist = importlib.metadata.distribution(name)
        version = newer_patch(dist.version)
        bumped[name] = version
        info = upgraded / f"{name}-{version}.dist-info"
        shutil.copytree(Path(str(dist._path)), info)  # type: ignore[attr-defined]
        metadata = (info / "METADATA").read_text().replace(f"Version: {dist.version}\n", f"Version: {version}\n", 1)
        (info / "METADATA").write_text(metadata)
    env = {**env, "PYTHONPATH": str(upgraded)}
    upgraded_answers = handshake(env)
    assert upgraded_answers[:2] == reference[:2]  # the SDK answered, correctly
    new = cached(env)
    assert new is not None and new != old
    assert {name: new["versions"][name] for name in bumped} == bumped
    assert handshake(env)[:2] == reference[:2]  # and the next start answers early, alike
