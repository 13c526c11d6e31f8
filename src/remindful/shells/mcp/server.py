"""remindful's MCP server: every memory tool over stdio or streamable HTTP.

Built on the official ``mcp`` SDK (2.x, where FastMCP is ``MCPServer``). The server registers the
tool modules named in :data:`remindful.shells.mcp.tools.MODULES` that exist, in that order, each
through ``register(mcp, get_manager)``.

Start-up is cheap by design: the MemoryManager is created on the first tool call that needs it
(:class:`LazyManager`), and the embedding model and Chroma load only on the first operation that
embeds or searches, so ``initialize`` and ``tools/list`` answer without loading either.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from remindful.api import MemoryManager

log = logging.getLogger("remindful.mcp")

INSTRUCTIONS = (
    "Long-term memory. Before a task, memory_search for how similar tasks went; after a step that "
    "worked, failed or taught something, memory_store it (type action, workflow, knowledge, ...). "
    "Every tool answers {success: true, ...} or {success: false, error}."
)


class LazyManager:
    """Opens the MemoryManager on first use, once, from any thread.

    ``factory`` defaults to ``remindful.open(path)``. A failing factory (an invalid config) is
    retried on the next call, so fixing the config does not need a restart.
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
                        self._manager = self._factory()
                    else:
                        import remindful

                        self._manager = remindful.open(self._path)
        return self._manager

    @property
    def opened(self) -> bool:
        """Whether the manager has been created (tests check that listing tools does not)."""
        return self._manager is not None

    def close(self) -> None:
        with self._lock:
            if self._manager is not None:
                self._manager.close()
                self._manager = None


def start_daemon_later(manager: LazyManager) -> Callable[[], None]:
    """Run the capture daemon's roles (hook spool, watchers, retention schedule, local HTTP) for
    this server's store, in the background, ``daemon.serve_start_delay_s`` after the server is up,
    so that listing tools stays instant. Returns ``stop()``. Off with ``daemon.in_serve: false``."""
    from remindful.errors import RemindfulError

    stopping = threading.Event()
    handles: list[Any] = []

    def run() -> None:
        try:
            settings = manager().settings
            if not settings.daemon.in_serve or stopping.wait(settings.daemon.serve_start_delay_s):
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


def tool_modules() -> list[str]:
    """The names of the tool modules that exist, in registration order."""
    from remindful.shells.mcp.tools import MODULES

    return [name for name in MODULES if importlib.util.find_spec(f"remindful.shells.mcp.tools.{name}") is not None]


def build_server(
    get_manager: Callable[[], MemoryManager] | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
    name: str = "remindful",
) -> MCPServer:
    """The MCPServer with every available tool module registered.

    ``get_manager`` returns the MemoryManager (default: a :class:`LazyManager` over ``path``).
    """
    from mcp.server.mcpserver import MCPServer

    import remindful

    manager = get_manager or LazyManager(path)
    server: MCPServer = MCPServer(name, instructions=INSTRUCTIONS, version=remindful.__version__, log_level="WARNING")
    for module_name in tool_modules():
        module = importlib.import_module(f"remindful.shells.mcp.tools.{module_name}")
        module.register(server, manager)
    return server


def serve(
    transport: Literal["stdio", "http"] = "stdio",
    *,
    port: int = 8000,
    host: str = "127.0.0.1",
    path: str | os.PathLike[str] | None = None,
) -> None:
    """Run the server until the client disconnects (stdio) or the process is stopped (http).

    stdio runs behind :mod:`remindful.shells.mcp.fast_start` and HTTP behind
    :mod:`remindful.shells.mcp.http` (both answer ``initialize``/``tools/list`` while the SDK
    loads). HTTP serves the streamable HTTP transport at ``http://127.0.0.1:{port}/mcp``; it binds
    127.0.0.1 only because the tools read and delete private memories.
    """
    if transport == "stdio":
        from remindful.shells.mcp.fast_start import main as serve_stdio

        serve_stdio(None if path is None else str(path))
        return
    if host != "127.0.0.1":
        raise ValueError("the MCP server binds 127.0.0.1 only")
    from remindful.shells.mcp.http import main as serve_http

    serve_http(port, None if path is None else str(path))


def main(argv: list[str] | None = None) -> Any:
    """``python -m remindful.shells.mcp.server [--transport stdio|http] [--port N]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="remindful-mcp", description="remindful MCP server")
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--path", default=None)
    args = parser.parse_args(argv)
    serve(args.transport, port=args.port, path=args.path)


if __name__ == "__main__":
    main()
