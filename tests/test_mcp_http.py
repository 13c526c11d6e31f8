"""The HTTP front of `remindful serve --transport http`: early answers equal the SDK's, sessions survive the handover.

In-process here (the front and the SDK's ASGI app side by side, and the small HTTP server against a
trivial app); the spawned server is driven by real clients in test_mcp_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from remindful.shells.mcp import asgi_h11
from remindful.shells.mcp import manifest as mcp_manifest
from remindful.shells.mcp import modern as mcp_modern
from remindful.shells.mcp.http import HttpFront
from remindful.shells.mcp.server import LazyManager, build_server
from remindful.testing import open_fake

pytestmark = pytest.mark.anyio

HEADERS = {
    "host": "127.0.0.1:8000",
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def initialize(version: str, request_id: Any = 1) -> dict[str, Any]:
    params = {"protocolVersion": version, "capabilities": {"roots": {}}, "clientInfo": {"name": "t", "version": "1"}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


async def call(
    app: Any, method: str, body: Any = None, session: str | None = None, *, raw: bytes | None = None, **headers: str
) -> list[Any]:
    """One request through an ASGI app (``raw``: its body as is); the ASGI messages it sent back."""
    all_headers = {**HEADERS, **({"mcp-session-id": session} if session else {}), **headers}
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": [(k.encode(), v.encode()) for k, v in all_headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    data = raw if raw is not None else b"" if body is None else json.dumps(body, ensure_ascii=False).encode()
    messages: list[Any] = []
    done = asyncio.Event()
    pending = [{"type": "http.request", "body": data, "more_body": False}]

    async def receive() -> Any:
        if pending:
            return pending.pop()
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        messages.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            done.set()

    await asyncio.wait_for(app(scope, receive, send), 30)
    return messages


def session_of(messages: list[Any]) -> str:
    return dict(messages[0]["headers"])[b"mcp-session-id"].decode()


def anonymous(messages: list[Any], session: str) -> list[Any]:
    """``messages`` with the session id replaced, the status as a plain int."""
    out = []
    for m in messages:
        m = dict(m)
        if m["type"] == "http.response.start":
            m["status"] = int(m["status"])
            m["headers"] = [(k, b"SID" if v == session.encode() else v) for k, v in m["headers"]]
        out.append(m)
    return out


def sse_result(messages: list[Any]) -> Any:
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body").decode()
    (data,) = [line[6:] for line in body.splitlines() if line.startswith("data: ")]
    return json.loads(data)


@pytest.fixture
async def sdk(tmp_path: Path) -> AsyncIterator[Any]:
    """The SDK's own streamable HTTP app (session manager running) over a fake store."""
    manager = LazyManager(factory=lambda: open_fake(tmp_path / "store"))
    server = build_server(manager)
    app = server.streamable_http_app()
    async with server.session_manager.run():
        yield app
    manager.close()


@pytest.fixture(scope="module")
def shipped() -> dict[str, Any]:
    data = mcp_manifest.load()
    assert data is not None, "the shipped manifest does not apply: run python -m remindful.shells.mcp.manifest"
    return data


@pytest.mark.parametrize("requested", [*HANDSHAKE_PROTOCOL_VERSIONS, "1999-01-01"])
async def test_early_answers_are_the_sdk_answers(sdk: Any, shipped: dict[str, Any], requested: str) -> None:
    """initialize, initialized and tools/list: the same ASGI messages (status, headers, SSE bytes)
    from the front before the SDK is up as from the SDK's app, but for the session id."""
    front = HttpFront(shipped)
    answers = {}
    for name, app in (("front", front), ("sdk", sdk)):
        opened = await call(app, "POST", initialize(requested, "init-ü"))
        sid = session_of(opened)
        answers[name] = [
            anonymous(opened, sid),
            anonymous(await call(app, "POST", INITIALIZED, sid), sid),
            anonymous(await call(app, "POST", {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}, sid), sid),
            anonymous(
                await call(app, "POST", {"jsonrpc": "2.0", "id": "é", "method": "tools/list", "params": {}}, sid), sid
            ),
        ]
    assert front.sdk_app is None  # all four answered by the front itself
    assert answers["front"] == answers["sdk"]


