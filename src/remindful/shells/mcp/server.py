"""remindful's MCP server: every memory tool, over stdio or streamable HTTP, on the official SDK.

Built on the ``mcp`` SDK 2.x (``MCPServer``, formerly FastMCP). :func:`build_server` registers the
tools of each module of :mod:`remindful.shells.mcp.tools`; the server's ``lifespan`` opens the
MemoryManager (cheap: the model and the vector index load on the first operation that needs
them, and the opening runs beside the server's start) and closes it when the server stops.

Transports, both the SDK's own:

- stdio: :mod:`remindful.shells.mcp.fast_start` answers ``initialize`` and ``tools/list`` from
  the manifest cache while the SDK imports, then ``MCPServer.run_stdio_async`` serves;
- HTTP (:func:`serve_http`): the SDK's streamable-HTTP app (with its Host/Origin checks) behind
  the gate of every HTTP surface (:class:`remindful.web.gate.BearerGate`), served by uvicorn at
  ``http://127.0.0.1:8000/mcp`` by default.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from remindful.shells.mcp.wire import sdk_misreads
from remindful.web.gate import BearerGate

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.transport_security import TransportSecuritySettings

    from remindful.api import MemoryManager

log = logging.getLogger("remindful.mcp")

INSTRUCTIONS = (
    "Long-term memory. Before a task, memory_search for how similar tasks went; after a step that "
    "worked, failed or taught something, memory_store it (type action, workflow, knowledge, ...). "
    "Every tool answers {success: true, ...}; a failed call is a tool error saying what to fix."
)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
DEFAULT_PORT = 8000


class LazyManager:
    """Opens the MemoryManager on first use, once, from any thread; :meth:`close` closes it (a
    later call opens it again).

    ``factory`` defaults to ``remindful.open(path)`` working in this process's directory's project
    (:func:`working_directory`). A failing factory (an invalid config) is
    retried on the next call, so fixing the config does not need a restart. Once open, what hooks and
    capture points spooled is stored (``MemoryManager.drain_spool``) before any caller gets the
    manager: the server, or the proxy, owns the store from then on.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, factory: Callable[[], MemoryManager] | None = None):
        self._path = path
        self._factory = factory
        self._manager: MemoryManager | None = None
        self._lock = threading.Lock()

    def __call__(self) -> MemoryManager:
        if self._manager is None:
            with self._lock:
                if self._manager is None:
                    if self._factory is not None:
                        manager = self._factory()
                    else:
                        import remindful

                        manager = remindful.open(self._path, project=working_directory())
                    _drain(manager)
                    self._manager = manager
        return self._manager

    @property
    def opened(self) -> bool:
        """Whether the manager is open."""
        return self._manager is not None

    def close(self) -> None:
        with self._lock:
            if self._manager is not None:
                self._manager.close()
                self._manager = None


def _drain(manager: MemoryManager) -> None:
    from remindful.errors import MemoryDisabledError

    try:
        manager.drain_spool()
    except MemoryDisabledError:
        pass  # each tool call says so
    except Exception as exc:  # a store that cannot open: each tool call reports it
        log.warning("spooled events not stored: %s", exc)


def working_directory() -> str | None:
    """The directory the server works in, which names its project (:meth:`MemoryManager.work_in`):
    an MCP client starts a server in the project it serves (Claude Code does), and
    ``scopes.project`` (``REMINDFUL_SCOPES__PROJECT``) names one whatever the directory. None when
    the directory is gone."""
    try:
        return os.getcwd()
    except OSError:
        return None


def open_for_serving(path: str | os.PathLike[str] | None = None) -> MemoryManager:
    """The manager ``remindful serve`` opens: as ``remindful.open(path)`` working in the project of
    :func:`working_directory` (its tools read that project's memories and the user's unless a call
    names a scope, and store there), except that until the vector index is open (the daemon's roles
    open it once the first call is answered), searches of a store small enough to score exactly
    (``search.exact_filter_max``) do not wait for it."""
    from remindful.api import MemoryManager
    from remindful.config import load_settings

    settings = load_settings(path)
    manager = MemoryManager(settings, exact_before_index=settings.search.exact_filter_max)
    manager.work_in(working_directory())
    return manager


def warm_up(manager: Callable[[], MemoryManager], *, model: bool = False) -> None:
    """Open the manager and, with ``model``, the store and the model; a failure is logged, and each
    tool call retries and reports it."""
    from remindful.errors import MemoryDisabledError, RemindfulError

    try:
        opened = manager()
        if model:
            opened.load_model()
    except MemoryDisabledError:
        pass  # each tool call says so
    except RemindfulError as exc:
        log.warning("memory not opened (each tool call retries and reports it): %s", exc)


#: Without a tool call, the daemon's roles start at the latest this long after the server.
DAEMON_START_LATEST_S = 10.0


