"""A small HTTP/1.1 server for one ASGI app, on asyncio and h11: what ``remindful serve --transport http`` runs.

Why not uvicorn: importing it costs ~0.15-0.3 s (click, logging config, its supervisors), and the
HTTP front of the MCP server must answer ``tools/list`` within 0.5 s of the spawn. asyncio (which
the SDK needs anyway) and h11 (uvicorn's own HTTP/1.1 parser, already installed with it) cost a
fraction of that.

What it does, and all it does: keep-alive, request bodies read whole (up to ``max_body`` bytes,
else 413 as the MCP SDK answers), responses framed by h11 (``Content-Length`` when the app sets
it, chunked otherwise, so SSE streams flow as they are sent), ``http.disconnect`` when the client
goes away (an SSE stream's end), and a 500 when the app fails before answering. A bad request or a
failing app closes that connection only: the server keeps serving. No lifespan: the owner of the
app runs it.

Standard library and h11 only.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from http import HTTPStatus
from urllib.parse import unquote

import h11

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: keep the start cheap
if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from typing import Any

    App = Callable[
        [dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]],
        Awaitable[None],
    ]

log = logging.getLogger("remindful.http")

READ_SIZE = 65536
MAX_PIPELINED = 1 << 20  # bytes buffered from a client while its response runs; beyond, stop reading
TOO_LARGE = (413, b"Request body too large")


def _plain(status: int, text: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """A text answer with Starlette's headers (as ``Response(text, status_code=...)`` sends)."""
    return status, [(b"content-length", str(len(text)).encode()), (b"content-type", b"text/plain; charset=utf-8")], text


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


class _Connection:
    """One client connection: request cycles in order until either side closes."""

    def __init__(self, app: App, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_body: int) -> None:
        self.app = app
        self.reader = reader
        self.writer = writer
        self.max_body = max_body
        self.h11 = h11.Connection(h11.SERVER)
        self.closed = asyncio.Event()  # the client went away (EOF or a socket error)
        self.client = writer.get_extra_info("peername") or ("", 0)
        self.server = writer.get_extra_info("sockname") or ("", 0)

    async def run(self) -> None:
        try:
            while True:
                request = await self._next_request()
                if request is None:
                    return
                body = await self._read_body()
                if body is None:
                    return
                await self._cycle(request, body)
                if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE and not self.closed.is_set():
                    self.h11.start_next_cycle()
                else:
                    return
        except h11.RemoteProtocolError as exc:
            await self._reject(exc.error_status_hint, f"Bad Request: {exc}".encode())
        except (ConnectionError, OSError):
            pass
        except Exception:  # the server must outlive any one connection
            log.exception("HTTP connection failed")
        finally:
            self.writer.close()

    async def _next_event(self) -> Any:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = b"" if self.closed.is_set() else await self.reader.read(READ_SIZE)
            self.h11.receive_data(data)
            if not data:
                self.closed.set()

    async def _next_request(self) -> h11.Request | None:
        event = await self._next_event()
        if isinstance(event, h11.Request):
            return event
        return None  # ConnectionClosed, or PAUSED (the client must not send before we answered)

    async def _read_body(self) -> bytes | None:
        """The whole body, or None after answering 413 (the connection then closes)."""
        if self.h11.they_are_waiting_for_100_continue:  # curl asks so for bodies over 1 KiB
            self._write(h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue"))
            await self.writer.drain()
        chunks: list[bytes] = []
        size = 0
        while True:
            event = await self._next_event()
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > self.max_body:
                    await self._reject(*TOO_LARGE)
                    return None
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(chunks)
            else:  # ConnectionClosed mid-body
                return None

    async def _reject(self, status: int, text: bytes) -> None:
        if self.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        status, headers, body = _plain(status, text)
        headers.append((b"connection", b"close"))
        try:
            self._write(h11.Response(status_code=status, headers=headers, reason=_reason(status)))
            self._write(h11.Data(data=body))
            self._write(h11.EndOfMessage())
            await self.writer.drain()
        except (h11.LocalProtocolError, ConnectionError, OSError):
            pass

    def _write(self, event: Any) -> None:
        data = self.h11.send(event)
        if data and not self.writer.is_closing():
            self.writer.write(data)

    async def _watch(self) -> None:
        """While the app answers: notice the client leaving; buffer what it sends next."""
        buffered = 0
        while buffered < MAX_PIPELINED:
            try:
                data = await self.reader.read(READ_SIZE)
            except (ConnectionError, OSError):
                data = b""
            if not data:
                self.closed.set()
                return
            buffered += len(data)
            self.h11.receive_data(data)

    async def _cycle(self, request: h11.Request, body: bytes) -> None:
        target = bytes(request.target)
        raw_path, _, query = target.partition(b"?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": request.http_version.decode(),
            "method": request.method.decode("ascii"),
            "scheme": "http",
            "path": unquote(raw_path.decode("latin-1")),
            "raw_path": raw_path,
            "query_string": query,
            "root_path": "",
            "headers": [(bytes(name), bytes(value)) for name, value in request.headers],
            "client": tuple(self.client[:2]),
            "server": tuple(self.server[:2]),
            "state": {},
        }
        pending: list[dict[str, Any]] = [{"type": "http.request", "body": body, "more_body": False}]
        done = asyncio.Event()  # the response was sent completely

        async def receive() -> dict[str, Any]:
            if pending:
                return pending.pop()
            if not (self.closed.is_set() or done.is_set()):
                waits = [asyncio.ensure_future(self.closed.wait()), asyncio.ensure_future(done.wait())]
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for wait in waits:
                        wait.cancel()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if self.closed.is_set():
                return  # as uvicorn: the app learns of it from receive()
            kind = message["type"]
            if kind == "http.response.start" and self.h11.our_state is h11.SEND_RESPONSE:
                headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
                self._write(
                    h11.Response(status_code=int(message["status"]), headers=headers, reason=_reason(message["status"]))
                )
            elif kind == "http.response.body" and self.h11.our_state is h11.SEND_BODY:
                if message.get("body"):
                    self._write(h11.Data(data=bytes(message["body"])))
                if not message.get("more_body", False):
                    self._write(h11.EndOfMessage())
                    done.set()
            else:
                raise RuntimeError(f"unexpected ASGI message {kind!r} in state {self.h11.our_state}")
            try:
                await self.writer.drain()
            except (ConnectionError, OSError):
                self.closed.set()

        watcher = asyncio.ensure_future(self._watch())
        try:
            await self.app(scope, receive, send)
        except Exception:
            log.exception("the MCP app failed on %s %s", scope["method"], scope["path"])
            if self.h11.our_state is h11.SEND_RESPONSE:
                status, headers, text = _plain(500, b"Internal Server Error")
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": text})
        finally:
            done.set()
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)  # one reader at a time
        if self.h11.our_state is h11.SEND_RESPONSE and not self.closed.is_set():  # the app sent nothing
            status, headers, text = _plain(500, b"Internal Server Error")
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": text})


async def start(app: App, host: str, port: int, *, max_body: int) -> asyncio.Server:
    """Listen on ``host:port`` (bound before this returns) and serve ``app`` on every connection."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _Connection(app, reader, writer, max_body).run()

    return await asyncio.start_server(connection, host, port, reuse_address=sys.platform != "win32", limit=READ_SIZE)
