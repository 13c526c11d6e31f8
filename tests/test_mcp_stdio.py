"""The stdio front's answers to lines the MCP SDK cannot read (it drops them without a word), or
takes for a notification although they are requests (it never answers them)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remindful.shells.mcp.fast_start import unreadable
from remindful.shells.mcp.manifest import dumps, loads


@pytest.mark.parametrize(
    ("line", "code", "answer_id", "says"),
    [
        ("{not json", -32700, None, "Parse error: not valid JSON"),
        (b"\xff\xfe", -32700, None, "Parse error: not valid UTF-8 (byte 0xff at offset 0)"),
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


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_the_fronts_json_is_the_json_packages(value: Any) -> None:
    text = dumps(value)
    assert text == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert loads(text) == value and loads(f" \n{text}\r\n".encode()) == value


@pytest.mark.parametrize("text", ["", " ", "{", "[1,]", "1 2", "nul", '"abc', '{"a":}', "[1] x", "01", '"\\x"'])
def test_what_the_json_package_refuses_the_front_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        loads(text)


def test_the_first_answers_import_no_json_package_and_no_sdk() -> None:
    """What runs before the first answers is kept to the standard library's cheapest modules."""
    code = (
        "import sys\n"
        "from remindful.shells.mcp import fast_start as f\n"
        "data = f.mcp_manifest.load()\n"
        "assert data is not None\n"
        'f.unreadable(b\'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}\')\n'
        "f.dumps(f.mcp_manifest.tools_result(data))\n"
        "print(sorted(m for m in ('json', 're', 'typing', 'mcp', 'pydantic') if m in sys.modules))\n"
        "print(f.unreadable(b'{')[0]['error']['code'], f.unreadable(b'[1] 2')[0]['error']['code'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:2] == ["[]", "-32700 -32700"]  # a bad line, in a process without json
