"""The ``remindful`` console script: dispatch ``remindful hook …`` before anything heavy loads.

A coding agent runs ``remindful hook <event>`` (or one of the specification's verbs, its aliases)
at every tool call, so that path must not import typer, rich, pydantic or numpy: it goes straight
to :mod:`remindful.shells.hook`. An MCP
client starts ``remindful serve`` for each session, so its plain forms skip typer too:
stdio goes to :mod:`remindful.shells.mcp.fast_start`, ``--transport http`` to
:func:`remindful.shells.mcp.server.serve_http`. Every other command (and ``remindful hook --help``)
goes to the typer app in :mod:`remindful.shells.cli.app`.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: the hook path must not import typing
if TYPE_CHECKING:
    from typing import Any

_GLOBAL_WITH_VALUE = ("--path", "-p")


#: The first words of the hook commands: ``hook EVENT`` and the specification's verbs, aliases of
#: it (:data:`remindful.shells.hook.ALIASES`; ``session`` only with ``start`` or ``end``).
_HOOK_VERBS = ("hook", "capture-memory", "inject-context")


def _is_hook(argv: list[str]) -> bool:
    words: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--help", "-h"):
            return False
        if arg in (*_GLOBAL_WITH_VALUE, "--source"):
            i += 2
            continue
        if not arg.startswith("-"):
            words.append(arg)
        i += 1
    if not words:
        return False
    return words[0] in _HOOK_VERBS or (words[0] == "session" and words[1:2] in (["start"], ["end"]))


def _http_options(argv: list[str]) -> dict[str, Any] | None:
    """``{"host": ..., "port": ...}`` for exactly ``serve --transport http`` with any of ``--port N``
    (1..65535) and ``--host H``, each once, else None (then typer parses the command and reports
    any error)."""
    if argv[:1] != ["serve"] or len(argv) % 2 == 0:
        return None
    options = dict(zip(argv[1::2], argv[2::2], strict=True))
    if len(options) != len(argv) // 2 or not set(options) <= {"--transport", "--port", "--host"}:
        return None
    port = options.get("--port", "8000")
    if options.get("--transport") != "http" or not port.isdigit() or not 1 <= int(port) <= 65535:
        return None
    host = options.get("--host", "127.0.0.1")
    return {"host": host, "port": int(port)} if host and not host.startswith("-") else None


def main() -> None:
    argv = sys.argv[1:]
    if _is_hook(argv):
        from remindful.shells.hook import main as hook_main

        hook_main(argv)
    if argv in (["serve"], ["serve", "--transport", "stdio"]):
        from remindful.shells.mcp.fast_start import main as serve_stdio

        serve_stdio()
        return
    http = _http_options(argv)
    if http is not None:
        _serve_http(**http)
        return
    from remindful.shells.cli import main as cli_main

    cli_main()


def _serve_http(host: str, port: int) -> None:
    import logging

    from remindful.errors import ConfigError, RemindfulError
    from remindful.shells.mcp.server import serve_http

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")  # as the CLI does
    try:
        serve_http(host=host, port=port)
    except RemindfulError as exc:  # an invalid config, an unusable token file: one line, as the CLI says it
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(2 if isinstance(exc, ConfigError) else 1) from None


if __name__ == "__main__":
    main()
