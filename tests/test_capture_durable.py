"""Captures of the middleware and the proxy survive ``kill -9`` right after the tool calls answered:
the next owner of the store stores every one of them, exactly once."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from remindful.engine.spool import FALLBACK_NAME
from remindful.services.ingest.calls import ToolCall
from remindful.services.ingest.spooled import CaptureSpool, owner, owner_alive
from remindful.services.ingest.worker import CaptureWorker
from remindful.testing import open_fake

CALLS = 6

#: An in-process MCP server with capture_tools; its store stalls forever inside the 3rd store
#: (after writing the memory, before the spool row is dropped), so at the kill: calls 1-2 are
#: stored and done, call 3 is stored but still spooled, calls 4-6 are only spooled.
HOST = """
import os, sys, threading
from pathlib import Path

import remindful
from mcp.server.mcpserver import MCPServer
from remindful.services.ingest.middleware import capture_tools
from remindful.embed import FakeEmbedder
from remindful.index import InMemoryIndex

store = Path(sys.argv[1])
manager = remindful.open(store, embedder=FakeEmbedder(), index=InMemoryIndex())


class StallingStore:
    def __init__(self, inner):
        self.inner, self.count = inner, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def store_batch(self, *args, **kwargs):
        self.count += 1
        memory_ids = self.inner.store_batch(*args, **kwargs)
        if self.count == int(os.environ["STALL_AT"]):
            (store / "stalled").write_text(memory_ids[0])
            threading.Event().wait()
        return memory_ids


mcp = MCPServer("hands")


@mcp.tool()
def click(x: int) -> str:
    return f"clicked {x}"


wrapped = StallingStore(manager.engine)
capture_tools(mcp, lambda: wrapped, session_id="hands_run")
mcp.run("stdio")
"""

#: For the proxy (a sitecustomize): the 1st store writes its memory, then stalls forever.
STALL_PROXY = """
import os, threading

if os.environ.get("STALL_AT"):
    from remindful.engine.store import Store

    real, count = Store.store_batch, [0]

    def store_batch(self, *args, **kwargs):
        count[0] += 1
        memory_ids = real(self, *args, **kwargs)
        if count[0] == int(os.environ["STALL_AT"]):
            threading.Event().wait()
        return memory_ids

    Store.store_batch = store_batch
"""

SERVER = """
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("hands")


@mcp.tool()
def click(x: int) -> str:
    return f"clicked {x}"


