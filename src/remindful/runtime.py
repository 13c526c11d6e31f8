"""This process and its peers, standard library only (hook processes import it): the session id
format, whether a process id is alive, and whether another process runs a store's daemon."""

from __future__ import annotations

import json
import os
import time

#: The file in the storage directory where the process running the daemon's roles writes its port
#: and pid (:mod:`remindful.daemon`), removed when it stops cleanly.
DAEMON_FILE = "daemon.json"


def new_session_id() -> str:
    """A new session id: ``session_YYYYmmdd_HHMMSS_xxxx`` (UTC time, 4 random hex digits)."""
    return time.strftime("session_%Y%m%d_%H%M%S_", time.gmtime()) + os.urandom(2).hex()


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs (another user's process counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def daemon_elsewhere(storage: str | os.PathLike[str]) -> bool:
    """Whether another live process runs the daemon's roles for the store in ``storage`` (then it
    drains the spool, within ``daemon.poll_interval_ms``)."""
    try:
        with open(os.path.join(storage, DAEMON_FILE), encoding="utf-8") as f:
            pid = int(json.load(f)["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return pid != os.getpid() and pid_alive(pid)


__all__ = ["DAEMON_FILE", "daemon_elsewhere", "new_session_id", "pid_alive"]