def start_daemon_later(
    manager: Callable[[], MemoryManager], first_answer: threading.Event | None = None
) -> Callable[[], None]:
    """Run the capture daemon's roles (hook spool, watchers, retention schedule, local HTTP; their
    warm-up opens the vector index) for this server's store, in the background:
    ``daemon.serve_start_delay_s`` after ``first_answer`` is set (the first tool call answered: the
    roles' start would slow it down), or :data:`DAEMON_START_LATEST_S` after the start when no call
    comes; without ``first_answer``, or with a delay of 0, that delay after the start. Returns
    ``stop()``. Off with ``daemon.in_serve: false``."""
    from remindful.errors import RemindfulError

    stopping = threading.Event()
    handles: list[Any] = []

    def run() -> None:
        try:
            settings = manager().settings
            if not settings.daemon.in_serve:
                return
            delay = settings.daemon.serve_start_delay_s
            if first_answer is not None and delay > 0 and not _first_set(first_answer, stopping, DAEMON_START_LATEST_S):
                delay = 0  # no call came: start now
            if stopping.wait(delay):
                return
            from remindful.daemon import start_daemon_threads

            handles.append(start_daemon_threads(manager()))
        except RemindfulError as exc:  # memory disabled, bad config: the tools still answer
            log.warning("capture daemon not started: %s", exc)

    thread = threading.Thread(target=run, name="remindful-daemon-start", daemon=True)
    thread.start()

    def stop() -> None:
        stopping.set()
        thread.join(timeout=10)
        for handle in handles:
            handle.stop()

    return stop


def _first_set(event: threading.Event, stopping: threading.Event, timeout: float) -> bool:
    """Wait until ``event`` or ``stopping`` is set, at most ``timeout`` seconds; whether ``event``
    is. (A server whose client left before any tool call waited here for the whole
    :data:`DAEMON_START_LATEST_S` before it could exit: 10 s on every such stop.)"""
    deadline = time.monotonic() + timeout
    while not stopping.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if event.wait(min(left, 0.05)):
            return True
    return event.is_set()


def build_server(
    get_manager: Callable[[], MemoryManager] | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
    name: str = "remindful",
    daemon: bool = False,
    warm_model: bool = False,
) -> MCPServer:
    """The MCPServer with every memory tool and resource.

    ``get_manager`` opens the MemoryManager (default: ``remindful.open(path)``); a
    :class:`LazyManager` is used as given, any other callable is wrapped in one. The server's
    lifespan opens it and closes it at the end (so a passed LazyManager is closed too, and opens
    again if used later). A manager that cannot open (an invalid config) is retried at each tool
    call, which answers the error until then. ``daemon``: the lifespan also runs the capture
    daemon's roles (:func:`start_daemon_later`), as ``remindful serve`` does. ``warm_model``: the
    lifespan loads the model too (over stdio, where the handshake was answered before the SDK
    loaded; over HTTP the SDK answers it, and the model's load would delay that).
    """
    import anyio.to_thread
    from mcp.server.mcpserver import MCPServer

    import remindful
    from remindful.shells.mcp.tools import capture, core, learning, lifecycle
    from remindful.shells.mcp.tools.common import reject_unknown_arguments

    if isinstance(get_manager, LazyManager):
        holder = get_manager
    else:
        factory = get_manager or ((lambda: open_for_serving(path)) if daemon else None)
        holder = LazyManager(path, factory=factory)
    answered = threading.Event()  # the first tool call was answered

    def enabled_manager() -> MemoryManager:
        """The tools' manager: raises MemoryDisabledError, or the error that kept it from opening."""
        manager = holder()
        manager.check_enabled()
        return manager

    @asynccontextmanager
    async def lifespan(server: MCPServer[LazyManager]) -> AsyncIterator[LazyManager]:
        # Opened beside the server's start, not before it: importing the manager's modules is work
        # that listing tools does not need. A tool call waits for it (the holder's lock).
        opening = threading.Thread(
            target=warm_up, args=(holder,), kwargs={"model": warm_model}, name="remindful-open", daemon=True
        )
        opening.start()
        stop_daemon = start_daemon_later(holder, answered) if daemon else None
        try:
            yield holder
        finally:
            if stop_daemon is not None:
                await anyio.to_thread.run_sync(stop_daemon)
            await anyio.to_thread.run_sync(opening.join)
            await anyio.to_thread.run_sync(holder.close)

    server: MCPServer[LazyManager] = MCPServer(
        name, instructions=INSTRUCTIONS, version=remindful.__version__, log_level="WARNING", lifespan=lifespan
    )
    server.middleware.append(reject_unknown_arguments(server))

    async def note_first_answer(ctx: Any, call_next: Any) -> Any:
        try:
            return await call_next(ctx)
        finally:
            if ctx.method == "tools/call":
                answered.set()

    server.middleware.append(note_first_answer)
    core.register(server, enabled_manager)
    lifecycle.register(server, enabled_manager)
    learning.register(server, enabled_manager)
    capture.register(server, enabled_manager)
    return server