mcp.run("stdio")
"""


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMINDFUL_")}
    env.update(HOME=str(tmp_path / "home"), REMINDFUL_EMBEDDINGS__BACKEND="fake", **extra)
    return env


def call_then_kill(proc: subprocess.Popen[bytes], before_kill: Any = None) -> list[dict[str, Any]]:
    """initialize, then CALLS tools/call click(x=i), each answered before the next; SIGKILL right
    after the last answer. Returns the answers."""
    assert proc.stdin is not None and proc.stdout is not None

    def ask(message: dict[str, Any]) -> dict[str, Any] | None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()
        if "id" not in message:
            return None
        while True:
            line = proc.stdout.readline()
            assert line, "the server closed its output"
            answer = json.loads(line)
            if answer.get("id") == message["id"]:
                return answer  # type: ignore[no-any-return]

    info = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    ask({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": info})
    ask({"jsonrpc": "2.0", "method": "notifications/initialized"})
    answers = []
    for i in range(1, CALLS + 1):
        params = {"name": "click", "arguments": {"x": i}}
        answer = ask({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params})
        assert answer is not None and answer["result"]["content"][0]["text"] == f"clicked {i}", answer
        answers.append(answer)
    if before_kill is not None:
        before_kill()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)  # reaped: a zombie would still count as alive
    proc.stdin.close()
    proc.stdout.close()
    return answers


def stored_once_each(store: Path, session: str) -> None:
    with open_fake(store) as manager:  # the next owner drains the spool of the killed process
        manager.drain_spool()
        captured = [m for m in manager.list(limit=100) if m.source.value == "mcp_tool"]
        pending = manager.stats().spool_pending
    xs = sorted(m.metadata["arguments"]["x"] for m in captured)
    assert xs == list(range(1, CALLS + 1)), f"stored x values {xs}: each call must be stored exactly once"
    assert {m.session_id for m in captured} == {session} and pending == 0
    assert all(m.metadata["success"] is True and m.metadata["tool"] == "click" for m in captured)


def spool_rows(store: Path) -> list[tuple[str, str]]:
    """Every spooled (key, kind) not done: the spool table's rows, and the fallback file's records
    (where a call goes when the catalog stays busy past ``APPEND_BUSY_MS``, as under a loaded CI
    machine: the worker's own write of the call before it) but those whose call the worker stored
    and marked done (their key is in ``spool_done``; the file is read only at the next drain)."""
    with sqlite3.connect(store / "catalog.sqlite3") as conn:
        rows = conn.execute("SELECT idem_key, kind FROM spool ORDER BY seq").fetchall()
        done = {key for (key,) in conn.execute("SELECT idem_key FROM spool_done")}
    fallback = store / FALLBACK_NAME
    records = fallback.read_text().splitlines() if fallback.exists() else []
    return rows + [(r["idem_key"], r["kind"]) for r in map(json.loads, records) if r["idem_key"] not in done]


@pytest.mark.slow
def test_the_middleware_loses_nothing_on_kill_9(tmp_path: Path) -> None:
    store = tmp_path / "store"
    host = tmp_path / "host.py"
    host.write_text(HOST)
    proc = subprocess.Popen(
        [sys.executable, str(host), str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env_for(tmp_path, STALL_AT="3"),
    )

    def wait_for_the_stall() -> None:
        deadline = time.monotonic() + 60
        while not (store / "stalled").exists():
            assert time.monotonic() < deadline, "the worker never reached its 3rd store"
            time.sleep(0.01)

    call_then_kill(proc, wait_for_the_stall)
    rows = spool_rows(store)
    assert len(rows) == CALLS - 2 and {kind for _, kind in rows} == {"mcp_tool"}  # 3 (stored, not done), 4, 5, 6
    stored_once_each(store, "hands_run")


@pytest.mark.slow
def test_the_proxy_loses_nothing_on_kill_9(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (tmp_path / "server.py").write_text(SERVER)
    (tmp_path / "patch").mkdir()
    (tmp_path / "patch" / "sitecustomize.py").write_text(STALL_PROXY)
    script = Path(sys.executable).parent / "remindful"
    command = (
        [str(script)] if script.exists() else [sys.executable, "-c", "from remindful.shells.cli import main; main()"]
    )
    proc = subprocess.Popen(
        [
            *command,
            "--path",
            str(store),
            "proxy",
            "--session",
            "proxied",
            "--",
            sys.executable,
            str(tmp_path / "server.py"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env_for(tmp_path, STALL_AT="1", PYTHONPATH=str(tmp_path / "patch")),
    )
    call_then_kill(proc)  # at once: whatever the worker got to, every answered call is spooled
    assert len(spool_rows(store)) >= CALLS - 1  # the 1st store stalls: at most one row was dropped
    stored_once_each(store, "proxied")


def test_a_live_owner_keeps_its_rows_and_a_dead_one_does_not(tmp_path: Path) -> None:
    assert owner_alive(owner())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with open(f"/proc/{child.pid}/stat", "rb") as f:
            started = f.read().rsplit(b")", 1)[1].split()[19].decode()
        assert owner_alive({"pid": child.pid, "start": started})
        assert not owner_alive({"pid": child.pid, "start": "1"})  # the pid reused by another process
        child.kill()
        time.sleep(0.2)
        assert not owner_alive({"pid": child.pid, "start": started})  # killed, not reaped yet: a zombie
    finally:
        child.kill()
        child.wait()
    assert not owner_alive({"pid": child.pid, "start": started}) and not owner_alive(None)


def test_a_spooled_call_is_redacted_before_it_is_written(tmp_path: Path) -> None:
    store = tmp_path / "store"
    spool = CaptureSpool.from_config(str(store), "s1")
    secret = "jane.doe.secret@corp-mail.example"
    key, call = spool.append(ToolCall("type_text", {"text": f"mail {secret}"}, False, 3.0, error=secret), "action")
    spool.close()
    assert key is not None and secret not in json.dumps(call.arguments) and secret not in (call.error or "")
    blob = b"".join(p.read_bytes() for p in store.rglob("*") if p.is_file())
    assert secret.encode() not in blob and b"[EMAIL_REDACTED]" in blob


def test_nothing_is_spooled_for_an_excluded_session_or_with_memory_off(tmp_path: Path) -> None:
    with open_fake(tmp_path / "a", **{"privacy.exclude_sessions": ["banking_*"]}) as manager:
        key, _ = CaptureSpool.for_store(manager.engine, "banking_1").append(ToolCall("click", {}, True, 1.0), "action")
        assert key is None and manager.stats().spool_pending == 0
    with open_fake(tmp_path / "b", enabled=False) as manager:
        worker = CaptureWorker(lambda: manager.engine)
        worker.submit(ToolCall("click", {}, True, 1.0))
        worker.close()
        assert worker.stats["skipped"] == 1
    rows = spool_rows(tmp_path / "b") if (tmp_path / "b" / "catalog.sqlite3").exists() else []
    assert rows == []


def test_calls_submitted_back_to_back_are_each_stored_once(tmp_path: Path) -> None:
    """Fifty calls submitted back to back are all stored, once each, and leave the spool empty.
    (How long submit holds up a tool's answer is measured by bench/capture_submit.py.)"""
    with open_fake(tmp_path / "store") as manager:
        worker = CaptureWorker(lambda: manager.engine)
        assert worker.flush(10)
        for i in range(50):
            worker.submit(ToolCall("click", {"x": i}, True, 1.0))
        worker.close(timeout=60)
        assert worker.stats["captured"] == 50 and manager.stats().spool_pending == 0
        xs = sorted(m.metadata["arguments"]["x"] for m in manager.list(limit=100))
    assert xs == list(range(50))


def test_a_call_answered_before_the_spool_exists_waits_for_it(tmp_path: Path) -> None:
    """The worker makes the spool in its thread, so that opening the store costs the host nothing.
    A call answered before that used to be kept in memory only: a kill -9 then lost it (seen in
    CI). It now waits for the spool and is committed to it before submit returns."""
    store = tmp_path / "store"
    opened = threading.Event()
    with open_fake(store) as manager:

        def slow_to_open() -> Any:
            opened.wait(10)  # the store opens only after the first call was answered
            return manager.engine

        worker = CaptureWorker(slow_to_open)
        threading.Timer(0.3, opened.set).start()
        worker.submit(ToolCall("click", {"x": 1}, True, 1.0))
        try:
            with sqlite3.connect(f"file:{store / 'catalog.sqlite3'}?mode=ro", uri=True) as conn:
                spooled = conn.execute("SELECT count(*) FROM spool").fetchone()[0] + manager.stats().total_memories
        except sqlite3.OperationalError:  # no catalog or no spool table yet: nothing was committed
            spooled = 0
        worker.close(timeout=60)
        assert worker.stats["captured"] == 1
    assert spooled >= 1, "submit returned before the call was committed anywhere"


def test_fallback_records_a_drainer_took_and_did_not_import_are_drained_later(tmp_path: Path) -> None:
    """A drainer moves the fallback file aside before importing it. If it died (kill -9) or its
    import failed in between, the copy was never looked at again: the calls in it were lost."""
    from dataclasses import asdict

    store = tmp_path / "store"
    with open_fake(store) as manager:
        manager.stats()  # the store exists
    call = ToolCall("click", {"x": 4}, True, 1.0)
    record = {"session_id": "proxied", "type": "action", "call": asdict(call), "owner": None, "at": call.finished_at}
    line = {"idem_key": "mcp_tool_orphan", "kind": "mcp_tool", "payload": json.dumps(record), "created_at": 1.0}
    orphan = store / f"{FALLBACK_NAME}.99999.draining"  # the copy of a drainer that is gone
    orphan.write_text(json.dumps(line) + "\n")
    with open_fake(store) as manager:
        assert manager.drain_spool() == 1
        stored = [m.metadata["arguments"] for m in manager.list(limit=10) if m.source.value == "mcp_tool"]
        assert manager.stats().spool_pending == 0
    assert stored == [{"x": 4}] and not orphan.exists()


def test_a_spooled_call_whose_drain_failed_is_stored_by_the_next_drain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The capture filters' min-interval memory saw the call at the drain whose store failed: the
    retry took it for a repeat of itself and finished it unstored (as the hooks' events did)."""
    from dataclasses import asdict

    from remindful.errors import StorageError

    store = tmp_path / "store"
    with open_fake(store) as manager:
        manager.stats()  # the store exists
    call = ToolCall("click", {"x": 5}, True, 1.0)
    record = {"session_id": "proxied", "type": "action", "call": asdict(call), "owner": None, "at": call.finished_at}
    line = {"idem_key": "mcp_tool_retried", "kind": "mcp_tool", "payload": json.dumps(record), "created_at": 1.0}
    (store / FALLBACK_NAME).write_text(json.dumps(line) + "\n")
    with open_fake(store) as manager:
        engine = manager.engine
        real, calls = engine.store_batch, []

        def failing_once(items: Any, **kwargs: Any) -> list[str]:
            calls.append(items)
            if len(calls) == 1:
                raise StorageError("the catalog does not answer")
            return real(items, **kwargs)

        monkeypatch.setattr(engine, "store_batch", failing_once)
        with pytest.raises(StorageError):
            manager.drain_spool()
        manager.drain_spool()
        stored = [m.metadata["arguments"] for m in manager.list(limit=10) if m.source.value == "mcp_tool"]
    assert stored == [{"x": 5}]
