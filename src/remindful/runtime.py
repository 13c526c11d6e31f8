"""This process and its peers, standard library only (hook processes import it): the session id
format, whether a process id is alive, which process owns a store's daemon role, and the local
channel between the hooks and that daemon.

**The daemon role** belongs to the process holding an exclusive ``flock`` on ``<storage>/daemon.lock``
(:data:`LOCK_FILE`). A lock, unlike a file naming a pid, cannot go stale: the kernel releases it
when its holder dies, whatever kills it. :func:`daemon_running` asks whether anyone holds it;
:func:`claim_daemon_lock` takes it; a hook that takes it passes the descriptor to the daemon it
starts (:func:`adopt_daemon_lock`), so that no second hook starts another meanwhile.

**The local channel** is a Unix socket, ``<storage>/daemon.sock`` (:data:`SOCKET_NAME`), inside the
storage directory (0700). One JSON object a line each way: the hook sends a request, the daemon
answers it and closes. Nothing is sent before the peer is proven to be this user's own process:
the socket file must be a socket owned by this user, and the kernel's word on the listening process
(``SO_PEERCRED``) must name this user's uid; the daemon checks its clients the same way. No token is
needed or sent, and a stale socket file (its daemon killed) refuses connections, which another
user cannot take over: they cannot create files in the directory, and if they could, the checks
above would refuse them. The daemon's loopback HTTP port (``daemon.json``, for the dashboard) is
never used by a hook.
"""

from __future__ import annotations

import json
import os
import time

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    import socket
    from collections.abc import Iterator
    from typing import IO, Any

#: The file in the storage directory where the process running the daemon's HTTP role writes its
#: port and pid (for people and the dashboard; hooks never read it), removed when it stops.
DAEMON_FILE = "daemon.json"
#: The file whose exclusive flock makes a process the store's daemon.
LOCK_FILE = "daemon.lock"
#: The daemon's Unix socket in the storage directory.
SOCKET_NAME = "daemon.sock"
#: The largest request or answer on the local channel, in bytes.
MAX_MESSAGE = 4_000_000
#: Longest path ``bind``/``connect`` take for a Unix socket (108 bytes with the NUL on Linux);
#: a longer one is reached through ``/proc/self/fd`` of its open directory.
_SUN_PATH_MAX = 107

#: Files this process must remove when it exits (its daemon's endpoints), whatever ends it:
#: :func:`remove_endpoints` runs at a clean stop, at exit and from :func:`exit_on_signals`'s handler.
ENDPOINTS: list[str] = []

#: The daemon locks this process holds: storage directory (real path) → descriptor.
_HELD: dict[str, int] = {}


def new_session_id() -> str:
    """A new session id: ``session_YYYYmmdd_HHMMSS_xxxx`` (UTC time, 4 random hex digits)."""
    return time.strftime("session_%Y%m%d_%H%M%S_", time.gmtime()) + os.urandom(2).hex()


#: The longest session id any surface takes (a client's ids are UUIDs or names: a few dozen characters).
SESSION_ID_MAX_CHARS = 256