# -- HTTP -----------------------------------------------------------------------------------------


class ReadableBodies:
    """ASGI middleware: a POST body that is JSON but that the SDK's parser refuses with a
    misleading message (a lone surrogate: "unexpected end of hex escape"; nesting past its limit)
    gets 400 and a JSON-RPC error naming the field, the answer stdio gives
    (:func:`remindful.shells.mcp.wire.sdk_misreads`). Any other request goes through as it came."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        received: list[Any] = []
        while True:
            message = await receive()
            received.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        answer = sdk_misreads(b"".join(m.get("body", b"") for m in received if m["type"] == "http.request"))
        if answer is not None:
            body = json.dumps(answer).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 400, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return

        async def replay() -> Any:
            return received.pop(0) if received else await receive()

        await self.app(scope, replay, send)


def served_names(host: str) -> list[str]:
    """The names a client may use in ``Host`` for a server bound to ``host``: the loopback names,
    plus ``host`` itself, or for a wildcard bind (0.0.0.0, ::) this machine's names and addresses."""
    names = ["127.0.0.1", "localhost", "::1"]
    if host in ("0.0.0.0", "::", ""):
        try:
            hostname, aliases, addresses = socket.gethostbyname_ex(socket.gethostname())
            extra = [hostname, *aliases, *addresses, socket.getfqdn()]
        except OSError:
            extra = [socket.gethostname()]
    else:
        extra = [host]
    return list(dict.fromkeys([*names, *extra]))


def transport_security(host: str, port: int = DEFAULT_PORT) -> TransportSecuritySettings:
    """The SDK's DNS-rebinding protection for a server bound to ``host:port``: ``Host`` must be one
    of :func:`served_names` with this ``port``, else 421; an ``Origin``, if sent, must be one of
    them over http with this port, else 403 (a page of another server on the same host, whatever
    its port, is another origin). (The SDK turns it on by itself only for loopback binds.)

    Exact ``name:port`` entries, never the SDK's ``name:*`` wildcard: that allows any port, and it
    matches by prefix (``127.0.0.1:*`` also lets ``127.0.0.1:8000.evil`` through). The SDK compares
    exactly, so port 80 also allows the bare names a client sends without a port."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = [f"[{name}]" if ":" in name else name for name in served_names(host)]
    with_port = [f"{h}:{port}" for h in hosts] + (hosts if port == 80 else [])
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=with_port,
        allowed_origins=[f"http://{h}" for h in with_port],
    )


def http_app(server: MCPServer, token: str, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> Any:
    """The ASGI app :func:`serve_http` serves for a server bound to ``host:port``: the SDK's
    streamable-HTTP app (its Host/Origin checks: :func:`transport_security`) behind
    :class:`ReadableBodies` and the gate of every HTTP surface."""
    sdk_app = server.streamable_http_app(transport_security=transport_security(host, port), host=host)
    return BearerGate(ReadableBodies(sdk_app), token)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def serve_http(
    *, host: str = "127.0.0.1", port: int = DEFAULT_PORT, path: str | os.PathLike[str] | None = None
) -> None:
    """Serve MCP over streamable HTTP at ``http://host:port/mcp`` until SIGINT/SIGTERM (exit 0).

    Every request needs the bearer token of the store (:mod:`remindful.services.access`); the
    URL and where the token is are printed on stderr. ``host`` is 127.0.0.1 unless the user
    names another. Raises RemindfulError for an invalid config or an unusable token file.
    """
    import signal

    # Before the slow imports; uvicorn takes SIGTERM over while it runs, and raises it again
    # once it has shut down cleanly: this handler then exits with status 0.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    from remindful.runtime import exit_on_signals

    exit_on_signals()  # SIGHUP too (uvicorn handles SIGINT and SIGTERM only)
    import uvicorn

    from remindful.config import load_settings
    from remindful.services.access import http_token, token_source

    storage = load_settings(path).storage_path
    token = http_token(storage)
    app = http_app(build_server(path=path, daemon=True), token, host=host, port=port)
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    url = f"http://{f'[{shown}]' if ':' in shown else shown}:{port}/mcp"
    sys.stderr.write(
        f"remindful MCP server on {url}\n"
        f"  every request needs 'Authorization: Bearer <token>'; the token is in {token_source(storage)}\n"
    )
    sys.stderr.flush()
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", server_header=False)
    uvicorn.Server(config).run()


__all__ = [
    "INSTRUCTIONS",
    "BearerGate",
    "LazyManager",
    "build_server",
    "http_app",
    "open_for_serving",
    "serve_http",
    "start_daemon_later",
    "transport_security",
    "warm_up",
]
