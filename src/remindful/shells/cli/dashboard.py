"""``remindful dashboard``: the local web dashboard (:mod:`remindful.web`) on 127.0.0.1.

Starlette, Jinja2 and uvicorn are imported inside the command, so ``remindful --help`` stays light.
"""

from __future__ import annotations

import socket
import sys
from typing import Annotated

import typer

from remindful.shells.cli.app import _open, _run, app, err_console


@app.command()
def dashboard(
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0: any free port).")] = 8765,
    no_open: Annotated[bool, typer.Option("--no-open", help="Do not open a browser.")] = False,
) -> None:
    """Serve the web dashboard on http://127.0.0.1:PORT until Ctrl-C.

    It prints a URL that carries the store's bearer token once: opening it sets the token as an
    HttpOnly cookie and drops it from the address bar. Every request without it gets 401.
    """
    if not 0 <= port <= 65535:
        err_console.print(f"[red]error:[/red] Invalid '--port': expected 0..65535, got {port}")
        raise typer.Exit(2)
    import uvicorn

    from remindful.services.access import http_token
    from remindful.web import build_app

    with _open() as memory:
        token = _run(lambda: http_token(memory.path))
        _run(memory.check_enabled)
        listener = _bind(port)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/?token={token}"
        sys.stdout.write(f"remindful dashboard on {url}\n  (the token in this URL opens it once; Ctrl-C stops it)\n")
        sys.stdout.flush()
        if not no_open:
            import webbrowser

            webbrowser.open(url)
        config = uvicorn.Config(build_app(memory, token), log_level="warning", lifespan="off", server_header=False)
        uvicorn.Server(config).run(sockets=[listener])


def _bind(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:``port``, bound before the URL is printed (``--port 0``
    names the port the system chose). Exit 1 with one line if the port is taken."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
    except OSError as exc:
        listener.close()
        err_console.print(f"[red]error:[/red] cannot listen on 127.0.0.1:{port}: {exc.strerror}; try --port N")
        raise typer.Exit(1) from None
    listener.listen(128)
    return listener
