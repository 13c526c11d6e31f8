"""The capture daemon: owns a store while it runs (``remindful daemon``, and ``remindful serve``).

Roles, run by the one process holding ``<storage>/daemon.lock`` (others wait on standby and take
over within :data:`STANDBY_RETRY_S` if the owner dies):

- drain the hook spool every ``daemon.poll_interval_ms`` (100 ms), so an event is stored and
  searchable well within 1 s of its hook returning;
- index and watch the Markdown files of ``auto_capture.watch_dirs`` (and any given directories);
- run the retention schedule (:mod:`remindful.services.policy.scheduler`) when it is installed, and at a
  clean stop honour ``privacy.delete_on_exit`` (:func:`remindful.services.sessions.delete_on_exit`);
- answer local requests on ``http://127.0.0.1:PORT``: ``POST /context`` (context injection for
  hooks: ``{"query", "budget_tokens", "exclude"}`` → ``{"context"}``) and ``GET /health``.
  Every request needs ``Authorization: Bearer TOKEN``; port, token and pid are in
  ``<storage>/daemon.json``, mode 0600, removed at a clean stop.

    handle = start_daemon_threads(manager)   # returns at once; threads are daemonic
    ...
    handle.stop()

The daemon sits above the API: it takes a MemoryManager and hands its storage engine
(``manager.engine``) to the services it runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remindful.services.context import DAEMON_FILE

if TYPE_CHECKING:
    from remindful.api import MemoryManager
    from remindful.services.capture.watcher import MarkdownWatcher
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
        self.token = secrets.token_urlsafe(32)
        self.drained = 0
        self._lock_fd: int | None = None
        self._threads: list[threading.Thread] = []
        self._server: ThreadingHTTPServer | None = None
        self._scheduler: CleanupScheduler | None = None
        self.watcher: MarkdownWatcher | None = None

    # -- start and stop -------------------------------------------------------------------------

    def start(self) -> DaemonHandle:
        """Validate the watch directories (a missing one raises now), then start the roles."""
        if self.watch_dirs:
            from remindful.services.capture.watcher import MarkdownWatcher

            self.watcher = MarkdownWatcher(self.manager.engine, self.watch_dirs)
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
            self._server.shutdown()
            self._server.server_close()
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
        from remindful.services.sessions import delete_on_exit

        try:
            delete_on_exit(self.manager.engine)
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
        engine = self.manager.engine
        try:
            engine.embedder.embed(["warm up"])
            _ = engine.index
        except Exception as exc:
            log.warning("warm-up failed (the first request will retry): %s", exc)

    def _drain_loop(self) -> None:
        from remindful.services.hooks.drainer import drain_spool

        interval = self.manager.settings.daemon.poll_interval_ms / 1000
        while not self.stop_event.is_set():
            try:
                self.drained += drain_spool(self.manager.engine)
            except Exception as exc:  # keep draining later; the rows stay in the spool
                log.error("draining the hook spool failed: %s", exc)
                self.stop_event.wait(1.0)
            self.stop_event.wait(interval)

    def _start_retention(self) -> None:
        from remindful.services.policy.scheduler import start_scheduler

        try:
            self._scheduler = start_scheduler(self.manager.engine)
        except Exception as exc:
            log.error("retention schedule not started: %s", exc)

    def _start_http(self) -> None:
        handle = self

        class Handler(_Handler):
            daemon = handle

        port = self.manager.settings.daemon.port
        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        info = {"pid": os.getpid(), "port": self.port, "token": self.token, "started_at": time.time()}
        tmp = self.path / f".{DAEMON_FILE}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)
        os.replace(tmp, self.path / DAEMON_FILE)
        self._spawn(self._server.serve_forever, "remindful-http")
        log.info("daemon listening on 127.0.0.1:%d", self.port)


class _Handler(BaseHTTPRequestHandler):
    daemon: DaemonHandle
    server_version = "remindful"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)

    def _authorized(self) -> bool:
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self.daemon.token}".encode())

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the hook gave up waiting; nothing to do
            log.debug("client left before the answer was sent")

    def do_GET(self) -> None:
        if not self._authorized():
            return self._send(401, {"success": False, "error": "missing or wrong bearer token"})
        if self.path == "/health":
            return self._send(200, {"success": True, "pid": os.getpid(), "drained": self.daemon.drained})
        return self._send(404, {"success": False, "error": f"no such endpoint {self.path}"})

    def do_POST(self) -> None:
        if not self._authorized():
            return self._send(401, {"success": False, "error": "missing or wrong bearer token"})
        if self.path != "/context":
            return self._send(404, {"success": False, "error": f"no such endpoint {self.path}"})
        try:
            length = int(self.headers.get("Content-Length", "0"))
            if not 0 < length <= MAX_BODY:
                raise ValueError(f"body: expected 1 to {MAX_BODY} bytes of JSON")
            request = json.loads(self.rfile.read(length))
            query = request.get("query")
            if not isinstance(query, str) or not query.strip():
                raise ValueError("query: expected a non-empty string")
            budget = request.get("budget_tokens")
            if budget is not None and (not isinstance(budget, int) or budget < 1):
                raise ValueError("budget_tokens: expected a positive integer")
            exclude = request.get("exclude") if isinstance(request.get("exclude"), str) else None
        except (ValueError, AttributeError) as exc:
            return self._send(400, {"success": False, "error": str(exc)})
        from remindful.services.context import context_for

        try:
            text = context_for(self.daemon.manager.engine, query, budget_tokens=budget, exclude=exclude)
        except Exception as exc:
            log.error("context request failed: %s", exc)
            return self._send(500, {"success": False, "error": str(exc)})
        return self._send(200, {"success": True, "context": text})


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
