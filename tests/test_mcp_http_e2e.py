"""End to end over streamable HTTP: spawn `remindful serve --transport http` with the SDK held up, talk to it.

The early answers (before the SDK is imported) are the bytes the SDK sends itself, and a session
begun on the front goes on after the handover: tool calls, elicitation, the SSE GET stream, DELETE.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from mcp import Client
from mcp_types import ElicitResult

from test_mcp_e2e import (
    ANSWER_TIMEOUT,
    HANG_GUARD,
    NO_SHIPPED_MANIFEST,
    Gate,
    free_port,
    held_sdk,
    listed_while_held,
    patched,
    remindful_script,
    server_env,
    store_and_search,
    waited_for_the_sdk,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.integration]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextmanager
def spawned(env: dict[str, str], log: Path, gate: Gate | None = None) -> Iterator[str]:
    """`remindful serve --transport http` on a free port; its /mcp URL once it accepts connections.
    Its SDK import, if ``gate`` holds it, is released before it is stopped."""
    port = free_port()
    started = time.monotonic()
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [remindful_script(), "serve", "--transport", "http", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() - started > 60:
                    pytest.fail(f"remindful serve --transport http did not start: {log.read_text()}")
                time.sleep(0.01)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        if gate is not None:
            gate.path.touch()  # a failed test leaves no server held
        proc.terminate()
        try:
            assert proc.wait(timeout=15) == 0, log.read_text()  # a clean exit on SIGTERM
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log.read_text(), log.read_text()


def post(
    url: str,
    body: dict[str, Any] | None,
    session: str | None,
    method: str = "POST",
    extra: dict[str, str] | None = None,
    *,
    gate: Gate | None = None,
    release: bool = False,
) -> dict[str, Any]:
    """One raw request: status, the headers the SDK sets, the body, and ``held``: whether it was
    answered while ``gate`` held the server's SDK import (if it does not come then, within
    :data:`HANG_GUARD`, the test fails: the server waited for the SDK). With ``release``, the
    request is sent while the import is held, and the import released before its answer is read,
    unless an answer is already there (then ``held`` says so)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **(extra or {})}
    if session:
        headers["Mcp-Session-Id"] = session
    data = None if body is None else json.dumps(body).encode()
    what = method if body is None else body["method"]
    address = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=ANSWER_TIMEOUT)
    try:
        connection.request(method, address.path, body=data, headers=headers)
        if gate is not None and release and gate.held:
            gate.wait_reached()
            if not select.select([connection.sock], [], [], 0)[0]:  # nothing answered yet
                gate.release()
        held = gate is not None and gate.held
        if held:
            connection.sock.settimeout(HANG_GUARD)
        try:
            response: http.client.HTTPResponse | None = connection.getresponse()
            content = response.read()
        except TimeoutError:
            response = None
    finally:
        connection.close()
    if response is None:
        pytest.fail(waited_for_the_sdk(what) if held else f"{what} was not answered in {ANSWER_TIMEOUT:.0f}s")
    if gate is not None and release:
        gate.release()  # if the answer came first
    kept = {k.lower(): v for k, v in response.headers.items() if k.lower() not in ("date", "server")}
    return {"status": response.status, "headers": kept, "body": content, "held": held}


def result(answer: dict[str, Any]) -> Any:
    (data,) = [line[6:] for line in answer["body"].decode().splitlines() if line.startswith("data: ")]
    return json.loads(data)["result"]


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
STATS = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "memory_stats", "arguments": {}}}


def conversation(url: str, gate: Gate | None) -> list[dict[str, Any]]:
    """initialize, initialized, tools/list, then a tool call (the SDK's import, if held, released
    once it is sent), DELETE, and tools/list in the deleted session."""
    opened = post(url, INITIALIZE, None, gate=gate)
    session = opened["headers"]["mcp-session-id"]
    answers = [opened] + [post(url, body, session, gate=gate) for body in (INITIALIZED, TOOLS_LIST)]
    answers.append(post(url, STATS, session, gate=gate, release=True))
    answers.append(post(url, None, session, method="DELETE", gate=gate))
    answers.append(post(url, TOOLS_LIST, session, gate=gate))  # after DELETE: the session is gone
    for answer in answers[:-1]:  # the client's session id throughout, whoever answered
        assert answer["headers"].pop("mcp-session-id") == session
    return answers


