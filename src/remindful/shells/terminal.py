"""What a person at a terminal is told, on stderr, and only there: what ``remindful serve`` serves
and how to connect a client to it, and the embedding model's one-time preparation while it runs.

Nothing here writes to stdout (``serve``'s stdout is the MCP wire), and nothing is said when the
process is not on a terminal: an MCP client that starts ``serve`` gets its pipes untouched.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: serve's fast start imports this
if TYPE_CHECKING:
    import logging

#: The module that prepares the model once (:mod:`remindful.embed.quantize`): its INFO records
#: say when the preparation starts and ends.
_PREPARATION_LOGGER = "remindful.embed.quantize"


def on_terminal() -> bool:
    """Whether a person is at this process: stdin and stderr are terminals (a client that starts
    ``serve`` pipes its stdin)."""
    try:
        return sys.stdin is not None and sys.stdin.isatty() and sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def show_model_preparation() -> logging.Handler | None:
    """On a terminal (stderr), print the model preparation's start and end lines as they happen
    (``remindful: Preparing the int8 embedding model...``); the handler installed, or None when
    stderr is no terminal."""
    try:
        if sys.stderr is None or not sys.stderr.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    import logging

    logger = logging.getLogger(_PREPARATION_LOGGER)
    for handler in logger.handlers:
        if getattr(handler, "remindful_terminal", False):
            return handler
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("remindful: %(message)s"))
    handler.setLevel(logging.INFO)
    handler.remindful_terminal = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # said once, whatever the root logger's level (--verbose)
    return handler


def serve_banner(storage: str, version: str) -> str:
    """The lines ``remindful serve`` on a terminal prints on stderr before it serves."""
    return (
        f"remindful {version}: MCP server on stdio (every memory tool), for an MCP client that starts it.\n"
        f"  store: {storage}\n"
        "  connect a client: `remindful mcp-config` prints the configuration to paste into it\n"
        "  (`--client claude-code` prints the `claude mcp add` command)\n"
        "  Ctrl-C stops it.\n"
    )


def say_serving(path: str | None) -> None:
    """On a terminal, print :func:`serve_banner` for the store ``path`` (or the configured one) on
    stderr; nothing elsewhere. A configuration that does not load is named, not raised: the
    server's first tool call reports it in full."""
    if not on_terminal():
        return
    import remindful
    from remindful.config import load_settings

    try:
        storage = str(load_settings(path).storage_path)
    except Exception as exc:  # the first tool call reports it in full
        storage = f"(not usable: {exc})"
    sys.stderr.write(serve_banner(storage, remindful.__version__))
    sys.stderr.flush()
    show_model_preparation()


__all__ = ["on_terminal", "say_serving", "serve_banner", "show_model_preparation"]
