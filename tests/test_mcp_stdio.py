"""The stdio front's answers to lines the MCP SDK cannot read (it drops them without a word), or
takes for a notification although they are requests (it never answers them)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from remindful.shells.mcp.fast_start import unreadable


@pytest.mark.parametrize(
    ("line", "code", "answer_id", "says"),
    [
        ("{not json", -32700, None, "Parse error: not valid JSON"),
        (b"\xff\xfe", -32700, None, "Parse error: not valid JSON"),
        ("[1, 2]", -32600, None, "Invalid request: expected a JSON object, got list"),
        ("null", -32600, None, "Invalid request: expected a JSON object, got NoneType"),
        ('{"jsonrpc": "2.0", "id": 5, "method": 123}', -32600, 5, "method: expected a string"),
        ('{"id": "a", "method": "tools/list"}', -32600, "a", 'jsonrpc: expected "2.0"'),
        ('{"jsonrpc": "1.0", "id": 3, "method": "tools/list"}', -32600, 3, 'jsonrpc: expected "2.0"'),
        ('{"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": 7}', -32600, 8, "params: expected an object"),
        ('{"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}', -32600, None, "id: expected an integer or a string"),
        ('{"jsonrpc": "2.0", "id": true, "method": "tools/list"}', -32600, None, "id: expected an integer or a string"),
        ('{"jsonrpc": "2.0", "method": {"x": 1}}', -32600, None, "method: expected a string"),
        ('{"jsonrpc": "2.0", "id": 2}', -32600, 2, "expected a request (method, id), a notification"),
    ],
)
def test_an_unreadable_line_gets_the_json_rpc_error_naming_the_field(
    line: str | bytes, code: int, answer_id: Any, says: str
) -> None:
    answer, message = unreadable(line)
    assert message is None and answer is not None
    assert answer["jsonrpc"] == "2.0" and answer["id"] == answer_id
    assert answer["error"]["code"] == code
    assert says in answer["error"]["message"]
    json.dumps(answer)  # it goes on the wire as is


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"name": "x"}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": None},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 7, "result": {}},
        {"jsonrpc": "2.0", "id": 7, "error": {"code": -1, "message": "no"}},
        # Responses go to the SDK as they are: it reads more shapes of them than are worth copying.
        {"jsonrpc": "2.0", "id": 4, "result": 9},
        {"jsonrpc": "2.0", "id": None, "error": {"code": "-1", "message": "no"}},
    ],
)
def test_a_json_rpc_message_goes_to_the_sdk(message: dict[str, Any]) -> None:
    assert unreadable(json.dumps(message)) == (None, message)
