"""Capture from other MCP servers: the in-process middleware, and the stdio proxy around a real server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

import thread_signals
from remindful.api import MemoryManager
from remindful.services.ingest.calls import ToolCall, TypeMapping, describe
from remindful.services.ingest.middleware import capture_tools
from remindful.services.ingest.worker import CaptureWorker
from remindful.testing import open_fake
from requirements import requires

pytestmark = pytest.mark.anyio

#: How long a held write waits for its gate before it goes on anyway (a guard against hanging).
GATE_GIVE_UP_S = 60.0


def vision_server() -> MCPServer:
    """A stand-in for the spec's vision/hands servers: analysis, action and workflow tools."""
    mcp: MCPServer = MCPServer("vision")

    @mcp.tool()
    def analyze_screen(region: str) -> str:
        """Describe what is on the screen."""
        return f"Login form in {region}"

    @mcp.tool()
    def click(x: int, y: int) -> str:
        """Click at a point."""
        return f"clicked {x},{y}"

    @mcp.tool()
    def run_workflow(name: str) -> str:
        """Run a named workflow."""
        return f"workflow {name} done"

    @mcp.tool()
    def type_text(text: str) -> str:
        """Type text; fails on an empty string."""
        if not text:
            raise ToolError("nothing to type")
        return "typed"

    return mcp


class SlowStore:
    """A manager whose writes wait for ``gate``: capture must answer callers while they wait."""

    def __init__(self, manager: MemoryManager) -> None:
        self._manager = manager
        self.started = threading.Event()
        self.gate = threading.Event()
        self.stored = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._manager, name)

    def store(self, *args: Any, **kwargs: Any) -> str:
        self.started.set()
        self.gate.wait(GATE_GIVE_UP_S)
        memory_id = self._manager.store(*args, **kwargs)
        self.stored += 1
        return memory_id


async def test_middleware_captures_without_changing_or_delaying_answers(tmp_path: Path) -> None:
    calls = [
        ("analyze_screen", {"region": "top"}),
        ("click", {"x": 500, "y": 300}),
        ("run_workflow", {"name": "login"}),
        ("type_text", {"text": ""}),
    ]
    async with Client(vision_server()) as plain:
        expected = [(await plain.call_tool(name, args)).model_dump(exclude={"meta"}) for name, args in calls]

    with open_fake(tmp_path / "store") as manager:
        slow = SlowStore(manager.engine)
        server = vision_server()
        worker = capture_tools(server, lambda: slow)  # type: ignore[arg-type,return-value]
        async with Client(server) as client:
            for (name, args), want in zip(calls, expected, strict=True):
                got = await client.call_tool(name, args)
                assert got.model_dump(exclude={"meta"}) == want, name  # the answer is unchanged
                assert slow.stored == 0, f"{name} was answered after its capture was stored"  # not waited for
        slow.gate.set()
        assert worker.flush(timeout=30)
        worker.close()
        assert worker.stats == {"captured": 4, "skipped": 0, "failed": 0, "dropped": 0}

        by_tool = {m.metadata["tool"]: m for m in manager.list(limit=10)}
        assert by_tool["analyze_screen"].type.value == "screen"
        assert by_tool["click"].type.value == "action"
        assert by_tool["run_workflow"].type.value == "workflow"
        click = by_tool["click"]
        assert click.metadata["arguments"] == {"x": 500, "y": 300} and click.metadata["success"] is True
        assert click.metadata["server"] == "vision" and click.metadata["duration_ms"] >= 0
        assert click.source.value == "mcp_tool" and click.session_id == manager.session_id
        assert "click" in click.content and "clicked 500,300" in click.content
        failed = by_tool["type_text"]
        assert failed.metadata["success"] is False and "nothing to type" in failed.metadata["error"]
        hits = manager.search("click at 500 300", types=["action"])
        assert hits and hits[0].id == click.id


async def test_mapping_is_configurable(tmp_path: Path) -> None:
    with open_fake(tmp_path / "store") as manager:
        server = vision_server()
        worker = capture_tools(server, lambda: manager.engine, mapping={"click": "workflow", "analyze_*": "knowledge"})
        async with Client(server) as client:
            await client.call_tool("click", {"x": 1, "y": 2})
            await client.call_tool("analyze_screen", {"region": "all"})
        worker.close()
        types = {m.metadata["tool"]: m.type.value for m in manager.list()}
    assert types == {"click": "workflow", "analyze_screen": "knowledge"}
    assert TypeMapping()("Browser_Screenshot") == "screen" and TypeMapping()("hands_type") == "action"


