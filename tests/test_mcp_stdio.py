"""The stdio front's answers to lines the MCP SDK cannot read (it drops them without a word), or
takes for a notification although they are requests (it never answers them); and what a new
server does before its first answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters

import remindful
from mcp_client import call
from remindful import daemon
from remindful.config import load_settings
from remindful.embed import quantize
from remindful.shells.mcp import server as server_module
from remindful.shells.mcp.fast_start import unreadable
from remindful.shells.mcp.manifest import dumps, loads
from remindful.shells.mcp.server import start_daemon_later


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
    from remindful.shells.mcp import manifest

    manifest.write(manifest.generate())  # in this test's HOME
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


# -- the first tool call on a fresh server (issue 15) ------------------------------------------


class _Roles:
    def __init__(self) -> None:
        self.started = threading.Event()
        self.stopped = False

    def start(self, manager: Any) -> _Roles:
        self.started.set()
        return self

    def stop(self) -> None:
        self.stopped = True


class _FirstAnswer(threading.Event):
    """The first-answer event, telling when someone waits for it (and whether it was set then)."""

    def __init__(self) -> None:
        super().__init__()
        self.waited_on = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waited_on.set()
        return super().wait(timeout)


def test_daemon_roles_wait_for_the_first_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Their start (the warm-up imports chromadb) took CPU from the first tool call."""
    roles = _Roles()
    monkeypatch.setattr(daemon, "start_daemon_threads", roles.start)
    manager = SimpleNamespace(settings=load_settings(tmp_path, **{"daemon.serve_start_delay_s": 0.01}))
    answered = _FirstAnswer()
    stop = start_daemon_later(lambda: manager, answered)  # type: ignore[arg-type, return-value]
    assert answered.waited_on.wait(60)  # the roles' start waits for the first answer...
    assert not roles.started.is_set()  # ...and has not started them before it
    answered.set()
    assert roles.started.wait(60)
    stop()
    assert roles.stopped


def test_a_server_stopped_before_its_first_answer_does_not_wait_for_the_roles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The roles' start waited for the first answer as long as DAEMON_START_LATEST_S whatever
    happened: a server whose client left without a tool call took 10 s more to exit."""
    roles = _Roles()
    monkeypatch.setattr(daemon, "start_daemon_threads", roles.start)
    monkeypatch.setattr(server_module, "DAEMON_START_LATEST_S", 600.0)
    manager = SimpleNamespace(settings=load_settings(tmp_path, **{"daemon.serve_start_delay_s": 0.01}))
    answered = _FirstAnswer()
    stop = start_daemon_later(lambda: manager, answered)  # type: ignore[arg-type, return-value]
    assert answered.waited_on.wait(60)  # the roles' start waits for the first answer
    stop()  # joins the starting thread for at most 10 s
    assert not [t for t in threading.enumerate() if t.name == "remindful-daemon-start"]
    assert not roles.started.is_set()


def server_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMINDFUL_") and k != "XDG_CACHE_HOME"}
    env.update(HOME=str(tmp_path / "home"), MEMORY_STORAGE_PATH=str(tmp_path / "store"))
    env[quantize.ENV_MODEL_CACHE] = str(quantize.model_cache_dir())  # the int8 model this process prepared
    env["REMINDFUL_DAEMON__SERVE_START_DELAY_S"] = "600"  # the roles' warm-up would open the index
    return env


FACTS = [
    "The deploy script needs AWS_PROFILE=prod before it runs",
    "Caroline adopted a grey kitten called Pixel in March",
    "The staging database listens on port 5433, not 5432",
    "Run the integration tests with pytest -m integration",
    "Melanie painted a sunrise over the lake last summer",
    "The login form rejects passwords shorter than twelve characters",
    "Docker compose brings up redis, postgres and the web app",
    "The quarterly report is due on the first Monday of April",
]


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_first_search_of_a_new_server_does_not_open_the_index(tmp_path: Path) -> None:
    """Issue 15: the first memory_search waited for chromadb's import and the index's opening; on a
    small store it is now scored exactly from the catalog, with the hits the index gives."""
    store = tmp_path / "store"
    query = "which port does the staging database use?"
    with remindful.open(store) as memory:
        memory.store_batch([{"content": fact} for fact in FACTS])
        memory.flush()
        assert memory.engine.index is not None  # the normal path: the index open
        expected = [hit.id for hit in memory.search(query, min_score=0)]
    assert expected and not list((store / "index.holders").iterdir())
    server = StdioServerParameters(command=str(Path(sys.executable).parent / "remindful"), args=["serve"])
    server.env = server_env(tmp_path)
    async with Client(server, read_timeout_seconds=120) as client:
        # The memories were stored in no project; the server searches its own and the user's by default.
        found = await call(client, "memory_search", query=query, min_score=0, scope="unscoped")
        assert [hit["id"] for hit in found["memories"]] == expected
        assert not list((store / "index.holders").iterdir())  # the server did not open the index


INITIALIZE_PARAMS = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
GC_CHILD = """
import gc, sys
from remindful.shells.mcp import fast_start as f
collect_again = f.StdioFront.collect_again
def reported(self):
    was = gc.isenabled()
    collect_again(self)
    sys.stderr.write(f"collector was {was}, is {gc.isenabled()}, froze {gc.get_freeze_count() > 0}\\n")
    sys.stderr.flush()
f.StdioFront.collect_again = reported
f.main()
"""


@pytest.mark.slow
def test_the_collector_is_off_during_the_start_and_on_after_the_first_answer(tmp_path: Path) -> None:
    """Issue 15: the start's collections (among some 150,000 objects that live as long as the
    server) took about a tenth of the first call's CPU (bench/mcp_cold_start.py). The collector is
    off until the SDK's first answer, then on again, the start's objects frozen out of its walks."""
    handshake = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE_PARAMS},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},  # answered by the SDK, not early
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", GC_CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server_env(tmp_path),
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in handshake))
    proc.stdin.flush()
    answers = [json.loads(proc.stdout.readline()) for _ in range(2)]
    assert [a["id"] for a in answers] == [1, 2] and answers[1]["result"] == {}
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert b"collector was False, is True, froze True" in err, err
