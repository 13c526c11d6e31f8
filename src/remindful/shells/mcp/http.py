"""The streamable HTTP front of ``remindful serve --transport http``: answer at once, then hand over to the SDK.

Why: importing the ``mcp`` SDK (and uvicorn) costs 1.5-2.5 s, far above the 0.5 s cold-start
budget. So the process binds 127.0.0.1:PORT at once with a small HTTP server
(:mod:`remindful.shells.mcp.asgi_h11`) and imports the SDK in a thread. Until the SDK is up, these
requests are answered from the manifest shipped in the package (:mod:`remindful.shells.mcp.manifest`),
exactly as the SDK's streamable HTTP app answers them (status, headers, SSE or JSON bytes):

- ``initialize`` without a session: a new *front session* with its own ``Mcp-Session-Id``, the
  protocol version negotiated as the SDK does;
- ``notifications/initialized`` in a front session: 202;
- ``tools/list`` without parameters in an initialized front session;
- sessionless, in the 2026-07-28 era the SDK client's default ``mode="auto"`` speaks:
  ``server/discover`` and ``tools/list`` with a plain envelope (:mod:`remindful.shells.mcp.modern`).

Only plain requests are answered early (the SDK's Host/Origin/Content-Type/Accept checks pass,
the JSON-RPC shape is the one the SDK accepts, the manifest applies); anything else waits for the
SDK and gets the SDK's own answer. Those checks and the answers' bytes are mirrored in
:mod:`remindful.shells.mcp.http_wire`. Once the SDK is up every request goes to its ASGI app,
in-process. A front session becomes an SDK session on its first request after that: the front
sends the SDK the client's original ``initialize`` (and ``initialized`` if the client sent it),
remembers the SDK's session id, and from then on rewrites ``Mcp-Session-Id`` in both directions —
on requests, and on every response, SSE streams included — so the client keeps the id it was
given. Sessions opened after the handover, and 2026-era requests, go to the SDK untouched.

Standard library, h11 and remindful's manifest only until the SDK is imported.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import threading

from remindful.shells.mcp import asgi_h11
from remindful.shells.mcp import errors as mcp_errors
from remindful.shells.mcp import manifest as mcp_manifest
from remindful.shells.mcp import modern as mcp_modern
from remindful.shells.mcp.fast_start import plain_initialize
from remindful.shells.mcp.http_wire import SESSION, VERSION, accepted, header, plain_post, sse_answer

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: every import here delays the first answer
if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from typing import Any

    from remindful.shells.mcp.http_wire import Answer, Headers, Message

    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]

log = logging.getLogger("remindful.mcp")

#: The SDK's defaults (mcp.server.transport_security / streamable_http_manager), not imported: too slow.
MAX_BODY = 4 * 1024 * 1024
MAX_FRONT_SESSIONS = 10_000


class FrontSession:
    """A session the front opened: what it must replay to the SDK, and the SDK's id once it did."""

    def __init__(self, session_id: str, version: str, opening: tuple[Message, bytes]) -> None:
        self.id = session_id
        self.version = version  # the negotiated protocol version
        self.initialize = opening  # (scope, body) of the client's initialize
        self.initialized: tuple[Message, bytes] | None = None
        self.sdk_id: str | None = None
        self.lock = asyncio.Lock()
        self.replayed = False