async def test_a_front_session_keeps_working_after_the_handover(sdk: Any, shipped: dict[str, Any]) -> None:
    front = HttpFront(shipped)
    sid = session_of(await call(front, "POST", initialize("2025-06-18")))
    await call(front, "POST", INITIALIZED, sid, **{"mcp-protocol-version": "2025-06-18"})
    store = {"name": "memory_store", "arguments": {"content": "The deploy script needs AWS_PROFILE=prod"}}
    waiting = asyncio.ensure_future(
        call(front, "POST", {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": store}, sid)
    )
    await asyncio.sleep(0.2)
    assert not waiting.done()  # a tool call waits for the SDK
    front.attach(sdk)
    stored = await waiting
    assert session_of(stored) == sid  # the SDK's session id never reaches the client
    assert sse_result(stored)["result"]["structuredContent"]["success"] is True
    search = {"name": "memory_search", "arguments": {"query": "AWS_PROFILE"}}
    found = await call(front, "POST", {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": search}, sid)
    assert sse_result(found)["result"]["structuredContent"]["memories"]
    listed = await call(front, "POST", {"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, sid)
    assert sse_result(listed)["result"] == mcp_manifest.tools_answer(shipped, "2025-06-18")
    deleted = await call(front, "DELETE", None, sid)
    assert deleted[0]["status"] == 200 and session_of(deleted) == sid
    gone = await call(front, "POST", {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, sid)
    assert gone[0]["status"] == 404
    # A session opened after the handover is the SDK's own.
    later = await call(front, "POST", initialize("2025-11-25"))
    assert session_of(later) not in front.sessions


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"host": "evil.example:8000"}, "a Host the SDK refuses"),
        ({"host": "127.0.0.1"}, "a Host without a port (the SDK allows 127.0.0.1:* only)"),
        ({"origin": "http://evil.example"}, "a foreign Origin"),
        ({"accept": "application/json"}, "no text/event-stream in Accept"),
        ({"content-type": "text/plain"}, "not JSON"),
        ({"mcp-protocol-version": MODERN_PROTOCOL_VERSIONS[-1]}, "the 2026-era path"),
    ],
)
async def test_an_unusual_initialize_is_left_to_the_sdk(
    shipped: dict[str, Any], change: dict[str, str], why: str
) -> None:
    front = HttpFront(shipped)
    waiting = asyncio.ensure_future(call(front, "POST", initialize("2025-06-18"), **change))
    await asyncio.sleep(0.05)
    assert not waiting.done(), why
    waiting.cancel()
    assert not front.sessions


async def test_only_plain_requests_in_a_front_session_are_answered_early(shipped: dict[str, Any]) -> None:
    front = HttpFront(shipped)
    sid = session_of(await call(front, "POST", initialize("2025-06-18")))
    tools = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    scope = {"method": "POST", "path": "/mcp"}

    def early(body: Any, session: str | None = sid, **extra: str) -> Any:
        headers = {**HEADERS, **({"mcp-session-id": session} if session else {}), **extra}
        raw = [(k.encode(), v.encode()) for k, v in headers.items()]
        return front.early({**scope, "headers": raw}, json.dumps(body).encode())

    assert early(tools) is None  # before notifications/initialized
    assert early(INITIALIZED)[0] == 202
    assert early(tools)[0] == 200
    assert early(tools, session="unknown") is None
    assert early({**tools, "params": {"cursor": "x"}}) is None
    assert early({**tools, "id": 2.5}) is None
    assert early({**tools, "extra": 1}) is None
    assert early(tools, **{"mcp-protocol-version": "2025-03-26"}) is None  # not the negotiated version
    assert early({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "memory_stats"}}) is None
    assert early({**initialize("2025-06-18"), "id": None}, session=None) is None
    assert HttpFront(None).early({**scope, "headers": []}, b"{}") is None  # no manifest: no early answers


# -- the 2026-07-28 era: sessionless, routed by the MCP-Protocol-Version header ----------------------


def modern_request(method: str, version: str, request_id: Any, **params: Any) -> dict[str, Any]:
    meta = mcp_modern.envelope(version, {"name": "mcp", "version": "0.1.0"}, {})
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": meta}}


def modern_headers(request: dict[str, Any]) -> dict[str, str]:
    version = request["params"]["_meta"][mcp_modern.VERSION_KEY]
    return {"mcp-protocol-version": version, "mcp-method": request["method"]}


@pytest.mark.parametrize("version", [*MODERN_PROTOCOL_VERSIONS, "2099-01-01"])
async def test_early_modern_answers_are_the_sdk_answers(sdk: Any, shipped: dict[str, Any], version: str) -> None:
    """server/discover and tools/list as the SDK client's auto mode sends them: the same ASGI
    messages (status, headers, JSON bytes, non-ASCII escaped) from the front before the SDK is up
    as from the SDK's app; -32022 (status 400) at a version it does not serve."""
    front = HttpFront(shipped)
    answers = {}
    for name, app in (("front", front), ("sdk", sdk)):
        answers[name] = []
        for request in (modern_request("server/discover", version, "é"), modern_request("tools/list", version, 2)):
            answers[name].append(await call(app, "POST", request, **modern_headers(request)))
    assert front.sdk_app is None and not front.sessions  # answered by the front itself, no session
    for messages in answers["sdk"]:
        messages[0]["status"] = int(messages[0]["status"])
    assert answers["front"] == answers["sdk"]
    assert answers["front"][0][0]["status"] == (200 if version in MODERN_PROTOCOL_VERSIONS else 400)
    assert b"\\u00e9" in answers["front"][0][1]["body"]  # the id "é", as json.dumps escapes it


async def test_modern_requests_wait_for_the_sdk_then_go_to_it_unchanged(sdk: Any, shipped: dict[str, Any]) -> None:
    front = HttpFront(shipped)
    version = MODERN_PROTOCOL_VERSIONS[-1]
    store = modern_request("tools/call", version, 3, name="memory_store", arguments={"content": "AWS_PROFILE=prod"})
    headers = {**modern_headers(store), "mcp-name": "memory_store"}
    waiting = asyncio.ensure_future(call(front, "POST", store, **headers))
    await asyncio.sleep(0.2)
    assert not waiting.done()  # a tool call waits for the SDK
    front.attach(sdk)
    stored = await waiting
    assert b"mcp-session-id" not in dict(stored[0]["headers"])
    assert json.loads(stored[-1]["body"])["result"]["structuredContent"]["success"] is True
    listed = await call(front, "POST", modern_request("tools/list", version, 4), **modern_headers(store))
    assert listed[0]["status"] == 400  # Mcp-Method says tools/call: the SDK's HEADER_MISMATCH, from the SDK


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"mcp-method": "tools/call"}, "Mcp-Method differs from the body's method"),
        ({"mcp-protocol-version": "2099-01-01"}, "the header's version differs from the envelope's"),
        ({"mcp-name": "x", "Mcp-Name": "y"}, "a repeated routing header"),
        ({"accept": "application/json"}, "no text/event-stream in Accept"),
        ({"host": "evil.example:8000"}, "a Host the SDK refuses"),
    ],
)
async def test_an_unusual_modern_request_is_left_to_the_sdk(
    shipped: dict[str, Any], change: dict[str, str], why: str
) -> None:
    request = modern_request("tools/list", MODERN_PROTOCOL_VERSIONS[-1], 1)
    headers = {**HEADERS, **modern_headers(request)}
    raw = [(k.encode(), v.encode()) for k, v in headers.items() if k not in change]
    raw += [(k.lower().encode(), v.encode()) for k, v in change.items()]
    scope = {"method": "POST", "path": "/mcp", "headers": raw}
    assert HttpFront(shipped).early(scope, json.dumps(request).encode()) is None, why
    plain = {"method": "POST", "path": "/mcp", "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}
    assert HttpFront(shipped).early(plain, json.dumps(request).encode()) is not None


# -- the small HTTP server -----------------------------------------------------------------------


async def echo(scope: Any, receive: Any, send: Any) -> None:
    body = (await receive())["body"]
    if scope["path"] == "/fail":
        raise RuntimeError("boom")
    if scope["path"] == "/stream":  # chunked, like an SSE answer
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for part in (b"one\n", b"two\n"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def exchange(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return data


async def test_the_http_server_survives_bad_requests_and_failing_apps() -> None:
    server = await asgi_h11.start(echo, "127.0.0.1", 0, max_body=100)
    port = server.sockets[0].getsockname()[1]
    try:
        assert (await exchange(port, b"NOT HTTP AT ALL\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
        too_big = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\nConnection: close\r\n\r\n" + b"x" * 101
        assert (await exchange(port, too_big)).startswith(b"HTTP/1.1 413 ")
        failed = await exchange(port, b"GET /fail HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert failed.startswith(b"HTTP/1.1 500 ")
        streamed = await exchange(port, b"GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert b"transfer-encoding: chunked" in streamed.lower() and b"one\n" in streamed and b"two\n" in streamed
        # Keep-alive: two requests on one connection, then a clean close.
        two = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"
        two += b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbye"
        answers = await exchange(port, two)
        assert answers.count(b"HTTP/1.1 200 ") == 2 and answers.endswith(b"bye")
        expecting = (
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(expecting)
        assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).startswith(b"HTTP/1.1 100 ")
        writer.write(b"ok")
        assert (await asyncio.wait_for(reader.read(), 10)).endswith(b"ok")
        writer.close()
    finally:
        server.close()


async def test_the_http_server_tells_the_app_when_the_client_leaves() -> None:
    left = asyncio.Event()

    async def hold(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b": open\n\n", "more_body": True})
        assert (await receive())["type"] == "http.disconnect"
        left.set()

    server = await asgi_h11.start(hold, "127.0.0.1", 0, max_body=100)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await reader.readuntil(b": open\n\n")
        writer.close()
        await asyncio.wait_for(left.wait(), 10)
    finally:
        server.close()


@pytest.mark.parametrize(
    ("body", "answer"),
    [
        (
            {"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"},  # the SDK took it for a notification: 202, no answer
            {
                "id": None,
                "code": -32600,
                "message": "Invalid request: id: Input should be a valid integer or a valid string",
            },
        ),
        (
            {"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": 7},
            {"id": 8, "code": -32600, "message": "Invalid request: params: Input should be a valid dictionary"},
        ),
        (
            {"id": 7, "method": "tools/list"},
            {"id": 7, "code": -32600, "message": "Invalid request: jsonrpc: Field required"},
        ),
        ([1, 2], {"id": None, "code": -32600, "message": "Invalid request: expected a JSON object, got list"}),
    ],
)
async def test_an_unreadable_message_gets_an_error_naming_the_field(
    sdk: Any, shipped: dict[str, Any], body: Any, answer: dict[str, Any]
) -> None:
    """The SDK answered these with its validator's whole dump (code -32602, id null), or not at
    all; the answer now names the field at fault, with the request's id, and the session goes on."""
    front = HttpFront(shipped)
    front.attach(sdk)
    sid = session_of(await call(front, "POST", initialize("2025-06-18")))
    await call(front, "POST", INITIALIZED, sid, **{"mcp-protocol-version": "2025-06-18"})
    bad = await call(front, "POST", body, sid)
    assert bad[0]["status"] == 400
    error = json.loads(b"".join(m.get("body", b"") for m in bad[1:]))
    assert {"id": error["id"], **error["error"]} == answer
    listed = await call(front, "POST", {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}, sid)
    assert sse_result(listed)["result"] == mcp_manifest.tools_answer(shipped, "2025-06-18")


async def test_fuzzed_bodies_never_stop_the_http_front(sdk: Any, shipped: dict[str, Any]) -> None:
    """Two hundred bodies, mangled at random around valid tool calls, in one session: every
    answer is a JSON-RPC result, or a short JSON-RPC error carrying the request's id when usable
    (202 only for a notification), and the session still serves afterwards."""
    rng = random.Random(20261122)
    front = HttpFront(shipped)
    front.attach(sdk)
    sid = session_of(await call(front, "POST", initialize("2025-06-18")))
    await call(front, "POST", INITIALIZED, sid, **{"mcp-protocol-version": "2025-06-18"})
    valid = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "memory_stats", "arguments": {}}}
    junk: list[Any] = [None, True, 1.5, -1, "", "x" * 300, [], {}, {"a": [1, {"b": None}]}, "\u0000", "é"]
    for n in range(2, 202):
        message: dict[str, Any] = {**valid, "id": n}
        roll, body = rng.random(), None
        if roll < 0.6:
            message[rng.choice(["jsonrpc", "id", "method", "params"])] = rng.choice(junk)
        elif roll < 0.8:
            text = json.dumps(message)
            body = text[: rng.randrange(len(text))].encode()
        elif roll < 0.9:
            message = rng.choice(junk)
        answer = await call(front, "POST", message, sid, raw=body)
        status = int(answer[0]["status"])
        content = b"".join(m.get("body", b"") for m in answer[1:])
        if status == 200:
            reply = sse_result(answer) if content.startswith(b"event:") else json.loads(content)
            assert reply["id"] == message.get("id") and ("result" in reply or "error" in reply), reply
        elif status == 202:  # a notification: nothing to answer
            assert body is None and isinstance(message, dict) and "id" not in message, message
        else:  # JSON-RPC's parse error or invalid request, short, with the id when it is usable
            assert status == 400, (status, content)
            error = json.loads(content)
            assert error["error"]["code"] in (-32700, -32600) and len(error["error"]["message"]) < 200, error
            usable = isinstance(message, dict) and type(message.get("id")) in (int, str) and body is None
            assert error["id"] == (message["id"] if usable else None), (message, error)
    listed = await call(front, "POST", {"jsonrpc": "2.0", "id": 999, "method": "tools/list"}, sid)
    assert sse_result(listed)["result"] == mcp_manifest.tools_answer(shipped, "2025-06-18")
