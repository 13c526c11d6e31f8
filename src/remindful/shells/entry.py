"""The ``remindful`` console script: dispatch ``remindful hook …`` before anything heavy loads.

A coding agent runs ``remindful hook <event>`` at every tool call, so that path must not import
typer, rich, pydantic or numpy: it goes straight to :mod:`remindful.hooks.fast`. Every other
command (and ``remindful hook --help``) goes to the typer app in :mod:`remindful.shells.cli`.
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


def main() -> None:
    argv = sys.argv[1:]
    if _is_hook(argv):
        from remindful.hooks.fast import main as hook_main

        hook_main(argv)
    if argv in (["serve"], ["serve", "--transport", "stdio"]):
        # An MCP client starts `remindful serve` on every session: skip typer (~0.4 s); see mcp_stdio.
        from remindful.shells.mcp_stdio import main as serve_stdio

        serve_stdio()
        return
    from remindful.shells.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
