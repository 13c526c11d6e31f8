"""What the MCP SDK's JSON-RPC parser refuses although the line is JSON, said in words.

The SDK reads each message with pydantic-core, which refuses a string holding a lone UTF-16
surrogate (``"\\ud800"``) and nesting deeper than :data:`SDK_MAX_DEPTH` containers. Over stdio it
then drops the line without an answer; over HTTP it answers a parse error that names neither
("unexpected end of hex escape"). Both transports answer here instead, naming the field:
:mod:`remindful.shells.mcp.fast_start` for stdio lines, :class:`remindful.shells.mcp.server.ReadableBodies`
for HTTP bodies. Standard library only, and nothing imported at all: stdio's first answers wait
for this module.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this runs before the first answer
if TYPE_CHECKING:
    from typing import Any

#: Containers the SDK's JSON parser (pydantic-core) nests; it refuses a deeper message.
SDK_MAX_DEPTH = 200
INVALID_REQUEST = -32600


def is_id(value: Any) -> bool:
    """A request id the SDK reads: with any other (1.5, true, null) it takes the request for a
    notification, and never answers it."""
    return type(value) is int or isinstance(value, str)


def sdk_misreads(body: bytes) -> dict[str, Any] | None:
    """The JSON-RPC error answer (invalid request, by the request's id, naming the field) for a
    body that is JSON but that the SDK refuses (see the module docstring); else None. Cheap for any
    other body: it is parsed only when it holds a surrogate escape or that many brackets."""
    text = body.decode("latin-1")  # only ASCII is looked at
    if not (surrogate_escape(text) or text.count("[") + text.count("{") > SDK_MAX_DEPTH):
        return None
    import json

    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None  # not JSON: the SDK says so itself
    why = beyond_the_sdk(body, message)
    if why is None:
        return None
    request_id = message.get("id") if isinstance(message, dict) else None
    error = {"code": INVALID_REQUEST, "message": f"Invalid request: {why}"}
    return {"jsonrpc": "2.0", "id": request_id if is_id(request_id) else None, "error": error}


def beyond_the_sdk(line: bytes | str, message: Any) -> str | None:
    """What in ``message`` (read from ``line``) the SDK's parser refuses although Python's reads
    it: nesting deeper than :data:`SDK_MAX_DEPTH`, a lone surrogate (``"\\ud800"``); else None.
    Only a line with that many brackets, or a surrogate escape, is walked."""
    text = line.decode("latin-1") if isinstance(line, bytes) else line  # only ASCII is looked at
    deep = text.count("[") + text.count("{") > SDK_MAX_DEPTH
    escapes = surrogate_escape(text)
    if not (deep or escapes):
        return None
    stack: list[tuple[Any, str, int]] = [(message, "", 1)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > SDK_MAX_DEPTH:
                return f"{_path(where)} is nested deeper than {SDK_MAX_DEPTH} levels; expected at most {SDK_MAX_DEPTH}"
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str):
                    if escapes and _lone_surrogate(key):
                        return f"a key in {_path(where)} holds {_lone_surrogate(key)}; expected valid Unicode text"
                    if not (key.isascii() and key.replace("_", "").isalnum()):
                        key = repr(key)[:40]  # a newline or a surrogate must not break the one-line answer
                        stack.append((item, f"{where}[{key}]", depth + 1))
                    else:
                        stack.append((item, f"{where}.{key}" if where else key, depth + 1))
                else:
                    stack.append((item, f"{where}[{key}]", depth + 1))
        elif escapes and isinstance(value, str) and _lone_surrogate(value):
            return f"{_path(where)} holds {_lone_surrogate(value)}; expected valid Unicode text"
    return None


def surrogate_escape(text: str) -> bool:
    """Whether ``text`` holds an escape ``\\uD800`` to ``\\uDFFF`` (no ``re``: it costs the first answer)."""
    at = text.find("\\u")
    while at != -1:
        pair = text[at + 2 : at + 4].lower()
        if len(pair) == 2 and pair[0] == "d" and pair[1] in "89abcdef":
            return True
        at = text.find("\\u", at + 2)
    return False


def _lone_surrogate(text: str) -> str | None:
    """``"a lone UTF-16 surrogate (\\ud800)"`` for the first one in ``text``, else None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone UTF-16 surrogate (\\u{ord(text[exc.start]):04x})"
    return None


def _path(where: str) -> str:
    if not where:
        return "the message"
    return where if len(where) <= 80 else where[:77] + "..."


__all__ = ["INVALID_REQUEST", "SDK_MAX_DEPTH", "beyond_the_sdk", "is_id", "sdk_misreads", "surrogate_escape"]
