"""``remindful serve`` (the MCP server) and ``remindful proxy`` (capture from another MCP server).

Both import the ``mcp`` SDK and remindful's store inside the command, so ``remindful --help``
stays light.
"""

from __future__ import annotations

from typing import Annotated

import typer

from remindful.shells.cli import _State, app, err_console


@app.command()
def serve(
    transport: Annotated[
        str, typer.Option("--transport", help="stdio (for an MCP client that starts the server) or http.")
    ] = "stdio",
    port: Annotated[int, typer.Option("--port", help="Port for --transport http (bound to 127.0.0.1).")] = 8000,
) -> None:
    """Run the MCP server with every memory tool (stdio by default; http serves /mcp)."""
    if transport not in ("stdio", "http"):
        err_console.print(f"[red]error:[/red] Invalid '--transport': expected stdio or http, got {transport!r}")
        raise typer.Exit(2)
    if not 1 <= port <= 65535:
        err_console.print(f"[red]error:[/red] Invalid '--port': expected 1..65535, got {port}")
        raise typer.Exit(2)
    from remindful.shells.mcp_server import serve as run

    if transport == "http":
        err_console.print(f"remindful MCP server on http://127.0.0.1:{port}/mcp", highlight=False)
    run("stdio" if transport == "stdio" else "http", port=port, path=_State.path)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def proxy(
    command: Annotated[list[str], typer.Argument(help="The command that starts the MCP server to wrap (after --).")],
) -> None:
    """Wrap another stdio MCP server: relay everything unchanged, remember its tool calls.

    Example: remindful proxy -- npx -y @modelcontextprotocol/server-everything
    """
    from remindful.capture.proxy import run_proxy
    from remindful.shells.mcp_server import LazyManager

    manager = LazyManager(_State.path)
    try:
        code = run_proxy(command, manager)
    finally:
        manager.close()
    raise typer.Exit(code)
