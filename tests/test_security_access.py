"""Another local user against remindful's HTTP surfaces, for real: the servers run as this user
(root in CI), the attacker is ``nobody`` (``runuser -u nobody``), with only the standard library.

Reproduces the issue's attack: without the token no tool is reachable over HTTP, the token file
cannot be read, and the symlink trick (``leak.md → a private file`` then ``memory_index_file``)
gets nowhere."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remindful.daemon import start_daemon_threads
from remindful.testing import open_fake
from requirements import is_root, requires

pytestmark = [
    pytest.mark.slow,
    requires(
        is_root() and shutil.which("runuser") is not None and Path("/usr/bin/python3").exists(),
        "root, runuser and /usr/bin/python3 (to act as a second local user)",
    ),
]

#: What ``nobody`` runs: every request it can make, and what it can read; prints one JSON line.
ATTACKER = r"""
import http.client, json, sys
host, token_file, target = sys.argv[1], sys.argv[4], sys.argv[5]
mcp_port, daemon_port = int(sys.argv[2]), int(sys.argv[3])
out = {}
def ask(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection(host, port, timeout=10)
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    h.update(headers or {})
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=h)
    r = conn.getresponse()
    data = r.read().decode("utf-8", "replace")
    conn.close()
    return r.status, data
init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}
index = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "memory_index_file",
         "arguments": {"path": target}}}
out["mcp_no_token"] = ask(mcp_port, "POST", "/mcp", init)[0]
out["mcp_guessed_token"] = ask(mcp_port, "POST", "/mcp", init, {"Authorization": "Bearer guess"})[0]
out["mcp_index_no_token"] = ask(mcp_port, "POST", "/mcp", index)[0]
out["daemon_health"] = ask(daemon_port, "GET", "/health")[0]
out["daemon_context"] = ask(daemon_port, "POST", "/context", {"query": "root"})[0]
out["dashboard"] = ask(daemon_port, "GET", "/")[0]
try:
    open(token_file).read()
    out["token_file"] = "read"
except OSError as exc:
    out["token_file"] = type(exc).__name__
print(json.dumps(out))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "server exited"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


@pytest.fixture
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory every user can enter (like a shared /tmp), with a private file of ours in it."""
    base = Path(tmp_path_factory.mktemp("shared"))
    base.chmod(0o1777)
    for parent in base.parents:  # pytest's own tmp root is 0700: let nobody through to this one
        if parent == Path("/tmp") or parent == Path("/"):
            break
        parent.chmod(parent.stat().st_mode | 0o711)
    private = base / "private.md"
    private.write_text("# secrets\n\nroot:$6$planted-hash-xyz:20228:0:99999:7:::\n")
    private.chmod(0o600)
    yield base


def test_a_second_local_user_reaches_nothing_without_the_token(world: Path) -> None:
    store = world / "store"
    env = {**os.environ, "REMINDFUL_EMBEDDINGS__BACKEND": "fake", "MEMORY_STORAGE_PATH": str(store)}
    env.pop("REMINDFUL_HTTP_TOKEN", None)
    mcp_port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "remindful"), "serve", "--transport", "http", "--port", str(mcp_port)],
        env=env,
        stderr=subprocess.PIPE,
    )
    memory = open_fake(store)
    daemon = start_daemon_threads(memory)
    try:
        wait_listening(mcp_port, server)
        assert daemon.port is not None
        # nobody plants its symlink where it can write, pointing at our private file
        leak = world / "leak.md"
        subprocess.run(["runuser", "-u", "nobody", "--", "ln", "-s", str(world / "private.md"), str(leak)], check=True)
        script = world / "attacker.py"
        script.write_text(ATTACKER)
        script.chmod(0o644)
        result = subprocess.run(
            [
                "runuser",
                "-u",
                "nobody",
                "--",
                "/usr/bin/python3",
                str(script),
                "127.0.0.1",
                str(mcp_port),
                str(daemon.port),
                str(store / "http_token"),
                str(leak),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        seen = json.loads(result.stdout)
        assert seen == {
            "mcp_no_token": 401,
            "mcp_guessed_token": 401,
            "mcp_index_no_token": 401,
            "daemon_health": 401,
            "daemon_context": 401,
            "dashboard": 401,
            "token_file": "PermissionError",
        }, seen
        assert oct(store.stat().st_mode & 0o777) == "0o700"
        assert not any(b"planted-hash" in p.read_bytes() for p in store.rglob("*") if p.is_file())
    finally:
        daemon.stop()
        memory.close()
        server.terminate()
        server.wait(timeout=30)
        if server.stderr is not None:
            server.stderr.close()
