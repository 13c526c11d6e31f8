"""The stdio front of ``remindful serve``: answer ``initialize`` and ``tools/list`` before the SDK loads.

Why: importing the ``mcp`` SDK costs 1-2 s of CPU (it builds pydantic models for every protocol
revision), far above the 0.5 s cold-start budget. So the process starts with only the standard
library, reads stdin itself and loads the SDK in a thread. While the SDK loads, an
``initialize`` or ``tools/list`` request is answered from a *manifest*: the SDK's own answers to
those requests, recorded by an earlier run of the same code (keyed by the remindful and SDK
versions and the tool modules' files, per requested protocol version). Every message — including
the ones answered early — is still handed to the SDK in order once it is up, so the SDK's session
state is exactly as if it had answered everything; its duplicate answers are dropped.

Without a manifest (the first run, or after an upgrade) nothing is answered early: the SDK answers
everything, and its answers are recorded for next time. Anything not in the manifest, including
the 2026-07-28 per-request protocol, goes to the SDK.

Standard streams: fd 0 and fd 1 are moved to private descriptors and replaced by /dev/null and
stderr, so a stray ``print`` or child process cannot corrupt the wire.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

EARLY_METHODS = ("initialize", "tools/list")


def manifest_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "remindful" / "mcp-manifest.json"


def manifest_key() -> str:
    """Changes whenever the answers could: remindful, the SDK, or any tool module changed."""
    import importlib.util

    parts = [sys.version.split()[0]]
    # Every module of remindful (tool docstrings may come from anywhere in it): ~100 stats, ~1 ms.
    package = Path(__file__).resolve().parents[1]
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if not d.startswith("__"))
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(folder, name))
                parts.append(f"{os.path.relpath(folder, package)}/{name}:{st.st_size}:{st.st_mtime_ns}")
    for package_name in ("mcp", "mcp_types"):
        spec = importlib.util.find_spec(package_name)
        origin = spec.origin if spec and spec.origin else ""
        parts.append(f"{package_name}:{os.stat(origin).st_mtime_ns if origin else 0}")
    return "|".join(parts)


def _id_key(value: Any) -> str:
    return json.dumps(value)


class StdioFront:
    """Owns the wire; see the module docstring. ``run()`` returns when stdin closes."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self._wire_in = os.fdopen(os.dup(0), "rb", closefd=True)
        self._wire_out = os.fdopen(os.dup(1), "wb", closefd=True)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(2, 1)
        self._out_lock = threading.Lock()
        self._to_sdk: queue.Queue[str | None] = queue.Queue()
        self._sdk_up = threading.Event()
        self._state_lock = threading.Lock()
        self._answered: set[str] = set()  # request ids answered early: drop the SDK's answer
        self._pending: dict[str, tuple[str, str]] = {}  # request id -> (method, protocol version)
        self._version: str | None = None
        self._key = manifest_key()
        self._manifest = self._load_manifest()
        self._recorded = False

    # -- manifest -------------------------------------------------------------------------------

    def _load_manifest(self) -> dict[str, Any]:
        try:
            data = json.loads(manifest_path().read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) and data.get("key") == self._key else {}

    def _record(self, method: str, version: str, result: Any) -> None:
        answers = self._manifest.setdefault(method, {})
        if answers.get(version) != result:
            answers[version] = result
            self._recorded = True

    def _save_manifest(self) -> None:
        if not self._recorded:
            return
        self._manifest["key"] = self._key
        target = manifest_path()
        try:
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self._manifest))
            tmp.chmod(0o600)
            os.replace(tmp, target)
            self._recorded = False
        except OSError:
            pass  # only a cache: the next start is slower, nothing else

    # -- wire -----------------------------------------------------------------------------------

    def _write(self, line: str) -> None:
        with self._out_lock:
            self._wire_out.write(line.encode("utf-8") + b"\n")
            self._wire_out.flush()

    def _from_client(self, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if isinstance(message, dict) and message.get("method") in EARLY_METHODS and "id" in message:
            try:
                self._early(message)
            except Exception as exc:  # a malformed request: the SDK answers it with the proper error
                sys.stderr.write(f"remindful serve: not answered early ({type(exc).__name__}: {exc})\n")
        self._to_sdk.put(line)

    def _early(self, message: dict[str, Any]) -> None:
        method, rid = message["method"], _id_key(message["id"])
        with self._state_lock:
            if method == "initialize":
                init = message.get("params") or {}
                version = str(init.get("protocolVersion", "")) if isinstance(init, dict) else ""
            else:
                version = self._version or ""
            self._pending[rid] = (method, version)
            if self._sdk_up.is_set():
                return
            params = message.get("params")
            if method == "tools/list" and params is not None and params != {}:
                return  # a cursor or other options: leave it to the SDK
            result = self._manifest.get(method, {}).get(version)
            if result is None:
                return
            if method == "initialize":
                self._version = result.get("protocolVersion")
            self._answered.add(rid)
        self._write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}, separators=(",", ":")))

    def _from_sdk(self, line: str) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if isinstance(message, dict) and "id" in message and "method" not in message:
            rid = _id_key(message["id"])
            with self._state_lock:
                method, version = self._pending.pop(rid, ("", ""))
                if method and isinstance(message.get("result"), dict):
                    result = message["result"]
                    if method == "initialize":
                        self._version = result.get("protocolVersion")
                    else:  # the negotiated version: its initialize answer came first
                        version = self._version or version
                    self._record(method, version, result)
                    if method == "tools/list":
                        self._save_manifest()
                if rid in self._answered:
                    self._answered.discard(rid)
                    return
        self._write(line.rstrip("\n"))

    # -- run ------------------------------------------------------------------------------------

    def run(self) -> None:
        sdk = threading.Thread(target=self._run_sdk, name="remindful-mcp-sdk", daemon=True)
        sdk.start()
        try:
            for raw in iter(self._wire_in.readline, b""):
                self._from_client(raw)
        except KeyboardInterrupt:
            pass
        finally:
            self._to_sdk.put(None)
        sdk.join(timeout=30)

    def _run_sdk(self) -> None:
        try:
            import anyio

            from remindful.shells.mcp_server import LazyManager, build_server, start_daemon_later

            manager = LazyManager(self.path)
            server = build_server(manager)
            stop_daemon = start_daemon_later(manager)
            try:
                anyio.run(self._serve, server)
            finally:
                stop_daemon()
                manager.close()
                self._save_manifest()
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)

    async def _serve(self, server: Any) -> None:
        from mcp.server.stdio import stdio_server

        front = self

        class Lines:  # the SDK's stdin: what the client sent, in order
            def __aiter__(self) -> Lines:
                return self

            async def __anext__(self) -> str:
                import anyio.to_thread

                front._sdk_up.set()
                line = await anyio.to_thread.run_sync(front._to_sdk.get, abandon_on_cancel=True)
                if line is None:
                    raise StopAsyncIteration
                return line

        class Out:  # the SDK's stdout: dropped where already answered
            async def write(self, text: str) -> None:
                for line in text.splitlines():
                    if line.strip():
                        front._from_sdk(line)

            async def flush(self) -> None:
                return None

        lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async drives, with our streams
        async with stdio_server(stdin=Lines(), stdout=Out()) as (read, write):  # type: ignore[arg-type]
            await lowlevel.run(read, write, lowlevel.create_initialization_options())


def main(path: str | None = None) -> None:
    """Serve MCP over stdio with the early-answer front."""
    StdioFront(path).run()
