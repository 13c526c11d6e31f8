"""The store lock (remindful.engine.storelock): writers shared, a restore or a clear-all exclusive,
a turnstile against starvation, the store generation, and one maintenance at a time. The
processes' side of it runs in tests/reliability/test_replace_under_load.py."""

from __future__ import annotations

import fcntl
import io
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from remindful import StorageLockedError
from remindful.engine.storelock import StoreLock
from remindful.shells.hook import run
from remindful.testing import open_fake

HOLD = """
import sys, time
from remindful.engine.storelock import StoreLock
with StoreLock(sys.argv[1]).{how}:
    print("held", flush=True)
    sys.stdin.readline()
"""


def hold_elsewhere(path: Path, how: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD.format(how=how), str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def release(proc: subprocess.Popen[str]) -> None:
    proc.communicate("\n", timeout=30)
    assert proc.returncode == 0


def test_a_writer_waits_for_a_replacement_and_the_generation_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = StoreLock(tmp_path)
    assert lock.generation() == 0
    other = hold_elsewhere(tmp_path, 'exclusive("restore")')
    entered = threading.Event()
    blocked = threading.Event()  # the writer found the lock taken and waits in the kernel
    seen: list[int] = []
    real_flock = fcntl.flock

    def flock(fd: int, how: int) -> None:
        if how == fcntl.LOCK_SH and threading.current_thread() is writer:
            try:
                return real_flock(fd, how | fcntl.LOCK_NB)
            except BlockingIOError:
                blocked.set()
        return real_flock(fd, how)

    def write() -> None:
        with lock.shared():
            seen.append(lock.generation())
            entered.set()

    writer = threading.Thread(target=write)
    monkeypatch.setattr(fcntl, "flock", flock)
    writer.start()
    assert blocked.wait(60)  # held off while the other process replaces the content...
    assert not entered.is_set()
    with pytest.raises(BlockingIOError, match="being restored or cleared"), lock.shared(wait=False):
        pass
    release(other)
    writer.join(30)
    assert entered.is_set() and seen == [1] and lock.generation() == 1  # ...and let in after it


def test_a_replacement_waits_for_writers_then_times_out_clearly(tmp_path: Path) -> None:
    other = hold_elsewhere(tmp_path, "shared()")
    timed_out = pytest.raises(StorageLockedError, match=r"Cannot restore now: other processes kept writing .* for 0 s")
    with timed_out, StoreLock(tmp_path).exclusive("restore", timeout=0.2):
        pass
    release(other)
    with StoreLock(tmp_path).exclusive("restore", timeout=5) as generation:
        assert generation == 0  # the attempt that timed out held nothing, changed nothing
    assert StoreLock(tmp_path).generation() == 1


def test_the_replacing_thread_writes_through_and_nested_writers_never_wait(tmp_path: Path) -> None:
    """``wait=False`` raises where a writer would wait: so these fail instead of hanging."""
    lock = StoreLock(tmp_path)
    with lock.exclusive("clear all memories"), lock.shared(wait=False), lock.shared(wait=False):
        pass  # its own writes (a clear-all deletes through the catalog)
    with lock.shared(), lock.shared(wait=False):  # nested: no second pass through the gate
        pass
    other = hold_elsewhere(tmp_path, 'exclusive("restore")')  # what waiting looks like: refused here
    with pytest.raises(BlockingIOError), StoreLock(tmp_path).shared(wait=False):
        pass
    release(other)


def test_one_maintenance_at_a_time_naming_the_first(tmp_path: Path) -> None:
    other = hold_elsewhere(tmp_path, 'maintenance("restore")')
    with pytest.raises(StorageLockedError) as info, StoreLock(tmp_path).maintenance("clear all memories"):
        pass
    assert f"Cannot clear all memories now: a restore (process {other.pid}, started " in str(info.value)
    release(other)
    lock = StoreLock(tmp_path)
    with lock.maintenance("restore"), lock.maintenance("rebuild the index"):  # re-entrant in a thread
        pass


def test_a_hook_during_a_restore_keeps_its_event_in_the_fallback_file(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with open_fake(store) as memory:
        memory.store("the store exists")
    event = {"session_id": "s-restore", "prompt": "remember the blue door", "cwd": str(tmp_path)}
    restore = hold_elsewhere(store, 'exclusive("restore")')
    argv = ["--path", str(store), "hook", "UserPromptSubmit", "--no-context"]
    assert run(argv, stdin=io.StringIO(json.dumps(event)), stdout=io.StringIO()) == 0  # at once
    assert (store / "spool-fallback.jsonl").exists()
    release(restore)
    with open_fake(store) as memory:
        memory.drain_spool()
        assert any("blue door" in m.content for m in memory.list(session_id="s-restore"))