def early_answers_match_the_sdk(
    tmp_path: Path, talk: Callable[[str, Gate | None], list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Runs ``talk`` against a server whose SDK answers everything itself, then against one whose SDK
    import is held until ``talk`` releases it; checks that the first three answers have the same
    status, headers and bytes, and returns the held server's answers."""
    without_manifest = patched(server_env(tmp_path / "a"), tmp_path / "a-patch", NO_SHIPPED_MANIFEST)
    with spawned(without_manifest, tmp_path / "a.log") as url:
        by_sdk = talk(url, None)
    env, gate = held_sdk(server_env(tmp_path / "b"), tmp_path / "b-patch")
    with spawned(env, tmp_path / "b.log", gate) as url:
        early = talk(url, gate)
    for i in range(3):
        assert (early[i]["status"], early[i]["headers"], early[i]["body"]) == (
            by_sdk[i]["status"],
            by_sdk[i]["headers"],
            by_sdk[i]["body"],
        )
    return early


def test_the_early_answers_are_the_sdk_bytes_and_the_session_survives_the_handover(tmp_path: Path) -> None:
    """With the SDK import held, initialize, initialized and tools/list are answered with the bytes
    the SDK sends when it answers them itself; the tool call that follows waits for the SDK and is
    answered, once the import is let go, in the same session, which DELETE then ends."""
    early = early_answers_match_the_sdk(tmp_path, conversation)  # initialize, initialized, tools/list
    assert [a["held"] for a in early] == [True, True, True, False, False, False]
    assert result(early[3])["structuredContent"]["success"] is True
    assert [a["status"] for a in early[4:]] == [200, 404]  # DELETE, then the session is unknown


async def accept_confirm(ctx: Any, params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"confirm": True})


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_sdk_client_over_http_before_and_after_the_handover(tmp_path: Path, mode: str) -> None:
    """The SDK's own client lists tools before the SDK is up, then stores, searches and confirms a
    destructive tool through elicitation. ``legacy`` opens its session (and its SSE GET stream)
    on the front and keeps it after the handover; ``auto`` (the default) probes ``server/discover``
    and speaks the sessionless 2026 era, whose plain discover and tools/list the front answers too."""
    env, gate = held_sdk(server_env(tmp_path / "c"), tmp_path / "c-patch")
    with spawned(env, tmp_path / "c.log", gate) as url:
        async with AsyncExitStack() as stack:
            client = Client(url, mode=mode, read_timeout_seconds=ANSWER_TIMEOUT, elicitation_callback=accept_confirm)
            client, listed, held = await listed_while_held(stack, client, gate)
            await anyio.to_thread.run_sync(gate.release)
            assert await store_and_search(client)
            cleared = await client.call_tool("memory_clear_all", {})
            assert cleared.structured_content["success"] is True, cleared.structured_content
            stats = await client.call_tool("memory_stats", {})
    assert held, waited_for_the_sdk("initialize or server/discover, or tools/list")
    assert {"memory_store", "memory_clear_all"} <= {t.name for t in listed.tools}
    assert stats.structured_content["success"] is True


ENVELOPE = {
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "mcp", "version": "0.1.0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
}


def modern_conversation(url: str, gate: Gate | None) -> list[dict[str, Any]]:
    """server/discover, tools/list, a discover at an unknown version, and a tool call (the SDK's
    import, if held, released once it is sent), as POSTs of the 2026 era: no session, the version
    and method in headers."""
    unknown = {"_meta": {**ENVELOPE["_meta"], "io.modelcontextprotocol/protocolVersion": "2099-01-01"}}
    bodies = [
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": ENVELOPE},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": ENVELOPE},
        {"jsonrpc": "2.0", "id": 4, "method": "server/discover", "params": unknown},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {**STATS["params"], **ENVELOPE}},
    ]
    answers = []
    for body in bodies:
        version = body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"]
        extra = {"Mcp-Protocol-Version": version, "Mcp-Method": body["method"]}
        if body["method"] == "tools/call":
            extra["Mcp-Name"] = "memory_stats"
        answers.append(post(url, body, None, extra=extra, gate=gate, release=body["method"] == "tools/call"))
    assert all("mcp-session-id" not in a["headers"] for a in answers)
    return answers


def test_the_2026_era_is_answered_early_with_the_sdk_bytes(tmp_path: Path) -> None:
    """With the SDK import held, the 2026-era discover, tools/list and -32022 are answered with the
    SDK's status, headers and bytes; the tool call waits for the SDK."""
    early = early_answers_match_the_sdk(tmp_path, modern_conversation)
    assert [a["status"] for a in early] == [200, 200, 400, 200]
    assert [a["held"] for a in early] == [True, True, True, False]
    assert json.loads(early[3]["body"])["result"]["structuredContent"]["success"] is True