def fit_session_id(session_id: str) -> str:
    """``session_id`` if it is at most :data:`SESSION_ID_MAX_CHARS` long, else ``long-session~``
    and 32 hex digits of its SHA-256: what a hook stores rather than lose the event (two long ids
    that differ anywhere stay two sessions; one id always maps to the same). None of the long id's
    characters are kept: a cut could keep half of a secret no rule then recognises, and every
    surface (the hook's spool, its context request) must map one id the same way without a
    redactor at hand."""
    if len(session_id) <= SESSION_ID_MAX_CHARS:
        return session_id
    try:  # the built-in module: hashlib would load OpenSSL, which costs hook processes milliseconds
        from _sha256 import sha256
    except ImportError:  # pragma: no cover - other Python builds
        from hashlib import sha256
    digest = sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"long-session~{digest}"


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs (another user's process counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


# -- the daemon lock --------------------------------------------------------------------------------


def _key(storage: str | os.PathLike[str]) -> str:
    return os.path.realpath(storage)


def claim_daemon_lock(storage: str | os.PathLike[str]) -> int | None:
    """Take the daemon lock of the store in ``storage``: its descriptor (the caller holds the role
    until it closes it, or until every process it passed the descriptor to has), or None if
    another holder has it, or the lock file cannot be opened (a read-only store). A lock file that
    is a link or another user's is refused (:class:`~remindful.errors.UntrustedPathError`: one
    holding it would keep every daemon from starting); the storage directory is this user's alone
    (0700, :func:`remindful.owned.private_dir`), so no other user can open it to hold it."""
    from remindful.owned import private_file

    try:
        fd = private_file(os.path.join(storage, LOCK_FILE), os.O_RDWR | os.O_CREAT)
    except OSError:
        return None
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def adopt_daemon_lock(storage: str | os.PathLike[str], fd: int) -> bool:
    """Whether the inherited descriptor ``fd`` is the daemon lock of ``storage`` and holds it (the
    hook that started this process took it); if so this process now holds the role."""
    try:
        import fcntl

        mine, lock = os.fstat(fd), os.stat(os.path.join(storage, LOCK_FILE))
        if (mine.st_dev, mine.st_ino) != (lock.st_dev, lock.st_ino):
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # already ours: this only confirms it
    except OSError:
        return False
    os.set_inheritable(fd, False)
    _HELD[_key(storage)] = fd
    return True


def hold_daemon_lock(storage: str | os.PathLike[str]) -> int | None:
    """Take the daemon role for ``storage`` in this process (:func:`claim_daemon_lock`): the
    descriptor to give to :func:`release_daemon_lock`, or None if another holder has it (another
    process, or another owner in this one)."""
    fd = claim_daemon_lock(storage)
    if fd is not None:
        _HELD[_key(storage)] = fd
    return fd


def release_daemon_lock(storage: str | os.PathLike[str], fd: int) -> None:
    """Give up the daemon role for ``storage`` held through ``fd``."""
    if _HELD.get(_key(storage)) == fd:
        del _HELD[_key(storage)]
    os.close(fd)


def daemon_running(storage: str | os.PathLike[str]) -> bool:
    """Whether another process holds the daemon role for the store in ``storage`` (then it drains
    the spool within ``daemon.poll_interval_ms``). Never stale: a dead holder holds nothing."""
    if _key(storage) in _HELD:
        return False
    try:
        fd = os.open(os.path.join(storage, LOCK_FILE), os.O_RDONLY)
    except OSError:
        return False  # no lock file: no daemon has ever run here
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # a lock we took goes with the descriptor
    return False


def daemon_elsewhere(storage: str | os.PathLike[str]) -> bool:
    """Whether another live process runs the daemon's roles for the store in ``storage``
    (:func:`daemon_running`)."""
    return daemon_running(storage)


# -- the start back-off ------------------------------------------------------------------------------

#: The file in the storage directory that records the hooks' last start of the daemon: ``{"at": time,
#: "tries": starts since a daemon last came up}``.
START_STAMP = "daemon.started"
#: A hook starts the store's daemon at most once in this many seconds ...
START_GAP_S = 2.0
#: ... doubled at each start after which no daemon came up (a broken installation, a crash at
#: start), up to this: a crash loop costs one failed process per half minute, not one per hook.
START_BACKOFF_MAX_S = 30.0


def _read_stamp(storage: str | os.PathLike[str]) -> tuple[float, int] | None:
    try:
        with open(os.path.join(storage, START_STAMP), "rb") as f:
            data = json.loads(f.read(4096) or b"null")
        return float(data["at"]), int(data["tries"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError):  # an older version's empty stamp: its mtime
        try:
            return os.stat(os.path.join(storage, START_STAMP)).st_mtime, 1
        except OSError:
            return None


def _write_stamp(storage: str | os.PathLike[str], at: float, tries: int) -> None:
    path = os.path.join(storage, START_STAMP)
    temp = f"{path}.{os.getpid()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps({"at": at, "tries": tries}).encode())
    finally:
        os.close(fd)
    os.replace(temp, path)


def start_backoff_s(storage: str | os.PathLike[str], now: float | None = None) -> float:
    """Seconds a hook must still wait before it starts the daemon of ``storage`` (0: start it now):
    :data:`START_GAP_S` after the last start, doubled for each start since which no daemon came up
    (:func:`note_ready`), at most :data:`START_BACKOFF_MAX_S`. A daemon that ran and was killed
    (kill -9, a reboot) is restarted by the next hook: stored events wait seconds, not half a minute."""
    stamp = _read_stamp(storage)
    if stamp is None:
        return 0.0
    at, tries = stamp
    delay = min(START_BACKOFF_MAX_S, START_GAP_S * 2 ** max(0, min(tries, 16) - 1))
    return max(0.0, at + delay - (time.time() if now is None else now))


def note_start(storage: str | os.PathLike[str], now: float | None = None) -> None:
    """A hook starts the daemon now (one more start since a daemon last came up). Raises OSError."""
    stamp = _read_stamp(storage)
    _write_stamp(storage, time.time() if now is None else now, (stamp[1] if stamp else 0) + 1)


def note_ready(storage: str | os.PathLike[str]) -> None:
    """The daemon of ``storage`` is up (it answers the hooks): the back-off starts again from
    :data:`START_GAP_S`. Never raises."""
    stamp = _read_stamp(storage)
    if stamp is None or stamp[1] == 0:
        return
    try:  # noqa: SIM105 - contextlib is one more import for hook processes
        _write_stamp(storage, stamp[0], 0)
    except OSError:
        pass


# -- the local channel ------------------------------------------------------------------------------


class _Address:
    """The socket's path as ``bind``/``connect`` take it: as is when short enough, else through
    ``/proc/self/fd/N`` of the storage directory opened for the call (closed by :meth:`close`)."""

    def __init__(self, storage: str | os.PathLike[str]) -> None:
        self.path = os.path.join(storage, SOCKET_NAME)
        self.fd: int | None = None
        self.address = self.path
        if len(os.fsencode(self.path)) > _SUN_PATH_MAX:
            if not hasattr(os, "O_PATH") or not os.path.isdir("/proc/self/fd"):
                raise OSError(f"{self.path}: too long for a Unix socket address on this system")
            self.fd = os.open(storage, os.O_PATH | os.O_DIRECTORY)
            self.address = f"/proc/self/fd/{self.fd}/{SOCKET_NAME}"

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a connected Unix socket, as the kernel records
    it (``SO_PEERCRED``), or None where it cannot be known."""
    import socket
    import struct

    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    except OSError:
        return None
    return int(struct.unpack("3i", creds)[1])


def listen(storage: str | os.PathLike[str]) -> socket.socket:
    """The daemon's listening socket at ``<storage>/daemon.sock`` (mode 0600), replacing a stale
    one. Only the holder of the daemon lock may call this. Raises OSError."""
    import socket

    where = _Address(storage)
    try:
        try:  # noqa: SIM105 - contextlib is one more import for hook processes
            os.unlink(where.path)  # a dead daemon's: ours to replace, we hold the role
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old = os.umask(0o177)
            try:
                sock.bind(where.address)
            finally:
                os.umask(old)
            os.chmod(where.path, 0o600)
            sock.listen(64)
        except BaseException:
            sock.close()
            raise
    finally:
        where.close()
    if where.path not in ENDPOINTS:
        ENDPOINTS.append(where.path)
    return sock


def _trusted_socket_file(path: str) -> bool:
    import stat

    try:
        found = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISSOCK(found.st_mode) and found.st_uid == os.getuid()


def ask_daemon(storage: str | os.PathLike[str], request: dict[str, Any], timeout: float = 2.0) -> dict[str, Any] | None:
    """The store's daemon's answer to ``request`` on the local channel, or None when no daemon
    of this user answers within ``timeout`` seconds (none runs, it is still starting, the socket
    is not this user's, or the answer is not a JSON object). Nothing is sent to an unproven peer."""
    import socket

    try:
        where = _Address(storage)
    except OSError:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if not _trusted_socket_file(where.path):
            return None
        sock.settimeout(timeout)
        sock.connect(where.address)
        if peer_uid(sock) != os.getuid():
            return None  # not our daemon: it gets nothing, and is told nothing
        sock.sendall(json.dumps(request, ensure_ascii=False).encode("utf-8") + b"\n")
        data = _read_line(sock, MAX_MESSAGE)
        answer = json.loads(data) if data else None
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        sock.close()
        where.close()
    return answer if isinstance(answer, dict) else None


def _read_line(sock: socket.socket, limit: int) -> bytes:
    """Bytes up to the first newline (without it), at most ``limit``; ValueError past that."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        newline = chunk.find(b"\n")
        if newline >= 0:
            chunks.append(chunk[:newline])
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise ValueError("answer too large")
    return b"".join(chunks)


# -- endpoints at exit ------------------------------------------------------------------------------


def remove_endpoints() -> None:
    """Remove the endpoint files this process created (:data:`ENDPOINTS`); never raises."""
    while ENDPOINTS:
        path = ENDPOINTS.pop()
        try:  # noqa: SIM105 - contextlib is one more import for hook processes
            os.unlink(path)
        except OSError:
            pass


def exit_on_signals() -> None:
    """Make SIGTERM and SIGHUP end this process as SIGINT does, cleanly: the endpoint files go at
    once, then SystemExit(0) unwinds the main thread (exit handlers run). Call from the main thread
    of a process that may own a daemon role (``remindful serve``); a handler already installed
    (uvicorn's, while it runs) is left alone until it is restored.

    A SIGHUP this process was started with ignored stays ignored: ``nohup remindful serve`` outlives
    its terminal, as ``nohup remindful daemon`` does (:func:`remindful.daemon.run_daemon` follows
    the same rule). SIGTERM, the request to stop, always stops."""
    import signal

    def stop(signum: int, frame: Any) -> None:
        remove_endpoints()
        raise SystemExit(0)

    for signum, replaced in (
        (signal.SIGTERM, (signal.SIG_DFL, signal.SIG_IGN, None)),
        (signal.SIGHUP, (signal.SIG_DFL, None)),
    ):
        if signal.getsignal(signum) in replaced:
            signal.signal(signum, stop)


def lines_waking_for_signals(source: IO[bytes]) -> Iterator[bytes]:
    """The lines of ``source`` (each with its newline; the last may lack it) until its end, read
    so that a signal wakes the wait whichever thread the kernel gives it to.

    The kernel gives a process's signal to any of its threads that does not block it, and Python
    runs the handler in the main thread once that thread is back in Python code; a main thread
    blocked in a read of a pipe got there only when the signal was given to it (``serve`` was
    still running 60 s after a SIGHUP: 1 start in 5 here). Here the main thread waits in
    ``select`` on ``source`` and a wake-up pipe that the signal module writes to from any thread.
    (Only the main thread may set the wake-up pipe; another thread's wait is on ``source`` alone.)
    The caller is the only reader of ``source``: its descriptor is read directly. A source without
    one (``io.BytesIO``) is read line by line."""
    import select
    import signal

    try:
        fd = source.fileno()
    except (AttributeError, OSError, ValueError):  # io.BytesIO and the like: nothing to wait for
        yield from iter(source.readline, b"")
        return
    wake, woken = os.pipe()
    for end in (wake, woken):
        os.set_blocking(end, False)
    try:
        before: int | None = signal.set_wakeup_fd(woken, warn_on_full_buffer=False)
    except ValueError:  # not the main thread
        before = None
    pending = bytearray()
    try:
        while True:
            ready = select.select([fd, wake], [], [])[0]
            if wake in ready:
                try:
                    while os.read(wake, 512):  # emptied: BlockingIOError
                        pass
                except BlockingIOError:
                    pass
            if fd not in ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                if pending:
                    yield bytes(pending)
                return
            searched = len(pending)  # no newline before: the chunk's are the first
            pending += chunk
            end = pending.find(b"\n", searched)
            while end >= 0:
                line = bytes(pending[: end + 1])
                del pending[: end + 1]
                yield line
                end = pending.find(b"\n")
    finally:
        if before is not None:
            try:  # noqa: SIM105 - contextlib is one more import for hook processes
                signal.set_wakeup_fd(before)
            except ValueError:  # closed by the collector in another thread: the process is ending
                pass
        os.close(wake)
        os.close(woken)


__all__ = [
    "DAEMON_FILE",
    "ENDPOINTS",
    "LOCK_FILE",
    "MAX_MESSAGE",
    "SESSION_ID_MAX_CHARS",
    "SOCKET_NAME",
    "START_BACKOFF_MAX_S",
    "START_GAP_S",
    "START_STAMP",
    "adopt_daemon_lock",
    "ask_daemon",
    "claim_daemon_lock",
    "daemon_elsewhere",
    "daemon_running",
    "exit_on_signals",
    "fit_session_id",
    "hold_daemon_lock",
    "lines_waking_for_signals",
    "listen",
    "new_session_id",
    "note_ready",
    "note_start",
    "peer_uid",
    "pid_alive",
    "release_daemon_lock",
    "remove_endpoints",
    "start_backoff_s",
]
