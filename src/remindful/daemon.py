"""The capture daemon: owns a store while it runs (``remindful daemon``, and ``remindful serve``).

Roles, run by the one process holding ``<storage>/daemon.lock`` (others wait on standby and take
over within :data:`STANDBY_RETRY_S` if the owner dies):

- drain the hook spool every ``daemon.poll_interval_ms`` (100 ms), so an event is stored and
  searchable well within 1 s of its hook returning;
- index and watch the Markdown files of ``auto_capture.watch_dirs`` (and any given directories);
- run the retention schedule (:mod:`remindful.services.policy.scheduler`) when it is installed, and at a
  clean stop honour ``privacy.delete_on_exit`` (:func:`remindful.services.sessions.delete_on_exit`);
- answer local requests on ``http://127.0.0.1:PORT`` (uvicorn, in a thread): ``POST /context``
  (context injection for hooks: ``{"query", "budget_tokens", "exclude", "cwd"}`` → ``{"context"}``,
  searched in the scopes seen from ``cwd``: its project's and the user's),
  ``GET /health``, and the dashboard (:mod:`remindful.web`) on every other path. Every request
  passes the gate of every HTTP surface (:class:`remindful.web.gate.BearerGate`: the store's bearer
  token, or the dashboard's cookie; Host and Origin on loopback); an error answers the status of
  :func:`remindful.errors.http_status`. Port and pid are in ``<storage>/daemon.json``, mode 0600,
  removed at a clean stop.

    handle = start_daemon_threads(manager)   # returns at once; threads are daemonic
    ...
    handle.stop()

The daemon sits above the API: it takes a MemoryManager and gets every part it runs from it (the
spool drain, the file watcher, the cleanup scheduler, context), built by the manager, the one
composition root.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remindful.errors import ValidationError, http_status
from remindful.runtime import DAEMON_FILE
from remindful.services.access import http_token

if TYPE_CHECKING:
    import uvicorn
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    from remindful.api import MemoryManager
    from remindful.services.ingest.watcher import MarkdownWatcher
    from remindful.services.policy.scheduler import CleanupScheduler

log = logging.getLogger("remindful.daemon")

LOCK_FILE = "daemon.lock"
STANDBY_RETRY_S = 2.0
MAX_BODY = 1_000_000


class DaemonHandle:
    """The running daemon roles of one process; :meth:`stop` ends them all."""

    def __init__(self, manager: MemoryManager, watch_dirs: Sequence[str | os.PathLike[str]] | None, http: bool) -> None:
        self.manager = manager
        self.path = Path(manager.path)
        self.stop_event = threading.Event()
        self.owner = threading.Event()
        self.http = http
        self.watch_dirs = [*manager.settings.auto_capture.watch_dirs, *(watch_dirs or [])]
        self.port: int | None = None
        self.token = ""  # the store's bearer token, read when the HTTP role starts
        self.drained = 0
        self._lock_fd: int | None = None
        self._threads: list[threading.Thread] = []
        self._server: uvicorn.Server | None = None
        self._scheduler: CleanupScheduler | None = None
        self.watcher: MarkdownWatcher | None = None

    # -- start and stop -------------------------------------------------------------------------

    def start(self) -> DaemonHandle:
        """Validate the watch directories (a missing one raises now), then start the roles."""
        if self.watch_dirs:
            self.watcher = self.manager.markdown_watcher(self.watch_dirs)
        self.manager.check_enabled()
        if not self._try_lock():
            log.info("another process owns %s; standing by", self.path)
            self._spawn(self._standby, "remindful-standby")
        else:
            self._become_owner()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """End every role (idempotent); the owner removes daemon.json and releases the lock."""
        if self.stop_event.is_set():
            return
        self.stop_event.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._scheduler is not None:
            with contextlib.suppress(Exception):
                self._scheduler.stop()
        for thread in self._threads:
            thread.join(timeout)
        if self.owner.is_set():
            self._delete_on_exit()
            with contextlib.suppress(OSError):
                info = json.loads((self.path / DAEMON_FILE).read_text())
                if info.get("pid") == os.getpid():
                    (self.path / DAEMON_FILE).unlink()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _delete_on_exit(self) -> None:
        """``privacy.delete_on_exit``: this process's session goes with it (remindful.services.sessions)."""
        try:
            self.manager.delete_on_exit()
        except Exception as exc:
            log.error("privacy.delete_on_exit failed: %s", exc)

    def _try_lock(self) -> bool:
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def _standby(self) -> None:
        while not self.stop_event.wait(STANDBY_RETRY_S):
            if self._try_lock():
                log.info("taking over the daemon roles for %s", self.path)
                self._become_owner()
                return

    def _become_owner(self) -> None:
        self.owner.set()
        self._spawn(self._warm_up, "remindful-warmup")
        if self.http:
            self._start_http()
        self._spawn(self._drain_loop, "remindful-drain")
        watcher = self.watcher
        if watcher is not None:
            self._spawn(lambda: watcher.run(self.stop_event), "remindful-watch")
        self._start_retention()

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- roles ----------------------------------------------------------------------------------

    def _warm_up(self) -> None:
        """Load the model and open the index now, so the first context request (a hook with a
        2 s timeout) does not pay for them."""
        try:
            self.manager.warm_up()
        except Exception as exc:
            log.warning("warm-up failed (the first request will retry): %s", exc)

    def _drain_loop(self) -> None:
        interval = self.manager.settings.daemon.poll_interval_ms / 1000
        while not self.stop_event.is_set():
            try:
                self.drained += self.manager.drain_spool()
            except Exception as exc:  # keep draining later; the rows stay in the spool
                log.error("draining the hook spool failed: %s", exc)
                self.stop_event.wait(1.0)
            self.stop_event.wait(interval)

    def _start_retention(self) -> None:
        from remindful.services.policy.scheduler import start_scheduler

        try:
            self._scheduler = start_scheduler(self.manager.cleanup_scheduler())
        except Exception as exc:
            log.error("retention schedule not started: %s", exc)

    def _start_http(self) -> None:
        import uvicorn

        try:
            self.token = http_token(self.path)
        except Exception as exc:  # StorageError: a token file other users can read, a read-only disk
            log.error("the daemon's HTTP API is off: %s", exc)
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        port = self.manager.settings.daemon.port
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            sock.close()
            log.error("the daemon's HTTP API is off: cannot listen on 127.0.0.1:%d: %s", port, exc)
            return
        sock.listen(128)  # connections wait in the backlog until uvicorn has started: no refusals meanwhile
        self.port = int(sock.getsockname()[1])
        config = uvicorn.Config(self.app(), log_level="warning", access_log=False, lifespan="off", server_header=False)
        self._server = server = uvicorn.Server(config)
        self._spawn(lambda: server.run(sockets=[sock]), "remindful-http")
        info = {"pid": os.getpid(), "port": self.port, "started_at": time.time()}
        tmp = self.path / f".{DAEMON_FILE}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)
        os.replace(tmp, self.path / DAEMON_FILE)
        log.info("daemon listening on 127.0.0.1:%d", self.port)

    def app(self) -> Any:
        """The daemon's ASGI app: the hooks' API (``/health``, ``/context``) and the dashboard, behind
        the one gate."""
        from starlette.applications import Starlette
        from starlette.routing import Mount, Route

        from remindful.web.gate import LOOPBACK_NAMES, BearerGate

        routes: list[Any] = [
            Route("/health", self._health, methods=["GET"]),
            Route("/context", self._context, methods=["POST"]),
        ]
        try:
            from remindful.web.app import dashboard_app
        except ImportError as exc:  # the dashboard's optional parts are missing
            log.warning("the dashboard is not served: %s", exc)
        else:
            routes.append(Mount("/", app=dashboard_app(self.manager)))
        return BearerGate(Starlette(routes=routes), self.token, hosts=LOOPBACK_NAMES, browser=True)

    async def _health(self, request: Request) -> JSONResponse:
        from starlette.responses import JSONResponse

        return JSONResponse({"success": True, "pid": os.getpid(), "drained": self.drained})

    async def _context(self, request: Request) -> JSONResponse:
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import JSONResponse

        try:
            declared = request.headers.get("content-length", "")
            if not declared.isdigit() or not 0 < int(declared) <= MAX_BODY:
                raise ValidationError("body", f"expected 1 to {MAX_BODY} bytes of JSON")
            body = await request.body()
            if len(body) > MAX_BODY:
                raise ValidationError("body", f"expected 1 to {MAX_BODY} bytes of JSON")
            payload = _json_body(body)
            query, budget, exclude = _context_request(payload)
            scope = _context_scope(self.manager, payload)
            text = await run_in_threadpool(
                lambda: self.manager.context(query, budget_tokens=budget, exclude=exclude, scope=scope).text
            )
        except Exception as exc:
            status = http_status(exc)
            if status >= 500:
                log.error("context request failed: %s", exc)
            return JSONResponse({"success": False, "error": str(exc)}, status_code=status)
        return JSONResponse({"success": True, "context": text})