class HttpFront:
    """The ASGI app the HTTP server runs: early answers, then the SDK's app. See the module docstring.

    ``sdk_app`` is None until :meth:`attach`; ``manifest`` None disables early answers.
    """

    def __init__(self, manifest: dict[str, Any] | None) -> None:
        self.manifest = manifest
        self.sessions: dict[str, FrontSession] = {}
        self.sdk_app: Callable[[Message, Receive, Send], Awaitable[None]] | None = None
        self.ready = asyncio.Event()

    def attach(self, sdk_app: Callable[[Message, Receive, Send], Awaitable[None]]) -> None:
        """Hand every request from now on to ``sdk_app`` (whose lifespan the caller runs)."""
        self.sdk_app = sdk_app
        self.ready.set()

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:  # the server hands over the whole body at once; other ASGI servers may not
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        if self.sdk_app is None:
            answer = self.early(scope, body)
            if answer is not None:
                status, headers, bodies = answer
                await send({"type": "http.response.start", "status": status, "headers": headers})
                for message in bodies:
                    await send(message)
                return
            await self.ready.wait()
        await self.forward(scope, body, receive, send)

    # -- before the SDK: the three early answers ------------------------------------------------

    def early(self, scope: Message, body: bytes) -> Answer | None:
        """The SDK's answer to a plain request it would surely answer so, else None (then it waits)."""
        if self.manifest is None or not plain_post(scope):
            return None
        try:
            message = json.loads(body)
        except ValueError:  # UnicodeDecodeError included
            return None
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return None
        if not set(message) <= {"jsonrpc", "id", "method", "params"}:
            return None
        request_id = message.get("id")
        if "id" in message and not isinstance(request_id, str) and type(request_id) is not int:
            return None  # a float, bool or null id: the SDK's own answer (or error) only
        method, params = message.get("method"), message.get("params")
        headers = scope["headers"]
        session_id, version = header(headers, SESSION), header(headers, VERSION)
        if version is not None and version not in self.manifest["handshake_versions"]:
            return mcp_modern.http_answer(self.manifest, headers, message)  # the SDK routes by this header alone
        if session_id is None:
            if method != "initialize" or "id" not in message or len(self.sessions) >= MAX_FRONT_SESSIONS:
                return None
            requested = plain_initialize(params)
            if requested is None:
                return None
            result = mcp_manifest.initialize_answer(self.manifest, requested)
            opened = FrontSession(os.urandom(16).hex(), result["protocolVersion"], (scope, body))
            self.sessions[opened.id] = opened
            return sse_answer(opened.id, request_id, result)
        session = self.sessions.get(session_id)
        if session is None or session.replayed or (version is not None and version != session.version):
            return None
        if method == "notifications/initialized" and "id" not in message and isinstance(params, dict | None):
            session.initialized = (scope, body)
            return accepted(session_id)
        if method == "tools/list" and "id" in message and params in (None, {}) and session.initialized:
            tools = mcp_manifest.tools_answer(self.manifest, session.version)
            return None if tools is None else sse_answer(session.id, request_id, tools)
        return None

    # -- after: everything to the SDK, front sessions translated --------------------------------

    async def forward(self, scope: Message, body: bytes, receive: Receive, send: Send) -> None:
        assert self.sdk_app is not None
        if plain_post(scope):
            error = mcp_errors.unreadable(body)
            if error is not None and error["error"]["code"] != mcp_errors.PARSE_ERROR:  # the SDK's says where
                content = json.dumps(error, separators=(",", ":")).encode()
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode())]
                await send({"type": "http.response.start", "status": 400, "headers": headers})
                await send({"type": "http.response.body", "body": content})
                return
        session_id, version = header(scope["headers"], SESSION), header(scope["headers"], VERSION)
        legacy = version is None or (self.manifest is not None and version in self.manifest["handshake_versions"])
        session = self.sessions.get(session_id) if session_id and legacy else None  # the 2026 era is sessionless
        if session is not None:
            sdk_id = await self._sdk_session(session)
            if sdk_id is not None:
                scope = {**scope, "headers": _with_session(scope["headers"], sdk_id)}
                send = _renaming(send, sdk_id, session.id)
        await self.sdk_app(scope, _body_then(body, receive), send)

    async def _sdk_session(self, session: FrontSession) -> str | None:
        """The SDK's session for a front session, opened on first use with the client's own requests.
        None if the SDK refused them (then the request goes on unchanged and the SDK answers 404)."""
        async with session.lock:
            if session.replayed:
                return session.sdk_id
            session.replayed = True
            opening_scope, opening_body = session.initialize
            status, headers, content = await self._internal(opening_scope, opening_body)
            sdk_id = header(headers, SESSION)
            if status != 200 or sdk_id is None:
                log.warning("the SDK refused a session the front opened (%s): %s", status, content[:300])
                return None
            self._check(session, opening_body, content)
            if session.initialized is not None:
                scope, body = session.initialized
                await self._internal({**scope, "headers": _with_session(scope["headers"], sdk_id)}, body)
            session.sdk_id = sdk_id
            return sdk_id

    def _check(self, session: FrontSession, opening_body: bytes, content: bytes) -> None:
        """Log when the SDK's initialize answer is not the one the front gave (a stale manifest)."""
        assert self.manifest is not None
        request = json.loads(opening_body)
        early = mcp_manifest.initialize_answer(self.manifest, request["params"]["protocolVersion"])
        expected = b"".join(m["body"] for m in sse_answer(session.id, request["id"], early)[2])
        if content != expected:
            log.warning(
                "the early initialize answer differed from the SDK's: the shipped manifest is stale "
                "(python -m remindful.shells.mcp.manifest)"
            )

    async def _internal(self, scope: Message, body: bytes) -> tuple[int, Headers, bytes]:
        """One request to the SDK's app from the front itself: status, headers and whole body."""
        assert self.sdk_app is not None
        done = asyncio.Event()
        answer: dict[str, Any] = {"status": 0, "headers": [], "body": b""}

        async def disconnect_when_answered() -> Message:
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer["status"], answer["headers"] = int(message["status"]), list(message.get("headers", []))
            elif message["type"] == "http.response.body":
                answer["body"] += message.get("body", b"")
                if not message.get("more_body", False):
                    done.set()

        try:
            await self.sdk_app(scope, _body_then(body, disconnect_when_answered), send)
        finally:
            done.set()
        return answer["status"], answer["headers"], answer["body"]


