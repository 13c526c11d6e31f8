"""End to end over streamable HTTP: spawn `remindful serve --transport http` with the SDK held up, talk to it.

The early answers (before the SDK is imported) are the bytes the SDK sends itself, and a session
begun on the front goes on after the handover: tool calls, elicitation, the SSE GET stream, DELETE.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import ElicitResult

from test_mcp_e2e import (
    NO_SHIPPED_MANIFEST,
    SLOW_SDK,
    free_port,
    patched,
    remindful_script,
    server_env,
    store_and_search,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.integration]

SDK_DELAY = 8.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextmanager
def spawned(env: dict[str, str], log: Path) -> Iterator[str]:
    """`remindful serve --transport http` on a free port; its /mcp URL once it accepts connections."""
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
        proc.terminate()
        try:
            assert proc.wait(timeout=15) == 0, log.read_text()  # a clean exit on SIGTERM
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log.read_text(), log.read_text()


def slow_sdk(tmp_path: Path, name: str) -> dict[str, str]:
    env = patched(server_env(tmp_path / name), tmp_path / f"{name}-patch", SLOW_SDK)
    return {**env, "SLOW_SDK_SECONDS": str(SDK_DELAY)}


def post(
    url: str,
    body: dict[str, Any] | None,
    session: str | None,
    method: str = "POST",
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One raw request: status, the headers the SDK sets, the body, and when it was answered."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **(extra or {})}
    if session:
        headers["Mcp-Session-Id"] = session
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            status, raw_headers, content = response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        status, raw_headers, content = exc.code, exc.headers, exc.read()
    kept = {k.lower(): v for k, v in raw_headers.items() if k.lower() not in ("date", "server")}
    return {"status": status, "headers": kept, "body": content, "at": time.monotonic()}


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


def conversation(url: str) -> list[dict[str, Any]]:
    opened = post(url, INITIALIZE, None)
    session = opened["headers"]["mcp-session-id"]
    answers = [opened] + [post(url, body, session) for body in (INITIALIZED, TOOLS_LIST, STATS)]
    answers.append(post(url, None, session, method="DELETE"))
    answers.append(post(url, TOOLS_LIST, session))  # after DELETE: the session is gone
    for answer in answers[:-1]:  # the client's session id throughout, whoever answered
        assert answer["headers"].pop("mcp-session-id") == session
    return answers


def early_answers_match_the_sdk(
    tmp_path: Path, talk: Callable[[str], list[dict[str, Any]]]
) -> tuple[list[dict[str, Any]], float]:
    """Runs ``talk`` against a server whose SDK answers everything itself, then against one whose SDK
    import is held up; checks that the first three answers have the same status, headers and bytes,
    and returns the held-up server's answers and when its conversation started."""
    without_manifest = patched(server_env(tmp_path / "a"), tmp_path / "a-patch", NO_SHIPPED_MANIFEST)
    with spawned(without_manifest, tmp_path / "a.log") as url:
        by_sdk = talk(url)
    with spawned(slow_sdk(tmp_path, "b"), tmp_path / "b.log") as url:
        started = time.monotonic()
        early = talk(url)
    for i in range(3):
        assert (early[i]["status"], early[i]["headers"], early[i]["body"]) == (
            by_sdk[i]["status"],
            by_sdk[i]["headers"],
            by_sdk[i]["body"],
        )
    return early, started


def test_the_early_answers_are_the_sdk_bytes_and_the_session_survives_the_handover(tmp_path: Path) -> None:
    """With the SDK import held up for 8 s, initialize, initialized and tools/list are answered at
    once, with the bytes the SDK sends when it answers them itself; the tool call that follows
    waits for the SDK and is answered in the same session, which DELETE then ends."""
    early, started = early_answers_match_the_sdk(tmp_path, conversation)  # initialize, initialized, tools/list
    assert early[2]["at"] - started < SDK_DELAY / 2, "tools/list waited for the SDK"
    assert early[3]["at"] - started > SDK_DELAY and result(early[3])["structuredContent"]["success"] is True
    assert [a["status"] for a in early[4:]] == [200, 404]  # DELETE, then the session is unknown


async def accept_confirm(ctx: Any, params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"confirm": True})


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_sdk_client_over_http_before_and_after_the_handover(tmp_path: Path, mode: str) -> None:
    """The SDK's own client lists tools before the SDK is up, then stores, searches and confirms a
    destructive tool through elicitation. ``legacy`` opens its session (and its SSE GET stream)
    on the front and keeps it after the handover; ``auto`` (the default) probes ``server/discover``
    and speaks the sessionless 2026 era, whose plain discover and tools/list the front answers too."""
    with spawned(slow_sdk(tmp_path, "c"), tmp_path / "c.log") as url:
        started = time.monotonic()
        async with Client(url, mode=mode, read_timeout_seconds=120, elicitation_callback=accept_confirm) as client:
            listed = await client.list_tools()
            listed_after = time.monotonic() - started
            assert await store_and_search(client)
            cleared = await client.call_tool("memory_clear_all", {})
            assert cleared.structured_content["success"] is True, cleared.structured_content
            stats = await client.call_tool("memory_stats", {})
    assert listed_after < SDK_DELAY / 2, f"tools/list took {listed_after:.1f}s: it waited for the SDK"
    assert {"memory_store", "memory_clear_all"} <= {t.name for t in listed.tools}
    assert stats.structured_content["success"] is True


ENVELOPE = {
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "mcp", "version": "0.1.0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
}


def modern_conversation(url: str) -> list[dict[str, Any]]:
    """server/discover, tools/list, a tool call, and a discover at an unknown version, as POSTs
    of the 2026 era: no session, the version and method in headers."""
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
        answers.append(post(url, body, None, extra=extra))
    assert all("mcp-session-id" not in a["headers"] for a in answers)
    return answers


def test_the_2026_era_is_answered_early_with_the_sdk_bytes(tmp_path: Path) -> None:
    """With the SDK import held up, the 2026-era discover, tools/list and -32022 are answered at
    once with the SDK's status, headers and bytes; the tool call waits for the SDK."""
    early, started = early_answers_match_the_sdk(tmp_path, modern_conversation)
    assert [a["status"] for a in early] == [200, 200, 400, 200]
    assert early[2]["at"] - started < SDK_DELAY / 2, "the 2026 era waited for the SDK"
    assert early[3]["at"] - started > SDK_DELAY
    assert json.loads(early[3]["body"])["result"]["structuredContent"]["success"] is True
