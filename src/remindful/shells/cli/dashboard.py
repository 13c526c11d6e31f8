"""``remindful dashboard``: the local web dashboard (:mod:`remindful.web`) on 127.0.0.1.

Starlette, Jinja2 and uvicorn are imported inside the command, so ``remindful --help`` stays light.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from remindful.shells.cli.app import _open, _run, app, err_console


@app.command()
def dashboard(
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0: any free port).")] = 8765,
    no_open: Annotated[bool, typer.Option("--no-open", help="Do not open a browser.")] = False,
) -> None:
    """Serve the web dashboard on http://127.0.0.1:PORT until Ctrl-C.

    It prints a sign-in link with a one-time code: it works once, within two minutes (press Enter
    for a new link), and signs that browser in to this run of the dashboard only; there
    http://127.0.0.1:PORT/ then leads to the dashboard (bookmark it). The browser never
    gets the store's bearer token. The browser it opens is given a private local page (0600, in a
    directory only you can enter) that holds another such link, never the link itself: a command
    line can be read by every local user (ps).
    """
    if not 0 <= port <= 65535:
        err_console.print(f"[red]error:[/red] Invalid '--port': expected 0..65535, got {port}")
        raise typer.Exit(2)
    import uvicorn

    from remindful.services.access import http_token
    from remindful.web import build_app
    from remindful.web.signin import CODE_TTL_S, LOGIN_PATH

    with _open() as memory:
        token = _run(lambda: http_token(memory.path))
        _run(memory.check_enabled)
        listener = _bind(port)
        base = f"http://127.0.0.1:{listener.getsockname()[1]}"
        gate = build_app(memory, token)
        assert gate.sign_ins is not None
        sign_ins = gate.sign_ins

        def link() -> str:
            return f"{base}{LOGIN_PATH}?code={sign_ins.new_code()}"

        interactive = sys.stdin is not None and sys.stdin.isatty()
        more = "press Enter for a new link; " if interactive else ""
        _say(f"remindful dashboard on {base}/\n  sign in: {link()}\n")
        _say(f"  (the link works once, within 2 minutes; {more}Ctrl-C stops the dashboard)\n")
        if interactive:
            threading.Thread(target=_new_links, args=(link,), name="remindful-links", daemon=True).start()
        launch = None
        if not no_open:
            import webbrowser

            launch = _launch_page(Path(memory.path), listener.getsockname()[1], link())
            if launch is not None:
                # Its code is dead after CODE_TTL_S: the page goes then, or when the dashboard stops.
                expiry = threading.Timer(CODE_TTL_S, launch.unlink, kwargs={"missing_ok": True})
                expiry.daemon = True
                expiry.start()
                webbrowser.open(launch.as_uri())
        # uvicorn raises SIGTERM again once it has stopped: exit through the finally below instead.
        signal.signal(signal.SIGTERM, _exit)
        signal.signal(signal.SIGHUP, _exit)
        config = uvicorn.Config(gate, log_level="warning", lifespan="off", server_header=False)
        try:
            uvicorn.Server(config).run(sockets=[listener])
        finally:
            if launch is not None:
                launch.unlink(missing_ok=True)


def _exit(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def _say(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _new_links(link: Callable[[], str]) -> None:
    """Print a fresh sign-in link each time the user presses Enter, until stdin ends."""
    for _line in sys.stdin:
        _say(f"  sign in: {link()}\n")


def _launch_page(storage: Path, port: int, url: str) -> Path | None:
    """A page that sends the browser to ``url``, in a directory that only this user can enter
    (``$XDG_RUNTIME_DIR``, in memory, when it is private; else the storage directory), mode 0600.

    The browser's command line then names this file, which other local users can see but not
    read; the one-time code it holds is spent by the browser within seconds, and the file is
    removed when the dashboard stops. None (with a warning: the printed link still works) when it
    cannot be written. A browser confined away from that directory (some snap packages) shows an
    error instead of the dashboard: the printed link is the way in then."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    folder = Path(runtime) if runtime and _private_dir(Path(runtime)) else storage
    page = folder / f"remindful-dashboard-{port}.html"
    html = (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
        f'<meta http-equiv="refresh" content="0;url={url}"><title>remindful</title></head>'
        f'<body><p><a href="{url}">Open the remindful dashboard</a></p></body></html>\n'
    )
    try:
        page.unlink(missing_ok=True)  # a page a killed run left behind
        fd = os.open(page, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(html)
    except OSError as exc:
        err_console.print(f"[yellow]warning:[/yellow] no browser opened ({exc}): open the sign-in link above")
        return None
    return page


def _private_dir(path: Path) -> bool:
    """Whether ``path`` is a real directory of this user that nobody else can enter."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


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
