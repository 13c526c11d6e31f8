"""`remindful serve` also runs the daemon: a hook event spooled while it runs gets stored."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import remindful

pytestmark = [pytest.mark.slow, pytest.mark.integration]
SCRIPT = str(Path(sys.executable).with_name("remindful"))
FIXTURES = Path(__file__).parent / "fixtures" / "hooks"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_drains_the_hook_spool(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMINDFUL_") and k != "MEMORY_STORAGE_PATH"}
    env.update(HOME=str(tmp_path), REMINDFUL_EMBEDDINGS__BACKEND="fake", REMINDFUL_DAEMON__SERVE_START_DELAY_S="0")
    env["REMINDFUL_HOOKS__START_DAEMON"] = "false"  # serve holds the daemon role
    server = subprocess.Popen(
        [SCRIPT, "--path", str(store), "serve", "--transport", "http", "--port", str(_free_port())],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (store / "daemon.json").exists():  # the daemon role has started
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            assert time.monotonic() < deadline, "the daemon never started"
            time.sleep(0.2)
        event = json.loads((FIXTURES / "PostToolUse.json").read_text())
        event["session_id"] = "serve-test"
        hook = subprocess.run(
            [SCRIPT, "--path", str(store), "hook", "PostToolUse"],
            input=json.dumps(event),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert hook.returncode == 0, hook.stderr
        found = []
        while not found and time.monotonic() < deadline:
            with remindful.open(store, **{"embeddings.backend": "fake"}) as memory:
                found = memory.list(session_id="serve-test")
            time.sleep(0.2)
        assert found, "the spooled hook event was not stored while serve ran"
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stderr:
            server.stderr.close()
