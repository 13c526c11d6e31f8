"""The shipped MCP manifest: the SDK's own early answers, recorded at build time.

``remindful serve`` answers ``initialize`` and ``tools/list`` (handshake era), and
``server/discover`` and ``tools/list`` (2026-07-28 era, see :mod:`remindful.shells.mcp.modern`)
from ``manifest.json`` (next to this module) while the ``mcp`` SDK is still importing (see
:mod:`remindful.shells.mcp.fast_start` and :mod:`remindful.shells.mcp.http`), so even the very first
start after an install answers ``tools/list`` in tens of milliseconds.

The file is written by ``python -m remindful.shells.mcp.manifest`` from the real server: one SDK
session per protocol version the handshake accepts (plus one with an unknown version, which
records the SDK's fallback), each sending ``initialize`` then ``tools/list``; one per modern
version, sending ``server/discover`` then ``tools/list`` in that version's envelope; and one
with an unsupported version in the envelope, which records the SDK's -32022 error. A test
regenerates it and fails when the shipped file differs, so it cannot go stale unnoticed.

It is used only where it is exactly what the SDK would answer. :func:`load` returns None unless
the installed remindful, Python (major.minor), ``mcp``, ``mcp-types``, ``pydantic`` and
``pydantic-core`` are the versions it was recorded with, and the sources that build the tool list
(the MCP server module and every tool module: docstrings, signatures, annotations) hash as they
did. Checking costs about a millisecond: a directory listing and a few small files read.

Standard library only at import time: the generator imports the SDK inside :func:`generate`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this runs before the SDK import, at every start
if TYPE_CHECKING:
    from typing import Any

FORMAT = 2  # 2: the 2026-07-28 era's answers (server/discover, tools/list, -32022)
MANIFEST_NAME = "manifest.json"
#: Distributions whose versions can change the answers (the SDK builds them with pydantic).
DISTRIBUTIONS = ("mcp", "mcp_types", "pydantic", "pydantic_core")
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../remindful
_UNKNOWN_VERSION = "0000-00-00"  # asks the SDK which version it falls back to


def manifest_file() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), MANIFEST_NAME)


def render(request_id: Any, result: Any, *, ascii_only: bool = False) -> str:
    """The JSON-RPC answer line (without newline) exactly as the SDK writes it: compact, keys in
    the result's order, UTF-8 unescaped on stdio (the generator checks this against the SDK's
    bytes); ``ascii_only`` as its 2026-era HTTP entry writes it (``json.dumps`` defaults)."""
    message = {"jsonrpc": "2.0", "id": request_id, "result": result}
    return json.dumps(message, ensure_ascii=ascii_only, separators=(",", ":"))


def render_error(request_id: Any, error: Any, *, ascii_only: bool = False) -> str:
    """A JSON-RPC error line, as :func:`render` renders a result."""
    message = {"jsonrpc": "2.0", "id": request_id, "error": error}
    return json.dumps(message, ensure_ascii=ascii_only, separators=(",", ":"))


# -- what the answers depend on --------------------------------------------------------------------


def environment() -> dict[str, str]:
    """remindful's, Python's and the distributions' versions (from their ``.dist-info`` folders:
    importlib.metadata would cost ~100 ms)."""
    import remindful

    env = {"remindful": remindful.__version__, "python": "{}.{}".format(*sys.version_info[:2])}
    listed: dict[str, list[str]] = {}
    for name in DISTRIBUTIONS:
        env[name] = ""
        for folder in sys.path:
            if not os.path.isdir(os.path.join(folder, name)):
                continue
            if folder not in listed:
                try:
                    listed[folder] = os.listdir(folder)
                except OSError:
                    listed[folder] = []
            prefix = name + "-"
            suffix = ".dist-info"
            found = [
                f[len(prefix) : -len(suffix)]
                for f in listed[folder]
                if f.startswith(prefix) and f.endswith(suffix) and f[len(prefix) : len(prefix) + 1].isdigit()
            ]
            if len(found) == 1:  # "pydantic-2.14.3", not "pydantic-settings-..." (no digit after the dash)
                env[name] = found[0]
            break  # the first folder holding the package is the one imported
    return env


def source_files() -> list[str]:
    """The files that build the tool list, relative to the package: the server module and every
    module of ``shells/mcp_tools`` (a new tool module changes this list too)."""
    tools = os.path.join(_PACKAGE, "shells", "mcp", "tools")
    names = sorted(n for n in os.listdir(tools) if n.endswith(".py"))
    return ["shells/mcp/server.py", *(f"shells/mcp/tools/{n}" for n in names)]


def sources_digest(files: list[str]) -> str:
    digest = hashlib.sha256()
    for rel in files:
        digest.update(rel.encode() + b"\0")
        with open(os.path.join(_PACKAGE, *rel.split("/")), "rb") as f:
            digest.update(f.read())
        digest.update(b"\0")
    return digest.hexdigest()


# -- reading ----------------------------------------------------------------------------------------


def load(path: str | None = None) -> dict[str, Any] | None:
    """The shipped manifest if it holds exactly this installation's answers, else None."""
    try:
        with open(path or manifest_file(), encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("environment") != environment():
            return None
        files = source_files()
        if data.get("sources") != {"files": files, "sha256": sources_digest(files)}:
            return None
    except (OSError, ValueError):
        return None
    return data


def initialize_answer(data: dict[str, Any], requested: str) -> dict[str, Any]:
    """The ``initialize`` result for a client asking for ``requested``: that version if the
    handshake accepts it, else the SDK's fallback, as the SDK negotiates."""
    negotiated = requested if requested in data["handshake_versions"] else data["fallback_version"]
    return data["initialize"][negotiated]


def tools_answer(data: dict[str, Any], negotiated: str) -> dict[str, Any] | None:
    """The ``tools/list`` result under a negotiated version (None if not recorded)."""
    answer = data["tools/list"].get(negotiated)
    if isinstance(answer, str):  # the same answer as under that version
        answer = data["tools/list"][answer]
    return answer


def discover_answer(data: dict[str, Any], version: str) -> dict[str, Any] | None:
    """The ``server/discover`` result at a modern ``version`` (None if not recorded)."""
    answer = data["server/discover"].get(version)
    return answer if isinstance(answer, dict) else None


def unsupported_error(data: dict[str, Any], requested: str) -> dict[str, Any]:
    """The SDK's -32022 error for a 2026-era request enveloped at a version it does not serve."""
    error = json.loads(json.dumps(data["unsupported_version"]))
    error["data"]["requested"] = requested
    return error


# -- writing ----------------------------------------------------------------------------------------


def generate() -> dict[str, Any]:
    """Record the real server's answers (imports the SDK; ~2 s)."""
    import anyio
    from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

    from remindful.shells.mcp import modern as mcp_modern
    from remindful.shells.mcp.server import LazyManager, build_server

    if (PROTOCOL_VERSION_META_KEY, CLIENT_INFO_META_KEY, CLIENT_CAPABILITIES_META_KEY) != mcp_modern.ENVELOPE_KEYS:
        raise RuntimeError("the SDK's envelope keys changed: update remindful.shells.mcp.modern")

    def no_store() -> Any:
        raise RuntimeError("the manifest must not depend on the store")

    def session(requests: list[dict[str, Any]]) -> dict[Any, Any]:
        return anyio.run(_session, build_server(LazyManager(factory=no_store)), requests)

    answers: dict[str, dict[str, Any]] = {"initialize": {}, "tools/list": {}, "server/discover": {}}

    def keep_tools(version: str, tools: dict[str, Any]) -> None:
        same = next((v for v, t in answers["tools/list"].items() if t == tools), None)
        answers["tools/list"][version] = same or tools

    fallback = ""
    for requested in (*HANDSHAKE_PROTOCOL_VERSIONS, _UNKNOWN_VERSION):
        got = session(_legacy_requests(requested))
        init, tools = _result(got[1]), _result(got["tools-é"])
        negotiated = init["protocolVersion"]
        if requested == _UNKNOWN_VERSION:
            fallback = negotiated
            continue
        answers["initialize"][negotiated] = init
        keep_tools(negotiated, tools)
    for version in MODERN_PROTOCOL_VERSIONS:
        got = session(_modern_requests(version))
        answers["server/discover"][version] = _result(got[1])
        keep_tools(version, _result(got["tools-é"]))
    unsupported: dict[str, Any] = {}
    for requested in (_UNKNOWN_VERSION, "9999-99-99é"):  # twice: only "requested" may differ
        got = session(_modern_requests(requested))
        errors = [got[1].get("error"), got["tools-é"].get("error")]
        for error in errors:
            if not isinstance(error, dict) or error.get("code") != -32022 or error["data"]["requested"] != requested:
                raise RuntimeError(f"the SDK did not refuse an unsupported version as expected: {errors}")
            error["data"]["requested"] = ""
            if unsupported and error != unsupported:
                raise RuntimeError("the SDK's -32022 error depends on more than the requested version")
            unsupported = error
    files = source_files()
    return {
        "format": FORMAT,
        "environment": environment(),
        "sources": {"files": files, "sha256": sources_digest(files)},
        "handshake_versions": list(HANDSHAKE_PROTOCOL_VERSIONS),
        "fallback_version": fallback,
        "modern_versions": list(MODERN_PROTOCOL_VERSIONS),
        "unsupported_version": unsupported,
        **answers,
    }


def _legacy_requests(version: str) -> list[dict[str, Any]]:
    client_info = {"name": "remindful-manifest", "version": "0"}
    return [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": client_info},
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "tools-é", "method": "tools/list"},  # a non-ASCII id checks the escaping
    ]


