"""The id under which a caller's session id is stored, for one catalog (either backend).

A session id is written mapped (:meth:`~remindful.engine.redact.StoreRedactor.session_id`: itself,
unless it carries a secret), and the mapping is idempotent: a stored id maps to itself. So an id
the catalog has recorded (a session row, or a memory of that session) is its own stored id, and
finding it there needs no secret detector. Loading detect-secrets' rules costs a process
0.15-0.25 s (its imports and ~80 regular expressions): a reader's first session filter (``search
--session``, ``list``) paid that on the command line, and a serving process on its first such
search. An id not recorded goes through the mapping. Answers are remembered (the mapping is
fixed for a process), at most ``KEPT`` ids.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from remindful.errors import RemindfulError
from remindful.runtime import SESSION_ID_MAX_CHARS

__all__ = ["KEPT", "SESSION_RECORDED", "StoredSessionIds"]

log = logging.getLogger(__name__)

#: Session ids whose stored id is remembered, per catalog.
KEPT = 4096
#: Whether an id is a stored session id (both parameters: the id), in the dialect both catalogs
#: take; two primary-key or index lookups.
SESSION_RECORDED = (
    "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?) OR EXISTS (SELECT 1 FROM memories WHERE session_id = ?)"
)


class StoredSessionIds:
    """``ids(session_id)``: the stored id of ``session_id``. ``recorded(id)`` says whether the
    catalog holds that id (one indexed read); ``mapped(id)`` is the redactor's mapping, which also
    refuses an id that is too long."""

    def __init__(self, recorded: Callable[[str], bool], mapped: Callable[[str], str]) -> None:
        self._recorded = recorded
        self._mapped = mapped
        self._lock = threading.Lock()
        self._known: dict[str, str] = {}

    def __call__(self, session_id: str) -> str:
        stored = self._known.get(session_id)
        if stored is not None:
            return stored
        stored = session_id if self._holds(session_id) else self._mapped(session_id)
        with self._lock:
            if len(self._known) >= KEPT:
                self._known.pop(next(iter(self._known)))
            self._known[session_id] = stored
        return stored

    def _holds(self, session_id: str) -> bool:
        if not session_id or len(session_id) > SESSION_ID_MAX_CHARS:
            return False  # the mapping refuses an id too long; an empty one is never recorded
        try:
            return self._recorded(session_id)
        except RemindfulError as exc:  # the mapping answers as well, only slower
            log.debug("session %r not looked up (%s); mapped instead", session_id, exc)
            return False
