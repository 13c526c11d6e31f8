"""Send a signal to one thread of a process, not its main one: the kernel may give a process's
signal to any thread that does not block it, and a process must stop alike whichever gets it."""

from __future__ import annotations

import ctypes
import os
import platform
from pathlib import Path

#: The tgkill system call's number (a signal to one thread of a process), where it is known.
TGKILL = {"x86_64": 234, "aarch64": 131}.get(platform.machine())
#: Whether this machine can do it (a skipif for the tests that need it).
AVAILABLE = TGKILL is not None and Path("/proc/self/task").exists()


def _thread_kill(pid: int, tid: int, signum: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(TGKILL, pid, tid, signum) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{os.strerror(code)}: tgkill {pid} {tid} {signum}")


def signals_in(status: Path, field: str) -> set[int]:
    """The signals of a mask line (``SigIgn``, ``SigBlk``...) of a /proc ``status`` file."""
    for line in status.read_text().splitlines():
        if line.startswith(f"{field}:"):
            mask = int(line.split()[1], 16)
            return {signum for signum in range(1, 65) if mask & (1 << (signum - 1))}
    raise AssertionError(f"no {field} line in {status}")


def _accepting_threads(pid: int, signum: int) -> list[int]:
    """The threads of ``pid`` but its main one that do not block ``signum`` (``SigBlk`` of /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            blocked = signals_in(task / "status", "SigBlk")
        except (FileNotFoundError, ProcessLookupError):  # a short-lived thread (a timer's) ended meanwhile
            continue
        if int(task.name) != pid and signum not in blocked:
            found.append(int(task.name))
    return sorted(found)


def signal_another_thread(pid: int, signum: int) -> int:
    """Give ``signum`` to a thread of ``pid`` that is not its main one (the oldest that takes it);
    return that thread's id."""
    for tid in _accepting_threads(pid, signum):
        try:
            _thread_kill(pid, tid, signum)
            return tid
        except ProcessLookupError:  # a short-lived thread (a timer's) ended meanwhile
            continue
    raise AssertionError(f"process {pid} has no thread but its main one that takes signal {signum}")