async def test_capture_follows_the_capture_settings(tmp_path: Path) -> None:
    with open_fake(tmp_path / "off", **{"auto_capture.enabled": False}) as manager:
        server = vision_server()
        worker = capture_tools(server, lambda: manager.engine)
        async with Client(server) as client:
            assert (await client.call_tool("click", {"x": 1, "y": 2})).is_error is False
        worker.close()
        assert worker.stats["skipped"] == 1 and manager.list() == []
    overrides = {"auto_capture.triggers.failed_actions": False, "privacy.exclude_sessions": ["banking_*"]}
    with open_fake(tmp_path / "some", **overrides) as manager:
        server = vision_server()
        worker = capture_tools(server, lambda: manager.engine)
        async with Client(server) as client:
            await client.call_tool("type_text", {"text": ""})  # a failure: that trigger is off
            await client.call_tool("type_text", {"text": "card 4111 1111 1111 1111"})
            await client.call_tool("type_text", {"text": "card 4111 1111 1111 1111"})  # a repeat within 5 s
        worker.close()
        (kept,) = manager.list()
        assert "4111" not in kept.content and "4111" not in json.dumps(kept.metadata)
        assert worker.stats["captured"] == 1 and worker.stats["skipped"] == 2
        banking = open_fake(tmp_path / "bank", **{"privacy.exclude_sessions": ["banking_*"]})
        excluded = CaptureWorker(lambda: banking.engine, session_id="banking_42")
        excluded.submit(ToolCall("click", {"x": 1}, True, 1.0))
        excluded.close()
        assert excluded.stats["skipped"] == 1 and banking.list() == []
        banking.close()


def test_a_failing_store_is_counted_not_raised(tmp_path: Path) -> None:
    def broken() -> MemoryManager:
        raise RuntimeError("disk on fire")

    worker = CaptureWorker(broken)
    worker.submit(ToolCall("click", {}, True, 1.0))
    worker.close()
    assert worker.stats["failed"] == 1


def test_describe_is_searchable_and_bounded() -> None:
    text = describe(ToolCall("click", {"x": 1, "blob": "y" * 10_000}, False, 12.3, error="boom", server="hands"))
    assert text.startswith("Tool hands.click failed: boom (12 ms)") and len(text) < 2200


# -- the proxy around a real MCP server ----------------------------------------------------------------

NPX = shutil.which("npx")
EVERYTHING = ["npx", "-y", "@modelcontextprotocol/server-everything", "stdio"]


