"""The ``remindful`` console script: dispatch ``remindful hook …`` before anything heavy loads.

A coding agent runs ``remindful hook <event>`` at every tool call, so that path must not import
typer, rich, pydantic or numpy: it goes straight to :mod:`remindful.services.hooks.fast`. Every other
command (and ``remindful hook --help``) goes to the typer app in :mod:`remindful.shells.cli.app`.
"""

from __future__ import annotations

import sys

_GLOBAL_WITH_VALUE = ("--path", "-p")


def _is_hook(argv: list[str]) -> bool:
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _GLOBAL_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("-"):
            if arg in ("--help", "-h"):
                return False
            i += 1
            continue
        return arg == "hook" and "--help" not in argv and "-h" not in argv
    return False


def _http_port(argv: list[str]) -> int | None:
    """The port of exactly ``serve --transport http [--port N]`` with a valid N, else None (then
    typer parses the command and reports any error)."""
    if argv[:3] != ["serve", "--transport", "http"]:
        return None
    rest = argv[3:]
    if not rest:
        return 8000
    if len(rest) == 2 and rest[0] == "--port" and rest[1].isdigit() and 1 <= int(rest[1]) <= 65535:
        return int(rest[1])
    return None


def main() -> None:
    argv = sys.argv[1:]
    if _is_hook(argv):
        from remindful.services.hooks.fast import main as hook_main

        hook_main(argv)
    if argv in (["serve"], ["serve", "--transport", "stdio"]):
        # An MCP client starts `remindful serve` on every session: skip typer (~0.4 s); see mcp_stdio.
        from remindful.shells.mcp.fast_start import main as serve_stdio

        serve_stdio()
        return
    port = _http_port(argv)
    if port is not None:  # the same for HTTP: see mcp_http
        import logging

        from remindful.shells.mcp.http import main as serve_http

        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")  # as the CLI does
        sys.stderr.write(f"remindful MCP server on http://127.0.0.1:{port}/mcp\n")
        serve_http(port)
        return
    from remindful.shells.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
