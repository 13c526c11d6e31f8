"""JSON-RPC errors for the messages the MCP SDK cannot read, shared by the stdio and HTTP fronts.

The SDK drops a stdio line it cannot read without a word, takes a request whose ``id`` is neither
an integer nor a string for a notification (and so never answers it: over HTTP it says
``202 Accepted``), and answers other malformed HTTP bodies with its validator's whole dump (four
union branches, links, error code -32602 and a null id). Here each gets JSON-RPC's parse error
(-32700) or invalid request (-32600), with the message's id when it is usable, naming the fields
at fault: ``Invalid request: params: Input should be a valid dictionary``.
"""

from __future__ import annotations

import json
from typing import Any

NOT_PARSED = object()
PARSE_ERROR = -32700
INVALID_REQUEST = -32600


def decoded(text: str | bytes) -> Any:
    """``text`` decoded, or :data:`NOT_PARSED` if it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:  # UnicodeDecodeError included
        return NOT_PARSED


def unreadable(text: str | bytes) -> dict[str, Any] | None:
    """The error answer to a message the SDK would drop, misread or answer unclearly, else None
    (a valid request, notification or response: the SDK's)."""
    import mcp_types

    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValueError:  # pydantic's ValidationError, also for malformed JSON
        message = None
    if isinstance(message, mcp_types.JSONRPCRequest):
        return None
    raw = decoded(text)
    is_request = isinstance(raw, dict) and "method" in raw and "id" in raw
    if message is not None and not is_request:
        return None
    return invalid_message_answer(raw)


def _either(messages: list[str]) -> str:
    """pydantic's messages for one field, as one: "Input should be a valid integer or a valid string"."""
    lead = "Input should be "
    if len(messages) > 1 and all(m.startswith(lead) for m in messages):
        return lead + " or ".join(m[len(lead) :] for m in messages)
    return " or ".join(messages)


def invalid_message_answer(raw: Any) -> dict[str, Any]:
    """The JSON-RPC error answer to a message the SDK cannot read: ``raw`` is the decoded message,
    or :data:`NOT_PARSED`. The answer carries the message's id when that id is valid (else null)
    and says which fields are wrong and what they should be."""
    import mcp_types
    from pydantic import ValidationError

    if raw is NOT_PARSED:
        return {"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": "Parse error: not valid JSON"}}
    if not isinstance(raw, dict):
        problem = f"expected a JSON object, got {type(raw).__name__}"
    else:
        if "method" in raw:
            model: Any = mcp_types.JSONRPCRequest if "id" in raw else mcp_types.JSONRPCNotification
        else:
            model = mcp_types.JSONRPCError if "error" in raw else mcp_types.JSONRPCResponse
        try:
            model.model_validate(raw)
            problem = "not a JSON-RPC 2.0 request, notification or response"
        except ValidationError as exc:
            by_field: dict[str, list[str]] = {}
            for error in exc.errors():
                field = str(error["loc"][0]) if error["loc"] else "message"
                if error["msg"] not in by_field.setdefault(field, []):
                    by_field[field].append(error["msg"])
            problem = "; ".join(f"{field}: {_either(msgs)}" for field, msgs in by_field.items())
    request_id = raw.get("id") if isinstance(raw, dict) else None
    if type(request_id) is not int and not isinstance(request_id, str):
        request_id = None
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": INVALID_REQUEST, "message": f"Invalid request: {problem}"},
    }


__all__ = ["INVALID_REQUEST", "NOT_PARSED", "PARSE_ERROR", "decoded", "invalid_message_answer", "unreadable"]
