"""The stdio front of ``remindful serve``: answer the handshake before the MCP SDK has loaded.

Why: importing the ``mcp`` SDK is by far the slowest part of a start (it builds pydantic models
for every protocol revision; ``bench/mcp_cold_start.py`` prints it), and an MCP client starts the
server for each session and waits for its tool list. So the process starts on the standard
library only, answers ``initialize`` and ``tools/list`` from the manifest cache
(:mod:`remindful.shells.mcp.manifest`) while a thread imports the SDK, and then the SDK's own
stdio transport (``MCPServer.run_stdio_async``) serves. Without a cache that applies (the first
run of an installation, or another SDK or pydantic release since), the SDK answers everything and
its answers to the handshake fill the cache; every early answer is checked against the SDK's own
answer to the same request, and a difference drops the cache.

The SDK's import starts once the handshake is answered (or at the first request that is not, or
:data:`SDK_START_DELAY_S` after the start): begun at once, it would take CPU from the very answers
it is waiting behind. The hand-over keeps the SDK's session whole: fd 0 and fd 1 become pipes to
the SDK, and every line the client sends goes to it in order, the ones answered early included;
the SDK's answers to those are dropped here. Only a plain handshake is answered early: an
``initialize`` the SDK surely accepts as the connection's first request, and ``tools/list``
without parameters after it. Everything else (a 2026-era ``server/discover``, a cursor, a tool
call) waits for the SDK.

Two fixes where the SDK is silent:

- a line it cannot read (not JSON, not a JSON-RPC message, JSON nested deeper than its parser
  reads, a string holding a lone UTF-16 surrogate) it drops without a word: here it gets
  JSON-RPC's parse error (-32700) or invalid request (-32600) naming the field at fault;
- at the end of its input it cancels the requests still running, so a client that writes its
  requests and closes stdin (a script) lost their answers: here the SDK's input is closed once
  they are answered (at most :data:`DRAIN_TIMEOUT_S` later).
"""

from __future__ import annotations

import gc
import os
import sys
import threading

from remindful.shells.mcp import manifest as mcp_manifest
from remindful.shells.mcp.manifest import dumps, loads
from remindful.shells.mcp.wire import INVALID_REQUEST, SDK_MAX_DEPTH, beyond_the_sdk, is_id

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: every import here delays the first answer
if TYPE_CHECKING:
    from typing import Any

DRAIN_TIMEOUT_S = 60.0
#: The SDK's import starts at the latest this long after the process (a client slow to open).
SDK_START_DELAY_S = 0.2
#: The garbage collector that :func:`main` turns off is on again at the latest this long after the start.
GC_OFF_LATEST_S = 10.0
PARSE_ERROR = -32700
_INITIALIZE_KEYS = {"protocolVersion", "capabilities", "clientInfo", "_meta"}
_CLIENT_INFO_KEYS = {"name", "version", "title", "description", "websiteUrl"}


def _key(request_id: Any) -> str:
    return dumps(request_id)


def unreadable(line: bytes | str) -> tuple[dict[str, Any] | None, Any]:
    """``(error answer, None)`` for a line the SDK would drop, or take for a notification when it
    is a request (``method`` and ``id``) and so never answer, naming what is wrong; else
    ``(None, message)``. A response (``result`` or ``error``) goes to the SDK unchecked: it reads
    more shapes of those than are worth copying here."""
    why: str | None
    try:
        message = loads(line)
        beyond = beyond_the_sdk(line, message)
    except UnicodeDecodeError as exc:
        why = f"not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
    except RecursionError:
        why = f"nested deeper than {SDK_MAX_DEPTH} levels; expected at most {SDK_MAX_DEPTH}"
    except ValueError:
        why = "not valid JSON"
    else:
        why = None
        if beyond is not None:  # valid JSON: the request is answered, by its id
            request_id = message.get("id") if isinstance(message, dict) else None
            error = {"code": INVALID_REQUEST, "message": f"Invalid request: {beyond}"}
            return {"jsonrpc": "2.0", "id": request_id if is_id(request_id) else None, "error": error}, None
    if why is not None:
        return {"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": f"Parse error: {why}"}}, None
    if not isinstance(message, dict):
        problems = [f"expected a JSON object, got {type(message).__name__}"]
    elif "method" in message and not ("id" not in message and ("result" in message or "error" in message)):
        problems = [] if message.get("jsonrpc") == "2.0" else ['jsonrpc: expected "2.0"']
        if not isinstance(message["method"], str):
            problems.append("method: expected a string")
        if "id" in message and not is_id(message["id"]):
            problems.append("id: expected an integer or a string")
        if message.get("params") is not None and not isinstance(message["params"], dict):
            problems.append("params: expected an object")
    elif "result" in message or "error" in message:
        problems = []
    else:
        problems = ["expected a request (method, id), a notification (method) or a response (result or error)"]
    if not problems:
        return None, message
    request_id = message.get("id") if isinstance(message, dict) else None
    error = {"code": INVALID_REQUEST, "message": f"Invalid request: {'; '.join(problems)}"}
    return {"jsonrpc": "2.0", "id": request_id if is_id(request_id) else None, "error": error}, None


