"""The capture daemon: owns a store while it runs (``remindful daemon``, ``remindful serve``, and
the daemon the hooks start on demand).

Roles, run by the one process holding the daemon lock ``<storage>/daemon.lock``
(:mod:`remindful.runtime`; others wait on standby and take over within :data:`STANDBY_RETRY_S`
if the owner dies):

- drain the hook spool every ``daemon.poll_interval_ms`` (100 ms), so an event is stored and
  searchable well within 1 s of its hook returning;
- answer the hooks on the local channel, the Unix socket ``<storage>/daemon.sock``
  (:func:`remindful.runtime.ask_daemon`: one JSON request a line, ``{"op": "context", "query",
  "budget_tokens", "exclude", "cwd"}`` → ``{"success", "context"}``, searched in the scopes seen
  from ``cwd``, ``{"op": "failure_warning", "record"}`` → ``{"success", "warning"}`` (a PreToolUse
  hook's on a shared catalog: :meth:`MemoryManager.failure_warning`), or ``{"op": "ping"}``; the
  peer's uid is checked both ways), once the model is
  loaded; and ``{"op": "keep", "idem_key", "kind", "payload", "created_at"}``: a hook event that no
  file could take (a full disk), kept in memory (up to :data:`KEPT_MAX_BYTES`) and spooled by the
  drain loop once the disk has room (lost if the daemon stops before that: it logs how many);
- index and watch the Markdown files of ``auto_capture.watch_dirs`` (and any given directories);
- run the retention schedule (:mod:`remindful.services.policy.scheduler`) when it is installed, and at a
  clean stop honour ``privacy.delete_on_exit`` (:func:`remindful.services.sessions.delete_on_exit`);
- serve the dashboard (:mod:`remindful.web`) and ``GET /health``, ``POST /context`` on
  ``http://127.0.0.1:PORT`` (uvicorn, in a thread): ``POST /context`` takes a hook's request
  (:func:`remindful.services.context.hook_request`'s JSON: ``{"event", "query", "budget_tokens",
  "exclude", "session_id", "cwd"}``) and answers ``{"context"}``
  (:meth:`MemoryManager.hook_context <remindful.api.MemoryManager.hook_context>`: the brief or the
  prompt's context, searched in the scopes seen from ``cwd``), as the local channel does. Every request passes the
  gate of every HTTP surface (:class:`remindful.web.gate.BearerGate`: the store's bearer token, or
  the dashboard's cookie; Host and Origin on loopback); an error answers the status of
  :func:`remindful.errors.http_status`. Port and pid are in ``<storage>/daemon.json``, mode 0600,
  for people and the dashboard: hooks never use it.
- with ``idle_exit_s``, stop after that long without a hook request, a spooled event or an HTTP
  request (the daemon the hooks start, ``daemon.idle_exit_s``).

The socket and ``daemon.json`` are removed at a clean stop, on SIGTERM and SIGHUP too
(:func:`remindful.runtime.exit_on_signals`); after a kill -9 the socket refuses connections and
the lock is free, so nothing trusts what is left.

    handle = start_daemon_threads(manager)   # returns at once; threads are daemonic
    ...
    handle.stop()

The daemon sits above the API: it takes a MemoryManager and gets every part it runs from it (the
spool drain, the file watcher, the cleanup scheduler, context), built by the manager, the one
composition root.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remindful import runtime
from remindful.errors import StorageFullError, ValidationError, http_status
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

LOCK_FILE = runtime.LOCK_FILE
STANDBY_RETRY_S = 2.0
#: The longest wait between two drains while they fail (a catalog server that does not answer).
DRAIN_BACKOFF_MAX_S = 30.0
#: The most hook events (bytes of their payloads) a daemon keeps in memory while the disk is full.
KEPT_MAX_BYTES = 64 * 1024 * 1024
MAX_BODY = 1_000_000
#: How long a hook's connection may take to send its request.
LOCAL_READ_TIMEOUT_S = 10.0


class DaemonHandle:
    """The running daemon roles of one process; :meth:`stop` ends them all.

    ``idle_exit_s`` > 0: stop after that many seconds without activity (:meth:`touch`); then
    :attr:`finished` is set. ``lock_fd``: a descriptor of the daemon lock inherited from the hook
    that started this process (:func:`remindful.runtime.adopt_daemon_lock`). ``standby``: when
    another process owns the store, wait to take over (else :attr:`finished` is set at once)."""

    def __init__(
        self,
        manager: MemoryManager,
        watch_dirs: Sequence[str | os.PathLike[str]] | None,
        http: bool,
        *,
        idle_exit_s: float = 0,
        lock_fd: int | None = None,
        standby: bool = True,
    ) -> None:
        self.manager = manager
        self.path = Path(manager.path)
        self.stop_event = threading.Event()
        self.owner = threading.Event()
        self.finished = threading.Event()
        self.http = http
        self.watch_dirs = [*manager.settings.auto_capture.watch_dirs, *(watch_dirs or [])]
        self.port: int | None = None
        self.token = ""  # the store's bearer token, read when the HTTP role starts
        self.drained = 0
        self.idle_exit_s = idle_exit_s
        self.standby = standby
        self.last_activity = time.monotonic()
        self.listening = threading.Event()  # the hooks' socket answers
        self._inherited_lock = lock_fd
        self._lock_fd: int | None = None
        self._threads: list[threading.Thread] = []
        self._server: uvicorn.Server | None = None
        self._local: _LocalServer | None = None
        self._local_lock = threading.Lock()  # the socket starts before or not after stop()
        #: Hook events no file could take (a full disk), kept here until the spool takes them.
        self.kept: list[tuple[str, str, str, float]] = []
        self._kept_bytes = 0
        self._kept_lock = threading.Lock()
        self._kept_warned = 0.0
        self._endpoints: list[Path] = []
        self._scheduler: CleanupScheduler | None = None
        self.watcher: MarkdownWatcher | None = None

    # -- start and stop -------------------------------------------------------------------------

    def start(self) -> DaemonHandle:
        """Validate the watch directories (a missing one raises now), then start the roles."""
        if self.watch_dirs:
            self.watcher = self.manager.markdown_watcher(self.watch_dirs)
        self.manager.check_enabled()
        if self._try_lock():
            self._become_owner()
        elif self.standby:
            log.info("another process owns %s; standing by", self.path)
            self._spawn(self._standby, "remindful-standby")
        else:
            log.info("another process owns %s; nothing to do", self.path)
            self.finished.set()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """End every role (idempotent); the owner removes its socket and daemon.json and releases
        the lock."""
        if self.stop_event.is_set():
            return
        with self._local_lock:
            self.stop_event.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._local is not None:
            self._local.shutdown_later()
        if self._scheduler is not None:
            with contextlib.suppress(Exception):
                self._scheduler.stop()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)
        if self._local is not None:
            self._local.server_close()
        if self.kept and not self.spool_kept():
            log.error("%d hook events kept in memory are lost: the disk never had room for them", len(self.kept))
        if self.owner.is_set():
            self._delete_on_exit()
            self._remove_endpoints()
        if self._lock_fd is not None:
            runtime.release_daemon_lock(self.path, self._lock_fd)
            self._lock_fd = None
        self.finished.set()

    def touch(self) -> None:
        """Note activity: the idle clock starts again."""
        self.last_activity = time.monotonic()

    def _delete_on_exit(self) -> None:
        """``privacy.delete_on_exit``: this process's session goes with it (remindful.services.sessions)."""
        try:
            self.manager.delete_on_exit()
        except Exception as exc:
            log.error("privacy.delete_on_exit failed: %s", exc)

    def _try_lock(self) -> bool:
        inherited, self._inherited_lock = self._inherited_lock, None
        if inherited is not None:
            if runtime.adopt_daemon_lock(self.path, inherited):
                self._lock_fd = inherited
                return True
            log.warning("descriptor %d is not the daemon lock of %s; ignored", inherited, self.path)
            with contextlib.suppress(OSError):
                os.close(inherited)
        self._lock_fd = runtime.hold_daemon_lock(self.path)
        return self._lock_fd is not None

    def _standby(self) -> None:
        while not self.stop_event.wait(STANDBY_RETRY_S):
            if self._try_lock():
                log.info("taking over the daemon roles for %s", self.path)
                self._become_owner()
                return

    def _become_owner(self) -> None:
        self.owner.set()
        self.touch()
        self._spawn(self._warm_up, "remindful-warmup")
        if self.http:
            self._start_http()
        self._spawn(self._drain_loop, "remindful-drain")
        watcher = self.watcher
        if watcher is not None:
            self._spawn(lambda: watcher.run(self.stop_event), "remindful-watch")
        self._start_retention()
        if self.idle_exit_s > 0:
            self._spawn(self._idle_watch, "remindful-idle")

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _endpoint(self, path: Path) -> None:
        """``path`` is this daemon's to remove at its stop, and at this process's exit whatever ends it."""
        self._endpoints.append(path)
        if str(path) not in runtime.ENDPOINTS:
            runtime.ENDPOINTS.append(str(path))
        _remove_endpoints_at_exit()

    def _remove_endpoints(self) -> None:
        for path in self._endpoints:
            with contextlib.suppress(ValueError):
                runtime.ENDPOINTS.remove(str(path))
            if path.name == DAEMON_FILE:  # only if still ours: a later owner may have written its own
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    if json.loads(path.read_text()).get("pid") == os.getpid():
                        path.unlink()
            else:
                with contextlib.suppress(OSError):
                    path.unlink()
        self._endpoints.clear()

    # -- roles ----------------------------------------------------------------------------------

    def _warm_up(self) -> None:
        """Load the model, then answer the hooks on the local socket, then open the vector index,
        so that the first context request (a hook with a 2 s timeout) does not pay for them. Until
        the socket answers, hooks find the context themselves."""
        try:
            self.manager.load_model()
        except Exception as exc:
            log.warning("loading the model failed (the first request will retry): %s", exc)
        self._start_local()
        if self.stop_event.is_set():
            return
        try:
            self.manager.warm_up()
        except Exception as exc:
            log.warning("warm-up failed (the first request will retry): %s", exc)

    def keep(self, request: dict[str, Any]) -> int:
        """Keep in memory one hook event its hook could not write (``{"idem_key", "kind",
        "payload", "created_at"}``, the payload redacted by the hook), until :meth:`spool_kept`
        writes it. Returns how many are kept; raises ValidationError for a malformed event and
        StorageFullError when :data:`KEPT_MAX_BYTES` are kept already."""
        for name in ("idem_key", "kind", "payload"):
            if not isinstance(request.get(name), str):
                raise ValidationError(name, "expected text (the spool's fallback line of the event)")
        key, kind, payload, at = (
            str(request["idem_key"]),
            str(request["kind"]),
            str(request["payload"]),
            request.get("created_at"),
        )
        if isinstance(at, bool) or not isinstance(at, int | float):
            raise ValidationError("created_at", "expected a time in seconds")
        with self._kept_lock:
            if self._kept_bytes + len(payload) > KEPT_MAX_BYTES:
                raise StorageFullError(f"the daemon already keeps {len(self.kept)} events it cannot write")
            self.kept.append((key, kind, payload, float(at)))
            self._kept_bytes += len(payload)
            return len(self.kept)

    def spool_kept(self) -> int:
        """Write the events kept in memory to the spool, if the disk has room now; returns how
        many were written (0 while it stays full: they stay kept, a warning a minute in the log)."""
        with self._kept_lock:
            batch = list(self.kept)
        if not batch:
            return 0
        try:
            self.manager.spool_events(batch)
        except Exception as exc:
            if time.monotonic() - self._kept_warned > 60:
                self._kept_warned = time.monotonic()
                log.warning("%d hook events kept in memory, not yet written: %s", len(batch), exc)
            return 0
        with self._kept_lock:
            del self.kept[: len(batch)]
            self._kept_bytes = sum(len(r[2]) for r in self.kept)
        log.info("wrote %d hook events kept in memory while the disk was full", len(batch))
        return len(batch)

    def _drain_loop(self) -> None:
        interval = self.manager.settings.daemon.poll_interval_ms / 1000
        failing = 0  # drains failed in a row: a server that does not answer is asked less often
        while not self.stop_event.is_set():
            if self.kept and self.spool_kept():
                self.touch()
            try:
                drained = self.manager.drain_spool()
            except Exception as exc:  # keep draining later; the rows stay in the spool
                failing += 1
                if failing == 1 or failing % 20 == 0:  # said once, then now and then (not every second)
                    log.error("draining the hook spool failed (the events wait in it; retrying): %s", exc)
                self.stop_event.wait(min(DRAIN_BACKOFF_MAX_S, 2 ** min(failing - 1, 5)))
            else:
                if failing:
                    log.info("draining the hook spool works again after %d failed attempts", failing)
                failing = 0
                if drained:
                    self.drained += drained
                    self.touch()
            self.stop_event.wait(interval)

    def _idle_watch(self) -> None:
        """Stop after ``idle_exit_s`` without activity, or once the storage directory is gone."""
        limit = self.idle_exit_s
        while not self.stop_event.wait(min(limit / 4, 5.0)):
            gone = not self.path.is_dir()
            if self.kept and not gone:
                self.touch()  # events only this process holds: not idle until they are written
            if gone or time.monotonic() - self.last_activity >= limit:
                why = "its storage directory is gone" if gone else f"no activity for {limit:g} s"
                log.info("the daemon of %s stops: %s", self.path, why)
                self.stop()
                return

    def _start_local(self) -> None:
        """Listen on ``<storage>/daemon.sock`` for the hooks (the model is loaded by now)."""
        with self._local_lock:
            if self.stop_event.is_set():
                return
            try:
                sock = runtime.listen(self.path)
            except OSError as exc:
                log.error("the hooks' local socket is off (they find context themselves): %s", exc)
                return
            self._endpoint(self.path / runtime.SOCKET_NAME)
            self._local = server = _LocalServer(sock, self)
            self._spawn(server.serve_forever, "remindful-local")
        runtime.note_ready(self.path)  # up: a hook may restart it at once should it be killed
        self.listening.set()

    def answer(self, line: bytes) -> dict[str, Any]:
        """The answer to one request of the local channel (see the module docstring); an error is
        ``{"success": false, "error", "status"}`` with the status an HTTP surface would give."""
        self.touch()
        try:
            if len(line) > runtime.MAX_MESSAGE:
                raise ValidationError("request", f"expected at most {runtime.MAX_MESSAGE} bytes of JSON")
            request = _json_body(line)
            if not isinstance(request, dict):
                raise ValidationError("request", "expected a JSON object")
            op = request.get("op")
            if op == "ping":
                return {"success": True, "pid": os.getpid(), "drained": self.drained}
            if op == "keep":
                return {"success": True, "kept": self.keep(request)}
            if op == "failure_warning":
                return {"success": True, "warning": self.manager.failure_warning(request.get("record") or {})}
            if op != "context":
                raise ValidationError("op", "expected 'context', 'failure_warning', 'keep' or 'ping'")
            text = self.manager.hook_context({k: v for k, v in request.items() if k != "op"}).text
        except Exception as exc:
            status = http_status(exc)
            if status >= 500:
                log.error("local request failed: %s", exc)
            return {"success": False, "error": str(exc), "status": status}
        finally:
            self.touch()  # a long answer is activity to its end
        return {"success": True, "context": text}

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
        self._endpoint(self.path / DAEMON_FILE)
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
        gated = BearerGate(Starlette(routes=routes), self.token, hosts=LOOPBACK_NAMES, browser=True)

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                self.touch()
            await gated(scope, receive, send)

        return app

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
            hook_request = _json_body(body)
            text = await run_in_threadpool(lambda: self.manager.hook_context(hook_request).text)
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


