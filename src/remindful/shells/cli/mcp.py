"""``remindful serve`` (the MCP server) and ``remindful proxy`` (capture from another MCP server).

Both import the ``mcp`` SDK and remindful's store inside the command, so ``remindful --help``
stays light.
"""

from __future__ import annotations

from typing import Annotated

import typer

from remindful.shells.cli.app import _open, _run, _State, app, err_console


@app.command()
def serve(
    transport: Annotated[
        str, typer.Option("--transport", help="stdio (for an MCP client that starts the server) or http.")
    ] = "stdio",
    port: Annotated[int, typer.Option("--port", help="Port for --transport http.")] = 8000,
    host: Annotated[
        str,
        typer.Option("--host", help="Address for --transport http; anything but loopback is reachable from others."),
    ] = "127.0.0.1",
) -> None:
    """Run the MCP server with every memory tool (stdio by default).

    --transport http serves http://127.0.0.1:PORT/mcp; every request needs
    'Authorization: Bearer <token>', the token from $REMINDFUL_HTTP_TOKEN or <storage>/http_token.
    """
    if transport not in ("stdio", "http"):
        err_console.print(f"[red]error:[/red] Invalid '--transport': expected stdio or http, got {transport!r}")
        raise typer.Exit(2)
    if not 1 <= port <= 65535:
        err_console.print(f"[red]error:[/red] Invalid '--port': expected 1..65535, got {port}")
        raise typer.Exit(2)
    if not host.strip():
        err_console.print("[red]error:[/red] Invalid '--host': expected an address or a host name, got ''")
        raise typer.Exit(2)
    if transport == "stdio":
        from remindful.shells.mcp.fast_start import main as serve_stdio

        serve_stdio(_State.path)
        return
    from remindful.shells.mcp.server import serve_http

    serve_http(host=host, port=port, path=_State.path)


@app.command()
def prepare() -> None:
    """Prepare the embedding model once for this machine (a few seconds; run it at install), so that
    the first answer of `serve` and of every command does not wait for it."""
    import time

    from remindful.shells.terminal import show_model_preparation

    show_model_preparation()
    started = time.perf_counter()
    with _open(drain=False) as memory:
        _run(memory.load_model)
    err_console.print(f"the embedding model is ready ({time.perf_counter() - started:.1f} s)", highlight=False)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def proxy(
    command: Annotated[list[str], typer.Argument(help="The command that starts the MCP server to wrap (after --).")],
    session: Annotated[
        str | None, typer.Option("--session", "-s", help="Session of the captured calls (default: a new one).")
    ] = None,
    map_: Annotated[
        list[str] | None,
        typer.Option("--map", help="TOOL_PATTERN=TYPE: store matching tools' calls as TYPE (repeatable, fnmatch)."),
    ] = None,
) -> None:
    """Wrap another stdio MCP server: relay everything unchanged, remember its tool calls.

    Example: remindful proxy --map 'vision_*=screen' -- npx -y @modelcontextprotocol/server-everything
    """
    from remindful.model import MemoryType
    from remindful.services.ingest.calls import TypeMapping
    from remindful.services.ingest.proxy import run_proxy
    from remindful.services.ingest.spooled import CaptureSpool
    from remindful.shells.mcp.server import LazyManager

    patterns: dict[str, str] = {}
    for rule in map_ or []:
        pattern, _, memory_type = rule.partition("=")
        if not pattern or memory_type not in {t.value for t in MemoryType}:
            valid = ", ".join(t.value for t in MemoryType)
            err_console.print(
                f"[red]error:[/red] Invalid '--map' {rule!r}: expected TOOL_PATTERN=TYPE, TYPE one of {valid}"
            )
            raise typer.Exit(2)
        patterns[pattern] = memory_type
    manager = LazyManager(_State.path)
    spool = CaptureSpool.from_config(_State.path, session)  # durable captures from the first call
    try:
        code = run_proxy(
            command, lambda: manager().engine, mapping=TypeMapping.from_dict(patterns), session_id=session, spool=spool
        )
    finally:
        manager.close()
    raise typer.Exit(code)


@app.command()
def token() -> None:
    """Print the bearer token every HTTP surface of this store requires (creating it if needed)."""
    from remindful.services.access import http_token

    with _open() as memory:
        typer.echo(_run(lambda: http_token(memory.path)))


MCP_CLIENTS = ("json", "claude-code")


@app.command("mcp-config")
def mcp_config(
    client: Annotated[
        str, typer.Option("--client", help="json (Claude Desktop, .mcp.json, Cursor...) or claude-code (a command).")
    ] = "json",
) -> None:
    """Print the MCP client configuration for this machine: the absolute path of this installation's
    `remindful` (a venv or pipx install is not on a desktop app's PATH) and the storage path."""
    import json
    import shlex
    import sys
    from pathlib import Path

    from remindful.config import load_settings

    if client not in MCP_CLIENTS:
        err_console.print(f"[red]error:[/red] Invalid '--client': expected {' or '.join(MCP_CLIENTS)}, got {client!r}")
        raise typer.Exit(2)
    script = Path(sys.executable).parent / "remindful"
    # -P: the client starts the server in its project; nothing of that directory on sys.path.
    command = [str(script)] if script.exists() else [sys.executable, "-P", "-m", "remindful.shells.entry"]
    storage = str(_run(lambda: load_settings(_State.path)).storage_path)
    if client == "claude-code":
        words = ["claude", "mcp", "add", "remindful", "-e", f"MEMORY_STORAGE_PATH={storage}", "--", *command, "serve"]
        typer.echo(shlex.join(words))
        return
    server = {"command": command[0], "args": [*command[1:], "serve"], "env": {"MEMORY_STORAGE_PATH": storage}}
    typer.echo(json.dumps({"mcpServers": {"remindful": server}}, indent=2))
