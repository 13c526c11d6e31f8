"""The locks and markers by which the processes sharing a storage directory share its vector index.

- :class:`IndexLock` (``<storage>/index.lock``): serialises index writes across threads and
  processes and counts them, so a process can tell its view of the files went stale;
- :class:`ViewLock`: within a process, queries share its copy of the index, a reload or a close
  holds it alone, and a query never waits for it;
- :class:`IndexHolders` (``<storage>/index.holders/<pid>``): which processes have the index open,
  so the next opener knows whether one died holding it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from remindful.runtime import pid_alive

#: A background wait for the index lock checks this often whether it should give up.
LOCK_POLL_S = 0.05


class WaitCancelled(Exception):
    """A background wait for the index lock gave up: the mirror is closing."""


class IndexLock:
    """Serialises vector-index writes across threads and processes (``<storage>/index.lock``), and
    counts them.

    The lock file holds a generation number that every holder bumps when it leaves (unless it
    says it wrote nothing): a process compares it with the generation its view of the index was
    loaded at to tell whether another process wrote since (:meth:`generation`, one small read).
    chromadb's embedded client keeps its own copy of each HNSW graph in memory and writes it back
    to the shared files, so a write through a stale copy would overwrite the others' vectors.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._thread_lock = threading.Lock()

    def generation(self) -> int:
        """The generation now (0 before the first write); not locked, so possibly already old."""
        try:
            return _read_generation(self.path.read_bytes())
        except FileNotFoundError:
            return 0

    @contextlib.contextmanager
    def __call__(self, *, write: bool = True, cancel: threading.Event | None = None) -> Iterator[int]:
        """Hold the lock; yields the generation at entry. With ``write`` (the default) the
        generation is bumped on the way out, even after an error (a write may have half happened).
        With ``cancel``, the wait gives up (WaitCancelled) once the event is set."""
        self._acquire_thread_lock(cancel)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            if not _flock(fd, cancel):
                raise WaitCancelled  # the descriptor is the waiting thread's now
            try:
                generation = _read_generation(os.pread(fd, 32, 0))
                try:
                    yield generation
                finally:
                    if write:
                        data = str(generation + 1).encode()
                        os.pwrite(fd, data, 0)
                        os.ftruncate(fd, len(data))
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        finally:
            self._thread_lock.release()

    def _acquire_thread_lock(self, cancel: threading.Event | None) -> None:
        if cancel is None:
            self._thread_lock.acquire()
            return
        while not self._thread_lock.acquire(timeout=LOCK_POLL_S):
            if cancel.is_set():
                raise WaitCancelled


def _flock(fd: int, cancel: threading.Event | None) -> bool:
    """Lock ``fd`` exclusively, waiting as long as it takes; with ``cancel``, give up once the
    event is set and return False. A blocked flock cannot be interrupted, and tries at intervals
    lose to the processes blocked in flock (they are woken first): so the wait is a blocking one
    in a thread of its own, which (if given up) unlocks and closes ``fd`` once it gets the lock.
    The thread holds nothing else and touches nothing but the lock file."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if cancel is None else fcntl.LOCK_NB))
        return True
    except BlockingIOError:
        pass
    assert cancel is not None
    granted = threading.Event()
    given_up = False
    guard = threading.Lock()

    def wait() -> None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with guard:
            if given_up:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            else:
                granted.set()

    threading.Thread(target=wait, name="remindful-index-lock-wait", daemon=True).start()
    while not granted.wait(LOCK_POLL_S):
        if cancel.is_set():
            with guard:
                if not granted.is_set():
                    given_up = True
                    return False
    return True


class ViewLock:
    """This process's use of its copy of the index: queries share it; reloading or closing the
    copy holds it alone. A query never waits: :meth:`shared` yields False while the copy is
    held or wanted alone (the caller scores from the catalog instead), so a reload waits only
    for the queries already running, however many keep coming."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._alone = 0  # threads holding or waiting for it alone
        self._holding = False

    @contextlib.contextmanager
    def shared(self) -> Iterator[bool]:
        """Share the copy for a ``with`` block if nobody holds or waits for it alone; yields
        whether it does (False: do not touch the index)."""
        with self._cond:
            usable = not self._alone
            if usable:
                self._readers += 1
        try:
            yield usable
        finally:
            if usable:
                with self._cond:
                    self._readers -= 1
                    self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the copy alone for a ``with`` block, once the queries running have ended. Not
        re-entrant, and never to be taken inside :meth:`shared`."""
        with self._cond:
            self._alone += 1
            self._cond.wait_for(lambda: self._readers == 0 and not self._holding)
            self._holding = True
        try:
            yield
        finally:
            with self._cond:
                self._holding = False
                self._alone -= 1
                self._cond.notify_all()


def _read_generation(data: bytes) -> int:
    try:
        return int(data.decode("ascii").strip() or 0)
    except ValueError:  # written by an older release (empty) or damaged: any change counts
        return 0


class IndexHolders:
    """``<storage>/index.holders/<pid>``: one file per process that has the index open.

    A file whose process is gone means that process stopped without closing the index (a crash,
    kill -9): its files may be half-written, so the next opener runs the full health check.
    """

    def __init__(self, path: Path) -> None:
        self.dir = path

    def crashed(self) -> list[int]:
        """Pids that held the index and are gone; their markers are removed."""
        if not self.dir.is_dir():
            return []
        dead = []
        for marker in self.dir.iterdir():
            try:
                pid = int(marker.name)
            except ValueError:
                continue
            if pid != os.getpid() and not pid_alive(pid):
                dead.append(pid)
                marker.unlink(missing_ok=True)
        return dead

    def others(self) -> list[int]:
        """Pids of the other live processes that have the index open."""
        if not self.dir.is_dir():
            return []
        pids = []
        for marker in self.dir.iterdir():
            try:
                pid = int(marker.name)
            except ValueError:
                continue
            if pid != os.getpid() and pid_alive(pid):
                pids.append(pid)
        return pids

    def hold(self) -> None:
        self.dir.mkdir(mode=0o700, exist_ok=True)
        (self.dir / str(os.getpid())).touch(mode=0o600)

    def release(self) -> None:
        (self.dir / str(os.getpid())).unlink(missing_ok=True)


__all__ = ["LOCK_POLL_S", "IndexHolders", "IndexLock", "ViewLock", "WaitCancelled"]
