"""The MCP manifest: the server's ``initialize`` and ``tools/list`` answers, cached from the SDK itself.

``remindful serve`` answers the handshake from this cache while the ``mcp`` SDK is still importing
(:mod:`remindful.shells.mcp.fast_start`). Nothing is shipped: the cache holds what the installed
SDK answered in an earlier run of this very installation, so it stays right by construction when a
dependency publishes a release:

- it lives in the user's cache directory (``$XDG_CACHE_HOME/remindful``, else ``~/.cache/remindful``),
  one file per installation (keyed by the package's folder);
- it records what it was built from: the versions of the SDK and of pydantic (which renders the
  tools' input schemas) and a stamp of remindful's own source files. :func:`load` ignores it when
  any of them differs, and the SDK then answers everything itself;
- the stdio front fills it from the SDK's own answers to a plain handshake (:func:`record`), and
  compares every early answer with the SDK's answer to the same request: a difference drops the file,
  so at most one run answers from a cache that the installed code no longer matches.

``python -m remindful.shells.mcp.manifest`` builds it ahead of time through the SDK's own client
(``--check`` exits 1 if the cache is missing or differs from what the server answers now).

Standard library only at import time: the generator imports the SDK inside :func:`generate`. So
are :func:`loads` and :func:`dumps`, the stdio front's JSON.
"""

from __future__ import annotations

import contextlib  # imported by the interpreter's start already
import os
import sys
import zlib

from remindful.errors import UntrustedPathError
from remindful.owned import private_dir, trusted_chain

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this runs before the SDK import, at every start
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

FORMAT = 4  # 4: cached per installation, with the source stamp; 3 was shipped in the package
#: Distributions whose versions change the answers (the SDK builds them with pydantic).
DISTRIBUTIONS = ("mcp", "mcp_types", "pydantic", "pydantic_core")
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # .../remindful


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "remindful")


def _trusted(target: str) -> bool:
    """Whether the cache file ``target`` and the directories above it (up to the home directory)
    are this user's alone; if not, one line on stderr says which and the fix: what the cache holds
    becomes the tool descriptions an agent reads."""
    try:
        trusted_chain(target, "MCP manifest cache")
    except UntrustedPathError as exc:
        sys.stderr.write(f"remindful: {exc}; not used\n")
        return False
    return True


def _no_link(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW)


def manifest_file() -> str:
    """This installation's cache file (two venvs sharing a home keep one each)."""
    return os.path.join(cache_dir(), f"mcp-manifest-{zlib.crc32(_PACKAGE.encode()):08x}.json")


def installed_versions() -> dict[str, str]:
    """The versions of :data:`DISTRIBUTIONS` found next to their packages on ``sys.path`` (from the
    ``.dist-info`` folder names: importlib.metadata would cost more than answering). A version that
    cannot be told is "" (and then no cache applies: see :func:`load`)."""
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


def source_stamp() -> list[int]:
    """``[files, total size, newest mtime_ns]`` of remindful's ``.py`` files: an editable install
    whose tools changed gets no stale answer."""
    files = size = newest = 0
    stack = [_PACKAGE]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        stack.append(entry.path)
                elif entry.name.endswith(".py"):
                    info = entry.stat()
                    files, size, newest = files + 1, size + info.st_size, max(newest, info.st_mtime_ns)
    return [files, size, newest]


def built_from() -> dict[str, Any]:
    """What a cached manifest must have been built from to answer for this process."""
    return {"format": FORMAT, "versions": installed_versions(), "source": source_stamp()}


def load(path: str | None = None) -> dict[str, Any] | None:
    """The cached manifest, or None if it is missing, unreadable, or built from another format,
    other versions of the SDK or pydantic, or other remindful sources than the installed ones."""
    target = path or manifest_file()
    if not _trusted(target):
        return None
    try:
        with open(target, "rb", opener=_no_link) as f:
            data = loads(f.read())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    expected = built_from()
    if "" in expected["versions"].values() or any(data.get(key) != value for key, value in expected.items()):
        return None
    if not isinstance(data.get("initialize"), dict) or not isinstance(data.get("tools"), list):
        return None
    if not isinstance(data.get("handshake_versions"), list) or not data["handshake_versions"]:
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


def record(initialize: dict[str, Any], tools: dict[str, Any]) -> dict[str, Any]:
    """The manifest of the SDK's answers to a plain ``initialize`` and a plain ``tools/list``
    (the SDK is imported by then: this reads which handshake versions it accepts)."""
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    answered = {key: value for key, value in initialize.items() if key != "protocolVersion"}
    return {
        **built_from(),
        "handshake_versions": list(HANDSHAKE_PROTOCOL_VERSIONS),
        "initialize": answered,
        "tools": tools["tools"],
    }


def forget(path: str | None = None) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path or manifest_file())


# -- JSON without the json package ----------------------------------------------------------------
# ``import json`` (re, enum and the regular expressions it compiles) costs more CPU than everything
# else the first answers need. The package's own C accelerator, ``_json``, does the same work
# without it; an interpreter that lacks it, or whose private API differs, imports the package.

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
    _sample = '{"a":[1,"\\u00e9"]}'
    if _scan(_sample, 0) != ({"a": [1, "é"]}, len(_sample)) or "".join(_encode({"a": "é"}, 0)) != '{"a":"é"}':
        raise ImportError("the private _json API answers differently")
except Exception:  # pragma: no cover - CPython has it; anything else takes the json package
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

    async def answers(storage: str) -> tuple[dict[str, Any], dict[str, Any]]:
        from mcp import Client

        from remindful.shells.mcp.server import build_server

        def dump(model: Any) -> Any:
            return model.model_dump(by_alias=True, mode="json", exclude_none=True)

        async with Client(build_server(path=storage), mode="legacy") as client:
            tools = dump(await client.list_tools())
            initialize: dict[str, Any] = {"capabilities": dump(client.server_capabilities)}
            if client.instructions is not None:
                initialize["instructions"] = client.instructions
            initialize["serverInfo"] = dump(client.server_info)
        return initialize, tools

    with tempfile.TemporaryDirectory() as storage:  # listing touches no store; the server opens one
        return record(*anyio.run(answers, storage))


def write(data: dict[str, Any], path: str | None = None) -> None:
    """Write the cache atomically (a concurrent start reads the old file or the new one, whole)."""
    target = path or manifest_file()
    folder = os.path.dirname(target)
    try:
        private_dir(folder, "MCP manifest cache")
    except UntrustedPathError as exc:
        sys.stderr.write(f"remindful: {exc}\n")
        return
    except OSError:
        return
    temporary = os.path.join(folder, f".{os.path.basename(target)}.{os.getpid()}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dumps(data))
        os.replace(temporary, target)
    except OSError:  # a cache: a read-only or full home only costs the next start its early answer
        forget(temporary)


def main(argv: list[str] | None = None) -> int:
    """``python -m remindful.shells.mcp.manifest [--check]``: build this installation's manifest
    cache now, or (``--check``) exit 1 if it is missing or differs from what the server answers."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m remindful.shells.mcp.manifest", description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if the cache is stale")
    args = parser.parse_args(argv)
    fresh = generate()
    if args.check:
        if load() != fresh:
            print(f"{manifest_file()} is missing or stale", file=sys.stderr)
            return 1
        return 0
    write(fresh)
    print(f"wrote {manifest_file()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