def remindful_env(store: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMINDFUL_")}
    env.update(HOME=str(home), MEMORY_STORAGE_PATH=str(store), REMINDFUL_EMBEDDINGS__BACKEND="fake")
    return env


def remindful_cmd(*args: str) -> tuple[str, list[str]]:
    """The installed ``remindful`` script of this interpreter's environment."""
    script = Path(sys.executable).parent / "remindful"
    if script.exists():
        return str(script), list(args)
    return sys.executable, ["-c", "from remindful.shells.cli import main; main()", *args]


@pytest.mark.slow
@pytest.mark.integration
@requires(NPX is not None, "npx (Node.js) on PATH")
async def test_proxy_relays_a_real_server_unchanged_and_captures_its_calls(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = tmp_path / "store"
    env = remindful_env(store, home)
    direct = StdioServerParameters(command=NPX, args=EVERYTHING[1:], env=env)
    command, args = remindful_cmd("proxy", "--", NPX, *EVERYTHING[1:])
    proxied = StdioServerParameters(command=command, args=args, env=env)
    calls = [("echo", {"message": "hello through the proxy"}), ("get-sum", {"a": 2, "b": 40})]

    async def session(params: StdioServerParameters) -> tuple[list[str], list[dict[str, Any]], dict[str, Any]]:
        async with Client(params, mode="legacy", read_timeout_seconds=120) as client:
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            results = [(await client.call_tool(n, a)).model_dump(exclude={"meta"}) for n, a in calls]
            bad = (await client.call_tool("get-sum", {"a": "two"})).model_dump(exclude={"meta"})
            return tools, results, bad

    want = await session(direct)
    got = await session(proxied)
    assert got == want  # same tools, same answers, same error
    assert "echo" in got[0] and "hello through the proxy" in json.dumps(got[1][0])

    with open_fake(store) as manager:  # the proxy has exited and flushed its captures
        captured = {m.metadata["tool"]: m for m in manager.list(limit=50)}
    assert set(captured) == {"echo", "get-sum"}
    echo = captured["echo"]
    assert echo.type.value == "action" and echo.source.value == "mcp_tool"
    assert echo.metadata["arguments"] == {"message": "hello through the proxy"} and echo.metadata["success"] is True
    assert "hello through the proxy" in echo.content
    with open_fake(store) as manager:
        outcomes = sorted(m.metadata["success"] for m in manager.list(limit=50) if m.metadata["tool"] == "get-sum")
    assert outcomes == [False, True]


VISION_SCRIPT = """
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

mcp = MCPServer("vision")


@mcp.tool()
def analyze_screen(region: str) -> str:
    return f"Login form in {region}"


@mcp.tool()
def click(x: int, y: int) -> str:
    if x < 0:
        raise ToolError("off screen")
    return f"clicked {x},{y}"


mcp.run("stdio")
"""


@pytest.mark.slow
async def test_proxy_around_a_python_server(tmp_path: Path) -> None:
    script = tmp_path / "vision.py"
    script.write_text(VISION_SCRIPT)
    store = tmp_path / "store"
    env = remindful_env(store, tmp_path / "home")
    command, args = remindful_cmd(
        "proxy", "--session", "vision_run", "--map", "analyze_*=knowledge", "--", sys.executable, str(script)
    )
    async with Client(StdioServerParameters(command=command, args=args, env=env), read_timeout_seconds=120) as client:
        assert sorted(t.name for t in (await client.list_tools()).tools) == ["analyze_screen", "click"]
        looked = await client.call_tool("analyze_screen", {"region": "top"})
        assert looked.content[0].text == "Login form in top"
        failed = await client.call_tool("click", {"x": -1, "y": 0})
        assert failed.is_error and "off screen" in failed.content[0].text
        unknown = await client.call_tool("no_such_tool", {})
        assert unknown.is_error
    with open_fake(store) as manager:
        captured = sorted((m.metadata["tool"], m.type.value, m.metadata["success"]) for m in manager.list())
        click = next((m for m in manager.list() if m.metadata["tool"] == "click"), None)
    assert captured == [
        ("analyze_screen", "knowledge", True),
        ("click", "action", False),
        ("no_such_tool", "action", False),
    ]
    assert click is not None and click.session_id == "vision_run"
    assert "off screen" in click.metadata["error"] and click.metadata["server"] == "vision"


def test_proxy_rejects_a_bad_mapping(tmp_path: Path) -> None:
    command, args = remindful_cmd("proxy", "--map", "click=gesture", "--", "true")
    env = remindful_env(tmp_path / "store", tmp_path / "home")
    result = subprocess.run([command, *args], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--map" in result.stderr and "gesture" in result.stderr


def test_proxy_reports_a_command_that_cannot_start(tmp_path: Path) -> None:
    command, args = remindful_cmd("proxy", "--", str(tmp_path / "no-such-server"))
    env = remindful_env(tmp_path / "store", tmp_path / "home")
    result = subprocess.run(
        [command, *args], env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 127 and "could not start" in result.stderr


ECHO_SERVER = """
import json, sys

for line in sys.stdin:
    message = json.loads(line)
    if "id" in message:
        result = {"content": [{"type": "text", "text": "done " + str(message["id"])}]}
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"""


@pytest.mark.skipif(not thread_signals.AVAILABLE, reason="tgkill and /proc (Linux)")
def test_sigterm_given_to_any_thread_of_the_proxy_stops_it_and_its_server(tmp_path: Path) -> None:
    """SIGTERM's handler stops the wrapped server, whose end ends the proxy; given to another thread
    than the main one, the handler waited for the server's next line: both ran on."""
    (tmp_path / "server.py").write_text(ECHO_SERVER)
    command, args = remindful_cmd("proxy", "--", sys.executable, str(tmp_path / "server.py"))
    env = remindful_env(tmp_path / "store", tmp_path / "home")
    proc = subprocess.Popen(
        [command, *args], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "click"}}\n')
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1  # relaying: its threads are up
        (server,) = map(int, Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split())
        thread_signals.signal_another_thread(proc.pid, signal.SIGTERM)
        proc.wait(30)
        assert not Path(f"/proc/{server}").exists()  # stopped, and reaped by the proxy
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdin.close()
        proc.stdout.close()


def test_the_proxy_commits_each_call_before_the_client_sees_its_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proxy relayed a request before noting it: a server answering at once could have its
    answer relayed before the call was pending, so the capture came after the answer (a kill -9
    then lost it: a flaky CI run) or never (the answer matched no request). Noting a request is
    slowed down here; each answer must still find its call committed to the spool."""
    from remindful.services.ingest import proxy
    from remindful.services.ingest.spooled import CaptureSpool

    note = proxy.ToolCallTracker.from_client

    def slow_note(self: Any, line: bytes) -> None:
        time.sleep(0.05)
        note(self, line)

    monkeypatch.setattr(proxy.ToolCallTracker, "from_client", slow_note)
    store = tmp_path / "store"
    (tmp_path / "server.py").write_text(ECHO_SERVER)
    manager = open_fake(store)
    spool = CaptureSpool.for_store(manager.engine, "echo_run")
    client_in, to_proxy = os.pipe()
    from_proxy, client_out = os.pipe()
    with os.fdopen(client_in, "rb") as proxy_in, os.fdopen(client_out, "wb") as proxy_out:
        relay = threading.Thread(
            target=proxy.run_proxy,
            args=([sys.executable, str(tmp_path / "server.py")], lambda: manager.engine),
            kwargs={"stdin": proxy_in, "stdout": proxy_out, "spool": spool},
        )
        relay.start()
        committed = []
        with os.fdopen(to_proxy, "wb") as requests, os.fdopen(from_proxy, "rb") as answers:
            for i in range(1, 6):
                params = {"name": "click", "arguments": {"x": i}}
                call = {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}
                requests.write(json.dumps(call).encode() + b"\n")
                requests.flush()
                assert json.loads(answers.readline())["id"] == i
                committed.append(committed_calls(manager))
            requests.close()
            relay.join(timeout=60)
    stored = sorted(m.metadata["arguments"]["x"] for m in manager.list(limit=100) if m.source.value == "mcp_tool")
    manager.close()
    assert committed == [1, 2, 3, 4, 5], "an answer reached the client before its call was committed"
    assert stored == [1, 2, 3, 4, 5]


def committed_calls(manager: MemoryManager) -> int:
    """Captured calls committed so far: rows still in the spool, rows done (stored or skipped), and
    lines of the fallback file (where an append goes when the catalog is busy, as it can be while the
    capture worker opens the store on a loaded machine: the next drain imports them)."""
    from remindful.engine.spool import FALLBACK_NAME

    catalog = manager.engine.catalog
    keys = {key for (key,) in catalog.read("SELECT idem_key FROM spool UNION SELECT idem_key FROM spool_done")}
    fallback = Path(manager.engine.path) / FALLBACK_NAME
    if fallback.exists():
        keys |= {json.loads(line)["idem_key"] for line in fallback.read_text().splitlines() if line.strip()}
    return len(keys)


async def test_a_call_waiting_for_the_spool_does_not_hold_up_other_requests(tmp_path: Path) -> None:
    """The first captured call waits until the worker has made the store's spool (so a kill -9
    cannot lose it). It waited on the server's event loop, so every other request waited with it
    (up to the 10 s the wait is bounded by). Here the store opens only once tools/list has been
    answered: tools/list must be answered first."""
    import anyio

    with open_fake(tmp_path / "store") as manager:
        opened = threading.Event()

        def slow_to_open() -> MemoryManager:
            opened.wait(30)
            return manager.engine

        server = vision_server()
        worker = capture_tools(server, slow_to_open)
        answered: list[str] = []

        async def click(client: Client) -> None:
            assert (await client.call_tool("click", {"x": 1, "y": 2})).content[0].text == "clicked 1,2"
            answered.append("click")

        async with Client(server) as client, anyio.create_task_group() as tg:
            tg.start_soon(click, client)
            await anyio.sleep(0.2)  # the click is answered by its tool and waits for the spool
            await client.list_tools()
            answered.append("tools/list")
            opened.set()
        worker.close(timeout=60)
    assert answered == ["tools/list", "click"], "tools/list waited for the first call's spool"
    assert worker.stats["captured"] == 1