def _body_then(body: bytes, then: Receive) -> Receive:
    """An ASGI receive that gives the (already read) request ``body`` first, then defers to ``then``."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await then()

    return receive


def _with_session(headers: Headers, session_id: str) -> Headers:
    return [(k, session_id.encode() if k == SESSION else v) for k, v in headers]


def _renaming(send: Send, sdk_id: str, front_id: str) -> Send:
    """``send`` with the SDK's session id in response headers replaced by the front's."""
    old, new = sdk_id.encode(), front_id.encode()

    async def renamed(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, new if k == SESSION and v == old else v) for k, v in message.get("headers", [])]
            message = {**message, "headers": headers}
        await send(message)

    return renamed


# -- the process ------------------------------------------------------------------------------------


async def serve(port: int, *, host: str = "127.0.0.1", path: str | None = None, manifest: bool = True) -> int:
    """Bind, answer early, load the SDK in a thread, serve until SIGTERM/SIGINT. Returns the exit code."""
    front = HttpFront(mcp_manifest.load() if manifest else None)
    try:
        server = await asgi_h11.start(front, host, port, max_body=MAX_BODY)
    except OSError as exc:
        sys.stderr.write(f"remindful serve: cannot listen on {host}:{port}: {exc}\n")
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    failed: list[BaseException] = []
    sdk = asyncio.ensure_future(_run_sdk(front, path, host, stop, failed))
    try:
        await stop.wait()
    finally:
        server.close()
        sdk.cancel()
        await asyncio.gather(sdk, return_exceptions=True)
    return 1 if failed else 0


async def _run_sdk(
    front: HttpFront, path: str | None, host: str, stop: asyncio.Event, failed: list[BaseException]
) -> None:
    """Import and build the SDK server off the loop, run its session manager, attach its app."""
    try:
        manager, server = await _in_daemon_thread(_build, path)
    except Exception as exc:
        log.exception("the MCP SDK server could not be built")
        failed.append(exc)
        stop.set()
        return
    from remindful.shells.mcp.server import start_daemon_later

    app = server.streamable_http_app(host=host)
    stop_daemon = start_daemon_later(manager)
    try:
        async with server.session_manager.run():
            front.attach(app)
            await asyncio.Event().wait()  # until cancelled at shutdown
    except Exception as exc:  # the session manager died: stop rather than answer 500 forever
        log.exception("the MCP SDK session manager failed")
        failed.append(exc)
        stop.set()
    finally:
        await asyncio.to_thread(stop_daemon)
        manager.close()


def _in_daemon_thread(function: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    """``function(*args)`` in a daemon thread: unlike ``asyncio.to_thread``, a SIGTERM during the
    SDK import does not wait for the import to finish."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(outcome: Any, failed: bool) -> None:
        if not future.done():
            (future.set_exception if failed else future.set_result)(outcome)

    def run() -> None:
        try:
            outcome, failed = function(*args), False
        except BaseException as exc:
            outcome, failed = exc, True
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server stopped meanwhile
            loop.call_soon_threadsafe(settle, outcome, failed)

    threading.Thread(target=run, name="remindful-mcp-sdk", daemon=True).start()
    return future


def _build(path: str | None) -> tuple[Any, Any]:
    from remindful.shells.mcp.server import LazyManager, build_server

    manager = LazyManager(path)
    return manager, build_server(manager)


def main(port: int = 8000, path: str | None = None) -> None:
    """Serve MCP over streamable HTTP at ``http://127.0.0.1:{port}/mcp`` with the early-answer front."""
    code = asyncio.run(serve(port, path=path))
    if code:
        raise SystemExit(code)
