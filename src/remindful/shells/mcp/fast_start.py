"""The stdio front of ``remindful serve``: answer ``tools/list`` and its preludes before the SDK loads.

Why: importing the ``mcp`` SDK costs 1-2 s of CPU (it builds pydantic models for every protocol
revision), far above the 0.5 s cold-start budget. So the process starts with only the standard
library, reads stdin itself and loads the SDK in a thread. While the SDK loads, an
``initialize`` or ``tools/list`` request (handshake era), or a ``server/discover`` or
``tools/list`` request (2026-07-28 era, :mod:`remindful.shells.mcp.modern`: the era the SDK
client's default ``mode="auto"`` opens with) is answered from a *manifest* of the SDK's own answers:

1. the manifest shipped in the package (:mod:`remindful.shells.mcp.manifest`), recorded at build
   time and used only when the installed versions and tool sources are the ones it was recorded
   with — so the very first start after an install answers at once;
2. otherwise a per-user cache recorded by an earlier run of the same code (keyed by the Python
   version, every module of remindful and the SDK's files, per protocol version): a development
   tree with edited tools answers early from its second start.

Every message — including the ones answered early — is still handed to the SDK in order once it
is up, so the SDK's session state is exactly as if it had answered everything; its duplicate
answers are dropped (and checked: an answer that differs from the early one is logged and
recorded in the user cache, which then takes precedence). The connection's first request decides
its era, as it does for the SDK; only requests of that era are answered early, and only in their
plainest shape: an ``initialize`` the SDK surely accepts and a ``tools/list`` without parameters,
or a ``server/discover`` / ``tools/list`` carrying a plain envelope and nothing else (an envelope
version the SDK does not serve gets its -32022 error). Anything else goes to the SDK.

Standard streams: fd 0 and fd 1 are moved to private descriptors and replaced by /dev/null and
stderr, so a stray ``print`` or child process cannot corrupt the wire.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading

from remindful.shells.mcp import manifest as mcp_manifest
from remindful.shells.mcp import modern as mcp_modern

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: every import here delays the first answer
if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from typing import Any

EARLY_METHODS = ("initialize", "tools/list", "server/discover")
#: When stdin closes, requests already received are answered before the SDK is told (it cancels
#: whatever is still running at the end of its input); this bounds the wait.
DRAIN_TIMEOUT_S = 60.0


def manifest_path() -> str:
    """The per-user cache of recorded answers."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "remindful", "mcp-manifest.json")


def manifest_key() -> str:
    """Changes whenever the answers could: remindful, the SDK, or any tool module changed."""
    import importlib.util

    parts = [sys.version.split()[0]]
    # Every module of remindful (tool docstrings may come from anywhere in it): ~100 stats, ~1 ms.
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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


def plain_initialize(params: Any) -> str | None:
    """The requested protocol version if ``params`` is an initialize the SDK surely accepts (so
    an early success answer cannot contradict an SDK error), else None."""
    if not isinstance(params, dict) or not set(params) <= {"protocolVersion", "capabilities", "clientInfo", "_meta"}:
        return None
    version, capabilities, info = params.get("protocolVersion"), params.get("capabilities"), params.get("clientInfo")
    if not isinstance(version, str) or not isinstance(capabilities, dict) or not isinstance(info, dict):
        return None
    if not all(isinstance(v, dict) for v in capabilities.values()):
        return None
    if not isinstance(info.get("name"), str) or not isinstance(info.get("version"), str):
        return None
    if not isinstance(params.get("_meta", {}), dict):
        return None
    return version