class _LocalRequest(socketserver.StreamRequestHandler):
    """One request of the local channel: a JSON line in, a JSON line out."""

    timeout = LOCAL_READ_TIMEOUT_S
    server: _LocalServer

    def handle(self) -> None:
        line = self.rfile.readline(runtime.MAX_MESSAGE + 1)
        answer = self.server.handle_owner.answer(line)
        with contextlib.suppress(OSError):  # the hook gave up (its deadline passed): nothing to do
            self.wfile.write(json.dumps(answer, ensure_ascii=False).encode("utf-8") + b"\n")


class _LocalServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The daemon's side of the local channel, on a socket :func:`remindful.runtime.listen` bound;
    a thread per request; a client that is not this user's process is dropped unanswered."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, sock: socket.socket, owner: DaemonHandle) -> None:
        super().__init__("", _LocalRequest, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.handle_owner = owner

    def verify_request(self, request: Any, client_address: Any) -> bool:
        return runtime.peer_uid(request) == os.getuid()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One log line (a client that stalled past :data:`LOCAL_READ_TIMEOUT_S`, say), not a traceback."""
        log.warning("a local request failed: %r", sys.exc_info()[1])

    def shutdown_later(self) -> None:
        """:meth:`shutdown` without waiting for the loop to notice (it is joined by the owner)."""
        threading.Thread(target=self.shutdown, name="remindful-local-stop", daemon=True).start()


_AT_EXIT: list[bool] = []


def _remove_endpoints_at_exit() -> None:
    """Remove this process's endpoint files at exit, however it exits short of a kill -9."""
    if not _AT_EXIT:
        _AT_EXIT.append(True)
        atexit.register(runtime.remove_endpoints)


def start_daemon_threads(
    manager: MemoryManager,
    *,
    watch_dirs: Sequence[str | os.PathLike[str]] | None = None,
    http: bool = True,
    idle_exit_s: float = 0,
    lock_fd: int | None = None,
    standby: bool = True,
) -> DaemonHandle:
    """Start the daemon roles for ``manager`` in background threads and return at once (the
    arguments are :class:`DaemonHandle`'s).

    ``remindful serve`` calls this too. Raises RemindfulError for a missing watch directory."""
    handle = DaemonHandle(manager, watch_dirs, http, idle_exit_s=idle_exit_s, lock_fd=lock_fd, standby=standby)
    return handle.start()


def run_daemon(
    manager: MemoryManager,
    *,
    watch_dirs: Sequence[str | os.PathLike[str]] | None = None,
    idle_exit_s: float = 0,
    lock_fd: int | None = None,
    standby: bool = True,
) -> None:
    """Run the daemon in the foreground until SIGINT, SIGTERM or SIGHUP, or until it stops by itself
    (idle for ``idle_exit_s``; at once when another process owns the store and not ``standby``).
    A SIGINT or SIGHUP this process was started with ignored (``nohup``, a background job) stays
    ignored, as in ``remindful serve`` (:func:`remindful.runtime.exit_on_signals`)."""
    import signal

    done = threading.Event()

    def stop(*_: Any) -> None:
        done.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if signum == signal.SIGTERM or signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, stop)
    handle = start_daemon_threads(
        manager, watch_dirs=watch_dirs, idle_exit_s=idle_exit_s, lock_fd=lock_fd, standby=standby
    )
    try:
        while not done.is_set() and not handle.finished.wait(0.5):
            pass
    finally:
        handle.stop()


__all__ = ["DaemonHandle", "run_daemon", "start_daemon_threads"]
