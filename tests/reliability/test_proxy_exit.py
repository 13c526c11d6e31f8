"""`remindful proxy` when the wrapped server exits before answering (issue 15: the initialize got
no answer, the child's exit code was lost and the proxy could abort with "Fatal Python error:
_enter_buffered_busy", exit 134). The real CLI in a real process, the client's stdin kept open."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}},
}


def test_a_server_exiting_unanswered_gets_the_client_an_error_and_its_exit_code(tmp_path: Path) -> None:
    env = {**os.environ, "MEMORY_STORAGE_PATH": str(tmp_path / "store")}
    # The wrapped server exits once it has the request unanswered (reading it first: no race).
    server = "import sys; sys.stdin.readline(); sys.exit(3)"
    with subprocess.Popen(
        [str(Path(sys.executable).parent / "remindful"), "proxy", "--", sys.executable, "-c", server],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as proxy:
        assert proxy.stdin is not None and proxy.stdout is not None and proxy.stderr is not None
        proxy.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        proxy.stdin.flush()
        answer = json.loads(proxy.stdout.readline() or b"null")  # the client's stdin stays open meanwhile
        assert answer is not None, proxy.stderr.read().decode()[-2000:]
        assert answer["id"] == 1 and answer["error"]["code"] == -32000
        assert "exited with code 3" in answer["error"]["message"]
        assert proxy.wait(timeout=60) == 3
        proxy.stdin.close()
        assert "Fatal" not in proxy.stderr.read().decode()
