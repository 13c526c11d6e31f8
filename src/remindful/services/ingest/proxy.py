"""``remindful proxy -- CMD ARGS...``: give any stdio MCP server memory without changing it.

The proxy is the MCP server the client starts. It starts the wrapped server from ``CMD ARGS``
and relays every JSON-RPC message both ways, byte for byte (requests, responses,
notifications, server-to-client requests such as sampling or elicitation, any protocol
version): the client sees exactly what the wrapped server says. Along the way it pairs each
``tools/call`` request with its response and hands the completed call — tool, arguments, outcome,
duration — to a :class:`~remindful.services.ingest.worker.CaptureWorker`, which stores it from a
background thread (so relaying never waits for storage) through the capture filters. A response
that completes a tool call is committed to the store's spool before it is relayed (one small SQLite
transaction, :mod:`remindful.services.ingest.spooled`), so once the client has the answer, the capture
survives even a ``kill -9`` of the proxy: the next owner of the store stores it.

Lifetime: when the client closes the proxy's stdin, the wrapped server's stdin is closed; when
the wrapped server exits, the proxy stores what is queued and exits with its exit code.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

from remindful.runtime import lines_waking_for_signals
from remindful.services.ingest.calls import ToolCall, TypeMapping, result_outcome
from remindful.services.ingest.worker import CaptureWorker

if TYPE_CHECKING:
    from remindful.services.ingest.ports import CaptureStore
    from remindful.services.ingest.spooled import CaptureSpool

log = logging.getLogger("remindful.services.ingest")

EXIT_GRACE_SECONDS = 5.0
#: The JSON-RPC error code of the answer to a request the wrapped server exited without answering
#: (-32000 to -32099: implementation-defined server errors).
SERVER_EXITED = -32000
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"


class ToolCallTracker:
    """Pairs ``tools/call`` requests (client → server) with their responses (server → client)."""

    def __init__(self, submit: Callable[[ToolCall], None]) -> None:
        self._submit = submit
        self._pending: dict[Any, tuple[str, dict[str, Any], float]] = {}
        self._unanswered: dict[str, Any] = {}  # every client request awaiting its response, by key
        self._lock = threading.Lock()
        self.server_name: str | None = None

    def waiting(self) -> bool:
        """Whether a tool call awaits its response (then a server line is inspected before it is
        relayed, so the capture is committed before the client sees the answer)."""
        return bool(self._pending)

    def unanswered(self) -> list[Any]:
        """The ids of the client's requests the server has not answered (yet)."""
        with self._lock:
            return list(self._unanswered.values())

    def from_client(self, line: bytes) -> None:
        for message in _messages(line):
            if "method" in message and "id" in message:
                with self._lock:
                    self._unanswered[_key(message["id"])] = message["id"]
            if message.get("method") == "tools/call" and "id" in message:
                params = message.get("params") or {}
                arguments = params.get("arguments") if isinstance(params, dict) else None
                with self._lock:
                    self._pending[_key(message["id"])] = (
                        str(params.get("name", "?")) if isinstance(params, dict) else "?",
                        arguments if isinstance(arguments, dict) else {},
                        time.perf_counter(),
                    )

    def from_server(self, line: bytes) -> None:
        for message in _messages(line):
            if "method" in message or "id" not in message:
                continue  # a request or notification from the server, not a response
            result = message.get("result")
            if self.server_name is None and isinstance(result, dict):
                self.server_name = _server_name(result)
            with self._lock:
                self._unanswered.pop(_key(message["id"]), None)
                pending = self._pending.pop(_key(message["id"]), None)
            if pending is None:
                continue
            tool, arguments, started = pending
            if isinstance(result, dict) and result.get("resultType") == "input_required":
                continue  # the client will retry with the answers, as a new request
            success, error_text, text = result_outcome(result or {})
            if "error" in message:  # a JSON-RPC error (unknown tool, invalid params) rather than isError
                error = message.get("error")
                message_text = error.get("message", error) if isinstance(error, dict) else error
                success, error_text, text = False, str(message_text), None
            self._submit(
                ToolCall(
                    tool=tool,
                    arguments=arguments,
                    success=success,
                    duration_ms=(time.perf_counter() - started) * 1000,
                    error=error_text,
                    result=text,
                    server=self.server_name,
                )
            )


def _server_name(result: dict[str, Any]) -> str | None:
    """The server's name: ``serverInfo`` of an initialize answer (handshake era) or the
    ``_meta`` serverInfo every 2026-07-28 result carries."""
    meta = result.get("_meta")
    for info in (result.get("serverInfo"), meta.get(SERVER_INFO_META) if isinstance(meta, dict) else None):
        if isinstance(info, dict) and isinstance(info.get("name"), str):
            return info["name"]
    return None


def _key(request_id: Any) -> str:
    return json.dumps(request_id)


