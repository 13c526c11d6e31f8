"""``remindful serve`` at a terminal: it says what it serves, where the store is and how to connect
a client, on stderr only, and Ctrl-C stops it without a traceback; under a client's pipes it says
nothing. The terminal is a real pseudo-terminal (``pty``): Ctrl-C is the byte the line discipline
turns into SIGINT for the foreground process group, as a person's key press is."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent_session import SCRIPT, agent_env

#: What a stuck child is given before the test gives up on it (a guard against hanging, not a
#: speed target: speed is bench/first_answer.py's and bench/mcp_cold_start.py's business).
GIVE_UP_S = 120.0
CTRL_C = b"\x03"
BANNER_END = b"Ctrl-C stops it."


def read_until(fd: int, seen: bytearray, done: Callable[[bytes], bool]) -> None:
    """Read the terminal into ``seen`` until ``done(seen)`` or the child closed it."""
    give_up = time.monotonic() + GIVE_UP_S
    while not done(bytes(seen)):
        assert time.monotonic() < give_up, f"gave up waiting; the terminal showed: {bytes(seen)!r}"
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                return
            if not chunk:
                return
            seen += chunk


def wait_exit(pid: int, fd: int, seen: bytearray) -> int:
    """The child's exit status, reading what it still writes meanwhile."""
    give_up = time.monotonic() + GIVE_UP_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            read_until(fd, seen, lambda _: False)  # what it wrote last
            return status
        if time.monotonic() > give_up:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"serve did not stop; the terminal showed: {bytes(seen)!r}")
        read_until(fd, seen, lambda _: True)
        select.select([fd], [], [], 0.1)


def at_a_terminal() -> None:
    """Ctrl-C as a shell's foreground job has it, whatever this test run inherited (a run started
    in the background by a script ignores SIGINT, and passes that on to its children)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def serve_on_a_terminal(home: Path, store: Path, backend: str = "fake") -> tuple[int, int]:
    env = agent_env(home, REMINDFUL_EMBEDDINGS__BACKEND=backend, MEMORY_STORAGE_PATH=str(store))
    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal is its stdin, stdout and stderr
        try:
            at_a_terminal()
            os.execve(SCRIPT, [SCRIPT, "serve"], env)
        finally:
            os._exit(127)
    return pid, fd


@pytest.mark.parametrize(
    ("presses", "backend"),
    [(1, "fake"), (2, "fake"), pytest.param(1, "onnx", marks=pytest.mark.slow)],
)
def test_serve_on_a_terminal_says_what_it_serves_and_ctrl_c_stops_it(
    tmp_path: Path, presses: int, backend: str
) -> None:
    """With the real model, the Ctrl-C comes while the SDK's thread loads it: the process must not
    abort in its native code at exit."""
    store = tmp_path / "store"
    pid, fd = serve_on_a_terminal(tmp_path / "home", store, backend)
    seen = bytearray()
    try:
        read_until(fd, seen, lambda out: BANNER_END in out)
        os.write(fd, CTRL_C * presses)  # a second press while it stops must not show a traceback either
        status = wait_exit(pid, fd, seen)
    finally:
        os.close(fd)
    text = bytes(seen).decode(errors="replace")
    assert "MCP server on stdio" in text
    assert f"store: {store}" in text
    assert "remindful mcp-config" in text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert "terminate called" not in text, text
    assert os.WIFEXITED(status), f"ended by signal {os.WTERMSIG(status)}: {text}"
    assert os.WEXITSTATUS(status) in (0, 130), text


def test_serve_at_a_terminal_writes_nothing_on_stdout(tmp_path: Path) -> None:
    """stdout is the MCP wire even at a terminal: the words go to stderr."""
    store = tmp_path / "store"
    env = agent_env(tmp_path / "home", REMINDFUL_EMBEDDINGS__BACKEND="fake", MEMORY_STORAGE_PATH=str(store))
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [SCRIPT, "serve"], stdin=slave, stdout=subprocess.PIPE, stderr=slave, env=env, preexec_fn=at_a_terminal
    )
    os.close(slave)
    seen = bytearray()
    try:
        read_until(master, seen, lambda out: BANNER_END in out)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=GIVE_UP_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        os.close(master)
    assert f"store: {store}".encode() in seen
    assert out == b""
    assert proc.returncode == 0


def test_serve_under_a_clients_pipes_says_nothing(tmp_path: Path) -> None:
    env = agent_env(tmp_path / "home", REMINDFUL_EMBEDDINGS__BACKEND="fake", MEMORY_STORAGE_PATH=str(tmp_path / "s"))
    done = subprocess.run([SCRIPT, "serve"], input=b"", capture_output=True, env=env, timeout=GIVE_UP_S, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"" and done.stderr == b""


@pytest.mark.slow
def test_prepare_says_what_it_does_on_a_terminal(tmp_path: Path) -> None:
    """``remindful prepare`` (the README's install step) prepares the real model once, saying so on
    a terminal; a second run finds it prepared and says nothing of a preparation."""
    env = agent_env(tmp_path / "home", XDG_CACHE_HOME=str(tmp_path / "cache"))
    runs = []
    for _ in range(2):
        pid, fd = pty.fork()
        if pid == 0:
            try:
                at_a_terminal()
                os.execve(SCRIPT, [SCRIPT, "prepare"], env)
            finally:
                os._exit(127)
        seen = bytearray()
        try:
            status = wait_exit(pid, fd, seen)
        finally:
            os.close(fd)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, bytes(seen)
        runs.append(bytes(seen).decode(errors="replace"))
    assert "Preparing the int8 embedding model" in runs[0] and "the embedding model is ready" in runs[0]
    assert "Preparing" not in runs[1] and "the embedding model is ready" in runs[1]
    assert list((tmp_path / "cache" / "remindful" / "models").glob("*.int8.onnx"))


if sys.platform != "linux":  # pty semantics (EIO at the end, the line discipline's Ctrl-C) as on Linux
    pytestmark = pytest.mark.skip(reason="pseudo-terminal tests run on Linux")


def test_a_second_ctrl_c_before_the_stop_has_begun_ends_the_process_without_a_traceback(tmp_path: Path) -> None:
    """Two presses at once: the second came while the first's KeyboardInterrupt was being caught,
    before the stop swapped the handler, and Python's own printed a traceback (a red CI run)."""
    script = (
        "import os, signal, time\n"
        "from remindful.shells.mcp import fast_start\n"
        "fast_start._interrupt_once()\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(5)\n"
        "except KeyboardInterrupt:\n"
        "    os.kill(os.getpid(), signal.SIGINT)  # the second press, before the stop has begun\n"
        "    time.sleep(5)\n"
        "    print('still running')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(tmp_path)},
        preexec_fn=at_a_terminal,  # a run started in the background ignores SIGINT: the presses too
    )
    assert done.returncode == 130, done
    assert "Traceback" not in done.stderr and "still running" not in done.stdout, done
