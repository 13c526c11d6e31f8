"""End to end over stdio: spawn `remindful serve` and drive it with real clients (the SDK's, the MCP Inspector CLI).

(Over HTTP: test_mcp_http.py.)"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import pwd
import queue
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Collection
from contextlib import AsyncExitStack
from pathlib import Path
from typing import IO, Any

import anyio.to_thread
import pytest
from mcp import Client, StdioServerParameters
from mcp_types import ListToolsResult

from remindful.shells.mcp import manifest as mcp_manifest
from requirements import requires

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.integration]

NPX = shutil.which("npx")


def remindful_script() -> str:
    script = Path(sys.executable).parent / "remindful"
    assert script.exists(), f"the remindful entry point is not installed next to {sys.executable}"
    return str(script)


@functools.cache
def manifest() -> dict[str, Any]:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # generate() runs an event loop of its own
        return pool.submit(mcp_manifest.generate).result()


def server_env(tmp_path: Path, *, fake: bool = True, cached_manifest: bool = True) -> dict[str, str]:
    """A server's environment: its own HOME and store, and (``cached_manifest``) the MCP manifest
    cache in that HOME, as every start of an installation but its first finds it."""
    # The per-user caches must land in the temporary HOME: XDG_CACHE_HOME would move them.
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMINDFUL_") and k != "XDG_CACHE_HOME"}
    env.update(HOME=str(tmp_path / "home"), MEMORY_STORAGE_PATH=str(tmp_path / "store"))
    if fake:
        env["REMINDFUL_EMBEDDINGS__BACKEND"] = "fake"
    if cached_manifest:
        name = Path(mcp_manifest.manifest_file()).name
        mcp_manifest.write(manifest(), str(tmp_path / "home" / ".cache" / "remindful" / name))
    return env


def stdio(tmp_path: Path, *, fake: bool = True) -> StdioServerParameters:
    return StdioServerParameters(command=remindful_script(), args=["serve"], env=server_env(tmp_path, fake=fake))


async def store_and_search(client: Client) -> list[str]:
    tools = sorted(t.name for t in (await client.list_tools()).tools)
    stored = await client.call_tool("memory_store", {"content": "The deploy script needs AWS_PROFILE=prod"})
    assert stored.structured_content["success"] is True, stored.content
    found = await client.call_tool("memory_search", {"query": "AWS_PROFILE deploy"})
    hits = found.structured_content["memories"]
    assert hits and hits[0]["id"] == stored.structured_content["memory_id"]
    return tools


async def errors_are_tool_errors(client: Client) -> None:
    """A bad value, an unknown argument and an ill-typed one: tool errors naming the field."""
    empty = await client.call_tool("memory_store", {"content": "  "})
    assert empty.is_error and empty.content[0].text.startswith("Error executing tool memory_store: Invalid 'content'")
    typo = await client.call_tool("memory_search", {"query": "x", "limti": 3})
    assert typo.is_error and "unknown argument 'limti'" in typo.content[0].text
    ill_typed = await client.call_tool("memory_search", {"query": "x", "limit": "ten"})
    assert ill_typed.is_error and "limit" in ill_typed.content[0].text


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_stdio_with_the_sdk_client(tmp_path: Path, mode: str) -> None:
    async with Client(stdio(tmp_path), mode=mode, read_timeout_seconds=120) as client:
        tools = await store_and_search(client)
        await errors_are_tool_errors(client)
    assert {"memory_store", "memory_search", "memory_stats"} <= set(tools)


HELD_SDK = """
import os, sys, time

class HeldMcp:  # holds the first import of the MCP SDK until the test creates the file HOLD_SDK_UNTIL
    def find_spec(self, name, path=None, target=None):
        if name == "mcp.server":
            sys.meta_path.remove(self)
            until = os.environ["HOLD_SDK_UNTIL"]
            open(until + ".reached", "w").close()
            while not os.path.exists(until):
                time.sleep(0.02)
        return None