def plain_initialize(message: dict[str, Any]) -> str | None:
    """The requested protocol version if ``message`` is an ``initialize`` the SDK surely accepts
    (so an early success cannot contradict the SDK's answer), else None."""
    params = message.get("params")
    if message.get("method") != "initialize" or not isinstance(params, dict) or not set(params) <= _INITIALIZE_KEYS:
        return None
    version, capabilities, info = params.get("protocolVersion"), params.get("capabilities"), params.get("clientInfo")
    if not isinstance(version, str) or not isinstance(capabilities, dict) or not isinstance(info, dict):
        return None
    if not all(isinstance(v, dict) for v in capabilities.values()) or not isinstance(params.get("_meta", {}), dict):
        return None
    if not {"name", "version"} <= set(info) <= _CLIENT_INFO_KEYS or not all(isinstance(v, str) for v in info.values()):
        return None
    return version


class StdioFront:
    """Owns the process's stdin and stdout; see the module docstring. ``run()`` returns when the
    client has closed stdin and the SDK has answered and stopped."""

    def __init__(self, path: str | None = None, manifest: dict[str, Any] | None = None) -> None:
        self.path = path
        self.manifest = manifest
        self._wire_in = os.fdopen(os.dup(0), "rb")
        self._wire_out = os.dup(1)
        # fd 0 and fd 1, which the SDK's stdio transport takes over, become pipes to it.
        sdk_reads, self._to_sdk = os.pipe()
        self._from_sdk, sdk_writes = os.pipe()
        os.dup2(sdk_reads, 0)
        os.dup2(sdk_writes, 1)
        os.close(sdk_reads)
        os.close(sdk_writes)
        self._end_of_sdk = f"remindful-end-of-sdk-output-{os.getpid()}-{id(self)}\n".encode()
        self._out_lock = threading.Lock()
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._opened: bool | None = None  # did the connection open with a plain initialize?
        self._answered_early: dict[str, dict[str, Any]] = {}  # id -> the early result; the SDK's answer is dropped
        self._to_record: dict[str, str] = {}  # id -> "initialize" or "tools": the SDK's answer fills the cache
        self._recorded: dict[str, dict[str, Any]] = {}
        self._unanswered: dict[str, int] = {}  # id -> requests with that id the SDK has not answered
        self._client_gone = False
        self._sdk = threading.Thread(target=self._run_sdk, name="remindful-mcp-sdk", daemon=True)

    # -- the client's side ----------------------------------------------------------------------

    def run(self) -> None:
        from remindful.runtime import lines_waking_for_signals  # imported already: main() starts with it

        pump = threading.Thread(target=self._pump, name="remindful-mcp-out", daemon=True)
        pump.start()
        later = threading.Timer(SDK_START_DELAY_S, self._start_sdk)
        later.daemon = True
        later.start()
        gc_later = threading.Timer(GC_OFF_LATEST_S, self.collect_again)
        gc_later.daemon = True
        gc_later.start()
        try:
            for raw in lines_waking_for_signals(self._wire_in):  # a blocking read held SIGHUP off
                self._from_client(raw)
            self._start_sdk()
            with self._lock:  # the requests already sent are answered before the SDK hears the end
                if not self._settled.wait_for(lambda: not self._unanswered, DRAIN_TIMEOUT_S):
                    sys.stderr.write(
                        f"remindful serve: input closed; {len(self._unanswered)} request(s) still unanswered "
                        f"after {DRAIN_TIMEOUT_S:.0f}s are cancelled\n"
                    )
        except KeyboardInterrupt:
            interrupted = True
        else:
            interrupted = False
        finally:
            later.cancel()
            gc_later.cancel()
            os.close(self._to_sdk)
        if interrupted:  # Ctrl-C: stop now, as on SIGTERM, not after the SDK has wound down
            raise SystemExit(0)
        if self._sdk.ident is not None:
            self._sdk.join(timeout=30)
            pump.join(timeout=10)

    def collect_again(self) -> None:
        """Turn the garbage collector back on if it is off, the objects made so far (modules,
        classes, the SDK's models, the model: all kept for the process's life) frozen out of its
        walks."""
        with self._lock:
            if not gc.isenabled():
                gc.freeze()
                gc.enable()

    def _start_sdk(self) -> None:
        """Start importing and running the SDK, once (see the module docstring for when)."""
        with self._lock:
            if self._sdk.ident is None:
                self._sdk.start()

    def _from_client(self, raw: bytes) -> None:
        line = raw.rstrip(b"\r\n")
        if not line.strip():
            return
        error, message = unreadable(line)
        if error is not None:
            self._write(error)
            return
        method, request_id = message.get("method"), message.get("id")
        if method == "notifications/cancelled" and isinstance(message.get("params"), dict):
            with self._lock:  # the SDK sends no answer to a cancelled request
                self._settle(_key(message["params"].get("requestId")))
        elif method is not None and "id" in message:
            with self._lock:
                key = _key(request_id)
                self._unanswered[key] = self._unanswered.get(key, 0) + 1
                answer = self._early(message, key)
                if answer is not None:
                    self._answered_early[key] = answer
            if answer is not None:
                self._write({"jsonrpc": "2.0", "id": request_id, "result": answer})
            if answer is None or method == "tools/list":  # the SDK is needed now, or the handshake is done
                self._start_sdk()
        os.write(self._to_sdk, line + b"\n")

    def _early(self, message: dict[str, Any], key: str) -> dict[str, Any] | None:
        """The result to answer ``message`` with now, or None to leave it to the SDK (the caller
        holds the lock). Without a manifest, the SDK's answer to a plain handshake is recorded."""
        if self._opened is None:  # the first request decides, as it decides the SDK's era
            version = plain_initialize(message)
            self._opened = version is not None
            if version is None:
                return None
            if self.manifest is None:
                self._to_record[key] = "initialize"
                return None
            return mcp_manifest.initialize_result(self.manifest, version)
        if self._opened and message["method"] == "tools/list" and message.get("params") in (None, {}):
            if self.manifest is None:
                self._to_record.setdefault(key, "tools")
                return None
            return mcp_manifest.tools_result(self.manifest)
        return None

    def _write(self, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else dumps(message).encode() + b"\n"
        with self._out_lock:
            if self._client_gone:
                return
            try:
                while data:
                    data = data[os.write(self._wire_out, data) :]
            except OSError:  # the client stopped reading: nobody is left to answer
                self._client_gone = True

    def _settle(self, key: str) -> None:
        left = self._unanswered.get(key, 0) - 1
        if left > 0:
            self._unanswered[key] = left
        else:
            self._unanswered.pop(key, None)
            if not self._unanswered:
                self._settled.notify_all()

    # -- the SDK's side -------------------------------------------------------------------------

    def _run_sdk(self) -> None:
        try:
            import anyio

            from remindful.shells.mcp.server import build_server

            anyio.run(build_server(path=self.path, daemon=True, warm_model=True).run_stdio_async)
        except BaseException:
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os.write(1, self._end_of_sdk)  # fd 1 is the pipe again once the SDK has let it go

    def _pump(self) -> None:
        """Copy the SDK's output to the client, without its answers to requests answered early;
        anything else it printed goes to stderr."""
        with os.fdopen(self._from_sdk, "rb") as sdk_out:
            for raw in iter(sdk_out.readline, b""):
                if raw == self._end_of_sdk:
                    return
                try:
                    message = loads(raw)
                except (ValueError, RecursionError):
                    message = None
                if not isinstance(message, dict):
                    sys.stderr.buffer.write(raw)
                    sys.stderr.flush()
                    continue
                if "id" in message and "method" not in message:  # an answer
                    key = _key(message["id"])
                    with self._lock:
                        self._settle(key)
                        early = self._answered_early.pop(key, None)
                        recording = self._to_record.pop(key, None)
                    if early is not None:
                        self._check(early, message)
                        continue
                    if recording is not None and isinstance(message.get("result"), dict):
                        self._record(recording, message["result"])
                self._write(raw if raw.endswith(b"\n") else raw + b"\n")
                if "id" in message and "method" not in message:  # the SDK's first answer is out
                    self.collect_again()

    def _check(self, early: dict[str, Any], answer: dict[str, Any]) -> None:
        """The SDK answered a request that was answered early: if not alike, the cache is wrong for
        this installation (it cannot tell every change apart), and the next start goes without it."""
        if answer.get("result") != early:
            mcp_manifest.forget()
            sys.stderr.write("remindful serve: the cached MCP manifest differed from the SDK's answer; dropped\n")
            sys.stderr.flush()

    def _record(self, kind: str, result: dict[str, Any]) -> None:
        """Keep the SDK's answer to a plain handshake; with both halves, write the cache."""
        self._recorded[kind] = result
        if len(self._recorded) == 2:
            try:
                mcp_manifest.write(mcp_manifest.record(self._recorded["initialize"], self._recorded["tools"]))
            except Exception as exc:  # a cache: losing it costs the next start its early answer, nothing else
                sys.stderr.write(f"remindful serve: could not cache the MCP manifest: {exc}\n")


def main(path: str | None = None) -> None:
    """Serve MCP over stdio, answering the handshake from the manifest cache while the SDK loads.

    The garbage collector is off until the SDK's first answer (:meth:`StdioFront.collect_again`):
    the imports before it make some 150,000 tracked objects that all live as long as the process,
    and the collections that their allocation sets off find nothing to free (what that costs the
    first answer: ``bench/mcp_cold_start.py --gc``)."""
    from remindful.runtime import exit_on_signals

    exit_on_signals()  # SIGTERM/SIGHUP: the daemon role's socket and daemon.json go too
    _interrupt_once()
    gc.disable()
    try:
        from remindful.shells.terminal import say_serving

        say_serving(path)  # on a terminal only: what runs, where the store is, how to connect
        StdioFront(path, mcp_manifest.load()).run()
    except KeyboardInterrupt:  # Ctrl-C before the front listened
        code: Any = 0
    except SystemExit as stop:  # Ctrl-C (StdioFront.run), SIGTERM or SIGHUP (exit_on_signals)
        code = stop.code
    else:
        _second_interrupt_stops_at_once()
        return  # the client closed stdin: the SDK has answered and stopped
    _second_interrupt_stops_at_once()
    stop_now(code)


#: How long a stop waits for the stores to close (queued writes done, index files written).
CLOSE_AT_STOP_S = 3.0


def stop_now(code: Any = 0) -> None:
    """End the process now, without waiting for the SDK's thread: the daemon role's endpoint files
    go, the exit handlers close the stores (for at most :data:`CLOSE_AT_STOP_S`), then the process
    exits without the interpreter's finalization. That finalization, with the SDK's thread inside
    the model's or Chroma's native code (loading them, say), tears their thread pools down under
    them and aborts the process ("terminate called without an active exception"); what a store
    had not written is what a crash leaves, which the next open completes."""
    import atexit
    import contextlib

    from remindful.runtime import remove_endpoints

    remove_endpoints()
    closing = threading.Thread(target=atexit._run_exitfuncs, name="remindful-close", daemon=True)
    closing.start()
    closing.join(CLOSE_AT_STOP_S)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a stream closed or gone
            stream.flush()
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))


def _interrupt_once() -> None:
    """A first Ctrl-C raises KeyboardInterrupt (the process then stops, as on SIGTERM); its handler
    itself makes any later one end the process at once, without a traceback. (Swapped only once the
    first had been caught, a second press that came in between met Python's own handler and printed
    a traceback.) A handler someone else set is left alone."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _first_interrupt)


def _first_interrupt(signum: int, frame: Any) -> None:
    import signal

    signal.signal(signal.SIGINT, _stop_at_once)
    raise KeyboardInterrupt


def _second_interrupt_stops_at_once() -> None:
    """From now on (the process is stopping) a Ctrl-C ends it at once, without a traceback, the
    daemon role's endpoint files removed first."""
    import signal

    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _first_interrupt):
        signal.signal(signal.SIGINT, _stop_at_once)


def _stop_at_once(signum: int, frame: Any) -> None:
    from remindful.runtime import remove_endpoints  # imported already: main() started with it

    remove_endpoints()
    os._exit(130)