def _messages(line: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC messages on one line (a batch is a list); nothing for a line that is not JSON."""
    try:
        data = json.loads(line)
    except ValueError:
        return []
    items = data if isinstance(data, list) else [data]
    return [m for m in items if isinstance(m, dict)]


def _pump(
    source: IO[bytes],
    sink: IO[bytes],
    inspect: Callable[[bytes], None],
    on_eof: Callable[[], None],
    inspect_first: Callable[[], bool] = lambda: False,
) -> None:
    """Copy lines from source to sink (flushing each), inspecting each after it is forwarded —
    or before, while ``inspect_first()`` says so."""

    def look(line: bytes) -> None:
        try:
            inspect(line)
        except Exception as exc:  # inspection must never stop the relay
            log.debug("could not inspect a message: %s", exc)

    try:
        for line in lines_waking_for_signals(source):  # the main thread's: SIGTERM must end its wait
            first = inspect_first()
            if first:
                look(line)
            try:
                sink.write(line)
                sink.flush()
            except (BrokenPipeError, ValueError, OSError):
                break
            if not first:
                look(line)
    finally:
        on_eof()


def run_proxy(
    command: Sequence[str],
    get_store: Callable[[], CaptureStore],
    *,
    mapping: Callable[[str], str] | None = None,
    session_id: str | None = None,
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
    env: dict[str, str] | None = None,
    spool: CaptureSpool | None = None,
) -> int:
    """Start ``command``, relay stdio between it and this process, capture its tool calls.

    ``get_store`` returns the Store the captures go to (called in the capture worker's thread,
    so the relay starts before the store is open). ``mapping`` maps tool names to memory types
    (default :class:`TypeMapping`); ``session_id`` names the session the captures belong to
    (default: the spool's, else the store's, one per run). ``spool``
    (``CaptureSpool.from_config(path)``, milliseconds) makes every capture durable from the first
    call; without it the worker makes one once the store is open.

    Returns the wrapped server's exit code (127 if it could not be started).
    """
    if not command:
        raise ValueError("expected a command to start the MCP server, e.g. `remindful proxy -- npx -y SERVER`")
    # The thread reading the client blocks in readline() until the client closes stdin, possibly
    # past the end of the program: on sys.stdin.buffer it would hold that object's lock while the
    # interpreter shuts down ("Fatal Python error: _enter_buffered_busy", exit 134). It reads a
    # reader of its own on a duplicate of the descriptor, which shutdown does not touch.
    client_in = stdin or os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    client_out = stdout or sys.stdout.buffer
    try:
        child = subprocess.Popen(
            list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env or os.environ.copy(), bufsize=0
        )
    except OSError as exc:
        sys.stderr.write(f"remindful proxy: could not start {command[0]!r}: {exc}\n")
        return 127
    assert child.stdin is not None and child.stdout is not None
    worker = CaptureWorker(get_store, mapping=mapping or TypeMapping(), session_id=session_id, warm=True, spool=spool)
    tracker = ToolCallTracker(worker.submit)

    def terminate_if_running() -> None:
        if child.poll() is None:
            child.terminate()

    def close_child_stdin() -> None:
        # The client is gone: EOF tells the wrapped server to exit; terminate it if it lingers.
        with contextlib.suppress(OSError):
            child.stdin.close()  # type: ignore[union-attr]
        timer = threading.Timer(EXIT_GRACE_SECONDS, terminate_if_running)
        timer.daemon = True
        timer.start()

    def stop(signum: int, frame: Any) -> None:
        # A client stopping us (SIGTERM after closing stdin) allows a grace period before SIGKILL:
        # stop the wrapped server and use that time to store the captures still queued.
        if child.poll() is None:
            child.terminate()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
    # A request is noted before it is relayed: a server answering at once must find it pending.
    upstream = threading.Thread(
        target=_pump,
        args=(client_in, child.stdin, tracker.from_client, close_child_stdin, lambda: True),
        daemon=True,
    )
    upstream.start()
    try:
        _pump(child.stdout, client_out, tracker.from_server, lambda: None, tracker.waiting)
    except KeyboardInterrupt:
        child.terminate()
    code = child.wait()
    child.stdout.close()
    _answer_unanswered(client_out, tracker.unanswered(), code)
    worker.close(timeout=30)
    if worker.stats["failed"]:
        log.warning("remindful proxy: %d captures failed (see the log)", worker.stats["failed"])
    return code


def _answer_unanswered(out: IO[bytes], ids: Sequence[Any], code: int) -> None:
    """Answer each request the wrapped server left unanswered with a JSON-RPC error, so the client
    hears why instead of waiting for ever."""
    how = f"with code {code}" if code >= 0 else f"on signal {-code}"
    for request_id in ids:
        error = {"code": SERVER_EXITED, "message": f"The wrapped MCP server exited {how} before answering"}
        with contextlib.suppress(OSError, ValueError):  # the client is gone too
            out.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode() + b"\n")
            out.flush()


__all__ = ["ToolCallTracker", "run_proxy"]