sys.meta_path.insert(0, HeldMcp())
"""

#: Seconds to wait for what must happen while the SDK import is held. Not a speed limit: a server
#: that waits for the SDK never answers then, and the test fails with that instead of hanging.
HANG_GUARD = 60.0
#: Seconds to wait for any other answer (the SDK's import and start, the model's load).
ANSWER_TIMEOUT = 120.0


def patched(env: dict[str, str], folder: Path, *sitecustomize: str) -> dict[str, str]:
    """``env`` with a sitecustomize made of ``sitecustomize`` run at the server's start."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text("\n".join(sitecustomize))
    return {**env, "PYTHONPATH": str(folder)}


class Gate:
    """What holds the SDK import of a server started with :func:`held_sdk`: the file it waits for,
    and the marker it leaves once its SDK thread has got to the import."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.reached = Path(f"{path}.reached")

    @property
    def held(self) -> bool:
        return not self.path.exists()

    def wait_reached(self) -> None:
        """Until the server is at its SDK import: holding an import it never began proves nothing."""
        deadline = time.monotonic() + HANG_GUARD
        while not self.reached.exists():
            if time.monotonic() > deadline:
                pytest.fail("the server never began importing mcp.server: the SDK was not held")
            time.sleep(0.02)

    def release(self) -> None:
        self.wait_reached()
        self.path.touch()


def held_sdk(env: dict[str, str], folder: Path, *sitecustomize: str) -> tuple[dict[str, str], Gate]:
    """``env`` patched with ``sitecustomize`` and :data:`HELD_SDK`, and the gate of that server's
    SDK import: closed until the test releases it."""
    gate = Gate(folder / "release-sdk")
    return {**patched(env, folder, *sitecustomize, HELD_SDK), "HOLD_SDK_UNTIL": str(gate.path)}, gate


def waited_for_the_sdk(what: str) -> str:
    return f"{what} was not answered while the SDK import was held: it waited for the SDK"


async def listed_while_held(stack: AsyncExitStack, client: Client, gate: Gate) -> tuple[Client, ListToolsResult, bool]:
    """``client`` opened (on ``stack``) and its tools listed, and whether both were done while
    ``gate`` still held the server's SDK import. A server that waits for the SDK would not answer
    them then: after :data:`HANG_GUARD` the gate is released so that the test goes on and fails
    at its end, outside the client (which would wrap a failure in exception groups)."""
    assert gate.held
    watchdog = threading.Timer(HANG_GUARD, gate.path.touch)
    watchdog.start()
    try:
        opened = await stack.enter_async_context(client)
        listed = await opened.list_tools()
    finally:
        watchdog.cancel()
    return opened, listed, gate.held


def test_the_handshake_is_answered_before_the_sdk_loads(tmp_path: Path) -> None:
    """With the SDK import held, initialize and tools/list are answered from the manifest cache,
    as the SDK answers them itself (a server without the cache); the tool call is answered by
    the SDK once the import is let go, in the session the early answers began."""
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "memory_stats", "arguments": {}}},
    ]
    by_sdk = raw_session(server_env(tmp_path / "a", cached_manifest=False), requests)
    env, gate = held_sdk(server_env(tmp_path / "b"), tmp_path / "p2")
    early = raw_session(env, requests, gate, early=(1, 2))
    assert [early[i]["message"] for i in (1, 2)] == [by_sdk[i]["message"] for i in (1, 2)]
    assert [early[i]["held"] for i in (1, 2, 3)] == [True, True, False]  # the tool call only after the release
    assert early[3]["message"]["result"]["structuredContent"]["success"] is True


def test_only_a_plain_handshake_is_answered_early(tmp_path: Path) -> None:
    """A connection that opens otherwise (the 2026 era's server/discover) is the SDK's alone."""
    envelope = {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "mcp", "version": "0.1.0"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    }
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": envelope},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": envelope},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
    ]
    env, gate = held_sdk(server_env(tmp_path), tmp_path / "p")
    answers = raw_session(env, requests, gate)
    assert [answers[i]["held"] for i in (1, 2, 3)] == [False, False, False]
    assert answers[1]["message"]["result"]["supportedVersions"] == ["2026-07-28"]
    assert answers[2]["message"]["result"]["tools"]
    assert "error" in answers[3]["message"]  # the SDK refuses a request without the envelope on a 2026 connection


async def test_the_sdk_client_lists_tools_before_the_sdk_is_up(tmp_path: Path) -> None:
    """The SDK's stdio client (handshake era) gets initialize and tools/list while the server's SDK
    import is held, then stores and searches after the handover."""
    env, gate = held_sdk(server_env(tmp_path), tmp_path / "patch")
    params = StdioServerParameters(command=remindful_script(), args=["serve"], env=env)
    async with AsyncExitStack() as stack:
        client = Client(params, mode="legacy", read_timeout_seconds=ANSWER_TIMEOUT)
        client, listed, held = await listed_while_held(stack, client, gate)
        await anyio.to_thread.run_sync(gate.release)
        await store_and_search(client)
    assert held, waited_for_the_sdk("initialize or tools/list")
    assert {"memory_store", "memory_search"} <= {t.name for t in listed.tools}


INITIALIZE = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}


def raw_session(
    env: dict[str, str], requests: list[dict[str, Any]], gate: Gate | None = None, *, early: Collection[int] = ()
) -> dict[int, dict[str, Any]]:
    """Send JSON-RPC lines to `remindful serve`; each answer by id, with ``held``: whether it was
    read while ``gate`` held the server's SDK import. With a gate, the answers to the ``early``
    ids must come while it holds (the test fails if they wait for the SDK); once the server is at
    the import, whatever else it has answered by then is read too, and only then is it released."""
    proc = subprocess.Popen(
        [remindful_script(), "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None
    lines: queue.Queue[bytes] = queue.Queue()
    reader = threading.Thread(target=_lines_into, args=(proc.stdout, lines), daemon=True)
    reader.start()
    methods = {r["id"]: r["method"] for r in requests if "id" in r}
    answers: dict[int, dict[str, Any]] = {}

    def take(line: bytes) -> None:
        assert line, f"the server closed its output with answers to {sorted(answers)} only"
        message = json.loads(line)
        answers[message["id"]] = {"message": message, "line": line, "held": gate is not None and gate.held}

    def read(ids: Collection[int], timeout: float, failure: str) -> None:
        while not set(ids) <= set(answers):
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                line = None
            if line is None:
                missing = ", ".join(f"{methods[i]} (id {i})" for i in sorted(set(ids) - set(answers)))
                pytest.fail(failure.format(missing))
            take(line)

    try:
        proc.stdin.write(b"".join(json.dumps(r).encode() + b"\n" for r in requests))
        proc.stdin.flush()
        if gate is not None:
            read(early, HANG_GUARD, waited_for_the_sdk("{}"))
            gate.wait_reached()
            while not lines.empty():  # answered while the import is held, too
                take(lines.get_nowait())
            gate.release()
        read(methods, ANSWER_TIMEOUT, f"{{}} not answered in {ANSWER_TIMEOUT:.0f}s")
    finally:
        if gate is not None:
            gate.path.touch()  # a failed test leaves no server held
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join()
        proc.stdout.close()
    return answers


def _lines_into(stream: IO[bytes], lines: queue.Queue[bytes]) -> None:
    for line in iter(stream.readline, b""):
        lines.put(line)
    lines.put(b"")  # the end of the output


def until_input_closes(env: dict[str, str], lines: list[str]) -> tuple[list[dict[str, Any]], str]:
    """Send ``lines`` to `remindful serve` and close its input at once, as a script piping requests
    in (or a client shutting down) does; every answer it writes before exiting, and its stderr."""
    proc = subprocess.run(
        [remindful_script(), "serve"],
        input="".join(line + "\n" for line in lines).encode(),
        capture_output=True,
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr.decode()


def tool_call(request_id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def handshake_then(*messages: dict[str, Any]) -> list[str]:
    """The lines of a handshake-era session: initialize (id 1), initialized, then ``messages``."""
    opening = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]
    return [json.dumps(m) for m in (*opening, *messages)]


def test_requests_sent_before_the_input_closes_are_answered(tmp_path: Path) -> None:
    """The SDK cancels what is still running at the end of its input: the answers were lost
    (the memory was stored, the client never heard). They are all written before the exit."""
    lines = handshake_then(
        tool_call(2, "memory_store", {"content": "Piped in, then stdin closed"}),
        tool_call(3, "memory_search", {"query": "piped stdin"}),
    )
    answers, stderr = until_input_closes(server_env(tmp_path), lines)
    by_id = {a["id"]: a for a in answers}
    assert sorted(by_id) == [1, 2, 3], stderr[-2000:]
    stored = by_id[2]["result"]["structuredContent"]
    assert stored["success"] is True
    assert by_id[3]["result"]["structuredContent"]["memories"][0]["id"] == stored["memory_id"]
    assert "unanswered" not in stderr


def test_a_request_the_client_cancelled_is_not_waited_for(tmp_path: Path) -> None:
    """The SDK sends no answer to a cancelled request: at the end of input the server must not
    wait for one (it waited its full drain timeout, a minute). The real embedder keeps the call
    running (the model loads) when the cancellation arrives."""
    lines = handshake_then(
        tool_call(2, "memory_search", {"query": "x"}),
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2, "reason": "user"}},
    )
    answers, stderr = until_input_closes(server_env(tmp_path, fake=False), lines)
    assert answers[0]["id"] == 1
    assert "unanswered" not in stderr


def test_unreadable_messages_get_errors_and_the_rest_is_served(tmp_path: Path) -> None:
    """What the SDK cannot read, it drops without a word; each such line now gets JSON-RPC's error
    naming the field at fault (id null when the id itself is unusable), and nothing is waited for."""
    lines = handshake_then()
    lines.append("{not json")
    lines += [
        json.dumps(m)
        for m in (
            {"jsonrpc": "2.0", "id": 5, "method": 123},
            {"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"},
            {"id": 7, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": 7},
            {"jsonrpc": "2.0", "id": 9, "method": "tools/list"},
        )
    ]
    answers, stderr = until_input_closes(server_env(tmp_path), lines)
    errors = [(a["id"], a["error"]["code"], a["error"]["message"]) for a in answers if "error" in a]
    assert errors == [
        (None, -32700, "Parse error: not valid JSON"),
        (5, -32600, "Invalid request: method: expected a string"),
        (None, -32600, "Invalid request: id: expected an integer or a string"),
        (7, -32600, 'Invalid request: jsonrpc: expected "2.0"'),
        (8, -32600, "Invalid request: params: expected an object"),
    ]
    assert [a["id"] for a in answers if "result" in a] == [1, 9]
    assert "unanswered" not in stderr


def test_fuzzed_input_never_stops_the_server(tmp_path: Path) -> None:
    """Three hundred lines, mangled at random around valid requests: every valid request is
    answered, every line written is a JSON-RPC message, and the server exits cleanly at the end."""
    rng = random.Random(20261122)
    valid = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "memory_stats", "arguments": {}}}
    junk = [None, True, 1.5, -1, "", "x" * 300, [], {}, {"a": [1, {"b": None}]}, "\u0000", "é"]
    lines = handshake_then()
    wanted = set()
    for n in range(2, 302):  # id 1 is the initialize
        message: dict[str, Any] = {**valid, "id": n}
        roll = rng.random()
        if roll < 0.25:
            wanted.add(n)
            lines.append(json.dumps(message))
        elif roll < 0.6:
            message[rng.choice(["jsonrpc", "id", "method", "params"])] = rng.choice(junk)
            lines.append(json.dumps(message))
        elif roll < 0.8:
            text = json.dumps(message)
            lines.append(text[: rng.randrange(len(text))])
        else:
            lines.append(json.dumps(rng.choice(junk)))
    answers, stderr = until_input_closes(server_env(tmp_path), lines)
    assert all(a.get("jsonrpc") == "2.0" and ("result" in a or "error" in a) for a in answers)
    answered = {a["id"] for a in answers if "result" in a and a["id"] != 1}
    assert answered >= wanted, f"unanswered valid requests: {sorted(wanted - answered)}"
    assert "Traceback" not in stderr and "unanswered" not in stderr


async def test_stdio_with_the_real_embedder(tmp_path: Path) -> None:
    async with Client(stdio(tmp_path, fake=False), mode="legacy", read_timeout_seconds=180) as client:
        for text in ("Clicked the login button on the sign-in page", "Bought milk and eggs at the grocery store"):
            assert (await client.call_tool("memory_store", {"content": text})).structured_content["success"]
        found = await client.call_tool("memory_search", {"query": "authentication screen", "limit": 1})
    assert "login" in found.structured_content["memories"][0]["content"]


def test_serve_rejects_bad_options() -> None:
    result = subprocess.run([remindful_script(), "serve", "--transport", "carrier-pigeon"], capture_output=True)
    assert result.returncode == 2 and b"--transport" in result.stderr
    result = subprocess.run([remindful_script(), "serve", "--transport", "http", "--port", "0"], capture_output=True)
    assert result.returncode == 2 and b"--port" in result.stderr  # not taken by the entry's fast path
    result = subprocess.run([remindful_script(), "serve", "--transport", "http", "--host", ""], capture_output=True)
    assert result.returncode == 2 and b"--host" in result.stderr


def test_the_entry_fast_path_takes_only_plain_http_commands() -> None:
    from remindful.shells.entry import _http_options

    assert _http_options(["serve", "--transport", "http"]) == {"host": "127.0.0.1", "port": 8000}
    assert _http_options(["serve", "--transport", "http", "--port", "9123"]) == {"host": "127.0.0.1", "port": 9123}
    assert _http_options(["serve", "--host", "::1", "--transport", "http"]) == {"host": "::1", "port": 8000}
    for argv in (
        ["serve"],
        ["serve", "--port", "9123"],
        ["serve", "--transport", "http", "--port", "70000"],
        ["serve", "--transport", "http", "--port", "1", "--port", "2"],
        ["serve", "--transport", "http", "--host", ""],
        ["serve", "--transport", "http", "-v"],
        ["serve", "--transport", "http", "--verbose", "x"],
    ):
        assert _http_options(argv) is None, argv


def inspector(tmp_path: Path, *args: str) -> Any:
    # npx keeps its package cache under the real HOME; the server gets the test's HOME via -e.
    env = {**os.environ, "HOME": pwd.getpwuid(os.getuid()).pw_dir}
    command = [
        NPX or "npx",
        "-y",
        "@modelcontextprotocol/inspector",
        "--cli",
        "-e",
        f"MEMORY_STORAGE_PATH={tmp_path / 'store'}",
        "-e",
        "REMINDFUL_EMBEDDINGS__BACKEND=fake",
        "-e",
        f"HOME={tmp_path / 'home'}",
        remindful_script(),
        "serve",
        *args,
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
    assert result.returncode == 0, result.stderr + result.stdout
    return json.loads(result.stdout)


@requires(NPX is not None, "npx (Node.js) on PATH")
def test_mcp_inspector_cli(tmp_path: Path) -> None:
    listed = inspector(tmp_path, "--method", "tools/list")
    assert {"memory_store", "memory_search"} <= {t["name"] for t in listed["tools"]}
    stored = inspector(
        tmp_path,
        "--method",
        "tools/call",
        "--tool-name",
        "memory_store",
        "--tool-arg",
        "content=The inspector stored this",
        "--tool-arg",
        "type=knowledge",
        "--tool-arg",
        'metadata={"via": "inspector"}',
    )
    assert stored["structuredContent"]["success"] is True
    found = inspector(
        tmp_path, "--method", "tools/call", "--tool-name", "memory_search", "--tool-arg", "query=inspector"
    )
    memories = found["structuredContent"]["memories"]
    assert memories[0]["id"] == stored["structuredContent"]["memory_id"]
    assert memories[0]["metadata"] == {"via": "inspector"}
    missing = inspector(tmp_path, "--method", "tools/call", "--tool-name", "memory_get", "--tool-arg", "memory_id=x")
    assert missing["isError"] is True and "Memory not found: 'x'" in missing["content"][0]["text"]
