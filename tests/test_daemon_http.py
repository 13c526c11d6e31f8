"""The daemon in-process: drains hook events (how fast: ``bench/hook_latency.py --searchable``),
serves context over loopback HTTP with a token, one owner per store with a standby that takes over."""

from __future__ import annotations

import http.client
import io
import json
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from remindful.daemon import DaemonHandle, start_daemon_threads
from remindful.services.access import http_token
from remindful.shells.hook import run
from remindful.testing import open_fake

HANG_S = 20.0  # waiting longer means the event is lost, not slow


def hook(store: Path, event: str, data: dict[str, Any], *, context: bool = False) -> str:
    out = io.StringIO()
    argv = ["--path", str(store), "hook", event] + ([] if context else ["--no-context"])
    assert run(argv, stdin=io.StringIO(json.dumps(data)), stdout=out) == 0
    return out.getvalue()


def request(handle: DaemonHandle, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", handle.port or 0, timeout=10)
    headers = {"Authorization": f"Bearer {token if token is not None else handle.token}"}
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    response = conn.getresponse()
    raw = response.read()
    conn.close()
    is_json = response.getheader("content-type", "").startswith("application/json")
    return response.status, json.loads(raw) if is_json else raw.decode("utf-8", "replace")


@pytest.fixture
def daemon(tmp_path: Path) -> Any:
    memory = open_fake(tmp_path / "store")
    handle = start_daemon_threads(memory)
    yield memory, handle
    handle.stop()
    memory.close()


def test_event_is_searchable_once_drained(daemon: Any, tmp_path: Path) -> None:
    memory, handle = daemon
    assert handle.owner.is_set()
    payload = {
        "session_id": "s1",
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "alembic upgrade head", "description": "Apply the database migrations"},
        "tool_response": {"stdout": "Running upgrade -> 3f2a"},
    }
    returned = time.monotonic()
    hook(tmp_path / "store", "PostToolUse", payload)
    found = []
    while time.monotonic() - returned < HANG_S and not found:  # the latency is bench/hook_latency.py --searchable's
        found = [h for h in memory.search("database migrations", limit=5) if "alembic" in h.content]
        time.sleep(0.02)
    assert found, f"not searchable {HANG_S} s after the hook returned"
    assert memory.stats().spool_pending == 0


def test_daemon_file_is_private_and_removed_at_stop(tmp_path: Path) -> None:
    memory = open_fake(tmp_path / "store")
    handle = start_daemon_threads(memory)
    info_path = tmp_path / "store" / "daemon.json"
    info = json.loads(info_path.read_text())
    assert stat.S_IMODE(info_path.stat().st_mode) == 0o600
    assert info["port"] == handle.port and "token" not in info  # the store's token, kept once, is used
    assert handle.token == http_token(tmp_path / "store")
    assert stat.S_IMODE((tmp_path / "store" / "http_token").stat().st_mode) == 0o600
    handle.stop()
    assert not info_path.exists()
    memory.close()


def test_http_needs_the_token_and_answers_context(daemon: Any) -> None:
    memory, handle = daemon
    memory.store("The staging deploy needs VPN access before running kubectl", type="knowledge")
    memory.store("The staging deploy needs VPN access before running kubectl!", type="knowledge")  # near-dup
    memory.store("Lunch order: pizza on Fridays", type="conversation")
    assert request(handle, "GET", "/health", token="wrong")[0] == 401
    assert request(handle, "POST", "/context", {"query": "deploy"}, token="")[0] == 401
    assert request(handle, "POST", "/context", {"query": "deploy"}, token="wrong")[0] == 401
    status, body = request(handle, "GET", "/health")
    assert status == 200 and body["success"] is True
    status, body = request(handle, "POST", "/context", {"query": "how do I deploy to staging", "budget_tokens": 300})
    assert status == 200
    lines = body["context"].splitlines()
    assert lines[0].startswith("Remembered by remindful")
    assert sum("staging deploy" in line for line in lines) == 1  # the near-duplicate collapsed
    assert request(handle, "POST", "/context", {"query": ""})[0] == 400
    answer = request(handle, "POST", "/context", {"query": "x", "budget_tokens": -5})
    assert answer == (400, {"success": False, "error": "Invalid 'budget_tokens': expected a positive integer"})
    assert request(handle, "POST", "/nope", {"query": "x"})[0] == 404


def test_hook_context_comes_from_the_daemon(daemon: Any, tmp_path: Path) -> None:
    memory, handle = daemon
    memory.store("Config loader: yaml.safe_load returns None for empty files", type="knowledge")
    assert handle.listening.wait(30)  # the socket answers once the model is loaded
    out = hook(
        tmp_path / "store",
        "UserPromptSubmit",
        {"session_id": "s2", "hook_event_name": "UserPromptSubmit", "prompt": "why does the config loader crash?"},
        context=True,
    )
    answer = json.loads(out)["hookSpecificOutput"]
    assert answer["hookEventName"] == "UserPromptSubmit"
    assert "yaml.safe_load returns None" in answer["additionalContext"]
    assert "why does the config loader crash?" not in answer["additionalContext"]


def test_second_daemon_stands_by_and_takes_over(tmp_path: Path) -> None:
    first_memory = open_fake(tmp_path / "store")
    second_memory = open_fake(tmp_path / "store")
    first = start_daemon_threads(first_memory)
    second = start_daemon_threads(second_memory)
    try:
        assert first.owner.is_set() and not second.owner.is_set()
        first.stop()
        assert second.owner.wait(5), "standby did not take over"
        hook(
            tmp_path / "store",
            "PostToolUseFailure",
            {"session_id": "s3", "tool_name": "Read", "tool_input": {"file_path": "README.md"}, "error": "missing"},
        )
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not second_memory.list():
            time.sleep(0.05)
        assert [m.content for m in second_memory.list()] == ["Read README.md: failed: missing"]
    finally:
        first.stop()
        second.stop()
        first_memory.close()
        second_memory.close()


def test_missing_watch_dir_is_an_error_at_start(tmp_path: Path) -> None:
    from remindful.errors import RemindfulError

    with open_fake(tmp_path / "store") as memory, pytest.raises(RemindfulError, match="Watch directory does not exist"):
        start_daemon_threads(memory, watch_dirs=[tmp_path / "nope"])


@pytest.mark.slow
def test_hook_event_is_found_by_its_vector_on_the_real_stack(tmp_path: Path, onnx_embedder: Any) -> None:
    import remindful

    with remindful.open(tmp_path / "store", embedder=onnx_embedder) as memory:
        memory.store("warm up the model and the index")  # the first embedding and Chroma open
        handle = start_daemon_threads(memory)
        try:
            payload = {
                "session_id": "real",
                "tool_name": "Bash",
                "tool_input": {"command": "terraform apply", "description": "Provision the cloud network"},
            }
            returned = time.monotonic()
            hook(tmp_path / "store", "PostToolUse", {**payload, "tool_response": {"stdout": "Apply complete!"}})
            found: list[Any] = []
            # The catalog's words answer first; the vector follows from the background indexer.
            while time.monotonic() - returned < HANG_S and not found:
                hits = memory.search("provisioning infrastructure", limit=3, min_score=0)  # found, not judged
                found = [h for h in hits if "terraform" in h.content and "dense" in h.sources]
                time.sleep(0.02)
            assert found, f"not found by its vector {HANG_S} s after the hook returned"
        finally:
            handle.stop()
