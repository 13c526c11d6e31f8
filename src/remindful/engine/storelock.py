"""How the processes sharing one storage directory stay out of the way of a restore or a clear-all.

A restore replaces the catalog's content wholesale and a clear-all empties it; every other
process (an MCP server, the daemon, hooks, the CLI) may be writing meanwhile. Three ``flock(2)``
locks in the storage directory coordinate them (flock belongs to an open file description, so
two threads of one process exclude each other as two processes do):

- ``store.lock``: every catalog write transaction holds it shared (the Catalog's, a hook's, a
  capture point's spool write); a restore or a clear-all holds it exclusive from its snapshot of
  the current content to the end of the replacement. So no write lands between the two (it would
  be in neither the automatic backup nor the new content) and every write acknowledged after it
  lands in the new content. The file holds the **store generation**, which every exclusive holder
  bumps: a process compares it with the generation its in-memory view of the store was taken at
  (the vector index's, :meth:`remindful.engine.store.Store.follow_replacements`) and takes it
  afresh when it changed: one small read.
- ``store.gate``: a turnstile. flock does not favour a waiting exclusive locker, so writers that
  overlap without pause could starve a restore; a writer passes the gate (shared) to take the
  store lock, and an exclusive locker holds the gate while it waits for the writers inside.
- ``maintenance.lock``: a restore, a clear-all or a reindex holds it for its whole run, so two of
  them never interleave (two restores at once swapped the files under each other). The second
  is refused at once with :class:`~remindful.errors.StorageLockedError` naming the first (what,
  process, since when); the file records them.

A thread that holds the store lock exclusively takes it "shared" as a no-op (its own writes go
through), and holds the maintenance lock re-entrantly. Lock order, to stay free of deadlocks:
the vector-index lock (:class:`remindful.engine.mirror.IndexLock`) before the store lock; no
index lock is ever taken inside a catalog write transaction.

Standard library only, and cheap to import: hook processes take the shared lock around their one
spool write (two ``open``, two ``flock``, two ``close``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time

from remindful.owned import private_file

STORE_LOCK = "store.lock"
GATE = "store.gate"
MAINTENANCE_LOCK = "maintenance.lock"
#: How long an exclusive locker waits for the writers inside before StorageLockedError.
EXCLUSIVE_TIMEOUT_S = 120.0
_POLL_S = 0.01
#: Lock files that cannot be opened or locked here (a read-only directory, a filesystem without
#: locks): the write then goes ahead uncoordinated, as it did before these locks existed; it fails
#: on its own if the directory is read-only.
_UNLOCKABLE = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOLCK, errno.ENOENT, errno.ENOTDIR)

#: Per thread: .exclusive, the store locks it holds exclusively; .shared and .maintenance, {path: depth}.
_held = threading.local()


class StoreLock:
    """The locks of the storage directory ``storage`` (see the module docstring). Holds no file
    open between calls: any number of these may exist for one directory."""

    def __init__(self, storage: str | os.PathLike[str]) -> None:
        root = os.fspath(storage)
        self.path = os.path.join(root, STORE_LOCK)
        self.gate_path = os.path.join(root, GATE)
        self.maintenance_path = os.path.join(root, MAINTENANCE_LOCK)

    # -- writers -------------------------------------------------------------------------------

    def shared(self, *, wait: bool = True) -> _Shared:
        """``with lock.shared():`` around one write transaction: waits while a restore or a
        clear-all holds the store (no timeout: they finish or die, and flock dies with them).
        With ``wait=False`` it raises BlockingIOError instead (a hook or a capture point writes
        its fallback file rather than miss its deadline)."""
        return _Shared(self, wait)

    def generation(self) -> int:
        """The store generation now (0 before the first restore or clear-all); not locked."""
        try:
            with open(self.path, "rb") as fh:
                return _parse(fh.read(32))
        except OSError:
            return 0

    # -- replacing the content -----------------------------------------------------------------

    def exclusive(self, what: str, *, timeout: float = EXCLUSIVE_TIMEOUT_S) -> _Exclusive:
        """``with lock.exclusive("restore"):``: no write transaction of any process runs inside
        the block (each one running when it starts is waited for, up to ``timeout`` seconds, then
        StorageLockedError); the store generation is bumped on the way out, even after an error."""
        return _Exclusive(self, what, timeout)

    def bump(self, what: str) -> None:
        """Bump the store generation: other processes take their view of the store afresh."""
        with self.exclusive(what):
            pass

    def maintenance(self, what: str) -> _Maintenance:
        """``with lock.maintenance("restore"):``: refused at once with StorageLockedError if
        another restore, clear-all or reindex of this store is running (re-entrant in a thread)."""
        return _Maintenance(self, what)


class _Shared:
    def __init__(self, lock: StoreLock, wait: bool) -> None:
        self._lock = lock
        self._wait = wait
        self._fd: int | None = None

    def __enter__(self) -> None:
        depths = _shared_here()
        path = self._lock.path
        if path in _exclusive_here() or depths.get(path):
            # Nested: passing the gate again could wait for an exclusive locker that waits for us.
            depths[path] = depths.get(path, 0) + 1
            return
        self._fd = _lock_shared(self._lock, self._wait)
        depths[path] = 1

    def __exit__(self, *exc: object) -> None:
        depths = _shared_here()
        path = self._lock.path
        depths[path] = depths.get(path, 1) - 1
        if depths[path] <= 0:
            depths.pop(path, None)
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # releases the lock


def _lock_shared(lock: StoreLock, wait: bool) -> int | None:
    """Pass the gate and take the store lock shared; its descriptor (None: not lockable here)."""
    gate = _open(lock.gate_path, os.O_RDONLY)
    if gate is None:
        return None
    fd = None
    how = fcntl.LOCK_SH if wait else fcntl.LOCK_SH | fcntl.LOCK_NB
    try:
        fcntl.flock(gate, how)
        fd = _open(lock.path, os.O_RDONLY)
        if fd is not None:
            fcntl.flock(fd, how)
        return fd
    except BlockingIOError:
        if fd is not None:
            os.close(fd)
        raise BlockingIOError(errno.EAGAIN, "the store is being restored or cleared") from None
    except OSError as exc:
        if fd is not None:
            os.close(fd)
        if exc.errno not in _UNLOCKABLE:
            raise
        return None
    finally:
        os.close(gate)  # the store lock is taken: let the next writer (or the restore) through


class _Exclusive:
    def __init__(self, lock: StoreLock, what: str, timeout: float) -> None:
        self._lock = lock
        self._what = what
        self._timeout = timeout
        self._fds: list[int] = []
        self._reentered = False

    def __enter__(self) -> int:
        held = _exclusive_here()
        if self._lock.path in held:
            self._reentered = True
            return self._lock.generation()
        deadline = time.monotonic() + self._timeout
        try:
            for path in (self._lock.gate_path, self._lock.path):  # the gate first: no writer gets in any more
                fd = private_file(path, os.O_RDWR | os.O_CREAT)
                self._fds.append(fd)
                _flock_until(fd, deadline, self._what, self._timeout)
        except BaseException:
            self._release()
            raise
        held.add(self._lock.path)
        return _parse(os.pread(self._fds[1], 32, 0))

    def __exit__(self, *exc: object) -> None:
        if self._reentered:
            return
        _exclusive_here().discard(self._lock.path)
        fd = self._fds[1]
        try:  # even after an error: the content may have changed half-way
            data = str(_parse(os.pread(fd, 32, 0)) + 1).encode()
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            self._release()

    def _release(self) -> None:
        for fd in reversed(self._fds):
            os.close(fd)
        self._fds.clear()


class _Maintenance:
    def __init__(self, lock: StoreLock, what: str) -> None:
        self._lock = lock
        self._what = what
        self._fd: int | None = None

    def __enter__(self) -> None:
        depths = _maintenance_here()
        path = self._lock.maintenance_path
        if depths.get(path):
            depths[path] += 1
            return
        fd = private_file(path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            from remindful.errors import StorageLockedError

            raise StorageLockedError(
                f"Cannot {self._what} now: {holder} is running on this store",
                suggestion="wait for it to finish, then try again",
            ) from None
        except BaseException:
            os.close(fd)
            raise
        note = f"a {_noun(self._what)} (process {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')})"
        os.pwrite(fd, note.encode(), 0)
        os.ftruncate(fd, len(note.encode()))
        self._fd = fd
        depths[path] = 1

    def __exit__(self, *exc: object) -> None:
        depths = _maintenance_here()
        path = self._lock.maintenance_path
        depths[path] -= 1
        if depths[path] or self._fd is None:
            return
        del depths[path]
        fd, self._fd = self._fd, None
        os.ftruncate(fd, 0)
        os.close(fd)


def _noun(what: str) -> str:
    return {"restore": "restore", "clear all memories": "clear-all", "rebuild the index": "reindex"}.get(what, what)


def _flock_until(fd: int, deadline: float, what: str, timeout: float) -> None:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                from remindful.errors import StorageLockedError

                raise StorageLockedError(
                    f"Cannot {what} now: other processes kept writing to the store for {timeout:.0f} s",
                    suggestion="stop the processes that write to it (the daemon, MCP servers), then try again",
                ) from None
            time.sleep(_POLL_S)


def _open(path: str, flags: int) -> int | None:
    """``path`` opened (created 0600 if missing), or None where it cannot be (see _UNLOCKABLE)."""
    try:
        return private_file(path, flags | os.O_CREAT)
    except OSError as exc:
        if exc.errno in _UNLOCKABLE:
            try:  # a read-only directory: an existing file still locks
                return private_file(path, flags)
            except OSError:
                return None
        raise


def _parse(data: bytes) -> int:
    try:
        return int(data.decode("ascii").strip() or 0)
    except ValueError:
        return 0


def _exclusive_here() -> set[str]:
    held: set[str] | None = getattr(_held, "exclusive", None)
    if held is None:
        held = _held.exclusive = set()
    return held


def _shared_here() -> dict[str, int]:
    depths: dict[str, int] | None = getattr(_held, "shared", None)
    if depths is None:
        depths = _held.shared = {}
    return depths


def _maintenance_here() -> dict[str, int]:
    depths: dict[str, int] | None = getattr(_held, "maintenance", None)
    if depths is None:
        depths = _held.maintenance = {}
    return depths


__all__ = ["EXCLUSIVE_TIMEOUT_S", "GATE", "MAINTENANCE_LOCK", "STORE_LOCK", "StoreLock"]