def _modern_requests(version: str) -> list[dict[str, Any]]:
    from remindful.shells.mcp import modern as mcp_modern

    params = {"_meta": mcp_modern.envelope(version, {"name": "remindful-manifest", "version": "0"}, {})}
    return [
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": params},
        {"jsonrpc": "2.0", "id": "tools-é", "method": "tools/list", "params": params},
    ]


def _result(message: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(message.get("result"), dict):
        raise RuntimeError(f"the SDK did not answer as expected: {json.dumps(message)[:500]}")
    return message["result"]


async def _session(server: Any, requests: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """One SDK stdio session over in-memory lines: each answer message by request id, checked to
    be reproducible byte for byte by :func:`render` / :func:`render_error`."""
    from remindful.shells.mcp.fast_start import serve_lines

    pending = [json.dumps(r) for r in requests]
    expected = sum(1 for r in requests if "id" in r)
    answers: dict[Any, dict[str, Any]] = {}

    def take(line: str) -> None:
        message = json.loads(line)
        if "result" in message:
            again = render(message["id"], message["result"])
        else:
            again = render_error(message.get("id"), message.get("error"))
        if again != line:
            raise RuntimeError(f"the SDK's answer is not reproducible byte for byte: update render(): {line[:300]}")
        answers[message["id"]] = message

    async def next_line() -> str | None:
        import anyio

        if pending:
            return pending.pop(0)
        with anyio.fail_after(60):
            while len(answers) < expected:  # keep the session open until every answer is out
                await anyio.sleep(0.01)
        return None

    await serve_lines(server, next_line, take)
    return answers


def write(data: dict[str, Any], path: str | None = None) -> None:
    with open(path or manifest_file(), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main(argv: list[str] | None = None) -> int:
    """``python -m remindful.shells.mcp.manifest [--check]``: regenerate the shipped manifest, or
    (``--check``) exit 1 if it differs from what the server answers now."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m remindful.shells.mcp.manifest", description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if the file is stale")
    args = parser.parse_args(argv)
    fresh = generate()
    if args.check:
        try:
            with open(manifest_file(), encoding="utf-8") as f:
                shipped = json.load(f)
        except (OSError, ValueError):
            shipped = None
        if shipped != fresh:
            print(f"{manifest_file()} is stale: run python -m remindful.shells.mcp.manifest", file=sys.stderr)
            return 1
        return 0
    write(fresh)
    print(f"wrote {manifest_file()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
