"""The stdio front's answers to messages the MCP SDK cannot read (it drops them without a word)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from remindful.shells.mcp.errors import NOT_PARSED, decoded, invalid_message_answer


@pytest.mark.parametrize(
    ("line", "code", "answer_id", "says"),
    [
        ("{not json", -32700, None, "Parse error"),
        ("[1, 2]", -32600, None, "expected a JSON object, got list"),
        ('{"jsonrpc": "2.0", "id": 5, "method": 123}', -32600, 5, "method: Input should be a valid string"),
        ('{"id": "a", "method": "tools/list"}', -32600, "a", "jsonrpc: Field required"),
        ('{"jsonrpc": "1.0", "id": 3, "method": "tools/list"}', -32600, 3, "jsonrpc: Input should be '2.0'"),
        (
            '{"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": 7}',
            -32600,
            8,
            "params: Input should be a valid dictionary",
        ),
        (
            '{"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}',
            -32600,
            None,
            "id: Input should be a valid integer or a valid string",
        ),
        ('{"jsonrpc": "2.0", "id": true, "method": "tools/list"}', -32600, None, "id: Input should be a valid integer"),
        ('{"jsonrpc": "2.0", "method": {"x": 1}}', -32600, None, "method: Input should be a valid string"),
        ('{"jsonrpc": "2.0", "id": 4, "result": 9}', -32600, 4, "result: Input should be a valid dictionary"),
    ],
)
def test_an_unreadable_message_gets_the_json_rpc_error_naming_the_field(
    line: str, code: int, answer_id: Any, says: str
) -> None:
    answer = invalid_message_answer(decoded(line))
    assert answer["jsonrpc"] == "2.0" and answer["id"] == answer_id
    assert answer["error"]["code"] == code
    assert says in answer["error"]["message"]
    json.dumps(answer)  # it goes on the wire as is


def test_a_line_that_is_not_json_is_told_apart_from_json_null() -> None:
    assert decoded("{") is NOT_PARSED
    assert decoded("null") is None
    assert invalid_message_answer(None)["error"]["code"] == -32600