class StdioFront:
    """Owns the wire; see the module docstring. ``run()`` returns when stdin closes."""

    def __init__(self, path: str | None = None, *, shipped: bool = True) -> None:
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
        self._answered: dict[str, Any] = {}  # request id answered early -> that message: drop the SDK's
        self._pending: dict[str, tuple[str, str]] = {}  # request id -> (method, protocol version)
        self._unanswered: dict[str, int] = {}  # request id -> requests with it handed to the SDK, not answered
        self._answered_all = threading.Condition(self._state_lock)
        self._version: str | None = None  # negotiated by initialize (handshake era)
        self._era: str | None = None  # decided by the first request: "legacy", "modern" or "unknown"
        self._shipped = mcp_manifest.load() if shipped else None
        self._key: str | None = None  # of the user cache: computed only when there is one (~1 ms)
        self._manifest = self._load_manifest()
        self._recorded = False

    # -- manifests ------------------------------------------------------------------------------

    def _load_manifest(self) -> dict[str, Any]:
        try:
            with open(manifest_path(), encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) and data.get("key") == self._cache_key() else {}

    def _cache_key(self) -> str:
        if self._key is None:
            self._key = manifest_key()
        return self._key

    def _lookup(self, method: str, version: str) -> dict[str, Any] | None:
        """The early answer, ``{"result": ...}`` or ``{"error": ...}``: the user cache's (recorded by
        this very code) or the shipped one. ``version``: the requested (initialize), negotiated
        (handshake tools/list) or envelope (2026 era) protocol version."""
        recorded = self._manifest.get(self._cache_method(method), {}).get(version)
        if recorded is not None:
            return {"result": recorded}
        if self._shipped is None:
            return None
        if self._era == "modern":
            return mcp_modern.answer(self._shipped, method, version)
        if method == "initialize":
            return {"result": mcp_manifest.initialize_answer(self._shipped, version)}
        tools = mcp_manifest.tools_answer(self._shipped, version)
        return None if tools is None else {"result": tools}

    def _cache_method(self, method: str) -> str:
        """The user cache's key for ``method``'s answers in this connection's era: a 2026-era
        ``tools/list`` at a handshake version is an error, not the handshake era's answer."""
        return method if self._era == "legacy" else f"{self._era} {method}"

    def _record(self, method: str, version: str, result: Any) -> None:
        answers = self._manifest.setdefault(self._cache_method(method), {})
        if answers.get(version) != result:
            answers[version] = result
            self._recorded = True

    def _save_manifest(self) -> None:
        if not self._recorded:
            return
        self._manifest["key"] = self._cache_key()
        target = manifest_path()
        try:
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            tmp = f"{target}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self._manifest, f)
            os.chmod(tmp, 0o600)
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
        if self._era is None:
            with self._state_lock:
                self._era = mcp_modern.opening_era(message)
        if isinstance(message, dict) and message.get("method") == "notifications/cancelled":
            params = message.get("params")
            if isinstance(params, dict) and "requestId" in params:  # the client expects no answer now
                rid = _id_key(params["requestId"])
                with self._state_lock:
                    if rid in self._unanswered:
                        self._settled(rid)
        if isinstance(message, dict) and "method" in message and "id" in message:
            rid = _id_key(message["id"])
            with self._state_lock:
                self._unanswered[rid] = self._unanswered.get(rid, 0) + 1
            if message["method"] in EARLY_METHODS:
                try:
                    self._early(message)
                except Exception as exc:  # a malformed request: the SDK answers it with the proper error
                    sys.stderr.write(f"remindful serve: not answered early ({type(exc).__name__}: {exc})\n")
        self._to_sdk.put(line)

    def _early(self, message: dict[str, Any]) -> None:
        method, request_id = message["method"], message["id"]
        rid = _id_key(request_id)
        with self._state_lock:
            version = self._early_version(message)
            self._pending[rid] = (method, version or "")
            if version is None or self._sdk_up.is_set():
                return
            answer = self._lookup(method, version)
            if answer is None:
                return
            if method == "initialize":
                self._version = answer["result"].get("protocolVersion")
            self._answered[rid] = {"jsonrpc": "2.0", "id": request_id, **answer}
        if "result" in answer:
            self._write(mcp_manifest.render(request_id, answer["result"]))
        else:
            self._write(mcp_manifest.render_error(request_id, answer["error"]))

    def _early_version(self, message: dict[str, Any]) -> str | None:
        """The protocol version to answer ``message`` at, or None if the SDK must answer it."""
        method, params = message["method"], message.get("params")
        if self._era == "modern":
            plain = mcp_modern.plain_request(message)
            return None if plain is None else plain[1]
        if self._era != "legacy" or message.get("jsonrpc") != "2.0":
            return None
        if not isinstance(message["id"], str) and type(message["id"]) is not int:
            return None  # a float, bool or null id: the SDK's own answer (or error) only
        if method == "initialize":
            return plain_initialize(params)  # None for an unusual initialize: the SDK validates it
        if method == "tools/list" and params in (None, {}):
            return self._version  # None before initialize: leave it to the SDK
        return None  # a cursor or other options, or server/discover in this era

    def _from_sdk(self, line: str) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if isinstance(message, dict) and "id" in message and "method" not in message:
            rid = _id_key(message["id"])
            with self._state_lock:
                self._settled(rid)
                method, version = self._pending.pop(rid, ("", ""))
                result = message.get("result")
                early = self._answered.get(rid)
                if early is not None and early != message:
                    sys.stderr.write(
                        f"remindful serve: the early {method} answer differed from the SDK's; recorded the "
                        "SDK's for next time (a stale manifest: python -m remindful.shells.mcp.manifest)\n"
                    )
                if method and isinstance(result, dict):
                    if method == "initialize":
                        self._version = result.get("protocolVersion")
                    elif self._era == "legacy":  # the negotiated version: its initialize answer came first
                        version = self._version or version
                    if version and (early is None or early != message):
                        self._record(method, version, result)
                    if method == "tools/list":
                        self._save_manifest()
                if rid in self._answered:
                    del self._answered[rid]
                    return
        self._write(line.rstrip("\n"))

    def _settled(self, rid: str) -> None:
        """One request with id ``rid`` was answered (the caller holds the state lock)."""
        left = self._unanswered.get(rid, 0) - 1
        if left > 0:
            self._unanswered[rid] = left
        else:
            self._unanswered.pop(rid, None)
            if not self._unanswered:
                self._answered_all.notify_all()

    # -- run ------------------------------------------------------------------------------------

    def run(self) -> None:
        sdk = threading.Thread(target=self._run_sdk, name="remindful-mcp-sdk", daemon=True)
        sdk.start()
        try:
            for raw in iter(self._wire_in.readline, b""):
                self._from_client(raw)
            # End of input: a client that sent requests and closed stdin (a script, or a client
            # shutting down) still gets their answers; the SDK would cancel them at its end of input.
            with self._state_lock:
                if not self._answered_all.wait_for(lambda: not self._unanswered, DRAIN_TIMEOUT_S):
                    sys.stderr.write(
                        f"remindful serve: input closed; {len(self._unanswered)} request(s) still unanswered "
                        f"after {DRAIN_TIMEOUT_S:.0f}s are cancelled\n"
                    )
        except KeyboardInterrupt:
            pass
        finally:
            self._to_sdk.put(None)
        sdk.join(timeout=30)

    def _run_sdk(self) -> None:
        try:
            import anyio

            from remindful.shells.mcp.server import LazyManager, build_server, start_daemon_later

            manager = LazyManager(self.path)
            server = build_server(manager)
            stop_daemon = start_daemon_later(manager)
            try:
                anyio.run(serve_lines, server, self._next_line, self._from_sdk)
            finally:
                stop_daemon()
                manager.close()
                self._save_manifest()
        except BaseException:
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)

    async def _next_line(self) -> str | None:
        import anyio.to_thread

        self._sdk_up.set()
        while True:
            line = await anyio.to_thread.run_sync(self._to_sdk.get, abandon_on_cancel=True)
            if line is None or self._sdk_takes(line):
                return line

    def _sdk_takes(self, line: str) -> bool:
        """Whether to hand ``line`` to the SDK: what it cannot read is answered here instead
        (:func:`remindful.shells.mcp.errors.unreadable`)."""
        from remindful.shells.mcp.errors import decoded, unreadable

        error = unreadable(line)
        if error is None:
            return True
        self._write(json.dumps(error, separators=(",", ":")))
        raw = decoded(line)
        if isinstance(raw, dict) and "method" in raw and "id" in raw:
            rid = _id_key(raw["id"])  # counted by _from_client: no other answer is coming
            with self._state_lock:
                self._settled(rid)
        return False


async def serve_lines(
    server: Any, next_line: Callable[[], Awaitable[str | None]], write_line: Callable[[str], None]
) -> None:
    """Run the SDK's stdio session of ``server`` over our own line source and sink: ``next_line()``
    returns what the client sent next (None at the end), ``write_line`` takes each answer line."""
    from mcp.server.stdio import stdio_server

    class Lines:  # the SDK's stdin: what the client sent, in order
        def __aiter__(self) -> Lines:
            return self

        async def __anext__(self) -> str:
            line = await next_line()
            if line is None:
                raise StopAsyncIteration
            return line

    class Out:  # the SDK's stdout
        async def write(self, text: str) -> None:
            for line in text.splitlines():
                if line.strip():
                    write_line(line)

        async def flush(self) -> None:
            return None

    lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async drives, with our streams
    async with stdio_server(stdin=Lines(), stdout=Out()) as (read, write):  # type: ignore[arg-type]
        await lowlevel.run(read, write, lowlevel.create_initialization_options())


def main(path: str | None = None) -> None:
    """Serve MCP over stdio with the early-answer front."""
    StdioFront(path).run()
