"""A real Chroma server for integration tests: ``chroma run`` on a free port, once per session.

Import the fixture where it is needed (``from conftest_chroma import chroma_server``); it is not in
``conftest.py`` so that sessions without server tests never start one.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

STARTUP_TIMEOUT = 30.0


def free_port() -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _heartbeat(port: int) -> bool:
    # no proxies: a configured HTTP proxy must not intercept a loopback health check
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """``(host, port)`` of a ``chroma run`` server on a temp directory, stopped at session end."""
    exe = Path(sys.executable).with_name("chroma")
    if not exe.exists():
        pytest.skip(f"no chroma executable next to {sys.executable}")
    root = tmp_path_factory.mktemp("chroma-server")
    port = free_port()
    with (root / "server.log").open("wb") as log:
        proc = subprocess.Popen(
            [str(exe), "run", "--path", str(root / "data"), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + STARTUP_TIMEOUT
            while not _heartbeat(port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    output = (root / "server.log").read_text(errors="replace")[-2000:]
                    pytest.fail(f"chroma run did not become ready on port {port}:\n{output}")
                time.sleep(0.1)
            yield "127.0.0.1", port
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
