"""The daemon keeps in memory the hook events no file could take (issue 32 item 5, the full disk:
tests/reliability/test_full_disk_hooks.py runs it on a real one): the ``keep`` request of the local
channel, its checks, its bound, and the drain loop writing what was kept once it can."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_session import wait_until
from remindful import daemon as daemon_module
from remindful import runtime
from remindful.daemon import DaemonHandle, start_daemon_threads
from remindful.engine import spool
from remindful.engine.redact import StoreRedactor
from remindful.testing import open_fake


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[Any, DaemonHandle]]:
    memory = open_fake(tmp_path / "store")
    handle = start_daemon_threads(memory, http=False)
    assert handle.listening.wait(30)
    yield memory, handle
    handle.stop()
    memory.close()


def event(store: Path, n: int) -> dict[str, Any]:
    """A hook event as a hook that could not write it hands it over: the spool's fallback line."""
    record = {
        "event": "PostToolUse",
        "session_id": "s1",
        "at": 1_700_000_000.0 + n,
        "memories": [
            {
                "content": f"Ran `make step-{n}`: ok",
                "type": "action",
                "source": "hook",
                "metadata": {"hook_event": "PostToolUse", "tool_name": "Bash", "arguments": {"command": f"make {n}"}},
            }
        ],
    }
    payload = spool.encode(record, StoreRedactor(None, store))
    return {"idem_key": f"key-{n}", "kind": "PostToolUse", "payload": str(payload), "created_at": record["at"]}


def test_kept_events_are_stored(daemon: Any, tmp_path: Path) -> None:
    memory, handle = daemon
    store = tmp_path / "store"
    for n in range(3):
        answer = runtime.ask_daemon(store, {"op": "keep", **event(store, n)})
        assert answer is not None and answer["success"], answer
    wait_until(lambda: not handle.kept, 30, "the kept events written to the spool")
    wait_until(lambda: len(memory.list(session_id="s1")) == 3, 30, "the kept events stored")
    assert sorted(m.content for m in memory.list(session_id="s1")) == [f"Ran `make step-{n}`: ok" for n in range(3)]


@pytest.mark.parametrize(
    ("change", "field"),
    [({"payload": None}, "payload"), ({"idem_key": 5}, "idem_key"), ({"created_at": "soon"}, "created_at")],
)
def test_a_malformed_keep_request_gets_one_line_naming_the_field(
    daemon: Any, tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    _memory, handle = daemon
    store = tmp_path / "store"
    answer = runtime.ask_daemon(store, {"op": "keep", **event(store, 0), **change})
    assert answer is not None and answer["success"] is False and answer["status"] == 400
    assert answer["error"].startswith(f"Invalid '{field}'") and not handle.kept


def test_the_daemon_keeps_at_most_its_bound(daemon: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _memory, handle = daemon
    store = tmp_path / "store"
    monkeypatch.setattr(handle, "spool_kept", lambda: 0)  # the disk stays full
    one = event(store, 0)
    monkeypatch.setattr(daemon_module, "KEPT_MAX_BYTES", len(one["payload"]) * 2)
    assert runtime.ask_daemon(store, {"op": "keep", **one})["success"]  # type: ignore[index]
    assert runtime.ask_daemon(store, {"op": "keep", **event(store, 1)})["success"]  # type: ignore[index]
    refused = runtime.ask_daemon(store, {"op": "keep", **event(store, 2)})
    assert refused is not None and refused["success"] is False and "Storage full" in refused["error"]
    assert [k for k, *_ in handle.kept] == ["key-0", "key-1"]
    assert json.loads(handle.kept[0][2])["memories"][0]["content"] == "Ran `make step-0`: ok"
