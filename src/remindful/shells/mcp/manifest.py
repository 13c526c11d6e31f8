"""The shipped MCP manifest: the server's ``initialize`` and ``tools/list`` answers, recorded at build time.

``remindful serve`` answers the handshake from ``manifest.json`` (next to this module) while the
``mcp`` SDK is still importing (:mod:`remindful.shells.mcp.fast_start`). The file holds what the
real server answers through the SDK — its capabilities, instructions, server info and tool list,
and the protocol versions its handshake accepts — written by::

    python -m remindful.shells.mcp.manifest          # regenerate
    python -m remindful.shells.mcp.manifest --check  # exit 1 if it is stale

A test compares it with what the SDK server lists, so it cannot go stale unnoticed. It also
records the versions of the SDK and of pydantic (which renders the tools' input schemas):
:func:`load` ignores the file when another version of either is installed, and the SDK then
answers everything itself.

Standard library only at import time: the generator imports the SDK inside :func:`generate`. So
are :func:`loads` and :func:`dumps`, the stdio front's JSON.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this runs before the SDK import, at every start
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

FORMAT = 3  # 3: one tool list for every handshake version, no per-source digests
MANIFEST_NAME = "manifest.json"
#: Distributions whose versions change the answers (the SDK builds them with pydantic).
DISTRIBUTIONS = ("mcp", "pydantic")


def manifest_file() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), MANIFEST_NAME)


def installed_versions() -> dict[str, str]:
    """The versions of :data:`DISTRIBUTIONS` found next to their packages on ``sys.path`` (from the
    ``.dist-info`` folder names: importlib.metadata would cost more than answering)."""
    versions = {}
    listed: dict[str, list[str]] = {}
    for name in DISTRIBUTIONS:
        versions[name] = ""
        for folder in sys.path:
            folder = folder or "."
            if not os.path.isfile(os.path.join(folder, name, "__init__.py")):
                continue
            if folder not in listed:
                try:
                    listed[folder] = os.listdir(folder)
                except OSError:
                    listed[folder] = []
            prefix, suffix = f"{name}-", ".dist-info"
            found = [  # "pydantic-2.14.3", not "pydantic_core-..." nor a "pydantic-settings-...": a digit follows
                f[len(prefix) : -len(suffix)]
                for f in listed[folder]
                if f.startswith(prefix) and f.endswith(suffix) and f[len(prefix) : len(prefix) + 1].isdigit()
            ]
            if len(found) == 1:
                versions[name] = found[0]
            break  # the first folder holding the package is the one imported
    return versions


def load(path: str | None = None) -> dict[str, Any] | None:
    """The manifest, or None if it is missing, unreadable, of another format, or recorded with
    other versions of the SDK or pydantic than the installed ones."""
    try:
        with open(path or manifest_file(), "rb") as f:
            data = loads(f.read())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("versions") != installed_versions():
        return None
    return data


def initialize_result(data: dict[str, Any], requested: str) -> dict[str, Any]:
    """The ``initialize`` result for a client asking for protocol version ``requested``: that
    version if the handshake accepts it, else the SDK's latest (as the SDK negotiates)."""
    negotiated = requested if requested in data["handshake_versions"] else data["handshake_versions"][-1]
    return {**data["initialize"], "protocolVersion": negotiated}


def tools_result(data: dict[str, Any]) -> dict[str, Any]:
    """The ``tools/list`` result (the same under every handshake version)."""
    return {"tools": data["tools"]}


# -- JSON without the json package ----------------------------------------------------------------
# ``import json`` (re, enum and the regular expressions it compiles) costs more CPU than everything
# else the first answers need. The package's own C accelerator, ``_json``, does the same work
# without it; an interpreter that lacks it (PyPy) imports the package.

_SPACE = " \t\n\r"


class _Decoding:
    """What the C scanner reads from its context: ``json.loads``'s defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


def _unencodable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_scan: Callable[[str, int], tuple[Any, int]] | None
_encode: Callable[[Any, int], Any] | None
try:
    import _json

    _scan = _json.make_scanner(_Decoding())  # type: ignore[arg-type]
    _encode = _json.make_encoder(None, _unencodable, _json.encode_basestring, None, ":", ",", False, False, True)
except ImportError:  # pragma: no cover - CPython has it
    _scan = _encode = None


def loads(text: str | bytes) -> Any:
    """``json.loads(text)`` for UTF-8 input: ValueError (or RecursionError) unless it is one JSON value."""
    if _scan is not None:
        decoded = text if isinstance(text, str) else text.decode("utf-8")
        try:
            value, end = _scan(decoded, len(decoded) - len(decoded.lstrip(_SPACE)))
        except (StopIteration, SystemError):
            pass  # not JSON: the package says why (the C scanner finds its error class only once it is imported)
        else:
            if not decoded[end:].strip(_SPACE):
                return value
    import json

    return json.loads(text)


def dumps(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``."""
    if _encode is None:  # pragma: no cover
        import json

        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return "".join(_encode(value, 0))


# -- writing ----------------------------------------------------------------------------------------


def generate() -> dict[str, Any]:
    """Record the real server's answers through the SDK's own client (imports the SDK)."""
    import tempfile

    import anyio

    async def record(storage: str) -> dict[str, Any]:
        from mcp import Client
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

        from remindful.shells.mcp.server import build_server

        def dump(model: Any) -> Any:
            return model.model_dump(by_alias=True, mode="json", exclude_none=True)

        async with Client(build_server(path=storage), mode="legacy") as client:
            listed = dump(await client.list_tools())
            initialize: dict[str, Any] = {"capabilities": dump(client.server_capabilities)}
            if client.instructions is not None:
                initialize["instructions"] = client.instructions
            initialize["serverInfo"] = dump(client.server_info)
        return {
            "format": FORMAT,
            "versions": installed_versions(),
            "handshake_versions": list(HANDSHAKE_PROTOCOL_VERSIONS),
            "initialize": initialize,
            "tools": listed["tools"],
        }

    with tempfile.TemporaryDirectory() as storage:  # listing touches no store; the server opens one
        return anyio.run(record, storage)


def write(data: dict[str, Any], path: str | None = None) -> None:
    import json

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
            with open(manifest_file(), "rb") as f:
                shipped = loads(f.read())
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
