"""The SDK's streamable HTTP app at the wire, mirrored without importing it (too slow).

What :mod:`remindful.shells.mcp.http` needs to answer exactly as the ``mcp`` SDK's app would
(``mcp/server/streamable_http.py`` and ``transport_security.py``): the checks a request passes
before the app reads the message (path, Content-Type, Accept, Host, Origin), and the bytes of its
answers (a request's one SSE ``message`` event, a notification's empty 202). They change when the
SDK's do; ``tests/test_mcp_http.py`` and the HTTP end-to-end test compare them with the SDK's bytes.

Standard library and remindful's manifest only: this runs before the SDK is imported.
"""

from __future__ import annotations

from remindful.shells.mcp import manifest as mcp_manifest

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: every import here delays the first answer
if TYPE_CHECKING:
    from typing import Any

    Message = dict[str, Any]
    Headers = list[tuple[bytes, bytes]]
    Answer = tuple[int, Headers, list[Message]]  # status, headers, the http.response.body messages

PATH = "/mcp"
SESSION = b"mcp-session-id"
VERSION = b"mcp-protocol-version"
#: What the SDK's app allows when bound to 127.0.0.1 (DNS rebinding protection).
HOSTS = ("127.0.0.1:", "localhost:", "[::1]:")
ORIGINS = ("http://127.0.0.1:", "http://localhost:", "http://[::1]:")
SSE_HEADERS = [
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"content-type", b"text/event-stream"),
]


def header(headers: Headers, name: bytes) -> str | None:
    """The first value of ``name`` (as Starlette's ``Headers.get``), decoded as latin-1."""
    return next((v.decode("latin-1") for k, v in headers if k == name), None)


def _accepts_json_and_sse(accept: str) -> bool:
    types = [t.strip().split(";")[0].strip().lower() for t in accept.split(",")]
    wildcard = "*/*" in types
    has_json = wildcard or any(t in ("application/json", "application/*") for t in types)
    has_sse = wildcard or any(t in ("text/event-stream", "text/*") for t in types)
    return has_json and has_sse


def plain_post(scope: Message) -> bool:
    """Whether a request passes every check the SDK's app makes before reading the message."""
    headers = scope["headers"]
    if scope["method"] != "POST" or scope["path"] != PATH:
        return False
    content_type = header(headers, b"content-type") or ""
    host = header(headers, b"host") or ""
    origin = header(headers, b"origin")
    return (
        content_type.split(";")[0].strip() == "application/json"
        and _accepts_json_and_sse(header(headers, b"accept") or "")
        and any(host.startswith(h) for h in HOSTS)
        and (not origin or any(origin.startswith(o) for o in ORIGINS))
    )


def sse_answer(session_id: str, request_id: Any, result: Any) -> Answer:
    """A request's answer as the SDK's app sends it: one SSE ``message`` event, then the end."""
    data = mcp_manifest.render(request_id, result).encode("utf-8")
    headers = [*SSE_HEADERS, (SESSION, session_id.encode()), (b"x-accel-buffering", b"no")]
    event = b"event: message\r\ndata: " + data + b"\r\n\r\n"
    return 200, headers, [_body(event, more=True), _body(b"", more=False)]


def accepted(session_id: str) -> Answer:
    """A notification's answer as the SDK's app sends it (a Starlette ``Response`` without content)."""
    headers = [(b"content-type", b"application/json"), (SESSION, session_id.encode()), (b"content-length", b"0")]
    return 202, headers, [{"type": "http.response.body", "body": b""}]


def _body(data: bytes, *, more: bool) -> Message:
    return {"type": "http.response.body", "body": data, "more_body": more}