def _json_body(body: bytes) -> Any:
    """The JSON of a request body; ValidationError naming ``body`` when it is not JSON."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ValidationError("body", f"expected a JSON object ({exc})") from None


def _context_request(request: Any) -> tuple[str, int | None, str | None]:
    """``(query, budget_tokens, exclude)`` of a ``POST /context`` body; ValidationError naming the field."""
    if not isinstance(request, dict):
        raise ValidationError("body", "expected a JSON object")
    query = request.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ValidationError("query", "expected a non-empty string")
    budget = request.get("budget_tokens")
    if budget is not None and (type(budget) is not int or budget < 1):
        raise ValidationError("budget_tokens", "expected a positive integer")
    exclude = request.get("exclude")
    return query, budget, exclude if isinstance(exclude, str) else None


def _context_scope(manager: MemoryManager, request: dict[str, Any]) -> Any:
    """The scopes a context request reads: its ``scope`` (as ``MemoryManager.search`` takes it),
    else what a client working in its ``cwd`` sees (:meth:`MemoryManager.seen_from`: that
    directory's project and the user's; without a ``cwd``, the user's and the unscoped memories,
    never a project's). ValidationError naming the field."""
    scope = request.get("scope")
    if scope is not None:
        if not isinstance(scope, str | list):
            raise ValidationError("scope", "expected a scope such as 'user' or 'project:NAME', or a list of them")
        return scope
    cwd = request.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd.strip()):
        raise ValidationError("cwd", "expected the absolute path of the agent's working directory, or null")
    return manager.seen_from(cwd)


def start_daemon_threads(
    manager: MemoryManager, *, watch_dirs: Sequence[str | os.PathLike[str]] | None = None, http: bool = True
) -> DaemonHandle:
    """Start the daemon roles for ``manager`` in background threads and return at once.

    ``remindful serve`` calls this too. Raises RemindfulError for a missing watch directory."""
    return DaemonHandle(manager, watch_dirs, http).start()


def run_daemon(manager: MemoryManager, *, watch_dirs: Sequence[str | os.PathLike[str]] | None = None) -> None:
    """Run the daemon in the foreground until SIGINT/SIGTERM."""
    import signal

    handle = start_daemon_threads(manager, watch_dirs=watch_dirs)
    done = threading.Event()

    def stop(*_: Any) -> None:
        done.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        while not done.wait(1.0):
            pass
    finally:
        handle.stop()


__all__ = ["DaemonHandle", "run_daemon", "start_daemon_threads"]
