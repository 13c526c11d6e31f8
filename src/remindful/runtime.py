"""This process and its peers, standard library only (hook processes import it): the session id
format, and whether a process id is alive."""

from __future__ import annotations

import os
import time


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


__all__ = ["new_session_id", "pid_alive"]
